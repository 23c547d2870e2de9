"""spec.modelCache.fill on a real API server: one shared fill, progress, no vLLM child before it.

What is real: etcd and kube-apiserver (a plane of this module's own, with kube-controller-manager
running its garbage collector only, and no scheduler or kwok, so nothing but this test acts for
the Job), the operator (``deepseek-operator
run``, a subprocess, admin credentials), the fill Job it writes, its reads of the Job, the pods
and the claim, its reads of the fill pod's log through the API server's ``pods/log``
subresource, and the fill itself: the real ``deepseek-operator fill-weights`` process, with the
arguments and environment of the operator's Job (``HF_ENDPOINT`` at the hub stand-in, the token
resolved from the user's Secret), fetching through ``huggingface_hub`` from
:class:`tests.hub_standin.HubStandin` into a temp dir.

What is simulated, by :class:`JobPlayer` and :class:`KubeletStandin` here, as the Job controller
and a kubelet would: the temp dir plays the claim's volume; a pod per attempt (labels and owner as
the Job controller sets them, bound to a Node whose kubelet endpoint is the stand-in, admitted by
the API server's Pod Security admission at the restricted level); its status
(Running, then the container's terminated exit code and message, read from the file the process
writes as its ``terminationMessagePath``); a new attempt after a failure the Job's
podFailurePolicy does not make fatal; and the Job's Complete/Failed conditions. The stand-in
kubelet serves ``/containerLogs`` from the process's stdout, so the API server proxies the log
to the operator exactly as it would from a node. The garbage collector is real: the shared Job
goes with the last serving that owns it. The fill runs as a process here, not in the operator's
image (that is the kind tier's to prove, not built yet); the claim is never bound.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import pathlib
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from tests.hub_standin import HubStandin, make_checkpoint
from tests.k8s.cluster import (
    Component,
    ControlPlane,
    free_port,
    make_serving_cert,
    start_control_plane,
    stop_control_plane,
    wait_for,
)
from tests.k8s.conditions import condition, get_serving, wait_condition
from tests.k8s.operator import OperatorProcess, install_crds

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = pathlib.Path(sys.executable).with_name("deepseek-operator")
SEED = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MISSING = "ffffffffffffffffffffffffffffffffffffffff"
TOKEN = "hf_standin_token_value_1234"
SHARD = 2 * 10 * 1024 * 1024 + 12345  # a few of the client's 10 MiB chunks
STALL_AT = 10 * 1024 * 1024 + 4096
NODE = "fill-node"
WAIT_S = 120.0  # upper bounds for the operator's 5 s polls to notice, never timed assertions
FATAL_CODES = {2, 3, 4, 5, 6, 7}


class KubeletStandin:
    """HTTPS ``/containerLogs/{ns}/{pod}/{container}?tailLines=N`` from the fill processes' stdout."""

    def __init__(self, cert_dir: pathlib.Path) -> None:
        self.logs: dict[tuple[str, str, str], pathlib.Path] = {}
        _ca, crt, key = make_serving_cert(cert_dir, "kubelet", "kubelet-standin")
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                path = standin.logs.get(tuple(parts[1:4])) if parts[0] == "containerLogs" else None  # type: ignore[arg-type]
                if path is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                lines = path.read_text(errors="replace").splitlines(keepends=True)
                tail = parse_qs(url.query).get("tailLines")
                if tail:
                    lines = lines[-int(tail[0]) :]
                data = "".join(lines).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _kubectl_json(cp: ControlPlane, *args: str) -> Any:
    return json.loads(cp.kubectl(*args, "-o", "json").stdout)


