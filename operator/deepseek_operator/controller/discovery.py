"""Which add-on APIs (LeaderWorkerSet, NVIDIA's ComputeDomain, Gateway API Inference Extension's
InferencePool, Kueue's Workload) the cluster serves."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.kube.client import KubeClient
from deepseek_operator.names import (
    COMPUTE_DOMAIN_API_VERSION,
    COMPUTE_DOMAIN_KIND,
    DEFAULT_FILL_IMAGE,
    DEFAULT_ROUTER_IMAGE,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_KIND,
    KUEUE_API_VERSION,
    KUEUE_WORKLOAD_KIND,
    LWS_API_VERSION,
    LWS_KIND,
)

API_RECHECK_S = 30.0
LWS_GROUP, LWS_VERSION = LWS_API_VERSION.split("/")
CD_GROUP, CD_VERSION = COMPUTE_DOMAIN_API_VERSION.split("/")
LWS_CRD = f"leaderworkersets.{LWS_GROUP}"
CD_CRD = f"computedomains.{CD_GROUP}"
IP_GROUP = INFERENCE_POOL_API_VERSION.split("/")[0]
IP_CRD = f"inferencepools.{IP_GROUP}"
KUEUE_CRD = f"workloads.{KUEUE_API_VERSION.split('/')[0]}"
ADDON_CRDS = (LWS_CRD, CD_CRD, IP_CRD, KUEUE_CRD)


class ClusterApiProbe:
    """What add-on APIs the cluster serves.

    The add-on CRDs' own watch events are authoritative (a CRD with ``Established=True`` is
    served; a deleted one is not): :meth:`crd_seen` records them. For a CRD no event has told
    about yet, discovery answers, re-checked at most every :data:`API_RECHECK_S` seconds.
    """

    def __init__(
        self,
        kube: KubeClient,
        compute_domain_enabled: bool,
        router_image: str = DEFAULT_ROUTER_IMAGE,
        fill_image: str = DEFAULT_FILL_IMAGE,
    ) -> None:
        self.kube = kube
        self.compute_domain_enabled = compute_domain_enabled
        self.router_image = router_image
        self.fill_image = fill_image
        self._checked_at = -API_RECHECK_S
        self._discovered: dict[str, bool] = {}
        self._established: dict[str, bool] = {}  # CRD name -> Established, from its events

    def crd_seen(self, name: str, body: Mapping[str, Any] | None) -> None:
        """An add-on CRD's event (``body`` None: deleted)."""
        conditions = ((body or {}).get("status") or {}).get("conditions") or []
        self._established[name] = body is not None and any(
            c.get("type") == "Established" and c.get("status") == "True" for c in conditions
        )
        self.kube.forget_resources()  # its REST path may have come or gone

    def current(self) -> ClusterApis:
        """What is served now (runs in a worker thread: discovery may block)."""
        now = time.monotonic()
        if now - self._checked_at >= API_RECHECK_S:
            self.kube.forget_resources()
            self._discovered = {
                LWS_CRD: self.kube.served(LWS_API_VERSION, LWS_KIND),
                CD_CRD: self.kube.served(COMPUTE_DOMAIN_API_VERSION, COMPUTE_DOMAIN_KIND),
                IP_CRD: self.kube.served(INFERENCE_POOL_API_VERSION, INFERENCE_POOL_KIND),
                KUEUE_CRD: self.kube.served(KUEUE_API_VERSION, KUEUE_WORKLOAD_KIND),
            }
            self._checked_at = now
        return self._answer()

    def fresh(self) -> ClusterApis | None:
        """What is served, when discovery need not be asked again (None: call :meth:`current`).

        Never blocks, so a reconcile on the event loop needs no thread for it.
        """
        if time.monotonic() - self._checked_at >= API_RECHECK_S:
            return None
        return self._answer()

    def _answer(self) -> ClusterApis:
        def served(crd: str) -> bool:
            known = self._established.get(crd)
            return known if known is not None else self._discovered.get(crd, False)

        return ClusterApis(
            leader_worker_set=served(LWS_CRD),
            compute_domain=served(CD_CRD),
            compute_domain_enabled=self.compute_domain_enabled,
            inference_pool=served(IP_CRD),
            kueue=served(KUEUE_CRD),
            router_image=self.router_image,
            fill_image=self.fill_image,
        )
