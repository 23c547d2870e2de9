"""The kind tier's network for real: per-node pod subnets, cluster DNS, routes, NetworkPolicy.

Three probe pods (the vLLM stand-in image's Python, no vLLM) in a namespace of their own: ``web``
(an HTTP server) on one GB200 tray, ``client`` on the other tray, ``stranger`` on the H200 node,
and a Service ``web``. Checked: every node has its own podCIDR and the pods' addresses come from
their node's; the client resolves the Service by its short and its full name through CoreDNS and
reaches the server across nodes, through the Service and directly, with its own pod address as
the source (nothing masquerades pod-to-pod traffic, which policy enforcement relies on). Then a
default-deny ingress policy must block both clients, and an allow rule for ``role=client`` on the
server's port must admit the client only (kube-network-policies enforcing on the server's node).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.k8s.cluster import wait_for
from tests.kind.conftest import GB200_TRAYS, H200_NODE, KindCluster

pytestmark = pytest.mark.kind

NS = "net-probe"
PORT = 8080
#: GET ARGV[1] with a timeout of ARGV[2] s; prints the status, or exits 1 naming the error.
FETCH = """
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).status)
except Exception as exc:
    sys.exit(f"{type(exc).__name__}: {exc}")
"""
RESOLVE = "import socket, sys; print(socket.getaddrinfo(sys.argv[1], 80, socket.AF_INET)[0][4][0])"


@dataclass
class Probes:
    """The probe pods and the Service, as the API server has them."""

    kc: KindCluster
    web: dict[str, Any]
    client: dict[str, Any]
    stranger: dict[str, Any]
    service_ip: str

    def fetch(self, pod: str, url: str, timeout_s: float = 3) -> tuple[bool, str]:
        """Whether *pod* got a 200 from *url*, and what it printed."""
        out = self.kc.exec_python(pod, NS, FETCH, url, str(timeout_s), check=False)
        return out.returncode == 0 and out.stdout.strip() == "200", (out.stdout + out.stderr)


@pytest.fixture(scope="module")
def probes(kind_cluster: KindCluster) -> Iterator[Probes]:
    """The server on one tray, the clients on the other tray and the H200 node, and a Service."""
    kc = kind_cluster
    kc.kubectl("create", "namespace", NS)
    web = kc.probe_pod(
        "web", NS, GB200_TRAYS[0], labels={"app": "web"},
        command=["python3", "-u", "-m", "http.server", str(PORT), "--directory", "/tmp"],
    )  # fmt: skip
    client = kc.probe_pod("client", NS, GB200_TRAYS[1], labels={"role": "client"})
    stranger = kc.probe_pod("stranger", NS, H200_NODE)
    kc.apply({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": PORT}]},
    })  # fmt: skip
    service_ip = kc.kubectl_json("get", "service", "web", "-n", NS)["spec"]["clusterIP"]
    try:
        yield Probes(kc, web, client, stranger, service_ip)
    finally:
        kc.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_each_node_has_its_own_pod_subnet(kind_cluster: KindCluster, probes: Probes) -> None:
    nodes = {n["metadata"]["name"]: n for n in kind_cluster.kubectl_json("get", "nodes")["items"]}
    assert sorted(nodes) == sorted(kind_cluster.nodes)
    cidrs = {name: ipaddress.ip_network(n["spec"]["podCIDR"]) for name, n in nodes.items()}
    assert len(set(cidrs.values())) == len(cidrs), cidrs
    for pod in (probes.web, probes.client, probes.stranger):
        node = pod["spec"]["nodeName"]
        assert ipaddress.ip_address(pod["status"]["podIP"]) in cidrs[node], (pod["status"], node)
    # The pod network agent wrote each node's CNI config and its routes to the others.
    for name in GB200_TRAYS:
        routes = kind_cluster.run("docker", "exec", name, "ip", "-4", "route").stdout
        for other, cidr in cidrs.items():
            if other != name:
                assert (
                    f"{cidr} via {nodes[other]['status']['addresses'][0]['address']}" in routes
                ), (
                    name,
                    routes,
                )


def test_cluster_dns_and_pod_to_pod_across_nodes(probes: Probes) -> None:
    kc = probes.kc
    for name in ("web", f"web.{NS}.svc.cluster.local"):
        got = kc.exec_python("client", NS, RESOLVE, name).stdout.strip()
        assert got == probes.service_ip, (name, got)
    kubernetes = kc.kubectl_json("get", "service", "kubernetes", "-n", "default")
    got = kc.exec_python("client", NS, RESOLVE, "kubernetes.default").stdout.strip()
    assert got == kubernetes["spec"]["clusterIP"]
    # A name that does not exist fails (NXDOMAIN from CoreDNS), rather than resolving somewhere.
    missing = kc.exec_python("client", NS, RESOLVE, f"nope.{NS}.svc.cluster.local", check=False)
    assert missing.returncode != 0 and "gaierror" in missing.stderr, missing

    web_ip, client_ip = probes.web["status"]["podIP"], probes.client["status"]["podIP"]
    # The server may still be starting: retry the first request.
    wait_for(
        lambda: probes.fetch("client", f"http://{web_ip}:{PORT}/")[0],
        timeout=60,
        interval=1,
        what="client -> web pod across nodes",
    )
    ok, out = probes.fetch("client", "http://web/")
    assert ok, out
    ok, out = probes.fetch("stranger", f"http://web.{NS}/")
    assert ok, out
    # The server saw the client's own pod address: no masquerading between pods.
    log = kc.kubectl("logs", "web", "-n", NS).stdout
    assert f"{client_ip} - - " in log, log


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def test_default_deny_blocks_and_an_allow_rule_admits(probes: Probes) -> None:
    kc = probes.kc
    web = f"http://{probes.web['status']['podIP']}:{PORT}/"
    wait_for(lambda: probes.fetch("client", web)[0], timeout=60, interval=1, what="open network")
    kc.apply(_policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress"]}))
    wait_for(
        lambda: not probes.fetch("client", web, 2)[0],
        timeout=60,
        interval=1,
        what="default-deny to block client -> web",
    )
    for pod, url in (("client", "http://web/"), ("stranger", web)):
        ok, out = probes.fetch(pod, url, 2)
        assert not ok and "timed out" in out.lower(), (pod, url, out)

    kc.apply(
        _policy(
            "allow-clients",
            {
                "podSelector": {"matchLabels": {"app": "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                        "ports": [{"protocol": "TCP", "port": PORT}],
                    }
                ],
            },
        )
    )
    wait_for(
        lambda: probes.fetch("client", web)[0],
        timeout=60,
        interval=1,
        what="the allow rule to admit client -> web",
    )
    ok, out = probes.fetch("client", "http://web/")
    assert ok, out
    for _ in range(3):
        ok, out = probes.fetch("stranger", web, 2)
        assert not ok, ("stranger admitted", out)
    # The agent on the server's node logged the policies it enforced.
    agents = kc.kubectl_json(
        "get", "pods", "-n", "kube-system", "-l", "app=kube-network-policies",
        "--field-selector", f"spec.nodeName={GB200_TRAYS[0]}",
    )["items"]  # fmt: skip
    assert len(agents) == 1, json.dumps([a["metadata"]["name"] for a in agents])
    kc.kubectl("delete", "networkpolicy", "--all", "-n", NS)
    wait_for(
        lambda: probes.fetch("stranger", web)[0],
        timeout=60,
        interval=1,
        what="the open network back once the policies are deleted",
    )
