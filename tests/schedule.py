"""How `make test` spreads the suite over its pytest-xdist workers (``-n 3``).

The suite's time is mostly waiting: on API servers, controllers, kwok, a kind cluster, Docker. So
three workers on two cores finish it in well under half the serial time, provided the work is cut
where the tests share state and the long parts start first:

* **Units.** The tests of one file form one unit and run on one worker in file order: they share
  module fixtures (a seeded namespace, a stand-in router, an operator of their own), and every
  worker starts its own session fixtures (control plane, operator, LWS controller) once, whatever
  it runs. The kind tier (``tests/kind``, one cluster named ``kind`` for the whole directory) and
  the image tests (``tests/container``) are one unit each.
* **Longest first.** Units start in the order of :data:`MEASURED_S` (seconds, measured; see
  docs/development.md), longest first, so that the kind tier and the long e2e files never start
  last and leave one worker running alone. A unit missing from the table is estimated from its
  number of tests (:data:`PER_TEST_S`).
* **Heavy units apart.** The units in :data:`HEAVY` (a four-node kind cluster, Docker containers of
  the image) never run at the same time as each other: together with two control planes they
  would starve two cores and stretch the kind tier's bounded waits. A worker whose next unit would
  be heavy while another worker runs one takes the longest light unit instead; when only heavy
  units are left, it stops, and the worker running the heavy unit takes them after it.
* **One unit at a time.** A worker gets its next unit when its current one is down to its last
  test (xdist's worker holds its last test back until it knows the next one, to tear down the
  right fixtures), never earlier, so the choice is made as late as possible. Only a worker whose
  first unit is a single test needs a second one before it starts: it gets the shortest unit,
  so that no long unit waits behind the first one.

xdist's own modes stay available (``--dist loadfile`` ...); ``-n 0`` runs everything in one
process, in file order, as before (for debugging with ``-x``, ``--pdb``, ``-s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xdist.scheduler.loadscope import LoadScopeScheduling
from xdist.workermanage import WorkerController

#: Units that hold one kind cluster or container images for the whole unit: one directory each.
WHOLE_DIRECTORIES = ("tests/kind/", "tests/container/")
#: Units never run side by side (see the module docstring).
HEAVY = frozenset({"tests/kind", "tests/container"})

#: Seconds per unit: the sum of its tests' setup, call and teardown times (`--durations=0`) in a
#: `-n 3` run on the 2-core dev VM at load 8-13 (docs/development.md, "How `make test` runs");
#: the kind tier and the image tests from a second run with them (load 4-27). Only the order they give matters, so
#: inflated numbers do no harm; a new long file should be added.
MEASURED_S: Mapping[str, float] = {
    "tests/kind": 695,  # 653 + test_weights.py (42 s, measured alone in the tier)
    "tests/e2e/test_forget_at_scale.py": 634,
    "tests/integration/test_admission_messages.py": 348,
    # The newest vLLM release's own code over the specs: CPU-bound, 2 tests estimated at 2 s
    # until measured, so it ran last, alone, for 3 minutes (2026-12-07, 211 s with the P/D pairs).
    "tests/conformance/test_vllm_conformance.py": 211,
    "tests/e2e/test_rack_scale.py": 186,
    "tests/container": 102,
    "tests/integration/test_cel_rules.py": 181,
    "tests/e2e/test_faults.py": 168,
    "tests/e2e/test_kueue.py": 151,
    "tests/e2e/test_disaggregation.py": 167,
    "tests/integration/test_null_fields.py": 163,
    "tests/integration/test_render_from_cluster.py": 144,
    "tests/e2e/test_operator.py": 100,
    "tests/e2e/test_lws_services.py": 91,
    "tests/integration/test_core_v1_parity.py": 87,
    "tests/integration/test_rack_scale_infra.py": 86,
    "tests/integration/test_admission_parity.py": 69,
    "tests/integration/test_offline_api_inputs.py": 69,
    "tests/e2e/test_weights_fill.py": 55,
    "tests/integration/test_fill_weights.py": 37,
    "tests/e2e/test_exec_credentials.py": 34,
    "tests/e2e/test_watches.py": 25,
    "tests/e2e/test_security.py": 55,
    "tests/integration/test_accepted_runs.py": 55,
    "tests/e2e/test_dra.py": 49,
    "tests/e2e/test_ha.py": 43,
    "tests/integration/test_agent_publisher.py": 32,
    "tests/e2e/test_helm.py": 23,
    "tests/integration/test_dra_gpu_claims.py": 22,
    "tests/integration/test_child_write_refusals.py": 19,
    "tests/integration/test_router_discovery.py": 16,
    "tests/integration/test_control_plane.py": 15,
    "tests/integration/test_chart.py": 15,
    "tests/e2e/test_router.py": 14,
    "tests/e2e/test_scale.py": 11,
    "tests/integration/test_router_role_policy.py": 10,
    "tests/integration/test_router_admission.py": 6,
    "tests/integration/test_inference_pool.py": 5,
    "tests/integration/test_router_standin.py": 5,
    "tests/integration/test_router_objects.py": 4,
}

#: Estimated seconds per test of a unit the table does not know, by the directory it lives in.
PER_TEST_S: Mapping[str, float] = {
    "tests/unit/": 0.05,
    "tests/conformance/": 1.0,
    "tests/integration/": 5.0,
}
DEFAULT_PER_TEST_S = 15.0


def unit_of(nodeid: str) -> str:
    """The unit of test *nodeid*: its directory for the kind tier and the image tests, else its file."""
    for directory in WHOLE_DIRECTORIES:
        if nodeid.startswith(directory):
            return directory.rstrip("/")
    return nodeid.split("::", 1)[0]


def estimate_s(unit: str, tests: int) -> float:
    """The expected duration of *unit*, which has *tests* tests."""
    if unit in MEASURED_S:
        return MEASURED_S[unit]
    per_test = next((s for d, s in PER_TEST_S.items() if unit.startswith(d)), DEFAULT_PER_TEST_S)
    return per_test * tests


def order_units(units: Mapping[str, int]) -> list[str]:
    """The units (name -> number of tests), longest expected first; ties by name."""
    return sorted(units, key=lambda u: (-estimate_s(u, units[u]), u))


def pick_unit(queue: list[str], heavy_elsewhere: bool) -> str | None:
    """The first unit of *queue* this worker may start: no heavy one while another worker runs
    one. ``None`` when only heavy units are left and one runs elsewhere."""
    for unit in queue:
        if not (unit in HEAVY and heavy_elsewhere):
            return unit
    return None


class UnitScheduling(LoadScopeScheduling):
    """xdist's scope scheduler with this module's units, order and heavy-unit rule."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _heavy_elsewhere(self, node: WorkerController) -> bool:
        return any(
            unit in HEAVY and not all(work.values())
            for other, assigned in self.assigned_work.items()
            if other is not node
            for unit, work in assigned.items()
        )

    def _assign_work_unit(self, node: WorkerController, shortest: bool = False) -> None:
        queue = list(self.workqueue)
        unit = pick_unit(queue[::-1] if shortest else queue, self._heavy_elsewhere(node))
        if unit is None:
            self.log(f"{node.gateway.id}: only heavy units left, running on another worker")
            node.shutdown()
            return
        work = self.workqueue.pop(unit)
        self.assigned_work.setdefault(node, {})[unit] = work
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(i) for i, done in work.items() if not done])

    def _reschedule(self, node: WorkerController, shortest: bool = False) -> None:
        # Down to the held last test of its unit (or nothing): give it the next unit now, and
        # another while that one is a single held test too.
        while not node.shutting_down and self._pending_of(self.assigned_work[node]) <= 1:
            if not self.workqueue:
                node.shutdown()
                return
            self._assign_work_unit(node, shortest)

    def schedule(self) -> None:
        """Order the units longest first, then hand each worker its first unit."""
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(unit_of(nodeid), {})[nodeid] = False
        for unit in order_units({u: len(tests) for u, tests in units.items()}):
            self.workqueue[unit] = units[unit]
        # Each worker's first unit, longest first. A worker whose first unit is a single test
        # cannot start it before it has something after it: it gets the shortest unit, so
        # that the long ones go to the other workers instead of queueing behind it.
        for node in self.nodes:
            if self.workqueue:
                self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node, shortest=True)


def make_scheduler(config: Any, log: Any) -> UnitScheduling | None:
    """The scheduler for ``-n N`` with xdist's default ``--dist load``; ``None`` for other modes."""
    if config.getvalue("dist") != "load":
        return None
    return UnitScheduling(config, log)
