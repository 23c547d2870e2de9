"""The project's error hierarchy and the one-line rendering of spec errors.

Every error raised on purpose derives from :class:`DeepSeekOperatorError`: spec and input errors
here, the agent's ``ProbeError`` and ``PublishError`` next to the code that raises them.
This module imports nothing from the project, so every layer may raise these.

Spec errors read like the API server's own (``spec.x: Invalid value: V: rule``), so ``render``
and ``kubectl apply`` say the same thing about the same CR.
"""

from __future__ import annotations

import json
from typing import Any


class DeepSeekOperatorError(Exception):
    """Base class of every error the operator raises on purpose."""


class SpecError(DeepSeekOperatorError, ValueError):
    """A DeepSeekServing spec (or an input file) breaks a rule; permanent until it is edited."""

    def __init__(self, field_path: str, value: Any, message: str) -> None:
        self.field_path = field_path
        self.value = value
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``<field>: Invalid value: <value>: <message>`` on one line."""
        shown = json.dumps(self.value, default=str) if self.value is not None else "null"
        return f"{self.field_path}: Invalid value: {shown}: {self.message}"


class InputError(DeepSeekOperatorError, ValueError):
    """A file given on the command line is unreadable or is not what it should be."""
