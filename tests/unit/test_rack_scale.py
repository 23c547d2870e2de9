"""Rack scale: multi-pod replicas as LeaderWorkerSets, NVLink cliques, ComputeDomains (pure core)."""

from __future__ import annotations

from typing import Any

from deepseek_operator import names
from deepseek_operator.api.load import ServingObject, parse_spec
from deepseek_operator.engine.cluster_apis import ClusterApis, ComputeDomainMode
from deepseek_operator.engine.decision import resolve
from deepseek_operator.nodes.facts import NodeInventory, build_inventory, node_facts
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.affinity import affinity_terms, node_matches
from deepseek_operator.render.status import build_status, status_dict
from deepseek_operator.render.workload import render_objects
from tests.racks import RACK_A, RACK_B, make_gb200_tray
from tests.unit.factories import inventory, node

# DEP8 over two GB200 trays: 4 DP ranks (one GPU each) per tray, as llm-d's wide-EP guide.
DEP8 = {"tensorParallelSize": 1, "dataParallelSize": 8, "dataParallelSizeLocal": 4}


def _spec(backend: str = "deep_gemm_mega_moe", **overrides: Any) -> Any:
    raw: dict[str, Any] = {
        "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
        "image": "vllm/vllm-openai:v0.33.0",
        "moeBackend": backend,
        "replicas": 2,
        "parallelism": {**DEP8, "expertParallel": True},
    }
    raw.update(overrides)
    return parse_spec(raw)


def _obj(backend: str = "deep_gemm_mega_moe", **overrides: Any) -> ServingObject:
    return ServingObject(
        name="dsv4", namespace="llm", spec=_spec(backend, **overrides), generation=1, uid="u-1"
    )


def _racks(per_rack: int = 2, *, pending: bool = True) -> NodeInventory:
    nodes = [
        make_gb200_tray(f"{r}{i}", clique, kwok=False)
        for r, clique in (("a", RACK_A), ("b", RACK_B))
        for i in range(per_rack)
    ]
    if pending:
        nodes.append(make_gb200_tray("pending", None, fabric="pending", kwok=False))
    return build_inventory(nodes)


def _pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    return {"leader": tmpl["leaderTemplate"]["spec"], "worker": tmpl["workerTemplate"]["spec"]}


def test_clique_read_from_gfd_else_agent_and_only_with_a_ready_fabric() -> None:
    both = node_facts(make_gb200_tray("t", RACK_A, kwok=False))
    assert (both.clique, both.clique_source) == (RACK_A.key, names.GFD_CLIQUE)
    agent_only = node_facts(make_gb200_tray("t", RACK_A, gfd_clique=False, kwok=False))
    assert (agent_only.clique, agent_only.clique_source) == (RACK_A.key, names.AGENT_MNNVL_CLIQUE)
    # GFD still shows the clique, but the agent says the fabric is degraded: not usable.
    degraded = make_gb200_tray("t", RACK_A, kwok=False)
    degraded["metadata"]["labels"][names.AGENT_MNNVL_STATE] = "degraded"
    assert node_facts(degraded).clique is None
    assert node_facts(make_gb200_tray("t", None, fabric="pending", kwok=False)).clique is None


def test_explicit_mega_moe_across_trays_groups_stay_in_one_clique_each() -> None:
    res = resolve(_spec(), _racks())
    assert res.backend_runnable and res.pods_per_replica == 2 and res.gpus_per_pod == 4
    assert res.clique_key == names.AGENT_MNNVL_CLIQUE
    clique = next(c for c in res.checks if c.name == "NVLinkClique")
    assert clique.passed and clique.rule == "A11"
    # Same clique id, different cluster UUIDs: two cliques, one group each.
    assert [(c.clique, c.groups) for c in res.placement.cliques] == [
        (RACK_A.key, 1),
        (RACK_B.key, 1),
    ]
    assert res.placement.placeable and res.placement.capacity == 2
    assert "pending" not in res.placement.eligible
    assert res.compute_domain is ComputeDomainMode.RENDERED


def test_three_replicas_do_not_fit_two_cliques_of_two_trays_and_the_message_names_them() -> None:
    res = resolve(_spec(replicas=3), _racks())
    assert not res.placement.placeable and res.placement.capacity == 2
    message = res.placement.message
    assert RACK_A.key in message and RACK_B.key in message and "pending" in message
    status = status_dict(build_status(res, generation=1, ready_replicas=0, now="t"))
    placeable = next(c for c in status["conditions"] if c["type"] == "Placeable")
    assert placeable["status"] == "False" and placeable["reason"] == "InsufficientNodes"
    assert status["resolved"]["nvlinkCliques"] == [RACK_A.key, RACK_B.key]


def test_one_tray_per_clique_cannot_hold_a_two_tray_group() -> None:
    small = build_inventory(
        [
            make_gb200_tray("a0", RACK_A, kwok=False),
            make_gb200_tray("b0", RACK_B, kwok=False),
        ]
    )
    res = resolve(_spec(replicas=1), small)
    clique = next(c for c in res.checks if c.name == "NVLinkClique")
    assert not clique.passed and "too small" in clique.message
    assert not res.backend_runnable  # an enforced node check of the explicit backend
    assert res.reason == "NVLinkCliqueFailed"


