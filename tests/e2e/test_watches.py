"""The operator's watches behave as client-go's reflector, on the local API server.

* **A dropped stream resumes.** The operator reaches the API server through a TCP relay on
  127.0.0.1 that the test can cut: every open connection is closed at once. The watches open
  again from the last resourceVersion they saw, so a child deleted meanwhile is still seen
  (and restored) and no kind is listed again (``deepseek_operator_watch_lists_total``).
* **An expired version lists once.** kube-apiserver is stopped, etcd is written and compacted
  to its newest revision, and the API server is started again: the version each watch resumes
  from is gone (410), and each kind is listed exactly once more.
* **429 is honoured.** API Priority and Fairness puts the operator's LIST/WATCH of Deployments,
  then its writes of them, in a priority level with no seats and ``Reject``. Such a level still
  runs one request when none is running, so the test keeps one of its own running in it: a
  ConfigMap create held by a validating webhook that answers only after a while. Every other
  request of the level is answered 429: the operator waits and retries
  (``deepseek_operator_throttled_total``), and once the FlowSchema is gone it writes the
  Deployment without a restart.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import pathlib
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_faults import restart_apiserver
from tests.gpu_nodes import gb200_tray
from tests.k8s.cluster import ControlPlane, make_serving_cert, wait_for, write_kubeconfig
from tests.k8s.conditions import wait_condition
from tests.k8s.operator import OperatorProcess, running_operator
from tests.servings import serving

pytestmark = pytest.mark.e2e

WATCH_LISTS = "deepseek_operator_watch_lists_total"


class Relay:
    """A TCP relay 127.0.0.1:port → the API server that can drop every open connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Drop every open connection (new ones are still accepted); how many were open."""
        with self._lock:
            dropped, self._open = self._open, []
        for s in dropped:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(dropped) // 2

    def close(self) -> None:
        """Stop accepting and drop everything."""
        self.listener.close()
        self.cut()


def _node(namespace: str) -> dict[str, Any]:
    return gb200_tray(f"{namespace}-gb0", namespace)


def _uid(cp: ControlPlane, namespace: str, kind: str, name: str) -> str | None:
    found = cp.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(found.stdout)["metadata"]["uid"] if found.returncode == 0 else None


def _lists_by_kind(op: Any) -> dict[str, float]:
    """The operator's full LISTs so far, by kind (kinds not listed yet absent)."""
    counts: dict[str, float] = {}
    for line in op.metrics().splitlines():
        if line.startswith(WATCH_LISTS + "{"):
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            counts[kind] = counts.get(kind, 0.0) + float(line.rsplit(" ", 1)[1])
    return {kind: count for kind, count in counts.items() if count}


def _restored(cp: ControlPlane, namespace: str, old_uid: str) -> None:
    """Delete the Deployment and wait until the operator has written it again."""
    cp.kubectl("delete", "deployment", "dsv41", "-n", namespace, "--wait=false")
    wait_for(
        lambda: _uid(cp, namespace, "deployment", "dsv41") not in (None, old_uid),
        timeout=60,
        what="the Deployment restored",
    )


@pytest.fixture
def served(
    full_cluster: ControlPlane, crds: ControlPlane, namespace: str, node_factory: Any
) -> str:
    """A GB200 node for ``namespace``'s pool: the test's DeepSeekServing gets a Deployment."""
    node_factory(_node(namespace))
    return namespace


@pytest.fixture
def relay(full_cluster: ControlPlane) -> Iterator[Relay]:
    """A relay to the session's API server."""
    r = Relay(int(full_cluster.server.rsplit(":", 1)[1]))
    yield r
    r.close()


