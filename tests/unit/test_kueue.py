"""Kueue: spec.queueName labels every engine workload (never the router), and render says it
needs Kueue (pure parts; the e2e with the real Kueue is tests/e2e/test_kueue.py)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.controller.pair_admission import PairAdmission
from deepseek_operator.controller.watches import api_seconds
from deepseek_operator.engine.decision import resolve
from deepseek_operator.engine.kueue import (
    PAIR_HOLD_S,
    WorkloadFacts,
    admission,
    admission_check_record,
    pair_check_updates,
    pair_retries,
    wanted_replicas,
)
from deepseek_operator.engine.kueue_workload import WorkloadRecord, workload_record
from deepseek_operator.errors import SpecError
from deepseek_operator.names import KUEUE_QUEUE_LABEL
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.workload import render_objects
from tests.unit.factories import gb200_pool, spec

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = ROOT / "examples/dsv41-flash-gb200.yaml"
PAIR = ROOT / "examples/dsv41-flash-1p1d-gb200.yaml"
NOW = "2026-12-07T00:00:00Z"
WORKLOADS = ("Deployment", "LeaderWorkerSet")


def _nodes(name: str = "nodes-gb200.yaml") -> Any:
    return build_inventory(yaml.safe_load((ROOT / "examples" / name).read_text())["items"])


def _queued(objects: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each object's queue-name label by kind/name (None: unlabelled)."""
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["metadata"]
        .get("labels", {})
        .get(KUEUE_QUEUE_LABEL)
        for o in objects
    }


def test_deployment_and_its_pods_carry_the_queue_name() -> None:
    obj = ServingObject(name="dsv41", namespace="llm", spec=spec(queueName="gpu-team"))
    deploy, service = render_objects(obj, resolve(obj.spec, gb200_pool()))
    assert deploy["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-team"
    assert deploy["spec"]["template"]["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-team"
    # The selector stays as it was: a queue change never orphans the pods.
    assert KUEUE_QUEUE_LABEL not in deploy["spec"]["selector"]["matchLabels"]
    assert KUEUE_QUEUE_LABEL not in service["metadata"]["labels"]


def test_no_queue_name_no_label() -> None:
    obj = ServingObject(name="dsv41", namespace="llm", spec=spec())
    for o in render_objects(obj, resolve(obj.spec, gb200_pool())):
        assert KUEUE_QUEUE_LABEL not in json.dumps(o)


def test_leader_worker_set_carries_the_queue_name() -> None:
    raw = yaml.safe_load((ROOT / "examples/dsv41-flash-dep8-nvl72.yaml").read_text())
    raw["spec"]["queueName"] = "gpu-team"
    p = plan(parse_serving(raw), _nodes("nodes-gb200-nvl72.yaml"), Observed.offline(), NOW)
    lws = [o for o in p.objects if o["kind"] == "LeaderWorkerSet"]
    assert len(lws) == 1 and lws[0]["spec"]["leaderWorkerTemplate"]["size"] > 1
    assert lws[0]["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-team"


def test_both_roles_are_queued_and_the_router_is_not() -> None:
    raw = yaml.safe_load(PAIR.read_text())
    raw["spec"]["queueName"] = "gpu-team"
    p = plan(parse_serving(copy.deepcopy(raw)), _nodes(), Observed.offline(), NOW)
    queued = _queued(p.objects)
    engines = {k: v for k, v in queued.items() if k.split("/")[0] in WORKLOADS}
    router = engines.pop(f"Deployment/{raw['metadata']['name']}-api", "absent")
    assert router is None, "the router holds no GPUs and is not queued"
    assert len(engines) == 2 and set(engines.values()) == {"gpu-team"}, engines


@pytest.mark.parametrize("value", ["Gpu-Team", "-x", "a" * 64, "a.b", ""])
def test_a_queue_name_that_is_no_label_value_is_refused_in_one_line(value: str) -> None:
    raw = yaml.safe_load(SEED.read_text())
    raw["spec"]["queueName"] = value
    with pytest.raises(SpecError) as err:
        parse_serving(raw)
    line = err.value.one_line()
    assert "spec.queueName" in line and "\n" not in line


def _render(path: pathlib.Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_render_says_the_queue_name_needs_kueue(tmp_path: pathlib.Path) -> None:
    raw = yaml.safe_load(SEED.read_text())
    raw["spec"]["queueName"] = "gpu-team"
    path = tmp_path / "queued.yaml"
    path.write_text(yaml.safe_dump(raw))
    nodes = str(ROOT / "examples/nodes-gb200.yaml")
    out = _render(path, "--nodes", nodes, "-o", "yaml")
    assert out.returncode == 0, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"info: {path}: spec.queueName 'gpu-team' needs Kueue"), line
    deploy = next(yaml.safe_load_all(out.stdout))
    assert deploy["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "gpu-team"
    # Without a queue name: no info line, and the same objects minus the label.
    plain = _render(SEED, "--nodes", nodes, "-o", "yaml")
    assert plain.returncode == 0 and plain.stderr == ""


# --- the Admitted condition, from Kueue's Workloads (pure) ------------------------------------

PENDING = (
    "couldn't assign flavors to pod set leader: insufficient unused quota for nvidia.com/gpu "
    "in flavor default-flavor, 4 more needed"
)


def _workload(
    name: str, owner_kind: str, owner: str, **conditions: tuple[str, str, str]
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "ownerReferences": [{"kind": owner_kind, "name": owner, "uid": "u"}],
        },
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m}
                for t, (s, r, m) in conditions.items()
            ]
        },
    }


