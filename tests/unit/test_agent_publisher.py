"""The node agent without an API server: patch planning, retries, the agent loop, log lines.

The same publisher runs against the real kube-apiserver in
tests/integration/test_agent_publisher.py.
"""

from __future__ import annotations

import argparse
import io
import itertools
import logging
import threading
import types
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from deepseek_operator import names
from deepseek_operator.agent.gpu_topology import GpuTopology
from deepseek_operator.agent.logs import LogfmtFormatter
from deepseek_operator.agent.main import Agent, agent_command, desired_state
from deepseek_operator.agent.probe import ProbeError, RecordedProbe
from deepseek_operator.agent.publisher import (
    MERGE_PATCH,
    Backoff,
    NodePublisher,
    PublishError,
    plan_patch,
)
from deepseek_operator.agent.topo_smi import parse_topo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
P = names.AGENT_PREFIX


# --- plan_patch ------------------------------------------------------------------------------


def test_plan_patch_sets_new_keys_and_leaves_others_out() -> None:
    patch = plan_patch({"kubernetes.io/hostname": "n1"}, None, {P + "count": "8"}, {})
    assert patch == {"metadata": {"labels": {P + "count": "8"}}}


def test_plan_patch_is_none_when_nothing_changed() -> None:
    current = {"team": "a", P + "count": "8"}
    annotations = {P + "topology": "{}", "other/x": "1"}
    assert plan_patch(current, annotations, {P + "count": "8"}, {P + "topology": "{}"}) is None


def test_plan_patch_removes_stale_keys_of_ours_only() -> None:
    current = {"team": "a", P + "count": "8", P + "mnnvl.clique": "x.1"}
    patch = plan_patch(current, {P + "topology": "{}"}, {P + "count": "4"}, {})
    assert patch == {
        "metadata": {
            "labels": {P + "count": "4", P + "mnnvl.clique": None},
            "annotations": {P + "topology": None},
        }
    }


def test_plan_patch_refuses_keys_outside_the_prefix() -> None:
    with pytest.raises(ValueError, match="outside the agent's prefix"):
        plan_patch({}, {}, {"nvidia.com/gpu.count": "8"}, {})


# --- NodePublisher with a fake CoreV1Api ----------------------------------------------------


class FakeCore:
    """An in-memory Node store speaking the two CoreV1Api calls the publisher uses."""

    def __init__(self, labels: dict[str, str], annotations: dict[str, str] | None = None):
        self.labels = dict(labels)
        self.annotations = dict(annotations or {})
        self.failures: list[BaseException] = []
        self.reads = 0
        self.patches: list[tuple[str, dict[str, Any], str]] = []

    def read_node(self, name: str, **_: Any) -> Any:
        self.reads += 1
        if self.failures:
            raise self.failures.pop(0)
        meta = types.SimpleNamespace(labels=dict(self.labels), annotations=dict(self.annotations))
        return types.SimpleNamespace(metadata=meta)

    def patch_node(self, name: str, body: dict[str, Any], **kwargs: Any) -> None:
        self.patches.append((name, body, kwargs["_content_type"]))
        for field, store in (("labels", self.labels), ("annotations", self.annotations)):
            for key, value in body["metadata"].get(field, {}).items():
                if value is None:
                    store.pop(key, None)
                else:
                    store[key] = value


def publisher(core: FakeCore, sleeps: list[float], **kwargs: Any) -> NodePublisher:
    kwargs.setdefault("backoff", Backoff(jitter=0.0))
    return NodePublisher(core, "node-a", sleep=sleeps.append, **kwargs)


def test_publish_then_republish_sends_one_merge_patch() -> None:
    core, sleeps = FakeCore({"team": "a"}), []
    pub = publisher(core, sleeps)
    first = pub.publish({P + "present": "true"}, {P + "topology": '{"v":1}'})
    second = pub.publish({P + "present": "true"}, {P + "topology": '{"v":1}'})
    assert first.changed and not second.changed
    assert len(core.patches) == 1
    name, _body, content_type = core.patches[0]
    assert name == "node-a" and content_type == MERGE_PATCH
    assert core.labels == {"team": "a", P + "present": "true"}


def test_unreachable_server_is_retried_with_capped_exponential_backoff() -> None:
    core, sleeps = FakeCore({}), []
    down = urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes/node-a", "refused")
    core.failures = [down] * 8 + [ApiException(status=503, reason="Service Unavailable")]
    result = publisher(core, sleeps, backoff=None).publish({P + "present": "true"}, {})
    assert result.changed and result.attempts == 10
    assert len(sleeps) == 9
    assert all(b >= a * 0.8 for a, b in itertools.pairwise(sleeps))
    assert max(sleeps) <= 60.0 * 1.1


