"""Rendering: argv order, pod template, Deployment/Service, multi-pod replicas, status."""

from __future__ import annotations

import jsonschema

from deepseek_operator.api.crd import build_crd
from deepseek_operator.api.load import ServingObject
from deepseek_operator.engine.decision import resolve
from deepseek_operator.render.argv import vllm_args
from deepseek_operator.render.status import build_status, status_dict, with_workload_applied
from deepseek_operator.render.workload import render_objects
from tests.unit.factories import gb200_pool, inventory, node, spec

SEED_ENGINE = {
    "maxModelLen": 1048576,
    "kvCacheDtype": "fp8",
    "maxNumSeqs": 64,
    "maxNumBatchedTokens": 8192,
    "enablePrefixCaching": False,
    "tokenizerMode": "deepseek_v41",
    "reasoningParser": "deepseek_v41",
    "speculativeConfig": {"method": "dspark", "num_speculative_tokens": 5},
    "enableDbo": False,
    "ubatchSize": 0,
    "extraArgs": ["--language-model-only"],
}


def _obj(**overrides: object) -> ServingObject:
    return ServingObject(
        name="dsv41", namespace="llm", spec=spec(**overrides), generation=3, uid="u-1"
    )


def test_argv_snapshot_in_fixed_order_with_explicit_moe_backend_and_extra_args_last() -> None:
    s = spec(
        model={
            "name": "deepseek-ai/DeepSeek-V4.1-Flash",
            "revision": "abc",
            "servedModelName": "dsv41",
        },
        engine=SEED_ENGINE,
    )
    res = resolve(s, gb200_pool())
    assert vllm_args(s, res) == [
        "deepseek-ai/DeepSeek-V4.1-Flash",
        "--revision", "abc",
        "--served-model-name", "dsv41",
        "--host", "0.0.0.0",
        "--port", "8000",
        "--tensor-parallel-size", "4",
        "--pipeline-parallel-size", "1",
        "--data-parallel-size", "1",
        "--enable-expert-parallel",
        "--distributed-executor-backend", "mp",
        "--moe-backend", "auto",
        "--max-model-len", "1048576",
        "--kv-cache-dtype", "fp8",
        "--max-num-seqs", "64",
        "--max-num-batched-tokens", "8192",
        "--no-enable-prefix-caching",
        "--tokenizer-mode", "deepseek_v41",
        "--reasoning-parser", "deepseek_v41",
        "--speculative-config", '{"method":"dspark","num_speculative_tokens":5}',
        "--language-model-only",
    ]  # fmt: skip


