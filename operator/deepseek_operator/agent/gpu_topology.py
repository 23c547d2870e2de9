"""The GPU facts of one node, as the node agent measures them: :class:`GpuTopology`.

Two producers fill this model: :mod:`.nvml` (the agent, on a real node) and :mod:`.topo_smi` (a
captured ``nvidia-smi topo -m``, for diagnosis and tests). One consumer turns it into Node labels
and the annotation: :mod:`.agent_labels`.

Invariants: the NVLink matrix is square with one row per GPU, symmetric, ``True`` on the
diagonal, and a cell is ``None`` only when the source did not show that pair (an excerpt of a
capture; NVML never leaves a cell unknown). This module is pure: no kopf, kubernetes, pynvml,
clock or environment reads (docs/design.md).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

# NVML fabric constants (nvidia-ml-py 13.615.71), copied here so the pure model needs no pynvml.
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_NOT_STARTED = 1
FABRIC_STATE_IN_PROGRESS = 2
FABRIC_STATE_COMPLETED = 3
NVML_SUCCESS = 0
FABRIC_HEALTH_SUMMARY_UNHEALTHY = 2
FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY = 3
# (shift, width mask) of the healthMask fields whose value 1 (= TRUE) means trouble.
_FABRIC_HEALTH_TROUBLE_FIELDS = (
    (0, 0x3),  # DEGRADED_BW
    (2, 0x3),  # ROUTE_RECOVERY (in progress)
    (4, 0x3),  # ROUTE_UNHEALTHY
    (6, 0x3),  # ACCESS_TIMEOUT_RECOVERY
)
_HEALTH_MASK_TRUE = 1
# INCORRECT_CONFIGURATION (shift 8, width 4): 0 = not supported, 1 = none, 2.. = a named problem.
_HEALTH_INCORRECT_CONFIG_SHIFT = 8
_HEALTH_INCORRECT_CONFIG_MASK = 0xF


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's multi-node NVLink fabric info (``nvmlDeviceGetGpuFabricInfoV``, docs/node-facts.md).

    ``cluster_uuid`` is the 16 raw bytes of ``clusterUuid``; ``health_mask`` and
    ``health_summary`` are ``None`` where the driver's struct version lacks them.
    """

    cluster_uuid: bytes
    clique_id: int
    state: int
    status: int
    health_mask: int | None = None
    health_summary: int | None = None

    @property
    def accepted(self) -> bool:
        """The fabric acceptance rule: state COMPLETED, status SUCCESS and a non-zero cluster UUID."""
        return (
            self.state == FABRIC_STATE_COMPLETED
            and self.status == NVML_SUCCESS
            and any(self.cluster_uuid)
        )

    @property
    def cluster(self) -> str:
        """The cluster UUID in canonical form, as GFD prints it (``uuid.FromBytes(...).String()``)."""
        return str(uuid.UUID(bytes=bytes(self.cluster_uuid)))

    @property
    def domain_key(self) -> str:
        """``<cluster uuid>.<clique id>``: the same value GFD writes to ``nvidia.com/gpu.clique``."""
        return f"{self.cluster}.{self.clique_id}"

    @property
    def unhealthy(self) -> bool:
        """True when the health summary or any health-mask field reports a problem."""
        if self.health_summary in (
            FABRIC_HEALTH_SUMMARY_UNHEALTHY,
            FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY,
        ):
            return True
        if self.health_mask is None:
            return False
        for shift, mask in _FABRIC_HEALTH_TROUBLE_FIELDS:
            if (self.health_mask >> shift) & mask == _HEALTH_MASK_TRUE:
                return True
        config = (
            self.health_mask >> _HEALTH_INCORRECT_CONFIG_SHIFT
        ) & _HEALTH_INCORRECT_CONFIG_MASK
        # 0 means "not supported" and 1 means "no incorrect configuration"; anything else names one.
        return config > 1


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it. Fields are ``None`` where the source does not say.

    A ``topo -m`` capture, for example, knows neither the UUID nor the link count.
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    cc_major: int | None = None
    cc_minor: int | None = None
    memory_mib: int | None = None
    numa_node: int | None = None
    nvlink_active_links: int | None = None
    nvlink_switch_attached: bool | None = None
    mig_enabled: bool | None = None
    fabric: FabricInfo | None = None

    @property
    def cc(self) -> str | None:
        """Compute capability as ``"major.minor"``, or ``None`` when unknown."""
        if self.cc_major is None or self.cc_minor is None:
            return None
        return f"{self.cc_major}.{self.cc_minor}"


Matrix = tuple[tuple[bool | None, ...], ...]


