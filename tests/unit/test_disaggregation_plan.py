"""A disaggregated DeepSeekServing through plan(): a decision, workload, Service and status per
role, the KV-transfer flags, env and ports, the KV-transfer refusals, and never half a pair."""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import yaml

from deepseek_operator.actions.roles import plan_decision_actions, rolling_roles
from deepseek_operator.api.load import parse_serving
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.plan import Observed, Plan, plan
from tests.dra_slices import dra_only_pool, gpu_claim
from tests.gpu_nodes import HEALTHY_GB200_AGENT_LABELS as AGENT_OK
from tests.gpu_nodes import make_gpu_node

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-12-04T00:00:00Z"
HALF_A_PAIR = "(half a pair would load weights for nothing)"


def _raw(name: str = "dsv41-flash-1p1d-gb200.yaml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


def _nodes(name: str) -> NodeInventory:
    return build_inventory(yaml.safe_load((ROOT / "examples" / name).read_text())["items"])


def _plan(raw: dict[str, Any], nodes: str = "nodes-gb200.yaml", **kw: Any) -> Plan:
    return plan(
        parse_serving(copy.deepcopy(raw)),
        _nodes(nodes),
        kw.get("observed", Observed.offline()),
        NOW,
    )


def _role(raw: dict[str, Any], kind: str) -> dict[str, Any]:
    role: dict[str, Any] = next(
        r for r in raw["spec"]["disaggregation"]["roles"] if r["role"] == kind
    )
    return role


def _workload(p: Plan, role: str) -> dict[str, Any]:
    return next(
        o
        for o in p.objects
        if o["kind"] in ("Deployment", "LeaderWorkerSet") and o["metadata"]["name"].endswith(role)
    )


def _container(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = template["spec"]["containers"][0]
    return container


def test_each_role_gets_a_workload_and_a_service_named_after_it() -> None:
    p = _plan(_raw())
    assert [(o["kind"], o["metadata"]["name"]) for o in p.objects] == [
        # The fence first (no engine pod starts unfenced), the pools, then the router.
        ("NetworkPolicy", "dsv41-pd-prefill-engines"),
        ("NetworkPolicy", "dsv41-pd-decode-engines"),
        ("NetworkPolicy", "dsv41-pd-api"),
        ("Deployment", "dsv41-pd-prefill"),
        ("Service", "dsv41-pd-prefill-api"),
        ("Deployment", "dsv41-pd-decode"),
        ("Service", "dsv41-pd-decode-api"),
        ("ServiceAccount", "dsv41-pd-api"),
        ("Role", "dsv41-pd-api"),
        ("RoleBinding", "dsv41-pd-api"),
        ("Deployment", "dsv41-pd-api"),
        ("Service", "dsv41-pd-api"),
    ]
    for role in ("prefill", "decode"):
        deployment = _workload(p, role)
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["serving.deepseek-operator.io/pd-role"] == role
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels["llm-d.ai/role"] == role
        # The serving's own name, not the role's, names the owner and the serving label.
        assert deployment["metadata"]["labels"]["serving.deepseek-operator.io/name"] == "dsv41-pd"
        service = next(o for o in p.objects if o["metadata"]["name"] == f"dsv41-pd-{role}-api")
        assert service["spec"]["selector"] == selector


@pytest.mark.parametrize(
    ("role", "kv_role"), [("prefill", "kv_producer"), ("decode", "kv_consumer")]
)
def test_each_role_renders_its_kv_role_the_side_channel_and_ucx(role: str, kv_role: str) -> None:
    container = _container(_workload(_plan(_raw()), role)["spec"]["template"])
    args = container["args"]
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "NixlConnector", "kv_role": kv_role}
    # Before the extraArgs, which come last and verbatim.
    assert args.index("--kv-transfer-config") < args.index("--language-model-only")
    env = {e["name"]: e for e in container["env"]}
    assert (
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    )
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == "5600"
    assert "rc" in env["UCX_TLS"]["value"].split(",")
    assert {"name": "nixl-0", "containerPort": 5600, "protocol": "TCP"} in container["ports"]


def test_roles_decide_their_own_backend_and_batch_shape() -> None:
    p = _plan(_raw())
    prefill, decode = p.roles
    assert (prefill.role, prefill.resolution.reason) == ("prefill", "Explicit")
    assert (decode.role, decode.resolution.reason) == ("decode", "MegaMoESelected")
    args = {
        r: _container(_workload(p, r)["spec"]["template"])["args"] for r in ("prefill", "decode")
    }
    assert args["prefill"][args["prefill"].index("--max-num-batched-tokens") + 1] == "16384"
    assert args["decode"][args["decode"].index("--max-num-batched-tokens") + 1] == "1024"
    assert "--enforce-eager" in args["prefill"] and "--enforce-eager" not in args["decode"]
    status = p.status
    assert status.roles is not None and [r.role for r in status.roles] == ["prefill", "decode"]
    assert status.resolved is None
    resolved = {c.type: c for c in status.conditions}["BackendResolved"]
    assert (resolved.status, resolved.reason) == ("True", "RolesResolved")
    assert resolved.message.startswith("prefill: ") and " | decode: " in resolved.message


def test_a_role_that_cannot_run_renders_neither_role() -> None:
    # Explicit MegaMoE needs SM100; on H200 nodes the prefill role cannot run.
    p = _plan(_raw(), "nodes-h200.yaml")
    assert p.objects == [] and p.holds_children
    ready = {c.type: c for c in p.status.conditions}["Ready"]
    assert ready.message.endswith(
        "nothing is created until both roles can run (half a pair would load weights for nothing)"
    )
    assert not _plan(_raw()).holds_children
    resolved = {c.type: c for c in p.status.conditions}["BackendResolved"]
    assert resolved.status == "False"
    assert resolved.reason == p.roles[0].resolution.reason != "RolesResolved"
    assert p.resolution is p.roles[0].resolution  # the role that cannot run speaks for the pair


def _failed(p: Plan, role: str) -> dict[str, str]:
    res = next(d.resolution for d in p.roles if d.role == role)
    return {c.name: c.message for c in res.checks if not c.passed}


def test_decode_with_prefill_context_parallel_is_refused_by_nixl() -> None:
    raw = _raw()
    _role(raw, "decode")["parallelism"]["prefillContextParallelSize"] = 2
    failed = _failed(_plan(raw), "decode")
    assert "kv_producer only" in failed["KVTransferContextParallel"]
    # V4.1's own PCP guard refuses KV transfer too (0.33.0).
    assert "KV transfer (a disaggregated role)" in failed["ContextParallel"]


@pytest.mark.parametrize(("dcp", "refused"), [(2, True), (4, False)])
def test_decode_context_parallel_must_be_one_or_the_transfer_tp(dcp: int, refused: bool) -> None:
    raw = _raw()  # TP4: the NIXL transfer parallel size is 4
    _role(raw, "decode")["parallelism"]["decodeContextParallelSize"] = dcp
    assert ("KVTransferDecodeContextParallel" in _failed(_plan(raw), "decode")) is refused


def test_prefill_context_parallel_with_dcp_needs_tp1_and_dcp_equal_to_pcp() -> None:
    raw = _raw()
    _role(raw, "prefill")["parallelism"].update(
        prefillContextParallelSize=2, decodeContextParallelSize=2
    )
    failed = _failed(_plan(raw), "prefill")
    assert "PCP+DCP requires TP1" in failed["KVTransferContextParallel"]


@pytest.mark.parametrize(("cumem", "refused"), [(False, True), (True, False)])
def test_expandable_segments_need_the_cumem_allocator(cumem: bool, refused: bool) -> None:
    raw = _raw()
    raw["spec"]["env"].append(
        {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}
    )
    args = raw["spec"]["engine"]["extraArgs"]
    if not cumem:
        args.remove("--enable-cumem-allocator")
    failed = _failed(_plan(raw), "prefill")
    assert ("KVTransferAllocator" in failed) is refused


def test_the_aggregated_serving_has_no_roles_and_no_kv_transfer() -> None:
    p = _plan(_raw("dsv41-flash-gb200.yaml"))
    assert p.roles == () and p.status.roles is None
    args = _container(p.objects[0]["spec"]["template"])["args"]
    assert "--kv-transfer-config" not in args
    assert not any(c.name.startswith("KVTransfer") for c in p.resolution.checks)


def _dep8(raw: dict[str, Any]) -> dict[str, Any]:
    for role in raw["spec"]["disaggregation"]["roles"]:
        role["parallelism"] = {
            "tensorParallelSize": 1,
            "dataParallelSize": 8,
            "dataParallelSizeLocal": 4,
            "expertParallel": True,
        }
    return raw


def test_a_multi_pod_role_declares_the_side_channel_port_of_each_dp_rank() -> None:
    p = _plan(_dep8(_raw()), "nodes-gb200-two-racks.yaml")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in p.objects]
    # One ComputeDomain for both roles, so their pods share an IMEX domain.
    assert kinds.count(("ComputeDomain", "dsv41-pd-imex")) == 1
    lws = _workload(p, "decode")["spec"]["leaderWorkerTemplate"]
    leader = [q["containerPort"] for q in _container(lws["leaderTemplate"])["ports"][1:]]
    worker = [q["containerPort"] for q in _container(lws["workerTemplate"])["ports"][1:]]
    assert (leader, worker) == ([5600, 5601, 5602, 5603], [5604, 5605, 5606, 5607])
    # Both roles have eligible trays in one clique: MNNVL for UCX, and each role's pods prefer
    # the clique where the other role's pods run.
    env = {e["name"]: e.get("value") for e in _container(lws["leaderTemplate"])["env"]}
    assert env["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"
    preferred = lws["leaderTemplate"]["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    peer = preferred[0]["podAffinityTerm"]
    assert peer["labelSelector"]["matchExpressions"][0]["values"] == ["decode"]
    assert (
        peer["topologyKey"]
        == lws["leaderTemplate"]["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ][0]["topologyKey"]
    )


def _observed_after(p: Plan) -> Observed:
    children = {(o["kind"], o["metadata"]["name"]): o for o in p.objects}
    return Observed(generation=1, status=p.status, children=children)


def test_a_decode_backend_change_rolls_the_decode_pool_only() -> None:
    raw = _raw()
    before = _plan(raw)
    _role(raw, "decode")["moeBackend"] = "flashinfer_trtllm"
    after = _plan(raw)
    assert rolling_roles(_observed_after(before), after) == ["decode"]
    events = [
        a.message
        for a in plan_decision_actions(_observed_after(before), after)
        if hasattr(a, "message")
    ]
    assert any("the decode pool only" in m for m in events)


def test_rolling_reads_children_as_the_stores_keep_them_packed() -> None:
    from deepseek_operator.actions import PACKED_BODY, pack_body

    raw = _raw()
    before = _plan(raw)
    _role(raw, "decode")["moeBackend"] = "flashinfer_trtllm"
    children = {
        (o["kind"], o["metadata"]["name"]): {
            "kind": o["kind"],
            "metadata": {"name": o["metadata"]["name"]},
            PACKED_BODY: pack_body(o),
        }
        for o in before.objects
    }
    observed = Observed(generation=1, status=before.status, children=children)
    assert rolling_roles(observed, _plan(raw)) == ["decode"]


def test_a_kv_cache_dtype_change_rolls_both_pools() -> None:
    raw = _raw()
    before = _plan(raw)
    raw["spec"]["engine"]["kvCacheDtype"] = "auto"
    assert rolling_roles(_observed_after(before), _plan(raw)) == ["prefill", "decode"]


def _racks_and_hgx() -> NodeInventory:
    """Two NVL72 racks of GB200 trays (4 GPUs, NVLink cliques) and two HGX B200 nodes (8 GPUs,
    in no clique): a TP8 pod fits only on the B200s."""
    from tests.gpu_nodes import agent_labels, make_gpu_node

    racks = yaml.safe_load((ROOT / "examples/nodes-gb200-two-racks.yaml").read_text())["items"]
    hgx = [
        make_gpu_node(
            f"hgx-b200-{i}",
            "NVIDIA-B200",
            agent_labels=agent_labels("NVIDIA-B200"),
            kwok=False,
            gfd_memory=False,
        )
        for i in range(2)
    ]
    return build_inventory([*racks, *hgx])


def _plan_on(raw: dict[str, Any], inventory: NodeInventory) -> Plan:
    return plan(parse_serving(copy.deepcopy(raw)), inventory, Observed.offline(), NOW)


def _template(p: Plan, role: str) -> Any:
    spec = _workload(p, role)["spec"]
    return spec.get("template") or spec.get("leaderWorkerTemplate")


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda d: d["engine"].update(maxNumSeqs=512), id="batch-shape"),
        pytest.param(lambda d: d.update(moeBackend="flashinfer_trtllm"), id="backend"),
        # TP 4 -> 8: a decode pod now fits only on the HGX B200s, in no NVLink clique, so no
        # clique has eligible nodes of both roles any more.
        pytest.param(
            lambda d: d.update(parallelism={"tensorParallelSize": 8, "expertParallel": True}),
            id="layout-across-cliques",
        ),
    ],
)
def test_a_decode_only_edit_never_rewrites_the_prefill_pod_template(edit: Any) -> None:
    inventory = _racks_and_hgx()
    raw = _raw()
    before = _plan_on(raw, inventory)
    prefill = _template(before, "prefill")
    # The prefill pods prefer the clique of the decode pods (their own nodes are in cliques).
    preferred = prefill["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["podAffinityTerm"]["labelSelector"]["matchExpressions"][0]["values"] == [
        "prefill"
    ]
    edit(_role(raw, "decode"))
    after = _plan_on(raw, inventory)
    assert _template(after, "prefill") == prefill
    assert _template(after, "decode") != _template(before, "decode")
    assert rolling_roles(_observed_after(before), after) == ["decode"]


