"""Capture ``render`` over a corpus of inputs, or compare two captures.

A refactor of the decision core must not change what ``render`` prints. This script runs the
same ``render`` code the CLI runs (in-process, with a fixed clock) over every DeepSeekServing
example and spec fixture, generated variants of them (each backend name and spelling, each
supported vLLM release, parallelism shapes) and generated hostile specs, against every Node
snapshot, in every output format and with the optional CRDs on and off. One capture is one
directory: a folder per input (generated inputs keep their ``input.yaml``), a file per Node
snapshot x CRD flags x format holding the exit code, stderr and stdout.

    python -m hack.render_corpus capture /tmp/corpus-before
    python -m hack.render_corpus compare /tmp/corpus-before /tmp/corpus-after   # or: diff -r
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import importlib
import io
import pathlib
import sys
import tempfile
from collections.abc import Iterator
from typing import Any
from unittest import mock

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1]
FORMATS = ("json", "yaml", "text")
FIXED_NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _spec_files() -> list[pathlib.Path]:
    examples = sorted(
        p for p in (REPO / "examples").glob("*.yaml") if not p.name.startswith("nodes-")
    )
    fixtures = sorted((REPO / "tests/fixtures").rglob("*.yaml"))
    return examples + fixtures


def _node_files() -> list[pathlib.Path | None]:
    return [None, *sorted((REPO / "examples").glob("nodes-*.yaml"))]


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    cur = out
    for key in path[:-1]:
        cur = cur.setdefault(key, {})
    cur[path[-1]] = value
    return out


def _variants() -> Iterator[tuple[str, str]]:
    """Generated DeepSeekServing documents: (id, YAML text)."""
    from deepseek_operator.api.backends import MOE_BACKENDS
    from deepseek_operator.catalog.vllm import supported_releases

    seeds = [
        p for p in sorted((REPO / "examples").glob("*.yaml")) if not p.name.startswith("nodes-")
    ]
    for seed_path in seeds:
        seed = yaml.safe_load(seed_path.read_text())
        name = seed_path.stem
        spellings: list[str] = []
        for b in MOE_BACKENDS:
            spellings += [b, b.upper(), b.replace("_", "-"), b.title().replace("_", "-")]
        for s in spellings:
            yield f"{name}/moe={s}", yaml.safe_dump(_set(seed, ("spec", "moeBackend"), s))
            yield (
                f"{name}/moe={s}/noep",
                yaml.safe_dump(
                    _set(
                        _set(seed, ("spec", "moeBackend"), s),
                        ("spec", "parallelism", "expertParallel"),
                        False,
                    )
                ),
            )
        for release in supported_releases():
            for s in ("auto", "deep_gemm_mega_moe", "Deep-GEMM-Mega-MoE"):
                doc = _set(_set(seed, ("spec", "vllmVersion"), release), ("spec", "moeBackend"), s)
                yield f"{name}/vllm={release}/moe={s}", yaml.safe_dump(doc)
        for tp in (1, 2, 4, 8):
            for dp in (1, 2, 4):
                doc = _set(seed, ("spec", "parallelism", "tensorParallelSize"), tp)
                doc = _set(doc, ("spec", "parallelism", "dataParallelSize"), dp)
                yield f"{name}/tp={tp}/dp={dp}", yaml.safe_dump(doc)
        for replicas in (0, 2):
            yield (
                f"{name}/replicas={replicas}",
                yaml.safe_dump(_set(seed, ("spec", "replicas"), replicas)),
            )
        # Two documents in one file: the plan cache is shared between them.
        a = _set(seed, ("spec", "moeBackend"), "Deep-GEMM-Mega-MoE")
        b = _set(
            _set(seed, ("spec", "moeBackend"), "deep_gemm_mega_moe"), ("metadata", "name"), "b"
        )
        yield f"{name}/two-spellings", yaml.safe_dump_all([a, b])
    # Hostile specs, drawn deterministically.
    from hypothesis import HealthCheck, given, settings

    from tests.hostile_specs import hostile

    drawn: list[dict[str, Any]] = []

    @settings(
        derandomize=True,
        max_examples=300,
        database=None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(hostile())
    def collect(doc: dict[str, Any]) -> None:
        drawn.append(doc)

    collect()
    for i, doc in enumerate(drawn):
        try:
            text = yaml.safe_dump(doc)
        except Exception:
            continue
        yield f"hostile/{i:04d}", text


def _run_render(spec_path: str, nodes: str | None, fmt: str, lws: bool, cd: bool) -> dict[str, Any]:
    from deepseek_operator.commands import render

    # The command's own parser, so that every flag a capture does not set keeps its default.
    parser = argparse.ArgumentParser()
    render.add_arguments(parser)
    argv = ["-f", spec_path, "-o", fmt, *(["--nodes", nodes] if nodes else [])]
    argv += [*([] if lws else ["--no-leaderworkerset"]), *([] if cd else ["--no-compute-domain"])]
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()

    class _Clock(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return FIXED_NOW

    fake_dt = mock.Mock(wraps=dt)
    fake_dt.datetime = _Clock
    fake_dt.UTC = dt.UTC
    with (
        mock.patch.object(render, "dt", fake_dt),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            rc = render.run(args)
        except SystemExit as exc:
            rc = f"exit:{exc.code}"
        except Exception as exc:
            rc = f"raise:{type(exc).__name__}: {exc}"
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _case_file(
    dest: pathlib.Path, case: str, node_id: str, fmt: str, lws: bool, cd: bool
) -> pathlib.Path:
    """Where one case's outcome goes: a directory per input, a file per node snapshot x flags."""
    return dest / case / f"{node_id}.lws{int(lws)}-cd{int(cd)}.{fmt}"


