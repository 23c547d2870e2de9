"""The operator's credentials (kube/credentials.py), as the ``kubernetes`` client's loaders read them.

The real API server tests (every e2e test runs ``deepseek-operator run`` with a kubeconfig,
tests/e2e/test_exec_credentials.py with an exec plugin, the container and kind tiers in a pod)
show that requests get through; these pin down what kopf and our own client are handed.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deepseek_operator.kube.credentials import CredentialsError, load_credentials, load_kubeconfig


def _kubeconfig(path: Path, user: dict[str, Any], **cluster: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "ctx",
                "contexts": [
                    {"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}}
                ],
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://10.0.0.1:6443/", **cluster}}
                ],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def _plugin(tmp_path: Path, body: str) -> dict[str, Any]:
    script = tmp_path / "plugin.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}}


def test_a_kubeconfig_token_user_gets_a_bearer_header_and_the_same_kopf_login(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("CA")
    path = _kubeconfig(tmp_path / "config", {"token": "t0k"}, **{"certificate-authority": "ca.crt"})
    creds = load_kubeconfig(path)
    assert creds.server == "https://10.0.0.1:6443"
    assert creds.configuration.ssl_ca_cert == str(ca)  # relative to the kubeconfig's folder
    assert creds.headers() == {"Authorization": "Bearer t0k"}
    info = creds.connection_info()
    assert (info.server, info.scheme, info.token, info.ca_path) == (
        "https://10.0.0.1:6443",
        "Bearer",
        "t0k",
        str(ca),
    )
    assert info.default_namespace == "ns1"


def test_an_exec_plugin_user_gets_the_plugins_token(tmp_path: Path) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    user = _plugin(tmp_path, f"echo '{json.dumps(credential)}'\n")
    creds = load_kubeconfig(_kubeconfig(tmp_path / "config", user))
    assert creds.headers() == {"Authorization": "Bearer from-plugin"}
    assert creds.connection_info().token == "from-plugin"


def test_a_failing_exec_plugin_is_one_error_naming_what_it_said(tmp_path: Path) -> None:
    user = _plugin(tmp_path, "echo 'no SSO session' >&2\nexit 3\n")
    with pytest.raises(CredentialsError) as info:
        load_kubeconfig(_kubeconfig(tmp_path / "config", user))
    assert "exec: process returned 3. no SSO session" in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_inline_certificates_are_written_to_files(tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode(),
    }
    cluster = {"certificate-authority-data": base64.b64encode(b"CA").decode()}
    creds = load_kubeconfig(_kubeconfig(tmp_path / "config", user, **cluster))
    cfg = creds.configuration
    assert Path(cfg.cert_file).read_bytes() == b"CERT"
    assert Path(cfg.key_file).read_bytes() == b"KEY"
    assert Path(cfg.ssl_ca_cert).read_bytes() == b"CA"
    assert creds.headers() == {}  # the certificate authenticates


def test_basic_auth_and_insecure_and_proxy(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "config",
        {"username": "ann", "password": "pw"},
        **{"insecure-skip-tls-verify": True, "proxy-url": "http://proxy:3128"},
    )
    creds = load_kubeconfig(path)
    assert creds.headers() == {"Authorization": "Basic " + base64.b64encode(b"ann:pw").decode()}
    info = creds.connection_info()
    assert (info.username, info.password, info.token, info.insecure) == ("ann", "pw", None, True)
    assert info.proxy_url == "http://proxy:3128"
    assert type(creds.pool_manager(4)).__name__ == "ProxyManager"


def test_no_kubeconfig_and_no_cluster_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError) as info:
        load_credentials({"KUBECONFIG": str(tmp_path / "nope")}, tmp_path / "sa")
    assert str(tmp_path / "nope") in str(info.value)


def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("one")
    (sa / "ca.crt").write_text("CA")
    (sa / "namespace").write_text("ops")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = load_credentials(env, sa)
    assert creds.server == "https://[fd00::1]:443"
    assert (creds.configuration.ssl_ca_cert, creds.namespace) == (str(sa / "ca.crt"), "ops")
    assert creds.headers() == {"Authorization": "bearer one"}
    # The client's refresh hook re-reads the file when due (every minute): the token kopf and
    # our writes get comes through it on every call.
    assert creds.configuration.refresh_api_key_hook is not None


def test_run_refuses_a_failing_exec_plugin_at_start_in_one_line(tmp_path: Path) -> None:
    user = _plugin(tmp_path, "echo 'token expired, run aws sso login' >&2\nexit 1\n")
    path = _kubeconfig(tmp_path / "config", user)
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(path), "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "run", "--standalone"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": ":".join(sys.path)},
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "exec: process returned 1. token expired, run aws sso login" in lines[0]
