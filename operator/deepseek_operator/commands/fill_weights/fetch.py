"""The I/O half of ``fill-weights``: the hub, through ``huggingface_hub``, into a hub cache.

The client's own functions do the talking: ``HfApi.model_info(files_metadata=True)`` for the file
list with sizes and checksums, ``get_hf_file_metadata`` (HEAD on ``resolve/<commit>/<file>``) for
the ETag, the commit and the CDN location, and ``http_get`` for the ranged GET that resumes a part.
They raise the hub's own errors (``GatedRepoError``, ``RevisionNotFoundError``, ...) which
:func:`cause_of` maps to the causes of :mod:`.plan`.

Why not ``hf_hub_download``: since huggingface_hub 2.x it downloads into a temporary file unique to
each process and deletes it on failure (``file_download._download_to_tmp_and_move``), so a fill
killed half-way starts each file over. Here the part of a blob is ``blobs/<etag>.incomplete``, a
stable name (the lock of :func:`fill` makes it ours alone), and a rerun resumes it with a Range
request. The cache left behind is the layout ``hf_hub_download`` writes and reads (blobs named by
ETag, ``snapshots/<commit>/<file>`` relative symlinks, ``refs/<revision>``), so vLLM finds it with
``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from deepseek_operator.commands.fill_weights.plan import (
    FillError,
    HubFile,
    Plan,
    git_blob_hasher,
    hub_files,
    make_plan,
    one_line,
    repo_folder,
    space_message,
)

# Read by this module alone, for the tests: the free bytes the volume reports (a volume that is
# really full cannot be made on demand without root). Never set it in a deployment.
FREE_BYTES_ENV = "DSO_FILL_WEIGHTS_FREE_BYTES"
HASH_CHUNK = 8 * 1024 * 1024


@dataclass
class Progress:
    """Counters of one fill, written as JSON lines to ``emit`` at most every ``interval`` s.

    Shared by the download threads: one lock around the counters and the line, and ``stop``,
    which makes every other download give up at its next chunk once one has failed.
    """

    emit: Callable[[dict[str, Any]], None]
    interval: float
    bytes_total: int = 0
    bytes_done: int = 0
    files_total: int = 0
    files_done: int = 0
    fetched: int = 0
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def add(self, n: int, name: str) -> None:
        """``n`` bytes of ``name`` written (negative: a part thrown away); a line if it is time."""
        with self._lock:
            self.bytes_done += n
            if n > 0:
                self.fetched += n
            if time.monotonic() - self._last >= self.interval:
                self._line(name)

    def file_done(self, name: str) -> None:
        """``name`` is in the cache: one more file, and a line."""
        with self._lock:
            self.files_done += 1
            self._line(name)

    def _line(self, name: str) -> None:
        self._last = time.monotonic()
        self.emit(
            {
                "event": "progress",
                "bytesDone": self.bytes_done,
                "bytesTotal": self.bytes_total,
                "filesDone": self.files_done,
                "filesTotal": self.files_total,
                "file": name,
            }
        )


class _Aborted(Exception):
    """Another download failed: this one stops, its part stays for the next fill."""


class _CountingFile:
    """The part file as ``http_get`` writes it, counting bytes into :class:`Progress`.

    ``http_get`` may seek back and truncate when a server ignores the Range header: the count
    follows the file's size, not the bytes received.
    """

    def __init__(self, fh: BinaryIO, progress: Progress, name: str) -> None:
        self._fh = fh
        self._progress = progress
        self._name = name

    def write(self, data: bytes) -> int:
        if self._progress.stop.is_set():
            raise _Aborted
        n = self._fh.write(data)
        self._progress.add(n, self._name)
        return n

    def tell(self) -> int:
        return self._fh.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        before = os.fstat(self._fh.fileno()).st_size
        after = self._fh.truncate(size)
        self._progress.add(after - before, self._name)
        return after


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


def _verify(path: Path, f: HubFile) -> None:
    """The checksum the hub lists for ``f`` against the bytes at ``path``; the part goes if wrong."""
    h = hashlib.sha256() if f.lfs else git_blob_hasher(f.size)
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            h.update(chunk)
    got = h.hexdigest()
    if got != f.etag:
        path.unlink(missing_ok=True)
        kind = "sha256" if f.lfs else "git blob id"
        raise FillError(
            "checksum",
            f"{f.name}: {kind} {got} does not match the hub's {f.etag}; "
            "the bad copy is deleted, run again to fetch it anew",
        )


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def _fetch(
    storage: Path, repo_id: str, commit: str, f: HubFile, token: str | None, progress: Progress
) -> None:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get

    # Exported by huggingface_hub.utils's __init__ without __all__, hence the ignore.
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    url = hf_hub_url(repo_id, f.name, revision=commit)
    meta = get_hf_file_metadata(url, token=token, retry_on_errors=True)
    if meta.commit_hash != commit or meta.etag != f.etag:
        raise FillError(
            "checksum",
            f"{f.name}: the hub's resolve answer (commit {meta.commit_hash}, etag {meta.etag}) "
            f"disagrees with its file list (commit {commit}, etag {f.etag})",
        )
    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"  # the sizes are the file's, not a compressed body's
    if not _same_origin(url, meta.location):
        # A signed CDN URL: the token must not leave the hub (as hf_hub_download does).
        headers.pop("authorization", None)
    part = storage / "blobs" / f"{f.etag}.incomplete"
    part.parent.mkdir(parents=True, exist_ok=True)
    with part.open("ab") as fh:
        pass
    with part.open("r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size > f.size:  # not a prefix of this file: start over
            fh.truncate(0)
            progress.add(-size, f.name)
            size = 0
        http_get(
            meta.location,
            _CountingFile(fh, progress, f.name),  # type: ignore[arg-type]
            resume_size=size,
            headers=headers,
            expected_size=f.size,
            displayed_filename=f.name,
        )
    _verify(part, f)
    os.replace(part, storage / "blobs" / f.etag)


def _download(
    storage: Path,
    repo_id: str,
    commit: str,
    pending: tuple[HubFile, ...],
    token: str | None,
    progress: Progress,
    workers: int,
) -> None:
    """Fetch ``pending`` with ``workers`` threads, each blob once; raise the first failure.

    Files that share a blob (one checksum) are one download, so no two threads write one part.
    After a failure the other downloads stop at their next chunk (a stalled one at its read
    timeout) and keep their parts.
    """
    groups: dict[str, list[HubFile]] = {}
    for f in pending:
        groups.setdefault(f.etag, []).append(f)

    def one(group: list[HubFile]) -> None:
        if progress.stop.is_set():
            raise _Aborted
        if not (storage / "blobs" / group[0].etag).is_file():
            _fetch(storage, repo_id, commit, group[0], token, progress)
        for f in group:
            progress.file_done(f.name)

    first: BaseException | None = None
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fill") as pool:
        for future in as_completed([pool.submit(one, g) for g in groups.values()]):
            error = future.exception()
            if error is not None and not isinstance(error, _Aborted) and first is None:
                first = error
                progress.stop.set()
    if first is not None:
        raise first


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
        _download(storage, repo_id, commit, plan.pending, token, progress, workers)
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
