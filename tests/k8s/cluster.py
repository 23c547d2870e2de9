"""A real, local Kubernetes control plane for integration and e2e tests.

The binaries (etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kwok, helm)
are built once by ``hack/build-control-plane.sh`` into ``$DSO_CACHE/bin``
(default ``~/.cache/deepseek-operator/bin``); ``DSO_BIN_DIR`` overrides the directory.

Fixtures (registered in ``tests/conftest.py``):

* ``control_plane`` (session): etcd + kube-apiserver on free loopback ports of this process's
  own block (:mod:`tests.k8s.ports`), TLS from openssl, a
  static admin token (``system:masters``), ServiceAccount signing keys, ``Node,RBAC``
  authorization. Yields a :class:`ControlPlane`.
* ``full_cluster`` (session): the same :class:`ControlPlane` with kube-controller-manager,
  kube-scheduler and kwok also running. kwok manages Nodes annotated ``kwok.x-k8s.io/node=fake``
  (see :func:`make_gpu_node`) and moves Pods bound to them to Running/Ready.
* ``namespace`` (function): a fresh namespace (with its ``default`` ServiceAccount), deleted after.
* ``node_factory`` (function): ``node_factory(node_dict, ...) -> list[dict]`` creates Nodes
  (status through the status subresource) and deletes them after the test.

Missing binaries: the fixtures fail (``pytest.fail``) when ``CI=true`` or
``DSO_REQUIRE_CLUSTER=1``; otherwise they skip and say to run ``make cluster-bins``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.gpu_nodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE
from tests.k8s.ports import free_port

T = TypeVar("T")

#: kwok Stage config (its "fast" node and pod stages); kwok runs no stages without one.
KWOK_STAGES = Path(__file__).with_name("kwok-stages.yaml")

CORE_BINARIES = ("etcd", "kube-apiserver", "kubectl")
FULL_BINARIES = ("kube-controller-manager", "kube-scheduler", "kwok")
ALL_BINARIES = (*CORE_BINARIES, *FULL_BINARIES, "helm")

# A /16 (65,534 addresses; 10.0.0.1 stays the kubernetes Service): the benchmark creates
# thousands of Services, and a /24 filled at ~250 ("range is full").
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Startup deadlines (seconds). kube-apiserver needs ~5-10 s on a 2-core machine.
APISERVER_READY_TIMEOUT = 90.0
COMPONENT_READY_TIMEOUT = 90.0
STOP_GRACE = 10.0
START_ATTEMPTS = 2


# --------------------------------------------------------------------------------------------
# Binary discovery
# --------------------------------------------------------------------------------------------


def default_bin_dir() -> Path:
    """Return where the binaries are looked up: ``$DSO_BIN_DIR`` or ``$DSO_CACHE/bin``."""
    if os.environ.get("DSO_BIN_DIR"):
        return Path(os.environ["DSO_BIN_DIR"]).expanduser()
    cache = os.environ.get("DSO_CACHE") or str(Path.home() / ".cache" / "deepseek-operator")
    return Path(cache).expanduser() / "bin"


def missing_binaries(names: Sequence[str], bin_dir: Path | None = None) -> list[str]:
    """Return the names in *names* that are not executable files in *bin_dir*."""
    bin_dir = bin_dir or default_bin_dir()
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def cluster_required() -> bool:
    """Whether missing binaries must fail the run instead of skipping (CI or opted in)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes") or os.environ.get(
        "DSO_REQUIRE_CLUSTER", ""
    ) not in ("", "0")


def require_binaries(names: Sequence[str]) -> Path:
    """Return the bin directory if every binary in *names* is there; else skip or fail.

    Fails (never skips) when :func:`cluster_required` is true, so a CI job without the build step
    cannot go green without running these tests.
    """
    bin_dir = default_bin_dir()
    missing = missing_binaries(names, bin_dir)
    if missing:
        msg = (
            f"control-plane binaries missing from {bin_dir}: {', '.join(missing)}. "
            "Build them with `make cluster-bins` (hack/build-control-plane.sh), "
            "or point DSO_BIN_DIR at a directory that has them."
        )
        if cluster_required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return bin_dir


# --------------------------------------------------------------------------------------------
# Small utilities
# --------------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll *predicate* until it returns a truthy value and return that value.

    Exceptions raised by *predicate* count as "not yet", except :class:`ComponentExited`. On
    timeout an ``AssertionError`` names *what* and the last exception seen.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except ComponentExited:
            raise
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
        time.sleep(interval)


