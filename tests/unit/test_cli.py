"""The command line as users run it: exit codes, output shapes, one-line errors."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = str(ROOT / "examples/dsv41-flash-gb200.yaml")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("nodes", "backend", "sp"),
    [
        pytest.param(
            "nodes-gb200.yaml", "deep_gemm_mega_moe", True, id="GB200 pool selects MegaMoE"
        ),
        pytest.param("nodes-h200.yaml", "auto", False, id="H200 pool keeps auto"),
        pytest.param(
            "nodes-mixed.yaml",
            "deep_gemm_mega_moe",
            True,
            id="mixed pool selects MegaMoE on the healthy tray",
        ),
    ],
)
def test_render_json_contract(nodes: str, backend: str, sp: bool) -> None:
    out = run("render", "-f", SEED, "--nodes", str(ROOT / "examples" / nodes), "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"status", "objects"}
    assert doc["status"]["resolved"]["moeBackend"] == backend
    assert doc["status"]["resolved"]["sequenceParallel"] is sp
    deploy = doc["objects"][0]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--moe-backend") + 1] == backend


def test_render_text_is_a_table_of_checks() -> None:
    out = run("render", "-f", SEED, "--nodes", str(ROOT / "examples/nodes-h200.yaml"))
    assert out.returncode == 0
    assert "GPUArchitecture" in out.stdout and "FAIL" in out.stdout
    assert "rendered --moe-backend auto" in out.stdout


def test_render_yaml_is_applyable_documents() -> None:
    out = run(
        "render", "-f", SEED, "--nodes", str(ROOT / "examples/nodes-gb200.yaml"), "-o", "yaml"
    )
    assert out.returncode == 0
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]
    assert "# status:" in out.stdout
    # The Deployment and its pod template share label dicts; users paste this output, so it must
    # spell every object out instead of using YAML anchors and aliases.
    assert not re.search(r"[&*]id\d+", out.stdout), "YAML anchors in render -o yaml"
    assert docs[0]["metadata"]["labels"]["app.kubernetes.io/instance"] == "dsv41"


def test_explicit_mega_without_ep_exits_1_with_field_and_vllms_message() -> None:
    out = run("render", "-f", str(ROOT / "tests/fixtures/invalid/mega-without-ep.yaml"))
    assert out.returncode == 1
    assert out.stdout == ""
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "spec.moeBackend" in line
    assert "DeepSeek V4 MegaMoE currently requires expert parallel." in line


@pytest.mark.parametrize(
    ("content", "flag", "fragment"),
    [
        pytest.param("kind: [unclosed", "-f", "invalid YAML at line", id="malformed YAML"),
        pytest.param(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "-f",
            "no DeepSeekServing document (kinds: ['ConfigMap'])",
            id="not a DeepSeekServing",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
            "--nodes",
            "is a Pod, not a Node",
            id="nodes file that is not Nodes",
        ),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems:\n- {kind: Service, metadata: {name: s}}\n",
            "--nodes",
            "item 1 is a Service",
            id="List of non-Nodes",
        ),
    ],
)
def test_bad_input_is_one_line_without_traceback(
    tmp_path: pathlib.Path, content: str, flag: str, fragment: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    args = (
        ["render", "-f", str(bad)] if flag == "-f" else ["render", "-f", SEED, "--nodes", str(bad)]
    )
    out = run(*args)
    assert out.returncode == 1
    assert fragment in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1


def _seed_named(name: str, **spec: object) -> str:
    doc = yaml.safe_load(pathlib.Path(SEED).read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    return yaml.safe_dump(doc)


def _decode_json_stream(text: str) -> list[dict[str, object]]:
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text):
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
        while at < len(text) and text[at].isspace():
            at += 1
    return docs


def test_multi_document_file_renders_every_serving_in_order(tmp_path: pathlib.Path) -> None:
    # Like `kubectl apply -f`: a Namespace document is not the operator's to preview; empty
    # documents are skipped; each DeepSeekServing is previewed in file order.
    multi = tmp_path / "multi.yaml"
    multi.write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n---\n"
        + _seed_named("first")
        + "---\n---\n"
        + _seed_named("second", replicas=2)
    )
    nodes = str(ROOT / "examples/nodes-gb200.yaml")
    out = run("render", "-f", str(multi), "--nodes", nodes, "-o", "yaml")
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Deployment", "first"),
        ("Service", "first-api"),
        ("Deployment", "second"),
        ("Service", "second-api"),
    ]
    assert docs[2]["spec"]["replicas"] == 2
    assert out.stdout.count("# status:") == 2

    out = run("render", "-f", str(multi), "--nodes", nodes, "-o", "json")
    assert out.returncode == 0, out.stderr
    previews = _decode_json_stream(out.stdout)
    single = tmp_path / "second.yaml"
    single.write_text(_seed_named("second", replicas=2))
    alone = json.loads(run("render", "-f", str(single), "--nodes", nodes, "-o", "json").stdout)
    assert len(previews) == 2 and previews[1]["objects"] == alone["objects"]

    out = run("render", "-f", str(multi), "--nodes", nodes)
    assert out.returncode == 0
    assert "DeepSeekServing llm/first" in out.stdout and "DeepSeekServing llm/second" in out.stdout


def test_multi_document_file_with_an_invalid_document_prints_nothing(
    tmp_path: pathlib.Path,
) -> None:
    multi = tmp_path / "multi.yaml"
    multi.write_text(
        _seed_named("first")
        + "---\n"
        + _seed_named("second", replicas=-3)
        + "---\n"
        + _seed_named("first")
        + "---\n- not an object\n"
    )
    out = run("render", "-f", str(multi), "-o", "yaml")
    assert out.returncode == 1
    assert out.stdout == "", "nothing is printed when any document is invalid"
    assert out.stderr.splitlines() == [
        f"error: {multi}: document 2: spec.replicas: Invalid value: -3: "
        "spec.replicas in body should be greater than or equal to 0",
        f"error: {multi}: document 3: DeepSeekServing llm/first repeats document 1 "
        "(kubectl apply would replace one with the other)",
        f'error: {multi}: document 4: kind: Required value: not a Kubernetes object (["not an '
        'object"])',
    ]


def test_unknown_backend_and_negative_size(tmp_path: pathlib.Path) -> None:
    doc = yaml.safe_load(pathlib.Path(SEED).read_text())
    doc["spec"]["moeBackend"] = "megamoe"
    bad = tmp_path / "b.yaml"
    bad.write_text(yaml.safe_dump(doc))
    out = run("render", "-f", str(bad))
    assert out.returncode == 1 and 'spec.moeBackend: Invalid value: "megamoe"' in out.stderr
    doc["spec"]["moeBackend"] = "auto"
    doc["spec"]["replicas"] = -2
    bad.write_text(yaml.safe_dump(doc))
    out = run("render", "-f", str(bad))
    assert out.returncode == 1 and "spec.replicas: Invalid value: -2" in out.stderr


def test_missing_file_is_one_line() -> None:
    out = run("render", "-f", "/nonexistent.yaml")
    assert out.returncode == 1 and "cannot read" in out.stderr


def test_crds_command_prints_the_checked_in_crd() -> None:
    out = run("crds")
    assert out.returncode == 0
    assert (
        out.stdout == (ROOT / "crds/serving.deepseek-operator.io_deepseekservings.yaml").read_text()
    )


def test_render_does_not_import_kopf_or_the_kubernetes_client() -> None:
    code = (
        f"import sys, runpy; sys.argv=['x','render','-f',{SEED!r},'-o','json'];"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    from deepseek_operator.cli import main; main(sys.argv[1:])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kopf','kubernetes','pynvml')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr


def test_closed_pipe_is_not_a_traceback() -> None:
    """``render ... -o yaml | head -1`` must not print a BrokenPipeError traceback.

    The output is larger than a pipe buffer, so the writer is still writing when the reader
    hangs up.
    """
    nodes = str(ROOT / "examples/nodes-gb200.yaml")
    command = ["render", "-f", SEED, "--nodes", nodes, "-o", "yaml"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepseek_operator.cli", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(16)  # read a little, then hang up like `head` does
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert first
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert proc.returncode in (0, 141)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        pytest.param({"vllmVersion": "0.29.0"}, "spec.vllmVersion", id="unsupported vllmVersion"),
        pytest.param(
            {"image": "vllm/vllm-openai:v0.12.0"}, "spec.image", id="unsupported image tag"
        ),
        pytest.param(
            {"moeBackend": "flashinfer_moe_ep_mega_cutedsl", "vllmVersion": "0.33.0"},
            "spec.moeBackend",
            id="backend the release lacks",
        ),
    ],
)
def test_render_refuses_an_unsupported_release_in_one_line(
    tmp_path: pathlib.Path, edit: dict[str, str], field: str
) -> None:
    doc = yaml.safe_load(pathlib.Path(SEED).read_text())
    doc["spec"].update(edit)
    path = tmp_path / "dss.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = run("render", "-f", str(path), "--nodes", str(ROOT / "examples/nodes-gb200.yaml"))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"error: {path}: {field}: Invalid value: ")
    assert "0.33.0" in lines[0]
