"""Which vLLM release a DeepSeekServing runs, and the checks that depend only on that release.

The release comes from ``spec.vllmVersion``, else from an image tag of the form ``vX.Y.Z``
(``vllm/vllm-openai:v0.33.0``), else it is the newest supported release, and the ``VLLMRelease``
check says which source was used. An unsupported release fails that check: the backend cannot be
decided against rules nobody proved, so BackendResolved is False with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deepseek_operator.api.extra_args import parser
from deepseek_operator.api.spec import DeepSeekServingSpec
from deepseek_operator.catalog.models import V41_ARCH
from deepseek_operator.catalog.vllm import newest_release, supported_releases
from deepseek_operator.catalog.vllm.rules import ReleaseRules, release_rules
from deepseek_operator.engine.checks import CheckCategory, CheckResult, check
from deepseek_operator.engine.model_facts import ModelFacts

SPEC = CheckCategory.SPEC
_IMAGE_TAG_RELEASE = re.compile(r"^v(\d+\.\d+\.\d+)$")


@dataclass(frozen=True)
class ReleaseChoice:
    """The release the rules are taken from, where that came from, and its rules if supported."""

    version: str
    source: str
    rules: ReleaseRules | None


def image_tag_release(image: str) -> str | None:
    """``vllm/vllm-openai:v0.33.0`` → ``0.33.0``; None when the tag is not ``vX.Y.Z``."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _IMAGE_TAG_RELEASE.match(name.rsplit(":", 1)[1])
    return match.group(1) if match else None


def choose_release(spec: DeepSeekServingSpec) -> ReleaseChoice:
    """spec.vllmVersion, else the image tag, else the newest supported release."""
    if spec.vllm_version:
        version, source = spec.vllm_version, "spec.vllmVersion"
    elif (tagged := image_tag_release(spec.image)) is not None:
        version, source = tagged, f"image tag of {spec.image}"
    else:
        version = newest_release()
        source = (
            "the newest supported release: neither spec.vllmVersion nor an image tag vX.Y.Z "
            "names one"
        )
    rules = release_rules(version) if version in supported_releases() else None
    return ReleaseChoice(version, source, rules)


def release_check(choice: ReleaseChoice) -> CheckResult:
    """The rules come from a supported release."""
    if choice.rules is None:
        return check(
            "VLLMRelease",
            SPEC,
            "",
            passed=False,
            message=f"vLLM {choice.version} ({choice.source}) is not a supported release; supported: "
            + ", ".join(supported_releases())
            + ". Set spec.vllmVersion to the supported release the image runs",
        )
    return check(
        "VLLMRelease",
        SPEC,
        "",
        passed=True,
        message=f"vLLM {choice.version} rules ({choice.source})",
    )


def backend_name(rules: ReleaseRules, backend: str) -> CheckResult:
    """The release's MoEBackend Literal has ``backend`` (else its parser refuses the argv)."""
    names = rules.data.moe_backends
    if backend in names:
        return check(
            "KnownMoEBackend", SPEC, "", passed=True, message=f"vLLM {rules.release} has {backend}"
        )
    return check(
        "KnownMoEBackend",
        SPEC,
        "",
        passed=False,
        message=f"vLLM {rules.release} has no --moe-backend {backend} (its parser refuses it); its "
        "backends: " + ", ".join(names),
    )


def extra_args_in_release(rules: ReleaseRules, spec: DeepSeekServingSpec) -> CheckResult | None:
    """Every extraArgs option is one of this release's (admission checked the union of the
    supported releases; an option only another release has makes this one's parser exit)."""
    if not spec.engine.extra_args:
        return None
    missing = parser.not_in_release(spec.engine.extra_args, rules.release)
    if not missing:
        return check(
            "ExtraArgsInRelease",
            SPEC,
            "",
            passed=True,
            message=f"vLLM {rules.release} has every extraArgs option",
        )
    item = missing[0]
    hint = parser.nearest(item, rules.release)
    return check(
        "ExtraArgsInRelease",
        SPEC,
        "",
        passed=False,
        message=f"vLLM {rules.release}'s parser has no option {item!r} in spec.engine.extraArgs (it exits "
        "with 'unrecognized arguments')"
        + (f"; did you mean {hint}?" if hint else "")
        + f" ({len(missing)} such item(s))",
    )


def multi_node_executor(
    rules: ReleaseRules, spec: DeepSeekServingSpec, pods_per_replica: int
) -> CheckResult | None:
    """A replica spanning pods runs ``--nnodes`` > 1, which the release's ``ParallelConfig``
    accepts only with some distributed executor backends (any MoE backend)."""
    if pods_per_replica <= 1:
        return None
    executor = spec.parallelism.distributed_executor_backend
    allowed = sorted(rules.data.multi_node_executor_backends)
    message = (
        f"a replica spans {pods_per_replica} pods (--nnodes {pods_per_replica}) with "
        f"distributedExecutorBackend {executor}"
    )
    if rules.multi_node_executor_allowed(executor):
        return check("MultiNodeExecutor", SPEC, "", passed=True, message=message)
    return check(
        "MultiNodeExecutor",
        SPEC,
        "",
        passed=False,
        message=message
        + f". vLLM {rules.release}: nnodes > 1 can only be set when distributed executor backend "
        f"is {' or '.join(allowed)}; set spec.parallelism.distributedExecutorBackend to mp",
    )


def prefill_context_parallel(
    rules: ReleaseRules,
    facts: ModelFacts,
    spec: DeepSeekServingSpec,
    backend: str,
    kv_transfer: bool = False,
) -> CheckResult | None:
    """DeepSeek V4.1's prefill-context-parallel guard (releases that have it; any backend).

    Its prefix-caching clause holds by default (``swa_bounded_replay`` defaults to true; the
    operator renders no flag that turns it off).
    """
    p, e = spec.parallelism, spec.engine
    if not (rules.v41_prefill_context_parallel_guard and facts.architecture == V41_ARCH):
        return None
    if p.prefill_context_parallel_size <= 1:
        return None
    problems = [
        text
        for broken, text in (
            (p.pipeline_parallel_size != 1, f"PP {p.pipeline_parallel_size}"),
            (p.data_parallel_size != 1, f"DP {p.data_parallel_size}"),
            (p.decode_context_parallel_size != 1, f"DCP {p.decode_context_parallel_size}"),
            (e.enable_dbo or e.ubatch_size > 1, "microbatching"),
            (e.speculative_config is not None, "speculative decoding"),
            (rules.is_mega_moe(backend), f"MegaMoE backend {backend}"),
            (kv_transfer, "KV transfer (a disaggregated role)"),
        )
        if broken
    ]
    message = f"PCP {p.prefill_context_parallel_size} on DeepSeek V4.1"
    if problems:
        return check(
            "ContextParallel",
            SPEC,
            "",
            passed=False,
            message=message
            + " with "
            + ", ".join(problems)
            + ". vLLM: DeepSeek-V4.1 PCP currently requires PP=DP=DCP=1, with no microbatching, "
            "speculative decoding, KV transfer, or MegaMoE. Prefix caching requires SWA bounded "
            "replay.",
        )
    return check(
        "ContextParallel",
        SPEC,
        "",
        passed=True,
        message=message + ": PP=DP=DCP=1, nothing excluded",
    )