def _record(workload: dict[str, Any]) -> WorkloadRecord | None:
    """What the Workload watch keeps: the pure reducer, with the controller's time reader."""
    return workload_record(workload, api_seconds)


def test_workload_owners_name_the_serving_and_role() -> None:
    lws = _record(_workload("w1", "LeaderWorkerSet", "pd-decode"))
    assert lws is not None and lws.owner == ("llm", "pd") and lws.facts.role == "decode"
    pod = _record(_workload("w2", "Pod", "dsv41-7d9f8b6c5d-x2x4q"))
    assert pod is not None and pod.owner == ("llm", "dsv41") and pod.facts.role == ""
    assert _record(_workload("w3", "Job", "train")) is None
    assert _record(_workload("w4", "Pod", "bare")) is None


def test_pending_workload_says_kueues_message_and_ready_waits_for_quota() -> None:
    record = _record(
        _workload(
            "w1",
            "LeaderWorkerSet",
            "dsv41",
            QuotaReserved=("False", "Pending", PENDING),
            Admitted=("False", "NoReservation", "The workload has no reservation"),
        )
    )
    assert record is not None
    verdict = admission("gpu", True, [record.facts], replicas=1)
    assert verdict is not None and not verdict.ok
    assert verdict.reason == "Pending"
    assert PENDING in verdict.message and "0/1 replicas admitted" in verdict.message
    obj = ServingObject(name="dsv41", namespace="llm", spec=spec(queueName="gpu"))
    observed = Observed(workloads={"": (record.facts,)})
    p = plan(obj, gb200_pool(), observed, NOW)
    conds = {c.type: c for c in p.status.conditions}
    assert conds["Admitted"].status == "False" and conds["Admitted"].reason == "Pending"
    assert conds["Ready"].reason == "WaitingForQuota", conds["Ready"]
    assert PENDING in conds["Ready"].message


