"""A stand-in for the Hugging Face Hub that speaks its API as ``huggingface_hub`` 2.4 uses it.

Two HTTP servers on 127.0.0.1: the hub, and a CDN of another origin (another port) that LFS files
redirect to, so the client drops the token there as it does for the real ``cdn-lfs`` hosts.

What the client reads, from its own source (``.venv/lib/python3.11/site-packages/huggingface_hub``):

- ``hf_api.py`` ``HfApi.model_info``: ``GET /api/models/{repo}/revision/{quote(rev, safe='')}``
  with ``?blobs=true`` (``files_metadata=True``), JSON with ``id``, ``sha`` and ``siblings``
  (``rfilename``, ``size``, ``blobId``, ``lfs: {size, sha256, pointerSize}``), parsed by
  ``ModelInfo.__init__`` into ``RepoSibling`` / ``BlobLfsInfo``.
- ``file_download.py`` ``hf_hub_url`` (``{endpoint}/{repo}/resolve/{revision}/{file}``),
  ``get_hf_file_metadata`` (a HEAD through ``utils/_http.py``
  ``_httpx2_follow_hub_redirects_with_backoff``, which follows redirects on the same origin only
  and returns the redirect itself otherwise): ``X-Repo-Commit``, ``X-Linked-Etag`` before
  ``ETag``, ``X-Linked-Size`` before ``Content-Length`` (not read on a redirect), ``Location``.
- ``file_download.py`` ``http_get``: ``Range: bytes=N-`` on resume, ``Content-Range`` or
  ``Content-Length`` for the size; on a read timeout it retries 5 times with a Range request.
- ``utils/_http.py`` ``hf_raise_for_status``: ``X-Error-Code`` ``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo``; a 401 with ``X-Error-Message: Invalid
  credentials in Authorization header`` is a bad token, not a missing repository.

What the real hub does, imitated: a gated repository's model info is public, and its files answer
401 ``GatedRepo`` without a token and 403 ``GatedRepo`` to a token without access; a token the hub does not know is a 401 on
any request; an unknown repository, revision or file is a 404 with its error code. Xet headers are
never sent, so the client takes the plain HTTP path.

Test modes: ``corrupt`` (names of files served with one byte flipped), ``stall_at`` (file name ->
byte offset after which the body stalls until :meth:`HubStandin.release` or the stop), and counters
(``bytes_served``, ``cdn_authorization`` seen, ``requests``).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CHUNK = 1024 * 1024


@dataclass
class StandinFile:
    """A file of a commit: its bytes on disk and the checksums the hub lists."""

    name: str
    path: Path
    size: int
    lfs: bool
    sha256: str
    blob_id: str


@dataclass
class StandinRepo:
    """A repository: commits (sha -> files), refs (branch/tag -> sha), who may read it."""

    repo_id: str
    commits: dict[str, dict[str, StandinFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    granted: set[str] = field(default_factory=set)


def file_of(name: str, path: Path, lfs: bool | None = None) -> StandinFile:
    """A :class:`StandinFile` of ``path``, its sha256 and git blob id computed once."""
    size = path.stat().st_size
    sha = hashlib.sha256()
    blob = hashlib.sha1(usedforsecurity=False)
    blob.update(b"blob %d\0" % size)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            sha.update(chunk)
            blob.update(chunk)
    is_lfs = name.endswith(".safetensors") if lfs is None else lfs
    return StandinFile(name, path, size, is_lfs, sha.hexdigest(), blob.hexdigest())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-body (killed, aborted, timed out) is what the tests do.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class HubStandin:
    """The hub and its CDN, started with :meth:`start` and stopped with :meth:`stop`."""

    def __init__(self, tokens: set[str] | None = None) -> None:
        self.repos: dict[str, StandinRepo] = {}
        self.tokens: set[str] = set(tokens or ())
        self.corrupt: set[str] = set()
        self.stall_at: dict[str, int] = {}
        self.stalled = threading.Event()
        self._release = threading.Event()
        self.bytes_served = 0
        self.cdn_authorization: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []
        self.endpoint = ""
        self.cdn = ""

    # --- content ---------------------------------------------------------------------------
    def add_commit(
        self, repo_id: str, sha: str, files: list[StandinFile], refs: tuple[str, ...] = ("main",)
    ) -> StandinRepo:
        """Add commit ``sha`` of ``repo_id`` holding ``files``; point ``refs`` at it."""
        repo = self.repos.setdefault(repo_id, StandinRepo(repo_id))
        repo.commits[sha] = {f.name: f for f in files}
        for ref in refs:
            repo.refs[ref] = sha
        return repo

    def release(self) -> None:
        """Let stalled bodies go on (and stop stalling)."""
        self.stall_at.clear()
        self._release.set()

    def _blob(self, sha256: str) -> StandinFile | None:
        for repo in self.repos.values():
            for files in repo.commits.values():
                for f in files.values():
                    if f.lfs and f.sha256 == sha256:
                        return f
        return None

    # --- lifecycle -------------------------------------------------------------------------
    def start(
        self, port: int = 0, *, host: str = "127.0.0.1", cdn_port: int = 0, advertise: str = ""
    ) -> HubStandin:
        """Listen on ``host``: the hub on ``port`` (0: a free one), the CDN on ``cdn_port``.

        ``advertise`` is the host name clients reach both by (default ``host``): the CDN's
        redirect URLs name it. Only a pod (the kind tier) listens elsewhere than 127.0.0.1.
        """
        for role, at in (("hub", port), ("cdn", cdn_port)):
            server = _Server((host, at), _handler(self, role))
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers.append(server)
        name = advertise or host
        self.endpoint = f"http://{name}:{self._servers[0].server_address[1]}"
        self.cdn = f"http://{name}:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        """Stop both servers and free any stalled body."""
        self._release.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()


_MODEL_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_CDN = re.compile(r"^/cdn-lfs/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(?P<start>\d+)-(?P<end>\d*)$")


def _handler(hub: HubStandin, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        # --- answers -----------------------------------------------------------------------
        def _error(self, status: int, code: str | None = None, message: str | None = None) -> None:
            payload = json.dumps({"error": message or code or "error"}).encode()
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            if message:
                self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        def _json(self, doc: Any) -> None:
            payload = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None

        def _repo(self, repo_id: str, rev: str, files: bool) -> tuple[StandinRepo, str] | None:
            """The repository and the commit of ``rev``, or None after an error answer.

            A gated repository's model info is public, as on the hub; its ``files`` are not.
            """
            token = self._token()
            if token is not None and token not in hub.tokens:
                self._error(401, message="Invalid credentials in Authorization header")
                return None
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
                return None
            if files and repo.gated and token is None:
                self._error(401, "GatedRepo", "Access to this model is restricted: log in")
                return None
            if files and repo.gated and token not in repo.granted:
                self._error(403, "GatedRepo", "Access to this model is restricted")
                return None
            sha = rev if rev in repo.commits else repo.refs.get(rev)
            if sha is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return repo, sha

        def _route(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            with hub._lock:
                hub.requests.append((self.command, self.path))
            if role == "cdn":
                if self.headers.get("Authorization"):
                    hub.cdn_authorization.append(self.headers["Authorization"])
                m = _CDN.match(path)
                f = hub._blob(m["sha"]) if m else None
                if f is None:
                    self._error(404)
                    return
                self._content(f, body, {"ETag": f'"{f.sha256}"'})
                return
            if m := _MODEL_INFO.match(path):
                found = self._repo(m["repo"], m["rev"] or "main", files=False)
                if found:
                    self._model_info(*found)
                return
            if m := _RESOLVE.match(path):
                found = self._repo(m["repo"], m["rev"], files=True)
                if found:
                    self._resolve(found[0], found[1], m["file"], body)
                return
            self._error(404)

        def _model_info(self, repo: StandinRepo, sha: str) -> None:
            siblings = []
            for f in repo.commits[sha].values():
                sib: dict[str, Any] = {"rfilename": f.name, "size": f.size}
                if f.lfs:
                    sib["blobId"] = hashlib.sha1(_pointer(f), usedforsecurity=False).hexdigest()
                    sib["lfs"] = {
                        "size": f.size,
                        "sha256": f.sha256,
                        "pointerSize": len(_pointer(f)),
                    }
                else:
                    sib["blobId"] = f.blob_id
                siblings.append(sib)
            self._json(
                {
                    "_id": repo.repo_id,
                    "id": repo.repo_id,
                    "modelId": repo.repo_id,
                    "sha": sha,
                    "private": False,
                    "gated": "manual" if repo.gated else False,
                    "disabled": False,
                    "lastModified": "2026-01-01T00:00:00.000Z",
                    "tags": [],
                    "siblings": siblings,
                }
            )

        def _resolve(self, repo: StandinRepo, sha: str, name: str, body: bool) -> None:
            f = repo.commits[sha].get(name)
            if f is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", sha)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if f.lfs:
                # As the hub: a 302 to a signed CDN URL, the file's metadata on the redirect.
                pointer_etag = hashlib.sha1(_pointer(f), usedforsecurity=False).hexdigest()
                self.send_response(302)
                self.send_header(
                    "Location", f"{hub.cdn}/cdn-lfs/{f.sha256}?X-Amz-Signature=standin"
                )
                self.send_header("ETag", f'"{pointer_etag}"')
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(f.size))
                self.send_header("X-Repo-Commit", sha)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._content(f, body, {"ETag": f'"{f.blob_id}"', "X-Repo-Commit": sha})

        def _content(self, f: StandinFile, body: bool, headers: dict[str, str]) -> None:
            start, end = 0, f.size - 1
            status = 200
            rng = self.headers.get("Range")
            if rng and (m := _RANGE.match(rng.strip())):
                start = int(m["start"])
                end = min(int(m["end"]), f.size - 1) if m["end"] else f.size - 1
                if start >= f.size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{f.size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start + 1))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
            self.end_headers()
            if not body:
                return
            stall = hub.stall_at.get(f.name)
            for offset, chunk in _chunks(f, start, end):
                if stall is not None and offset + len(chunk) > stall:
                    keep = max(0, stall - offset)
                    self._send(chunk[:keep])
                    hub.stalled.set()
                    hub._release.wait()
                    return  # the connection closes short: the client sees a broken body
                if f.name in hub.corrupt and offset <= f.size // 2 < offset + len(chunk):
                    i = f.size // 2 - offset
                    chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1 :]
                self._send(chunk)

        def _send(self, data: bytes) -> None:
            self.wfile.write(data)
            with hub._lock:
                hub.bytes_served += len(data)

    return Handler


def _pointer(f: StandinFile) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{f.sha256}\nsize {f.size}\n"
    ).encode()


def _chunks(f: StandinFile, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    with f.path.open("rb") as fh:
        fh.seek(start)
        offset = start
        while offset <= end:
            chunk = fh.read(min(CHUNK, end - offset + 1))
            if not chunk:
                return
            yield offset, chunk
            offset += len(chunk)


def make_checkpoint(root: Path, shards: int, shard_bytes: int, seed: int = 0) -> list[StandinFile]:
    """A small checkpoint under ``root``: config.json, an index, ``shards`` safetensors files.

    The shard bytes are pseudo-random (incompressible, like weights), from ``seed``.
    """
    root.mkdir(parents=True, exist_ok=True)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    (root / "config.json").write_text(json.dumps({"architectures": ["DeepseekV4ForCausalLM"]}))
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"layer.{i}": n for i, n in enumerate(names)}})
    )
    block = hashlib.sha256(str(seed).encode()).digest() * (CHUNK // 32)
    for i, name in enumerate(names):
        with (root / name).open("wb") as fh:
            left = shard_bytes
            n = 0
            while left > 0:
                # Each chunk differs (a counter in front) so no two shards share a blob.
                piece = (b"%08d%08d" % (i, n) + block)[: min(CHUNK, left)]
                fh.write(piece)
                left -= len(piece)
                n += 1
    files = ["config.json", "model.safetensors.index.json", *names]
    return [file_of(name, root / name) for name in files]


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.hub_standin``: serve a generated checkpoint until interrupted.

    For trying ``fill-weights`` by hand (README): prints the ``HF_ENDPOINT`` to use.
    """
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--repo", default="deepseek-ai/tiny-standin")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=16)
    parser.add_argument("--port", type=int, default=0, help="the hub's port (default: a free one)")
    parser.add_argument("--token", help="make the repository gated, readable with this token")
    parser.add_argument("--host", default="127.0.0.1", help="the address both servers listen on")
    parser.add_argument("--cdn-port", type=int, default=0, help="the CDN's port (default: free)")
    parser.add_argument(
        "--advertise", default="", help="the host name clients use (default: --host)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hub-standin-") as tmp:
        files = make_checkpoint(Path(tmp), args.shards, args.shard_mib * 1024 * 1024)
        hub = HubStandin(tokens={args.token} if args.token else set()).start(
            args.port, host=args.host, cdn_port=args.cdn_port, advertise=args.advertise
        )
        repo = hub.add_commit(args.repo, hashlib.sha1(args.repo.encode()).hexdigest(), files)
        if args.token:
            repo.gated, repo.granted = True, {args.token}
        commit = repo.refs["main"]
        print(f"HF_ENDPOINT={hub.endpoint} serves {args.repo} (main: {commit})", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            hub.stop()


if __name__ == "__main__":
    main()
