"""``deepseek-operator agent``: probe this node's GPUs and publish them on its own Node.

Loop: probe (NVML, or a recording with ``--recorded``) → :func:`labels_for` /
:func:`annotation_for` → :class:`NodePublisher` (patches only when something changed) → sleep
``--interval`` → again, until SIGTERM/SIGINT. ``--once`` does one round and exits with its
status; ``--dry-run`` prints what it would publish and talks to no API server.

No GPU (no NVML library, no driver, or zero devices) is a normal state, not a crash: the agent
logs one line saying so, publishes ``gpu.deepseek-operator.io/present=false`` (which also
removes any labels of ours left from an earlier GPU configuration, and lets the operator tell
"agent ran, no GPU" from "no agent"), then keeps probing quietly every interval, because the GPU
Operator's driver container may load the driver after the agent started. A probe that fails
midway (:class:`ProbeError`) publishes nothing, so the last good labels stay.

The node name comes from ``--node-name`` or ``$NODE_NAME`` (the DaemonSet sets it from the
downward API ``spec.nodeName``); the API credentials from the in-cluster ServiceAccount, else
``--kubeconfig`` / ``$KUBECONFIG``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any, TextIO

from deepseek_operator.agent.gpu_topology import GpuTopology
from deepseek_operator.agent.labels import annotation_for, labels_for
from deepseek_operator.agent.logs import configure_logging
from deepseek_operator.agent.probe import Probe, ProbeError, RecordedProbe
from deepseek_operator.agent.publisher import NodePublisher, PublishError
from deepseek_operator.names import AGENT_NVLINK_FULLY_CONNECTED, AGENT_TOPOLOGY_ANNOTATION

log = logging.getLogger("deepseek_operator.agent")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
ONCE_MAX_ATTEMPTS = 5


def desired_state(topology: GpuTopology) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations to publish for a probed topology (no annotation without GPUs)."""
    labels = labels_for(topology)
    if topology.count == 0:
        return labels, {}
    return labels, {AGENT_TOPOLOGY_ANNOTATION: annotation_for(topology)}


class Agent:
    """One node agent: a probe and, unless dry-running, a publisher for its Node."""

    def __init__(
        self,
        probe: Probe,
        publisher: NodePublisher | None,
        *,
        out: TextIO | None = None,
    ) -> None:
        self._probe = probe
        self._publisher = publisher
        self._out = out
        self._last_no_gpu_reason: str | None = None
        self._last_printed: tuple[dict[str, str], dict[str, str]] | None = None

    def step(self) -> int:
        """Probe once and publish (or print); return an exit status for ``--once``."""
        try:
            topology = self._probe.probe()
        except ProbeError as exc:
            log.error("Probe failed, keeping the labels published last", extra={"error": exc})
            return EXIT_FAILED
        if topology.count == 0:
            if topology.unavailable_reason != self._last_no_gpu_reason:
                # Said once per cause, so an idle CPU node does not fill its log.
                log.info(
                    "No GPUs on this Node, publishing present=false and idling",
                    extra={"reason": topology.unavailable_reason},
                )
            self._last_no_gpu_reason = topology.unavailable_reason
        else:
            self._last_no_gpu_reason = None
        labels, annotations = desired_state(topology)
        if self._publisher is None:
            self._print(labels, annotations)
            return EXIT_OK
        try:
            result = self._publisher.publish(labels, annotations)
        except PublishError as exc:
            log.error("Publishing failed", extra={"error": exc})
            return EXIT_FAILED
        if result.changed:
            patch_meta = (result.patch or {}).get("metadata", {})
            log.info(
                "Published GPU topology on Node",
                extra={
                    "node": self._publisher.node_name,
                    "labels_changed": len(patch_meta.get("labels", {})),
                    "annotations_changed": len(patch_meta.get("annotations", {})),
                    "gpus": topology.count,
                    "fully_connected": labels.get(AGENT_NVLINK_FULLY_CONNECTED, "n/a"),
                },
            )
        else:
            log.debug("Node already up to date", extra={"node": self._publisher.node_name})
        return EXIT_OK

    def _print(self, labels: dict[str, str], annotations: dict[str, str]) -> None:
        if self._last_printed == (labels, annotations):
            return
        self._last_printed = (labels, annotations)
        width = max(len(k) for k in (*labels, *annotations))
        out = self._out or sys.stdout  # looked up late so redirected stdout is honoured
        for key, value in (*labels.items(), *annotations.items()):
            out.write(f"{key:<{width}}  {value}\n")
        out.flush()

    def run(self, interval: float, stop: threading.Event) -> int:
        """Step every ``interval`` seconds until ``stop`` is set; return 0."""
        while not stop.is_set():
            self.step()
            stop.wait(interval)
        log.info("Stopped")
        return EXIT_OK


def _core_api(kubeconfig: str | None) -> Any:
    from kubernetes import client

    from deepseek_operator.kube.credentials import api_client

    return client.CoreV1Api(api_client(kubeconfig))


def agent_command(args: argparse.Namespace) -> int:
    """Run the ``agent`` subcommand; return the process exit code."""
    configure_logging()
    recorded = getattr(args, "recorded", None)
    probe: Probe
    if recorded:
        try:
            probe = RecordedProbe.from_file(recorded)
        except (OSError, ValueError) as exc:
            log.error("Cannot load the recorded topology", extra={"file": recorded, "error": exc})
            return EXIT_USAGE
    else:
        from deepseek_operator.agent.nvml import NvmlProbe

        probe = NvmlProbe()

    publisher = None
    if not args.dry_run:
        node_name = args.node_name or os.environ.get("NODE_NAME", "")
        if not node_name:
            log.error(
                "No node name: pass --node-name or set NODE_NAME from the downward API "
                "(fieldRef spec.nodeName)"
            )
            return EXIT_USAGE
        try:
            core = _core_api(getattr(args, "kubeconfig", None))
        except Exception as exc:  # the kubernetes config loaders raise several unrelated types
            log.error("Cannot load Kubernetes credentials", extra={"error": exc})
            return EXIT_USAGE
        publisher = NodePublisher(
            core, node_name, max_attempts=ONCE_MAX_ATTEMPTS if args.once else None
        )
        log.info("Starting", extra={"node": node_name, "interval_s": args.interval})

    agent = Agent(probe, publisher)
    if args.once:
        return agent.step()
    stop = threading.Event()

    def _stop(signum: int, _frame: Any) -> None:
        log.info("Stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
    return agent.run(args.interval, stop)
