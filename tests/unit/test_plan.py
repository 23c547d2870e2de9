"""plan(): the one pipeline the render command and the reconciler share."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.cli import main
from deepseek_operator.commands.render.inputs import load_nodes_file
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.status import status_dict
from tests.unit.factories import agent_labels, gb200_pool, inventory, node

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
NOW = "2026-01-01T00:00:00Z"


def _body(**status: Any) -> dict[str, Any]:
    body = copy.deepcopy(SEED)
    body["metadata"].update(generation=2, uid="u1")
    if status:
        body["status"] = status
    return body


def test_render_command_prints_exactly_the_offline_plan(capsys: Any) -> None:
    nodes = str(ROOT / "examples/nodes-gb200.yaml")
    assert main(["render", "-f", str(ROOT / "examples/dsv41-flash-gb200.yaml"), "--nodes", nodes, "-o", "json"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    planned = plan(
        parse_serving(SEED), build_inventory(load_nodes_file(nodes)), Observed.offline(), NOW
    )
    for condition in printed["status"]["conditions"]:
        condition["lastTransitionTime"] = NOW
    assert printed == {"status": planned.status_dict, "objects": planned.objects}


def test_observed_status_is_parsed_once_and_carries_the_running_decision() -> None:
    running = plan(parse_serving(_body()), gb200_pool(), Observed.offline(), NOW)
    raw = status_dict(running.status) | {"readyReplicas": 1}
    observed = Observed.from_body(_body(**raw), {})
    assert observed.status is not None and observed.status.ready_replicas == 1
    previous = observed.previous_decision()
    assert previous is not None
    assert (previous.moe_backend, previous.serving) == ("deep_gemm_mega_moe", True)
    # Node churn: one tray left with broken NVLink. A fresh decision would keep auto, but the
    # serving MegaMoE decision stays (docs/design.md), because the plan reads the observed status.
    churned = inventory(node("gb200-0", agent=agent_labels(fully_connected="false")))
    assert plan(parse_serving(_body()), churned, Observed.offline(), NOW).resolution.moe_backend == "auto"  # fmt: skip
    kept = plan(parse_serving(_body()), churned, observed, NOW)
    assert kept.resolution.moe_backend == "deep_gemm_mega_moe"
    assert "kept because replicas are serving" in kept.resolution.message


def test_a_status_of_an_older_generation_is_not_a_running_decision() -> None:
    running = plan(parse_serving(_body()), gb200_pool(), Observed.offline(), NOW)
    raw = status_dict(running.status) | {"observedGeneration": 1}
    assert Observed.from_body(_body(**raw), {}).previous_decision() is None


def test_hand_edited_backend_spelling_in_status_is_read_normalised() -> None:
    running = plan(parse_serving(_body()), gb200_pool(), Observed.offline(), NOW)
    raw = status_dict(running.status)
    raw["resolved"]["moeBackend"] = "DEEP-GEMM-MEGA-MOE"
    previous = Observed.from_body(_body(**raw), {}).previous_decision()
    assert previous is not None and previous.moe_backend == "deep_gemm_mega_moe"


def test_transition_times_carry_over_from_the_observed_conditions() -> None:
    first = plan(parse_serving(_body()), gb200_pool(), Observed.offline(), NOW)
    observed = Observed.from_body(_body(**first.status_dict), {("Deployment", "dsv41"): {"status": {"readyReplicas": 1}}})  # fmt: skip
    second = plan(parse_serving(_body()), gb200_pool(), observed, "2026-01-02T00:00:00Z")
    times = {c.type: c.last_transition_time for c in second.status.conditions}
    assert times["BackendResolved"] == NOW  # unchanged status keeps its time
    assert times["Ready"] == "2026-01-02T00:00:00Z"  # flipped to True now
    assert second.status.ready_replicas == 1


# --- the workload asks only for what can be placed, plus what the user lets queue -------------


def _serving(replicas: int, **spec: Any) -> Any:
    body = _body()
    body["spec"].update(replicas=replicas, **spec)
    return parse_serving(body)


def _workload_replicas(planned: Any) -> int:
    return int(planned.objects[0]["spec"]["replicas"])


def _placeable_message(planned: Any) -> str:
    return next(c.message for c in planned.status.conditions if c.type == "Placeable")


def test_replicas_beyond_capacity_are_held_back_but_one_may_pend_by_default() -> None:
    planned = plan(_serving(50), gb200_pool(4), Observed.offline(), NOW)
    assert _workload_replicas(planned) == 5
    assert planned.status.replicas == 50  # status keeps what the user asked for
    assert (
        "45 of 50 replicas held back: the workload asks for 5 (4 placeable + "
        "spec.maxPendingReplicas 1 allowed to pend)"
    ) in _placeable_message(planned)
    none_pending = plan(_serving(50, maxPendingReplicas=0), gb200_pool(4), Observed.offline(), NOW)
    assert _workload_replicas(none_pending) == 4
    fits = plan(_serving(3), gb200_pool(4), Observed.offline(), NOW)
    assert _workload_replicas(fits) == 3 and "held back" not in _placeable_message(fits)


def _live(replicas: int) -> Observed:
    return Observed(
        generation=2, children={("Deployment", "dsv41"): {"spec": {"replicas": replicas}}}
    )


def test_lost_capacity_never_scales_the_workload_down_and_new_capacity_lets_more_in() -> None:
    # 10 applied while 10 trays were there; 4 are left: the serving pods stay.
    kept = plan(_serving(50), gb200_pool(4), _live(10), NOW)
    assert _workload_replicas(kept) == 10
    assert "the workload keeps its current 10" in _placeable_message(kept)
    grown = plan(_serving(50), gb200_pool(12), _live(10), NOW)
    assert _workload_replicas(grown) == 13
    # The user lowering spec.replicas is the one way down.
    lowered = plan(_serving(6), gb200_pool(4), _live(10), NOW)
    assert _workload_replicas(lowered) == 6
    assert _workload_replicas(plan(_serving(0), gb200_pool(4), _live(10), NOW)) == 0


def test_a_statefulset_refusal_of_a_leaderworkerset_makes_ready_pods_refused() -> None:
    refusal = 'StatefulSet/dsv41: FailedCreate: Create Pod dsv41-0 ... violates PodSecurity "restricted:latest"'
    observed = Observed(generation=2, pod_refusals=(refusal,))
    planned = plan(_serving(1), gb200_pool(4), observed, NOW)
    ready = next(c for c in planned.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "PodsRefused")
    assert ready.message == f"0/1 replicas ready; {refusal}"


def test_each_serving_reports_its_own_backend_spelling_on_a_shared_inventory() -> None:
    # plan() shares resolve() between specs with one identity on one inventory: the user's
    # spelling of moeBackend is part of that identity (it is status.decision.requested).
    pool = gb200_pool()
    requested = []
    for name, written in (("a", "Deep-GEMM-Mega-MoE"), ("b", "deep_gemm_mega_moe")):
        body = copy.deepcopy(SEED)
        body["metadata"]["name"] = name
        body["spec"]["moeBackend"] = written
        status = plan(parse_serving(body), pool, Observed.offline(), NOW).status_dict
        requested.append(status["decision"]["requested"])
    assert requested == ["Deep-GEMM-Mega-MoE", "deep_gemm_mega_moe"]
