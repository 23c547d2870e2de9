"""Loopback ports for the servers the tests start, distinct per pytest process.

`make test` runs three pytest-xdist workers, each with its own control plane, operators, LWS
controller and stand-ins, and other test sessions may run on the same machine. A port drawn with
``bind(("127.0.0.1", 0))`` comes from the kernel's ephemeral range, the range every outgoing
connection takes its source port from: between the draw and the server's own bind, a client socket
of any process (a worker's API requests, a watch reconnecting) can take it, and the server then
fails to start. Under three busy workers that race is no longer rare.

So each pytest process claims a block of :data:`BLOCK_SIZE` ports below the ephemeral range by
holding an ``flock`` on ``<tmp>/deepseek-operator-ports/<block>.lock`` (the kernel releases it
when the process exits, however it exits), and hands its block's ports out in turn, skipping one
that something else holds (a server started earlier in the same process and still running, a port
in TIME_WAIT, another program). xdist worker ``gwN`` tries block N first, so a session's workers
land on different blocks without contending for the locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import socket
import tempfile
from pathlib import Path
from typing import IO

HOST = "127.0.0.1"
#: Ports handed out start here (below the default ephemeral range, 32768-60999, and above the
#: well-known and common service ports).
FIRST_PORT = 20000
BLOCK_SIZE = 200
LOCK_DIR = Path(tempfile.gettempdir()) / "deepseek-operator-ports"


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands out as a source port (32768 when unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_index() -> int:
    """N of xdist worker ``gwN``; 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


class _Block:
    """The block this process holds, and where in it the next port is tried."""

    def __init__(self) -> None:
        self.lock: IO[bytes] | None = None
        self.ports: itertools.cycle[int] | None = None

    def claim(self) -> itertools.cycle[int]:
        if self.ports is not None:
            return self.ports
        ceiling = min(_ephemeral_floor(), 65536)
        blocks = max(1, (ceiling - FIRST_PORT) // BLOCK_SIZE)
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        start = _worker_index() % blocks
        for i in range(blocks):
            block = (start + i) % blocks
            handle = open(LOCK_DIR / f"{block}.lock", "wb")  # noqa: SIM115 - held until exit
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            self.lock = handle
            first = FIRST_PORT + block * BLOCK_SIZE
            self.ports = itertools.cycle(range(first, first + BLOCK_SIZE))
            return self.ports
        raise RuntimeError(
            f"every one of the {blocks} port blocks under {LOCK_DIR} is held by a running process"
        )


_BLOCK = _Block()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, contextlib.suppress(OSError):
        s.bind((HOST, port))
        return True
    return False


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, from this process's own block."""
    ports = _BLOCK.claim()
    for _ in range(BLOCK_SIZE):
        port = next(ports)
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port left in this process's block of {BLOCK_SIZE}")
