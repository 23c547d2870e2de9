"""``deepseek-operator fill-weights`` against the hub stand-in, through the real client.

Each test runs the installed command (a subprocess, as a Job runs it) with ``HF_ENDPOINT`` at a
fresh :class:`tests.hub_standin.HubStandin` on 127.0.0.1, and reads the cache back with
``huggingface_hub`` itself in offline mode, as vLLM does with ``HF_HUB_OFFLINE=1``. No cluster.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from filelock import FileLock

from tests.hub_standin import HubStandin, StandinFile, make_checkpoint

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(sys.executable).with_name("deepseek-operator")
REPO = "deepseek-ai/tiny-standin"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_standin_token_value_1234"
SHARD = 3 * 1024 * 1024 + 12345  # not a multiple of the client's chunk size
WAIT_S = 120  # an upper bound for a stalled body to be reached, never a timed assertion
# huggingface_hub's http_get writes what it receives in chunks of this size
# (constants.DOWNLOAD_CHUNK_SIZE): a fill killed mid-file keeps whole chunks only, so the files
# the resume tests stall in are a few chunks long.
CLIENT_CHUNK = 10 * 1024 * 1024
BIG_SHARD = 2 * CLIENT_CHUNK + 3 * 1024 * 1024 + 12345
STALL_AT = 2 * CLIENT_CHUNK + 1024 * 1024


@pytest.fixture
def checkpoint(tmp_path: pathlib.Path) -> list[StandinFile]:
    return make_checkpoint(tmp_path / "checkpoint", shards=3, shard_bytes=SHARD)


@pytest.fixture
def hub(checkpoint: list[StandinFile]) -> Iterator[HubStandin]:
    standin = HubStandin(tokens={TOKEN, "hf_other_user_token"}).start()
    standin.add_commit(REPO, COMMIT, checkpoint)
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture
def big(tmp_path: pathlib.Path) -> Iterator[tuple[HubStandin, list[StandinFile]]]:
    """A hub serving two shards of a few client chunks each."""
    files = make_checkpoint(tmp_path / "big", shards=2, shard_bytes=BIG_SHARD)
    standin = HubStandin(tokens={TOKEN}).start()
    standin.add_commit(REPO, COMMIT, files)
    try:
        yield standin, files
    finally:
        standin.stop()


def _wait_for_size(path: pathlib.Path, size: int) -> None:
    """Until ``path`` holds ``size`` bytes (the client writes whole chunks); WAIT_S at most."""
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and path.stat().st_size >= size):
        assert time.monotonic() < deadline, f"{path} never reached {size} bytes"
        time.sleep(0.05)


@pytest.fixture
def token_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def _env(hub: HubStandin, hf_home: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(hf_home), **extra)
    env.pop("DSO_FILL_WEIGHTS_FREE_BYTES", None)
    env.update(extra)
    return env


def _args(token_file: pathlib.Path | None, revision: str = "main", repo: str = REPO) -> list[str]:
    args = [str(CLI), "fill-weights", "--model", repo, "--revision", revision]
    args += ["--progress-interval", "0"]
    if token_file is not None:
        args += ["--token-file", str(token_file)]
    return args


def _fill(
    hub: HubStandin,
    hf_home: pathlib.Path,
    token_file: pathlib.Path | None,
    revision: str = "main",
    repo: str = REPO,
    **env: str,
) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        _args(token_file, revision, repo),
        env=_env(hub, hf_home, **env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert TOKEN not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, events, proc.stderr


def _storage(hf_home: pathlib.Path) -> pathlib.Path:
    return hf_home / "hub" / ("models--" + REPO.replace("/", "--"))


def _offline_snapshot(hf_home: pathlib.Path, revision: str = "main") -> pathlib.Path:
    """The snapshot as huggingface_hub finds it with HF_HUB_OFFLINE=1 (vLLM's view)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    code = (
        "import sys; from huggingface_hub import snapshot_download; "
        f"print(snapshot_download({REPO!r}, revision={revision!r}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return pathlib.Path(proc.stdout.strip())


def _assert_error(
    code: int, events: list[dict[str, Any]], stderr: str, cause: str, exit_code: int
) -> str:
    assert code == exit_code, (events, stderr)
    assert events[-1]["event"] == "error"
    assert events[-1]["cause"] == cause
    assert events[-1]["exitCode"] == exit_code
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"deepseek-operator fill-weights: {cause}: ")
    return str(events[-1]["message"])