class JobPlayer:
    """The Job controller and kubelet of this plane, for the fill Jobs of one namespace."""

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        kubelet: KubeletStandin,
        volume: pathlib.Path,
        work: pathlib.Path,
    ) -> None:
        self.cp, self.namespace, self.kubelet = cp, namespace, kubelet
        self.volume, self.work = volume, work
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # pod name -> the fill
        self.log_files: dict[str, pathlib.Path] = {}
        self.seen: set[str] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.kill()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                jobs = _kubectl_json(self.cp, "get", "jobs", "-n", self.namespace)["items"]
                for job in jobs:
                    uid = job["metadata"]["uid"]
                    if uid not in self.seen:
                        self.seen.add(uid)
                        threading.Thread(target=self._run_job, args=(job,), daemon=True).start()
            except Exception as exc:
                self.errors.append(repr(exc))
            self._stop.wait(0.5)

    def _run_job(self, job: dict[str, Any]) -> None:
        try:
            self._play(job)
        except Exception as exc:
            self.errors.append(f"{job['metadata']['name']}: {exc!r}")

    def _play(self, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        start = _now()
        failed = 0
        for attempt in range(job["spec"].get("backoffLimit", 6) + 1):
            code, _message = self._attempt(job, f"{name}-{attempt}")
            if code == 0:
                self._job_status(name, start, succeeded=True, failed=failed)
                return
            failed += 1
            if code in FATAL_CODES:
                break
        self._job_status(name, start, succeeded=False, failed=failed)

    def _attempt(self, job: dict[str, Any], pod_name: str) -> tuple[int, str]:
        template = job["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": self.namespace,
                "labels": {
                    **template["metadata"].get("labels", {}),
                    "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                    "batch.kubernetes.io/job-name": job["metadata"]["name"],
                },
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {**template["spec"], "nodeName": NODE},
        }
        self.cp.kubectl("create", "-f", "-", input=pod)
        (container,) = template["spec"]["containers"]
        log = self.work / f"{pod_name}.log"
        termination = self.work / f"{pod_name}.termination"
        self.kubelet.logs[(self.namespace, pod_name, container["name"])] = log
        self.log_files[pod_name] = log
        args = []
        for arg in container["args"]:
            if arg.startswith("--hf-home="):
                arg = f"--hf-home={self.volume}"  # the claim's volume
            elif arg.startswith("--termination-log="):
                arg = f"--termination-log={termination}"
            args.append(arg)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            else:  # the kubelet resolves a secretKeyRef
                ref = item["valueFrom"]["secretKeyRef"]
                secret = _kubectl_json(self.cp, "get", "secret", ref["name"], "-n", self.namespace)
                env[item["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(CLI), *args], stdout=out, stderr=subprocess.DEVNULL, env=env
            )
        self.processes[pod_name] = proc
        self._pod_status(pod_name, {"phase": "Running", "containerStatuses": [_running()]})
        code = proc.wait()
        if code < 0:  # killed by a signal: the kubelet reports 128 + the signal
            code = 128 - code
        message = termination.read_text() if termination.exists() else ""
        self._pod_status(
            pod_name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [_terminated(code, message)],
            },
        )
        return code, message

    def _pod_status(self, name: str, status: dict[str, Any]) -> None:
        self.cp.kubectl(
            "patch", "pod", name, "-n", self.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip

    def _job_status(self, name: str, start: str, *, succeeded: bool, failed: int) -> None:
        now = _now()
        final = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
        conds = [
            {"type": t, "status": "True", "reason": "Played", "message": "", "lastTransitionTime": now,
             "lastProbeTime": now}
            for t in final
        ]  # fmt: skip
        status: dict[str, Any] = {
            "startTime": start,
            "conditions": conds,
            "succeeded": 1 if succeeded else 0,
            "failed": failed,
            "active": 0,
        }
        if succeeded:
            status["completionTime"] = now
        self.cp.kubectl(
            "patch", "job", name, "-n", self.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _running() -> dict[str, Any]:
    return {
        "name": "fill",
        "image": "x",
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "state": {"running": {"startedAt": _now()}},
    }


def _terminated(code: int, message: str) -> dict[str, Any]:
    return {
        "name": "fill",
        "image": "x",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {
            "terminated": {
                "exitCode": code,
                "message": message,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": _now(),
                "finishedAt": _now(),
            }
        },
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = start_control_plane(lambda: tmp_path_factory.mktemp("fill-plane"))
    try:
        install_crds(cp)
        # The garbage collector alone of kube-controller-manager's controllers: the shared Job's
        # ownership is real, and no Job controller competes with the JobPlayer.
        kc, port = str(cp.kubeconfig), free_port()
        gc = Component(
            "kube-controller-manager-gc",
            [
                str(cp.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                f"--secure-port={port}",
                f"--cert-dir={cp.work_dir / 'gc-certs'}",
                "--controllers=garbage-collector-controller",
            ],
            cp.log_dir / "kube-controller-manager-gc.log",
            health_url=f"https://127.0.0.1:{port}/healthz",
        )
        cp.run_component(gc)
        yield cp
    finally:
        stop_control_plane(cp)


@pytest.fixture(scope="module")
def kubelet(
    plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeletStandin]:
    standin = KubeletStandin(tmp_path_factory.mktemp("kubelet"))
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE},
        "spec": {"taints": [{"key": "fill-only", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": standin.port}},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "stand-in"}],
        },
    }  # fmt: skip
    plane.create_node(node, wait_ready=False)
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture(scope="module")
def operator(
    plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        plane, tmp_path_factory.mktemp("operator"), extra=["--standalone", "--fill-image=op:test"]
    ).start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStandin]:
    files = make_checkpoint(tmp_path_factory.mktemp("checkpoint"), shards=2, shard_bytes=SHARD)
    standin = HubStandin(tokens={TOKEN}).start()
    standin.add_commit(MODEL, COMMIT, files)
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture
def ns(plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    # Unique: no namespace controller runs here, so a deleted namespace stays Terminating.
    name = f"fill-{request.node.name.split('[')[0][5:30].replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    plane.create_namespace(name)
    try:
        yield name
    finally:
        plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def player(
    plane: ControlPlane, ns: str, kubelet: KubeletStandin, tmp_path: pathlib.Path
) -> Iterator[JobPlayer]:
    (tmp_path / "volume").mkdir()
    (tmp_path / "work").mkdir()
    p = JobPlayer(plane, ns, kubelet, tmp_path / "volume", tmp_path / "work")
    try:
        yield p
    finally:
        p.stop()
        assert not p.errors, p.errors


def setup(cp: ControlPlane, ns: str, token: str = TOKEN, size: str = "600Gi") -> None:
    # The API server's Pod Security admission enforces "restricted" on every fill pod created
    # here from the operator's Job template (the vLLM Deployments are never turned into pods).
    cp.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    cp.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "weights", "namespace": ns},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "resources": {"requests": {"storage": size}},
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "hf-token", "namespace": ns},
                "stringData": {"token": token},
            },
        ]
    )


