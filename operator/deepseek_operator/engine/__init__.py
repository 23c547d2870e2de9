"""The backend decision: ``resolve(spec, inventory, previous)`` → :class:`~.resolution.Resolution`.

:mod:`.decision` runs the ordered checks of the requested (or ``auto``) MoE backend against the
spec, the vLLM release and the eligible nodes, and keeps the previous decision when only node
churn changed (:mod:`.stability`). The checks come in independent families: on the spec and the
checkpoint (:mod:`.spec_checks`), on the release (:mod:`.release`) and on the candidate nodes
(:mod:`.node_checks`), each reporting a :class:`~.checks.CheckResult`. Around them: the layout
arithmetic (:mod:`.layout`), the model facts (:mod:`.model_facts`), the capacity model
(:mod:`.capacity`), which nodes a decision admits (:mod:`.placement`), how many replicas to ask
for (:mod:`.queueing`) and the cluster APIs beyond core Kubernetes (:mod:`.cluster_apis`).

Pure: no I/O, no clock, no environment; rendering and the controller sit above it.
"""
