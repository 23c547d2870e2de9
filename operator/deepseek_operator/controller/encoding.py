"""Request bodies as the API server must receive them, encoded once.

A write is encoded when it is queued (:class:`EncodedObject`), not when a writer thread sends
it: in a burst the applies of hundreds of reconciles wait for a thread, and a rendered
Deployment or LeaderWorkerSet is several times larger as Python objects than as JSON. While it
waits the JSON is kept compressed (a 12 KB LeaderWorkerSet packs to about 2 KB); the writer
thread unpacks it as it sends it.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from deepseek_operator.actions import Action, Apply, Delete, Writes, pair_held

# Characters the API server's YAML decoder refuses raw (DEL, C1 controls, surrogates, the BOM,
# U+FFFE/U+FFFF); JSON escapes only those below U+0020 itself.
_YAML_REFUSED = re.compile("[\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


@dataclass(frozen=True, slots=True)
class EncodedObject:
    """An object to apply, encoded when its write is queued: its identity, and its body as the
    request bytes (:func:`encode_body`), compressed until they are sent."""

    api_version: str
    kind: str
    namespace: str
    name: str
    packed: bytes  # zlib of the request bytes

    @property
    def data(self) -> bytes:
        """The request bytes."""
        return zlib.decompress(self.packed)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> EncodedObject:
        """Encode ``obj`` (a manifest with apiVersion, kind and metadata.name)."""
        meta = obj["metadata"]
        return cls(
            api_version=str(obj["apiVersion"]),
            kind=str(obj["kind"]),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
            packed=zlib.compress(encode_body(obj), 1),
        )

    def decoded(self) -> dict[str, Any]:
        """The object as a fresh dict (for whoever reads it rather than sending it)."""
        obj: dict[str, Any] = json.loads(self.data)
        return obj


def encode_body(body: Any) -> bytes:
    """A request body as the API server must receive it: compact JSON in UTF-8.

    A server-side apply body is read by a YAML decoder, which refuses a surrogate-pair escape
    (what JSON writes for a character beyond the Basic Multilingual Plane, e.g. an emoji in an
    env value) and refuses raw control characters such as DEL: so characters go out raw except
    those YAML may not hold, which go out as (BMP) ``\\u`` escapes. Both would otherwise be
    a 400 the Deployment API itself would not give.
    """
    if isinstance(body, EncodedObject):
        return body.data
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    if _YAML_REFUSED.search(text) is not None:
        text = _YAML_REFUSED.sub(_escape, text)
    return text.encode("utf-8")


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
