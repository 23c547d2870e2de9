"""What the operator writes for a decision: the children's manifests and the status.

:mod:`.workload` builds the pod template and the children (a Deployment and Service, or
LeaderWorkerSet multi-pod replicas with their ComputeDomain) from :mod:`.argv` (the ``vllm
serve`` argument list) and :mod:`.affinity` (node affinity admitting exactly the decision's
nodes). :mod:`.status` builds the status and conditions from the decision and the observed
readiness. The weights fill: :mod:`.fill_job` (the Job), :mod:`.fill_progress` (reading it
back), :mod:`.weights` (``WeightsReady``). Pure; :func:`deepseek_operator.plan.plan` calls it for the operator and for the
offline ``render`` command alike.
"""