def test_deployment_pod_template_for_mega_moe() -> None:
    obj = _obj()
    res = resolve(obj.spec, gb200_pool())
    deploy, service = render_objects(obj, res)
    assert deploy["kind"] == "Deployment" and service["kind"] == "Service"
    assert deploy["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert deploy["metadata"]["ownerReferences"][0]["controller"] is True
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["vllm", "serve"]
    assert container["args"][container["args"].index("--moe-backend") + 1] == "deep_gemm_mega_moe"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert (
        container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"]
        >= 3600
    )
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in pod["volumes"]
    # Hardened: no token, no escalation, default seccomp, no raw sockets (Pod Security baseline).
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["NET_RAW"]},
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert any(
        {
            "key": "gpu.deepseek-operator.io/nvlink.fully-connected",
            "operator": "In",
            "values": ["true"],
        }
        in t["matchExpressions"]
        for t in terms
    )
    assert service["spec"]["ports"][0]["port"] == 8000
    assert (
        deploy["spec"]["selector"]["matchLabels"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    assert (
        service["spec"]["selector"].items()
        <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


def test_kept_auto_pins_only_by_gpu_memory_and_user_resources_are_kept() -> None:
    obj = _obj(resources={"requests": {"cpu": "16", "memory": "256Gi"}}, nodeSelector={"pool": "a"})
    res = resolve(obj.spec, inventory(node("h0", "NVIDIA-H200", labels={"pool": "a"})))
    deploy = render_objects(obj, res)[0]
    pod = deploy["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert keys == {"gpu.deepseek-operator.io/memory-mib", "nvidia.com/gpu.memory"}
    assert pod["nodeSelector"] == {"pool": "a"}
    assert pod["containers"][0]["resources"]["requests"] == {
        "cpu": "16",
        "memory": "256Gi",
        "nvidia.com/gpu": "4",
    }


def test_v41_on_four_h200_gpus_does_not_fit_and_says_so() -> None:
    # vLLM recipe: 614 GB; 4 x 143771 MiB = 603 GB is too little, 8 GPUs of an HGX H200 fit.
    h200 = {"nvidia.com/gpu.memory": "143771"}
    res = resolve(spec(), inventory(node("h0", "NVIDIA-H200", labels=h200)))
    assert not res.placement.placeable
    assert "below the 146390 MiB per GPU" in res.placement.message
    res8 = resolve(
        spec(parallelism={"tensorParallelSize": 8}),
        inventory(node("h0", "NVIDIA-H200", labels=h200)),
    )
    assert res8.placement.placeable and res8.eligible_nodes == ("h0",)


def test_unrunnable_explicit_backend_pins_pods_off_every_candidate() -> None:
    from deepseek_operator.render.affinity import node_matches

    obj = _obj(moeBackend="deep_gemm_mega_moe")
    h200 = node("h0", "NVIDIA-H200")
    res = resolve(obj.spec, inventory(h200))
    pod = render_objects(obj, res)[0]["spec"]["template"]["spec"]
    terms = [
        t["matchExpressions"]
        for t in pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
    ]
    assert not node_matches(h200["metadata"]["labels"], terms)
    assert node_matches(node("gb", "NVIDIA-GB200")["metadata"]["labels"], terms)
    fp8 = _obj(
        moeBackend="deep_gemm_mega_moe", model={"name": "deepseek-ai/DeepSeek-V4-Flash-Base"}
    )
    none = render_objects(fp8, resolve(fp8.spec, gb200_pool()))[0]["spec"]["template"]["spec"]
    exprs = none["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert exprs == [
        {
            "matchExpressions": [
                {
                    "key": "serving.deepseek-operator.io/backend-unrunnable",
                    "operator": "In",
                    "values": ["ExpertDtype"],
                }
            ]
        }
    ]


def test_status_conditions_and_stable_transition_times() -> None:
    res = resolve(spec(), gb200_pool())
    first = build_status(res, generation=3, ready_replicas=0, now="2026-01-01T00:00:00Z")
    doc = status_dict(first)
    conds = {c["type"]: c for c in doc["conditions"]}
    assert (
        conds["BackendResolved"]["status"] == "True"
        and conds["BackendResolved"]["reason"] == "MegaMoESelected"
    )
    assert conds["Placeable"]["status"] == "True"
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ReplicasNotReady"
    assert all(c["observedGeneration"] == 3 for c in doc["conditions"])
    assert doc["resolved"] == {
        "moeBackend": "deep_gemm_mega_moe",
        "sequenceParallel": True,
        "expertParallelSize": 4,
        "gpusPerPod": 4,
        "podsPerReplica": 1,
        "eligibleNodes": 4,
        "vllmVersion": "0.33.0",
    }
    second = status_dict(
        build_status(
            res,
            generation=3,
            ready_replicas=1,
            now="2026-01-01T01:00:00Z",
            previous_conditions=first.conditions,
        )
    )
    conds2 = {c["type"]: c for c in second["conditions"]}
    assert conds2["BackendResolved"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert (
        conds2["Ready"]["status"] == "True"
        and conds2["Ready"]["lastTransitionTime"] == "2026-01-01T01:00:00Z"
    )
    # What the operator writes is what the CRD's structural schema accepts.
    jsonschema.validate(second, build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"])  # fmt: skip


def test_a_refusal_carried_into_the_next_status_is_written_once_groups_and_all() -> None:
    from deepseek_operator.api import status as S

    res = resolve(spec(), gb200_pool())
    groups = [S.GroupStatus(index=0, leader_pod="a-0", nodes=["n0"], pods_ready=1, pods_total=2)]
    now = "2026-01-01T00:00:00Z"
    first = status_dict(build_status(res, generation=1, ready_replicas=0, now=now, groups=groups))
    foreign = ["Service/a-api already exists and has no owner: ..."]
    blocked = with_workload_applied(first, [], generation=1, now=now, foreign=foreign)
    ready = {c["type"]: c for c in blocked["conditions"]}["Ready"]
    assert ready["reason"] == "ForeignObjectInTheWay"
    assert ready["message"] == foreign[0] + "; groups: 0 not in an NVLink clique: 1/2 pods ready"
    # The next reconcile plans from what was written: the same status, so nothing is rewritten.
    previous = [S.Condition.model_validate(c) for c in blocked["conditions"]]
    again = status_dict(
        build_status(
            res, generation=1, ready_replicas=0, now=now, groups=groups,
            previous_conditions=previous,
        )
    )  # fmt: skip
    assert again == blocked
    assert with_workload_applied(again, [], generation=1, now=now, foreign=foreign) == again
