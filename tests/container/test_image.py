"""The image built from the Dockerfile runs: CLI, ``render`` and ``crds``, hardened as the chart runs it.

Every container here runs as the chart's securityContext asks (numeric non-root user, read-only
root filesystem with a tmpfs /tmp, no capabilities, no privilege escalation, no network; see
``HARDENED`` in conftest.py), and its output is compared with the same command run from the
checkout, so the image cannot ship different code or data than the tests ran.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.container.conftest import BUILD_SCRIPT, HARDENED, ROOT, Image, parse_last_line
from tests.hub_standin import HubStandin, make_checkpoint

pytestmark = pytest.mark.container

HOST_CLI = str(pathlib.Path(sys.executable).parent / "deepseek-operator")
EXAMPLES = ("--volume", f"{ROOT / 'examples'}:/examples:ro")


def _drop_timestamps(value: Any) -> Any:
    """*value* without ``lastTransitionTime`` keys: the only part of a render that is the clock."""
    if isinstance(value, dict):
        return {k: _drop_timestamps(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list):
        return [_drop_timestamps(v) for v in value]
    return value


def test_parse_last_line() -> None:
    assert parse_last_line("DOCKER_HOST= IMAGE=a:b BASE=c:d") == {
        "DOCKER_HOST": "",
        "IMAGE": "a:b",
        "BASE": "c:d",
    }


@pytest.mark.parametrize(
    "command", [[], ["render"], ["crds"], ["topology"], ["run"], ["agent"], ["fill-weights"]]
)
def test_help_runs_in_the_image(image: Image, command: list[str]) -> None:
    out = image.run(*command, "--help")
    assert out.stdout.startswith("usage: deepseek-operator"), out.stdout
    assert out.stderr == ""


def test_image_metadata_is_the_documented_one(image: Image) -> None:
    config = json.loads(image.docker("image", "inspect", image.tag).stdout)[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["deepseek-operator"]
    assert config["Cmd"] == ["run"]
    assert {"8080/tcp", "9090/tcp"} <= set(config["ExposedPorts"])


def test_image_runs_as_its_non_root_user_by_default(image: Image) -> None:
    # No --user: the image's own USER applies (a pod without runAsUser gets the same).
    out = image.docker(
        "run", "--rm", "--network=none", "--entrypoint=python", image.tag,
        "-c", "import os, sys; print(os.getuid(), os.getgid(), sys.version_info >= (3, 11))",
    )  # fmt: skip
    assert out.stdout.split() == ["65532", "65532", "True"]


@pytest.mark.parametrize(
    ("spec", "nodes"),
    [
        ("dsv41-flash-gb200.yaml", "nodes-gb200.yaml"),
        ("dsv41-flash-gb200.yaml", "nodes-h200.yaml"),
        ("dsv41-flash-dep8-nvl72.yaml", "nodes-gb200-two-racks.yaml"),
    ],
)
def test_render_in_the_container_matches_the_checkout(image: Image, spec: str, nodes: str) -> None:
    args = ["render", "-f", f"examples/{spec}", "--nodes", f"examples/{nodes}", "-o", "json"]
    inside = image.run(
        "render", "-f", f"/examples/{spec}", "--nodes", f"/examples/{nodes}", "-o", "json",
        flags=EXAMPLES,
    )  # fmt: skip
    host = subprocess.run([HOST_CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert host.returncode == 0, host.stderr
    assert inside.stderr == ""
    printed = json.loads(inside.stdout)
    assert printed["status"]["resolved"]["moeBackend"], printed["status"]
    assert _drop_timestamps(printed) == _drop_timestamps(json.loads(host.stdout))


def test_render_reads_a_spec_from_a_read_only_mount_and_writes_nothing(image: Image) -> None:
    # The text output (what a user reads) works too, and a failing spec fails in the container
    # just as it does outside: a non-zero exit, the reason on stderr.
    ok = image.run(
        "render", "-f", "/examples/dsv41-flash-gb200.yaml", "--nodes", "/examples/nodes-gb200.yaml",
        flags=EXAMPLES,
    )  # fmt: skip
    assert "deep_gemm_mega_moe" in ok.stdout
    missing = image.run("render", "-f", "/examples/no-such-file.yaml", flags=EXAMPLES, check=False)
    assert missing.returncode != 0
    assert "no-such-file.yaml" in missing.stderr


def test_crds_in_the_image_are_the_committed_ones(image: Image) -> None:
    committed = (ROOT / "crds" / "serving.deepseek-operator.io_deepseekservings.yaml").read_text()
    assert image.run("crds").stdout == committed


def test_root_filesystem_is_read_only_and_tmp_is_writable(image: Image) -> None:
    probe = (
        "import errno\n"
        "for path in ('/probe', '/opt/venv/probe', '/tmp/probe'):\n"
        "    try:\n"
        "        open(path, 'w').close()\n"
        "        print(path, 'written')\n"
        "    except OSError as e:\n"
        "        print(path, errno.errorcode[e.errno])\n"
    )
    out = image.run("-c", probe, flags=("--entrypoint=python",))
    assert out.stdout.splitlines() == [
        "/probe EROFS",
        "/opt/venv/probe EROFS",
        "/tmp/probe written",
    ]


def test_installed_code_is_not_writable_by_the_user_even_with_a_writable_root(image: Image) -> None:
    # Defence in depth for a pod that forgets readOnlyRootFilesystem: the venv belongs to root.
    out = image.docker(
        "run", "--rm", "--network=none", "--entrypoint=python", image.tag, "-c",
        "import deepseek_operator, errno, pathlib\n"
        "p = pathlib.Path(deepseek_operator.__file__).parent / 'probe'\n"
        "try:\n    p.write_text('x'); print('written')\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])\n",
    )  # fmt: skip
    assert out.stdout.strip() == "EACCES"


def test_no_build_tools_in_the_image(image: Image) -> None:
    out = image.run(
        "-c",
        "import shutil; print([t for t in ('gcc', 'cc', 'c++', 'make', 'ld') if shutil.which(t)])",
        flags=("--entrypoint=python",),
    )
    assert out.stdout.strip() == "[]"


def test_a_warm_rebuild_is_cached_and_gives_the_same_image(image: Image) -> None:
    before = image.docker("image", "inspect", "--format", "{{.Id}}", image.tag).stdout.strip()
    t0 = time.monotonic()
    out = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    assert "base " in out.stderr and ": up to date" in out.stderr, out.stderr
    after = image.docker("image", "inspect", "--format", "{{.Id}}", image.tag).stdout.strip()
    assert after == before, "a rebuild with nothing changed must hit Docker's layer cache"
    # Seconds, not minutes (measured: ~5 s on 2 cores); generous for a loaded CI machine.
    assert took < 120, f"warm rebuild took {took:.0f} s:\n{out.stderr}"


DOCS = ROOT / "docs" / "development.md"
DOC_RUNS = [
    line.strip()
    for line in DOCS.read_text().splitlines()
    if line.strip().startswith("docker run ") and "deepseek-operator:local" in line
]


def test_the_documentation_has_docker_run_examples() -> None:
    assert len(DOC_RUNS) >= 2, "docs/development.md shows how to run the built image"


@pytest.mark.parametrize(
    "command", DOC_RUNS, ids=lambda c: "crds" if c.endswith(" crds") else "render"
)
def test_documented_docker_run_examples_work(image: Image, command: str) -> None:
    argv = shlex.split(command.replace("$PWD", str(ROOT)).replace('"', ""))
    assert argv[:2] == ["docker", "run"]
    argv = [image.tag if a == "deepseek-operator:local" else a for a in argv]
    out = image.docker(*argv[1:])
    assert out.stderr == ""
    if argv[-1] == "crds":
        assert out.stdout.startswith("# Generated by `deepseek-operator crds`")
    else:
        assert "deep_gemm_mega_moe" in out.stdout


def test_fill_weights_in_the_image_fills_a_cache_the_client_reads(
    image: Image, tmp_path: pathlib.Path
) -> None:
    # As docs/weights.md's Job runs it: non-root, read-only root, the token a read-only file, the
    # cache a mounted volume; the hub is the tests' stand-in on the host's 127.0.0.1 (so host
    # network here, and nothing else). The image carries huggingface_hub, pinned as in the venv.
    files = make_checkpoint(tmp_path / "checkpoint", shards=2, shard_bytes=3 * 1024 * 1024)
    hub = HubStandin(tokens={"hf_container_token"}).start()
    hub.add_commit("deepseek-ai/tiny-standin", "c" * 40, files)
    cache, secret = tmp_path / "cache", tmp_path / "secret"
    cache.mkdir()
    secret.mkdir()
    (secret / "token").write_text("hf_container_token\n")
    cache.chmod(0o777)  # the container's user 65532 writes it, as fsGroup lets it in a pod
    flags = [f for f in HARDENED if f != "--network=none"]
    try:
        out = image.docker(
            "run", "--rm", *flags, "--network=host",
            "--volume", f"{cache}:/cache", "--volume", f"{secret}:/secret:ro",
            "--env", f"HF_ENDPOINT={hub.endpoint}",
            image.tag, "fill-weights", "--model=deepseek-ai/tiny-standin", "--revision=main",
            "--hf-home=/cache", "--token-file=/secret/token",
            timeout=300,
        )  # fmt: skip
    finally:
        hub.stop()
    assert out.stderr == ""
    done = json.loads(out.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["bytesFetched"] == sum(f.size for f in files)
    assert "hf_container_token" not in out.stdout
    snapshot = cache / "hub/models--deepseek-ai--tiny-standin/snapshots" / ("c" * 40)
    for f in files:
        assert (snapshot / f.name).read_bytes() == f.path.read_bytes()


def _lacks_cap_sys_resource() -> bool:
    bounding = next(
        line.split()[1]
        for line in pathlib.Path("/proc/self/status").read_text().splitlines()
        if line.startswith("CapBnd:")
    )
    return not (int(bounding, 16) >> 24) & 1  # CAP_SYS_RESOURCE is capability 24


def test_privileged_containers_start_and_exec(image: Image) -> None:
    # What a kind node needs. On a host without CAP_SYS_RESOURCE in its bounding set, Docker's
    # privileged mode asks for it and runc fails unless the daemon uses hack/docker-daemon.sh's
    # runc wrapper; everywhere the container must start and `docker exec --privileged` must work.
    started = image.docker(
        "run", "--detach", "--privileged", "--network=none", "--entrypoint=sleep",
        image.base, "60",
    )  # fmt: skip
    container = started.stdout.strip()
    try:
        out = image.docker("exec", "--privileged", container, "cat", "/proc/self/status")
        caps = {
            k: v.strip() for k, _, v in (line.partition(":") for line in out.stdout.splitlines())
        }
        assert int(caps["CapEff"], 16) >> 21 & 1, "CAP_SYS_ADMIN: the container is privileged"
    finally:
        image.docker("rm", "--force", container, check=False)


def test_runc_wrapper_only_where_the_capability_is_missing(image: Image) -> None:
    info = json.loads(image.docker("info", "--format", "{{json .}}").stdout)
    cache = pathlib.Path(os.environ.get("DSO_CACHE", "~/.cache/deepseek-operator")).expanduser()
    own = image.docker_host == f"unix://{cache / 'docker' / 'docker.sock'}"
    if own:
        expected = "dso-runc" if _lacks_cap_sys_resource() else "runc"
        assert info["DefaultRuntime"] == expected
    else:
        # The user's own engine: whatever it uses, never our wrapper.
        assert info["DefaultRuntime"] != "dso-runc"
