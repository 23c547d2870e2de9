"""Where the API server is and how the operator proves who it is, from the ``kubernetes`` client.

The official client's loaders do all of it, as for ``kubectl``: in a pod the ServiceAccount
(its token file read again every minute, as the kubelet rotates it), else the kubeconfig
(``$KUBECONFIG``, several files merged, else ``~/.kube/config``) with every way a user may
authenticate there: a token or token file, a client certificate, basic auth, an ``exec``
plugin (EKS, GKE, AKS, kubelogin; run again when its token expires) or an ``auth-provider``.
The token comes through the client's refresh hook on every request, so a rotated or expired one
is replaced without a restart.

One :class:`Credentials` serves both of the operator's clients: kopf's (its login handler
returns :meth:`Credentials.connection_info`) and our own writes and watches, which keep raw JSON
(:meth:`Credentials.pool_manager`, :meth:`Credentials.headers`) rather than the client's model
classes, whose parsing would cost more than the writes.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deepseek_operator.errors import DeepSeekOperatorError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# How long an Authorization header is used before the client's refresh hook is asked again.
REFRESH_S = 1.0


class CredentialsError(DeepSeekOperatorError):
    """No usable way to reach the API server (no cluster environment, a kubeconfig we cannot use,
    a credential plugin that failed)."""


class Credentials:
    """The API server's address and how to authenticate to it: a ``kubernetes`` client
    ``Configuration`` and the namespace of the current context."""

    def __init__(self, configuration: Any, namespace: str | None = None) -> None:
        self.configuration = configuration
        self.server = str(configuration.host).rstrip("/")
        self.namespace = namespace
        # The refresh hook may run a credential plugin: once at a time, not once per thread.
        self._lock = threading.Lock()
        self._asked: tuple[float, str | None] | None = None  # (monotonic time, the header)

    def authorization(self) -> str | None:
        """The ``Authorization`` header's value, refreshed by the client when due (an expired
        exec token, a rotated ServiceAccount token); None for a client certificate alone.

        The client's refresh hook re-applies the whole configuration (host, TLS and proxy
        settings) on each call, and in a burst 32 writer threads asked several hundred times a
        second, one at a time: it is asked at most every :data:`REFRESH_S`. The client renews
        an exec token five minutes before it expires and re-reads a ServiceAccount token every
        minute, so that second never sends an expired token."""
        asked = self._asked
        if asked is not None and time.monotonic() - asked[0] < REFRESH_S:
            return asked[1]
        with self._lock:
            asked = self._asked
            if asked is None or time.monotonic() - asked[0] >= REFRESH_S:
                asked = self._asked = (time.monotonic(), self._ask())
            return asked[1]

    def _ask(self) -> str | None:
        cfg = self.configuration
        header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
            "authorization"
        )
        if header:
            return str(header)
        if cfg.username or cfg.password:
            return str(cfg.get_basic_auth_token())
        return None

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header (none for a client certificate alone)."""
        value = self.authorization()
        return {"Authorization": value} if value else {}

    def pool_manager(self, maxsize: int) -> Any:
        """The client's own ``urllib3`` pool (CA, client certificate, ``tls-server-name``,
        ``proxy-url``) with ``maxsize`` kept-alive connections per host."""
        import urllib3
        from kubernetes.client import rest

        self.configuration.connection_pool_maxsize = maxsize
        if not self.configuration.verify_ssl:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        return rest.RESTClientObject(self.configuration).pool_manager

    def ssl_context(self) -> ssl.SSLContext:
        """The same TLS settings for an ``aiohttp`` client (the watches): the cluster CA (none
        checked with ``insecure-skip-tls-verify``) and the client certificate, if any."""
        cfg = self.configuration
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        return context

    def connection_info(self) -> Any:
        """The same credentials as kopf's login result (``kopf.ConnectionInfo``)."""
        import kopf

        cfg = self.configuration
        scheme, _, token = (self.authorization() or "").partition(" ")
        username = password = None
        if scheme.lower() == "basic":  # the client keeps basic auth as a ready header
            username, _, password = base64.b64decode(token).decode().partition(":")
            scheme = token = ""
        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=cfg.ssl_ca_cert,
            insecure=None if cfg.verify_ssl else True,
            scheme=scheme or None,
            token=token or None,
            username=username,
            password=password,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            default_namespace=self.namespace,
            proxy_url=cfg.proxy or None,
        )


@contextmanager
def _plugin_failures() -> Iterator[list[str]]:
    """The errors the client's kubeconfig loader logs instead of raising (an ``exec`` plugin
    that exits non-zero or prints no credential), kept out of the logs and handed back (at
    start only: the root logger's handlers are swapped meanwhile)."""
    failures: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append((record.getMessage() or "a credential plugin failed").splitlines()[0])

    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers[:] = [Keep(logging.ERROR)]
    try:
        yield failures
    finally:
        root.handlers[:] = handlers


def load_credentials(
    environ: Mapping[str, str] | None = None, service_account_dir: Path = SERVICE_ACCOUNT_DIR
) -> Credentials:
    """The cluster's own ServiceAccount when running in a pod, else the kubeconfig (the one
    ``$KUBECONFIG`` names, else ``~/.kube/config``)."""
    from kubernetes import client, config
    from kubernetes.config import incluster_config

    env = os.environ if environ is None else environ
    cfg = client.Configuration()
    token = service_account_dir / "token"
    if env.get("KUBERNETES_SERVICE_HOST") and token.is_file():
        loader = incluster_config.InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=str(token),
            cert_filename=str(service_account_dir / "ca.crt"),
            environ=env,
        )
        try:
            loader.load_and_set(cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise CredentialsError(f"in-cluster config: {exc}") from None
        namespace = service_account_dir / "namespace"
        return Credentials(cfg, namespace.read_text().strip() if namespace.is_file() else None)
    return load_kubeconfig(env.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser()), cfg)


def load_kubeconfig(path: str | Path, cfg: Any = None) -> Credentials:
    """The current context of the kubeconfig ``path`` (several joined by ``os.pathsep``, merged
    as kubectl does), through the client's loader."""
    from kubernetes import client, config

    cfg = cfg if cfg is not None else client.Configuration()
    try:
        with _plugin_failures() as failures:
            config.load_kube_config(config_file=str(path), client_configuration=cfg)  # type: ignore[no-untyped-call]
            _contexts, current = config.list_kube_config_contexts(config_file=str(path))  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, KeyError) as exc:
        where = f"kubeconfig {path}"
        raise CredentialsError(
            f"{where}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    if failures:  # the loader logs a failed plugin and goes on without credentials
        raise CredentialsError(f"kubeconfig {path}: {failures[0]}")
    return Credentials(cfg, (current or {}).get("context", {}).get("namespace") or None)


@functools.cache  # a credential plugin runs once per process, not once per call
def api_client(kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient`` authenticated as ``run`` is (:func:`load_credentials`),
    or from the kubeconfig file ``kubeconfig`` when given: what the agent and
    ``render --from-cluster`` call the API server with."""
    from kubernetes import client

    creds = load_kubeconfig(kubeconfig) if kubeconfig else load_credentials()
    return client.ApiClient(creds.configuration)
