"""The real probe: read this node's GPUs and NVLink topology through NVML (``pynvml``).

The ONLY module of the project that imports pynvml (from the ``nvidia-ml-py`` distribution), and
only lazily inside :class:`NvmlProbe`, so importing this module never needs a driver. Tests
inject a fake module object through ``NvmlProbe(nvml=...)``.

"Fully connected" is decided exactly as vLLM's ``NvmlCudaPlatform.is_fully_connected`` does
(docs/node-facts.md): ``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK) ==
NVML_P2P_STATUS_OK`` for every pair, and any NVMLError on a pair means "not connected". Link
counts and NVSwitch attachment come from the per-link calls, multi-node NVLink from
``nvmlDeviceGetGpuFabricInfoV`` (the acceptance rule is applied in ``agent_labels``).
None of these calls creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from typing import Any

from deepseek_operator.agent.gpu_topology import FabricInfo, GpuInfo, GpuTopology
from deepseek_operator.agent.probe import ProbeError

_MIB = 1024 * 1024
# Fallbacks for constants that older nvidia-ml-py releases lack (values from 13.615.71).
_NVML_ERROR_NOT_SUPPORTED = 3
_NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
_NVLINK_MAX_LINKS_DEFAULT = 18


def _text(value: Any) -> str:
    """NVML strings are ``str`` in nvidia-ml-py ≥ 11 and ``bytes`` in older bindings."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlProbe:
    """Probe the GPUs of this node through NVML. ``nvml`` is the pynvml module (for tests)."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml

    def _module(self) -> Any:
        if self._nvml is None:
            import pynvml  # the one import of pynvml in the project

            self._nvml = pynvml
        return self._nvml

    def probe(self) -> GpuTopology:
        """Read every GPU NVML can see; no GPUs (with the reason) when NVML cannot start.

        Raises :class:`ProbeError` when NVML started but enumerating the GPUs failed.
        """
        try:
            nvml = self._module()
        except ImportError as exc:
            return GpuTopology(unavailable_reason=f"pynvml is not installed: {exc}")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            # No driver / no libnvidia-ml.so: a CPU node. Not an error for the agent.
            return GpuTopology(unavailable_reason=f"NVML unavailable: {exc}")
        try:
            return self._read(nvml)
        except nvml.NVMLError as exc:
            raise ProbeError(f"NVML failed while reading the GPUs: {exc}") from exc
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    # -- reading -------------------------------------------------------------------------------

    def _read(self, nvml: Any) -> GpuTopology:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = self._optional(nvml, nvml.nvmlSystemGetCudaDriverVersion)
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            return GpuTopology(
                driver_version=driver,
                cuda_driver_version=cuda,
                unavailable_reason="NVML found no GPUs",
            )
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = tuple(self._gpu(nvml, i, h) for i, h in enumerate(handles))
        return GpuTopology(
            gpus=gpus,
            nvlink=self._p2p_nvlink_matrix(nvml, handles),
            driver_version=driver,
            cuda_driver_version=int(cuda) if cuda is not None else None,
            fabric_probed=True,
            source="nvml",
        )

    @staticmethod
    def _optional(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML getter whose failure only means "unknown" (old driver, not supported)."""
        try:
            return fn(*args)
        except nvml.NVMLError:
            return None

    def _gpu(self, nvml: Any, index: int, handle: Any) -> GpuInfo:
        name = _text(nvml.nvmlDeviceGetName(handle))
        uuid = self._optional(nvml, nvml.nvmlDeviceGetUUID, handle)
        pci = self._optional(nvml, nvml.nvmlDeviceGetPciInfo, handle)
        cc = self._optional(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
        memory = self._optional(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        numa = None
        if hasattr(nvml, "nvmlDeviceGetNumaNodeId"):
            numa = self._optional(nvml, nvml.nvmlDeviceGetNumaNodeId, handle)
        links, switch = self._links(nvml, handle)
        return GpuInfo(
            index=index,
            name=name,
            uuid=_text(uuid) if uuid is not None else None,
            bus_id=_text(pci.busId) if pci is not None else None,
            cc_major=int(cc[0]) if cc is not None else None,
            cc_minor=int(cc[1]) if cc is not None else None,
            memory_mib=int(memory.total) // _MIB if memory is not None else None,
            numa_node=int(numa) if numa is not None else None,
            nvlink_active_links=links,
            nvlink_switch_attached=switch,
            mig_enabled=self._mig(nvml, handle),
            fabric=self._fabric(nvml, handle),
        )

    @staticmethod
    def _links(nvml: Any, handle: Any) -> tuple[int, bool | None]:
        """Active NVLink count and whether any active link ends at an NVSwitch.

        Links that do not exist answer NotSupported/InvalidArgument and are skipped, as
        go-gpuallocator does.
        """
        max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_DEFAULT))
        remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        active = 0
        switch: bool | None = False if remote_type is not None else None
        for link in range(max_links):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError:
                continue
            if state != nvml.NVML_FEATURE_ENABLED:
                continue
            active += 1
            if remote_type is None:
                continue
            try:
                if remote_type(handle, link) == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                    switch = True
            except nvml.NVMLError:
                continue
        return active, switch

    @staticmethod
    def _mig(nvml: Any, handle: Any) -> bool | None:
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError as exc:
            not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", _NVML_ERROR_NOT_SUPPORTED)
            # NotSupported means the GPU is not MIG-capable, which is a definite "no".
            return False if getattr(exc, "value", None) == not_supported else None
        return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)

    @staticmethod
    def _fabric(nvml: Any, handle: Any) -> FabricInfo | None:
        """Fabric info, newest struct first; None when the GPU has no fabric (NotSupported).

        ``nvmlDeviceGetGpuFabricInfoV`` takes a versioned struct: try v3 (with
        ``healthSummary``), fall back to v2 when the driver rejects the version, and use the
        deprecated ``nvmlDeviceGetGpuFabricInfo`` only where the V symbol is missing.
        """
        mismatch = getattr(
            nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", _NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        )
        if hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
            for struct_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfoV_t"):
                struct = getattr(nvml, struct_name, None)
                if struct is None:
                    continue
                info = struct()
                try:
                    nvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == mismatch:
                        continue
                    return None
                return _fabric_info(info)
            return None
        if hasattr(nvml, "nvmlDeviceGetGpuFabricInfo") and hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
            info = nvml.c_nvmlGpuFabricInfo_t()
            try:
                nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            except nvml.NVMLError:
                return None
            return _fabric_info(info)
        return None

    @staticmethod
    def _p2p_nvlink_matrix(nvml: Any, handles: list[Any]) -> tuple[tuple[bool | None, ...], ...]:
        """vLLM's test for every pair: P2P status over NVLink is OK; any NVML error is "no"."""
        n = len(handles)
        matrix: list[list[bool | None]] = [[i == j for j in range(n)] for i in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                try:
                    status = nvml.nvmlDeviceGetP2PStatus(
                        handles[i], handles[j], nvml.NVML_P2P_CAPS_INDEX_NVLINK
                    )
                    ok = status == nvml.NVML_P2P_STATUS_OK
                except nvml.NVMLError:
                    ok = False
                matrix[i][j] = matrix[j][i] = ok
        return tuple(tuple(row) for row in matrix)


def _fabric_info(info: Any) -> FabricInfo:
    health_summary = getattr(info, "healthSummary", None)
    health_mask = getattr(info, "healthMask", None)
    return FabricInfo(
        cluster_uuid=bytes(bytearray(info.clusterUuid)),
        clique_id=int(info.cliqueId),
        state=int(info.state),
        status=int(info.status),
        health_mask=int(health_mask) if health_mask is not None else None,
        health_summary=int(health_summary) if health_summary is not None else None,
    )
