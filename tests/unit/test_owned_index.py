"""The owner index (:mod:`deepseek_operator.actions.owned`): whose each watched object is, and
which owners a listing or an event changes."""

from __future__ import annotations

from typing import Any

from deepseek_operator.actions.children import reduced_statefulset
from deepseek_operator.actions.owned import POD, STATEFULSET, WORKLOAD, OwnedIndex, owner_of
from deepseek_operator.names import LWS_NAME_LABEL


def test_the_statefulset_store_follows_its_leaderworkerset_by_name() -> None:
    def sts(name: str, lws: str, rv: int) -> dict[str, Any]:
        meta = {"name": name, "namespace": "llm", "resourceVersion": str(rv),
                "labels": {LWS_NAME_LABEL: lws, "other": "x"}, "managedFields": [{}]}  # fmt: skip
        return reduced_statefulset({"metadata": meta, "spec": {"replicas": 2, "template": {}}})

    index = OwnedIndex()

    def listed(snapshot: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
        return index.replace(
            lambda key: True,
            {(STATEFULSET, k): (owner_of(STATEFULSET, k, b), b) for k, b in snapshot.items()},
        )

    def seen(key: str, body: dict[str, Any] | None) -> set[tuple[str, str]]:
        return index.put((STATEFULSET, key), owner_of(STATEFULSET, key, body), body)

    assert listed({"llm/a-0": sts("a-0", "a", 1), "llm/b-0": sts("b-0", "b", 1)}) == {
        ("llm", "a"), ("llm", "b"),
    }  # fmt: skip
    kept = list(index.of_kind(("llm", "a"), STATEFULSET).values())
    assert kept == [sts("a-0", "a", 1)] and "managedFields" not in kept[0]["metadata"]
    assert kept[0]["spec"] == {"replicas": 2}
    assert seen("llm/a-1", sts("a-1", "a", 2)) == {("llm", "a")}
    assert len(index.of_kind(("llm", "a"), STATEFULSET)) == 2
    assert seen("llm/a-0", None) == {("llm", "a")}
    assert [s["metadata"]["name"] for s in index.of_kind(("llm", "a"), STATEFULSET).values()] == [
        "a-1"
    ]
    # A StatefulSet relabelled to another LeaderWorkerSet moves: both are told.
    assert seen("llm/a-1", sts("a-1", "b", 3)) == {("llm", "a"), ("llm", "b")}
    assert seen("llm/a-1", sts("a-1", "a", 2)) == {("llm", "a"), ("llm", "b")}
    relisted = {"llm/a-1": sts("a-1", "a", 2), "llm/b-0": sts("b-0", "b", 5)}
    assert listed(relisted) == {("llm", "b")}


def test_one_owner_index_keeps_children_apart_from_what_is_only_watched() -> None:
    index = OwnedIndex()
    owner = ("llm", "a")
    index.put(("Deployment", "llm/a"), owner, {"kind": "Deployment"})
    index.put((STATEFULSET, "llm/a"), owner, {"kind": "StatefulSet"})
    index.put((POD, "llm/a-0"), owner, "pod record")
    index.put((WORKLOAD, "llm/w"), ("llm", "b"), "workload record")
    # The reconciler's children are only what we write; the rest is read by kind.
    assert index.children(owner) == {("Deployment", "a"): {"kind": "Deployment"}}
    assert index.of_kind(owner, POD) == {"llm/a-0": "pod record"}
    assert index.owners_with(WORKLOAD) == [("llm", "b")]
    assert len(index) == 4 and set(index.by_owner) == {owner, ("llm", "b")}
