"""One-line structured logs for the node agent: ``logfmt`` (``key=value``) on stderr.

A record renders as ``ts=... level=info logger=... msg="Published GPU topology" node=n1 ...``;
the key/values come from ``extra=`` (Kubernetes logging conventions, docs/development.md), so call
sites stay plain ``log.info("...", extra={...})``.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
) | {"message", "asctime", "taskName"}


def _quote(value: Any) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\n\t'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """Format a record as one ``key=value`` line; ``extra`` fields follow the message."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` (and any exception, flattened onto the same line)."""
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                parts.append(f"{key}={_quote(value)}")
        if record.exc_info:
            parts.append(f"exc={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def configure_logging(level: int = logging.INFO) -> None:
    """Send the ``deepseek_operator`` loggers to stderr in logfmt (idempotent)."""
    logger = logging.getLogger("deepseek_operator")
    if any(getattr(h, "_dso_logfmt", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    handler._dso_logfmt = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
