"""What the cluster serves besides core Kubernetes, as far as the decision and rendering care.

The controller fills it from API discovery; the offline ``render`` command assumes the add-ons
are installed unless told otherwise. Pure data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deepseek_operator.names import DEFAULT_FILL_IMAGE, DEFAULT_ROUTER_IMAGE


class ComputeDomainMode(enum.Enum):
    """Whether a multi-node NVLink replica gets an IMEX channel from a ComputeDomain."""

    NOT_NEEDED = "not-needed"  # single-pod replicas, or no NVLink clique in the pool
    RENDERED = "rendered"  # the DRA driver's CRD is served: ComputeDomain + channel claim
    DRIVER_MISSING = "driver-missing"  # needed, but the cluster has no ComputeDomain CRD
    DISABLED = "disabled"  # needed, but turned off (chart value computeDomain.enabled=false)


@dataclass(frozen=True)
class ClusterApis:
    """Add-on APIs the cluster serves, the operator's switch for ComputeDomains and the router
    image it runs when a spec names none (``run``/``render`` ``--router-image``), and the image
    of the weights fill Jobs (``run --fill-image``)."""

    leader_worker_set: bool = True  # leaderworkerset.x-k8s.io/v1 LeaderWorkerSet
    compute_domain: bool = True  # resource.nvidia.com/v1beta1 ComputeDomain (NVIDIA DRA driver)
    compute_domain_enabled: bool = True  # the operator may create ComputeDomains
    inference_pool: bool = True  # inference.networking.k8s.io/v1 InferencePool (Gateway API IE)
    kueue: bool = True  # kueue.x-k8s.io/v1beta2 Workload (Kueue admits spec.queueName's workloads)
    router_image: str = DEFAULT_ROUTER_IMAGE  # spec.router.image's default
    fill_image: str = DEFAULT_FILL_IMAGE  # the image of spec.modelCache.fill's Jobs

    def compute_domain_mode(self, needed: bool) -> ComputeDomainMode:
        """The mode for a replica that ``needed`` an IMEX channel (multi-node, in a clique)."""
        if not needed:
            return ComputeDomainMode.NOT_NEEDED
        if not self.compute_domain_enabled:
            return ComputeDomainMode.DISABLED
        if not self.compute_domain:
            return ComputeDomainMode.DRIVER_MISSING
        return ComputeDomainMode.RENDERED
