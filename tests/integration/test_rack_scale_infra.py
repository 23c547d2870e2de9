"""The rack-scale test infrastructure itself, before any operator code uses it.

* The real LeaderWorkerSet controller (built from the Go module proxy, webhooks on loopback)
  creates leader and worker pods for a hand-written LeaderWorkerSet on kwok GB200 trays, and
  recreates the whole group when one of its pods is deleted (``RecreateGroupOnPodRestart``).
* Per-group pod affinity over LWS's ``group-key`` label (``matchLabelKeys``) keeps each group in
  one NVLink clique while several groups share a clique (LWS's ``exclusive-topology`` would give
  each group a whole clique: one DEP8 group per 18-tray NVL72 rack).
* The ComputeDomain driver surface (CRD, DeviceClasses, per-tray ResourceSlices): the real
  kube-scheduler allocates each pod's IMEX channel claim on the tray it binds the pod to, and the
  garbage collector removes claims and templates after their owners.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.k8s.cluster import ControlPlane, unique_name, wait_for
from tests.k8s.dra import CD_GROUP, CD_VERSION, CHANNEL_CLASS, DRIVER, ComputeDomainDriver
from tests.k8s.lws import LWS_GROUP
from tests.racks import GFD_CLIQUE, RACK_A, RACK_B, two_racks

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
RACK_LABEL = "test.deepseek-operator.io/rack-set"


def _tray_pod_spec(rack_set: str, claim_template: str | None = None) -> dict[str, Any]:
    """A pod that takes a whole GB200 tray (4 GPUs) of this test's trays only."""
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "registry.invalid/vllm:placeholder",
        "resources": {"limits": {"nvidia.com/gpu": "4"}},
    }
    spec: dict[str, Any] = {
        "nodeSelector": {RACK_LABEL: rack_set, "nvidia.com/gpu.product": "NVIDIA-GB200"},
        "containers": [container],
    }
    if claim_template is not None:
        spec["resourceClaims"] = [{"name": "imex", "resourceClaimTemplateName": claim_template}]
        container["resources"]["claims"] = [{"name": "imex"}]
    return spec


def _group_affinity(lws: str) -> dict[str, Any]:
    """Every pod of a group in one clique; groups spread over cliques, not exclusive.

    Required: pod affinity to the pods of the SAME group (``matchLabelKeys`` adds the pod's own
    ``group-key``, which LWS's webhook sets at creation) with the clique as topology key. Preferred:
    anti-affinity to pods of OTHER groups (``mismatchLabelKeys``), so a new group's leader picks a
    clique no other group uses yet when there is one.
    """
    same_set = {"matchLabels": {LWS_NAME_LABEL: lws}}
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": same_set,
                    "matchLabelKeys": [GROUP_KEY_LABEL],
                    "topologyKey": GFD_CLIQUE,
                }
            ]
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": same_set,
                        "mismatchLabelKeys": [GROUP_KEY_LABEL],
                        "topologyKey": GFD_CLIQUE,
                    },
                }
            ]
        },
    }


def _lws(name: str, rack_set: str, *, replicas: int, size: int) -> dict[str, Any]:
    spec = _tray_pod_spec(rack_set)
    spec["affinity"] = _group_affinity(name)
    return {
        "apiVersion": f"{LWS_GROUP}/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {"spec": spec},
            },
        },
    }


def _racks(node_factory: Callable[..., list[Any]], prefix: str) -> tuple[str, list[Any]]:
    rack_set = unique_name(prefix)
    nodes = two_racks(rack_set)
    for node in nodes:
        node["metadata"]["labels"][RACK_LABEL] = rack_set
    return rack_set, node_factory(*nodes)


