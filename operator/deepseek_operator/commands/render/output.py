"""``render``'s output: one DeepSeekServing's preview as a text report, YAML or JSON.

The text report shows the backend decision, the checks, the conditions, the capacity table and
each pod's ``vllm serve`` argv; ``-o yaml`` writes the status as a comment over apply-able
manifests (no YAML aliases), ``-o json`` one object of status and objects. With --from-cluster
each format also lists the actions the operator would take.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import yaml

from deepseek_operator.api.load import ServingObject
from deepseek_operator.api.status import DeepSeekServingStatus
from deepseek_operator.engine import capacity_report, layout_advice
from deepseek_operator.engine.disaggregated import RoleDecision
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.names import LABEL_COMPONENT, LABEL_PD_ROLE, LWS_KIND
from deepseek_operator.render.status import status_dict


class _NoAliasDumper(yaml.SafeDumper):
    """A safe dumper that writes repeated objects in full: users paste the output as manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _decision_lines(res: Resolution, nodes: int) -> list[str]:
    """The backend decision, its layout and eligible nodes, and the checks table."""
    lines = [
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
    return lines


def _text_report(
    obj: ServingObject,
    res: Resolution,
    status: DeepSeekServingStatus,
    objects: Sequence[dict[str, Any]],
    nodes: int,
    roles: Sequence[RoleDecision] = (),
) -> str:
    lines = [f"DeepSeekServing {obj.namespace}/{obj.name}  model {obj.spec.model.name}"]
    if not roles:
        lines += _decision_lines(res, nodes)
    for role in roles:
        # A disaggregated serving: each role's decision, then the summed-up conditions.
        lines.append(f"  role {role.role}:")
        lines += _decision_lines(role.resolution, nodes)
        lines += capacity_lines(role.resolution)
    lines.append("  CONDITION        STATUS  REASON                MESSAGE")
    for c in status.conditions:
        lines.append(f"  {c.type:<15}  {c.status:<6}  {c.reason:<20}  {c.message}")
    lines.append("")
    for one in [res] if not roles else [r.resolution for r in roles]:
        if not roles:
            lines += capacity_lines(one)
        if one.clique_key is not None:
            lines.append(
                f"  NVLink cliques ({one.clique_key}) that can hold a {one.pods_per_replica}-pod group: "
                + (", ".join(one.placement.holding_cliques) or "none")
            )
    if status.endpoint is not None:
        lines.append(f"  endpoint: {status.endpoint.url} (Service {status.endpoint.service})")
    lines.append("  objects: " + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects))
    lines += _argv_lines(objects)
    lines += _router_lines(objects)
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
    if rep.layouts:
        lines.append("  layouts of the same GPUs the decision rules accept (best first):")
        lines.append(f"    {'GPU':<16} {'LAYOUT':<16} {'REQUESTS':>10}  KV LAYOUT")
        for o in rep.layouts:
            mark = "  (chosen)" if o.chosen else ""
            lines.append(
                f"    {o.gpu_product:<16} {o.name:<16} {o.concurrent_requests:>10.2f}  "
                f"{o.kv_layout}{mark}"
            )
        advice = layout_advice.advice_line(rep.layouts)
        if advice:
            lines.append(f"  {advice}")
    return [*lines, ""]


def _pod_args(objects: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The vllm argv of each pod template: the Deployment's, or the LWS leader's (first, untitled)
    and worker's."""
    out: list[tuple[str, list[str]]] = []
    for o in objects:
        if o["kind"] == "Deployment" and o["metadata"]["labels"].get(LABEL_COMPONENT) != "router":
            out.append(("", o["spec"]["template"]["spec"]["containers"][0]["args"]))
        elif o["kind"] == LWS_KIND:
            tmpl = o["spec"]["leaderWorkerTemplate"]
            for title, key in (("", "leaderTemplate"), ("worker: ", "workerTemplate")):
                out.append((title, tmpl[key]["spec"]["containers"][0]["args"]))
    return out


def _router_lines(objects: Sequence[dict[str, Any]]) -> list[str]:
    """The router pod's ``vllm-router`` line (its image first), when it runs."""
    lines = []
    for o in objects:
        if o["kind"] == "Deployment" and o["metadata"]["labels"].get(LABEL_COMPONENT) == "router":
            container = o["spec"]["template"]["spec"]["containers"][0]
            lines.append(f"  router pods ({container['image']}, {o['spec']['replicas']}):")
            lines.append("  vllm-router " + " ".join(container["args"]))
    return lines


def _argv_lines(objects: Sequence[dict[str, Any]]) -> list[str]:
    """Each pod's ``vllm serve`` line; a disaggregated serving's under a line naming the role."""
    lines: list[str] = []
    for role in dict.fromkeys(o["metadata"]["labels"].get(LABEL_PD_ROLE) for o in objects):
        if role is not None:
            lines.append(f"  {role} pods:")
        mine = [o for o in objects if o["metadata"]["labels"].get(LABEL_PD_ROLE) == role]
        lines += [f"  {title}vllm serve " + " ".join(args) for title, args in _pod_args(mine)]
    return lines


def format_preview(
    args: argparse.Namespace,
    obj: ServingObject,
    res: Resolution,
    status: DeepSeekServingStatus,
    objects: Sequence[dict[str, Any]],
    nodes: int,
    actions: Sequence[str] | None = None,
    roles: Sequence[RoleDecision] = (),
) -> str:
    """One DeepSeekServing's preview in the chosen format (``actions``: with --from-cluster,
    what the operator would do against that cluster, one line each; ``roles``: a disaggregated
    serving's decision per role)."""
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
    text = _text_report(obj, res, status, objects, nodes, roles)
    if actions is not None:
        text += "\nActions against the cluster (nothing is written):\n"
        text += "".join(f"  {a}\n" for a in actions) if actions else "  none\n"
    return text


# Between two DeepSeekServings' previews: a YAML document separator keeps `-o yaml` apply-able,
# JSON objects follow each other (`jq -s` reads them as one array), text reports get a blank line.
SEPARATORS = {"yaml": "---\n", "json": "", "text": "\n"}
