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


def set_path(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Put ``value`` at ``path`` in ``doc``, making the objects on the way."""
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
            set_path(doc, draw(st.sampled_from(PATHS)), draw(VALUES))
        elif kind == "plausible":
            set_path(doc, draw(st.sampled_from(PATHS[2:-2])), draw(PLAUSIBLE))
        elif kind == "unknown":
            parent = draw(st.sampled_from(UNKNOWN_PARENTS))
            set_path(
                doc,
                (*parent, draw(st.sampled_from(["foo", "Replicas", "tensor_parallel_size"]))),
                1,
            )
        elif kind == "args":
            set_path(
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


# --- embedded core/v1 parts (issue 26): values for the fields that end up in the pod template ---
# Each strategy mixes values the apps API accepts with values it refuses (formats, required
# fields, enums, wrong types, uniqueness, reserved paths), so a property test can send the same
# value in a Deployment and in a DeepSeekServing and compare the verdicts. Left out on purpose
# (admission is stricter there and says so): hugepages-<size> resources, fileKeyRef env sources,
# bare numbers as sizeLimit and fractional numbers as resource amounts (the wire format), quantities
# padded with whitespace (a Quantity trims it when decoded), numerals without a digit ("." and "+",
# which ParseQuantity reads as 0),
# non-canonical divisor spellings, quantity strings longer than 64 characters, and the env name
# HF_HOME (the operator sets it and drops the user's).

_ASCII_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
_ODD_CHARS = "=\n\té\x7f"
ENV_NAMES = st.one_of(
    st.sampled_from(["VLLM_USE_DEEP_GEMM", "A", "my.env-name", "1ABC", "a b", "", "A=B", "Ä"]),
    st.text(alphabet=_ASCII_PRINTABLE + _ODD_CHARS, min_size=0, max_size=12),
).filter(lambda n: n != "HF_HOME")
LABEL_KEYS = st.one_of(
    st.sampled_from(
        [
            "nvidia.com/gpu.product",
            "kubernetes.io/hostname",
            "pool",
            "a/b/c",
            "/x",
            "x/",
            "Upper.Case/x",
            "-x",
            "x_",
            "a" * 63,
            "a" * 64,
            "p" * 254 + "/x",
            "p" * 253 + "/x",
            "",
        ]
    ),
    st.from_regex(r"([a-z0-9.-]{1,8}/)?[A-Za-z0-9._-]{1,8}", fullmatch=True),
)
LABEL_VALUES = st.one_of(
    st.sampled_from(["", "true", "SM100", "a" * 63, "a" * 64, "-x", "x-", "a b", "a_b.c"]),
    st.from_regex(r"[A-Za-z0-9._-]{0,8}", fullmatch=True),
    st.sampled_from([1, True, None, 1.5]),
)
QUANTITIES = st.one_of(
    st.sampled_from(
        [
            *("1", "16", "500m", "0.5", "1.5", "1Ki", "256Gi", "1e3", "1E3", "+1", ".5", "1."),
            *("0", "abc", "-1", "", "1e1.5", "1Kb", "1ki", "1.5.5", "--1", "1e", "1.5 Gi"),
        ]
    ),
    st.from_regex(
        r"[+-]?[0-9]{1,3}(\.[0-9]{0,2})?(Ki|Mi|Gi|m|k|M|G|e[0-9]|e-[0-9]|E)?", fullmatch=True
    ),
    st.sampled_from([0, 1, 4, 16, -1, 2, True, None]),
)
RESOURCE_NAMES = st.sampled_from(
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "example.com/foo",
        "example.com/Foo_1.x",
        "amd.com/gpu",
        "kubernetes.io/foo",
        "a.kubernetes.io/foo",
        "requests.example.com/foo",
        "foo",
        "Cpu",
        "pods",
        "storage",
        "",
        "example.com/",
        "/foo",
        "a/b/c",
        "Example.com/foo",
        "p" * 245 + "/x",
        "p" * 244 + "/x",
    ]
)
GPU_RESOURCE_NAMES = st.one_of(
    RESOURCE_NAMES,
    st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "gpu", "nvidia.com/gpu "]),
    st.from_regex(r"[a-z0-9.-]{1,10}/[A-Za-z0-9._-]{1,10}", fullmatch=True),
)
STRING_OR_ODD = st.one_of(st.text(max_size=6), st.sampled_from([1, True, None, [], {}]))


@st.composite
def env_lists(draw: st.DrawFn) -> list[Any]:
    """A spec.env list: names, literal and typed values, valueFrom sources, duplicates."""
    items: list[Any] = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        item: dict[str, Any] = {}
        if draw(st.integers(min_value=0, max_value=9)) > 0:
            item["name"] = draw(ENV_NAMES)
        else:
            item["name"] = draw(st.sampled_from([1, None, True]))
        choice = draw(st.sampled_from(["value", "value", "odd", "from", "from", "both", "none"]))
        if choice in ("value", "both"):
            item["value"] = draw(st.one_of(st.text(max_size=6), st.just("")))
        if choice == "odd":
            item["value"] = draw(st.sampled_from([1, 3600, 1.5, True, ["a"], {"a": "b"}]))
        if choice in ("from", "both"):
            item["valueFrom"] = draw(value_from())
        items.append(item)
    if draw(st.booleans()) and isinstance(items[0].get("name"), str):
        items.append({"name": items[0]["name"], "value": "dup"})
    return items


@st.composite
def value_from(draw: st.DrawFn) -> dict[str, Any]:
    """An EnvVarSource: usually one source, sometimes none or two, valid or not."""
    sources = {
        "fieldRef": st.fixed_dictionaries(
            {
                "fieldPath": st.sampled_from(
                    [
                        "metadata.name",
                        "status.podIP",
                        "spec.nodeName",
                        "metadata.labels",
                        "metadata.labels['app']",
                        "metadata.annotations['Example.com/X']",
                        "metadata.labels['-x']",
                        "status.phase",
                        "",
                    ]
                )
            },
            optional={"apiVersion": st.sampled_from(["v1", "v2", ""])},
        ),
        "resourceFieldRef": st.fixed_dictionaries(
            {"resource": st.sampled_from(["limits.cpu", "requests.memory", "limits.gpu", ""])},
            optional={
                "divisor": st.sampled_from(["1", "1m", "1Mi", "0", "2", "abc"]),
                "containerName": st.sampled_from(["vllm", "other"]),
            },
        ),
        "configMapKeyRef": st.fixed_dictionaries(
            {"key": st.sampled_from(["k", "a.b_c-d", "", ".", "..x", "a/b", "a b"])},
            optional={
                "name": st.sampled_from(["cm", "a.b", "", "Upper", "-x"]),
                "optional": st.booleans(),
            },
        ),
        "secretKeyRef": st.fixed_dictionaries(
            {"key": st.sampled_from(["token", "", "x" * 254, "ok.key"])},
            optional={"name": st.sampled_from(["s", "bad_name", ""])},
        ),
    }
    count = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
    names = draw(
        st.lists(st.sampled_from(sorted(sources)), min_size=count, max_size=count, unique=True)
    )
    return {name: draw(sources[name]) for name in names}


TOLERATIONS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.one_of(LABEL_KEYS, st.sampled_from([1, None])),
            "operator": st.sampled_from(["Exists", "Equal", "", "exists", "Lt", "In", 1]),
            "value": st.one_of(LABEL_VALUES, st.just("")),
            "effect": st.sampled_from(
                ["NoSchedule", "PreferNoSchedule", "NoExecute", "", "noschedule", 1]
            ),
            "tolerationSeconds": st.sampled_from([0, 60, -1, 2**63 - 1, "60", 1.5, None]),
        },
    ),
    min_size=1,
    max_size=2,
)
NODE_SELECTORS = st.dictionaries(LABEL_KEYS, LABEL_VALUES, min_size=1, max_size=2)
RESOURCE_LISTS = st.dictionaries(RESOURCE_NAMES, QUANTITIES, min_size=0, max_size=2)
RESOURCES = st.fixed_dictionaries({"requests": RESOURCE_LISTS, "limits": RESOURCE_LISTS})
MOUNT_PATHS = st.one_of(
    st.sampled_from(
        ["/dev/shm", "", "/models", "/root/.cache/huggingface", "/dev/shm/", "relative", "/a:b"]
    ),
    st.text(alphabet="/abc.:-", max_size=8),
    st.sampled_from([1, True]),
)
CLAIM_NAMES = st.one_of(
    st.sampled_from(["models", "a.b", "", "Upper", "-x", "x-", "a_b", "a" * 253, "a" * 254]),
    st.from_regex(r"[a-z0-9.-]{1,10}", fullmatch=True),
)
# The CRD keeps its wire format (sizeLimit a string, resource amounts an integer or a string),
# so a bare number there is refused where a Deployment's Quantity would take it.
SIZE_LIMITS = st.one_of(QUANTITIES.filter(lambda q: not isinstance(q, int)), st.just(None))

EMBEDDED_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "env": env_lists(),
    "tolerations": TOLERATIONS,
    "nodeSelector": NODE_SELECTORS,
    "resources": RESOURCES,
    "modelCache.mountPath": MOUNT_PATHS,
    "modelCache.sizeLimit": SIZE_LIMITS,
    "modelCache.claimName": CLAIM_NAMES,
    "gpuResourceName": GPU_RESOURCE_NAMES,
}
"""For each embedded field (a path under spec), a strategy of values to put there."""


# --- vLLM argv, model.name, nulls, numeric strings and aliases (issue 26, part 3 of extraArgs) ---
# Generated from the option table the operator ships (every supported release), so each run
# draws new spellings: real options bent the ways a user mistypes them (case, '_', an attached
# value, an option and its value in one item, a control character), bare values with and without
# an option before them, model names across the Hugging Face charset and beyond, null at any spec
# path, a number where a string belongs, and documents whose aliases multiply their size.

from deepseek_operator.api.extra_args import parser as _argv  # noqa: E402

_OPTION_NAMES = st.sampled_from(sorted(_argv.OPTIONS))
_VALUE_WORDS = st.one_of(
    st.sampled_from(["1", "0", "-1", "auto", "a b", "; rm -rf /", "{}", '{"a": 1}', "", "-"]),
    st.text(alphabet="abc019 ;-_.=\n\t", max_size=6),
)


@st.composite
def argv_items(draw: st.DrawFn) -> str:
    """One extraArgs item: a table option, bent or not, or a value."""
    name = draw(_OPTION_NAMES)
    bend = draw(
        st.sampled_from(
            [
                "plain",
                "upper",
                "underscore",
                "attached",
                "equals",
                "spaced",
                "control",
                "dotted",
                "no",
                "abbrev",
                "value",
            ]
        )
    )
    value = draw(_VALUE_WORDS)
    if bend == "upper":
        return name.upper()
    if bend == "underscore":
        return name[:2] + name[2:].replace("-", "_")
    if bend == "attached":
        return name + draw(st.sampled_from(["8", "x"]))
    if bend == "equals":
        return f"{name}={value}"
    if bend == "spaced":
        return f"{name} {value}"
    if bend == "control":
        return name + draw(st.sampled_from(["\n", "\t", "\x00", "\x7f"]))
    if bend == "dotted":
        return f"{name}.{draw(st.sampled_from(['mode', 'a_b', 'x.y']))}"
    if bend == "no":
        return "--no-" + name.lstrip("-")
    if bend == "abbrev":
        return name[: max(3, len(name) - draw(st.integers(1, 4)))]
    if bend == "value":
        return value
    return name


ARGV = st.lists(argv_items(), min_size=1, max_size=5)
MODEL_NAMES = st.one_of(
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}/[A-Za-z0-9_.-]{1,12}", fullmatch=True),
    st.from_regex(r"/[a-z0-9/._ -]{0,16}", fullmatch=True),
    st.text(alphabet="abAB09_-./ \n\t:@é", min_size=1, max_size=16),
    st.sampled_from(["a/b\nc", "a--b/c", "a/b..c", "./rel", "owner/", "/", "a/b/c", "x" * 97]),
)
NUMERIC_STRINGS = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.sampled_from([1e308, 1e3, 0.5, -0.0, 1.0])
)
STRING_FIELDS: list[tuple[str, ...]] = [
    ("spec", "model", "name"),
    ("spec", "model", "revision"),
    ("spec", "model", "servedModelName"),
    ("spec", "model", "architecture"),
    ("spec", "image"),
    ("spec", "moeBackend"),
    ("spec", "engine", "kvCacheDtype"),
    ("spec", "engine", "tokenizerMode"),
    ("spec", "gpuResourceName"),
]


@st.composite
def hostile_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid seed with one of: generated extraArgs, a generated model.name, null at a spec path
    (any of PATHS or a string field), or a number in a string field."""
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "inputs"}
    kind = draw(st.sampled_from(["argv", "argv", "argv", "model", "null", "number"]))
    if kind == "argv":
        set_path(doc, ("spec", "engine", "extraArgs"), draw(ARGV))
    elif kind == "model":
        set_path(doc, ("spec", "model", "name"), draw(MODEL_NAMES))
    elif kind == "null":
        path = draw(st.sampled_from([p for p in PATHS if p[0] == "spec"] + STRING_FIELDS))
        set_path(doc, path, None)
    else:
        set_path(doc, draw(st.sampled_from(STRING_FIELDS)), draw(NUMERIC_STRINGS))
    return doc


@st.composite
def aliased_yaml(draw: st.DrawFn) -> str:
    """A DeepSeekServing manifest whose speculativeConfig is built from chained anchors: from a
    few harmless aliases to a billion laughs."""
    levels = draw(st.integers(1, 9))
    width = draw(st.integers(1, 9))
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    anchors = "\n".join("  " + line for line in lines)
    return (
        "apiVersion: serving.deepseek-operator.io/v1alpha1\nkind: DeepSeekServing\n"
        "metadata: {name: aliases}\nspec:\n  model: {name: deepseek-ai/DeepSeek-V4.1-Flash}\n"
        "  image: vllm/vllm-openai:v0.33.0\n  engine:\n    speculativeConfig:\n"
        f"{anchors.replace('  a', '      a')}\n      m: *a{levels - 1}\n"
    )
