"""The pure half of spec.modelCache.fill: the shared Job, its hardening, WeightsReady's words.

Every input is what the controller reads from the cluster (the claim's request, the Job, its
newest pod's terminated state and log tail); nothing here talks to an API server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from deepseek_operator.api import status as S
from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.errors import SpecError
from deepseek_operator.names import FILL_EXIT_CODES, FILL_FATAL_CAUSES, WEIGHTS_READY
from deepseek_operator.nodes.dra_device import parse_quantity_bytes
from deepseek_operator.plan import Observed, with_weights_gate
from deepseek_operator.render.fill_job import (
    fill_job_name,
    render_fill_job,
    serving_fill_job_name,
)
from deepseek_operator.render.fill_progress import FillObserved, FillPod, last_report
from deepseek_operator.render.weights import weights_state, with_weights

REV = "0123456789abcdef0123456789abcdef01234567"
NOW = "2026-12-07T16:00:00Z"
LATER = "2026-12-07T16:00:10Z"


def serving(name: str = "a", uid: str = "uid-a", **cache: Any) -> ServingObject:
    fill = cache.pop("fill", {"tokenSecretRef": {"name": "hf", "key": "token"}})
    return parse_serving(
        {
            "apiVersion": "serving.deepseek-operator.io/v1alpha1",
            "kind": "DeepSeekServing",
            "metadata": {"name": name, "namespace": "llm", "uid": uid, "generation": 1},
            "spec": {
                "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash", "revision": REV},
                "image": "vllm/vllm-openai:v0.33.0",
                "modelCache": {"claimName": "weights", "fill": fill, **cache},
            },
        }
    )


def job(*conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "uid": "job-uid"},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


def progress(done: int, total: int, files: int = 1, of: int = 4) -> str:
    line = {
        "event": "progress",
        "bytesDone": done,
        "bytesTotal": total,
        "filesDone": files,
        "filesTotal": of,
        "file": "x",
    }
    return "\n".join(['{"event":"client","level":"warning","message":"m"}', json.dumps(line)])


BIG = "600Gi"


def test_two_servings_of_one_checkpoint_and_claim_share_one_job_name() -> None:
    a, b = serving("a", "uid-a"), serving("b", "uid-b")
    assert serving_fill_job_name(a) == serving_fill_job_name(b)
    name = serving_fill_job_name(a)
    assert name.startswith("weights-deepseek-v4-1-flash-") and len(name) <= 63
    # Any of the three changes the Job.
    assert fill_job_name("other", "deepseek-ai/DeepSeek-V4.1-Flash", REV) != name
    assert fill_job_name("weights", "deepseek-ai/DeepSeek-V4.1-Flash", "main") != name
    assert fill_job_name("weights", "deepseek-ai/DeepSeek-V4-Flash", REV) != name
    assert len(fill_job_name("c", "org/" + "x" * 200, REV)) <= 49


def test_the_job_is_hardened_and_never_holds_the_token() -> None:
    manifest = render_fill_job(serving(), "op:1")
    text = json.dumps(manifest)
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert all({"persistentVolumeClaim", "emptyDir"} & set(v) for v in pod["volumes"])
    (token,) = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert "value" not in token
    assert "--token-file" not in text
    assert container["args"][:3] == [
        "fill-weights",
        "--model=deepseek-ai/DeepSeek-V4.1-Flash",
        f"--revision={REV}",
    ]
    (rule, _ignore) = manifest["spec"]["podFailurePolicy"]["rules"]
    assert rule["onExitCodes"]["values"] == sorted(FILL_EXIT_CODES[c] for c in FILL_FATAL_CAUSES)
    (owner,) = manifest["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-a" and "controller" not in owner


def test_hf_endpoint_is_honoured() -> None:
    s = serving(fill={"endpoint": "https://hub.example.com"})
    (container,) = render_fill_job(s, "op:1")["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [{"name": "HF_ENDPOINT", "value": "https://hub.example.com"}]


def test_fill_needs_a_claim() -> None:
    with pytest.raises(SpecError, match=r"spec.modelCache.fill needs spec.modelCache.claimName"):
        parse_serving(
            {
                "apiVersion": "serving.deepseek-operator.io/v1alpha1",
                "kind": "DeepSeekServing",
                "metadata": {"name": "a", "namespace": "llm"},
                "spec": {
                    "model": {"name": "m/m", "revision": REV},
                    "image": "i",
                    "modelCache": {"fill": {}},
                },
            }
        )


def test_no_job_yet_creates_one_and_holds_the_pods() -> None:
    state = weights_state(serving(), FillObserved(True, BIG), None, NOW)
    assert state.create_job and not state.ready and state.poll
    assert state.reason == "FillPending"


def test_a_missing_claim_and_a_small_claim_are_refused_with_figures() -> None:
    state = weights_state(serving(), FillObserved(False), None, NOW)
    assert (state.ready, state.reason, state.create_job) == (False, "ClaimNotFound", False)
    small = weights_state(serving(), FillObserved(True, "400Gi"), None, NOW)
    assert small.reason == "CacheTooSmall" and not small.create_job
    assert "requests 400Gi (400.0 GiB)" in small.message and "476.0 GiB" in small.message
    # A checkpoint the catalogue does not size is not refused.
    other = serving()
    other = ServingObject(
        other.name,
        other.namespace,
        other.spec.model_copy(
            update={"model": other.spec.model.model_copy(update={"name": "org/unknown"})}
        ),
        uid=other.uid,
    )
    assert weights_state(other, FillObserved(True, "1Gi"), None, NOW).create_job


def test_progress_moves_and_gives_an_eta() -> None:
    gib = 1024**3
    first = weights_state(
        serving(),
        FillObserved(
            True, BIG, job(), FillPod("p", "Running", log_tail=progress(10 * gib, 100 * gib))
        ),
        None,
        NOW,
    )
    assert first.status is not None and first.status.eta_seconds is None
    assert first.status.progress == "10.0/100.0 GiB, 1/4 files"
    second = weights_state(
        serving(),
        FillObserved(
            True, BIG, job(), FillPod("p", "Running", log_tail=progress(20 * gib, 100 * gib, 2))
        ),
        first.status,
        LATER,
    )
    assert second.status is not None
    # 10 GiB in 10 s: 80 GiB left is 80 s.
    assert second.status.eta_seconds == 80
    assert second.status.progress == "20.0/100.0 GiB, 2/4 files, ETA 80s"
    assert second.reason == "Filling" and "20.0/100.0 GiB" in second.message
    assert not second.ready and second.poll


@pytest.mark.parametrize(
    ("cause", "message"),
    [
        ("token-rejected", "token-rejected: the hub does not know the token (401 on http://h)"),
        ("not-found", "not-found: the revision does not exist (404 on http://h)"),
        ("gated", ""),
        ("no-space", "no-space: /cache/hub has 1 bytes free"),
        ("checksum", "checksum: model.safetensors does not match"),
    ],
)
def test_a_failed_fill_names_its_cause_in_one_line(cause: str, message: str) -> None:
    code = FILL_EXIT_CODES[cause]
    pod = FillPod("p", "Failed", exit_code=code, message=message + "\n")
    state = weights_state(serving(), FillObserved(True, BIG, job("Failed"), pod, pod), None, NOW)
    assert (state.ready, state.reason) == (False, "FillFailed")
    assert "\n" not in state.message
    assert f"exit code {code} ({cause})" in state.message
    if message:
        assert message.split(": ", 1)[1] in state.message


def test_a_killed_pod_is_retried_and_the_retry_resumes() -> None:
    killed = FillPod("p1", "Failed", exit_code=137)
    running = FillPod("p2", "Running", log_tail=progress(5, 10))
    state = weights_state(serving(), FillObserved(True, BIG, job(), running, killed), None, NOW)
    assert state.reason == "FillRetrying" and state.poll and not state.ready
    assert "resumes from the volume" in state.message


def test_a_complete_job_makes_the_weights_ready() -> None:
    pod = FillPod(
        "p", "Succeeded", exit_code=0, log_tail='{"event":"done","bytesTotal":8,"filesTotal":3}'
    )
    state = weights_state(serving(), FillObserved(True, BIG, job("Complete"), pod), None, NOW)
    assert state.ready and state.reason == "Filled" and not state.poll
    assert state.status is not None and state.status.progress == "filled"
    assert (state.status.bytes_done, state.status.files_total) == (8, 3)


def test_a_revision_is_required() -> None:
    s = serving()
    unpinned = ServingObject(
        s.name,
        s.namespace,
        s.spec.model_copy(update={"model": s.spec.model.model_copy(update={"revision": None})}),
        uid=s.uid,
    )
    state = weights_state(unpinned, FillObserved(True, BIG), None, NOW)
    assert state.reason == "RevisionRequired" and not state.create_job


def test_the_gate_holds_children_until_ready() -> None:
    from deepseek_operator.plan import Plan
    from deepseek_operator.render.weights import WeightsState

    status = S.DeepSeekServingStatus()
    planned = Plan(resolution=None, objects=[{"kind": "Deployment"}], status=status)  # type: ignore[arg-type]
    waiting = WeightsState(False, "Filling", "m", S.WeightsStatus(job="j"))
    not_ready = S.Condition(type="Ready", status="False", reason="ReplicasNotReady", message="")
    planned = Plan(
        resolution=None,  # type: ignore[arg-type]
        objects=[{"kind": "Deployment"}],
        status=S.DeepSeekServingStatus(conditions=[not_ready]),
    )
    held = with_weights_gate(planned, waiting, Observed(), 1, NOW)
    assert held.holds_children
    ready_cond, cond = held.status.conditions
    assert (cond.type, cond.status) == (WEIGHTS_READY, "False")
    assert (ready_cond.type, ready_cond.reason) == ("Ready", "WeightsNotReady")
    assert ready_cond.message.endswith(": m")
    ready = with_weights_gate(planned, WeightsState(True, "Filled", "m", None), Observed(), 1, NOW)
    assert not ready.holds_children
    assert with_weights(status, waiting, generation=1, now=NOW, previous=()).weights is not None


def test_vllm_pods_read_the_filled_cache_read_only_and_offline() -> None:
    from deepseek_operator.plan import plan
    from tests.unit.factories import inventory, node

    planned = plan(serving(), inventory(node("n1")), Observed.offline(), NOW)
    (deployment,) = [o for o in planned.objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "model-cache"]
    assert mount["readOnly"] is True
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
    # A read-only HF_HOME: transformers' remote-code copies go elsewhere.
    (modules,) = [e["value"] for e in container["env"] if e["name"] == "HF_MODULES_CACHE"]
    assert not modules.startswith(mount["mountPath"])


def test_log_and_quantity_parsing() -> None:
    assert last_report("not json\n{bad\n") is None
    assert last_report(progress(1, 2))["bytesDone"] == 1  # type: ignore[index]
    assert parse_quantity_bytes("600Gi") == 600 * 1024**3
    assert parse_quantity_bytes("1T") == 10**12
    assert parse_quantity_bytes("5e9") == 5 * 10**9
    assert parse_quantity_bytes("lots") is None


def test_the_docs_fill_example_is_admitted_and_renders_its_job() -> None:
    import pathlib
    import re

    import yaml

    root = pathlib.Path(__file__).resolve().parents[2]
    page = (root / "docs/weights.md").read_text()
    (snippet,) = [
        doc
        for doc in map(yaml.safe_load, re.findall(r"```yaml\n(.*?)```", page, re.S))
        if "fill" in (doc.get("spec") or {}).get("modelCache", {})
    ]
    example = yaml.safe_load((root / "examples/dsv41-flash-gb200.yaml").read_text())
    spec = {**example["spec"], **snippet["spec"]}
    spec["model"] = {**example["spec"]["model"], **snippet["spec"]["model"]}
    obj = parse_serving({**example, "metadata": snippet["metadata"], "spec": spec})
    manifest = render_fill_job(obj, "registry.example.com/deepseek-operator:0.1.0")
    assert manifest["metadata"]["name"] == serving_fill_job_name(obj)
    assert f"`{manifest['metadata']['name']}`" in page  # the name the page shows is the real one
    # The page's claim is large enough for the catalogued checkpoint it fills.
    state = weights_state(obj, FillObserved(True, "600Gi"), None, NOW)
    assert state.create_job


def test_no_news_writes_nothing() -> None:
    gib = 1024**3
    running = FillPod("p", "Running", log_tail=progress(10 * gib, 100 * gib))
    first = weights_state(serving(), FillObserved(True, BIG, job(), running), None, NOW)
    again = weights_state(serving(), FillObserved(True, BIG, job(), running), first.status, LATER)
    assert again.status == first.status  # the same figures: the same status, its time too
    done = FillPod(
        "p", "Succeeded", exit_code=0, log_tail='{"event":"done","bytesTotal":8,"filesTotal":3}'
    )
    filled = weights_state(serving(), FillObserved(True, BIG, job("Complete"), done), None, NOW)
    # Once complete, the controller stops reading the pod: the totals come from the status.
    later = weights_state(serving(), FillObserved(True, BIG, job("Complete")), filled.status, LATER)
    assert later.ready and later.status == filled.status
