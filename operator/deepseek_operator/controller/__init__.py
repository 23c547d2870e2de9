"""The operator (``deepseek-operator run``): kopf, the watches, and the reconciler around ``plan()``.

Everything here is I/O around the pure pipeline: it watches DeepSeekServings, the children it
writes (Deployments, Services, LeaderWorkerSets, ComputeDomains), their pods, Kueue's Workloads and
AdmissionChecks (``spec.queueName``: the Admitted condition, a P/D pair's admission check) and the
Nodes, feeds the pure indexes the decision reads (:mod:`deepseek_operator.nodes.tracker`,
:mod:`deepseek_operator.actions.owned`), queues and folds reconciles, runs each through
:func:`deepseek_operator.plan.plan` and then writes what the plan says (server-side apply,
deletes, status, Events), reporting refusals in the words of the controller that refused.
No decision is taken here: what to write comes from ``plan()`` (and an admission check's state
from :func:`deepseek_operator.engine.kueue.pair_check_updates`), so the offline ``render``
command shows the same thing. Health, metrics and the HA peering gate live here too.
"""
