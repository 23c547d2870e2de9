"""Property: admission refuses exactly the embedded core/v1 values the child's API refuses.

For each field of the spec that ends up in the pod template (``env``, ``tolerations``,
``nodeSelector``, ``resources``, ``modelCache.{mountPath,sizeLimit,claimName}``,
``gpuResourceName``), hypothesis generates values (tests/hostile_specs.py, ``EMBEDDED_FIELDS``).
Each value is put where ``render`` puts it into the seed's rendered Deployment
(examples/dsv41-flash-gb200.yaml on the GB200 node fixture), and the Deployment goes to the real
kube-apiserver as a server-side apply dry run (some refusals, such as duplicate env names, occur
only with SSA). The DeepSeekServing carrying the same value goes to the API server (dry-run
create, ``fieldValidation=Strict``) and through offline admission (:func:`parse_serving`). When the
Deployment is refused, both refuse the DeepSeekServing; when it is accepted, both accept it.

Two fields need more than the Deployment to say what is valid: ``modelCache.claimName`` must
also be a name a PersistentVolumeClaim can have (dry-run create of one), and
``gpuResourceName`` must be an extended resource, which the API shows by refusing a request
below the limit for it (it allows that only for native, overcommittable resources).
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.rest import ApiException

from deepseek_operator.api.load import parse_serving
from deepseek_operator.commands.render.inputs import load_nodes_file
from deepseek_operator.errors import SpecError
from deepseek_operator.names import GROUP, PLURAL, VERSION
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from tests.hostile_specs import EMBEDDED_FIELDS, SEED
from tests.k8s.cluster import ControlPlane

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
# Per field; eight fields make 1,200 generated cases a run.
EXAMPLES_PER_FIELD = 150
_SURROGATE_PAIR = re.compile(r"\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}")


class Server:
    """The real API server, as the dry runs this test sends."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.api_client = api_client
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def apply_deployment(self, body: dict[str, Any]) -> tuple[bool, str]:
        """Server-side apply dry run (what the operator sends), any non-2xx a refusal."""
        name = body["metadata"]["name"]
        url = (
            f"{self.api_client.configuration.host}/apis/apps/v1/namespaces/{self.namespace}"
            f"/deployments/{name}?dryRun=All&fieldValidation=Strict&fieldManager=parity-test"
            "&force=true"
        )
        headers = {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"}
        self.api_client.update_params_for_auth(headers, [], ["BearerToken"], url, "PATCH", body)
        # A character beyond the BMP goes raw, as kubectl sends it: JSON's surrogate-pair escape
        # is refused by the API server's YAML decoder (the operator's client has that problem).
        text = _SURROGATE_PAIR.sub(lambda m: json.loads(f'"{m.group(0)}"'), json.dumps(body))
        response = self.api_client.call_api("PATCH", url, header_params=headers, body=text)
        response.read()
        if not 200 <= response.status < 300:
            return False, f"{response.status}: {response.data.decode(errors='replace')}"[:400]
        return True, ""

    def create_claim(self, name: str) -> bool:
        """Whether a PersistentVolumeClaim may be called ``name`` (dry-run create)."""
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1"}}},
        }
        try:
            self.core.create_namespaced_persistent_volume_claim(self.namespace, body, dry_run="All")
        except (ApiException, ValueError):
            return False
        return True

    def create_serving(self, doc: dict[str, Any]) -> tuple[bool, str]:
        """Dry-run create of the DeepSeekServing, as ``kubectl apply --dry-run=server``."""
        body = copy.deepcopy(doc)
        body["metadata"]["namespace"] = self.namespace
        try:
            self.custom.create_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                body,
                dry_run="All",
                field_validation="Strict",
            )
        except ApiException as exc:
            if exc.status in (400, 422):
                return False, json.loads(exc.body).get("message", exc.body)
            raise
        return True, ""


@pytest.fixture(scope="module")
def server(crds: ControlPlane) -> Iterator[Server]:
    namespace = crds.create_namespace(f"corev1-{uuid.uuid4().hex[:6]}")
    with crds.api_client() as api_client:
        yield Server(api_client, namespace)
    crds.delete_namespace(namespace)


@pytest.fixture(scope="module")
def seed_deployment(server: Server) -> dict[str, Any]:
    """The seed's rendered Deployment, in the test namespace."""
    serving = parse_serving(copy.deepcopy(SEED))
    inventory = build_inventory(load_nodes_file(str(REPO / "examples/nodes-gb200.yaml")))
    objects = plan(serving, inventory, Observed.offline(), now="2026-12-02T00:00:00Z").objects
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment = copy.deepcopy(deployment)
    deployment["metadata"]["namespace"] = server.namespace
    ok, why = server.apply_deployment(deployment)
    assert ok, why
    return deployment


