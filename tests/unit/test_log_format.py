"""The operator's JSON log lines: an exception is one line, never a traceback."""

from __future__ import annotations

import json
import logging
import sys

from deepseek_operator.controller.main import _JsonFormatter


def _failing() -> None:
    raise ValueError("the API server said no\nand a second line")


def test_an_exception_is_logged_as_its_type_and_first_line() -> None:
    try:
        _failing()
    except ValueError:
        info = sys.exc_info()
    record = logging.LogRecord(
        "kopf.objects", logging.ERROR, __file__, 1, "Handler failed", (), info
    )
    line = _JsonFormatter().format(record)
    doc = json.loads(line)
    assert doc["exc"] == "ValueError: the API server said no"
    assert "Traceback" not in line and "_failing" not in line
    assert "\n" not in line
