"""Where the API server is and how the operator proves who it is: in-cluster or a kubeconfig.

One :class:`Credentials` serves both of the operator's clients: kopf's (its login handler
returns :meth:`Credentials.connection_info`) and our own writes and watches
(:meth:`Credentials.pool_manager`, :meth:`Credentials.headers`). The ``kubernetes`` package is
not used here: importing it costs the operator about 11 MB of its memory (every API model class
of every group), for a configuration loader.

In the cluster the ServiceAccount's token file is read again at most every
:data:`TOKEN_RECHECK_S` (the kubelet rotates it). From a kubeconfig (``$KUBECONFIG``, several
files merged as kubectl does, else ``~/.kube/config``) the current context's cluster and user
are read: a bearer token or token file, a client certificate and key (files or inline data),
basic auth, the cluster's CA, ``insecure-skip-tls-verify``, ``tls-server-name`` and
``proxy-url``. A user who authenticates with an ``exec`` plugin or an ``auth-provider`` is
refused with a :class:`CredentialsError` that says so.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deepseek_operator.errors import DeepSeekOperatorError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# How often a token file is read again (a ServiceAccount token is rotated on a scale of minutes).
TOKEN_RECHECK_S = 10.0


class CredentialsError(DeepSeekOperatorError):
    """No usable way to reach the API server (no cluster environment, a kubeconfig we cannot use)."""


@dataclass
class Credentials:
    """The API server's address and how to authenticate to it."""

    server: str  # https://host:port, no trailing slash
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    token: str | None = None
    token_file: str | None = None  # read again at most every TOKEN_RECHECK_S
    cert_file: str | None = None
    key_file: str | None = None
    username: str | None = None
    password: str | None = None
    namespace: str | None = None
    _read_at: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def current_token(self) -> str | None:
        """The bearer token: the static one, or the token file's content (re-read at most
        every :data:`TOKEN_RECHECK_S`)."""
        if self.token_file is None:
            return self.token
        with self._lock:
            now = time.monotonic()
            if self.token is None or now - self._read_at >= TOKEN_RECHECK_S:
                self.token = Path(self.token_file).read_text().strip()
                self._read_at = now
            return self.token

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header (none for a client certificate alone)."""
        token = self.current_token()
        if token:
            return {"Authorization": f"Bearer {token}"}
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def pool_manager(self, maxsize: int) -> Any:
        """A ``urllib3`` pool (through ``proxy-url`` when set) that verifies the API server's
        certificate against the cluster CA and presents the client certificate, if any;
        ``maxsize`` kept-alive connections per host."""
        import urllib3

        tls: dict[str, Any] = {
            "maxsize": maxsize,
            "cert_reqs": "CERT_NONE" if self.insecure else "CERT_REQUIRED",
            "ca_certs": None if self.insecure else self.ca_file,
            "cert_file": self.cert_file,
            "key_file": self.key_file,
        }
        if self.tls_server_name and not self.insecure:
            tls["server_hostname"] = self.tls_server_name
        if self.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        if self.proxy_url:
            return urllib3.ProxyManager(self.proxy_url, **tls)
        return urllib3.PoolManager(**tls)

    def connection_info(self) -> Any:
        """The same credentials as kopf's login result (``kopf.ConnectionInfo``)."""
        import kopf

        token = self.current_token()
        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=self.ca_file,
            insecure=self.insecure or None,
            scheme="Bearer" if token else None,
            token=token or None,
            username=None if token else self.username,
            password=None if token else self.password,
            certificate_path=self.cert_file,
            private_key_path=self.key_file,
            default_namespace=self.namespace,
            proxy_url=self.proxy_url,
        )


