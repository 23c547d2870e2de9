"""The documentation: docs/ builds with `mkdocs build --strict`, and the repository is self-contained.

- the site builds with no warning (a broken link or anchor fails), and a broken link in a copy
  of the tree does fail the build, so the first check can fail;
- README.md stays a landing page (at most 300 lines);
- no file git tracks points outside the repository (the notes it grew from are not part of it);
- every `docs/<page>.md` that code, tests or tools cite exists, with the section they name;
- every captured `nvidia-smi topo -m` fixture is printed verbatim in docs/node-facts.md.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS = pathlib.Path(sys.executable).parent / "mkdocs"
# Spelled in pieces so that this file does not match its own checks.
FORBIDDEN = ("../" + "shared", "shared" + "/", "\u00a7")
CITED = re.compile(r"docs/([A-Za-z0-9_./-]+\.md)")


def _build(project: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess[str]:
    if not MKDOCS.exists():
        # In CI a missing tool is a failure, never a skip (as for the control-plane binaries).
        if os.environ.get("CI") == "true":
            pytest.fail("mkdocs is not installed: `make venv` installs the dev extras")
        pytest.skip("mkdocs is not installed: `make venv` installs the dev extras")
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _tracked() -> list[pathlib.Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def _text(path: pathlib.Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None  # binary, or deleted in the work tree


def test_mkdocs_build_strict_passes(tmp_path: pathlib.Path) -> None:
    out = _build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()


@pytest.mark.parametrize(
    "broken",
    ["[gone](no-such-page.md)", "[gone](design.md#no-such-section)"],
    ids=["missing page", "missing anchor"],
)
def test_mkdocs_build_strict_fails_on_a_broken_link(tmp_path: pathlib.Path, broken: str) -> None:
    project = tmp_path / "project"
    shutil.copytree(DOCS, project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    index = project / "docs" / "index.md"
    index.write_text(index.read_text() + f"\nSee {broken}.\n")
    out = _build(project, tmp_path / "site")
    assert out.returncode != 0, out.stderr
    assert "no-such-" in out.stderr, out.stderr


def test_readme_is_a_landing_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail into docs/"


def test_no_tracked_file_points_outside_the_repository() -> None:
    found = []
    for path in _tracked():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(word in line for word in FORBIDDEN):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)


def _cited_section(page: str, tail: str) -> str | None:
    """The section a citation names right after the page path, e.g. ``, "Model geometry"``."""
    if m := re.match(r'(?:[,:] *| +)"([^"\n]+)', tail):
        return m.group(1).strip()
    if m := re.match(r",\s*(point \d+)", tail):
        return m.group(1)
    if m := re.match(r",\s*(option [A-D]: [^)]*)", tail):
        return m.group(1).strip()
    if m := re.match(r"\s+(A\d+)\b", tail):
        return m.group(1)
    return None


def test_every_cited_docs_page_and_section_exists() -> None:
    missing = []
    cited = 0
    for path in _tracked():
        if path.suffix not in {".py", ".md", ".yaml", ".yml", ".sh", ".env", ".txt", ""}:
            continue
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "docs" or rel == pathlib.Path("tests/unit/test_docs.py"):
            continue
        text = _text(path)
        if text is None:
            continue
        for m in CITED.finditer(text):
            if text[max(0, m.start() - 1) : m.start()] not in {"", " ", "(", "`", '"', "'", "\n"}:
                continue  # part of a longer path, such as charts/x/docs/y.md
            cited += 1
            page = DOCS / m.group(1)
            if not page.is_file():
                missing.append(f"{rel}: docs/{m.group(1)} does not exist")
                continue
            section = _cited_section(page.read_text(), text[m.end() : m.end() + 120])
            if section is None:
                continue
            body = page.read_text()
            if section.startswith("point "):
                ok = re.search(rf"^{section.split()[1]}\. ", body, re.M) is not None
            else:
                ok = section.lower() in body.lower()
            if not ok:
                missing.append(f"{rel}: docs/{m.group(1)} has no section {section!r}")
    assert cited > 20, cited  # the scan finds the code's citations
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_relative_links_of_the_top_level_pages_resolve(name: str) -> None:
    # mkdocs checks the links inside docs/; these two pages live outside it.
    text = (ROOT / name).read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, name
    broken = [t for t in local if not (ROOT / t).exists()]
    assert not broken, broken


def test_pages_are_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted(DOCS.rglob("*.md")):
        assert str(page.relative_to(DOCS)) in nav, page


@pytest.mark.parametrize(
    "fixture",
    sorted((ROOT / "tests/fixtures/topo").glob("t[0-9][0-9]-*.txt")),
    ids=lambda p: p.name,
)
def test_topology_fixture_is_printed_verbatim_in_node_facts(fixture: pathlib.Path) -> None:
    page = (DOCS / "node-facts.md").read_text()
    body = fixture.read_text()
    number = int(fixture.name[1:3])
    assert re.search(rf"^### T{number}\. ", page, re.M), f"no heading T{number}"
    assert f"````\n{body}" in page, f"{fixture.name} is not copied byte for byte"
