"""Hostile DeepSeekServing objects for property tests (hypothesis strategies).

:func:`hostile` mutates a valid seed (examples/dsv41-flash-gb200.yaml) one to three times: a
wrong-typed or out-of-range value at any spec path (strings that look like numbers or booleans,
integral and fractional floats, huge and negative integers, ``null``), an unknown field at any
level, owned vLLM flags in ``extraArgs``, a dropped field, and an invalid ``metadata.name``.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = pathlib.Path(__file__).resolve().parents[1]
SEED = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())

# Every field of the spec (and a few metadata/root places), as key paths from the object root.
PATHS: list[tuple[str, ...]] = [
    ("spec",),
    ("spec", "model"),
    ("spec", "model", "name"),
    ("spec", "model", "revision"),
    ("spec", "model", "servedModelName"),
    ("spec", "model", "architecture"),
    ("spec", "model", "expertDtype"),
    ("spec", "model", "hiddenSize"),
    ("spec", "model", "numRoutedExperts"),
    ("spec", "model", "vramMinimumGb"),
    ("spec", "image"),
    ("spec", "replicas"),
    ("spec", "moeBackend"),
    ("spec", "parallelism"),
    ("spec", "parallelism", "tensorParallelSize"),
    ("spec", "parallelism", "pipelineParallelSize"),
    ("spec", "parallelism", "dataParallelSize"),
    ("spec", "parallelism", "dataParallelSizeLocal"),
    ("spec", "parallelism", "expertParallel"),
    ("spec", "parallelism", "enableEplb"),
    ("spec", "parallelism", "decodeContextParallelSize"),
    ("spec", "parallelism", "prefillContextParallelSize"),
    ("spec", "parallelism", "distributedExecutorBackend"),
    ("spec", "engine"),
    ("spec", "engine", "maxModelLen"),
    ("spec", "engine", "kvCacheDtype"),
    ("spec", "engine", "maxNumSeqs"),
    ("spec", "engine", "enablePrefixCaching"),
    ("spec", "engine", "gpuMemoryUtilization"),
    ("spec", "engine", "trustRemoteCode"),
    ("spec", "engine", "tokenizerMode"),
    ("spec", "engine", "speculativeConfig"),
    ("spec", "engine", "ubatchSize"),
    ("spec", "engine", "extraArgs"),
    ("spec", "env"),
    ("spec", "resources"),
    ("spec", "resources", "requests"),
    ("spec", "resources", "requests", "cpu"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "gpuResourceName"),
    ("spec", "modelCache"),
    ("spec", "modelCache", "claimName"),
    ("spec", "port"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
]
UNKNOWN_PARENTS: list[tuple[str, ...]] = [
    (),
    ("metadata",),
    ("spec",),
    ("spec", "model"),
    ("spec", "parallelism"),
    ("spec", "engine"),
    ("spec", "resources"),
    ("spec", "modelCache"),
]
FLAGS = [
    "--tensor-parallel-size=8",
    "-tp",
    "--moe-backend=triton",
    "--moe_backend",
    "--trust-remote-code",
    "--enable-expert-parallel",
    "--language-model-only",
    "--max-num-seqs=4",
    "--kernel-config={}",
    "--no-enable-prefix-caching",
    '--hf-overrides={"norm_topk_prob":false}',
    "--hf-overrides.text_config.num_local_experts=8",
    '--hf-overrides={"rope_theta":1}',
    "--hf-config-path=/m",
    "--quant",
    "--eplb-config.num_redundant_experts=8",
    '--eplb-config={"num_redundant_experts": 4, "window_size": 9}',
    '{"num_redundant_experts": "4"}',
    "--eplb-config.num_redundant_experts=8\n",
    '--eplb-conf={"num_redundant_experts":2}',
    '{"num_redundant_experts": 1, "a": {"num_redundant_experts": 2}}',
]
NUMBERS = st.sampled_from(
    [0, 1, -1, 2, 3, 4, 8, 64, 128, 1023, 1024, 1025, 16384, 2**31 - 1, 2**31, 2**53, 2**63 - 1]
)
STRINGS = st.one_of(
    st.sampled_from(
        ["", "4", "true", "auto", "fp8", "mp", "ray", "1.5", "deep_gemm_mega_moe", "Triton"]
    ),
    st.sampled_from(FLAGS),
    st.text(alphabet="abcXYZ-_.09/ ", min_size=1, max_size=12),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    NUMBERS,
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0.5, 1.0, 4.0, 0.9, 1.5, -0.0, 1e3]),
    STRINGS,
)
VALUES = st.one_of(
    SCALARS,
    st.lists(st.one_of(STRINGS, st.none(), NUMBERS), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "value", "cpu", "key"]), SCALARS, max_size=2),
)
VALID_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,37}[a-z0-9]", fullmatch=True)
NAMES = st.one_of(
    VALID_NAMES,
    VALID_NAMES,
    VALID_NAMES,
    st.sampled_from(
        [
            "dsv41",
            "a",
            "x" * 40,
            "x" * 41,
            "Upper",
            "1abc",
            "a.b",
            "ends-",
            "-starts",
            "a_b",
            "",
            "a" * 64,
        ]
    ),
    st.from_regex(r"[a-z][a-z0-9-]{0,45}[a-z0-9]", fullmatch=True),
)
# Values of the right type, to reach the bounds and the cross-field rules.
PLAUSIBLE = st.one_of(NUMBERS, st.booleans(), STRINGS)


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


@st.composite
def hostile(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": draw(NAMES)}
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        kind = draw(
            st.sampled_from(["none", "value", "plausible", "plausible", "unknown", "args", "drop"])
        )
        if kind == "none":
            continue
        if kind == "value":
            _set(doc, draw(st.sampled_from(PATHS)), draw(VALUES))
        elif kind == "plausible":
            _set(doc, draw(st.sampled_from(PATHS[2:-2])), draw(PLAUSIBLE))
        elif kind == "unknown":
            parent = draw(st.sampled_from(UNKNOWN_PARENTS))
            _set(
                doc,
                (*parent, draw(st.sampled_from(["foo", "Replicas", "tensor_parallel_size"]))),
                1,
            )
        elif kind == "args":
            _set(
                doc,
                ("spec", "engine", "extraArgs"),
                draw(st.lists(st.sampled_from(FLAGS), min_size=1, max_size=3)),
            )
        else:  # drop a field
            path = draw(st.sampled_from(PATHS))
            parent = doc
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
    return doc
