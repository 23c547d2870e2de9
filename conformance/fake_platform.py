"""A faked GPU compute capability for vLLM's platform object (the harness runs on CPUs only).

Every capability helper of vLLM's platform interface (`has_device_capability`,
`is_device_capability`, `is_device_capability_family`) asks `cls.get_device_capability`, so
replacing that one classmethod on the current platform's class makes vLLM's own guard code see the
GPU the case names; older releases that ask `torch.cuda.get_device_capability` get the same
answer. Runs inside a release's virtualenv.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from conformance import vllm_cli  # noqa: F401  (imported first: it sets VLLM_TARGET_DEVICE=cpu)

# isort: split
import torch
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability

_capability: DeviceCapability | None = None


def _get_device_capability(cls: type, device_id: int = 0) -> DeviceCapability | None:
    return _capability


def _torch_cuda_get_device_capability(device: object = None) -> tuple[int, int]:
    if _capability is None:
        raise RuntimeError("no GPU capability faked")
    return (_capability.major, _capability.minor)


type(current_platform).get_device_capability = classmethod(_get_device_capability)  # type: ignore[method-assign,assignment]
# Older releases ask torch directly (`torch.cuda.get_device_capability(device)[0] != 10`).
torch.cuda.get_device_capability = _torch_cuda_get_device_capability  # type: ignore[assignment]


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
