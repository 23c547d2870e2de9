"""Bounds of the DeepSeekServing API: the numbers every size field and product stays within.

Kubernetes keeps replica counts in int32 and vLLM its sizes in C ints; the bounds below keep every
number, and every product the operator computes from them (GPUs per pod, pods per serving, EP
size), far from any overflow, and cap how many objects one DeepSeekServing can make the operator
create (a Service, a LeaderWorkerSet and its pods). The types (:mod:`.spec`) read them as field
bounds, the rules (:mod:`.rules`) as limits on products and names.
"""

from __future__ import annotations

INT32_MAX = 2**31 - 1
MAX_REPLICAS = 1024
MAX_PARALLEL_SIZE = 1024
MAX_GPUS_PER_REPLICA = 16384
MAX_PODS_PER_SERVING = 1024
# Longest metadata.name: the deepest child names are LeaderWorkerSet's worker StatefulSet
# ``<name>-<group>`` and its pods ``<name>-<group>-<index>`` (at most 10 more characters at 1,024
# pods), whose ``controller-revision-hash`` label value adds 11 more and must stay a 63-character
# label value; the IMEX channel template is ``<name>-imex-channel``.
MAX_NAME_LENGTH = 40
