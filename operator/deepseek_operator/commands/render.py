"""``deepseek-operator render``: the operator's decision, status and manifests, offline.

Reads one DeepSeekServing and the Nodes (``kubectl get nodes -o yaml`` output, Node documents,
or the live cluster), then calls the same pure :func:`~deepseek_operator.plan.plan` the
operator calls. Exit 0 on a valid spec, 1 with one line on stderr otherwise; never a traceback.
This module stays free of kopf and (unless --from-cluster) of the Kubernetes client, so the
command starts fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.api.status import DeepSeekServingStatus
from deepseek_operator.engine import capacity_report
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.errors import DeepSeekOperatorError, InputError, SpecError
from deepseek_operator.names import (
    COMPUTE_DOMAIN_API_VERSION,
    KIND,
    LWS_API_VERSION,
    LWS_KIND,
)
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.plan import Observed, Plan, plan
from deepseek_operator.render.status import status_dict


class _NoAliasDumper(yaml.SafeDumper):
    """A safe dumper that writes repeated objects in full: users paste the output as manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


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
    docs = _load_yaml_documents(path, "--nodes")
    nodes: list[dict[str, Any]] = []
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") in ("List", "NodeList"):
            items = doc.get("items") or []
            for j, item in enumerate(items, start=1):
                if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
                    kind = item.get("kind") if isinstance(item, dict) else type(item).__name__
                    raise InputError(
                        f"--nodes {path}: document {index} item {j} is a {kind}, not a Node"
                    )
                nodes.append(item)
        elif isinstance(doc, dict) and doc.get("kind") == "Node":
            nodes.append(doc)
        else:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise InputError(
                f"--nodes {path}: document {index} is a {kind}, not a Node or a List of Nodes "
                "(use `kubectl get nodes -o yaml`)"
            )
    return nodes


def _cluster_group_versions() -> set[str]:
    """Every ``group/version`` the current kubeconfig's API server serves (for --from-cluster)."""
    try:
        from kubernetes import client, config

        config.load_kube_config()  # type: ignore[no-untyped-call]
        groups = client.ApisApi().get_api_versions().groups or []
        return {v.group_version for g in groups for v in (g.versions or [])}
    except Exception as exc:
        raise InputError(
            f"--from-cluster: cannot read the API groups: {exc}".splitlines()[0]
        ) from None


def _cluster_nodes() -> list[dict[str, Any]]:
    try:
        from kubernetes import client, config

        config.load_kube_config()  # type: ignore[no-untyped-call]
        api = client.CoreV1Api()
        raw = api.list_node(_preload_content=False)
        return list(json.loads(raw.data)["items"])  # type: ignore[attr-defined]
    except Exception as exc:
        raise InputError(f"--from-cluster: cannot list Nodes: {exc}".splitlines()[0]) from None


