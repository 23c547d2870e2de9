"""Whether this operator instance acts, by kopf's peering rule (kopf exposes no such flag).

kopf pauses its own handlers while a live peer has a higher priority (or another has the same),
but the operator also reconciles from its own watches (Node and child events). Those reconciles
ask this gate first, fed by a watch of the peering object(s) kopf keeps: a standby instance
never writes. Same rule as kopf's ``process_peering_event``: a peer is live until its
``lastseen`` plus ``lifetime``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any


class PeeringGate:
    """The peers kopf records, and whether ``priority`` (ours) is the one that acts now."""

    def __init__(self, priority: int | None, name: str | None = None) -> None:
        self.priority = priority  # None: standalone, always acts
        self.name = name  # the peering object kopf uses (None: any the watch shows)
        self._peers: dict[str, Mapping[str, Any]] = {}  # peering object -> its status
        self.listed = False

    def listed_all(self, snapshot: Mapping[str, Mapping[str, Any]]) -> None:
        """Every peering object (at start, or after the watch expired)."""
        self._peers = {key: _status(obj) for key, obj in snapshot.items() if self._ours(key)}
        self.listed = True

    def seen(self, kind: str, key: str, obj: Mapping[str, Any]) -> None:
        """One event of a peering object."""
        if not self._ours(key):
            return
        if kind == "DELETED":
            self._peers.pop(key, None)
        else:
            self._peers[key] = _status(obj)

    def _ours(self, key: str) -> bool:
        return self.name is None or key.rpartition("/")[2] == self.name

    def active(self, now: dt.datetime | None = None) -> bool:
        """Whether this instance acts: no live peer with a higher priority, none with ours."""
        if self.priority is None:
            return True
        if not self.listed:
            return False
        now = now or dt.datetime.now(dt.UTC)
        for status in self._peers.values():
            same = 0
            for info in status.values():
                if not isinstance(info, Mapping) or _dead(info, now):
                    continue
                priority = int(info.get("priority") or 0)
                if priority > self.priority:
                    return False
                same += priority == self.priority
            if same > 1:  # ourselves and another with our priority: kopf pauses both
                return False
        return True


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _dead(info: Mapping[str, Any], now: dt.datetime) -> bool:
    try:
        seen = dt.datetime.fromisoformat(str(info.get("lastseen")))
        lifetime = dt.timedelta(seconds=int(info.get("lifetime") or 60))
    except (TypeError, ValueError):
        return False  # unreadable: assume it lives, as the safe side
    if seen.tzinfo is None:
        seen = seen.replace(tzinfo=dt.UTC)
    return seen + lifetime <= now
