"""A faked GPU compute capability for vLLM's platform object (the harness runs on CPUs only).

Every capability helper of vLLM's platform interface (`has_device_capability`,
`is_device_capability`, `is_device_capability_family`) asks `cls.get_device_capability`, so
replacing that one classmethod on the current platform's class makes vLLM's own guard code see the
GPU the case names. Runs inside a release's virtualenv.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from conformance import vllm_cli  # noqa: F401  (imported first: it sets VLLM_TARGET_DEVICE=cpu)
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability

_capability: DeviceCapability | None = None


def _get_device_capability(cls: type, device_id: int = 0) -> DeviceCapability | None:
    return _capability


type(current_platform).get_device_capability = classmethod(_get_device_capability)  # type: ignore[method-assign,assignment]


@contextlib.contextmanager
def device_capability(major: int, minor: int) -> Iterator[None]:
    """Within the block, vLLM's platform reports compute capability `major.minor`."""
    global _capability
    previous = _capability
    _capability = DeviceCapability(major=major, minor=minor)
    try:
        yield
    finally:
        _capability = previous
