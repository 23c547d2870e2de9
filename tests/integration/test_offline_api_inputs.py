"""Inputs where offline ``render`` and ``kubectl apply`` once disagreed now get the same verdict.

Each case is a manifest given as YAML text, as a user writes it: ``kubectl apply --dry-run=server``
against the real kube-apiserver, and ``deepseek-operator render -f``. Nulls (the API server prunes
a null of a non-nullable field without a default, apiextensions' PruneNonNullableNullsWithoutDefaults,
so both accept), go-yaml's plain floats (``1e+308`` is a number to kubectl, so a numeric
``model.revision`` is refused), an alias bomb (kubectl's "excessive aliasing"), and the extraArgs
and model.name rules, whose refusals name the item's index on both paths.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from tests.k8s.cluster import ControlPlane

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]


def _manifest(namespace: str, model: str = "", engine: str = "", top: str = "") -> str:
    return (
        "apiVersion: serving.deepseek-operator.io/v1alpha1\nkind: DeepSeekServing\n"
        f"metadata: {{name: inputs, namespace: {namespace}}}\n{top}"
        f"spec:\n  model: {{name: deepseek-ai/DeepSeek-V4.1-Flash{model}}}\n"
        f"  image: vllm/vllm-openai:v0.33.0\n  engine: {{{engine}}}\n"
    )


def _bomb() -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


CASES = {
    "speculativeConfig null": (dict(engine="speculativeConfig: null"), None),
    "vramMinimumGb null": (dict(model=", vramMinimumGb: null"), None),
    "numeric revision 1e+308": (dict(model=", revision: 1e+308"), "spec.model.revision"),
    "numeric revision 1e3": (dict(model=", revision: 1e3"), "spec.model.revision"),
    "quoted revision '1e3'": (dict(model=", revision: '1e3'"), None),
    "hiddenSize 1e3": (dict(model=", hiddenSize: 1e3"), None),
    "alias bomb": (dict(top=_bomb()), "excessive aliasing"),
    "a few aliases": (dict(model=", servedModelName: &n v41", engine="tokenizerMode: *n"), None),
    "an unknown option": (
        dict(engine="extraArgs: [--seed, '1', --MOE-BACKEND=triton]"),
        "spec.engine.extraArgs[2]",
    ),
    "-tp8": (dict(engine="extraArgs: [-tp8]"), "spec.engine.extraArgs[0]"),
    "an option and its value in one item": (
        dict(engine="extraArgs: ['--max-log-len 8']"),
        "spec.engine.extraArgs[0]",
    ),
    "a newline in an option": (
        dict(engine='extraArgs: ["--enforce-eager\\n"]'),
        "spec.engine.extraArgs[0]",
    ),
    "a bare value": (dict(engine="extraArgs: ['; rm -rf /']"), "spec.engine.extraArgs"),
    "values of an option": (
        dict(engine="extraArgs: [--seed, '1', --cudagraph-capture-sizes, '1', '2', -O3]"),
        None,
    ),
    "a newline in model.name": (dict(model="\\n--trust-remote-code"), "spec.model.name"),
    "an absolute model path": (dict(model=""), None),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_render_and_kubectl_give_the_same_verdict(
    crds: ControlPlane, namespace: str, tmp_path: pathlib.Path, case: str
) -> None:
    parts, refused_at = CASES[case]
    text = _manifest(namespace, **parts)
    if case == "an absolute model path":
        text = text.replace("name: deepseek-ai/DeepSeek-V4.1-Flash", "name: /models/v41")
    path = tmp_path / "serving.yaml"
    path.write_text(text)
    server = crds.kubectl("apply", "--dry-run=server", "-f", str(path), check=False)
    offline = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "render", "-f", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert "Traceback" not in offline.stderr
    if refused_at is None:
        assert server.returncode == 0, server.stderr
        assert offline.returncode == 0, offline.stderr
        return
    assert server.returncode != 0, f"kubectl accepted {case}"
    assert offline.returncode == 1, f"render accepted {case}"
    assert refused_at in server.stderr, server.stderr
    assert refused_at in offline.stderr, offline.stderr
    assert len(offline.stderr.strip().splitlines()) == 1, offline.stderr