def _pods(cp: ControlPlane, namespace: str, lws: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json(
        "get", "pods", "-n", namespace, "-l", f"{LWS_NAME_LABEL}={lws}"
    )["items"]
    return items


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _clique_of(cp: ControlPlane, node_name: str) -> str | None:
    labels = cp.kubectl_json("get", "node", node_name)["metadata"]["labels"]
    value: str | None = labels.get(GFD_CLIQUE)
    return value


@pytest.mark.e2e
def test_lws_groups_each_stay_in_one_clique_and_the_fifth_pends(
    lws_cluster: ControlPlane, namespace: str, node_factory: Callable[..., list[Any]]
) -> None:
    cp = lws_cluster
    rack_set, _ = _racks(node_factory, "lws-place")
    name = "dep8"
    cp.apply(_lws(name, rack_set, replicas=2, size=2), "-n", namespace)

    def groups_running(count: int) -> Callable[[], list[dict[str, Any]] | None]:
        def running() -> list[dict[str, Any]] | None:
            pods = _running(_pods(cp, namespace, name))
            return pods if len(pods) == 2 * count else None

        return running

    pods = wait_for(groups_running(2), timeout=120, what="2 LWS groups of 2 Running pods")
    by_name = {p["metadata"]["name"]: p for p in pods}
    # The controller's naming: leader <lws>-<group>, worker <lws>-<group>-<worker index>.
    assert sorted(by_name) == [f"{name}-0", f"{name}-0-1", f"{name}-1", f"{name}-1-1"]
    assert by_name[f"{name}-0-1"]["metadata"]["labels"][WORKER_INDEX_LABEL] == "1"
    assert by_name[f"{name}-1"]["metadata"]["labels"][GROUP_INDEX_LABEL] == "1"
    # The second group's leader preferred the clique the first group does not use.
    assert set(_group_cliques(cp, pods).values()) == {RACK_A.key, RACK_B.key}

    # Not exclusive: two more groups fit (two trays left in each clique), each in one clique.
    cp.kubectl("scale", f"leaderworkerset/{name}", "--replicas=4", "-n", namespace)
    pods = wait_for(groups_running(4), timeout=120, what="4 LWS groups Running")
    cliques = _group_cliques(cp, pods)
    assert sorted(cliques.values()) == sorted([RACK_A.key, RACK_B.key] * 2)
    assert not any(p["spec"]["nodeName"].endswith("-pending") for p in pods)

    # A fifth group has no free tray in any clique (the fabric-pending tray has no clique label,
    # so the clique affinity rules it out): its leader stays Pending, unschedulable.
    cp.kubectl("scale", f"leaderworkerset/{name}", "--replicas=5", "-n", namespace)

    def fifth_leader_unschedulable() -> bool:
        pod = cp.kubectl_json("get", "pod", f"{name}-4", "-n", namespace)
        return not pod["spec"].get("nodeName") and any(
            c.get("reason") == "Unschedulable" for c in pod["status"].get("conditions", [])
        )

    wait_for(fifth_leader_unschedulable, timeout=60, what="fifth LWS leader Unschedulable")


def _group_cliques(cp: ControlPlane, pods: list[dict[str, Any]]) -> dict[str, str | None]:
    """The one clique of each group (asserting no group straddles two)."""
    out: dict[str, str | None] = {}
    groups = {p["metadata"]["labels"][GROUP_INDEX_LABEL] for p in pods}
    for group in sorted(groups):
        members = [p for p in pods if p["metadata"]["labels"][GROUP_INDEX_LABEL] == group]
        cliques = {_clique_of(cp, p["spec"]["nodeName"]) for p in members}
        assert len(cliques) == 1, f"group {group} straddles cliques {cliques}"
        out[group] = cliques.pop()
    return out


@pytest.mark.e2e
def test_deleting_a_worker_recreates_its_whole_group(
    lws_cluster: ControlPlane, namespace: str, node_factory: Callable[..., list[Any]]
) -> None:
    cp = lws_cluster
    rack_set, _ = _racks(node_factory, "lws-restart")
    name = "grp"
    cp.apply(_lws(name, rack_set, replicas=1, size=2), "-n", namespace)
    before = wait_for(
        lambda: (p := _running(_pods(cp, namespace, name))) and len(p) == 2 and p,
        timeout=120,
        what="one LWS group Running",
    )
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in before}
    assert set(uids) == {f"{name}-0", f"{name}-0-1"}

    cp.kubectl("delete", "pod", f"{name}-0-1", "-n", namespace, "--wait=false")

    def group_recreated() -> bool:
        pods = _running(_pods(cp, namespace, name))
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        return set(now) == set(uids) and all(now[n] != uids[n] for n in uids)

    # Not only the deleted worker: the leader (untouched by the test) is new as well.
    wait_for(group_recreated, timeout=120, what="leader and worker both recreated")


