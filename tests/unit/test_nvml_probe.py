"""NvmlProbe against a fake ``pynvml`` module object: the vLLM P2P rule, errors, no GPUs, fabric.

The fake reuses the real module's NVMLError classes and constants (nvidia-ml-py is installed
everywhere, it just finds no driver here), so the probe sees exactly the exception types and
values it will meet on a GPU node.
"""

from __future__ import annotations

import ctypes
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

from deepseek_operator import names
from deepseek_operator.agent.labels import annotation_document, labels_for
from deepseek_operator.agent.nvml import NvmlProbe
from deepseek_operator.agent.probe import ProbeError, RecordedProbe

GB200_CLUSTER = uuid.UUID("9c6f5af3-53bf-49b5-a436-b66766c413c3")  # gpud#1106, fixture T16


@dataclass
class FakeGpu:
    name: str = "NVIDIA B200"
    cc: tuple[int, int] = (10, 0)
    memory_mib: int = 183359
    links: int = 18
    switch: bool = True
    mig: int | None = 0  # None: MIG not supported
    fabric: tuple[bytes, int, int, int, int, int] | None = None  # uuid, clique, state, status,...


@dataclass
class FakeSpec:
    gpus: list[FakeGpu]
    # Pairs (i, j) whose P2P NVLink status is not OK, or raises.
    not_ok: set[tuple[int, int]] = field(default_factory=set)
    raises: set[tuple[int, int]] = field(default_factory=set)
    init_error: int | None = None
    count_error: int | None = None
    driver: str = "570.124.06"
    cuda: int = 12080
    fabric_v3: bool = True  # False: the driver rejects the v3 struct (version mismatch)


def fake_pynvml(spec: FakeSpec) -> types.SimpleNamespace:
    """A module-like object with pynvml's constants/exceptions and fake functions for *spec*."""
    mod = types.SimpleNamespace(
        **{k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith(("NVML", "c_nvml"))}
    )
    calls: list[str] = []
    mod.calls = calls

    def err(value: int) -> Exception:
        return pynvml.NVMLError(value)

    def init() -> None:
        calls.append("init")
        if spec.init_error is not None:
            raise err(spec.init_error)

    def shutdown() -> None:
        calls.append("shutdown")

    def count() -> int:
        if spec.count_error is not None:
            raise err(spec.count_error)
        return len(spec.gpus)

    def gpu(h: Any) -> FakeGpu:
        return spec.gpus[h]

    def p2p(a: int, b: int, index: Any) -> int:
        assert index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        pair = (min(a, b), max(a, b))
        if pair in spec.raises:
            raise err(pynvml.NVML_ERROR_UNKNOWN)
        if pair in spec.not_ok:
            return pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        return pynvml.NVML_P2P_STATUS_OK

    def link_state(h: int, link: int) -> int:
        if link >= gpu(h).links:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def remote_type(h: int, link: int) -> int:
        if gpu(h).switch:
            return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def mig_mode(h: int) -> list[int]:
        if gpu(h).mig is None:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu(h).mig, gpu(h).mig]

    def fabric_v(h: int, ref: Any) -> int:
        info = ref._obj
        if isinstance(info, pynvml.c_nvmlGpuFabricInfo_v3_t) and not spec.fabric_v3:
            raise err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        fab = gpu(h).fabric
        if fab is None:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        cluster, clique, state, status, mask, summary = fab
        ctypes.memmove(info.clusterUuid, cluster, 16)
        info.cliqueId, info.state, info.status, info.healthMask = clique, state, status, mask
        if hasattr(info, "healthSummary"):
            info.healthSummary = summary
        return pynvml.NVML_SUCCESS

    pci = types.SimpleNamespace
    mod.nvmlInit = init
    mod.nvmlShutdown = shutdown
    mod.nvmlSystemGetDriverVersion = lambda: spec.driver
    mod.nvmlSystemGetCudaDriverVersion = lambda: spec.cuda
    mod.nvmlDeviceGetCount = count
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: gpu(h).name
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h:08d}-0000-0000-0000-000000000000"
    mod.nvmlDeviceGetPciInfo = lambda h: pci(busId=f"00000000:{0x18 + h:02X}:00.0")
    mod.nvmlDeviceGetCudaComputeCapability = lambda h: gpu(h).cc
    mod.nvmlDeviceGetMemoryInfo = lambda h: pci(total=gpu(h).memory_mib * 1024 * 1024)
    mod.nvmlDeviceGetNumaNodeId = lambda h: 0 if h < 4 else 1
    mod.nvmlDeviceGetP2PStatus = p2p
    mod.nvmlDeviceGetNvLinkState = link_state
    mod.nvmlDeviceGetNvLinkRemoteDeviceType = remote_type
    mod.nvmlDeviceGetMigMode = mig_mode
    mod.nvmlDeviceGetGpuFabricInfoV = fabric_v
    mod.NVMLError = pynvml.NVMLError
    return mod


