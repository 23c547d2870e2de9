"""Every watch the operator keeps, in one table: kind, API path, reducer, selector, and which
reconcile an event asks for.

Node facts and our children come from :class:`~.list_watch.ListWatch` threads (one LIST at
start, then a WATCH; not kopf indexes, whose initial listing costs O(objects²)); every reconcile
waits until the first listings are in, so a reconcile makes no LIST call. DeepSeekServings and
the add-on CRDs come from kopf's own watches (the wiring registers a handler for each row
``via="kopf"``).

What an event asks for (:class:`Asks`):

* ``MATCHING``: a Node change that alters GPU facts, labels, taints, readiness or allocatable
  GPUs re-evaluates only the DeepSeekServings whose ``nodeSelector`` matches it (debounced).
* ``SLICES``: a ``gpu.nvidia.com`` ResourceSlice added, changed or deleted re-evaluates the
  DeepSeekServings whose ``nodeSelector`` matches the node it names (debounced), as a Node
  change does. Other drivers' slices are dropped in the watch thread.
* ``CLAIMS``: a ResourceClaim whose allocation holds ``gpu.nvidia.com`` devices added, changed or
  deleted re-evaluates the DeepSeekServings whose ``nodeSelector`` matches the nodes of those
  devices (debounced): held devices are not free. Claims holding no GPU are dropped in the watch
  thread; of the others only namespace, name, owning pod and devices are kept.
* ``OWNER``: a child event (readiness, hand edit, deletion) reconciles its owner; the echo of
  our own apply (the very version it returned) does not. A StatefulSet our LeaderWorkerSet made
  reconciles the DeepSeekServing of that name (its refused pods surface as ``PodsRefused``).
* ``OWNER_STATUS``: a pod of our LeaderWorkerSet asks for a status-only reconcile of its owner
  (``status.groups``), which never writes a child.
* ``ADMISSION``: a Kueue Workload of one of our workloads (``spec.queueName``) asks for a
  status-only reconcile of its serving (the ``Admitted`` condition) and, where the operator's
  admission check guards it, the check states of the pair (:mod:`.pair_admission`).
* ``CHECKS``: Kueue AdmissionChecks whose controller is the operator: remembered, marked Active.
* ``SELF``: a DeepSeekServing event reconciles it when it is new, has a new generation, or is
  first seen at start-up (never for a status echo or a metadata-only change).
* ``ALL``: an add-on CRD installed, established or removed re-decides every DeepSeekServing.
* ``NOTHING``: kopf peering objects only tell whether this instance may act.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deepseek_operator.actions.children import kept, pod_record, reduced_child, reduced_statefulset
from deepseek_operator.controller.discovery import CD_CRD, IP_CRD, KUEUE_CRD, LWS_CRD
from deepseek_operator.engine.kueue import admission_check_record
from deepseek_operator.engine.kueue_workload import workload_record
from deepseek_operator.kube.client import group_version_prefix
from deepseek_operator.names import (
    API_VERSION,
    COMPUTE_DOMAIN_API_VERSION,
    COMPUTE_DOMAIN_KIND,
    DRA_API_VERSION,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    KUEUE_API_VERSION,
    LABEL_MANAGED_BY,
    LWS_API_VERSION,
    LWS_KIND,
    LWS_NAME_LABEL,
    MANAGED_BY,
    PLURAL,
    RESOURCE_CLAIM_TEMPLATE_KIND,
)
from deepseek_operator.nodes.claims import claim_of
from deepseek_operator.nodes.dra import slice_of
from deepseek_operator.nodes.facts import facts_of

if TYPE_CHECKING:  # the state holds the watches; only its type is needed here
    from deepseek_operator.controller.state import OperatorState

CHILD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
# Our LeaderWorkerSet pods only: managed by us and carrying LWS's name label.
POD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LWS_NAME_LABEL}"
KUEUE_CHECK_CRD = "admissionchecks.kueue.x-k8s.io"
# Debounces: a burst of events costs one reconcile per object.
NODE_DEBOUNCE_S = 1.0
POD_DEBOUNCE_S = 1.0


class Asks(enum.Enum):
    """Which reconcile an event of a watch asks for."""

    MATCHING = "the DeepSeekServings whose nodeSelector matches, after 1 s"
    SLICES = "the DeepSeekServings whose nodeSelector matches the slice's node, after 1 s"
    CLAIMS = "the DeepSeekServings whose nodeSelector matches the held devices' nodes, after 1 s"
    OWNER = "its owner (by label), after 0.2 s"
    OWNER_STATUS = "a status-only reconcile of its owner, after 1 s"
    ADMISSION = "a status-only reconcile of the serving it admits, after 1 s"
    CHECKS = "no reconcile: the operator's AdmissionChecks are remembered and marked Active"
    SELF = "the object itself, at once (new, new generation, start-up)"
    ALL = "every DeepSeekServing, after 1 s"
    NOTHING = "no reconcile"


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def api_seconds(timestamp: Any) -> float:
    """An API timestamp (RFC 3339, UTC) in seconds since the epoch; 0 when absent or unreadable
    (the Workload reducer's times: the pure core imports no datetime)."""
    try:
        return dt.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Watch:
    """One watched kind."""

    kind: str
    api_version: str
    plural: str
    reduce: Callable[[dict[str, Any]], Any]  # what is kept of each object
    asks: Asks
    selector: str = ""  # a label selector
    namespaced: bool = True  # listed per watched namespace (else cluster-wide only)
    crd: str | None = None  # the add-on CRD that serves it (None: built in)
    via: str = "list-watch"  # or "kopf": kopf's own watch (the wiring's handlers)
    cluster_plural: str | None = None  # the cluster-wide collection, when named otherwise
    child: bool = False  # a kind of child the operator writes

    def path(self, namespace: str | None) -> str:
        """The collection in ``namespace`` (None: the whole cluster)."""
        if namespace and self.namespaced:
            return f"{group_version_prefix(self.api_version)}/namespaces/{namespace}/{self.plural}"
        return f"{group_version_prefix(self.api_version)}/{self.cluster_plural or self.plural}"

    def name(self, namespace: str | None) -> str:
        """The watch's (and its thread's) name."""
        return f"{self.kind}-watch" + (f"-{namespace}" if namespace and self.namespaced else "")


def _child(kind: str, api_version: str, plural: str, crd: str | None = None) -> Watch:
    return Watch(
        kind, api_version, plural, reduced_child, Asks.OWNER, CHILD_SELECTOR, crd=crd, child=True
    )


WATCHES: tuple[Watch, ...] = (
    Watch(
        "DeepSeekServing", API_VERSION, PLURAL, kept, Asks.SELF, via="kopf"
    ),  # latest bodies kept in the records
    Watch(
        "CustomResourceDefinition",
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        _identity,
        Asks.ALL,
        namespaced=False,
        via="kopf",
    ),
    Watch("Node", "v1", "nodes", facts_of, Asks.MATCHING, namespaced=False),
    # The GPUs of nodes the DRA driver serves; a cluster without resource.k8s.io/v1 answers
    # 404, which the list-watch takes as "not served" (no slices, label facts only).
    Watch(
        "ResourceSlice", DRA_API_VERSION, "resourceslices", slice_of, Asks.SLICES, namespaced=False
    ),
    # Devices other claims hold are not free (nodes/claims.py); cluster-wide, as a claim in any
    # namespace holds a device. Not served: no claims, every device free.
    Watch(
        "ResourceClaim", DRA_API_VERSION, "resourceclaims", claim_of, Asks.CLAIMS, namespaced=False
    ),
    _child("Deployment", "apps/v1", "deployments"),
    _child("Service", "v1", "services"),
    _child(LWS_KIND, LWS_API_VERSION, "leaderworkersets", LWS_CRD),
    _child(COMPUTE_DOMAIN_KIND, COMPUTE_DOMAIN_API_VERSION, "computedomains", CD_CRD),
    _child(RESOURCE_CLAIM_TEMPLATE_KIND, DRA_API_VERSION, "resourceclaimtemplates"),
    _child(INFERENCE_POOL_KIND, INFERENCE_POOL_API_VERSION, "inferencepools", IP_CRD),
    # The vLLM router's identity and its pods-read Role, and the engines' NetworkPolicies.
    _child("ServiceAccount", "v1", "serviceaccounts"),
    _child("Role", "rbac.authorization.k8s.io/v1", "roles"),
    _child("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings"),
    _child("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies"),
    # StatefulSets LeaderWorkerSet makes (leader and per-group workers) carry its name, not our
    # labels: watched, never written.
    Watch(
        "StatefulSet", "apps/v1", "statefulsets", reduced_statefulset, Asks.OWNER, LWS_NAME_LABEL
    ),
    Watch("Pod", "v1", "pods", pod_record, Asks.OWNER_STATUS, POD_SELECTOR),
    # With spec.queueName: Kueue's Workloads (one per replica) say whether each is admitted.
    # They carry none of our labels: the reducer keeps only those our workloads own.
    Watch(
        "Workload",
        KUEUE_API_VERSION,
        "workloads",
        functools.partial(workload_record, seconds=api_seconds),
        Asks.ADMISSION,
        crd=KUEUE_CRD,
    ),
    Watch(
        "AdmissionCheck",
        KUEUE_API_VERSION,
        "admissionchecks",
        admission_check_record,
        Asks.CHECKS,
        namespaced=False,
        crd=KUEUE_CHECK_CRD,
    ),
    # Only with --peering: kopf's peering objects say whether this instance may act.
    Watch(
        "KopfPeering",
        "kopf.dev/v1",
        "kopfpeerings",
        _identity,
        Asks.NOTHING,
        cluster_plural="clusterkopfpeerings",
    ),
)
CHILD_KINDS = tuple(w for w in WATCHES if w.child)
LIST_WATCHES = tuple(w for w in WATCHES if w.via == "list-watch")


def callbacks(
    state: OperatorState, spec: Watch, namespace: str | None, name: str
) -> tuple[Callable[[dict[str, Any]], None], Callable[[str, str, Any], None]]:
    """(on_listed, on_event) of one watch of ``state``: where its objects go, what they ask for."""
    if spec.asks is Asks.MATCHING:  # Nodes
        return state.nodes_seen, lambda t, key, facts: state.node_seen(
            key, None if t == "DELETED" else facts
        )
    if spec.asks is Asks.SLICES:  # gpu.nvidia.com ResourceSlices: the GPUs of DRA nodes
        return functools.partial(state.slices_seen, name), state.slice_seen
    if spec.asks is Asks.CLAIMS:  # ResourceClaims: which DRA devices are no longer free
        return functools.partial(state.claims_seen, name), state.claim_seen
    if spec.asks is Asks.CHECKS:  # Kueue AdmissionChecks the operator serves
        return state.pair.checks_listed, state.pair.check_seen
    if spec.asks in (Asks.OWNER, Asks.OWNER_STATUS, Asks.ADMISSION):  # the one owner index
        return (
            functools.partial(state.owned_listed, spec.kind, namespace, name),
            functools.partial(state.owned_seen, spec.kind),
        )
    return state.peering.listed_all, state.peering.seen  # kopf's peering object
