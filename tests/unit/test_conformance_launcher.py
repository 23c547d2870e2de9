"""conformance/launcher.py: how both harnesses run a release's oracle, with a stand-in release.

The stand-in is a virtualenv-shaped directory whose ``bin/python`` is this interpreter, and an
oracle module on PYTHONPATH; the real oracles need vLLM and run in `make conformance`.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import launcher

ORACLE = """
import json, sys
questions = json.load(sys.stdin)
if questions == "fail":
    sys.stderr.write("Traceback: the release refused\\n")
    sys.exit(3)
print("a line the release prints on import")
json.dump({"answers": [q * 2 for q in questions]}, sys.stdout)
sys.stdout.write("\\n")
"""


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    bin_dir = tmp_path / "cache/vllm/9.9.9/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (tmp_path / "stand_in_oracle.py").write_text(textwrap.dedent(ORACLE))
    (tmp_path / "stand_in_where.py").write_text(
        "import os, sys\nprint(os.getcwd(), *sys.argv[1:])\n"
    )
    monkeypatch.setattr(launcher, "CACHE", tmp_path / "cache")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    return "9.9.9"


def test_the_answer_is_the_last_line_of_stdout(release: str) -> None:
    assert launcher.ask(release, "stand_in_oracle", [1, 2]) == {"answers": [2, 4]}


def test_a_failed_oracle_stops_the_run_with_its_stderr(release: str) -> None:
    with pytest.raises(SystemExit) as caught:
        launcher.ask(release, "stand_in_oracle", "fail")
    assert str(caught.value).startswith("error: the vLLM 9.9.9 oracle failed:")
    assert "the release refused" in str(caught.value)


def test_a_release_not_installed_says_how_to_install_it(release: str) -> None:
    with pytest.raises(SystemExit) as caught:
        launcher.ask("0.0.1", "stand_in_oracle", [])
    assert "vLLM 0.0.1 is not installed" in str(caught.value)
    assert "hack/install-vllm.sh 0.0.1" in str(caught.value)


def test_run_module_passes_arguments_and_runs_from_the_repository_root(release: str) -> None:
    proc = launcher.run_module(release, "stand_in_where", "--out", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(launcher.ROOT), "--out", "-"]