@dataclass(frozen=True)
class GpuTopology:
    """All GPUs of one node, their pairwise NVLink P2P matrix, and node-wide driver facts.

    ``nvlink[i][j]`` is True when NVLink P2P between GPU ``i`` and ``j`` is OK (NVML
    ``NVML_P2P_CAPS_INDEX_NVLINK``, or ``NV#`` in ``topo -m``), False when it is not, and None
    when the source did not show that pair. An empty ``gpus`` tuple means no GPU was found;
    ``unavailable_reason`` then says why (for example "NVML Shared Library Not Found").
    ``fabric_probed`` is True when the source asked for fabric info, so a GPU whose ``fabric``
    is None has none (NVML said "not supported"), rather than "nobody asked" (a capture).
    """

    gpus: tuple[GpuInfo, ...] = ()
    nvlink: Matrix = ()
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    unavailable_reason: str | None = None
    fabric_probed: bool = False
    source: str = "nvml"
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        n = len(self.gpus)
        if len(self.nvlink) != n or any(len(row) != n for row in self.nvlink):
            raise ValueError(f"the NVLink matrix must be {n}x{n}, one row and column per GPU")
        for i, row in enumerate(self.nvlink):
            if row[i] is not True:
                raise ValueError(f"the NVLink matrix diagonal must be True (GPU{i})")
            for j, cell in enumerate(row):
                if cell != self.nvlink[j][i]:
                    raise ValueError(f"the NVLink matrix must be symmetric (GPU{i}, GPU{j})")
        for i, gpu in enumerate(self.gpus):
            if gpu.index != i:
                raise ValueError(f"GPU {i} has index {gpu.index}; GPUs must be listed in order")

    @property
    def count(self) -> int:
        """Number of GPUs visible to the probe."""
        return len(self.gpus)

    @property
    def cuda_version(self) -> str | None:
        """The driver's CUDA ceiling as ``"major.minor"`` (``12080`` → ``"12.8"``), like GFD."""
        v = self.cuda_driver_version
        if v is None:
            return None
        return f"{v // 1000}.{(v % 1000) // 10}"

    @property
    def matrix_complete(self) -> bool:
        """True when every pair of the NVLink matrix is known."""
        return all(cell is not None for row in self.nvlink for cell in row)

    def fully_connected(self) -> bool | None:
        """vLLM's ``is_fully_connected`` over all GPUs: every pair NVLink-OK.

        False as soon as one known pair is not; None when no known pair fails but some pair is
        unknown. One GPU (or none) is trivially fully connected, exactly as in vLLM.
        """
        return is_fully_connected(self.nvlink, range(self.count))

    def nvlink_domain(self) -> tuple[int, ...]:
        """The largest set of GPUs known to be pairwise NVLink-OK (a maximum clique).

        Unknown pairs count as not connected, so with an incomplete matrix this is a lower
        bound. Ties go to the lexicographically smallest set, so the answer is deterministic.
        """
        return max_nvlink_clique(self.nvlink)


def is_fully_connected(matrix: Matrix, indices: Sequence[int] | range) -> bool | None:
    """Whether every pair among ``indices`` is NVLink-OK: True, False, or None if unknown."""
    unknown = False
    for a, b in itertools.combinations(indices, 2):
        cell = matrix[a][b]
        if cell is False:
            return False
        if cell is None:
            unknown = True
    return None if unknown else True


def max_nvlink_clique(matrix: Matrix) -> tuple[int, ...]:
    """Maximum clique of the graph whose edges are the True cells (Bron–Kerbosch with pivot).

    Nodes hold at most 8–16 GPUs per NVLink island visible to one host (72 on an NVL72 rack
    at the very most, and those are almost cliques), so the exponential worst case never bites.
    """
    n = len(matrix)
    if n == 0:
        return ()
    neighbours = [
        frozenset(j for j in range(n) if j != i and matrix[i][j] is True) for i in range(n)
    ]
    best: list[tuple[int, ...]] = [()]

    def expand(r: frozenset[int], p: frozenset[int], x: frozenset[int]) -> None:
        if not p and not x:
            candidate = tuple(sorted(r))
            if len(candidate) > len(best[0]) or (
                len(candidate) == len(best[0]) and candidate < best[0]
            ):
                best[0] = candidate
            return
        if len(r) + len(p) < len(best[0]):
            return  # cannot beat the best clique found so far
        pivot = max(p | x, key=lambda u: len(neighbours[u] & p))
        for v in sorted(p - neighbours[pivot]):
            expand(r | {v}, p & neighbours[v], x & neighbours[v])
            p = p - {v}
            x = x | {v}

    expand(frozenset(), frozenset(range(n)), frozenset())
    return best[0]
