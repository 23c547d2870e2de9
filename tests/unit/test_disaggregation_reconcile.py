"""The reconciler on a disaggregated DeepSeekServing (recording fake API, real plan and actions):
both pools written at once, the status per role, one decision Event per role, the Event that
says which pool a change rolls, and no child at all while a name of the pair is taken."""

from __future__ import annotations

import asyncio
import copy
import pathlib
from typing import Any

import yaml

from deepseek_operator.controller.reconcile import Reconciler
from deepseek_operator.nodes.facts import build_inventory
from tests.unit.test_reconciler import FakeKube

ROOT = pathlib.Path(__file__).resolve().parents[2]
PD = yaml.safe_load((ROOT / "examples/dsv41-flash-1p1d-gb200.yaml").read_text())
NODES = yaml.safe_load((ROOT / "examples/nodes-gb200.yaml").read_text())["items"]


class KeepingKube(FakeKube):
    """A FakeKube that also keeps what it applied, as the watches would show it."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    async def apply(self, obj: Any, only_if_ours: str | None = None) -> dict[str, Any]:
        out = await super().apply(obj, only_if_ours)
        self.objects[(out["kind"], out["metadata"]["name"])] = out
        return out


def _body(generation: int = 1) -> dict[str, Any]:
    body = copy.deepcopy(PD)
    body["metadata"] = {
        "name": "pd",
        "namespace": "llm",
        "generation": generation,
        "uid": "uid-pd",
        "resourceVersion": str(10 + generation),
    }
    return body


def _run(rec: Reconciler, body: dict[str, Any], live: dict[Any, Any]) -> Any:
    inv = build_inventory(NODES)
    return asyncio.run(
        rec.reconcile(("llm", "pd"), lambda: body, lambda: inv, lambda: live, "test")
    )


def _owned(kube: KeepingKube) -> dict[tuple[str, str], dict[str, Any]]:
    owner = [{"kind": "DeepSeekServing", "name": "pd", "uid": "uid-pd", "controller": True}]
    out = {}
    for key, obj in kube.objects.items():
        obj = copy.deepcopy(obj)
        obj["metadata"]["ownerReferences"] = owner
        out[key] = obj
    return out


def test_both_pools_are_written_and_each_role_reports_its_decision() -> None:
    kube = KeepingKube()
    events: list[tuple[str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((r, m)))  # type: ignore[arg-type]
    _run(rec, _body(), {})
    assert sorted(c[1] for c in kube.calls if c[0] == "apply") == [
        "Deployment/pd-api",  # the router
        "Deployment/pd-decode",
        "Deployment/pd-prefill",
        "NetworkPolicy/pd-api",
        "NetworkPolicy/pd-decode-engines",
        "NetworkPolicy/pd-prefill-engines",
        "Role/pd-api",
        "RoleBinding/pd-api",
        "Service/pd-api",
        "Service/pd-decode-api",
        "Service/pd-prefill-api",
        "ServiceAccount/pd-api",
    ]
    status = kube.statuses[-1]
    assert [r["role"] for r in status["roles"]] == ["prefill", "decode"]
    assert {r["role"]: r["resolved"]["moeBackend"] for r in status["roles"]} == {
        "prefill": "deep_gemm_mega_moe",
        "decode": "deep_gemm_mega_moe",
    }
    decided = [m for r, m in events if r == "BackendResolved"]
    assert [m.split(":")[0] for m in decided] == ["prefill", "decode"]


def test_a_decode_backend_edit_says_only_the_decode_pool_rolls() -> None:
    kube = KeepingKube()
    events: list[tuple[str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((r, m)))  # type: ignore[arg-type]
    first = _body()
    _run(rec, first, {})
    edited = _body(generation=2)
    edited["status"] = kube.statuses[-1]
    next(r for r in edited["spec"]["disaggregation"]["roles"] if r["role"] == "decode")[
        "moeBackend"
    ] = "flashinfer_trtllm"
    events.clear()
    _run(rec, edited, _owned(kube))
    rolling = [m for r, m in events if r == "RollingPools"]
    assert rolling == [
        "the spec change alters the pod template of decode: rolling the decode pool only"
    ]
    changed = [m for r, m in events if r in ("BackendResolved", "BackendUnrunnable")]
    assert changed and all(m.startswith("decode: ") for m in changed)


def test_a_taken_name_holds_the_whole_pair_and_the_status_names_the_object() -> None:
    # Serving "pd-prefill" (created before admission refused the name) owns Deployment
    # "pd-prefill": serving "pd" must start neither role, not its decode pool alone.
    kube = KeepingKube()
    other = [{"kind": "DeepSeekServing", "name": "pd-prefill", "uid": "uid-x", "controller": True}]
    kube.existing["Deployment/pd-prefill"] = {
        "kind": "Deployment",
        "metadata": {"name": "pd-prefill", "ownerReferences": other},
    }
    events: list[tuple[str, str]] = []
    rec = Reconciler(kube, post_event=lambda body, t, r, m: events.append((r, m)))  # type: ignore[arg-type]
    outcome = _run(rec, _body(), {})
    assert [c for c in kube.calls if c[0] in ("apply", "delete")] == []
    assert ("read", "Deployment/pd-decode") in kube.calls  # every unseen name was asked
    applied = next(c for c in kube.statuses[-1]["conditions"] if c["type"] == "WorkloadApplied")
    assert (applied["status"], applied["reason"]) == ("False", "ForeignObjectInTheWay")
    assert applied["message"].startswith("Deployment/pd-prefill already exists and belongs to ")
    assert "the pair is held: neither role is written" in applied["message"]
    assert outcome.foreign and any(r == "ForeignObjectInTheWay" for r, _ in events)

    # The object goes away: the next reconcile writes both roles.
    del kube.existing["Deployment/pd-prefill"]
    body = _body()
    body["status"] = kube.statuses[-1]
    _run(rec, body, {})
    assert {"Deployment/pd-prefill", "Deployment/pd-decode"} <= {
        c[1] for c in kube.calls if c[0] == "apply"
    }