def _text_report(
    obj: ServingObject,
    res: Resolution,
    status: DeepSeekServingStatus,
    objects: Sequence[dict[str, Any]],
    nodes: int,
) -> str:
    lines = [
        f"DeepSeekServing {obj.namespace}/{obj.name}  model {obj.spec.model.name}",
        f"  requested --moe-backend {res.requested}  ->  rendered --moe-backend {res.moe_backend}  ({res.reason})",
        f"  {res.message}",
        f"  sequence parallel: {'on' if res.sequence_parallel else 'off'}   EP size: {res.expert_parallel_size}   "
        f"GPUs per pod: {res.gpus_per_pod}   pods per replica: {res.pods_per_replica}   replicas: {res.replicas}",
        f"  eligible nodes: {len(res.eligible_nodes)} of {nodes}"
        + (
            f" ({', '.join(res.eligible_nodes[:8])}{', ...' if len(res.eligible_nodes) > 8 else ''})"
            if res.eligible_nodes
            else ""
        ),
        "",
    ]
    rows = [("RULE", "CHECK", "RESULT", "OBSERVED")] + [
        (c.rule, c.name, "pass" if c.passed else "FAIL", c.message)
        for c in (check.to_status() for check in res.checks)
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    for r in rows:
        lines.append(f"  {r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]:<6}  {r[3]}")
    lines.append("")
    lines.append("  CONDITION        STATUS  REASON                MESSAGE")
    for c in status.conditions:
        lines.append(f"  {c.type:<15}  {c.status:<6}  {c.reason:<20}  {c.message}")
    lines.append("")
    lines += capacity_lines(res)
    if res.clique_key is not None:
        lines.append(
            f"  NVLink cliques ({res.clique_key}) that can hold a {res.pods_per_replica}-pod group: "
            + (", ".join(res.placement.holding_cliques) or "none")
        )
    lines.append("  objects: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    for title, args in _pod_args(objects):
        lines.append(f"  {title}vllm serve " + " ".join(args))
    return "\n".join(lines) + "\n"


def capacity_lines(res: Resolution) -> list[str]:
    """The capacity table, the MegaMoE weight breakdown and the what-if line for auto."""
    rep = res.capacity
    if rep is None:
        return []
    if rep.refused:
        return [f"  capacity: refused: {rep.refused}", ""]
    if rep.unknown:
        return [f"  capacity: not computed: {rep.unknown}", ""]
    lines = [f"  capacity ({rep.path}, per replica):"]
    lines += [f"    {capacity_report.breakdown(row)}" for row in rep.rows]
    line = capacity_report.what_if(rep)
    if line:
        lines.append(f"  what-if: {line}")
    return [*lines, ""]


def _pod_args(objects: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The vllm argv of each pod template: the Deployment's, or the LWS leader's (first, untitled)
    and worker's."""
    out: list[tuple[str, list[str]]] = []
    for o in objects:
        if o["kind"] == "Deployment":
            out.append(("", o["spec"]["template"]["spec"]["containers"][0]["args"]))
        elif o["kind"] == LWS_KIND:
            tmpl = o["spec"]["leaderWorkerTemplate"]
            for title, key in (("", "leaderTemplate"), ("worker: ", "workerTemplate")):
                out.append((title, tmpl[key]["spec"]["containers"][0]["args"]))
    return out


def _release_refusal(spec: DeepSeekServingSpec, res: Resolution) -> str:
    """One line when the vLLM release is unsupported or lacks the backend ('' otherwise): the
    operator would only report BackendResolved=False, so the preview stops there."""
    for check in res.checks:
        if check.passed:
            continue
        if check.name == "VLLMRelease":
            field, value = (
                ("spec.vllmVersion", spec.vllm_version)
                if spec.vllm_version
                else ("spec.image", spec.image)
            )
            return f"{field}: Invalid value: {value!r}: {check.message}"
        if check.name == "KnownMoEBackend":
            return (
                f"spec.moeBackend: Invalid value: {spec.moe_backend_as_written!r}: {check.message}"
            )
    return ""


NAME = "render"
HELP = "preview the decision, status and manifests offline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``render``."""
    parser.add_argument("-f", "--filename", required=True, help="DeepSeekServing YAML file")
    nodes = parser.add_mutually_exclusive_group()
    nodes.add_argument(
        "--nodes", help="`kubectl get nodes -o yaml` output (a List) or Node documents"
    )
    nodes.add_argument(
        "--from-cluster", action="store_true", help="read the Nodes from the current kubeconfig"
    )
    parser.add_argument("-o", "--output", choices=("text", "yaml", "json"), default="text")
    parser.add_argument(
        "--no-leaderworkerset",
        dest="leader_worker_set",
        action="store_false",
        help="preview a cluster without the LeaderWorkerSet CRD (default: installed; with "
        "--from-cluster: what the cluster serves)",
    )
    parser.add_argument(
        "--no-compute-domain",
        dest="compute_domain",
        action="store_false",
        help="preview a cluster without NVIDIA's ComputeDomain CRD (default: installed; with "
        "--from-cluster: what the cluster serves)",
    )


def _output(
    args: argparse.Namespace,
    obj: ServingObject,
    res: Resolution,
    status: DeepSeekServingStatus,
    objects: Sequence[dict[str, Any]],
    nodes: int,
    actions: Sequence[str] | None = None,
) -> str:
    """One DeepSeekServing's preview in the chosen format (``actions``: with --from-cluster,
    what the operator would do against that cluster, one line each)."""
    if args.output == "json":
        doc: dict[str, Any] = {"status": status_dict(status), "objects": objects}
        if actions is not None:
            doc["actions"] = list(actions)
        return json.dumps(doc, indent=2) + "\n"
    if args.output == "yaml":
        header = yaml.dump(
            {"status": status_dict(status)}, Dumper=_NoAliasDumper, sort_keys=False, width=100
        )
        if actions is not None:
            header += "actions against the cluster:\n" + "".join(f"  {a}\n" for a in actions)
        return "".join(f"# {line}\n" for line in header.splitlines()) + yaml.dump_all(
            objects, Dumper=_NoAliasDumper, sort_keys=False, width=100
        )
    text = _text_report(obj, res, status, objects, nodes)
    if actions is not None:
        text += "\nActions against the cluster (nothing is written):\n"
        text += "".join(f"  {a}\n" for a in actions) if actions else "  none\n"
    return text


# Between two DeepSeekServings' previews: a YAML document separator keeps `-o yaml` apply-able,
# JSON objects follow each other (`jq -s` reads them as one array), text reports get a blank line.
_SEPARATORS = {"yaml": "---\n", "json": "", "text": "\n"}


def _plan_document(
    document: ServingDocument, inventory: NodeInventory, now: str, apis: ClusterApis
) -> Plan:
    try:
        return plan(document.obj, inventory, Observed.offline(), now, apis)
    except SpecError as exc:
        raise InputError(f"{document.where}{exc.one_line()}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``render``; return the exit code. Nothing is printed on stdout unless every
    DeepSeekServing in the file is valid."""
    try:
        documents = load_serving_file(args.filename)
        if args.from_cluster:
            raw_nodes = _cluster_nodes()
        elif args.nodes:
            raw_nodes = load_nodes_file(args.nodes)
        else:
            raw_nodes = []
        inventory = build_inventory(raw_nodes)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lws, compute_domain = args.leader_worker_set, args.compute_domain
        if args.from_cluster:  # what this cluster serves, as the operator would see it
            served = _cluster_group_versions()
            lws = lws and LWS_API_VERSION in served
            compute_domain = compute_domain and COMPUTE_DOMAIN_API_VERSION in served
        apis = ClusterApis(leader_worker_set=lws, compute_domain=compute_domain)
        planned = [_plan_document(d, inventory, now, apis) for d in documents]
        actions: list[list[str] | None] = [None] * len(documents)
        if args.from_cluster:  # and what the operator would do there, deletes included
            from deepseek_operator.commands import cluster_actions as live

            for i, document in enumerate(documents):
                found, children = live.cluster_objects(document.obj, served)
                actions[i] = live.describe(
                    live.cluster_actions(document.obj, found, children, inventory, now, apis)
                )
    except DeepSeekOperatorError as exc:
        sys.stderr.write("".join(f"error: {line}\n" for line in str(exc).splitlines()))
        return 1
    refusals = []
    for document, one in zip(documents, planned, strict=True):
        refusal = _release_refusal(document.obj.spec, one.resolution)
        if refusal:
            refusals.append(f"error: {document.where}{refusal}\n")
    if refusals:
        sys.stderr.write("".join(refusals))
        return 1
    sys.stdout.write(
        _SEPARATORS[args.output].join(
            _output(args, d.obj, p.resolution, p.status, p.objects, len(inventory), a)
            for d, p, a in zip(documents, planned, actions, strict=True)
        )
    )
    return 0