def probe(spec: FakeSpec) -> Any:
    return NvmlProbe(nvml=fake_pynvml(spec)).probe()


def test_hgx_b200_with_nvswitch_is_fully_connected() -> None:
    topo = probe(FakeSpec(gpus=[FakeGpu() for _ in range(8)]))
    labels = labels_for(topo)
    assert labels == {
        names.AGENT_CC: "10.0",
        names.AGENT_COUNT: "8",
        names.AGENT_CUDA: "12.8",
        names.AGENT_DRIVER: "570.124.06",
        names.AGENT_MEMORY_MIB: "183359",
        names.AGENT_MIG: "false",
        names.AGENT_MNNVL_STATE: "none",
        names.AGENT_NVLINK_DOMAIN_SIZE: "8",
        names.AGENT_NVLINK_FULLY_CONNECTED: "true",
        names.AGENT_NVLINK_LINKS: "18",
        names.AGENT_NVLINK_SWITCH: "true",
        names.AGENT_PRESENT: "true",
        names.AGENT_PRODUCT: "NVIDIA-B200",
        names.AGENT_SM_FAMILY: "sm100",
    }
    gpu0 = topo.gpus[0]
    assert gpu0.bus_id == "00000000:18:00.0"
    assert gpu0.uuid.startswith("GPU-")
    assert annotation_document(topo)["nvlink"] == "1" * 64


def test_degraded_gpu2_like_t7_is_not_fully_connected_and_domain_is_7() -> None:
    not_ok = {(min(2, j), max(2, j)) for j in range(8) if j != 2}
    topo = probe(FakeSpec(gpus=[FakeGpu() for _ in range(8)], not_ok=not_ok))
    labels = labels_for(topo)
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == "false"
    assert labels[names.AGENT_NVLINK_DOMAIN_SIZE] == "7"


def test_an_nvml_error_on_one_pair_means_that_pair_is_not_connected() -> None:
    topo = probe(FakeSpec(gpus=[FakeGpu() for _ in range(4)], raises={(1, 3)}))
    assert topo.nvlink[1][3] is False and topo.nvlink[3][1] is False
    assert labels_for(topo)[names.AGENT_NVLINK_FULLY_CONNECTED] == "false"
    assert labels_for(topo)[names.AGENT_NVLINK_DOMAIN_SIZE] == "3"


def test_pcie_only_gpus_have_no_links_no_switch_and_mig_unsupported() -> None:
    gpus = [FakeGpu(name="NVIDIA L40S", cc=(8, 9), links=0, switch=False, mig=None)] * 4
    not_ok = {(i, j) for i in range(4) for j in range(i + 1, 4)}
    labels = labels_for(probe(FakeSpec(gpus=gpus, not_ok=not_ok)))
    assert labels[names.AGENT_NVLINK_LINKS] == "0"
    assert labels[names.AGENT_NVLINK_SWITCH] == "false"
    assert labels[names.AGENT_MIG] == "false"
    assert labels[names.AGENT_SM_FAMILY] == "sm80"
    assert labels[names.AGENT_NVLINK_DOMAIN_SIZE] == "1"


def test_mixed_products_and_cc_are_labelled_mixed() -> None:
    gpus = [FakeGpu(), FakeGpu(name="NVIDIA H200", cc=(9, 0), memory_mib=143771)]
    labels = labels_for(probe(FakeSpec(gpus=gpus)))
    assert labels[names.AGENT_PRODUCT] == "mixed"
    assert labels[names.AGENT_CC] == "mixed"
    assert labels[names.AGENT_SM_FAMILY] == "mixed"
    assert labels[names.AGENT_MEMORY_MIB] == "143771"


