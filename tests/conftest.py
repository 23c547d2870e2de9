"""Shared pytest fixtures and hooks. Append new sections at the end."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

# --- real local control plane (tests/k8s/cluster.py; binaries: hack/build-control-plane.sh) ---
from tests.k8s.cluster import (  # noqa: F401  (fixtures are used by name)
    attach_logs_on_failure,
    control_plane,
    full_cluster,
    namespace,
    node_factory,
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    """Attach control-plane component log tails to failed tests that used the cluster."""
    outcome = yield
    attach_logs_on_failure(item, outcome.get_result())


# --- the operator as a subprocess (tests/k8s/operator.py); rack scale: the real LWS controller
# (tests/k8s/lws.py) and NVIDIA's ComputeDomain surface (tests/k8s/dra.py) ----------------------
from tests.k8s.dra import compute_domain_driver  # noqa: E402, F401
from tests.k8s.kueue import kueue_cluster  # noqa: E402, F401
from tests.k8s.lws import lws_cluster  # noqa: E402, F401
from tests.k8s.operator import crds, operator  # noqa: E402, F401


# --- `make test`'s pytest-xdist workers: units, order, heavy units apart (tests/schedule.py) ----
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Units of whole files, longest first, the kind tier and the image tests never side by side."""
    from tests.schedule import make_scheduler

    return make_scheduler(config, log)