def tail(path: Path, lines: int = 40) -> str:
    """Return the last *lines* lines of a text file ('' if it does not exist)."""
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(data[-lines:])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _make_ca(d: Path, name: str, cn: str) -> None:
    _openssl("req", "-x509", *_EC_KEY, "-days", "3", "-subj", f"/CN={cn}",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)  # fmt: skip


def _issue(d: Path, name: str, ca: str, subject: str, extensions: str) -> None:
    _openssl("req", *_EC_KEY, "-subj", subject, "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=d)  # fmt: skip
    (d / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "3", "-extfile", f"{name}.ext",
             "-out", f"{name}.crt", cwd=d)  # fmt: skip


def make_serving_cert(directory: Path, name: str, cn: str) -> tuple[Path, Path, Path]:
    """Create a CA and a loopback server certificate signed by it (for webhook servers).

    Returns ``(ca_crt, tls_crt, tls_key)``; the certificate is valid for ``IP:127.0.0.1`` and
    ``DNS:localhost``, the addresses webhook configurations point the API server at.
    """
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, f"{name}-ca", f"{cn}-ca")
    _issue(directory, name, f"{name}-ca", f"/CN={cn}",
           "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
           "keyUsage=digitalSignature\n")  # fmt: skip
    return directory / f"{name}-ca.crt", directory / f"{name}.crt", directory / f"{name}.key"


