"""Kueue: spec.queueName labels every engine workload (never the router), and render says it
needs Kueue (pure parts; the e2e with the real Kueue is tests/e2e/test_kueue.py)."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.engine.decision import resolve
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
