"""The vLLM releases the operator supports: one data file per release, exported from the release.

Each ``<release>.json`` beside this module is written by ``conformance/extract.py`` running inside
that release's own virtualenv (``make vllm-catalog``), never by hand: the ``MoEBackend`` names, the
MegaMoE and FlashInfer moe_ep sets, the FlashInfer moe_ep architecture check and GPUs, what a
multi-node replica meets (executor backends allowed with ``--nnodes`` > 1, MegaMoE's symmetric
memory), and the
``vllm serve`` option table (every option string with the dest it sets, plus the parser's
spelling rules). ``make conformance`` proves the rules built on it against the release's code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class ServeOption:
    """One option string of ``vllm serve``."""

    dest: str  # the argparse dest it sets (several option strings may share one)
    takes_value: bool
    choices: tuple[str, ...] | None
    # How many items it consumes after it: "none", "one", "optional" or "many" (argparse nargs).
    # Releases exported before extract.py recorded it read as "one" (or "none" for a flag).
    values: str = "one"


@dataclass(frozen=True)
class VllmRelease:
    """What one vLLM release says about MoE backends and its ``vllm serve`` flags."""

    release: str
    moe_backends: tuple[str, ...]  # the MoEBackend Literal, in vLLM's order
    mega_moe_backends: frozenset[str]
    native_mega_moe_backends: frozenset[str]
    flashinfer_moe_ep_backends: frozenset[str]
    flashinfer_moe_ep_architectures: frozenset[str]
    flashinfer_moe_ep_architecture_checked: frozenset[str]
    flashinfer_moe_ep_capabilities: frozenset[tuple[int, int]]
    serve_options: Mapping[str, ServeOption]
    parser_rules: Mapping[str, bool]
    # ParallelConfig accepts nnodes > 1 only with these distributed executor backends.
    multi_node_executor_backends: frozenset[str]
    # DeepGEMM's MegaMoE buffer is a torch symmetric-memory rendezvous over the EP group.
    mega_moe_symmetric_memory: bool


def version_key(release: str) -> tuple[int, ...]:
    """``"0.33.0"`` → ``(0, 33, 0)``, for ordering releases."""
    return tuple(int(part) for part in release.split("."))


def _data_files() -> dict[str, Any]:
    files = resources.files(__name__)
    return {
        entry.name.removesuffix(".json"): entry
        for entry in files.iterdir()
        if entry.name.endswith(".json")
    }


@functools.cache
def supported_releases() -> tuple[str, ...]:
    """Every release with a data file, oldest first."""
    return tuple(sorted(_data_files(), key=version_key))


def newest_release() -> str:
    """The newest supported release (used when a DeepSeekServing names none)."""
    return supported_releases()[-1]


def _frozen(values: list[str] | None) -> frozenset[str]:
    return frozenset(values or ())


@functools.cache
def vllm_release(release: str) -> VllmRelease:
    """The data of one supported release; KeyError for an unsupported one."""
    entry = _data_files()[release]
    data = json.loads(entry.read_text())
    options = {
        name: ServeOption(
            dest=o["dest"],
            takes_value=o["takes_value"],
            choices=tuple(o["choices"]) if o["choices"] is not None else None,
            values=o.get("values", "one" if o["takes_value"] else "none"),
        )
        for name, o in data["serve"]["options"].items()
    }
    mega = _frozen(data["mega_moe_backends"])
    flashinfer = _frozen(data["flashinfer_moe_ep_backends"])
    # Releases before NATIVE_MEGA_MOE_BACKENDS existed ran every MegaMoE backend that is not a
    # FlashInfer moe_ep one on vLLM's own DeepGEMM path ("use_mega_moe and not use_fi_mega_moe").
    native = data["native_mega_moe_backends"]
    return VllmRelease(
        release=data["release"],
        moe_backends=tuple(data["moe_backends"]),
        mega_moe_backends=mega,
        native_mega_moe_backends=_frozen(native) if native is not None else mega - flashinfer,
        flashinfer_moe_ep_backends=flashinfer,
        flashinfer_moe_ep_architectures=_frozen(data["flashinfer_moe_ep_architectures"]),
        flashinfer_moe_ep_architecture_checked=_frozen(
            data["flashinfer_moe_ep_architecture_checked"]
        ),
        flashinfer_moe_ep_capabilities=frozenset(
            (int(cc[0]), int(cc[1])) for cc in data["flashinfer_moe_ep_capabilities"] or ()
        ),
        serve_options=options,
        parser_rules=dict(data["serve"]["rules"]),
        multi_node_executor_backends=_frozen(data["multi_node"]["executor_backends"]),
        mega_moe_symmetric_memory=bool(data["multi_node"]["mega_moe_symmetric_memory"]),
    )


def all_moe_backends() -> tuple[str, ...]:
    """Every backend name of any supported release (newest release's order first)."""
    names: list[str] = []
    for release in reversed(supported_releases()):
        names += [n for n in vllm_release(release).moe_backends if n not in names]
    return tuple(names)
