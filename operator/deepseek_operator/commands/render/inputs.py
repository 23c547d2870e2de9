"""``render``'s input: the DeepSeekServing and Node files, decoded as ``kubectl`` decodes them.

YAML is read with PyYAML's safe loader taught go-yaml's plain floats and its "excessive aliasing"
refusal, so a file means to ``render`` what it means to ``kubectl apply``. :func:`load_serving_file`
admits every DeepSeekServing of an ``-f`` file (all or nothing, every invalid document listed);
:func:`load_nodes_file` reads a ``--nodes`` file. Every problem is an
:class:`~deepseek_operator.errors.InputError` naming the file (and the document).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.errors import InputError, SpecError
from deepseek_operator.names import DRA_API_VERSION, KIND, RESOURCE_SLICE_KIND

# go-yaml's plain floats (what kubectl's sigs.k8s.io/yaml decodes): 1e3 and 1e+308 are numbers
# there, strings to PyYAML's YAML 1.1 resolver, which wants a '.'.
_GO_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


class _KubectlLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading plain scalars as kubectl's YAML decoder does."""


_KubectlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", _GO_YAML_FLOAT, list("-+.0123456789")
)


def _go_float(loader: _KubectlLoader, node: yaml.ScalarNode) -> Any:
    text = loader.construct_scalar(node).replace("_", "")
    if not _GO_YAML_FLOAT.match(text):
        return yaml.SafeLoader.construct_yaml_float(loader, node)
    value = float(text)
    # Go's ParseFloat refuses an out-of-range value and go-yaml then keeps the string.
    return text if math.isinf(value) else value


_KubectlLoader.add_constructor("tag:yaml.org,2002:float", _go_float)


def _alias_ratio_allowed(decoded: int) -> float:
    """go-yaml's allowedAliasRatio: 99% of a small document may be alias expansion, 10% of a big one."""
    low, high = 400_000, 4_000_000
    if decoded <= low:
        return 0.99
    if decoded >= high:
        return 0.10
    return 0.99 - 0.89 * (decoded - low) / (high - low)


