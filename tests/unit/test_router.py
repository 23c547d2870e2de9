"""The vLLM router in front of a serving, through plan(): its children, argv, selectors, pod
hardening, NetworkPolicies, status (endpoint, router, Ready) and the refusals of spec.router."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.errors import SpecError
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, Plan, plan

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOW = "2026-12-06T00:00:00Z"
ROUTER_NAME = "app.kubernetes.io/name"


def _raw(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    return raw


PD = ("dsv41-flash-1p1d-gb200.yaml", "nodes-gb200.yaml")
PD_MULTI_POD = ("dsv4-pro-3p2d-nvl72.yaml", "nodes-gb200-nvl72.yaml")
AGG = ("dsv41-flash-gb200.yaml", "nodes-gb200.yaml")
AGG_MULTI_POD = ("dsv41-flash-dep8-nvl72.yaml", "nodes-gb200-nvl72.yaml")


def _plan(
    example: tuple[str, str],
    router: dict[str, Any] | None = None,
    observed: Observed | None = None,
    apis: ClusterApis | None = None,
    **spec: Any,
) -> Plan:
    raw = copy.deepcopy(_raw(example[0]))
    if router is not None:
        raw["spec"]["router"] = router
    raw["spec"].update(spec)
    nodes = yaml.safe_load((ROOT / "examples" / example[1]).read_text())["items"]
    return plan(
        parse_serving(raw), build_inventory(nodes), observed or Observed.offline(), NOW, apis
    )


def _one(p: Plan, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in p.objects if (o["kind"], o["metadata"]["name"]) == (kind, name))


def _kinds(p: Plan) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in p.objects]


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _templates(p: Plan) -> dict[str, list[dict[str, str]]]:
    """Pod labels of every rendered pod template, by kind of pod (prefill/decode/aggregated/router)."""
    out: dict[str, list[dict[str, str]]] = {}
    for o in p.objects:
        spec = o.get("spec") or {}
        templates = [spec["template"]] if "template" in spec else []
        if "leaderWorkerTemplate" in spec:
            lwt = spec["leaderWorkerTemplate"]
            templates = [lwt["leaderTemplate"], lwt["workerTemplate"]]
        for t in templates:
            labels = t["metadata"]["labels"]
            key = labels.get("serving.deepseek-operator.io/pd-role") or (
                "router" if labels[ROUTER_NAME] == "deepseek-router" else "engine"
            )
            out.setdefault(key, []).append(labels)
    return out


def _selectors(args: list[str], flag: str) -> dict[str, str]:
    i = args.index(flag) + 1
    out = {}
    while i < len(args) and not args[i].startswith("--"):
        key, _, value = args[i].partition("=")
        out[key] = value
        i += 1
    return out


def _router_args(p: Plan, name: str) -> list[str]:
    args: list[str] = _one(p, "Deployment", name)["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    return args


@pytest.mark.parametrize("example", [PD, PD_MULTI_POD], ids=["1P1D", "3P2D multi-pod"])
def test_a_disaggregated_serving_gets_the_router_by_default(example: tuple[str, str]) -> None:
    p = _plan(example)
    name = p.objects[0]["metadata"]["labels"]["serving.deepseek-operator.io/name"] + "-api"
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"):
        assert (kind, name) in _kinds(p), kind
    args = _router_args(p, name)
    assert args[:6] == ["--host", "0.0.0.0", "--port", "8000", "--policy", "cache_aware"]
    assert "--vllm-pd-disaggregation" in args and "--service-discovery" in args
    namespace = p.objects[0]["metadata"]["namespace"]
    assert args[args.index("--service-discovery-namespace") + 1] == namespace
    # The Service named after the serving selects the router pods only.
    service = _one(p, "Service", name)
    assert service["spec"]["selector"][ROUTER_NAME] == "deepseek-router"


@pytest.mark.parametrize("example", [PD, PD_MULTI_POD], ids=["1P1D", "3P2D multi-pod"])
def test_each_role_selector_matches_its_own_http_pods_and_nothing_else(
    example: tuple[str, str],
) -> None:
    p = _plan(example)
    name = next(o for o in p.objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    args = _router_args(p, name)
    templates = _templates(p)
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        selector = _selectors(args, f"--{role}-selector")
        heads = [
            t for t in templates[role] if t.get("serving.deepseek-operator.io/role") != "worker"
        ]
        assert heads and all(_matches(selector, t) for t in heads)
        # Not the other role's pods, not headless LeaderWorkerSet workers, not the router.
        assert not any(_matches(selector, t) for t in templates[other])
        assert not any(
            _matches(selector, t)
            for t in templates[role]
            if t.get("serving.deepseek-operator.io/role") == "worker"
        )
        assert not any(_matches(selector, t) for t in templates["router"])


def test_an_aggregated_serving_runs_no_router_unless_asked() -> None:
    p = _plan(AGG)
    assert [k for k, _ in _kinds(p)] == ["Deployment", "Service"]
    assert p.status.router is None
    assert (
        p.status.endpoint is not None and p.status.endpoint.url == "http://dsv41-api.llm.svc:8000"
    )


@pytest.mark.parametrize(
    ("example", "head_only"), [(AGG, False), (AGG_MULTI_POD, True)], ids=["single-pod", "multi-pod"]
)
def test_an_aggregated_serving_that_asks_gets_the_router_in_regular_mode(
    example: tuple[str, str], head_only: bool
) -> None:
    p = _plan(example, router={"enabled": True, "policy": "power_of_two", "replicas": 2})
    name = next(o for o in p.objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    args = _router_args(p, name)
    assert "--vllm-pd-disaggregation" not in args and "--policy" in args
    assert args[args.index("--policy") + 1] == "power_of_two"
    selector = _selectors(args, "--selector")
    templates = _templates(p)
    assert (selector.get("serving.deepseek-operator.io/role") == "head") is head_only
    assert any(_matches(selector, t) for t in templates["engine"])
    assert not any(_matches(selector, t) for t in templates["router"])
    # One Service <name>-api, and it is the router's.
    services = [o for o in p.objects if o["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services] == [name]
    assert services[0]["spec"]["selector"][ROUTER_NAME] == "deepseek-router"
    assert _one(p, "Deployment", name)["spec"]["replicas"] == 2


def test_router_disabled_leaves_routing_to_the_users_gateway() -> None:
    p = _plan(PD, router={"enabled": False})
    assert not any(o["kind"] in ("ServiceAccount", "Role", "RoleBinding") for o in p.objects)
    assert ("Service", "dsv41-pd-api") not in _kinds(p)
    assert p.status.endpoint is None and p.status.router is None
    # The side channel stays fenced; the HTTP port stays open to every pod.
    prefill = _one(p, "NetworkPolicy", "dsv41-pd-prefill-engines")["spec"]["ingress"]
    assert prefill[0] == {"ports": [{"protocol": "TCP", "port": 8000}]}


def test_the_router_pod_is_hardened_for_restricted_pod_security() -> None:
    p = _plan(PD)
    pod = _one(p, "Deployment", "dsv41-pd-api")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["serviceAccountName"] == "dsv41-pd-api" and pod["automountServiceAccountToken"]
    assert "nodeSelector" not in pod and "tolerations" not in pod  # no GPU node needed
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}


def test_the_router_role_reads_pods_and_nothing_else() -> None:
    p = _plan(PD)
    assert _one(p, "Role", "dsv41-pd-api")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = _one(p, "RoleBinding", "dsv41-pd-api")
    assert binding["roleRef"]["name"] == "dsv41-pd-api"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "dsv41-pd-api", "namespace": "llm"}
    ]
    assert _one(p, "ServiceAccount", "dsv41-pd-api")["automountServiceAccountToken"] is False


def test_the_router_image_is_the_operators_unless_the_spec_names_one() -> None:
    def image(p: Plan) -> str:
        pod = _one(p, "Deployment", "dsv41-pd-api")["spec"]["template"]["spec"]
        return str(pod["containers"][0]["image"])

    assert (
        image(_plan(PD, apis=ClusterApis(router_image="reg.example/router:1")))
        == "reg.example/router:1"
    )
    spec_image = {"image": "reg.example/mine:2"}
    assert (
        image(_plan(PD, router=spec_image, apis=ClusterApis(router_image="x:1")))
        == "reg.example/mine:2"
    )


def test_the_side_channel_admits_only_the_servings_decode_pods() -> None:
    p = _plan(
        PD, router={"engineAccessFrom": [{"namespaceSelector": {"matchLabels": {"team": "mon"}}}]}
    )
    prefill = _one(p, "NetworkPolicy", "dsv41-pd-prefill-engines")["spec"]
    assert (
        prefill["podSelector"]["matchLabels"]["serving.deepseek-operator.io/pd-role"] == "prefill"
    )
    http, decode = prefill["ingress"]
    assert http["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert http["from"] == [
        {
            "podSelector": {
                "matchLabels": {
                    ROUTER_NAME: "deepseek-router",
                    "app.kubernetes.io/instance": "dsv41-pd",
                }
            }
        },
        {"namespaceSelector": {"matchLabels": {"team": "mon"}}},
    ]
    assert decode == {
        "from": [
            {
                "podSelector": {
                    "matchLabels": {
                        ROUTER_NAME: "deepseek-serving",
                        "app.kubernetes.io/instance": "dsv41-pd",
                        "serving.deepseek-operator.io/pd-role": "decode",
                    }
                }
            }
        ]
    }
    # Nothing admits anyone to the decode pods but on their HTTP port.
    decode_policy = _one(p, "NetworkPolicy", "dsv41-pd-decode-engines")["spec"]
    assert [r["ports"] for r in decode_policy["ingress"]] == [[{"protocol": "TCP", "port": 8000}]]
    router = _one(p, "NetworkPolicy", "dsv41-pd-api")["spec"]
    assert router["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]


def test_a_multi_pod_group_reaches_itself_on_every_port_but_the_side_channel() -> None:
    p = _plan(PD_MULTI_POD)
    name = next(o for o in p.objects if o["kind"] == "ServiceAccount")["metadata"]["name"]
    serving = name.removesuffix("-api")
    for role, dp in (("prefill", 8), ("decode", 16)):
        rules = _one(p, "NetworkPolicy", f"{serving}-{role}-engines")["spec"]["ingress"]
        own = rules[-1]
        assert (
            own["from"][0]["podSelector"]["matchLabels"]["serving.deepseek-operator.io/pd-role"]
            == role
        )
        ranges = sorted({(q["port"], q["endPort"]) for q in own["ports"]})
        assert ranges == [(1, 5599), (5600 + dp, 65535)]


def _observed_ready(p: Plan, router_ready: int) -> Observed:
    """Every workload ready; the router Deployment with ``router_ready`` ready pods."""
    children = {}
    for o in p.objects:
        if o["kind"] in ("Deployment", "LeaderWorkerSet"):
            body = copy.deepcopy(o)
            router = o["metadata"]["labels"].get("app.kubernetes.io/component") == "router"
            ready = router_ready if router else o["spec"]["replicas"]
            body["status"] = {"readyReplicas": ready}
            children[(o["kind"], o["metadata"]["name"])] = body
    return Observed(generation=1, children=children)


def _ready(p: Plan) -> Any:
    return next(c for c in p.status.conditions if c.type == "Ready")


def test_ready_waits_for_the_router() -> None:
    offline = _plan(PD)
    waiting = _plan(PD, observed=_observed_ready(offline, router_ready=0))
    cond = _ready(waiting)
    assert (cond.status, cond.reason) == ("False", "RouterNotReady")
    assert cond.message.startswith("router dsv41-pd-api: 0/1 pods ready; engines: prefill: 1/1")
    assert waiting.status.router is not None and waiting.status.router.ready_replicas == 0
    ready = _plan(PD, observed=_observed_ready(offline, router_ready=1))
    assert _ready(ready).status == "True"
    assert ready.status.router is not None and ready.status.router.ready_replicas == 1
    assert ready.status.endpoint is not None
    assert (
        ready.status.endpoint.host == "dsv41-pd-api.llm.svc" and ready.status.endpoint.port == 8000
    )


def test_a_pair_with_an_empty_role_says_it_cannot_serve() -> None:
    raw = copy.deepcopy(_raw(PD[0]))
    for role in raw["spec"]["disaggregation"]["roles"]:
        if role["role"] == "decode":
            role["replicas"] = 0
    p = _plan((PD[0], PD[1]), disaggregation=raw["spec"]["disaggregation"])
    cond = _ready(p)
    assert (cond.status, cond.reason) == ("False", "PairCannotServe")
    assert cond.message.startswith(
        "decode has 0 replicas beside prefill's 1: no request can complete"
    )


@pytest.mark.parametrize(
    ("router", "field", "words"),
    [
        ({"policy": "least_loaded"}, "spec.router.policy", "Unsupported value"),
        ({"replicas": 0}, "spec.router.replicas", "0"),
        ({"image": "my router:1"}, "spec.router.image", "should match"),
        (
            {"engineAccessFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
            "spec.router.engineAccessFrom[0]",
            "set ipBlock alone",
        ),
        ({"engineAccessFrom": [{}]}, "spec.router.engineAccessFrom[0]", "set ipBlock alone"),
        (
            {"engineAccessFrom": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
            "spec.router.engineAccessFrom[0].podSelector.matchExpressions[0].values",
            "set when it is In or NotIn",
        ),
    ],
    ids=["policy vllm-router lacks", "no router pod", "image with a space", "ipBlock and a selector", "empty peer", "In without values"],
)  # fmt: skip
def test_bad_router_input_is_refused_offline_in_one_line(
    router: dict[str, Any], field: str, words: str
) -> None:
    raw = copy.deepcopy(_raw(PD[0]))
    raw["spec"]["router"] = router
    with pytest.raises(SpecError) as err:
        parse_serving(raw)
    line = err.value.one_line()
    assert "\n" not in line and line.startswith(field), line
    assert words in line, line