def test_explicit_mega_moe_across_nodes_without_any_clique_cannot_run() -> None:
    # B200 boxes: NVLink inside each node only, no multi-node NVLink clique.
    pool = inventory(*(node(f"b{i}", "NVIDIA-B200") for i in range(4)))
    res = resolve(_spec(parallelism={**DEP8, "dataParallelSizeLocal": 8, "dataParallelSize": 16,
                                     "expertParallel": True}), pool)  # fmt: skip
    assert res.reason == "NVLinkCliqueFailed" and not res.backend_runnable
    assert res.placement.eligible == ()  # pinned to no node: Pending, not crashing
    assert res.compute_domain is ComputeDomainMode.NOT_NEEDED


def test_auto_keeps_remote_dp_excluded_and_names_the_explicit_layout_the_pool_allows() -> None:
    res = resolve(_spec("auto"), _racks())
    assert res.moe_backend == "auto" and res.reason == "LocalDataParallelFailed"
    assert "moeBackend deep_gemm_mega_moe" in res.message
    assert "2 pods of 4 GPUs per replica" in res.message
    assert RACK_A.key in res.message and RACK_B.key in res.message
    # auto's pods are confined to cliques too (an MNNVL pool), without MegaMoE.
    assert res.clique_key is not None and res.placement.capacity == 2


