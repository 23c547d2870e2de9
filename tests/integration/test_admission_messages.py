"""Property: every refusal, offline and from the API server, is one line that names a field path.

Specs come from two generators of tests/hostile_specs.py: :func:`hostile` (wrong types, unknown
fields, bounds, owned flags) and :func:`hostile_inputs` (extraArgs spelled every way vLLM's
parser is asked to read, model names, null at every spec path, numbers in string fields),
1,000 of each per run. Each goes to the real kube-apiserver (``create`` with ``dryRun=All`` and
``fieldValidation=Strict``) and through :func:`parse_serving`. The verdicts must agree; offline, a
refusal is a :class:`SpecError` whose path starts at ``spec``/``metadata`` (or is the unknown
root field itself) on one line; from the API server, every cause names its field and the message
has no line break. A third property sends alias-heavy manifests through ``kubectl apply`` and
``render -f``: both refuse exactly the excessive aliasing.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes import client
from kubernetes.client.rest import ApiException

from deepseek_operator.api.load import parse_serving
from deepseek_operator.errors import SpecError
from deepseek_operator.names import GROUP, PLURAL, VERSION
from tests.hostile_specs import aliased_yaml, hostile, hostile_inputs
from tests.k8s.cluster import ControlPlane, as_kubectl_sends

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
# The API server's own note after the errors it found; it names no field by design.
_SERVER_NOTE = "some validation rules were not checked because the object was invalid"
_IN_FIELD = re.compile(r" in (spec|metadata)[.\[]")


@pytest.fixture(scope="module")
def api(crds: ControlPlane) -> Any:
    with crds.api_client() as api_client:
        yield client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def messages_namespace(crds: ControlPlane) -> Any:
    name = crds.create_namespace(f"messages-{uuid.uuid4().hex[:6]}")
    yield name
    crds.delete_namespace(name)


def _offline(doc: dict[str, Any]) -> SpecError | None:
    try:
        parse_serving(copy.deepcopy(doc))
    except SpecError as exc:
        return exc
    return None


def _server(api: Any, namespace: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    body = as_kubectl_sends(doc)
    body["metadata"]["namespace"] = namespace
    try:
        api.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        )
    except ApiException as exc:
        if exc.status in (400, 422):
            status: dict[str, Any] = json.loads(exc.body)
            return status
        raise
    return None


def _check(api: Any, namespace: str, doc: dict[str, Any]) -> None:
    offline = _offline(doc)
    server = _server(api, namespace, doc)
    shown = json.dumps(doc)[:2000]
    assert (offline is None) == (server is None), f"offline {offline}, server {server}: {shown}"
    if offline is not None:
        root_field = offline.field_path in doc and "." not in offline.field_path
        assert offline.field_path.startswith(("spec", "metadata")) or root_field, offline
        assert "\n" not in str(offline), repr(str(offline))
    if server is not None:
        assert "\n" not in server["message"], repr(server["message"])
        for cause in server.get("details", {}).get("causes", []):
            if _SERVER_NOTE in cause.get("message", ""):
                continue
            # The API server writes "<nil>" for a root rule without a fieldPath; its own
            # format checks name the field only in their text ("... in spec.model.hiddenSize").
            field = cause.get("field")
            named = field not in (None, "", "<nil>") or _IN_FIELD.search(cause.get("message", ""))
            assert named, f"no field path: {cause} ({shown})"


_SETTINGS = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(doc=hostile_inputs())
def test_generated_inputs_are_refused_on_one_line_with_a_field_path(
    api: Any, messages_namespace: str, doc: dict[str, Any]
) -> None:
    _check(api, messages_namespace, doc)


@_SETTINGS
@given(doc=hostile())
def test_hostile_specs_are_refused_on_one_line_with_a_field_path(
    api: Any, messages_namespace: str, doc: dict[str, Any]
) -> None:
    _check(api, messages_namespace, doc)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=aliased_yaml())
def test_aliases_get_kubectls_verdict(
    crds: ControlPlane, messages_namespace: str, tmp_path_factory: Any, text: str
) -> None:
    path = tmp_path_factory.mktemp("aliases") / "serving.yaml"
    path.write_text(
        text.replace("{name: aliases}", f"{{name: aliases, namespace: {messages_namespace}}}")
    )
    server = crds.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    offline = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert "Traceback" not in offline.stderr
    server_aliasing = "excessive aliasing" in server.stderr
    offline_aliasing = "excessive aliasing" in offline.stderr
    assert server_aliasing == offline_aliasing, (server.stderr, offline.stderr)
    assert (server.returncode == 0) == (offline.returncode == 0), (server.stderr, offline.stderr)