def generate_pki(directory: Path) -> dict[str, Path]:
    """Create the cluster PKI with the openssl CLI (EC P-256 certificates, RSA SA keys).

    Returns paths keyed ``ca_crt ca_key apiserver_crt apiserver_key front_proxy_ca_crt
    front_proxy_client_crt front_proxy_client_key sa_key sa_pub``.
    """
    d = directory
    d.mkdir(parents=True, exist_ok=True)
    _make_ca(d, "ca", "deepseek-operator-test-ca")
    sans = ",".join(
        ["IP:127.0.0.1", "IP:10.0.0.1", "DNS:localhost", "DNS:kubernetes"]
        + [f"DNS:kubernetes.default{s}" for s in ("", ".svc", ".svc.cluster.local")]
    )
    server_ext = f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n"
    _issue(d, "apiserver", "ca", "/CN=kube-apiserver", server_ext)
    # Request-header (front proxy) authentication, which controller-manager and scheduler
    # read from kube-system/extension-apiserver-authentication.
    _make_ca(d, "front-proxy-ca", "deepseek-operator-test-front-proxy-ca")
    _issue(d, "front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client",
           "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature\n")  # fmt: skip
    # ServiceAccount token signing key pair (RS256, what kube-apiserver expects by default).
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    names = {
        "ca_crt": "ca.crt",
        "ca_key": "ca.key",
        "apiserver_crt": "apiserver.crt",
        "apiserver_key": "apiserver.key",
        "front_proxy_ca_crt": "front-proxy-ca.crt",
        "front_proxy_client_crt": "front-proxy-client.crt",
        "front_proxy_client_key": "front-proxy-client.key",
        "sa_key": "sa.key",
        "sa_pub": "sa.pub",
    }
    return {key: d / name for key, name in names.items()}


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_file: Path,
    token: str,
    user: str = "admin",
    cluster: str = "dso-test",
) -> Path:
    """Write a kubeconfig for *server* authenticating with a bearer *token*; return *path*."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))  # JSON is valid YAML
    path.chmod(0o600)
    return path


class ComponentExited(RuntimeError):
    """A control-plane process exited; :func:`wait_for` stops polling on it."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl run whose message includes its stdout and stderr."""

    def __str__(self) -> str:
        return (
            f"{super().__str__()}\n--- stdout ---\n{self.output or ''}"
            f"\n--- stderr ---\n{self.stderr or ''}"
        )


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM it if pytest dies without tearing down (kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Component:
    """One running control-plane process with its log file."""

    name: str
    argv: list[str]
    log_path: Path
    health_url: str | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        """Start the process, stdout and stderr appended to :attr:`log_path`."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.process is not None and self.process.poll() is None

    def check_running(self) -> None:
        """Raise :class:`ComponentExited` with the log tail if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise ComponentExited(
                f"{self.name} exited with code {self.process.returncode}; "
                f"log {self.log_path}:\n{tail(self.log_path)}"
            )

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the process group, then SIGKILL after *grace* seconds."""
        p = self.process
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=grace)


# --------------------------------------------------------------------------------------------
# The control plane
# --------------------------------------------------------------------------------------------


@dataclass
class ControlPlane:
    """A running local control plane and helpers to talk to it.

    Attributes: ``kubeconfig`` (admin kubeconfig path), ``server`` (``https://127.0.0.1:PORT``),
    ``token`` (admin bearer token, group ``system:masters``), ``ca_file`` (cluster CA),
    ``bin_dir``, ``work_dir`` (PKI, etcd data, logs under ``work_dir/logs``), ``env`` (environment
    for subprocesses: ``KUBECONFIG``, ``bin_dir`` first on ``PATH``, helm dirs in ``work_dir``),
    ``sa_key_file``/``sa_pub_file`` (ServiceAccount signing keys), ``full`` (whether
    controller-manager, scheduler and kwok run), ``extras`` (add-ons such as LWS).
    """

    bin_dir: Path
    work_dir: Path
    server: str = ""
    token: str = ""
    ca_file: Path = Path()
    kubeconfig: Path = Path()
    env: dict[str, str] = field(default_factory=dict)
    pki: dict[str, Path] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)
    full: bool = False
    #: Add-ons started by other fixtures, by name (e.g. ``"lws"``: :class:`k8s.lws.LwsInstall`).
    extras: dict[str, Any] = field(default_factory=dict)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """Directory holding one ``<component>.log`` per process."""
        return self.work_dir / "logs"

    @property
    def sa_key_file(self) -> Path:
        """ServiceAccount token signing private key."""
        return self.pki["sa_key"]

    @property
    def sa_pub_file(self) -> Path:
        """ServiceAccount token verification public key."""
        return self.pki["sa_pub"]

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def start(self) -> None:
        """Start etcd and kube-apiserver and wait for ``/readyz``."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.pki = generate_pki(self.work_dir / "pki")
        self.ca_file = self.pki["ca_crt"]
        self.token = secrets.token_hex(24)
        tokens = self.work_dir / "pki" / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)

        etcd_client, etcd_peer, secure_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        etcd = Component(
            "etcd",
            [
                self._bin("etcd"),
                "--name=dso",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=dso=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            self.log_dir / "etcd.log",
            health_url=f"{etcd_url}/health",
        )
        self._launch(etcd)
        self._wait_healthy(etcd, timeout=30)

        self.server = f"https://127.0.0.1:{secure_port}"
        apiserver = Component(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={secure_port}",
                f"--cert-dir={self.work_dir / 'apiserver-certs'}",
                f"--tls-cert-file={self.pki['apiserver_crt']}",
                f"--tls-private-key-file={self.pki['apiserver_key']}",
                f"--client-ca-file={self.ca_file}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={self.pki['sa_pub']}",
                f"--service-account-signing-key-file={self.pki['sa_key']}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                # 127.0.0.1 is not a valid Endpoints address; nothing in-cluster dials it anyway.
                "--endpoint-reconciler-type=none",
                "--enable-admission-plugins=NodeRestriction",
                # No kubelet/node-lifecycle controller clears the not-ready taint this adds to
                # fresh Nodes; kwok reports them Ready instead.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--profiling=false",
                f"--requestheader-client-ca-file={self.pki['front_proxy_ca_crt']}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={self.pki['front_proxy_client_crt']}",
                f"--proxy-client-key-file={self.pki['front_proxy_client_key']}",
            ],
            self.log_dir / "kube-apiserver.log",
            health_url=f"{self.server}/readyz",
        )
        self._launch(apiserver)
        self._wait_healthy(apiserver, timeout=APISERVER_READY_TIMEOUT)

        self.kubeconfig = write_kubeconfig(
            self.work_dir / "kubeconfig",
            server=self.server,
            ca_file=self.ca_file,
            token=self.token,
        )
        helm_home = self.work_dir / "helm"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "HELM_CACHE_HOME": str(helm_home / "cache"),
            "HELM_CONFIG_HOME": str(helm_home / "config"),
            "HELM_DATA_HOME": str(helm_home / "data"),
        }

    def start_full(self) -> None:
        """Also start kube-controller-manager, kube-scheduler and kwok, and wait for them."""
        if self.full:
            return
        core = len(self.components)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_full_once()
                return
            except Exception:
                for c in self.components[core:]:
                    c.stop()
                if attempt == START_ATTEMPTS:
                    raise
                for c in self.components[core:]:
                    c.log_path.rename(c.log_path.with_suffix(f".attempt{attempt}.log"))
                del self.components[core:]

    def _start_full_once(self) -> None:
        kcm_port, sched_port, kwok_port = free_port(), free_port(), free_port()
        kc = str(self.kubeconfig)
        common = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        kcm = Component(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                *common,
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.work_dir / 'kcm-certs'}",
                f"--service-account-private-key-file={self.pki['sa_key']}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={self.pki['ca_key']}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                # No pod CIDRs to hand out; kwok heartbeats leases but we keep node health
                # out of the picture (no taints, no evictions).
                "--controllers=*,-node-ipam-controller,-node-lifecycle-controller",
            ],
            self.log_dir / "kube-controller-manager.log",
            health_url=f"https://127.0.0.1:{kcm_port}/healthz",
        )
        scheduler = Component(
            "kube-scheduler",
            [self._bin("kube-scheduler"), *common, f"--secure-port={sched_port}"],
            self.log_dir / "kube-scheduler.log",
            health_url=f"https://127.0.0.1:{sched_port}/healthz",
        )
        kwok = Component(
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={kc}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{kwok_port}",
                "--node-lease-duration-seconds=40",
                f"--config={KWOK_STAGES}",
            ],
            self.log_dir / "kwok.log",
            health_url=f"http://127.0.0.1:{kwok_port}/healthz",
        )
        for c in (kcm, scheduler, kwok):
            self._launch(c)
        for c in (kcm, scheduler, kwok):
            self._wait_healthy(c, timeout=COMPONENT_READY_TIMEOUT)
        # The ServiceAccount and root-CA controllers work once `default` has its SA and CA map.
        wait_for(
            lambda: (
                self.kubectl(
                    "get",
                    "serviceaccount/default",
                    "configmap/kube-root-ca.crt",
                    "-n",
                    "default",
                    check=False,
                ).returncode
                == 0
            ),
            timeout=COMPONENT_READY_TIMEOUT,
            what="default ServiceAccount and kube-root-ca.crt",
        )
        self.full = True

    def run_component(self, component: Component, timeout: float = COMPONENT_READY_TIMEOUT) -> None:
        """Start *component* (stopped with the cluster) and wait until its health URL answers."""
        self._launch(component)
        self._wait_healthy(component, timeout=timeout)

    def stop(self) -> None:
        """Stop every component, newest first."""
        for c in reversed(self.components):
            c.stop()

    def _launch(self, component: Component) -> None:
        component.start()
        self.components.append(component)

    def _wait_healthy(self, component: Component, timeout: float) -> None:
        url = component.health_url
        assert url is not None

        def healthy() -> bool:
            component.check_running()
            return self._http_ok(url)

        try:
            wait_for(healthy, timeout=timeout, interval=0.25, what=f"{component.name} {url}")
        except (AssertionError, RuntimeError) as exc:
            raise RuntimeError(
                f"{component.name} did not become healthy: {exc}\n"
                f"--- {component.log_path} ---\n{tail(component.log_path, 60)}"
            ) from None

    def _http_ok(self, url: str) -> bool:
        req = urllib.request.Request(url)
        ctx: ssl.SSLContext | None = None
        if url.startswith("https://"):
            if url.startswith(self.server) and self.server:
                ctx = ssl.create_default_context(cafile=str(self.ca_file))
                req.add_header("Authorization", f"Bearer {self.token}")
            else:  # components serve self-signed certs; /healthz is always-allowed
                ctx = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    # -- diagnostics ---------------------------------------------------------------------------

    def log_tails(self, lines: int = 30) -> str:
        """Return the last *lines* of every component log, one section per component."""
        parts = []
        for c in self.components:
            state = "running" if c.running else f"exited {c.process and c.process.returncode}"
            parts.append(f"===== {c.name} ({state}) {c.log_path} =====\n{tail(c.log_path, lines)}")
        return "\n".join(parts)

    # -- clients -------------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster (admin); return the completed process.

        *input* goes to stdin: a string, or an object / list of objects sent as JSON (a list is
        wrapped in a ``v1/List``). With *check*, a non-zero exit raises :class:`KubectlError`
        whose message includes stdout and stderr.
        """
        if input is not None and not isinstance(input, str):
            if isinstance(input, Mapping):
                input = json.dumps(input)
            else:
                input = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(input)})
        argv = [self._bin("kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, env=self.env
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Wait until CustomResourceDefinition *crd* has ``Established=True``.

        Not ``kubectl wait --for=condition=Established``: right after the CRD is created its
        ``status.conditions`` may not exist yet, and kubectl then exits 1 at once ("<nil> is of
        the type <nil>") instead of waiting; on a loaded machine that window is wide enough to
        fail a whole worker's session fixture.
        """

        def established() -> bool:
            doc = self.kubectl_json("get", f"crd/{crd}")
            conditions = (doc.get("status") or {}).get("conditions") or []
            return any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )

        wait_for(established, timeout=timeout, interval=0.5, what=f"CRD {crd} Established")

    def kubectl_json(self, *args: str) -> Any:
        """Run ``kubectl ... -o json`` and return the parsed output."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(
        self, manifest: str | Mapping[str, Any] | Sequence[Mapping[str, Any]], *extra: str
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` a YAML/JSON string, an object or a list of objects."""
        return self.kubectl("apply", "-f", "-", *extra, input=manifest)

    def api_client(self, token: str | None = None) -> Any:
        """Return a ``kubernetes.client.ApiClient`` for this cluster (admin unless *token*)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": token or self.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    def create_token(
        self,
        namespace: str,
        service_account: str,
        *,
        duration: str = "1h",
        audiences: Sequence[str] = (),
        bound_object: tuple[str, str] | None = None,
    ) -> str:
        """Issue a ServiceAccount token through the TokenRequest API (``kubectl create token``).

        *bound_object* is ``(kind, name)`` with kind ``Pod``, ``Secret`` or ``Node``; a token
        bound to a Pod or Node carries the node name, which the API server exposes as the user
        extra ``authentication.kubernetes.io/node-name``.
        """
        args = ["create", "token", service_account, "-n", namespace, f"--duration={duration}"]
        args += [f"--audience={a}" for a in audiences]
        if bound_object is not None:
            kind, name = bound_object
            args += [f"--bound-object-kind={kind}", f"--bound-object-name={name}"]
        return self.kubectl(*args).stdout.strip()

    def kubeconfig_for_token(self, token: str, path: Path, user: str = "user") -> Path:
        """Write a kubeconfig for this cluster that authenticates with *token*; return *path*."""
        return write_kubeconfig(
            path, server=self.server, ca_file=self.ca_file, token=token, user=user
        )

    # -- objects -------------------------------------------------------------------------------

    def create_namespace(self, name: str) -> str:
        """Create namespace *name* plus its ``default`` ServiceAccount (no-op if KCM made it)."""
        self.kubectl("create", "namespace", name)
        sa = self.kubectl("create", "serviceaccount", "default", "-n", name, check=False)
        if sa.returncode != 0 and "already exists" not in sa.stderr:
            raise KubectlError(sa.returncode, sa.args, sa.stdout, sa.stderr)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete namespace *name* without waiting (it only finishes deleting when KCM runs)."""
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)

    def create_node(self, node: Mapping[str, Any], *, wait_ready: bool | None = None) -> Any:
        """Create a Node and (again) set its ``status`` through the status subresource.

        The API server keeps a Node's status on create, and the ``/status`` patch makes sure of
        it even if kwok initialised the Node in between (kwok keeps the values it finds). With
        *wait_ready* (default: when kwok runs) wait until its Ready condition is True. Returns
        the Node as a dict.
        """
        name = node["metadata"]["name"]
        self.kubectl("create", "-f", "-", input=node)
        if node.get("status"):
            patch = json.dumps({"status": node["status"]})
            self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", patch)
        if wait_ready is None:
            wait_ready = self.full
        if wait_ready:
            wait_for(lambda: self.node_ready(name), timeout=60, what=f"node {name} Ready")
        return self.kubectl_json("get", "node", name)

    def wait_crd_established(self, name: str, timeout: float = 60.0) -> None:
        """Wait until CRD *name* has condition Established=True.

        Polls instead of ``kubectl wait``, which fails outright on a CRD created a moment ago
        (no ``status.conditions`` yet).
        """

        def established() -> bool:
            crd = self.kubectl_json("get", "crd", name)
            return any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in crd.get("status", {}).get("conditions", [])
            )

        wait_for(established, timeout=timeout, what=f"CRD {name} Established")

    def node_ready(self, name: str) -> bool:
        """Whether Node *name* has condition Ready=True."""
        node = self.kubectl_json("get", "node", name)
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def delete_node(self, name: str) -> None:
        """Delete Node *name* (ignored if absent)."""
        self.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)


