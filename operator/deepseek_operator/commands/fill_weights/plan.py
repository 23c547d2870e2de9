"""The pure half of ``fill-weights``: the hub cache's layout, what is left to fetch, the causes.

No network, no clock, no environment: the paths of the Hugging Face hub cache
(``models--org--name/{blobs,snapshots/<commit>,refs/<revision>}``, the layout
``huggingface_hub`` itself reads with ``HF_HUB_OFFLINE=1``), the plan of one fill from the hub's
file list and what is already on the volume, the checksums the hub publishes (sha256 of an LFS
file, the git blob id of any other), and the causes a fill can end in, each with its own exit code.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from deepseek_operator.catalog.gpu_memory import GIB
from deepseek_operator.names import FILL_EXIT_CODES

COMMIT_PATTERN = re.compile(r"^[0-9a-f]{40}$")
REPO_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

# cause -> exit code (names.FILL_EXIT_CODES, which the operator reads a fill Job's exit code
# with). 1 is an unexpected failure and 2 argparse's usage error; every cause a user can act on
# has a code of its own, so a Job's exit code alone tells which it was.
EXIT_CODES: Mapping[str, int] = FILL_EXIT_CODES


class FillError(Exception):
    """A fill that cannot go on: ``cause`` (a key of :data:`EXIT_CODES`) and a one-line message."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message

    @property
    def exit_code(self) -> int:
        """The process exit status of this cause."""
        return EXIT_CODES[self.cause]


@dataclass(frozen=True)
class HubFile:
    """One file of a checkpoint as the hub lists it (``siblings`` of the model info, ``blobs=true``).

    ``etag`` names the blob in the cache: the sha256 of an LFS file, the git blob id otherwise.
    """

    name: str
    size: int
    etag: str
    lfs: bool


@dataclass(frozen=True)
class Plan:
    """What one fill has to do: the files, the bytes already on the volume, the bytes to fetch."""

    files: tuple[HubFile, ...]
    complete: frozenset[str]
    partial_bytes: int

    @property
    def bytes_total(self) -> int:
        """Size of the checkpoint (the sum of the listed files)."""
        return sum(f.size for f in self.files)

    @property
    def bytes_done(self) -> int:
        """Bytes already on the volume: complete blobs and the resumable parts of the others."""
        return sum(f.size for f in self.files if f.name in self.complete) + self.partial_bytes

    @property
    def bytes_remaining(self) -> int:
        """Bytes still to fetch, what the volume must have free."""
        return self.bytes_total - self.bytes_done

    @property
    def pending(self) -> tuple[HubFile, ...]:
        """The files still to fetch, smallest first (configs before shards: early errors)."""
        return tuple(
            sorted(
                (f for f in self.files if f.name not in self.complete),
                key=lambda f: (f.size, f.name),
            )
        )


def validate_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is ``org/name``; else :class:`FillError` naming the rule."""
    if not REPO_ID_PATTERN.match(repo_id) or ".." in repo_id:
        raise FillError(
            "bad-input",
            f"--model {repo_id!r} must be a Hugging Face repository id 'org/name' "
            "(letters, digits, '.', '_' and '-')",
        )
    return repo_id


def validate_file_name(name: str) -> str:
    """A hub file name that stays inside the snapshot; else :class:`FillError`."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise FillError("failed", f"the hub listed a file name {name!r} outside the snapshot")
    return name


def hub_files(siblings: Iterable[Mapping[str, object]]) -> tuple[HubFile, ...]:
    """The files of the model info's ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs``).

    A sibling without size or blob id means the hub was asked without ``blobs=true``, or is not a
    hub: the fill refuses rather than guess.
    """
    files = []
    for s in siblings:
        name = validate_file_name(str(s.get("rfilename", "")))
        lfs = s.get("lfs")
        if isinstance(lfs, Mapping):
            size, etag = lfs.get("size"), lfs.get("sha256")
        else:
            size, etag = s.get("size"), s.get("blobId")
        if not isinstance(size, int) or not isinstance(etag, str) or not etag:
            raise FillError("failed", f"the hub's file list gives no size or checksum for {name!r}")
        files.append(HubFile(name=name, size=size, etag=etag, lfs=isinstance(lfs, Mapping)))
    return tuple(files)


def repo_folder(repo_id: str) -> str:
    """The repository's folder in the hub cache: ``models--org--name``."""
    return "models--" + repo_id.replace("/", "--")


def make_plan(
    files: tuple[HubFile, ...], blob_sizes: Mapping[str, int], partial_sizes: Mapping[str, int]
) -> Plan:
    """The plan from what is on the volume: sizes of complete blobs and of ``.incomplete`` parts.

    A blob counts as complete at the size the hub lists (its checksum was verified before it got
    its name); a part larger than the file is not resumable and counts as nothing.
    """
    complete = frozenset(f.name for f in files if blob_sizes.get(f.etag) == f.size)
    seen: set[str] = set()
    partial = 0
    for f in files:
        if f.name in complete or f.etag in seen:
            continue
        seen.add(f.etag)
        size = partial_sizes.get(f.etag, 0)
        if size <= f.size:
            partial += size
    return Plan(files=files, complete=complete, partial_bytes=partial)


def git_blob_hasher(size: int) -> hashlib._Hash:
    """A sha1 primed with git's blob header: its digest is the hub's ``blobId`` of the content."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(b"blob %d\0" % size)
    return h


def space_message(free: int, remaining: int, path: str) -> str:
    """The one line of a volume too small: both figures, in bytes and GiB."""
    return (
        f"{path} has {free} bytes free ({free / GIB:.2f} GiB) but the checkpoint needs "
        f"{remaining} more bytes ({remaining / GIB:.2f} GiB): give the volume at least "
        f"{remaining - free} more bytes"
    )


def one_line(text: str) -> str:
    """``text`` as a single line: the hub's multi-line messages, joined."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
