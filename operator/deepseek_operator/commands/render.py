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
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.api.status import DeepSeekServingStatus
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.errors import DeepSeekOperatorError, InputError, SpecError
from deepseek_operator.names import COMPUTE_DOMAIN_API_VERSION, LWS_API_VERSION, LWS_KIND
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.status import status_dict


class _NoAliasDumper(yaml.SafeDumper):
    """A safe dumper that writes repeated objects in full: users paste the output as manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _load_yaml_documents(path: str, what: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot read: {exc.strerror}") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{what} {path}: invalid YAML{where}: {problem}") from None


def load_serving_file(path: str) -> ServingObject:
    """The one DeepSeekServing in ``path``."""
    docs = _load_yaml_documents(path, "-f")
    servings = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DeepSeekServing"]
    if len(servings) != 1:
        kinds = [d.get("kind") if isinstance(d, dict) else type(d).__name__ for d in docs]
        raise InputError(
            f"-f {path}: must contain exactly one DeepSeekServing document, found {len(servings)} "
            f"(kinds: {kinds})"
        )
    return parse_serving(servings[0])


def load_nodes_file(path: str) -> list[dict[str, Any]]:
    """Node objects from a ``kubectl get nodes -o yaml`` List or a multi-document file."""
    docs = _load_yaml_documents(path, "--nodes")
    nodes: list[dict[str, Any]] = []
    for index, doc in enumerate(docs, start=1):
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
    if res.clique_key is not None:
        lines.append(
            f"  NVLink cliques ({res.clique_key}) that can hold a {res.pods_per_replica}-pod group: "
            + (", ".join(res.placement.holding_cliques) or "none")
        )
    lines.append("  objects: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    for title, args in _pod_args(objects):
        lines.append(f"  {title}vllm serve " + " ".join(args))
    return "\n".join(lines) + "\n"


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


def run(args: argparse.Namespace) -> int:
    """Run ``render``; return the exit code."""
    try:
        obj = load_serving_file(args.filename)
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
        planned = plan(obj, inventory, Observed.offline(), now, apis)
    except SpecError as exc:
        sys.stderr.write(f"error: {args.filename}: {exc.one_line()}\n")
        return 1
    except DeepSeekOperatorError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    res, status, objects = planned.resolution, planned.status, planned.objects
    refusal = _release_refusal(obj.spec, res)
    if refusal:
        sys.stderr.write(f"error: {args.filename}: {refusal}\n")
        return 1
    if args.output == "json":
        sys.stdout.write(
            json.dumps({"status": status_dict(status), "objects": objects}, indent=2) + "\n"
        )
    elif args.output == "yaml":
        header = yaml.dump(
            {"status": status_dict(status)}, Dumper=_NoAliasDumper, sort_keys=False, width=100
        )
        sys.stdout.write("".join(f"# {line}\n" for line in header.splitlines()))
        sys.stdout.write(yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, width=100))
    else:
        sys.stdout.write(_text_report(obj, res, status, objects, len(inventory)))
    return 0