def test_mig_enabled_on_any_gpu_is_reported() -> None:
    labels = labels_for(probe(FakeSpec(gpus=[FakeGpu(), FakeGpu(mig=1)])))
    assert labels[names.AGENT_MIG] == "true"


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, id="no libnvidia-ml gives no GPUs"),
        pytest.param(pynvml.NVML_ERROR_DRIVER_NOT_LOADED, id="driver not loaded gives no GPUs"),
    ],
)
def test_nvml_init_failure_is_a_clean_no_gpus_result(error: int) -> None:
    fake = fake_pynvml(FakeSpec(gpus=[], init_error=error))
    topo = NvmlProbe(nvml=fake).probe()
    assert topo.count == 0
    assert topo.unavailable_reason is not None
    assert topo.unavailable_reason.startswith("NVML unavailable")
    assert labels_for(topo) == {names.AGENT_PRESENT: "false"}
    assert "shutdown" not in fake.calls


def test_zero_gpus_is_a_clean_no_gpus_result_and_nvml_is_shut_down() -> None:
    fake = fake_pynvml(FakeSpec(gpus=[]))
    topo = NvmlProbe(nvml=fake).probe()
    assert topo.count == 0 and topo.unavailable_reason == "NVML found no GPUs"
    assert fake.calls == ["init", "shutdown"]


def test_an_nvml_error_while_enumerating_raises_probe_error_and_shuts_down() -> None:
    fake = fake_pynvml(FakeSpec(gpus=[FakeGpu()], count_error=pynvml.NVML_ERROR_GPU_IS_LOST))
    with pytest.raises(ProbeError, match="NVML failed while reading the GPUs"):
        NvmlProbe(nvml=fake).probe()
    assert fake.calls[-1] == "shutdown"


def test_real_pynvml_on_a_machine_without_a_driver_reports_no_gpus() -> None:
    # No mock: on CPU-only CI nvmlInit raises NVMLError_LibraryNotFound (docs/node-facts.md).
    topo = NvmlProbe().probe()
    if topo.count == 0:
        assert topo.unavailable_reason
        assert labels_for(topo) == {names.AGENT_PRESENT: "false"}
    else:  # a developer machine with a GPU: the probe still must not crash
        assert labels_for(topo)[names.AGENT_PRESENT] == "true"


def test_the_probe_uses_the_real_module_when_none_is_injected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = fake_pynvml(FakeSpec(gpus=[FakeGpu()] * 2))
    for name in ("nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion",
                 "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetCount",
                 "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
                 "nvmlDeviceGetPciInfo", "nvmlDeviceGetCudaComputeCapability",
                 "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetNumaNodeId", "nvmlDeviceGetP2PStatus",
                 "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemoteDeviceType",
                 "nvmlDeviceGetMigMode", "nvmlDeviceGetGpuFabricInfoV"):  # fmt: skip
        monkeypatch.setattr(pynvml, name, getattr(fake, name))
    labels = labels_for(NvmlProbe().probe())
    assert labels[names.AGENT_COUNT] == "2"
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == "true"


# --- multi-node NVLink (fabric info, docs/node-facts.md) ----------------------------------------

OK = (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS)
HEALTHY = pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY


def gb200(fabric: tuple[bytes, int, int, int, int, int] | None) -> FakeGpu:
    return FakeGpu(name="NVIDIA GB200", memory_mib=189471, fabric=fabric)


def test_gb200_tray_with_a_completed_fabric_publishes_the_clique() -> None:
    fab = (GB200_CLUSTER.bytes, 4026, *OK, 0, HEALTHY)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(fab)] * 4)))
    assert labels[names.AGENT_MNNVL_STATE] == "ready"
    assert labels[names.AGENT_MNNVL_CLIQUE] == "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"
    assert labels[names.AGENT_MNNVL_DOMAIN] == "9c6f5af3-53bf-49b5-a436-b66766c413c3"


def test_the_v2_struct_is_used_when_the_driver_rejects_v3() -> None:
    fab = (GB200_CLUSTER.bytes, 4026, *OK, 0, HEALTHY)
    topo = probe(FakeSpec(gpus=[gb200(fab)] * 2, fabric_v3=False))
    assert topo.gpus[0].fabric.health_summary is None
    assert labels_for(topo)[names.AGENT_MNNVL_STATE] == "ready"


