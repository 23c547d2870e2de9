"""The I/O half of ``fill-weights``: the hub, through ``huggingface_hub``, into a hub cache.

:func:`fill` takes the cache's lock, asks the hub for the file list with sizes and checksums
(``HfApi.model_info(files_metadata=True)``), checks the volume's free space against what is
left to fetch, has :mod:`.download` fetch it, then links the snapshot. The client raises the hub's
own errors (``GatedRepoError``, ``RevisionNotFoundError``, ...) which :func:`cause_of` maps to the
causes of :mod:`.plan`.

The cache left behind is the layout ``hf_hub_download`` writes and reads (blobs named by ETag,
``snapshots/<commit>/<file>`` relative symlinks, ``refs/<revision>``), so vLLM finds it with
``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deepseek_operator.commands.fill_weights.download import Progress, download
from deepseek_operator.commands.fill_weights.plan import (
    FillError,
    HubFile,
    Plan,
    hub_files,
    make_plan,
    one_line,
    repo_folder,
    space_message,
)

# Read by this module alone, for the tests: the free bytes the volume reports (a volume that is
# really full cannot be made on demand without root). Never set it in a deployment.
FREE_BYTES_ENV = "DSO_FILL_WEIGHTS_FREE_BYTES"


class _EventHandler(logging.Handler):
    """The client's log records (its retries: "Trying to resume download...") as JSON events.

    Its own handler writes them to stderr, where the one error line must stand alone.
    """

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(logging.WARNING)
        self._emit = emit

    def emit(self, record: logging.LogRecord) -> None:
        self._emit(
            {
                "event": "client",
                "level": record.levelname.lower(),
                "message": one_line(record.getMessage()),
            }
        )


def _route_client_logs(emit: Callable[[dict[str, Any]], None]) -> None:
    import huggingface_hub.utils.logging  # noqa: F401  (configures the library's stderr handler)

    root = logging.getLogger("huggingface_hub")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_EventHandler(emit))
    root.propagate = False


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s volume (statvfs ``f_bavail``)."""
    override = os.environ.get(FREE_BYTES_ENV)
    if override is not None:
        return int(override)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def cause_of(error: BaseException) -> FillError:
    """The cause of an error ``huggingface_hub`` (or the network under it) raised, as one line."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(error, FillError):
        return error
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    url = str(getattr(response, "url", "")) if response is not None else ""
    if isinstance(error, errors.GatedRepoError):
        return FillError(
            "gated",
            f"the repository is gated and the token has no access to it ({status} on {url}): "
            "accept its terms on the hub with the token's account",
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return FillError("not-found", f"the revision does not exist ({status} on {url})")
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return FillError("not-found", f"a listed file is missing on the hub ({status} on {url})")
    if isinstance(error, errors.RepositoryNotFoundError):
        return FillError(
            "not-found",
            f"the repository does not exist, or is private and the token may not see it "
            f"({status} on {url})",
        )
    if isinstance(error, errors.HfHubHTTPError) and status == 401:
        return FillError("token-rejected", f"the hub rejected the token (401 on {url})")
    if isinstance(error, errors.HfHubHTTPError) and status == 403:
        return FillError("gated", f"the token may not read this repository (403 on {url})")
    if isinstance(error, errors.HfHubHTTPError) and status is not None and status >= 500:
        return FillError("network", f"the hub answered {status} on {url}; run again to resume")
    if isinstance(error, httpx2.TimeoutException | httpx2.NetworkError | httpx2.ProtocolError):
        return FillError(
            "network",
            f"the download stalled or the connection failed ({type(error).__name__}: "
            f"{one_line(str(error)) or 'no data'}); run again to resume",
        )
    if isinstance(error, OSError) and "Consistency check failed" in str(error):
        return FillError("network", one_line(str(error)).split(" Please retry")[0])
    if isinstance(error, errors.HfHubHTTPError):
        return FillError("failed", one_line(str(error)))
    if isinstance(error, OSError):
        return FillError("failed", f"{error.strerror or error} ({error.filename or ''})")
    return FillError("failed", f"{type(error).__name__}: {one_line(str(error))}")


def _sizes(folder: Path, suffix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    if not folder.is_dir():
        return out
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and entry.name.endswith(suffix):
            name = entry.name[: len(entry.name) - len(suffix)] if suffix else entry.name
            if "." not in name:  # a blob is named by its ETag; anything else is not ours
                out[name] = entry.stat().st_size
    return out


def scan(storage: Path, files: tuple[HubFile, ...]) -> Plan:
    """The plan of ``files`` against the blobs and parts under ``storage``."""
    blobs = storage / "blobs"
    return make_plan(files, _sizes(blobs, ""), _sizes(blobs, ".incomplete"))


def _link(storage: Path, commit: str, f: HubFile) -> None:
    """``snapshots/<commit>/<file>`` -> ``../../blobs/<etag>``, relative as the client makes it."""
    pointer = storage / "snapshots" / commit / f.name
    pointer.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(storage / "blobs" / f.etag, pointer.parent)
    if pointer.is_symlink() and os.readlink(pointer) == target:
        return
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    os.symlink(target, pointer)


def fill(
    cache: Path,
    repo_id: str,
    revision: str,
    token: str | None,
    emit: Callable[[dict[str, Any]], None],
    interval: float,
    workers: int = 4,
) -> dict[str, Any]:
    """Fill ``cache`` (a hub cache, ``$HF_HOME/hub``) with ``repo_id`` at ``revision``.

    Returns the final ``done`` event; raises :class:`FillError` (or an error of the client, which
    the caller maps with :func:`cause_of`). A second fill of the same repository in the same cache
    fails at once with ``busy`` rather than wait: two Jobs filling one volume are a mistake.
    """
    from filelock import FileLock, Timeout
    from huggingface_hub import HfApi
    from huggingface_hub.utils.tqdm import disable_progress_bars

    disable_progress_bars()  # the JSON lines are the progress; tqdm would interleave on stderr
    _route_client_logs(emit)
    started = time.monotonic()
    storage = cache / repo_folder(repo_id)
    lock_path = cache / ".locks" / repo_folder(repo_id) / "deepseek-operator-fill.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise FillError(
            "busy", f"another fill of {repo_id} holds {lock_path}; wait for it to finish"
        ) from None
    try:
        info = HfApi(token=token).model_info(repo_id, revision=revision, files_metadata=True)
        commit = info.sha
        if not commit:
            raise FillError("failed", f"the hub's model info of {repo_id} names no commit")
        files = hub_files(
            {
                "rfilename": s.rfilename,
                "size": s.size,
                "blobId": s.blob_id,
                "lfs": dict(s.lfs) if s.lfs else None,
            }
            for s in info.siblings or []
        )
        plan = scan(storage, files)
        free = free_bytes(cache)
        emit(
            {
                "event": "plan",
                "repo": repo_id,
                "revision": revision,
                "commit": commit,
                "bytesTotal": plan.bytes_total,
                "bytesDone": plan.bytes_done,
                "filesTotal": len(files),
                "filesDone": len(plan.complete),
                "freeBytes": free,
            }
        )
        if free < plan.bytes_remaining:
            raise FillError("no-space", space_message(free, plan.bytes_remaining, str(cache)))
        progress = Progress(
            emit=emit,
            interval=interval,
            bytes_total=plan.bytes_total,
            bytes_done=plan.bytes_done,
            files_total=len(files),
            files_done=len(plan.complete),
        )
        download(storage, repo_id, commit, plan.pending, token, progress, workers)
        for f in files:
            _link(storage, commit, f)
        if revision != commit:
            ref = storage / "refs" / revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            if not ref.is_file() or ref.read_text() != commit:
                ref.write_text(commit)
        return {
            "event": "done",
            "repo": repo_id,
            "revision": revision,
            "commit": commit,
            "bytesTotal": plan.bytes_total,
            "filesTotal": len(files),
            "bytesFetched": progress.fetched,
            "seconds": round(time.monotonic() - started, 3),
            "snapshot": str(storage / "snapshots" / commit),
        }
    finally:
        lock.release()


def dump(event: dict[str, Any]) -> str:
    """One JSON line, keys in a stable order."""
    return json.dumps(event, sort_keys=False, separators=(",", ":"))
