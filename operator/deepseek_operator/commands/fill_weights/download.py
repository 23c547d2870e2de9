"""The download of ``fill-weights``: the pending blobs, each fetched once, resumed where its part
ends, checked against the hub's checksum, counted into the progress lines.

Why not ``hf_hub_download``: since huggingface_hub 2.x it downloads into a temporary file unique to
each process and deletes it on failure (``file_download._download_to_tmp_and_move``), so a fill
killed half-way starts each file over. Here the part of a blob is ``blobs/<etag>.incomplete``, a
stable name (the lock of :func:`~.fetch.fill` makes it ours alone), and a rerun resumes it with a
Range request: ``get_hf_file_metadata`` (HEAD on ``resolve/<commit>/<file>``) for the ETag, the
commit and the CDN location, and ``http_get`` for the ranged GET.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

from deepseek_operator.commands.fill_weights.plan import FillError, HubFile, git_blob_hasher

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


def download(
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
