"""Round 1's writes as the writer threads send them: each apply's manifest encoded when queued
(:class:`~deepseek_operator.kube.encoding.EncodedObject`), and a disaggregated pair written whole
or not at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from deepseek_operator.actions import Action, Apply, Delete, Writes, pair_held
from deepseek_operator.kube.encoding import EncodedObject


@dataclass(frozen=True, slots=True)
class EncodedApply:
    """An :class:`~deepseek_operator.actions.Apply` whose manifest is encoded for the request."""

    manifest: EncodedObject
    unseen: bool


def encoded_apply(action: Apply) -> EncodedApply:
    """``action`` with its manifest encoded."""
    return EncodedApply(EncodedObject.of(action.manifest), action.unseen)


def encoded(action: Action) -> Action | EncodedApply:
    """``action``, with an :class:`~deepseek_operator.actions.Apply`'s manifest encoded (other
    actions as they are)."""
    return encoded_apply(action) if isinstance(action, Apply) else action


class NameChecker(Protocol):
    """What :func:`encoded_writes` asks of the API client (KubeClient.names_taken)."""

    async def names_taken(self, objs: list[EncodedObject], uid: str) -> list[str]:
        """The refusals of ``objs`` whose names objects not controlled by ``uid`` hold."""
        ...


async def encoded_writes(
    kube: NameChecker, writes: Writes, uid: str, foreign: list[str]
) -> list[Action | EncodedApply]:
    """Round 1's actions, encoded; for a disaggregated pair (``writes.pair``), without any
    child write when a name it has not seen is taken by an object ``uid`` does not control:
    all of a pair's children or none, never half a pair. The objects in the way, and that the
    pair is held, are added to ``foreign``."""
    actions = [encoded(action) for action in writes.actions]
    unseen = [a.manifest for a in actions if isinstance(a, EncodedApply) and a.unseen]
    taken = await kube.names_taken(unseen, uid) if writes.pair and unseen else []
    if not taken:
        return actions
    foreign.extend(pair_held(taken))
    return [a for a in actions if not isinstance(a, EncodedApply | Delete)]