def _amount(value: Any) -> Any:
    # render writes str(v) of an int or a string; anything else never gets that far.
    return str(value) if isinstance(value, int | str) and not isinstance(value, bool) else value


def _inject(deployment: dict[str, Any], field: str, value: Any, gpus: str) -> dict[str, Any]:
    """``deployment`` with ``value`` where render/workload.py pod_template puts spec.<field>."""
    out = copy.deepcopy(deployment)
    pod = out["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if field == "env":
        container["env"] = container["env"][:1] + (value if isinstance(value, list) else [value])
    elif field == "nodeSelector" and isinstance(value, dict):
        # Admission drops a null entry (as the API server does), so render never sees it.
        present = {k: v for k, v in value.items() if v is not None}
        if present:
            pod[field] = present
        else:
            pod.pop(field, None)
    elif field in ("tolerations", "nodeSelector"):
        if value:
            pod[field] = value
        else:
            pod.pop(field, None)
    elif field == "resources":
        seed = SEED["spec"].get("resources", {})
        gpu = "nvidia.com/gpu"
        for kind in ("requests", "limits"):
            given = value.get(kind, seed.get(kind, {}))
            # A null amount is dropped by admission (as the API server does): render never sees it.
            container["resources"][kind] = {
                k: _amount(v) for k, v in given.items() if v is not None
            }
            container["resources"][kind][gpu] = gpus
    elif field == "modelCache.mountPath":
        container["env"][0]["value"] = value
        container["volumeMounts"][1]["mountPath"] = value
    elif field == "modelCache.sizeLimit":
        pod["volumes"][1] = {
            "name": "model-cache",
            "emptyDir": {"sizeLimit": value} if value else {},
        }
    elif field == "modelCache.claimName":
        pod["volumes"][1] = (
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": value}}
            if value
            else {"name": "model-cache", "emptyDir": {}}
        )
    elif field == "gpuResourceName":
        for kind in ("requests", "limits"):
            amounts = container["resources"][kind]
            amounts.pop("nvidia.com/gpu")
            amounts[value] = gpus
    return out


def _child_accepts(
    server: Server, deployment: dict[str, Any], field: str, value: Any
) -> tuple[bool, str]:
    """Whether the API accepts what render would make of ``value`` at spec.<field>."""
    gpus = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ]
    ok, why = server.apply_deployment(_inject(deployment, field, value, gpus))
    if not ok:
        return False, why
    if field == "modelCache.claimName" and value and not server.create_claim(value):
        return False, f"no PersistentVolumeClaim can be named {value!r}"
    if field == "gpuResourceName":
        overcommitted = _inject(deployment, field, value, gpus)
        overcommitted["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"][
            value
        ] = "1"
        if server.apply_deployment(overcommitted)[0]:
            return False, f"{value!r} is a native resource (the API lets requests undercut it)"
    return True, ""


def _with(field: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "dsv41"}
    node = doc["spec"]
    *parents, leaf = field.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return doc


def _offline(doc: dict[str, Any]) -> tuple[bool, str]:
    try:
        parse_serving(copy.deepcopy(doc))
    except SpecError as exc:
        return False, str(exc)
    return True, ""


@pytest.mark.parametrize("field", sorted(EMBEDDED_FIELDS))
@settings(
    max_examples=EXAMPLES_PER_FIELD,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_serving_is_admitted_exactly_when_its_workload_would_be(
    server: Server, seed_deployment: dict[str, Any], field: str, data: st.DataObject
) -> None:
    value = data.draw(EMBEDDED_FIELDS[field], label=field)
    child_ok, child_why = _child_accepts(server, seed_deployment, field, value)
    doc = _with(field, value)
    offline_ok, offline_why = _offline(doc)
    server_ok, server_why = server.create_serving(doc)
    event(f"{field}: the workload is {'accepted' if child_ok else 'refused'}")
    shown = json.dumps(value, default=str)
    assert "\n" not in offline_why
    assert offline_ok == child_ok, (
        f"spec.{field}={shown}: the Deployment is {'accepted' if child_ok else 'refused'} "
        f"({child_why}) but offline admission {'accepts' if offline_ok else 'refuses'} "
        f"({offline_why})"
    )
    assert server_ok == child_ok, (
        f"spec.{field}={shown}: the Deployment is {'accepted' if child_ok else 'refused'} "
        f"({child_why}) but the API server {'accepts' if server_ok else 'refuses'} the "
        f"DeepSeekServing ({server_why})"
    )
