"""Property: every DeepSeekServing the API server accepts gets children the API server accepts.

"Accepted means it runs": a spec that passes admission but whose Deployment, LeaderWorkerSet or
Service the API then refuses leaves the user with a resource that never serves. Hypothesis
generates at least 1,000 careless and hostile DeepSeekServings per run (the hostile mutations of
``hostile_specs`` plus careless values in every part the operator copies into a pod: env,
tolerations, node selector, resources, the model cache, the GPU resource name, the port, the
layout). Each one goes to the real kube-apiserver (``create`` with ``dryRun=All`` and
``fieldValidation=Strict``); for each one it accepts, the operator's own :func:`plan` renders the
children, and each child goes to the same API server as the operator sends it (its own body
encoding, :func:`encode_body`): a server-side apply (``application/apply-patch+yaml``, ``force``, ``fieldValidation=Strict``), dry run, past
the real LeaderWorkerSet webhooks and the ComputeDomain CRD. No child may be refused.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from deepseek_operator.actions import contains, drifted
from deepseek_operator.actions.children import reduced_child
from deepseek_operator.api.load import parse_serving
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.errors import SpecError
from deepseek_operator.kube.client import encode_body, group_version_prefix
from deepseek_operator.names import FIELD_MANAGER, GROUP, PLURAL, VERSION
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.gpu_nodes import make_gpu_node
from tests.hostile_specs import EMBEDDED_FIELDS, SEED, hostile, hostile_inputs, set_path
from tests.k8s.cluster import ControlPlane, as_kubectl_sends
from tests.k8s.dra import computedomain_crd
from tests.racks import RACK_A, make_gb200_tray

pytestmark = pytest.mark.integration

EXAMPLES = 1000
# Kinds the operator writes, with their plural (the REST path's last part).
PLURALS = {
    "Deployment": "deployments",
    "Service": "services",
    "LeaderWorkerSet": "leaderworkersets",
    "ComputeDomain": "computedomains",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}
TALLY: Counter[str] = Counter()

# An inventory with room for every layout the mutations reach: one NVL72 clique of GB200 trays
# (single-pod and multi-pod MegaMoE, ComputeDomain channels) and Hopper nodes (the other path).
INVENTORY = build_inventory(
    [make_gb200_tray(f"gb-{i}", RACK_A, kwok=False) for i in range(8)]
    + [make_gpu_node(f"h200-{i}", "NVIDIA-H200", kwok=False) for i in range(4)]
)
APIS = ClusterApis()

# Where a careless value lands: every embedded core/v1 part (hostile_specs.EMBEDDED_FIELDS, the
# strategies the admission tests use) and the spec fields that shape the children.
CARELESS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    *((("spec", *field.split(".")), values) for field, values in EMBEDDED_FIELDS.items()),
    (("spec", "shmSizeLimit"), st.sampled_from(["abc", "64Gi", "-1Gi", "0", "1.5Ti"])),
    (("spec", "port"), st.sampled_from([1, 80, 8000, 8080, 65535])),
    (("spec", "replicas"), st.sampled_from([0, 1, 2])),
    (("spec", "moeBackend"), st.sampled_from(["auto", "triton", "deep_gemm_mega_moe"])),
    (("spec", "automountServiceAccountToken"), st.booleans()),
    # Text beyond the Basic Multilingual Plane reaches the pod in env values and vLLM flags.
    (
        ("spec", "env"),
        st.sampled_from(["h\u00e9llo \U0001f642", "\x7f", "a\x85b", "\ufeff", "\t"]).map(
            lambda value: [{"name": "GREETING", "value": value}]
        ),
    ),
    (("spec", "model", "servedModelName"), st.sampled_from(["dsv41-\U0001f642", "d\u00e9"])),
]
# Layouts: the seed's single pod (a Deployment) and replicas spanning pods (a LeaderWorkerSet,
# with a ComputeDomain channel in the GB200 clique).
LAYOUTS = st.sampled_from(
    [
        None,
        None,
        {"tensorParallelSize": 4, "dataParallelSize": 2, "dataParallelSizeLocal": 1},
        {"tensorParallelSize": 4, "dataParallelSize": 4, "dataParallelSizeLocal": 1,
         "expertParallel": True},
        {"tensorParallelSize": 2, "expertParallel": True},
    ]
)  # fmt: skip


@st.composite
def careless(draw: st.DrawFn) -> dict[str, Any]:
    """The seed in some layout with one to three careless values in the parts that reach the
    pod."""
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "careless"}
    layout = draw(LAYOUTS)
    if layout is not None:
        doc["spec"]["parallelism"] = layout
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path, values = draw(st.sampled_from(CARELESS))
        set_path(doc, path, draw(values))
    return doc


@pytest.fixture(scope="module")
def cluster(lws_cluster: ControlPlane, crds: ControlPlane) -> ControlPlane:
    """Our CRD, the real LeaderWorkerSet controller and webhooks, the ComputeDomain CRD."""
    lws_cluster.apply([computedomain_crd()])
    lws_cluster.wait_crd_established("computedomains.resource.nvidia.com")
    return lws_cluster


@pytest.fixture(scope="module")
def api(cluster: ControlPlane) -> Any:
    with cluster.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def runs_namespace(cluster: ControlPlane) -> Any:
    name = cluster.create_namespace(f"runs-{uuid.uuid4().hex[:6]}")
    yield name
    cluster.delete_namespace(name)


def _admitted(api: Any, namespace: str, doc: dict[str, Any]) -> bool:
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, doc, dry_run="All", field_validation="Strict"
        )
    except ApiException as exc:
        if exc.status in (400, 422):
            return False
        raise
    return True


def _apply_dry_run(api: Any, namespace: str, manifest: dict[str, Any]) -> str | None:
    """The API server's refusal of ``manifest`` as the operator applies it, or None."""
    kind = manifest["kind"]
    path = (
        f"{group_version_prefix(manifest['apiVersion'])}/namespaces/{namespace}/"
        f"{PLURALS[kind]}/{manifest['metadata']['name']}"
    )
    query = "dryRun=All&force=true&fieldValidation=Strict&fieldManager=" + FIELD_MANAGER
    response = api.call_api(
        "PATCH",
        f"{api.configuration.host}{path}?{query}",
        header_params={
            "Content-Type": "application/apply-patch+yaml",
            "Authorization": api.configuration.get_api_key_with_prefix("authorization"),
        },
        body=encode_body(manifest),
    )
    response.read()
    if 200 <= response.status < 300:
        # What the child store keeps of it (identity, status, the digest of our fields) must
        # judge drift as the whole object does, or the operator would apply it again at every
        # reconcile (or miss a change).
        live = json.loads(response.data)
        if drifted(reduced_child(live), manifest) != (not contains(live, manifest)):
            return "the child store's digest and the live object disagree about drift"
        return None
    try:
        message = json.loads(response.data).get("message", response.data)
    except (TypeError, ValueError):
        message = response.data
    return f"HTTP {response.status}: {message}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(doc=st.one_of(careless(), careless(), careless(), hostile(), hostile_inputs()))