def _check_aliasing(root: yaml.Node) -> None:
    """Refuse what go-yaml refuses as "document contains excessive aliasing", without expanding.

    go-yaml counts every node it decodes (an alias decodes its target again) and the nodes
    decoded inside an alias, and fails once more than 100 of over 1,000 decoded nodes came from
    aliases at a ratio above :func:`_alias_ratio_allowed`. Inside one alias both counts grow
    together, so the ratio is highest where the alias ends: checking there and at every plain node
    sees every failure, while each node's expanded size is computed once (PyYAML shares an
    alias's node with its anchor, so the walk costs the file's size, not the expansion's).
    """
    sizes: dict[int, int] = {}

    def expanded(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(expanded(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(expanded(k) + expanded(v) for k, v in node.value)
        sizes[id(node)] = total
        return total

    decoded = aliased = 0
    seen: set[int] = set()

    def visit(node: yaml.Node) -> None:
        nonlocal decoded, aliased
        if id(node) in seen:  # an alias: its target decoded again, every node of it aliased
            size = expanded(node)
            decoded += 1 + size
            aliased += size
        else:
            seen.add(id(node))
            decoded += 1
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            for child in children:
                visit(child)
        if aliased > 100 and decoded > 1000 and aliased / decoded > _alias_ratio_allowed(decoded):
            raise yaml.YAMLError("document contains excessive aliasing")

    visit(root)


def _parse_yaml(text: str) -> list[Any]:
    """Every document of ``text`` as kubectl decodes it (empty documents stay None)."""
    loader = _KubectlLoader(text)
    try:
        documents: list[Any] = []
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                documents.append(None)
                continue
            _check_aliasing(node)
            documents.append(loader.construct_document(node))
        return documents
    finally:
        loader.dispose()


def _load_yaml_documents(path: str, what: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read: {exc.strerror}") from None
    try:
        return _parse_yaml(text)  # empty documents stay as None: indices count them
    except RecursionError:
        raise InputError(f"{what} {path}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{what} {path}: invalid YAML{where}: {problem}") from None


@dataclass(frozen=True)
class ServingDocument:
    """One DeepSeekServing of an ``-f`` file and where it is: ``"<path>: document <i>: "`` (1-based,
    counted over every ``---``-separated document) when the file holds several, else ``"<path>: "``.
    """

    where: str
    obj: ServingObject


def load_serving_file(path: str) -> list[ServingDocument]:
    """Every DeepSeekServing in ``path`` (``---``-separated documents, as ``kubectl apply -f``).

    All or nothing: each document is admitted as the API server would admit it, and if any is
    invalid an :class:`InputError` lists every invalid document (index, field, value, rule) and
    nothing is returned. Documents of other kinds (a Namespace, a Secret) are skipped, as they are
    not the operator's to preview; empty documents are skipped as kubectl skips them.
    """
    docs = _load_yaml_documents(path, "-f")
    many = len([d for d in docs if d is not None]) > 1
    servings: list[ServingDocument] = []
    errors: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        where = f"{path}: document {index}: " if many else f"{path}: "
        if not isinstance(doc, dict) or not doc.get("kind"):
            shown = json.dumps(doc, default=str)[:60] if not isinstance(doc, dict) else "no kind"
            errors.append(f"{where}kind: Required value: not a Kubernetes object ({shown})")
            continue
        if doc.get("kind") != KIND:
            continue
        try:
            obj = parse_serving(doc)
        except SpecError as exc:
            errors.append(f"{where}{exc.one_line()}")
            continue
        key = (obj.namespace, obj.name)
        if key in seen:
            errors.append(
                f"{where}DeepSeekServing {obj.namespace}/{obj.name} repeats document "
                f"{seen[key]} (kubectl apply would replace one with the other)"
            )
            continue
        seen[key] = index
        servings.append(ServingDocument(where, obj))
    if not errors and not servings:
        kinds = [d.get("kind") if isinstance(d, dict) else type(d).__name__ for d in docs if d]
        errors.append(f"{path}: no DeepSeekServing document (kinds: {kinds})")
    if errors:
        raise InputError("\n".join(errors))
    return servings


def load_nodes_file(path: str) -> list[dict[str, Any]]:
    """Node objects from a ``kubectl get nodes -o yaml`` List or a multi-document file."""
    return load_cluster_file(path)[0]


# The List kinds kubectl prints for `get nodes`, `get resourceslices`, `get resourceclaims -A`
# and `get nodes,resourceslices,resourceclaims -A`.
_LISTS = ("List", "NodeList", "ResourceSliceList", "ResourceClaimList")
RESOURCE_CLAIM_KIND = "ResourceClaim"


def _cluster_object(item: Any, where: str, path: str) -> str:
    """``Node`` or ``ResourceSlice``, or an :class:`InputError` naming what the item is."""
    kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
    if kind in (RESOURCE_SLICE_KIND, RESOURCE_CLAIM_KIND) and isinstance(item, dict):
        version = item.get("apiVersion")
        if version != DRA_API_VERSION:
            # v1beta1 nests attributes under `basic`: reading it as v1 would count nothing.
            raise InputError(
                f"--nodes {path}: {where} apiVersion: Unsupported value: {version!r}: a "
                f"{kind} must be {DRA_API_VERSION} (Kubernetes 1.34 and later)"
            )
        return str(kind)
    if kind == "Node":
        return "Node"
    raise InputError(
        f"--nodes {path}: {where} is a {kind}, not a Node, a ResourceSlice, a ResourceClaim or "
        "a List of them (use `kubectl get nodes,resourceslices,resourceclaims -A -o yaml`)"
    )


def load_cluster_file(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and ResourceSlices (``resource.k8s.io/v1``) from ``kubectl get nodes,resourceslices
    -o yaml`` output, Lists of either, or ``---``-separated documents, in file order."""
    nodes, slices, _claims = load_cluster_inputs(path)
    return nodes, slices


def load_cluster_inputs(
    path: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes, ResourceSlices and ResourceClaims (both ``resource.k8s.io/v1``) from ``kubectl get
    nodes,resourceslices,resourceclaims -A -o yaml`` output, Lists of them, or ``---``-separated
    documents, in file order."""
    docs = _load_yaml_documents(path, "--nodes")
    found: dict[str, list[dict[str, Any]]] = {
        "Node": [],
        RESOURCE_SLICE_KIND: [],
        RESOURCE_CLAIM_KIND: [],
    }
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") in _LISTS:
            for j, item in enumerate(doc.get("items") or [], start=1):
                if isinstance(item, dict) and "kind" not in item:
                    kind = doc["kind"].removesuffix("List") or "Node"
                    item = {"kind": kind, "apiVersion": doc.get("apiVersion"), **item}
                found[_cluster_object(item, f"document {index} item {j}", path)].append(item)
        else:
            found[_cluster_object(doc, f"document {index}", path)].append(doc)
    return found["Node"], found[RESOURCE_SLICE_KIND], found[RESOURCE_CLAIM_KIND]