def test_a_role_outside_every_clique_has_no_peer_term_and_says_the_path_in_status() -> None:
    raw = _raw()
    _role(raw, "decode")["parallelism"] = {"tensorParallelSize": 8, "expertParallel": True}
    p = _plan_on(raw, _racks_and_hgx())
    decode = _template(p, "decode")["spec"]
    assert "podAffinity" not in decode.get("affinity", {})  # its own nodes are in no clique
    assert "podAffinity" in _template(p, "prefill")["spec"]["affinity"]
    path = next(c for c in p.roles[0].resolution.checks if c.name == "KVTransferPath")
    assert not path.passed and "no NVLink clique has eligible nodes of both roles" in path.message


def test_a_hashed_edit_still_rolls_both_pools_across_cliques() -> None:
    inventory = _racks_and_hgx()
    raw = _raw()
    _role(raw, "decode")["parallelism"] = {"tensorParallelSize": 8, "expertParallel": True}
    before = _plan_on(raw, inventory)
    raw["spec"]["engine"]["kvCacheDtype"] = "auto"
    assert rolling_roles(_observed_after(before), _plan_on(raw, inventory)) == [
        "prefill",
        "decode",
    ]


def _too_big() -> dict[str, Any]:
    raw = _raw()
    _role(raw, "prefill")["replicas"] = 2
    _role(raw, "decode")["replicas"] = 3  # 5 trays' worth on 4 trays
    return raw