def test_every_accepted_spec_gets_children_the_api_server_accepts(
    api: Any, runs_namespace: str, doc: dict[str, Any]
) -> None:
    TALLY["generated"] += 1
    body = as_kubectl_sends(doc)
    if isinstance(body.get("metadata"), dict):
        body["metadata"]["namespace"] = runs_namespace
    if not _admitted(api, runs_namespace, body):
        event("refused at admission")
        return
    TALLY["accepted"] += 1
    try:
        serving = parse_serving(copy.deepcopy(body))
    except SpecError as exc:  # the parity test reports it in full; here it must not happen
        pytest.fail(f"offline refuses what the API server accepts: {exc}")
    serving_uid = str(uuid.uuid4())
    serving = type(serving)(serving.name, serving.namespace, serving.spec, 1, serving_uid)
    planned = plan(serving, INVENTORY, Observed.offline(), "2026-12-02T00:00:00Z", APIS)
    kinds = sorted({m["kind"] for m in planned.objects})
    event("accepted: " + ", ".join(kinds))
    refused = {
        f"{m['kind']}/{m['metadata']['name']}": why
        for m in planned.objects
        if (why := _apply_dry_run(api, runs_namespace, m)) is not None
    }
    assert not refused, (
        f"the API server accepted the DeepSeekServing but refuses its children: {refused}\n"
        f"{json.dumps(doc, indent=1)}"
    )
    TALLY["children applied"] += len(planned.objects)


def test_the_run_reached_accepted_specs_and_every_child_kind() -> None:
    """The property above must not pass by refusing everything at admission."""
    assert TALLY["generated"] >= EXAMPLES, TALLY
    assert TALLY["accepted"] >= EXAMPLES // 5, TALLY
    assert TALLY["children applied"] >= TALLY["accepted"], TALLY