def test_fills_the_cache_that_the_client_reads_offline(
    hub: HubStandin, checkpoint: list[StandinFile], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file)
    assert code == 0, stderr
    total = sum(f.size for f in checkpoint)
    assert events[0] == {
        "event": "plan",
        "repo": REPO,
        "revision": "main",
        "commit": COMMIT,
        "bytesTotal": total,
        "bytesDone": 0,
        "filesTotal": len(checkpoint),
        "filesDone": 0,
        "freeBytes": events[0]["freeBytes"],
    }
    progress = [e for e in events if e["event"] == "progress"]
    done_bytes = [e["bytesDone"] for e in progress]
    assert done_bytes == sorted(done_bytes)
    assert progress[-1]["bytesDone"] == total
    assert progress[-1]["filesDone"] == len(checkpoint)
    assert events[-1]["event"] == "done"
    assert events[-1]["bytesFetched"] == total
    snapshot = _offline_snapshot(tmp_path / "hf")
    assert snapshot == _storage(tmp_path / "hf") / "snapshots" / COMMIT
    for f in checkpoint:
        assert (snapshot / f.name).read_bytes() == f.path.read_bytes()
        assert (snapshot / f.name).is_symlink()
    assert (_storage(tmp_path / "hf") / "refs" / "main").read_text() == COMMIT
    # The LFS files came from the CDN origin, and the token stayed on the hub.
    assert any(path.startswith("/cdn-lfs/") for _, path in hub.requests)
    assert hub.cdn_authorization == []