def load_credentials(
    environ: Mapping[str, str] | None = None, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Credentials:
    """The cluster's own ServiceAccount when running in a pod, else the kubeconfig."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = service_account_dir / "token"
    if host and port and token_file.is_file():
        if ":" in host:  # IPv6
            host = f"[{host}]"
        ca = service_account_dir / "ca.crt"
        namespace = service_account_dir / "namespace"
        return Credentials(
            server=f"https://{host}:{port}",
            ca_file=str(ca) if ca.is_file() else None,
            token_file=str(token_file),
            namespace=namespace.read_text().strip() if namespace.is_file() else None,
        )
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths:
        paths = [str(Path(env.get("HOME") or Path.home()) / ".kube" / "config")]
    return load_kubeconfig([Path(p) for p in paths])


def load_kubeconfig(paths: list[Path]) -> Credentials:
    """The current context's credentials from the kubeconfig ``paths``, merged as kubectl does
    (the first file to name a cluster, user or context wins; the first current-context)."""
    merged: dict[str, dict[str, tuple[Path, dict[str, Any]]]] = {
        "clusters": {},
        "users": {},
        "contexts": {},
    }
    current = ""
    found = False
    for path in paths:
        if not path.is_file():
            continue
        found = True
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise CredentialsError(f"kubeconfig {path}: cannot be read: {exc}") from None
        if not isinstance(doc, dict):
            raise CredentialsError(f"kubeconfig {path}: not a mapping")
        current = current or str(doc.get("current-context") or "")
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") is not None:
                    value = entry.get(inner)
                    body: dict[str, Any] = value if isinstance(value, dict) else {}
                    merged[section].setdefault(str(entry["name"]), (path, body))
    if not found:
        raise CredentialsError(
            "not in a cluster (no KUBERNETES_SERVICE_HOST and ServiceAccount token) and no"
            f" kubeconfig at {os.pathsep.join(str(p) for p in paths)}"
        )
    if current not in merged["contexts"]:
        raise CredentialsError(f"kubeconfig: current-context {current!r} is not a context")
    context = merged["contexts"][current][1]
    cluster_name, user_name = str(context.get("cluster") or ""), str(context.get("user") or "")
    if cluster_name not in merged["clusters"]:
        raise CredentialsError(f"kubeconfig: context {current!r} names no known cluster")
    cluster_path, cluster = merged["clusters"][cluster_name]
    user_path, user = merged["users"].get(user_name, (cluster_path, {}))
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise CredentialsError(
                f"kubeconfig user {user_name!r} authenticates with {plugin!r}, which"
                " `deepseek-operator run` does not run: give the user a token, a tokenFile or"
                " a client certificate, or run the operator in the cluster"
            )
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise CredentialsError(f"kubeconfig: cluster {cluster_name!r} has no server")
    return Credentials(
        server=server,
        ca_file=_file_or_data(cluster, "certificate-authority", cluster_path),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy_url=cluster.get("proxy-url") or None,
        token=user.get("token") or None,
        # As kubectl: a token in the kubeconfig wins over a token file.
        token_file=None if user.get("token") else _path(user.get("tokenFile"), user_path),
        cert_file=_file_or_data(user, "client-certificate", user_path),
        key_file=_file_or_data(user, "client-key", user_path),
        username=user.get("username"),
        password=user.get("password"),
        namespace=context.get("namespace") or None,
    )


def _path(value: Any, relative_to: Path) -> str | None:
    """A kubeconfig path, relative ones taken from the kubeconfig's own folder."""
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else relative_to.parent / path)


def _file_or_data(section: Mapping[str, Any], key: str, relative_to: Path) -> str | None:
    """``key`` as a file path, or ``key-data`` (base64) written to a private temporary file (TLS
    libraries read certificates and keys from files only)."""
    data = section.get(f"{key}-data")
    if not data:
        return _path(section.get(key), relative_to)
    try:
        raw = base64.b64decode(str(data), validate=True)
    except ValueError:
        raise CredentialsError(f"kubeconfig: {key}-data is not base64") from None
    handle, name = tempfile.mkstemp(prefix="deepseek-operator-", suffix=".pem")
    with os.fdopen(handle, "wb") as out:  # mkstemp: readable by this user only
        out.write(raw)
    atexit.register(_remove, name)  # a private key is not left behind in /tmp
    return name


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