def test_a_dropped_stream_resumes_from_its_version_without_listing_again(
    full_cluster: ControlPlane, served: str, relay: Relay, tmp_path: pathlib.Path
) -> None:
    namespace = served
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        server=f"https://127.0.0.1:{relay.port}",
        ca_file=full_cluster.ca_file,
        token=full_cluster.token,
    )
    with running_operator(full_cluster, tmp_path, kubeconfig) as op:
        full_cluster.apply(serving(namespace))
        wait_condition(full_cluster, namespace, "BackendResolved", "True")
        wait_for(lambda: _uid(full_cluster, namespace, "deployment", "dsv41"), what="Deployment")
        listed = _lists_by_kind(op)
        assert listed.get("Deployment") == 1
        assert relay.cut() > 0
        _restored(
            full_cluster, namespace, str(_uid(full_cluster, namespace, "deployment", "dsv41"))
        )
        # A kind whose first listing was still on its way at the cut may list now, once; no
        # kind that had listed lists again.
        after = _lists_by_kind(op)
        assert {kind: after[kind] for kind in listed} == listed, op.logs()
        assert all(count == 1 for count in after.values()), (after, op.logs())


def _etcd(cp: ControlPlane, call: str, body: dict[str, Any]) -> dict[str, Any]:
    etcd = next(c for c in cp.components if c.name == "etcd")
    assert etcd.health_url is not None
    url = etcd.health_url.removesuffix("/health") + f"/v3/kv/{call}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read()))


def _compact_while_down(cp: ControlPlane) -> None:
    """With kube-apiserver stopped: one more etcd revision, then compact everything before it."""
    key = base64.b64encode(b"/dso-test/compaction").decode()
    put = _etcd(cp, "put", {"key": key, "value": base64.b64encode(b"x").decode()})
    _etcd(cp, "compaction", {"revision": put["header"]["revision"], "physical": True})


def test_an_expired_version_after_compaction_lists_each_kind_once(
    full_cluster: ControlPlane, served: str, tmp_path: pathlib.Path, monkeypatch: Any
) -> None:
    namespace = served
    with running_operator(full_cluster, tmp_path) as op:
        full_cluster.apply(serving(namespace))
        wait_condition(full_cluster, namespace, "BackendResolved", "True")
        wait_for(lambda: _uid(full_cluster, namespace, "deployment", "dsv41"), what="Deployment")
        before = op.metric(WATCH_LISTS, kind="Deployment")
        nodes_before = op.metric(WATCH_LISTS, kind="Node")
        apiserver = next(c for c in full_cluster.components if c.name == "kube-apiserver")
        stop = apiserver.stop
        # Compaction happens while the API server is down: no watch can catch up before it.
        monkeypatch.setattr(apiserver, "stop", lambda: (stop(), _compact_while_down(full_cluster)))
        restart_apiserver(full_cluster, down_for=1)
        wait_for(
            lambda: op.metric(WATCH_LISTS, kind="Deployment") == before + 1,
            timeout=90,
            what="the Deployment watch listed again",
        )
        _restored(
            full_cluster, namespace, str(_uid(full_cluster, namespace, "deployment", "dsv41"))
        )
        assert op.metric(WATCH_LISTS, kind="Deployment") == before + 1, op.logs()
        assert op.metric(WATCH_LISTS, kind="Node") == nodes_before + 1, op.logs()


def _apf_objects(namespace: str, user: str, verbs: list[str]) -> list[dict[str, Any]]:
    level = f"dso-{namespace}"
    return [
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": level},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 0,
                    "borrowingLimitPercent": 0,
                    "lendablePercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": level},
            "spec": {
                "priorityLevelConfiguration": {"name": level},
                "matchingPrecedence": 100,
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {
                                "verbs": verbs,
                                "apiGroups": ["apps"],
                                "resources": ["deployments"],
                                "clusterScope": True,
                                "namespaces": ["*"],
                            },
                            {  # the test's own request that holds the level's one slot
                                "verbs": ["create"],
                                "apiGroups": [""],
                                "resources": ["configmaps"],
                                "namespaces": [namespace],
                            },
                        ],
                    }
                ],
            },
        },
    ]


HOLD_S = 20  # how long the webhook holds each request (its timeout is at most 30 s)