def test_admitted_evicted_missing_and_no_kueue() -> None:
    ok = WorkloadFacts("w1", admitted=True, quota_reserved=True)
    verdict = admission("gpu", True, [ok], replicas=1)
    assert verdict is not None and verdict.ok and verdict.reason == "Admitted"
    evicted = WorkloadFacts("w2", quota_reserved=False, evicted="Preempted: by a higher priority")
    verdict = admission("gpu", True, [ok, evicted], replicas=2)
    assert verdict is not None and verdict.reason == "Evicted" and "Preempted" in verdict.message
    verdict = admission("gpu", True, [ok], replicas=2)
    assert verdict is not None and verdict.reason == "NoWorkloadYet"
    verdict = admission("gpu", False, [], replicas=2)
    assert verdict is not None and verdict.ok and verdict.reason == "KueueNotInstalled"
    assert admission(None, True, [ok], replicas=1) is None


def test_no_queue_name_no_admitted_condition_and_offline_none_either() -> None:
    obj = ServingObject(name="dsv41", namespace="llm", spec=spec())
    p = plan(obj, gb200_pool(), Observed(), NOW)
    assert "Admitted" not in {c.type for c in p.status.conditions}
    queued = ServingObject(name="dsv41", namespace="llm", spec=spec(queueName="gpu"))
    p = plan(queued, gb200_pool(), Observed.offline(), NOW)
    assert "Admitted" not in {c.type for c in p.status.conditions}


def test_a_pair_names_the_role_that_waits() -> None:
    raw = yaml.safe_load(PAIR.read_text())
    raw["spec"]["queueName"] = "gpu-team"
    waiting = WorkloadFacts("wd", role="decode", pending=PENDING)
    admitted = WorkloadFacts("wp", role="prefill", admitted=True, quota_reserved=True)
    observed = Observed(workloads={"decode": (waiting,), "prefill": (admitted,)})
    p = plan(parse_serving(raw), _nodes(), observed, NOW)
    cond = next(c for c in p.status.conditions if c.type == "Admitted")
    assert cond.status == "False" and cond.reason == "Pending"
    assert "prefill: 1/1 replicas admitted" in cond.message
    assert "decode: 0/1 replicas admitted" in cond.message and PENDING in cond.message


# --- the operator's admission check: a pair admitted whole (pure) -----------------------------

CHECK = "pd-pair"


def _facts(name: str, role: str, *, reserved: bool, state: str = "Pending") -> WorkloadFacts:
    return WorkloadFacts(name, role=role, quota_reserved=reserved, checks=((CHECK, state),))


def test_a_pair_turns_ready_only_when_every_workload_of_both_roles_has_quota() -> None:
    wanted = {"prefill": 1, "decode": 2}
    half = {
        "prefill": [_facts("p0", "prefill", reserved=True)],
        "decode": [_facts("d0", "decode", reserved=True), _facts("d1", "decode", reserved=False)],
    }
    assert pair_check_updates(half, wanted, frozenset({CHECK})) == []
    missing = {"prefill": [_facts("p0", "prefill", reserved=True)]}
    assert pair_check_updates(missing, wanted, frozenset({CHECK})) == []
    whole = {
        "prefill": [_facts("p0", "prefill", reserved=True)],
        "decode": [_facts("d0", "decode", reserved=True), _facts("d1", "decode", reserved=True)],
    }
    updates = pair_check_updates(whole, wanted, frozenset({CHECK}))
    assert {(u.workload, u.check, u.state) for u in updates} == {
        ("p0", CHECK, "Ready"),
        ("d0", CHECK, "Ready"),
        ("d1", CHECK, "Ready"),
    }
    # Someone else's check is never touched, and a Ready one is not written again.
    assert pair_check_updates(whole, wanted, frozenset({"other"})) == []
    done = {r: [_facts(f"{r}0", r, reserved=True, state="Ready")] for r in ("prefill", "decode")}
    assert pair_check_updates(done, {"prefill": 1, "decode": 1}, frozenset({CHECK})) == []