def test_a_shape_that_fits_each_pool_alone_but_not_both_is_not_placeable() -> None:
    p = _plan(_too_big())
    for decided in p.roles:
        assert decided.resolution.placement.capacity >= decided.resolution.replicas  # alone: fits
        assert not decided.resolution.placement.placeable
        assert "decode 2/3 pod(s)" in decided.resolution.placement.message
    placeable = {c.type: c for c in p.status.conditions}["Placeable"]
    assert (placeable.status, placeable.reason) == ("False", "InsufficientNodes")


def test_a_pair_that_cannot_be_placed_together_is_not_created() -> None:
    """Two DRA-only GB200 trays, one device already claimed by another workload: each TP4 pool
    fits alone, not both. render refuses; the operator's plan creates neither role."""
    trays = [make_gpu_node(f"t{i}", "NVIDIA-GB200", agent_labels=AGENT_OK) for i in range(2)]
    twins, slices = dra_only_pool(trays)
    held = gpu_claim("other-gpus", "t1", ["gpu-0"], namespace="other", pod="other-0")
    inventory = build_inventory(twins, slices, [held])
    p = plan(parse_serving(_raw()), inventory, Observed.offline(), NOW)
    for decided in p.roles:
        assert decided.resolution.placement.capacity == 1  # alone: fits
        assert "hold each pool alone but not both together" in decided.resolution.placement.message
    assert p.objects == [] and p.holds_children
    ready = {c.type: c for c in p.status.conditions}["Ready"]
    assert ready.message.endswith("nothing is created until both roles can run " + HALF_A_PAIR)
    # The claim gone, the pair fits and both roles are written.
    free = plan(parse_serving(_raw()), build_inventory(twins, slices), Observed.offline(), NOW)
    assert not free.holds_children and free.objects


