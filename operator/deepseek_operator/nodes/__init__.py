"""The operator's side of the node-label contract.

:mod:`.precedence` is the one table of which label states which GPU fact and which label wins;
:mod:`.facts` reads a Node into :class:`~.facts.NodeFacts` with it, and the node-affinity
renderer builds its terms from the same table. :mod:`.taints` is Kubernetes' taint matching.
:mod:`.tracker` is the operator's node index: every Node's facts, merged with the GPUs of its
ResourceSlices (:mod:`.dra`) less those ResourceClaims hold (:mod:`.claims`).
The label keys themselves live in :mod:`deepseek_operator.names`; the agent (the producer of the
``gpu.deepseek-operator.io/`` labels) lives in :mod:`deepseek_operator.agent`.
"""