# --------------------------------------------------------------------------------------------
# Fixtures (re-exported by tests/conftest.py)
# --------------------------------------------------------------------------------------------

_ACTIVE: list[ControlPlane] = []


def _stop_all() -> None:
    for cp in _ACTIVE:
        cp.stop()


atexit.register(_stop_all)


def start_control_plane(work_dir: Callable[[], Path]) -> ControlPlane:
    """Start etcd + kube-apiserver in a fresh ``work_dir()``, trying again when a free port was
    taken before we bound it; a failure after every attempt fails the test with the logs."""
    bin_dir = require_binaries(CORE_BINARIES)
    errors: list[str] = []
    for attempt in range(1, START_ATTEMPTS + 1):
        cp = ControlPlane(bin_dir=bin_dir, work_dir=work_dir())
        _ACTIVE.append(cp)
        try:
            cp.start()
            return cp
        except Exception as exc:
            errors.append(f"attempt {attempt}: {exc}\n{cp.log_tails(60)}")
            cp.stop()
            _ACTIVE.remove(cp)
    pytest.fail("control plane failed to start:\n" + "\n".join(errors), pytrace=False)


def stop_control_plane(cp: ControlPlane) -> None:
    """Stop a plane :func:`start_control_plane` started."""
    cp.stop()
    _ACTIVE.remove(cp)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Session-wide etcd + kube-apiserver; yields a :class:`ControlPlane`.

    While it runs, ``os.environ["KUBECONFIG"]`` points at its admin kubeconfig, so nothing in the
    test process (kopf included) can reach a developer's real cluster by default.
    """
    cp = start_control_plane(lambda: tmp_path_factory.mktemp("control-plane"))
    previous = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(cp.kubeconfig)
    try:
        yield cp
    finally:
        if previous is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = previous
        stop_control_plane(cp)


@pytest.fixture(scope="session")
def full_cluster(control_plane: ControlPlane) -> ControlPlane:
    """The session :class:`ControlPlane` plus kube-controller-manager, kube-scheduler and kwok.

    The extra components stop with ``control_plane`` at the end of the session.
    """
    require_binaries(FULL_BINARIES)
    try:
        control_plane.start_full()
    except Exception as exc:
        pytest.fail(
            f"full cluster failed to start: {exc}\n{control_plane.log_tails(60)}", pytrace=False
        )
    return control_plane


def _dns_label(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test (with a ``default`` ServiceAccount)."""
    name = f"t-{_dns_label(request.node.name, 40)}-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture
