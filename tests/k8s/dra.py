"""NVIDIA's ComputeDomain (IMEX channels) as the DRA driver would present it to the cluster.

The NVIDIA DRA driver for GPUs (``sigs.k8s.io/dra-driver-nvidia-gpu``, formerly
``NVIDIA/k8s-dra-driver-gpu``) is not served by the Go module proxy and needs real GPUs, so these
tests install what it publishes instead, built from its API (facts read from the driver's source at
commit 22407113; docs/node-facts.md), and let the *real* kube-scheduler and
kube-controller-manager do the allocation:

* the ``ComputeDomain`` CRD (group ``resource.nvidia.com``, version ``v1beta1``, namespaced):
  ``spec.numNodes`` (int >= 0, default 0, deprecated), ``spec.channel.resourceClaimTemplate.name``
  (required), ``spec.channel.allocationMode`` (``Single`` | ``All``, default ``Single``), the spec
  immutable; ``status.status`` (``Ready`` | ``NotReady``), ``status.nodes[]``. The schema here is
  written for these tests from those fields;
* the DeviceClasses ``compute-domain-default-channel.nvidia.com`` (channel 0) and
  ``compute-domain-daemon.nvidia.com``, selecting devices of driver ``compute-domain.nvidia.com``
  by their ``type`` and ``id`` attributes;
* one ResourceSlice per tray (pool = node name), with the devices the driver's kubelet plugin
  publishes there: ``channel-0`` and ``daemon-0``;
* :class:`ComputeDomainDriverStandIn`, the one piece of the driver's *controller* the workload
  path needs: for each ComputeDomain, the ResourceClaimTemplate named in
  ``spec.channel.resourceClaimTemplate.name`` (one ``channel`` request of the default-channel
  class, opaque ``ComputeDomainChannelConfig`` with the domain's UID). The real controller deletes
  it through a finalizer when the domain goes; the stand-in sets an owner reference to the
  ComputeDomain instead, so the garbage collector does it. Everything else (IMEX daemons, status)
  needs GPUs and is not emulated.

DRA (``resource.k8s.io/v1``) is GA and on by default in Kubernetes 1.34+, so the pinned v1.36
control plane needs no feature gate: the scheduler's DynamicResources plugin allocates the claims
and the controller-manager's resource-claim controller creates them from the templates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from tests.k8s.cluster import ControlPlane, wait_for

CD_GROUP = "resource.nvidia.com"
CD_VERSION = "v1beta1"
CD_PLURAL = "computedomains"
CD_CRD = f"{CD_PLURAL}.{CD_GROUP}"
DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
#: Label the driver puts on the objects it generates for a domain (value: the domain's UID).
CD_LABEL = "resource.nvidia.com/computeDomain"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"


def computedomain_crd() -> dict[str, Any]:
    """The ComputeDomain CRD with NVIDIA's group, kind, version and fields (see module doc)."""
    node = {
        "type": "object",
        "required": ["name", "ipAddress", "cliqueID"],
        "properties": {
            "name": {"type": "string"},
            "ipAddress": {"type": "string"},
            "cliqueID": {"type": "string"},
            "index": {"type": "integer"},
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
        },
    }
    spec = {
        "type": "object",
        "required": ["channel"],
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
        ],
        "properties": {
            "numNodes": {"type": "integer", "minimum": 0, "default": 0},
            "channel": {
                "type": "object",
                "required": ["resourceClaimTemplate"],
                "properties": {
                    "resourceClaimTemplate": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}},
                    },
                    "allocationMode": {
                        "type": "string",
                        "enum": ["All", "Single"],
                        "default": "Single",
                    },
                },
            },
        },
    }
    status = {
        "type": "object",
        "required": ["status"],
        "properties": {
            "status": {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"},
            "nodes": {
                "type": "array",
                "items": node,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CD_CRD},
        "spec": {
            "group": CD_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "ComputeDomain",
                "listKind": "ComputeDomainList",
                "plural": CD_PLURAL,
                "singular": "computedomain",
            },
            "versions": [
                {
                    "name": CD_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def device_classes() -> list[dict[str, Any]]:
    """The driver's two ComputeDomain DeviceClasses (CEL selectors as its chart has them)."""

    def cls(name: str, expression: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    attrs = f"device.attributes['{DRIVER}']"
    return [
        cls(
            CHANNEL_CLASS,
            f"device.driver == '{DRIVER}' && {attrs}.type == 'channel' && {attrs}.id == 0",
        ),
        cls(DAEMON_CLASS, f"device.driver == '{DRIVER}' && {attrs}.type == 'daemon'"),
    ]


def resource_slice(node: dict[str, Any]) -> dict[str, Any]:
    """The ResourceSlice the kubelet plugin publishes on one tray: ``channel-0``, ``daemon-0``.

    *node* is the Node as the API returned it; like the plugin's slice controller, the slice is
    owned by the Node, so it goes away with it.
    """
    name = node["metadata"]["name"]

    def device(kind: str) -> dict[str, Any]:
        return {
            "name": f"{kind}-0",
            "attributes": {"type": {"string": kind}, "id": {"int": 0}},
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{name}-{DRIVER}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [device("channel"), device("daemon")],
        },
    }


def channel_claim_template(domain: dict[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate the driver's controller generates for one ComputeDomain."""
    meta = domain["metadata"]
    channel = domain["spec"]["channel"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": channel["resourceClaimTemplate"]["name"],
            "namespace": meta["namespace"],
            "labels": {CD_LABEL: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
                    "kind": "ComputeDomain",
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": DRIVER,
                                "parameters": {
                                    "apiVersion": f"{CD_GROUP}/{CD_VERSION}",
                                    "kind": CHANNEL_CONFIG_KIND,
                                    "domainID": meta["uid"],
                                    "allocationMode": channel.get("allocationMode", "Single"),
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


class ComputeDomainDriverStandIn:
    """Creates each ComputeDomain's channel ResourceClaimTemplate, as the driver's controller does.

    A background thread lists ComputeDomains every *interval* seconds (a list, not a watch: a
    handful of objects, and nothing to resume after the CRD is removed) and creates the missing
    templates. :meth:`stop` ends it.
    """

    def __init__(self, cp: ControlPlane, interval: float = 0.5) -> None:
        self.cp = cp
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="computedomain-standin", daemon=True)

    def start(self) -> ComputeDomainDriverStandIn:
        """Start the background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background thread and wait for it."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        api = client.CustomObjectsApi(self.cp.api_client())
        while not self._stop.wait(self.interval):
            try:
                domains = api.list_cluster_custom_object(CD_GROUP, CD_VERSION, CD_PLURAL)["items"]
            except ApiException as exc:
                if exc.status != 404:  # 404: the CRD is not installed (right now)
                    self.errors.append(f"list ComputeDomains: {exc.status} {exc.reason}")
                continue
            except HTTPError:  # kube-apiserver restarting (the fault tests stop it): next round
                continue
            for domain in domains:
                if domain["metadata"].get("deletionTimestamp"):
                    continue
                body = channel_claim_template(domain)
                try:
                    api.create_namespaced_custom_object(
                        "resource.k8s.io",
                        "v1",
                        domain["metadata"]["namespace"],
                        "resourceclaimtemplates",
                        body,
                    )
                except HTTPError:  # kube-apiserver restarting: the next round creates it
                    break
                except ApiException as exc:
                    # 409: exists; 404 or 403 "being terminated": the namespace is going away.
                    terminating = exc.status == 403 and "being terminated" in str(exc.body)
                    if exc.status not in (404, 409) and not terminating:
                        self.errors.append(
                            f"create {body['metadata']['name']}: {exc.status} {exc.body}"
                        )


class ComputeDomainDriver:
    """What the NVIDIA DRA driver publishes, installed into a cluster (see module doc)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.stand_in: ComputeDomainDriverStandIn | None = None
        self.nodes: set[str] = set()

    def install(self) -> ComputeDomainDriver:
        """Install the CRD and DeviceClasses and start the template stand-in."""
        self.cp.apply(computedomain_crd())
        self.cp.wait_crd_established(CD_CRD)
        wait_for(
            lambda: self.cp.kubectl("get", CD_PLURAL, "-A", check=False).returncode == 0,
            timeout=30,
            what="computedomains discovery",
        )
        self.cp.apply(device_classes())
        if self.stand_in is None:
            self.stand_in = ComputeDomainDriverStandIn(self.cp).start()
        return self

    def publish(self, nodes: Iterable[dict[str, Any]]) -> None:
        """Publish the ResourceSlices of *nodes* (Node dicts with their UID, as ``node_factory``
        returns them): the kubelet plugin's job on each tray."""
        nodes = list(nodes)
        self.cp.apply([resource_slice(n) for n in nodes])
        self.nodes.update(n["metadata"]["name"] for n in nodes)

    def unpublish(self, node_names: Iterable[str]) -> None:
        """Remove the ResourceSlices of *node_names* (deleting a Node removes its slice too)."""
        for name in node_names:
            self.cp.kubectl(
                "delete", "resourceslice", f"{name}-{DRIVER}", "--ignore-not-found", check=False
            )
            self.nodes.discard(name)

    def uninstall(self) -> None:
        """Remove slices, classes and the CRD (with every ComputeDomain): a cluster without it."""
        self.unpublish(list(self.nodes))
        for cls in device_classes():
            self.cp.kubectl(
                "delete", "deviceclass", cls["metadata"]["name"], "--ignore-not-found", check=False
            )
        self.cp.kubectl("delete", "crd", CD_CRD, "--ignore-not-found", timeout=120)

    def stop(self) -> None:
        """Stop the stand-in thread."""
        if self.stand_in is not None:
            self.stand_in.stop()
            self.stand_in = None


@pytest.fixture(scope="session")
def compute_domain_driver(full_cluster: ControlPlane) -> Iterator[ComputeDomainDriver]:
    """The ComputeDomain CRD, DeviceClasses and template stand-in, for the session.

    Tests publish the ResourceSlices of their own trays with :meth:`ComputeDomainDriver.publish`;
    the slices are owned by the Nodes, so deleting a tray removes its slice.
    """
    driver = ComputeDomainDriver(full_cluster).install()
    full_cluster.extras["compute_domain_driver"] = driver
    try:
        yield driver
    finally:
        driver.stop()