def _tp8_decode() -> dict[str, Any]:
    raw = _raw()
    _role(raw, "decode")["parallelism"] = {"tensorParallelSize": 8, "expertParallel": True}
    return raw


def test_roles_whose_nodes_are_of_two_gpu_generations_are_not_placed() -> None:
    """Prefill's MegaMoE needs GB200 trays, a TP8 decode pod fits only the 8-GPU H200 nodes:
    vLLM would pick a different attention backend per role, a factor of the NIXL hash."""
    p = _plan(_tp8_decode(), "nodes-mixed.yaml")
    assert p.objects == [] and p.holds_children
    for decided in p.roles:
        check = next(c for c in decided.resolution.checks if c.name == "RolesOneGPUGeneration")
        assert not check.passed
        assert "prefill on sm100 (gb200-tray-0, gb200-tray-1)" in check.message
        assert "decode on sm90 (h200-node-0, h200-node-1)" in check.message
        assert not decided.resolution.placement.placeable
    # The 1P1D example (TP4 per role) on the same pool: both roles on the GB200 trays.
    ok = _plan(_raw(), "nodes-mixed.yaml")
    for decided in ok.roles:
        check = next(c for c in decided.resolution.checks if c.name == "RolesOneGPUGeneration")
        assert check.passed and "sm100" in check.message


