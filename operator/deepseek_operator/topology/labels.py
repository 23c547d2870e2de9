"""Node label and annotation keys: GPU Feature Discovery's and the node agent's.

The agent writes only keys under :data:`AGENT_PREFIX`; the operator reads both families and lets
the agent's values win (see design.md §4 and gpu-topology.md §5).
"""

from __future__ import annotations

# GPU Feature Discovery (NVIDIA k8s-device-plugin) keys.
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_CLIQUE = "nvidia.com/gpu.clique"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_PRESENT = "nvidia.com/gpu.present"

# Our node agent's keys (gpu-topology.md §5.2).
AGENT_PREFIX = "gpu.deepseek-operator.io/"
AGENT_PRESENT = AGENT_PREFIX + "present"
AGENT_PRODUCT = AGENT_PREFIX + "product"
AGENT_COUNT = AGENT_PREFIX + "count"
AGENT_CC = AGENT_PREFIX + "cc"
AGENT_SM_FAMILY = AGENT_PREFIX + "sm-family"
AGENT_MEMORY_MIB = AGENT_PREFIX + "memory-mib"
AGENT_DRIVER = AGENT_PREFIX + "driver"
AGENT_CUDA = AGENT_PREFIX + "cuda"
AGENT_NVLINK_FULLY_CONNECTED = AGENT_PREFIX + "nvlink.fully-connected"
AGENT_NVLINK_DOMAIN_SIZE = AGENT_PREFIX + "nvlink.domain-size"
AGENT_NVLINK_SWITCH = AGENT_PREFIX + "nvlink.switch"
AGENT_NVLINK_LINKS = AGENT_PREFIX + "nvlink.links"
AGENT_MNNVL_CLIQUE = AGENT_PREFIX + "mnnvl.clique"
AGENT_MNNVL_DOMAIN = AGENT_PREFIX + "mnnvl.domain"
AGENT_MNNVL_STATE = AGENT_PREFIX + "mnnvl.state"
AGENT_MIG = AGENT_PREFIX + "mig"

# One JSON annotation with the pairwise P2P-NVLink matrix (gpu-topology.md §5.3).
AGENT_TOPOLOGY_ANNOTATION = AGENT_PREFIX + "topology"

TRISTATE_VALUES = ("true", "false", "unknown")