def node_factory(control_plane: ControlPlane) -> Iterator[Callable[..., list[Any]]]:
    """``node_factory(*nodes, wait_ready=None) -> list[dict]``: create Nodes, delete after.

    Each node is a dict such as :func:`make_gpu_node` returns; see
    :meth:`ControlPlane.create_node`.
    """
    created: list[str] = []

    def create(*nodes: Mapping[str, Any], wait_ready: bool | None = None) -> list[Any]:
        out = []
        for node in nodes:
            out.append(control_plane.create_node(node, wait_ready=wait_ready))
            created.append(node["metadata"]["name"])
        return out

    yield create
    for name in created:
        control_plane.delete_node(name)


def unique_name(prefix: str) -> str:
    """Return ``<prefix>-<6 hex>``, e.g. for cluster-scoped objects such as Nodes."""
    return f"{_dns_label(prefix, 50)}-{uuid.uuid4().hex[:6]}"


def attach_logs_on_failure(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add the component log tails to a failed test's report (called from conftest's hook)."""
    if report.failed and _ACTIVE and "control_plane" in getattr(item, "fixturenames", ()):
        report.sections.append(("control-plane logs (tail)", _ACTIVE[-1].log_tails(30)))


def as_kubectl_sends(value: Any) -> Any:
    """``value`` as ``kubectl apply`` puts it on the wire.

    kubectl decodes the manifest into Go values and encodes them again, and Go's JSON encoder
    writes an integral float64 without a fraction (``1.0`` -> ``1``), which the API server then
    reads as an integer. The Python client would send ``1.0`` verbatim, which the server's CEL
    sees as a double: a transport artefact no ``kubectl apply`` user meets, and ``render``
    models what kubectl sends.
    """
    if isinstance(value, dict):
        return {key: as_kubectl_sends(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_kubectl_sends(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value