def test_backoff_doubles_up_to_the_cap() -> None:
    delays = Backoff(initial=1, factor=2, cap=10, jitter=0).delays()
    assert [next(delays) for _ in range(6)] == [1, 2, 4, 8, 10, 10]


def test_forbidden_is_not_retried() -> None:
    core, sleeps = FakeCore({}), []
    core.failures = [
        ApiException(
            status=403,
            reason="Forbidden",
        )
    ]
    with pytest.raises(PublishError, match="HTTP 403"):
        publisher(core, sleeps).publish({P + "present": "true"}, {})
    assert sleeps == [] and core.reads == 1


def test_retries_stop_after_max_attempts() -> None:
    core, sleeps = FakeCore({}), []
    core.failures = [ConnectionRefusedError("refused")] * 5
    with pytest.raises(PublishError, match="after 3 attempts"):
        publisher(core, sleeps, max_attempts=3).publish({P + "present": "true"}, {})
    assert len(sleeps) == 2


# --- the agent loop ----------------------------------------------------------------------------


class FlakyProbe:
    def __init__(self, results: list[GpuTopology | Exception]):
        self.results = results

    def probe(self) -> GpuTopology:
        result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, Exception):
            raise result
        return result


def t09() -> GpuTopology:
    return parse_topo((FIXTURES / "t09-h100-direct-nv6.txt").read_text())


def test_agent_publishes_labels_and_annotation() -> None:
    core = FakeCore({"team": "a"})
    agent = Agent(RecordedProbe(t09()), publisher(core, []))
    assert agent.step() == 0
    assert core.labels[P + "nvlink.fully-connected"] == "true"
    assert core.annotations[P + "topology"].startswith('{"v":1,')
    assert core.labels["team"] == "a"


def test_a_node_without_gpus_publishes_present_false_and_drops_old_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core = FakeCore({"team": "a"})
    no_gpu = GpuTopology(unavailable_reason="NVML unavailable: NVML Shared Library Not Found")
    agent = Agent(FlakyProbe([t09(), no_gpu]), publisher(core, []))
    agent.step()
    with caplog.at_level(logging.INFO, logger="deepseek_operator.agent"):
        for _ in range(3):
            assert agent.step() == 0
    assert core.labels == {"team": "a", P + "present": "false"}
    assert core.annotations == {}
    no_gpu_lines = [r for r in caplog.records if r.getMessage().startswith("No GPUs")]
    assert len(no_gpu_lines) == 1  # one clear line, then quiet idling


def test_a_failing_probe_keeps_the_labels_published_last() -> None:
    core = FakeCore({})
    agent = Agent(FlakyProbe([t09(), ProbeError("GPU is lost")]), publisher(core, []))
    agent.step()
    before = dict(core.labels)
    assert agent.step() == 1
    assert core.labels == before


def test_run_loops_until_stopped() -> None:
    core, stop = FakeCore({}), threading.Event()
    calls = []

    class CountingProbe:
        def probe(self) -> GpuTopology:
            calls.append(1)
            if len(calls) == 3:
                stop.set()
            return t09()

    assert Agent(CountingProbe(), publisher(core, [])).run(0.0, stop) == 0
    assert len(calls) == 3 and len(core.patches) == 1


def test_dry_run_prints_labels_and_annotation_once_per_change() -> None:
    out = io.StringIO()
    agent = Agent(RecordedProbe(t09()), None, out=out)
    agent.step()
    agent.step()
    text = out.getvalue()
    assert text.count(P + "count") == 1
    assert f"{P}nvlink.fully-connected" in text and f"{P}topology" in text


def test_desired_state_has_no_annotation_without_gpus() -> None:
    assert desired_state(GpuTopology()) == ({P + "present": "false"}, {})


def test_agent_command_dry_run_once_with_a_recording(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        node_name=None,
        interval=1.0,
        once=True,
        dry_run=True,
        kubeconfig=None,
        recorded=str(FIXTURES / "t07-b200-degraded-nvlink.txt"),
    )
    assert agent_command(args) == 0
    out = capsys.readouterr().out
    assert f"{P}nvlink.fully-connected" in out and "false" in out


def test_agent_command_without_a_node_name_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    args = argparse.Namespace(
        node_name=None, interval=1.0, once=True, dry_run=False, kubeconfig=None, recorded=None
    )
    assert agent_command(args) == 2


def test_log_lines_are_one_line_logfmt() -> None:
    record = logging.LogRecord("deepseek_operator.agent", logging.INFO, __file__, 1,
                               "Published GPU topology on Node", None, None)  # fmt: skip
    record.node = "node a"
    record.gpus = 8
    line = LogfmtFormatter().format(record)
    assert "\n" not in line
    assert 'msg="Published GPU topology on Node"' in line
    assert 'node="node a"' in line and "gpus=8" in line and "level=info" in line