def _outcome_text(result: dict[str, Any]) -> str:
    return f"rc: {result['rc']}\n--- stderr\n{result['stderr']}--- stdout\n{result['stdout']}"


def capture(dest: pathlib.Path) -> int:
    """Run every case and write one file per case under ``dest`` (which must not exist yet)."""
    dest.mkdir(parents=True, exist_ok=False)
    # Import the code under test first: a capture renders the tree as it was when it started.
    importlib.import_module("deepseek_operator.commands.render")
    total = rendered = raised = 0
    with tempfile.TemporaryDirectory() as tmp:
        specs: list[tuple[str, str]] = [(str(p.relative_to(REPO)), str(p)) for p in _spec_files()]
        for i, (case, text) in enumerate(_variants()):
            path = pathlib.Path(tmp) / f"v{i}.yaml"
            path.write_text(text)
            specs.append((case, str(path)))
            (dest / case).mkdir(parents=True, exist_ok=True)
            (dest / case / "input.yaml").write_text(text)
        nodes = _node_files()
        for case, path in specs:
            hostile = case.startswith("hostile/")
            for node in nodes[:2] if hostile else nodes:
                node_id = node.name.removesuffix(".yaml") if node else "no-nodes"
                for fmt in ("json",) if hostile else FORMATS:
                    flags = (
                        [(True, True)] if hostile else [(True, True), (False, True), (True, False)]
                    )
                    for lws, cd in flags:
                        out = _case_file(dest, case, node_id, fmt, lws, cd)
                        if out.exists():  # a variant generated twice (``auto`` in every case)
                            continue
                        result = _run_render(path, str(node) if node else None, fmt, lws, cd)
                        out.parent.mkdir(parents=True, exist_ok=True)
                        # Paths in messages name the input, not where this capture ran.
                        text = _outcome_text(result).replace(tmp, "<inputs>")
                        out.write_text(text.replace(str(REPO), "<repo>"))
                        total += 1
                        rendered += result["rc"] == 0
                        raised += str(result["rc"]).startswith("raise:")
    print(f"{total} cases ({rendered} rendered, {total - rendered} refused) -> {dest}")
    if raised:
        # An exception is a bug of render (or of this harness), never an answer to a user.
        print(f"error: {raised} cases raised an exception (rc 'raise:...')", file=sys.stderr)
        return 1
    return 0


def compare(a: pathlib.Path, b: pathlib.Path, show: int) -> int:
    """Report the cases whose outcome differs between two captures (``diff -r`` does the same)."""
    import difflib

    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    keys = sorted(files_a | files_b)
    differing = [
        k
        for k in keys
        if k not in files_a or k not in files_b or (a / k).read_bytes() != (b / k).read_bytes()
    ]
    print(f"{len(keys)} files, {len(keys) - len(differing)} identical, {len(differing)} differing")
    for k in differing[:show]:
        print(f"--- {k}")
        old = (a / k).read_text().splitlines() if k in files_a else []
        cur = (b / k).read_text().splitlines() if k in files_b else []
        for line in list(difflib.unified_diff(old, cur, lineterm="", n=1))[2:30]:
            print(f"    {line}")
    return 1 if differing else 0


def main() -> int:
    """Command line: capture DEST | compare A B."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("dest", type=pathlib.Path)
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("a", type=pathlib.Path)
    cmp_.add_argument("b", type=pathlib.Path)
    cmp_.add_argument("--show", type=int, default=10, help="differing cases to print")
    args = parser.parse_args()
    if args.cmd == "capture":
        return capture(args.dest)
    return compare(args.a, args.b, args.show)


if __name__ == "__main__":
    sys.exit(main())
