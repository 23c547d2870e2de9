"""``deepseek-operator render``: the operator's decision, status and manifests, offline.

Reads one DeepSeekServing and the Nodes with their ``gpu.nvidia.com`` ResourceSlices and the
ResourceClaims that hold their devices (``kubectl get nodes,resourceslices,resourceclaims -A -o
yaml`` output, Node, ResourceSlice and ResourceClaim documents, or the live cluster), then calls the same pure :func:`~deepseek_operator.plan.plan` the
operator calls. Exit 0 on a valid spec, 1 with one line on stderr otherwise; never a traceback.
This package stays free of kopf and (unless --from-cluster) of the Kubernetes client, so the
command starts fast.

This module holds the command (its flags and :func:`run`); :mod:`.inputs` reads the
DeepSeekServing and Node files, :mod:`.cluster` reads the live cluster for --from-cluster, and
:mod:`.output` formats each preview.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.commands.render.cluster import (
    cluster_group_versions,
    cluster_nodes,
    cluster_resource_claims,
    cluster_resource_slices,
)
from deepseek_operator.commands.render.inputs import (
    ServingDocument,
    load_cluster_inputs,
    load_serving_file,
)
from deepseek_operator.commands.render.output import SEPARATORS, format_preview
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.engine.disaggregated import apart
from deepseek_operator.engine.kueue import queue_note
from deepseek_operator.engine.resolution import Resolution
from deepseek_operator.errors import DeepSeekOperatorError, InputError, SpecError
from deepseek_operator.names import (
    COMPUTE_DOMAIN_API_VERSION,
    DEFAULT_ROUTER_IMAGE,
    DRA_API_VERSION,
    KUEUE_API_VERSION,
    LWS_API_VERSION,
)
from deepseek_operator.nodes.facts import NodeInventory, build_inventory
from deepseek_operator.plan import Observed, Plan, plan


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
        "--nodes",
        help="`kubectl get nodes,resourceslices,resourceclaims -A -o yaml` output (Lists) or "
        "Node, ResourceSlice and ResourceClaim documents; the gpu.nvidia.com slices state a "
        "DRA node's GPUs, the claims which of them are not free",
    )
    nodes.add_argument(
        "--from-cluster",
        action="store_true",
        help="read the Nodes (and ResourceSlices and ResourceClaims) from the current kubeconfig",
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
    parser.add_argument(
        "--router-image",
        default=DEFAULT_ROUTER_IMAGE,
        help="the operator's router image (its run --router-image): what a spec without "
        "spec.router.image runs",
    )


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
        raw_nodes: list[dict[str, Any]] = []
        slices: list[dict[str, Any]] = []
        claims: list[dict[str, Any]] = []
        if args.from_cluster:
            raw_nodes = cluster_nodes()
        elif args.nodes:
            raw_nodes, slices, claims = load_cluster_inputs(args.nodes)
        lws, compute_domain = args.leader_worker_set, args.compute_domain
        kueue: bool | None = None  # offline: whether the cluster runs Kueue is not known
        if args.from_cluster:  # what this cluster serves, as the operator would see it
            served = cluster_group_versions()
            if DRA_API_VERSION in served:
                slices = cluster_resource_slices()
                claims = cluster_resource_claims()
            lws = lws and LWS_API_VERSION in served
            compute_domain = compute_domain and COMPUTE_DOMAIN_API_VERSION in served
            kueue = KUEUE_API_VERSION in served
        inventory = build_inventory(raw_nodes, slices, claims)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        apis = ClusterApis(
            leader_worker_set=lws,
            compute_domain=compute_domain,
            kueue=kueue is not False,
            router_image=args.router_image,
        )
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
        together = apart(one.roles)
        if together is not None:
            # A P:D shape that cannot be placed is refused like an unsupported release.
            refusal = f"spec.disaggregation.roles: cannot be placed: {together.message}"
        for index, role in enumerate(one.roles):
            # A role's backend is spec.disaggregation.roles[i].moeBackend.
            role_refusal = _release_refusal(role.spec, role.resolution)
            refusal = refusal or role_refusal.replace(
                "spec.moeBackend", f"spec.disaggregation.roles[{index}].moeBackend", 1
            )
        if refusal:
            refusals.append(f"error: {document.where}{refusal}\n")
    if refusals:
        sys.stderr.write("".join(refusals))
        return 1
    # Information, not a refusal: a queue name is valid with or without Kueue.
    for document in documents:
        note = queue_note(document.obj.spec, kueue)
        if note:
            sys.stderr.write(f"info: {document.where}{note}\n")
    sys.stdout.write(
        SEPARATORS[args.output].join(
            format_preview(
                args, d.obj, p.resolution, p.status, p.objects, len(inventory), a, p.roles
            )
            for d, p, a in zip(documents, planned, actions, strict=True)
        )
    )
    return 0