def test_a_pair_with_one_role_seen_wants_the_other_role_too() -> None:
    # The decode Workload is seen with quota reserved before the prefill one exists: judged by
    # the roles seen, the pair would be "whole" and decode admitted alone (cold make test, 21:00).
    decode_only = {"decode": [_facts("d0", "decode", reserved=True)]}
    wanted = wanted_replicas(decode_only, {}, "two")
    assert wanted == {"decode": 1, "prefill": 1}
    assert pair_check_updates(decode_only, wanted, frozenset({CHECK})) == []
    aggregated = {"": [_facts("a", "", reserved=True)]}
    assert wanted_replicas(aggregated, {}, "one") == {"": 1}


def test_an_aggregated_serving_passes_the_check_per_workload() -> None:
    workloads = {"": [_facts("a", "", reserved=True), _facts("b", "", reserved=False)]}
    updates = pair_check_updates(workloads, {"": 2}, frozenset({CHECK}))
    assert [(u.workload, u.state) for u in updates] == [("a", "Ready")]


def _held(name: str, role: str, *, created: float, reserved_at: float = 0.0) -> WorkloadFacts:
    return WorkloadFacts(
        name,
        role=role,
        quota_reserved=reserved_at > 0,
        checks=((CHECK, "Pending"),),
        created_at=created,
        reserved_at=reserved_at,
    )


def test_of_two_pairs_holding_one_role_each_the_younger_gives_its_quota_back() -> None:
    # Pair a (older) holds prefill quota, pair b holds decode quota: neither can ever go whole.
    wanted = {"prefill": 1, "decode": 1}
    a = {
        "prefill": [_held("a-p", "prefill", created=100, reserved_at=200)],
        "decode": [_held("a-d", "decode", created=100)],
    }
    b = {
        "prefill": [_held("b-p", "prefill", created=150)],
        "decode": [_held("b-d", "decode", created=150, reserved_at=210)],
    }
    pairs = {("llm", "a"): (a, wanted), ("llm", "b"): (b, wanted)}
    ours = frozenset({CHECK})
    early = pair_retries(pairs, ours, now=210 + PAIR_HOLD_S - 1)
    assert early.updates == () and early.next_at == 210 + PAIR_HOLD_S
    late = pair_retries(pairs, ours, now=210 + PAIR_HOLD_S)
    assert [(ns, u.workload, u.check, u.state) for ns, u in late.updates] == [
        ("llm", "b-d", CHECK, "Retry")
    ]
    assert "'b'" in late.updates[0][1].message and late.next_at is None
    # Order by age, not by name: with b older, a gives its prefill quota back instead.
    b_older = {k: [dataclasses.replace(w, created_at=50) for w in ws] for k, ws in b.items()}
    pairs = {("llm", "a"): (a, wanted), ("llm", "b"): (b_older, wanted)}
    late = pair_retries(pairs, ours, now=1_000)
    assert [u.workload for _, u in late.updates] == ["a-p"]


def test_a_lone_holder_a_whole_pair_and_an_aggregated_serving_keep_their_quota() -> None:
    wanted = {"prefill": 1, "decode": 1}
    alone = {
        "prefill": [_held("a-p", "prefill", created=100, reserved_at=200)],
        "decode": [_held("a-d", "decode", created=100)],
    }
    assert pair_retries({("llm", "a"): (alone, wanted)}, frozenset({CHECK}), 10_000).updates == ()
    whole = {r: [_held(f"w-{r}", r, created=50, reserved_at=60)] for r in wanted}
    agg = {"": [_held("g", "", created=10, reserved_at=20), _held("h", "", created=10)]}
    younger = {
        "prefill": [_held("y-p", "prefill", created=300, reserved_at=310)],
        "decode": [_held("y-d", "decode", created=300)],
    }
    pairs = {
        ("llm", "w"): (whole, wanted),
        ("llm", "g"): (agg, {"": 2}),
        ("llm", "y"): (younger, wanted),
    }
    # Neither the whole pair nor the aggregated serving counts as a holder: y is the only one.
    assert pair_retries(pairs, frozenset({CHECK}), 10_000).updates == ()
    # A check that is not ours is never set to Retry.
    pairs = {("llm", "a"): (alone, wanted), ("llm", "y"): (younger, wanted)}
    assert pair_retries(pairs, frozenset({"other"}), 10_000).updates == ()


