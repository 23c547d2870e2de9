"""`make test`'s xdist scheduler (tests/schedule.py), driven as xdist's controller drives it.

Fake workers stand in for xdist's; each "runs" its tests one at a time, holding back the last one
of what it was sent until it gets more work or is shut down, as xdist's worker does.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.schedule import HEAVY, UnitScheduling, order_units, pick_unit, unit_of


class FakeConfig:
    def __init__(self, workers: int) -> None:
        self.values = {"tx": [f"{workers}*popen"], "dist": "load"}

    def getvalue(self, name: str) -> Any:
        return self.values[name]


class FakeWorker:
    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.queue: list[int] = []
        self.ran: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


COLLECTION = [
    "tests/kind/test_kind.py::test_a",
    "tests/kind/test_lws.py::test_b",
    "tests/container/test_image.py::test_c",
    "tests/container/test_image.py::test_d",
    "tests/e2e/test_long.py::test_e",
    "tests/e2e/test_long.py::test_f",
    "tests/e2e/test_long.py::test_g",
    "tests/integration/test_short.py::test_h",
    "tests/unit/test_pure.py::test_i",
]


def run(
    workers: int, collection: list[str] = COLLECTION
) -> tuple[list[FakeWorker], list[tuple[str, str, str]]]:
    """Drive the scheduler to the end; returns the workers and (event, worker, unit) events."""
    sched = UnitScheduling(FakeConfig(workers))
    nodes = [FakeWorker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, collection)  # type: ignore[arg-type]
    sched.schedule()
    events: list[tuple[str, str, str]] = []
    running: dict[str, set[str]] = {}
    for _ in range(100):
        progressed = False
        for node in nodes:
            # xdist's worker runs a test only once it knows the next one (or is shutting down).
            if len(node.queue) >= 2 or (node.queue and node.shutting_down):
                index = node.queue.pop(0)
                unit = unit_of(collection[index])
                if unit not in running.setdefault(node.gateway.id, set()):
                    running[node.gateway.id].add(unit)
                    events.append(("start", node.gateway.id, unit))
                node.ran.append(index)
                sched.mark_test_complete(node, index)  # type: ignore[arg-type]
                if not any(unit_of(collection[i]) == unit for i in node.queue):
                    running[node.gateway.id].discard(unit)
                    events.append(("end", node.gateway.id, unit))
                progressed = True
        if not progressed:
            break
    return nodes, events


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        ("tests/kind/test_lws.py::test_x", "tests/kind"),
        ("tests/container/test_image.py::test_x[a]", "tests/container"),
        ("tests/e2e/test_dra.py::test_x", "tests/e2e/test_dra.py"),
        ("tests/unit/test_a.py::TestB::test_c", "tests/unit/test_a.py"),
    ],
)
def test_a_unit_is_a_file_or_a_whole_heavy_directory(nodeid: str, unit: str) -> None:
    assert unit_of(nodeid) == unit


def test_units_go_longest_first_the_measured_ones_by_their_time() -> None:
    units = {"tests/unit/test_pure.py": 500, "tests/e2e/test_new.py": 3, "tests/kind": 30}
    assert order_units(units) == ["tests/kind", "tests/e2e/test_new.py", "tests/unit/test_pure.py"]


def test_a_heavy_unit_waits_while_another_runs() -> None:
    queue = ["tests/container", "tests/e2e/test_long.py"]
    assert pick_unit(queue, heavy_elsewhere=True) == "tests/e2e/test_long.py"
    assert pick_unit(queue, heavy_elsewhere=False) == "tests/container"
    assert pick_unit(["tests/container"], heavy_elsewhere=True) is None


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_every_test_runs_once_and_heavy_units_never_overlap(workers: int) -> None:
    nodes, events = run(workers)
    ran = sorted(i for node in nodes for i in node.ran)
    assert ran == list(range(len(COLLECTION)))
    assert all(node.shutting_down for node in nodes)
    heavy_running = 0
    for event, _, unit in events:
        if unit in HEAVY:
            heavy_running += 1 if event == "start" else -1
            assert heavy_running <= 1, events
    # A unit runs on one worker only.
    where: dict[str, set[str]] = {}
    for _, worker, unit in events:
        where.setdefault(unit, set()).add(worker)
    assert all(len(workers_of) == 1 for workers_of in where.values()), where


def test_the_kind_tier_starts_first() -> None:
    _, events = run(3)
    assert events[0] == ("start", "gw0", "tests/kind")


def test_a_single_test_first_unit_gets_the_shortest_unit_behind_it() -> None:
    # test_forget_at_scale.py is the longest unit and has one test: its worker must be sent a
    # second unit before it can start it, and the kind tier must not be that unit.
    collection = [
        "tests/e2e/test_forget_at_scale.py::test_a_thousand",
        *COLLECTION,
    ]
    _, events = run(3, collection)
    units_of: dict[str, list[str]] = {}
    for event, worker, unit in events:
        if event == "start":
            units_of.setdefault(worker, []).append(unit)
    (forget_worker,) = [w for w, u in units_of.items() if u[0].endswith("forget_at_scale.py")]
    (kind_worker,) = [w for w, u in units_of.items() if u[0] == "tests/kind"]
    assert forget_worker != kind_worker
    assert units_of[forget_worker][1] == "tests/unit/test_pure.py"