def test_lws_rendered_leader_is_dp_head_workers_headless_with_node_rank_from_worker_index() -> None:
    obj = _obj()
    res = resolve(obj.spec, _racks())
    objects = render_objects(obj, res)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("ComputeDomain", "dsv4-imex"),
        ("LeaderWorkerSet", "dsv4"),
        # never "dsv4": that name is LeaderWorkerSet's headless Service (the leader's DNS name)
        ("Service", "dsv4-api"),
    ]
    lws = objects[1]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["replicas"] == 2
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 2 and tmpl["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    assert "--headless" not in leader["args"] and "--headless" in worker["args"]

    def flag(args: list[str], name: str) -> str:
        return args[args.index(name) + 1]

    assert flag(leader["args"], "--node-rank") == "0"
    assert flag(worker["args"], "--node-rank") == "$(LWS_WORKER_INDEX)"
    for args in (leader["args"], worker["args"]):
        assert flag(args, "--nnodes") == "2"
        assert flag(args, "--data-parallel-size") == "8"
        assert flag(args, "--data-parallel-size-local") == "4"
        assert flag(args, "--data-parallel-address") == "$(LWS_LEADER_ADDRESS)"
        assert flag(args, "--moe-backend") == "deep_gemm_mega_moe"
        assert "--enable-expert-parallel" in args
    assert "startupProbe" in leader and "startupProbe" not in worker
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "4"
    service = objects[2]
    assert service["spec"]["selector"][names.LABEL_ROLE] == "head"
    assert tmpl["leaderTemplate"]["metadata"]["labels"][names.LABEL_ROLE] == "head"


def test_pod_templates_confine_groups_to_a_clique_and_claim_the_imex_channel() -> None:
    obj = _obj()
    res = resolve(obj.spec, _racks())
    objects = render_objects(obj, res)
    for pod in _pod_specs(objects).values():
        required = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert required == [
            {
                "labelSelector": {"matchLabels": {names.LWS_NAME_LABEL: "dsv4"}},
                "matchLabelKeys": [names.LWS_GROUP_KEY_LABEL],
                "topologyKey": names.AGENT_MNNVL_CLIQUE,
            }
        ]
        assert pod["resourceClaims"] == [
            {"name": "imex-channel", "resourceClaimTemplateName": "dsv4-imex-channel"}
        ]
        assert pod["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]
    domain = objects[0]
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == "dsv4-imex-channel"
    assert domain["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_node_affinity_admits_exactly_the_nodes_the_engine_calls_eligible() -> None:
    pool = [
        make_gb200_tray("gfd-and-agent", RACK_A, kwok=False),
        make_gb200_tray("agent-only", RACK_B, gfd_clique=False, kwok=False),
        make_gb200_tray("gfd-only", RACK_B, agent=False, kwok=False),
        make_gb200_tray("pending", None, fabric="pending", kwok=False),
        make_gb200_tray("degraded", RACK_A, fabric="degraded", kwok=False),
    ]
    res = resolve(_spec(), build_inventory(pool))
    assert res.clique_key == names.GFD_CLIQUE  # not every clique node has the agent's label
    terms = affinity_terms(res.requirement)
    for raw in pool:
        facts = node_facts(raw)
        assert node_matches(facts.labels, terms) == res.requirement.admits(facts), raw


def test_no_leader_worker_set_api_renders_nothing_and_says_how_to_install_it() -> None:
    obj = _obj()
    planned = plan(obj, _racks(), Observed.offline(), "t", ClusterApis(leader_worker_set=False))
    assert planned.objects == []
    placeable = next(c for c in planned.status.conditions if c.type == "Placeable")
    assert placeable.status == "False" and placeable.reason == "LeaderWorkerSetNotInstalled"
    assert "LeaderWorkerSet" in placeable.message and "helm install lws" in placeable.message


def test_single_pod_replicas_stay_a_deployment_without_lws_or_compute_domain() -> None:
    obj = _obj(parallelism={"tensorParallelSize": 4, "expertParallel": True})
    planned = plan(obj, _racks(), Observed.offline(), "t", ClusterApis(leader_worker_set=False))
    assert [o["kind"] for o in planned.objects] == ["Deployment", "Service"]
    assert all(c.type != "ComputeDomain" for c in planned.status.conditions)


def test_mnnvl_pool_without_the_dra_driver_warns_and_claims_nothing() -> None:
    obj = _obj()
    planned = plan(obj, _racks(), Observed.offline(), "t", ClusterApis(compute_domain=False))
    assert [o["kind"] for o in planned.objects] == ["LeaderWorkerSet", "Service"]
    condition = next(c for c in planned.status.conditions if c.type == "ComputeDomain")
    assert condition.status == "False" and condition.reason == "DRADriverNotInstalled"
    assert "pair closure" in condition.message
    for pod in _pod_specs(planned.objects).values():
        assert "resourceClaims" not in pod
    disabled = plan(
        obj, _racks(), Observed.offline(), "t", ClusterApis(compute_domain_enabled=False)
    )
    assert [o["kind"] for o in disabled.objects] == ["LeaderWorkerSet", "Service"]
    condition = next(c for c in disabled.status.conditions if c.type == "ComputeDomain")
    assert condition.reason == "ComputeDomainDisabled"


def test_ready_replicas_come_from_the_lws_ready_groups() -> None:
    obj = _obj()
    lws = {"kind": "LeaderWorkerSet", "status": {"readyReplicas": 1, "replicas": 2}}
    observed = Observed(children={("LeaderWorkerSet", "dsv4"): lws})
    planned = plan(obj, _racks(), observed, "t")
    assert planned.status.ready_replicas == 1


def test_every_supported_vllm_release_accepts_every_flag_of_the_lws_pods() -> None:
    from deepseek_operator.catalog.vllm import supported_releases, vllm_release

    obj = _obj()
    res = resolve(obj.spec, _racks())
    flags = {
        a
        for pod in _pod_specs(render_objects(obj, res)).values()
        for a in pod["containers"][0]["args"]
        if a.startswith("--")
    }
    assert {"--nnodes", "--node-rank", "--headless", "--data-parallel-address"} <= flags
    for release in supported_releases():
        options = vllm_release(release).serve_options
        assert flags <= set(options), (release, sorted(flags - set(options)))


def test_multi_pod_replica_with_the_ray_executor_is_refused_by_the_release_rule() -> None:
    # vLLM's ParallelConfig: nnodes > 1 only with the mp/uni executor (catalog/vllm multi_node).
    ray = _spec(parallelism={**DEP8, "expertParallel": True, "distributedExecutorBackend": "ray"})
    res = resolve(ray, _racks())
    executor = next(c for c in res.checks if c.name == "MultiNodeExecutor")
    assert not executor.passed and "distributedExecutorBackend ray" in executor.message
    assert "mp or uni" in executor.message
    assert res.reason == "MultiNodeExecutorFailed" and not res.backend_runnable
    assert res.placement.eligible == ()  # pinned to no node: Pending, not crashing
    mp = resolve(_spec(), _racks())
    assert next(c for c in mp.checks if c.name == "MultiNodeExecutor").passed
    # One pod per replica: no --nnodes, so the executor is no multi-node matter.
    single = resolve(_spec(parallelism={"tensorParallelSize": 4, "expertParallel": True,
                                        "distributedExecutorBackend": "ray"}), _racks())  # fmt: skip
    assert all(c.name != "MultiNodeExecutor" for c in single.checks)


def test_one_nvlink_clique_rule_comes_from_the_release_table(monkeypatch: Any) -> None:
    import dataclasses

    from deepseek_operator.catalog.vllm import supported_releases
    from deepseek_operator.catalog.vllm.rules import release_rules
    from deepseek_operator.engine import release as release_module

    for version in supported_releases():
        rules = release_rules(version)
        assert rules.needs_one_nvlink_domain("deep_gemm_mega_moe")
        assert not rules.needs_one_nvlink_domain("triton")
    # A release whose MegaMoE did not rendezvous symmetric memory would not confine groups:
    # the decision asks the table, not a hard-coded backend list.
    real = release_rules("0.33.0")
    without = dataclasses.replace(
        real, data=dataclasses.replace(real.data, mega_moe_symmetric_memory=False)
    )
    monkeypatch.setattr(release_module, "release_rules", lambda _version: without)
    res = resolve(_spec(), _racks())
    assert all(c.name != "NVLinkClique" for c in res.checks) and res.backend_runnable