def test_a_complete_cache_is_a_no_op(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    assert _fill(hub, tmp_path / "hf", token_file)[0] == 0
    served, requests = hub.bytes_served, len(hub.requests)
    code, events, _ = _fill(hub, tmp_path / "hf", token_file)
    assert code == 0
    assert hub.bytes_served == served
    assert [m for m, p in hub.requests[requests:]] == ["GET"], hub.requests[requests:]
    assert events[-1]["bytesFetched"] == 0


def test_a_killed_fill_resumes_from_what_is_on_the_volume(
    big: tuple[HubStandin, list[StandinFile]], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    hub, checkpoint = big
    shard = checkpoint[-1]
    hub.stall_at[shard.name] = STALL_AT
    part = _storage(tmp_path / "hf") / "blobs" / f"{shard.sha256}.incomplete"
    proc = subprocess.Popen(
        _args(token_file),
        env=_env(hub, tmp_path / "hf"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert hub.stalled.wait(WAIT_S), "the fill never reached the stalled byte"
        _wait_for_size(part, 2 * CLIENT_CHUNK)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert part.stat().st_size == 2 * CLIENT_CHUNK
    hub.release()
    total = sum(f.size for f in checkpoint)
    served = hub.bytes_served
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file)
    assert code == 0, stderr
    # The stalled shard's part at least; the other files as far as their threads had come.
    assert events[0]["bytesDone"] >= 2 * CLIENT_CHUNK
    second = hub.bytes_served - served
    assert second < total
    assert second == total - events[0]["bytesDone"]
    assert events[-1]["bytesFetched"] == second
    assert ("GET", f"/cdn-lfs/{shard.sha256}?X-Amz-Signature=standin") in hub.requests
    snapshot = _offline_snapshot(tmp_path / "hf")
    for f in checkpoint:
        assert (snapshot / f.name).read_bytes() == f.path.read_bytes()
    assert not part.exists()


def test_a_token_the_hub_rejects(hub: HubStandin, tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad-token"
    bad.write_text("hf_not_a_token_the_hub_knows\n")
    code, events, stderr = _fill(hub, tmp_path / "hf", bad)
    message = _assert_error(code, events, stderr, "token-rejected", 3)
    assert "401" in message
    assert "hf_not_a_token" not in json.dumps(events) + stderr


@pytest.mark.parametrize("token", [True, False], ids=["token-without-access", "no-token"])
def test_a_gated_repository(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path, token: bool
) -> None:
    hub.repos[REPO].gated = True
    hub.repos[REPO].granted = {"hf_other_user_token"}
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file if token else None)
    message = _assert_error(code, events, stderr, "gated", 4)
    assert ("403" if token else "401") in message


def test_a_granted_token_reads_a_gated_repository(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    hub.repos[REPO].gated = True
    hub.repos[REPO].granted = {TOKEN}
    assert _fill(hub, tmp_path / "hf", token_file)[0] == 0


def test_a_missing_revision_or_repository(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file, revision="v9.9")
    assert "revision does not exist" in _assert_error(code, events, stderr, "not-found", 5)
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file, repo="deepseek-ai/nothing")
    assert "repository does not exist" in _assert_error(code, events, stderr, "not-found", 5)


def test_a_commit_hash_is_a_revision_without_refs(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    assert _fill(hub, tmp_path / "hf", token_file, revision=COMMIT)[0] == 0
    assert not (_storage(tmp_path / "hf") / "refs").exists()
    assert _offline_snapshot(tmp_path / "hf", revision=COMMIT).name == COMMIT


def test_a_checksum_mismatch_keeps_no_bad_copy(
    hub: HubStandin, checkpoint: list[StandinFile], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    shard = checkpoint[-1]
    hub.corrupt.add(shard.name)
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file)
    message = _assert_error(code, events, stderr, "checksum", 7)
    assert shard.name in message and shard.sha256 in message
    blobs = _storage(tmp_path / "hf") / "blobs"
    assert not (blobs / shard.sha256).exists()
    assert not (blobs / f"{shard.sha256}.incomplete").exists()
    hub.corrupt.clear()
    assert _fill(hub, tmp_path / "hf", token_file)[0] == 0


def test_a_full_volume_is_refused_before_any_download(
    hub: HubStandin, checkpoint: list[StandinFile], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    total = sum(f.size for f in checkpoint)
    code, events, stderr = _fill(
        hub, tmp_path / "hf", token_file, DSO_FILL_WEIGHTS_FREE_BYTES=str(total - 1)
    )
    message = _assert_error(code, events, stderr, "no-space", 6)
    assert f"has {total - 1} bytes free" in message and f"needs {total} more bytes" in message
    assert hub.bytes_served == 0


def test_a_stalled_download_ends_as_a_network_error(
    big: tuple[HubStandin, list[StandinFile]], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    hub, checkpoint = big
    shard = checkpoint[-1]
    hub.stall_at[shard.name] = STALL_AT
    # The client's own read timeout, shortened so its five resumed retries end soon.
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file, HF_HUB_DOWNLOAD_TIMEOUT="1")
    message = _assert_error(code, events, stderr, "network", 8)
    assert "run again to resume" in message
    part = _storage(tmp_path / "hf") / "blobs" / f"{shard.sha256}.incomplete"
    assert part.stat().st_size == 2 * CLIENT_CHUNK  # what a rerun resumes from


def test_one_fill_per_checkpoint_and_cache(
    hub: HubStandin, tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    lock = tmp_path / "hf/hub/.locks" / ("models--" + REPO.replace("/", "--"))
    lock.mkdir(parents=True)
    with FileLock(str(lock / "deepseek-operator-fill.lock")):
        code, events, stderr = _fill(hub, tmp_path / "hf", token_file)
    assert "another fill" in _assert_error(code, events, stderr, "busy", 9)
    assert hub.requests == []


def test_an_empty_token_file(hub: HubStandin, tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, events, stderr = _fill(hub, tmp_path / "hf", empty)
    assert "--token-file" in _assert_error(code, events, stderr, "bad-input", 2)


def test_the_first_failure_stops_the_other_downloads(
    big: tuple[HubStandin, list[StandinFile]], tmp_path: pathlib.Path, token_file: pathlib.Path
) -> None:
    hub, checkpoint = big
    index, stalled = checkpoint[1], checkpoint[-1]
    assert index.name == "model.safetensors.index.json"
    hub.corrupt.add(index.name)
    hub.stall_at[stalled.name] = STALL_AT  # never released: that download ends by its timeout
    code, events, stderr = _fill(hub, tmp_path / "hf", token_file, HF_HUB_DOWNLOAD_TIMEOUT="1")
    assert index.name in _assert_error(code, events, stderr, "checksum", 7)
    # The shards stopped at a chunk's end (or never started), their parts kept for the next fill.
    for shard in checkpoint[2:]:
        blobs = _storage(tmp_path / "hf") / "blobs"
        assert not (blobs / shard.sha256).exists()
        part = blobs / f"{shard.sha256}.incomplete"
        assert not part.exists() or part.stat().st_size % CLIENT_CHUNK == 0