def test_render_refuses_a_pair_on_two_gpu_generations(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(_tp8_decode()))
    out = subprocess.run(
        [
            *(sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)),
            *("--nodes", str(ROOT / "examples/nodes-mixed.yaml")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 1 and out.stdout == ""
    assert "cannot be placed: the eligible nodes span GPU generations sm100, sm90" in out.stderr


def test_render_refuses_a_shape_that_cannot_be_placed_in_one_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(_too_big()))
    out = subprocess.run(
        [
            *(sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)),
            *("--nodes", str(ROOT / "examples/nodes-gb200.yaml")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "spec.disaggregation.roles: cannot be placed" in lines[0]
    assert "Traceback" not in out.stderr


def _with_picker(raw: dict[str, Any]) -> dict[str, Any]:
    raw["spec"]["disaggregation"]["endpointPicker"] = {"name": "llm-d-epp", "port": 9002}
    return raw


def test_an_endpoint_picker_gets_an_inference_pool_over_the_http_pods() -> None:
    p = _plan(_with_picker(_dep8(_raw())), "nodes-gb200-two-racks.yaml")
    pool = next(o for o in p.objects if o["kind"] == "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["endpointPickerRef"] == {"name": "llm-d-epp", "port": {"number": 9002}}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    selector = pool["spec"]["selector"]["matchLabels"]
    for role in ("prefill", "decode"):
        lws = _workload(p, role)["spec"]["leaderWorkerTemplate"]
        leader = lws["leaderTemplate"]["metadata"]["labels"]
        worker = lws["workerTemplate"]["metadata"]["labels"]
        assert selector.items() <= leader.items()  # the leader serves HTTP: in the pool
        assert not selector.items() <= worker.items()  # a headless worker does not
    checks = {c.name: c for c in p.roles[0].resolution.checks}
    assert checks["InferencePool"].passed


def test_no_inference_pool_without_its_crd_or_without_an_endpoint_picker() -> None:
    from deepseek_operator.engine.cluster_apis import ClusterApis

    raw = _with_picker(_raw())
    p = plan(
        parse_serving(raw),
        _nodes("nodes-gb200.yaml"),
        Observed.offline(),
        NOW,
        ClusterApis(inference_pool=False),
    )
    assert "InferencePool" not in [o["kind"] for o in p.objects]
    check = next(c for c in p.roles[1].resolution.checks if c.name == "InferencePool")
    assert not check.passed and "Gateway API Inference Extension" in check.message
    assert "InferencePool" not in [o["kind"] for o in _plan(_raw()).objects]


def test_an_edit_that_makes_a_role_unrunnable_holds_the_live_pair() -> None:
    from deepseek_operator.actions import Apply, Delete
    from deepseek_operator.commands.cluster_actions import cluster_actions
    from deepseek_operator.engine.cluster_apis import ClusterApis

    raw = _raw()
    raw["metadata"].update(uid="uid-pd", generation=1)
    running = _plan(raw)
    children = {}
    for child in running.objects:
        live = copy.deepcopy(child)
        live["metadata"].setdefault(
            "ownerReferences", [{"controller": True, "uid": "uid-pd", "kind": "DeepSeekServing"}]
        )
        children[(child["kind"], child["metadata"]["name"])] = live
    assert any(kind == "LeaderWorkerSet" or kind == "Deployment" for kind, _ in children)
    edited = copy.deepcopy(raw)
    # NixlConnector refuses prefill context parallel in a consumer: decode cannot run.
    _role(edited, "decode")["parallelism"]["prefillContextParallelSize"] = 2
    live_body = {"metadata": {**raw["metadata"], "generation": 2}, "status": {}}
    acts = cluster_actions(
        parse_serving(copy.deepcopy(edited)),
        live_body,
        children,
        _nodes("nodes-gb200.yaml"),
        NOW,
        ClusterApis(),
    )
    assert acts and not [a for a in acts if isinstance(a, Apply | Delete)]
    held = _plan(edited, observed=Observed.from_body(live_body, children))
    ready = {c.type: c for c in held.status.conditions}["Ready"]
    assert "held as it is: its workloads are neither changed nor deleted" in ready.message
    # The same edit against no live pair: nothing to hold, nothing created.
    assert not [
        a
        for a in cluster_actions(
            parse_serving(copy.deepcopy(edited)),
            None,
            {},
            _nodes("nodes-gb200.yaml"),
            NOW,
            ClusterApis(),
        )
        if isinstance(a, Apply | Delete)
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--additional-config", '{"decode_backend": "latency_specialized"}'],
        [
            '--additional_config={"decode_backend": "auto"}',
            "--additional-config.decode_backend=latency_specialized",
        ],
    ],
)
def test_v41_specialized_decode_refuses_kv_transfer_where_the_release_has_it(
    args: list[str],
) -> None:
    raw = _raw()
    _role(raw, "decode")["engine"]["extraArgs"] = args
    failed = _failed(_plan(raw), "decode")
    assert "needs no LoRA, KV transfer or batch invariance" in failed["KVTransferSpecializedDecode"]
    raw["spec"]["vllmVersion"] = "0.32.0"
    older = next(d.resolution for d in _plan(raw).roles if d.role == "decode")
    check = next(c for c in older.checks if c.name == "KVTransferSpecializedDecode")
    assert check.passed and "has no specialized decode and ignores it" in check.message


def test_stock_decode_backend_is_not_checked() -> None:
    raw = _raw()
    _role(raw, "decode")["engine"]["extraArgs"] = [
        "--additional-config",
        '{"decode_backend": "latency_specialized"}',
        '--additional-config={"decode_backend": "auto"}',  # a later config replaces it
    ]
    res = next(d.resolution for d in _plan(raw).roles if d.role == "decode")
    assert "KVTransferSpecializedDecode" not in {c.name for c in res.checks}