def test_workload_records_carry_when_quota_was_reserved() -> None:
    record = _record(
        {
            "metadata": {
                "name": "w",
                "namespace": "llm",
                "creationTimestamp": "2026-12-07T10:00:00Z",
                "ownerReferences": [{"kind": "LeaderWorkerSet", "name": "dsv41-decode"}],
            },
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "lastTransitionTime": "2026-12-07T10:00:30Z",
                    }
                ]
            },
        }
    )
    assert record is not None and record.facts.role == "decode"
    assert record.facts.reserved_at - record.facts.created_at == 30


def test_admission_check_records_keep_only_the_operators() -> None:
    ours = {
        "metadata": {"name": "pd-pair"},
        "spec": {"controllerName": "serving.deepseek-operator.io/pd-pair"},
    }
    assert admission_check_record(ours) == ("pd-pair", False)
    active = {**ours, "status": {"conditions": [{"type": "Active", "status": "True"}]}}
    assert admission_check_record(active) == ("pd-pair", True)
    other = {"metadata": {"name": "prov"}, "spec": {"controllerName": "kueue.x-k8s.io/prov"}}
    assert admission_check_record(other) is None
    record = _record(_workload("w", "LeaderWorkerSet", "pd-prefill"))
    assert record is not None and record.facts.checks == ()


def test_the_operator_marks_its_check_active_and_passes_a_whole_pair() -> None:
    """controller/pair_admission.py with a recording client: its check marked Active once, the
    pair's Workloads written Ready once both roles have quota, a stranger's check left alone."""
    written: list[dict[str, Any]] = []

    class Kube:
        async def apply_status(self, obj: dict[str, Any]) -> None:
            written.append(obj)

    whole = {
        "prefill": (_facts("p0", "prefill", reserved=True),),
        "decode": (_facts("d0", "decode", reserved=True),),
    }

    async def run() -> None:
        pair = PairAdmission(
            Kube(),  # type: ignore[arg-type]
            lambda key: whole if key == ("llm", "pd") else {},
            lambda key: {},
            lambda: [("llm", "pd")],
        )
        pair.check_seen("ADDED", CHECK, (CHECK, False))  # new: Active, and every serving judged
        pair.check_seen("ADDED", "prov", None)  # someone else's
        await asyncio.sleep(0)
        await asyncio.gather(*pair._tasks)

    asyncio.run(run())
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in written)
    assert kinds == [("AdmissionCheck", CHECK), ("Workload", "d0"), ("Workload", "p0")]
    check = next(o for o in written if o["kind"] == "AdmissionCheck")
    assert check["status"]["conditions"][0]["type"] == "Active"
    entry = next(o for o in written if o["kind"] == "Workload")["status"]["admissionChecks"][0]
    assert (entry["name"], entry["state"]) == (CHECK, "Ready")


def test_a_servings_workloads_group_by_role_and_its_replicas_come_from_the_live_child() -> None:
    from deepseek_operator.engine.kueue import workload_replicas, workloads_by_role

    b, a = WorkloadFacts("b", role="decode"), WorkloadFacts("a", role="decode")
    assert workloads_by_role([b, WorkloadFacts("p", role="prefill"), a]) == {
        "decode": (a, b),
        "prefill": (WorkloadFacts("p", role="prefill"),),
    }
    children = {("LeaderWorkerSet", "s-decode"): {"spec": {"replicas": 3}}}
    assert workload_replicas(children, "s", "decode") == 3
    assert workload_replicas(children, "s", "prefill") == 1  # not seen yet: at least one
    assert workload_replicas({("Deployment", "s"): {"spec": {}}}, "s", "") == 0