class SlowWebhook:
    """A validating webhook on 127.0.0.1 that allows every request after :data:`HOLD_S`."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.ca, crt, key = make_serving_cert(directory, "slow-webhook", "slow-webhook")
        self.stopping = threading.Event()
        stopping = self.stopping

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stopping.wait(HOLD_S)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": True},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def configuration(self, namespace: str) -> dict[str, Any]:
        """The webhook configuration: ConfigMaps labelled ``hold=slot`` in ``namespace``."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": f"hold-{namespace}"},
            "webhooks": [
                {
                    "name": "hold.deepseek-operator.test",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "timeoutSeconds": 30,
                    "failurePolicy": "Ignore",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{self.server.server_address[1]}/",
                        "caBundle": base64.b64encode(self.ca.read_bytes()).decode(),
                    },
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "objectSelector": {"matchLabels": {"hold": "slot"}},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ],
                }
            ],
        }

    def close(self) -> None:
        """Answer what is held and stop."""
        self.stopping.set()
        self.server.shutdown()


def _hold_the_slot(cp: ControlPlane, namespace: str, token: str, stop: threading.Event) -> None:
    """Keep one ConfigMap create (held by the webhook) running as the operator's user."""
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    n = 0
    while not stop.is_set():
        n += 1
        body = {"metadata": {"name": f"slot-{n}", "labels": {"hold": "slot"}}}
        request = urllib.request.Request(
            f"{cp.server}/api/v1/namespaces/{namespace}/configmaps",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=HOLD_S + 15, context=context).close()


def test_429_from_priority_and_fairness_is_waited_out_and_retried(
    full_cluster: ControlPlane, served: str, tmp_path: pathlib.Path
) -> None:
    namespace = served
    # The admin token's group (system:masters) is exempt from API Priority and Fairness: the
    # operator runs as a ServiceAccount with cluster-admin.
    full_cluster.kubectl("create", "serviceaccount", "dso", "-n", namespace)
    full_cluster.kubectl(
        "create", "clusterrolebinding", f"dso-{namespace}", "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:dso",
    )  # fmt: skip
    user = f"system:serviceaccount:{namespace}:dso"
    # First the LIST and WATCH of Deployments are turned away, then only their writes.
    for obj in _apf_objects(namespace, user, ["list", "watch"]):
        full_cluster.apply(obj)
    webhook = SlowWebhook(tmp_path / "webhook")
    full_cluster.apply(webhook.configuration(namespace))
    token = full_cluster.create_token(namespace, "dso")
    kubeconfig = full_cluster.kubeconfig_for_token(token, tmp_path / "kubeconfig")
    stop = threading.Event()
    holder = threading.Thread(
        target=_hold_the_slot, args=(full_cluster, namespace, token, stop), daemon=True
    )
    holder.start()
    op = OperatorProcess(full_cluster, tmp_path, kubeconfig=kubeconfig).start()
    try:
        wait_for(
            lambda: op.metric("deepseek_operator_throttled_total", verb="list") > 0,
            timeout=60,
            what="the Deployment listing throttled",
        )
        full_cluster.apply(_apf_objects(namespace, user, ["create", "patch", "update"])[1])
        full_cluster.apply(serving(namespace))
        wait_for(
            lambda: op.metric("deepseek_operator_throttled_total", verb="PATCH") > 0,
            timeout=90,
            what="a Deployment apply throttled",
        )
        full_cluster.kubectl("delete", "flowschema", f"dso-{namespace}")
        wait_for(
            lambda: _uid(full_cluster, namespace, "deployment", "dsv41") is not None,
            timeout=120,
            what="the Deployment written once the throttle is gone",
        )
        wait_condition(full_cluster, namespace, "BackendResolved", "True")
        assert "Traceback" not in op.log_path.read_text(errors="replace")
    finally:
        op.stop()
        stop.set()
        webhook.close()
        full_cluster.kubectl(
            "delete", "validatingwebhookconfiguration", f"hold-{namespace}", check=False
        )
        full_cluster.kubectl(
            "delete", "prioritylevelconfiguration", f"dso-{namespace}", check=False
        )
        full_cluster.kubectl("delete", "flowschema", f"dso-{namespace}", "--ignore-not-found")
        full_cluster.kubectl("delete", "clusterrolebinding", f"dso-{namespace}", check=False)
