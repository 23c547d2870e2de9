"""``null`` in an optional spec field means "unset" on every path a user takes.

For every optional field of the generated schema that the seeds reach (the aggregated seed and
the 1P1D example: objects, lists, maps and scalars, inside list items too), the field set to
``null`` goes through ``render``'s admission (:func:`parse_serving`), ``kubectl create``,
client-side ``kubectl apply`` and ``kubectl apply --server-side`` (each with
``--dry-run=server`` against the real kube-apiserver). Each path must give the verdict the same
document gets with the field left out, and what the API server would store must parse to the
spec ``render`` reads. Before the optional fields without a default were ``nullable``, the
server-side apply of ``speculativeConfig: null`` (the docs' own example), ``resources: null``,
``extraArgs: null``, ``endpointPicker: null`` or ``disaggregation: null`` failed with "must be of
type object: null" while every other path accepted it.
"""

from __future__ import annotations

import copy
import json
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from deepseek_operator.api.crd import build_crd
from deepseek_operator.api.load import parse_serving
from deepseek_operator.errors import SpecError
from tests.k8s.cluster import ControlPlane

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
SEEDS = ("dsv41-flash-gb200.yaml", "dsv41-flash-1p1d-gb200.yaml")
Path = tuple[str | int, ...]


def _spec_schema() -> dict[str, Any]:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema: dict[str, Any] = root["properties"]["spec"]
    return schema


def _optional_paths(value: Any, schema: dict[str, Any], path: Path = ()) -> Iterator[Path]:
    """Every optional property under ``schema`` whose parent ``value`` has (objects the seed
    leaves out are entered as ``{}``; list items only where the seed has one)."""
    if schema.get("type") == "array" and isinstance(value, list) and value:
        yield from _optional_paths(value[0], schema.get("items", {}), (*path, 0))
        return
    if schema.get("type") != "object" or not isinstance(value, dict):
        return
    required = set(schema.get("required", ()))
    for name, sub in (schema.get("properties") or {}).items():
        if name not in required:
            yield (*path, name)
        if name in value:
            yield from _optional_paths(value[name], sub, (*path, name))
        elif sub.get("type") == "object" and sub.get("properties") and not sub.get("required"):
            yield from _optional_paths({}, sub, (*path, name))


def _with(doc: dict[str, Any], path: Path, *, null: bool) -> dict[str, Any]:
    """``doc`` with spec ``path`` set to null (``null``) or left out (parents made as needed)."""
    out = copy.deepcopy(doc)
    node: Any = out["spec"]
    for part in path[:-1]:
        if isinstance(part, str) and part not in node:
            node[part] = {}
        node = node[part]
    if null:
        node[path[-1]] = None
    else:
        node.pop(path[-1], None)
    return out


def _shown(path: Path) -> str:
    return "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _cases() -> list[tuple[str, Path]]:
    schema = _spec_schema()
    cases = []
    for seed in SEEDS:
        doc = yaml.safe_load((REPO / "examples" / seed).read_text())
        cases.extend((seed, p) for p in _optional_paths(doc["spec"], schema))
    return cases


CASES = _cases()


def _render(doc: dict[str, Any]) -> tuple[bool, str]:
    """``render``'s verdict: the spec it reads (as JSON), or the refusal."""
    try:
        spec = parse_serving(copy.deepcopy(doc)).spec
    except SpecError as exc:
        return False, str(exc)
    return True, spec.model_dump_json(by_alias=True)


def _kubectl(cp: ControlPlane, doc: dict[str, Any], *how: str) -> tuple[bool, str]:
    """What ``kubectl <how>`` with ``--dry-run=server`` gets: the stored object as ``render``
    reads it, or the API server's refusal."""
    proc = cp.kubectl(*how, "-f", "-", "--dry-run=server", "-o", "json", input=doc, check=False)
    if proc.returncode != 0:
        return False, proc.stderr.strip()
    return _render(json.loads(proc.stdout))


@pytest.fixture(scope="module")
def null_namespace(crds: ControlPlane) -> Iterator[str]:
    name = crds.create_namespace(f"nulls-{uuid.uuid4().hex[:6]}")
    yield name
    crds.delete_namespace(name)


def test_the_cases_cover_every_field_the_issue_named() -> None:
    shown = {_shown(p) for _, p in CASES}
    for field in (
        "spec.engine.speculativeConfig",
        "spec.resources",
        "spec.engine.extraArgs",
        "spec.disaggregation",
        "spec.disaggregation.endpointPicker",
        "spec.disaggregation.roles[0].resources",
        "spec.disaggregation.roles[0].engine.extraArgs",
        "spec.env[0].valueFrom",
        "spec.tolerations",
        "spec.nodeSelector",
        "spec.parallelism",
        "spec.engine",
    ):
        assert field in shown, field
    assert len(CASES) > 80


@pytest.mark.parametrize("seed, path", CASES, ids=[f"{s[:-5]}:{_shown(p)}" for s, p in CASES])
def test_null_is_unset_for_render_create_and_both_applies(
    crds: ControlPlane, null_namespace: str, seed: str, path: Path
) -> None:
    doc = yaml.safe_load((REPO / "examples" / seed).read_text())
    doc["metadata"] = {"name": f"n-{uuid.uuid4().hex[:8]}", "namespace": null_namespace}
    unset = _render(_with(doc, path, null=False))
    nulled = _with(doc, path, null=True)
    verdicts = {
        "render": _render(nulled),
        "kubectl create": _kubectl(crds, nulled, "create"),
        "kubectl apply": _kubectl(crds, nulled, "apply"),
        "kubectl apply --server-side": _kubectl(crds, nulled, "apply", "--server-side"),
    }
    for how, (ok, seen) in verdicts.items():
        assert ok == unset[0], f"{how}: {seen} (left out: {unset[1]})"
        if ok:
            assert json.loads(seen) == json.loads(unset[1]), how