def serving(ns: str, name: str, hub: HubStandin, revision: str = COMMIT) -> dict[str, Any]:
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": name, "namespace": ns}
    doc["spec"]["model"]["revision"] = revision
    doc["spec"]["modelCache"] = {
        "claimName": "weights",
        "fill": {
            "tokenSecretRef": {"name": "hf-token", "key": "token"},
            "endpoint": hub.endpoint,
        },
    }
    return doc


def workloads(cp: ControlPlane, ns: str) -> list[str]:
    items = _kubectl_json(cp, "get", "deployments", "-n", ns)["items"]
    return [d["metadata"]["name"] for d in items]


def jobs(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    return list(_kubectl_json(cp, "get", "jobs", "-n", ns)["items"])


def test_two_servings_share_one_fill_and_pods_wait_for_it(
    plane: ControlPlane, operator: OperatorProcess, hub: HubStandin, ns: str, player: JobPlayer
) -> None:
    setup(plane, ns)
    hub.stall_at = {"model-00002-of-00002.safetensors": STALL_AT}
    hub.stalled.clear()
    plane.apply([serving(ns, "a", hub), serving(ns, "b", hub)])

    # One Job for both, owned by both (neither its controller).
    def owned_by_both() -> dict[str, Any] | None:
        found = jobs(plane, ns)
        if len(found) != 1:
            return None
        owners = {o["name"] for o in found[0]["metadata"].get("ownerReferences", [])}
        return found[0] if owners == {"a", "b"} else None

    job = wait_for(owned_by_both, timeout=WAIT_S, what="one fill Job owned by a and b")
    assert all(not o.get("controller") for o in job["metadata"]["ownerReferences"])
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "--revision=" + COMMIT in container["args"]
    assert {"name": "HF_ENDPOINT", "value": hub.endpoint} in container["env"]
    assert TOKEN not in json.dumps(job)
    # The namespace's restricted level bites: the same pod without its hardening is refused.
    bare = copy.deepcopy(job["spec"]["template"])
    bare["spec"].pop("securityContext")
    bare["spec"]["containers"][0].pop("securityContext")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": ns}, **bare}
    pod["metadata"] = {"name": "bare", "namespace": ns}
    refused = plane.kubectl("create", "--dry-run=server", "-f", "-", input=pod, check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr

    # Progress moves while the fill is stalled part-way, and no vLLM child exists.
    def partial(obj: dict[str, Any]) -> bool:
        w = (obj.get("status") or {}).get("weights") or {}
        return 0 < w.get("bytesDone", 0) < w.get("bytesTotal", 0)

    for name in ("a", "b"):
        obj = wait_condition(
            plane, ns, "WeightsReady", "False", name=name, check=partial, timeout=WAIT_S
        )
        assert condition(obj, "WeightsReady")["reason"] in ("Filling", "FillRetrying")
        assert "GiB" in obj["status"]["weights"]["progress"]
        assert condition(obj, "Ready")["reason"] == "WeightsNotReady"
    assert hub.stalled.is_set()
    assert workloads(plane, ns) == []

    # The fill pod is killed mid-way: the Job's next pod resumes from the volume.
    first = next(iter(player.processes))
    player.processes[first].send_signal(signal.SIGKILL)
    wait_for(lambda: len(player.processes) == 2, timeout=WAIT_S, what="a second fill pod")
    assert workloads(plane, ns) == []
    hub.release()

    for name in ("a", "b"):
        obj = wait_condition(
            plane, ns, "WeightsReady", "True", reason="Filled", name=name, timeout=WAIT_S
        )
        assert obj["status"]["weights"]["progress"] == "filled"
    wait_for(
        lambda: sorted(workloads(plane, ns)) == ["a", "b"], timeout=WAIT_S, what="vLLM Deployments"
    )
    done = [
        json.loads(line)
        for line in player.log_files[f"{job['metadata']['name']}-1"].read_text().splitlines()
        if '"done"' in line
    ]
    (last,) = done
    assert 0 < last["bytesFetched"] < last["bytesTotal"]  # resumed, not restarted
    deployment = _kubectl_json(plane, "get", "deployment", "a", "-n", ns)
    (vllm,) = deployment["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in vllm["volumeMounts"] if m["name"] == "model-cache"]
    assert mount.get("readOnly") is True
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in vllm["env"]
    assert len(jobs(plane, ns)) == 1


@pytest.mark.parametrize(
    ("token", "revision", "code", "cause", "said"),
    [
        ("hf_wrong_token_0000000000", COMMIT, 3, "token-rejected", "401"),
        (TOKEN, MISSING, 5, "not-found", "404"),
    ],
)
def test_a_bad_token_or_a_missing_revision_is_one_line_and_no_pod(
    plane: ControlPlane,
    operator: OperatorProcess,
    hub: HubStandin,
    ns: str,
    player: JobPlayer,
    token: str,
    revision: str,
    code: int,
    cause: str,
    said: str,
) -> None:
    setup(plane, ns, token=token)
    plane.apply(serving(ns, "a", hub, revision=revision))
    obj = wait_condition(
        plane, ns, "WeightsReady", "False", reason="FillFailed", name="a", timeout=WAIT_S
    )
    message = condition(obj, "WeightsReady")["message"]
    assert "\n" not in message
    assert f"exit code {code} ({cause})" in message
    # The command's own line, from its termination message: the hub's answer, named.
    assert f"({cause}): " in message and said in message, message
    assert len(player.processes) == 1  # fatal: no retry
    assert workloads(plane, ns) == []
    assert token not in json.dumps(get_serving(plane, ns, "a"))


def test_a_claim_smaller_than_the_checkpoint_is_refused_with_figures(
    plane: ControlPlane, operator: OperatorProcess, hub: HubStandin, ns: str
) -> None:
    setup(plane, ns, size="100Gi")
    plane.apply(serving(ns, "a", hub))
    obj = wait_condition(
        plane, ns, "WeightsReady", "False", reason="CacheTooSmall", name="a", timeout=WAIT_S
    )
    message = condition(obj, "WeightsReady")["message"]
    assert "100Gi" in message and "476.0 GiB" in message
    assert jobs(plane, ns) == [] and workloads(plane, ns) == []


def test_the_shared_job_goes_with_the_last_serving(
    plane: ControlPlane, operator: OperatorProcess, hub: HubStandin, ns: str
) -> None:
    setup(plane, ns)
    plane.apply([serving(ns, "a", hub), serving(ns, "b", hub)])

    def owners() -> set[str]:
        found = jobs(plane, ns)
        return {o["name"] for j in found for o in j["metadata"].get("ownerReferences", [])}

    wait_for(lambda: owners() == {"a", "b"}, timeout=WAIT_S, what="the Job owned by a and b")
    (job,) = jobs(plane, ns)
    plane.kubectl("delete", "dss", "a", "-n", ns)
    # b still holds it: the collector only drops a's dangling reference.
    wait_for(lambda: owners() == {"b"}, timeout=WAIT_S, what="a's reference dropped")
    assert [j["metadata"]["uid"] for j in jobs(plane, ns)] == [job["metadata"]["uid"]]
    plane.kubectl("delete", "dss", "b", "-n", ns)
    wait_for(lambda: jobs(plane, ns) == [], timeout=WAIT_S, what="the garbage collector")
