"""Prefill/decode conformance: our disaggregated rendering against each vLLM release's own code.

Runs in the operator's virtualenv. For each release it generates a matrix of disaggregated
DeepSeekServings (both roles' MoE backends x both roles' layouts x kvCacheDtype x speculative
decoding, over 500 specs), renders every pod template of both roles with OUR plan(), and asks the
release (conformance/pd_oracle.py, run with the release's python in one process) about each
pod's argv. It then checks, per spec we accept:

a. every pod's argv is accepted by the release's serve parser, ``vllm serve``'s validation and
   ``AsyncEngineArgs.from_cli_args``, and its ``--kv-transfer-config`` parses into the release's
   own ``KVTransferConfig`` with the connector and the role's ``kv_role``;
b. the release's own ``compute_nixl_compatibility_hash`` is the same on every pod of both roles
   (a hash disagreement is a pair that would refuse itself at the handshake).

And per spec we refuse because a role's extraArgs would change a hashed factor: the release's
hash of the two roles differs (or a role's argv is refused), i.e. we refuse nothing vLLM accepts
as compatible.

Two KV-transfer refusals are asked of each release's own code, per role and layout: sleep mode
(``--enable-sleep-mode``; the operator renders the pull NixlConnector on UCX, which the releases
that check it accept: no pod may be refused) and V4.1's ``latency_specialized`` decode (we refuse
it in a role exactly when the release's specialized decode requires no KV transfer and parses the
role's ``--additional-config`` as asking for it).

The disaggregated examples under examples/ run on every release too: one we accept must pass
(a) and (b); one we refuse for the release (a role's extraArgs option or backend the release does
not have) must have a pod argv the release's own parser refuses; any other refusal of an example
on the NVL72 inventory is a mismatch. It prints a table per release and exits non-zero on any
mismatch.

Usage: python -m conformance.pd_harness [--release X ...] [--limit N]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from typing import Any

from conformance.harness import example_servings, pod_env
from conformance.launcher import ROOT, ask
from deepseek_operator.api.load import ServingObject, parse_serving
from deepseek_operator.catalog.vllm import supported_releases
from deepseek_operator.engine.checks import CheckCategory
from deepseek_operator.errors import SpecError
from deepseek_operator.names import LABEL_PD_ROLE, LWS_KIND
from deepseek_operator.nodes.facts import build_inventory
from deepseek_operator.plan import Observed, plan
from deepseek_operator.render.workload import render_objects

NOW = "2026-12-04T00:00:00Z"
# The checkpoint's KV geometry as the hash reads it: the same checkpoint in both roles, so only
# equality matters; a stand-in for what the release would read from config.json.
MODEL_GEOMETRY = {"num_kv_heads": 1, "head_size": 512, "num_hidden_layers": 43}

BACKENDS = ("auto", "deep_gemm_mega_moe", "flashinfer_trtllm", "triton")
LAYOUTS = {
    "TP4-EP": {"tensorParallelSize": 4, "expertParallel": True},
    "TP2-DP2-EP": {"tensorParallelSize": 2, "dataParallelSize": 2, "expertParallel": True},
    "DEP8": {
        "tensorParallelSize": 1,
        "dataParallelSize": 8,
        "dataParallelSizeLocal": 4,
        "expertParallel": True,
    },
}
KV_DTYPES = ("fp8", "auto")
SPECULATIVE: tuple[dict[str, Any] | None, ...] = (
    None,
    {"method": "mtp", "num_speculative_tokens": 1},
)
# A role's extraArgs that change a hashed factor (the spec is refused; the hashes must differ).
HASH_CHANGES: tuple[tuple[str, list[str]], ...] = (
    ("kv-cache-dtype", ["--kv-cache-dtype", "auto"]),
    ("dtype", ["--dtype", "float16"]),
    ("hybrid-kv-cache-manager", ["--disable-hybrid-kv-cache-manager"]),
    (
        "speculative-config",
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'],
    ),
    ("attention-backend", ["--attention-backend", "FLASHMLA_SPARSE"]),
)


def _base() -> dict[str, Any]:
    return {
        "apiVersion": "serving.deepseek-operator.io/v1alpha1",
        "kind": "DeepSeekServing",
        "metadata": {"name": "pd", "namespace": "llm"},
        "spec": {
            "model": {"name": "deepseek-ai/DeepSeek-V4.1-Flash"},
            "image": "vllm/vllm-openai:deepseekv41-flash-0909",
            "engine": {"maxModelLen": 131072, "extraArgs": ["--language-model-only"]},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "disaggregation": {
                "roles": [
                    {
                        "role": "prefill",
                        "engine": {"maxNumBatchedTokens": 16384, "enforceEager": True},
                    },
                    {"role": "decode", "engine": {"maxNumSeqs": 256, "maxNumBatchedTokens": 512}},
                ]
            },
        },
    }


def matrix(release: str) -> list[tuple[str, dict[str, Any]]]:
    """Every spec of the accepted matrix for ``release``, with an id."""
    out = []
    for pb, db, pl, dl, kv, sc in itertools.product(
        BACKENDS, BACKENDS, LAYOUTS, LAYOUTS, KV_DTYPES, SPECULATIVE
    ):
        raw = _base()
        spec = raw["spec"]
        spec["vllmVersion"] = release
        spec["engine"]["kvCacheDtype"] = kv
        if sc is not None:
            spec["engine"]["speculativeConfig"] = sc
        prefill, decode = spec["disaggregation"]["roles"]
        prefill.update(moeBackend=pb, parallelism=dict(LAYOUTS[pl]))
        decode.update(moeBackend=db, parallelism=dict(LAYOUTS[dl]))
        out.append((f"P[{pb},{pl}] D[{db},{dl}] kv={kv} spec={'mtp' if sc else 'off'}", raw))
    return out


def negatives(release: str) -> list[tuple[str, dict[str, Any]]]:
    """Specs refused because a role's extraArgs change a hashed factor."""
    out = []
    for (name, args), role in itertools.product(HASH_CHANGES, ("prefill", "decode")):
        raw = _base()
        raw["spec"]["vllmVersion"] = release
        raw["spec"]["engine"]["kvCacheDtype"] = "fp8"
        for r in raw["spec"]["disaggregation"]["roles"]:
            r.update(moeBackend="auto", parallelism=dict(LAYOUTS["TP4-EP"]))
            if r["role"] == role:
                r["engine"]["extraArgs"] = list(args)
        out.append((f"{role} extraArgs {name}", raw))
    return out


