"""The watches' LIST pages are read and converted one at a time, whichever watch asks.

At start-up every watch lists at once; with 10,000 Nodes and 1,000 servings' children, pages of
500 objects read side by side made the restart's memory peak (docs/benchmarks.md). A narrow unit
test of :meth:`ListWatch._list` with a stand-in for the HTTP answer (the real API server's
listings are tests/e2e/test_watches.py's).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from deepseek_operator.kube.list_watch import ListWatch


class _Answer:
    """One LIST answer whose body arrives when ``gate`` is set."""

    def __init__(self, name: str, body: dict[str, Any], gate: asyncio.Event, log: list[str]):
        self.name, self.body, self.gate, self.log = name, body, gate, log

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None

    async def read(self) -> bytes:
        self.log.append(f"read {self.name}")
        await self.gate.wait()
        return json.dumps(self.body).encode()


class _Watches:
    """What ``_list`` asks of the :class:`WatchLoop`: its page slot and ``get``."""

    def __init__(self) -> None:
        self.pages = asyncio.Semaphore(1)
        self.answers: dict[str, list[_Answer]] = {}
        self.asked: list[str] = []

    async def get(self, path: str, query: Any, timeout: Any, verb: str) -> _Answer:
        self.asked.append(path)
        return self.answers[path].pop(0)


def _page(name: str, rv: str, token: str = "") -> dict[str, Any]:
    item = {"metadata": {"namespace": "ns", "name": name}}
    return {"metadata": {"resourceVersion": rv, "continue": token}, "items": [item]}


def test_a_second_watch_reads_its_page_only_once_the_first_is_converted() -> None:
    log: list[str] = []
    listed: dict[str, dict[str, Any]] = {}

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        watches = _Watches()
        gates = {name: asyncio.Event() for name in ("nodes-1", "nodes-2", "deployments-1")}
        watches.answers = {
            "/nodes": [
                _Answer("nodes-1", _page("n1", "7", token="more"), gates["nodes-1"], log),
                _Answer("nodes-2", _page("n2", "7"), gates["nodes-2"], log),
            ],
            "/deployments": [
                _Answer("deployments-1", _page("d1", "9"), gates["deployments-1"], log)
            ],
        }

        def watch(path: str) -> ListWatch[str]:
            def convert(obj: dict[str, Any]) -> str:
                log.append(f"convert {obj['metadata']['name']}")
                return str(obj["metadata"]["name"])

            return ListWatch(
                watches,  # type: ignore[arg-type]
                loop,
                path,
                convert,
                lambda snapshot: listed.__setitem__(path, snapshot),
                lambda *_: None,
                name=path,
            )

        nodes = loop.create_task(watch("/nodes")._list())
        deployments = loop.create_task(watch("/deployments")._list())
        await asyncio.sleep(0.01)
        # Both asked for their first page; only one body is being read.
        assert sorted(watches.asked) == ["/deployments", "/nodes"]
        assert log == ["read nodes-1"]
        gates["nodes-1"].set()
        await asyncio.sleep(0.01)
        # The Node page is converted and its slot given up: the Deployment page is read next,
        # while the Node watch's second page waits for the slot.
        assert log == ["read nodes-1", "convert n1", "read deployments-1"]
        gates["deployments-1"].set()
        gates["nodes-2"].set()
        assert await nodes == "7"
        assert await deployments == "9"
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert log[3:] == ["convert d1", "read nodes-2", "convert n2"]
    assert listed == {"/nodes": {"ns/n1": "n1", "ns/n2": "n2"}, "/deployments": {"ns/d1": "d1"}}