@pytest.mark.e2e
def test_compute_domain_channel_claims_are_allocated_by_the_scheduler(
    full_cluster: ControlPlane,
    compute_domain_driver: ComputeDomainDriver,
    namespace: str,
    node_factory: Callable[..., list[Any]],
) -> None:
    cp = full_cluster
    rack_set, nodes = _racks(node_factory, "imex")
    compute_domain_driver.publish(nodes)
    domain = "replica-0"
    template = f"{domain}-channel"
    cp.apply(
        {
            "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
            "kind": "ComputeDomain",
            "metadata": {"name": domain, "namespace": namespace},
            "spec": {"channel": {"resourceClaimTemplate": {"name": template}}},
        }
    )
    cd = cp.kubectl_json("get", "computedomain", domain, "-n", namespace)
    assert cd["spec"]["numNodes"] == 0 and cd["spec"]["channel"]["allocationMode"] == "Single"
    spec_change = cp.kubectl(
        "patch", "computedomain", domain, "-n", namespace, "--type=merge",
        "-p", '{"spec":{"numNodes":2}}', check=False,
    )  # fmt: skip
    assert spec_change.returncode != 0 and "immutable" in spec_change.stderr

    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"rank-{i}", "namespace": namespace},
            "spec": _tray_pod_spec(rack_set, claim_template=template),
        }
        for i in range(2)
    ]
    cp.apply(pods)

    def allocated() -> list[dict[str, Any]] | None:
        claims = cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"]
        running = _running(cp.kubectl_json("get", "pods", "-n", namespace)["items"])
        if len(running) == 2 and len(claims) == 2 and all(c.get("status", {}).get("allocation")
                                                             for c in claims):  # fmt: skip
            return claims
        return None

    claims = wait_for(allocated, timeout=120, what="2 pods Running with allocated claims")
    pods_now = {
        p["metadata"]["name"]: p for p in cp.kubectl_json("get", "pods", "-n", namespace)["items"]
    }
    for claim in claims:
        owner = claim["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "Pod"
        pod = pods_now[owner["name"]]
        result = claim["status"]["allocation"]["devices"]["results"][0]
        # channel-0 of the very tray the scheduler bound the pod to.
        assert (result["driver"], result["pool"], result["device"]) == (
            DRIVER, pod["spec"]["nodeName"], "channel-0"
        )  # fmt: skip
        assert (
            claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == CHANNEL_CLASS
        )
        assert [r["name"] for r in claim["status"]["reservedFor"]] == [owner["name"]]

    # Garbage collection: pods take their claims with them, the domain its template.
    cp.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")
    wait_for(
        lambda: not cp.kubectl_json("get", "resourceclaims", "-n", namespace)["items"],
        timeout=90,
        what="claims garbage-collected",
    )
    cp.kubectl("delete", "computedomain", domain, "-n", namespace, "--wait=false")
    wait_for(
        lambda: not cp.kubectl_json("get", "resourceclaimtemplates", "-n", namespace)["items"],
        timeout=90,
        what="channel template garbage-collected",
    )
    assert compute_domain_driver.stand_in is not None
    assert compute_domain_driver.stand_in.errors == []