def test_t15_completed_with_insufficient_resources_is_rejected_as_degraded() -> None:
    fab = (bytes(16), 0, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
           pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, 0, 0)  # fmt: skip
    labels = labels_for(probe(FakeSpec(gpus=[gb200(fab)] * 4)))
    assert labels[names.AGENT_MNNVL_STATE] == "degraded"
    assert names.AGENT_MNNVL_CLIQUE not in labels
    assert names.AGENT_MNNVL_DOMAIN not in labels


def test_h100_completed_with_a_zero_cluster_uuid_is_not_a_domain() -> None:
    fab = (bytes(16), 0, *OK, 0, 0)
    labels = labels_for(probe(FakeSpec(gpus=[FakeGpu(name="NVIDIA H100 80GB HBM3")] * 8)))
    assert labels[names.AGENT_MNNVL_STATE] == "none"
    labels = labels_for(probe(FakeSpec(gpus=[gb200(fab)] * 8)))
    assert labels[names.AGENT_MNNVL_STATE] == "none"
    assert names.AGENT_MNNVL_CLIQUE not in labels


def test_t18_fabric_not_supported_yet_is_none_and_in_progress_is_pending() -> None:
    not_supported = (bytes(16), 0, pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0, 0, 0)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(not_supported)] * 4)))
    assert labels[names.AGENT_MNNVL_STATE] == "none"
    in_progress = (bytes(16), 0, pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 0, 0, 0)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(in_progress)] * 4)))
    assert labels[names.AGENT_MNNVL_STATE] == "pending"
    assert names.AGENT_MNNVL_CLIQUE not in labels


def test_one_gpu_failing_on_mnnvl_hardware_degrades_the_node_and_drops_the_clique() -> None:
    good = (GB200_CLUSTER.bytes, 4026, *OK, 0, HEALTHY)
    bad = (bytes(16), 0, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_ERROR_UNKNOWN, 0, 0)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(good)] * 3 + [gb200(bad)])))
    assert labels[names.AGENT_MNNVL_STATE] == "degraded"
    assert names.AGENT_MNNVL_CLIQUE not in labels


def test_gpus_disagreeing_on_the_clique_degrade_the_node() -> None:
    a = (GB200_CLUSTER.bytes, 1, *OK, 0, HEALTHY)
    b = (GB200_CLUSTER.bytes, 2, *OK, 0, HEALTHY)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(a), gb200(b)])))
    assert labels[names.AGENT_MNNVL_STATE] == "degraded"
    assert names.AGENT_MNNVL_CLIQUE not in labels


@pytest.mark.parametrize(
    ("mask", "summary"),
    [
        pytest.param(0, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY,
                     id="an unhealthy summary degrades a ready clique"),
        pytest.param(0, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY,
                     id="limited capacity degrades a ready clique"),
        pytest.param(0x1, HEALTHY, id="the degraded-bandwidth bit degrades a ready clique"),
        pytest.param(0x5 << 8, HEALTHY, id="an incorrect configuration degrades a ready clique"),
    ],
)  # fmt: skip
def test_fabric_health_problems_keep_the_clique_but_say_degraded(mask: int, summary: int) -> None:
    fab = (GB200_CLUSTER.bytes, 4026, *OK, mask, summary)
    labels = labels_for(probe(FakeSpec(gpus=[gb200(fab)] * 4)))
    assert labels[names.AGENT_MNNVL_STATE] == "degraded"
    assert labels[names.AGENT_MNNVL_CLIQUE].endswith(".4026")


def test_all_false_health_mask_0xaa_is_healthy() -> None:
    fab = (
        GB200_CLUSTER.bytes,
        4026,
        *OK,
        0xAA,
        pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED,
    )
    assert labels_for(probe(FakeSpec(gpus=[gb200(fab)] * 4)))[names.AGENT_MNNVL_STATE] == "ready"


# --- recorded topologies -----------------------------------------------------------------------


def test_recorded_probe_round_trips_an_nvml_topology(tmp_path: Any) -> None:
    import json

    from deepseek_operator.agent.probe import topology_to_json

    fab = (GB200_CLUSTER.bytes, 4026, *OK, 0, HEALTHY)
    topo = probe(FakeSpec(gpus=[gb200(fab)] * 4))
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(topology_to_json(topo)))
    again = RecordedProbe.from_file(path).probe()
    assert again == topo
    assert labels_for(again) == labels_for(topo)
