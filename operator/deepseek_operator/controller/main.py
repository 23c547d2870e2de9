"""``deepseek-operator run``: start kopf with our handlers, metrics and health endpoints.

HA: with two replicas, kopf peering (a ``ClusterKopfPeering`` named by ``--peering``) lets only
the highest-priority instance act; the others pause until it goes away. Each instance draws a
random priority at start, so exactly one acts. ``--standalone`` turns peering off (one replica).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from typing import Any


class _JsonFormatter(logging.Formatter):
    """One JSON object per line, with the ``extra=`` fields."""

    _SKIP = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
        "message",
        "asctime",
        "settings",  # kopf attaches its whole settings object to every record
        "k8s_skip",
        "k8s_ref",
    }

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._SKIP:
                doc[key.rstrip("_")] = value
        if record.exc_info and record.exc_info[1] is not None:
            # What failed, in one line: a traceback is for a debugger, not for a user's logs
            # (kopf's own failure records carry exc_info too).
            exc = record.exc_info[1]
            doc["exc"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return json.dumps(doc, default=str)


def setup_logging(level: str = "INFO") -> None:
    """Structured JSON logs on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf logs every successful handler call and aiohttp every probe: keep those quiet.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def run_operator(args: argparse.Namespace) -> int:
    """Run the operator until it is stopped."""
    import kopf
    from prometheus_client import start_http_server

    from deepseek_operator.controller.state import OperatorState
    from deepseek_operator.controller.wiring import registry
    from deepseek_operator.kube.credentials import CredentialsError, load_credentials

    setup_logging(args.log_level)
    try:
        credentials = load_credentials()
    except CredentialsError as exc:  # refused before anything starts: one line, exit 1
        logging.getLogger("deepseek_operator.controller").error("Cannot start: %s", exc)
        return 1
    start_http_server(args.metrics_port, addr=args.metrics_address)
    priority = args.priority if args.priority is not None else random.randint(1, 1_000_000)
    kopf.run(
        registry=registry(),
        standalone=args.standalone,
        priority=priority,
        peering_name=None if args.standalone else args.peering,
        liveness_endpoint=f"http://{args.health_address}:{args.health_port}/healthz",
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        memo=OperatorState(
            compute_domain_enabled=args.compute_domain,
            router_image=args.router_image,
            fill_image=args.fill_image,
            namespaces=args.namespace,
            peering=None if args.standalone else args.peering,
            priority=priority,
            credentials=credentials,
        ),
    )
    return 0