SLEEP_ROLES = ("prefill", "decode", "both")
SPECIALIZED_DECODE_ARGS = ["--additional-config", '{"decode_backend": "latency_specialized"}']


def kv_refusal_cases(release: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(family, id, spec): sleep mode per role and layout, the specialized decode per role."""
    out = []
    for layout, where in itertools.product(LAYOUTS, SLEEP_ROLES):
        raw = _base()
        raw["spec"]["vllmVersion"] = release
        for r in raw["spec"]["disaggregation"]["roles"]:
            r.update(moeBackend="auto", parallelism=dict(LAYOUTS[layout]))
            if where in (r["role"], "both"):
                r["engine"]["extraArgs"] = ["--enable-sleep-mode"]
        out.append(("sleep", f"sleep mode in {where} [{layout}]", raw))
    for role in ("prefill", "decode"):
        raw = _base()
        raw["spec"]["vllmVersion"] = release
        for r in raw["spec"]["disaggregation"]["roles"]:
            r.update(moeBackend="auto", parallelism=dict(LAYOUTS["TP4-EP"]))
            if r["role"] == role:
                r["engine"]["extraArgs"] = list(SPECIALIZED_DECODE_ARGS)
        out.append(("specialized", f"{role} decode_backend=latency_specialized", raw))
    return out


# Our refusals of a role that stand for the release's parser refusing the role's argv.
ARGV_REFUSALS = frozenset({"ExtraArgsInRelease", "KnownMoEBackend"})


def example_cases(release: str) -> list[tuple[str, dict[str, Any]]]:
    """Every disaggregated example, asked of ``release``."""
    out = []
    for path, doc in example_servings():
        if "disaggregation" in doc["spec"]:
            raw = copy.deepcopy(doc)
            raw["spec"]["vllmVersion"] = release
            out.append((f"examples/{path.name}", raw))
    return out


def refusals(obj: ServingObject, inventory: Any) -> set[str]:
    """The names of the checks that make some role of ``obj`` unrunnable on ``inventory`` (the
    placement and informational checks that then fail too are consequences, not causes)."""
    planned = plan(obj, inventory, Observed.offline(), NOW)
    return {
        c.name
        for d in planned.roles
        if not d.resolution.backend_runnable
        for c in d.resolution.failed_checks
        if c.category not in (CheckCategory.PLACEMENT, CheckCategory.INFO)
    }


def _pods(obj: ServingObject, inventory: Any) -> list[dict[str, Any]]:
    """Every pod template's argv of both roles, rendered whether or not the role can run."""
    planned = plan(obj, inventory, Observed.offline(), NOW)
    pods = []
    for decided in planned.roles:
        for child in render_objects(obj.for_role(decided.role), decided.resolution):
            role = child["metadata"]["labels"].get(LABEL_PD_ROLE)
            if child["kind"] == "Deployment":
                templates = [(0, child["spec"]["template"])]
            elif child["kind"] == LWS_KIND:
                lws = child["spec"]["leaderWorkerTemplate"]
                # The leader, and the last worker as Kubernetes expands its $(VAR) references.
                templates = [(0, lws["leaderTemplate"]), (lws["size"] - 1, lws["workerTemplate"])]
            else:
                continue
            for index, template in templates:
                env = pod_env(index)
                argv = [env.get(a, a) for a in template["spec"]["containers"][0]["args"]]
                pods.append({"role": role, "argv": ["serve", *argv]})
    return pods


def _unchecked(raw: dict[str, Any]) -> ServingObject:
    """A refused spec as the engine would render it: types only, no static rules."""
    from deepseek_operator.api.load import parse_spec_types

    meta = raw["metadata"]
    return ServingObject(
        name=meta["name"], namespace=meta["namespace"], spec=parse_spec_types(raw["spec"])
    )


def run_release(release: str, limit: int | None) -> tuple[dict[str, int], list[str]]:
    """The counts and mismatches of one release."""
    inventory = build_inventory(
        __import__("yaml").safe_load((ROOT / "examples/nodes-gb200-nvl72.yaml").read_text())[
            "items"
        ]
    )
    accepted = matrix(release)[:limit]
    cases, expect = [], {}
    for case_id, raw in accepted:
        obj = parse_serving(copy.deepcopy(raw))
        cases.append({"id": case_id, "model": MODEL_GEOMETRY, "pods": _pods(obj, inventory)})
        expect[case_id] = "accepted"
    refused_by_us = 0
    for case_id, raw in negatives(release):
        try:
            parse_serving(copy.deepcopy(raw))
        except SpecError:
            refused_by_us += 1
            obj = _unchecked(raw)
            cases.append({"id": case_id, "model": MODEL_GEOMETRY, "pods": _pods(obj, inventory)})
            expect[case_id] = "refused"
            continue
        expect[case_id] = "accepted-negative"
    mismatches: list[str] = [
        f"{case_id}: accepted by us although a role changes a hashed factor"
        for case_id, state in expect.items()
        if state == "accepted-negative"
    ]
    examples = example_cases(release)
    for case_id, raw in examples:
        obj = parse_serving(copy.deepcopy(raw))
        ours = refusals(obj, inventory)
        cases.append({"id": case_id, "model": MODEL_GEOMETRY, "pods": _pods(obj, inventory)})
        if not ours:
            expect[case_id] = "accepted"
        elif ours <= ARGV_REFUSALS:
            expect[case_id] = "refused-argv"
        else:
            expect[case_id] = "refused-other"
            mismatches.append(f"{case_id}: refused by us on the NVL72 inventory: {sorted(ours)}")
    families = kv_refusal_cases(release)
    for family, case_id, raw in families:
        obj = parse_serving(copy.deepcopy(raw))
        ours = refusals(obj, inventory)
        cases.append({"id": case_id, "model": MODEL_GEOMETRY, "pods": _pods(obj, inventory)})
        if family == "sleep":
            expect[case_id] = "sleep"
            if ours:
                mismatches.append(f"{case_id}: refused by us: {sorted(ours)}")
        else:
            expect[case_id] = (
                "specialized-refused" if "KVTransferSpecializedDecode" in ours else "specialized"
            )
            if ours - {"KVTransferSpecializedDecode"}:
                mismatches.append(f"{case_id}: refused by us: {sorted(ours)}")
    counts = {
        "specs": len(accepted),
        "pods": 0,
        "hash_disagreements": 0,
        "negatives": 0,
        "examples": len(examples),
        "examples_refused": 0,
        "kv_refusals": len(families),
    }
    told = ask(release, "conformance.pd_oracle", cases)
    specialized_refuses = told["specialized_decode_refuses_kv_transfer"]
    for answer in told["answers"]:
        case_id, pods = answer["id"], answer["pods"]
        hashes = {p.get("hash") for p in pods if p["accepted"]}
        if expect[case_id] == "sleep":
            refused = [p["role"] for p in pods if not p["accepted"] or p["sleep_mode_refused"]]
            if refused or len(hashes) != 1:
                mismatches.append(
                    f"{case_id}: we accept; vLLM refuses the {refused} pods' sleep mode or "
                    f"hashes {sorted(map(str, hashes))}"
                )
            continue
        if expect[case_id].startswith("specialized"):
            asked = any(p.get("decode_backend") == "latency_specialized" for p in pods)
            theirs = specialized_refuses and asked
            if not all(p["accepted"] for p in pods):
                mismatches.append(f"{case_id}: a pod argv is refused: {pods}")
            elif theirs != (expect[case_id] == "specialized-refused"):
                mismatches.append(
                    f"{case_id}: vLLM's specialized decode refuses KV transfer: {theirs} "
                    f"(release: {specialized_refuses}, parsed: {asked}); ours: "
                    f"{expect[case_id] == 'specialized-refused'}"
                )
            continue
        if expect[case_id] == "refused":
            counts["negatives"] += 1
            if all(p["accepted"] for p in pods) and len(hashes) == 1:
                mismatches.append(f"{case_id}: refused by us, but vLLM hashes both roles alike")
            continue
        if expect[case_id] == "refused-argv":
            counts["examples_refused"] += 1
            if all(p["accepted"] for p in pods):
                mismatches.append(f"{case_id}: refused by us, but vLLM accepts every pod's argv")
            continue
        if expect[case_id] == "refused-other":
            continue
        counts["pods"] += len(pods)
        for pod in pods:
            want = {"prefill": "kv_producer", "decode": "kv_consumer"}[pod["role"]]
            if not pod["accepted"]:
                mismatches.append(f"{case_id}: {pod['role']} argv refused: {pod.get('error')}")
            elif (pod["kv_transfer_config"], pod["kv_connector"], pod["kv_role"]) != (
                "KVTransferConfig",
                "NixlConnector",
                want,
            ):
                mismatches.append(f"{case_id}: {pod['role']} KV transfer config {pod}")
        if len(hashes) > 1:
            counts["hash_disagreements"] += 1
            mismatches.append(f"{case_id}: NIXL compatibility hashes differ: {sorted(hashes)}")
    counts["refused_by_us"] = refused_by_us
    return counts, mismatches


def main(argv: list[str] | None = None) -> int:
    """Run every release (or ``--release``) and print a table; non-zero on any mismatch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", action="append")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    releases = args.release or list(supported_releases())
    failed = False
    print(
        "release  specs  pods  hash-disagreements  refused-hash-changes  examples (refused)"
        "  kv-refusal specs  mismatches"
    )
    for release in releases:
        counts, mismatches = run_release(release, args.limit)
        print(
            f"{release:<8} {counts['specs']:>5}  {counts['pods']:>4}  "
            f"{counts['hash_disagreements']:>18}  "
            f"{counts['refused_by_us']:>10}/{len(HASH_CHANGES) * 2:<9}  "
            f"{counts['examples']:>8} ({counts['examples_refused']})    "
            f"{counts['kv_refusals']:>15}  {len(mismatches):>10}"
        )
        for line in mismatches[:50]:
            print(f"  {line}")
        failed = failed or bool(mismatches)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
