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
from typing import Any

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
