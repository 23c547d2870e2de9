"""The operator's credentials (controller/credentials.py): in-cluster, kubeconfig, refusals.

The real API server tests (every e2e test runs ``deepseek-operator run`` with a kubeconfig, the
container and kind tiers in a pod) show that requests get through; these pin down the parsing.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deepseek_operator.controller import credentials as creds_module
from deepseek_operator.controller.credentials import (
    TOKEN_RECHECK_S,
    CredentialsError,
    load_credentials,
    load_kubeconfig,
)


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


def test_a_kubeconfig_token_user_gets_a_bearer_header_and_the_same_kopf_login(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("CA")
    path = _kubeconfig(tmp_path / "config", {"token": "t0k"}, **{"certificate-authority": "ca.crt"})
    creds = load_kubeconfig([path])
    assert creds.server == "https://10.0.0.1:6443"
    assert creds.ca_file == str(ca)  # relative to the kubeconfig's folder
    assert creds.headers() == {"Authorization": "Bearer t0k"}
    info = creds.connection_info()
    assert (info.server, info.scheme, info.token, info.ca_path) == (
        "https://10.0.0.1:6443",
        "Bearer",
        "t0k",
        str(ca),
    )
    assert info.default_namespace == "ns1"


def test_inline_certificates_are_written_to_private_files(tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode(),
    }
    cluster = {"certificate-authority-data": base64.b64encode(b"CA").decode()}
    creds = load_kubeconfig([_kubeconfig(tmp_path / "config", user, **cluster)])
    assert creds.cert_file and creds.key_file and creds.ca_file
    assert Path(creds.cert_file).read_bytes() == b"CERT"
    assert Path(creds.key_file).read_bytes() == b"KEY"
    assert Path(creds.ca_file).read_bytes() == b"CA"
    assert Path(creds.key_file).stat().st_mode & 0o077 == 0
    assert creds.headers() == {}  # the certificate authenticates


def test_basic_auth_and_insecure_and_proxy(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "config",
        {"username": "ann", "password": "pw"},
        **{"insecure-skip-tls-verify": True, "proxy-url": "http://proxy:3128"},
    )
    creds = load_kubeconfig([path])
    assert creds.headers() == {"Authorization": "Basic " + base64.b64encode(b"ann:pw").decode()}
    assert creds.insecure and creds.proxy_url == "http://proxy:3128"
    pool = creds.pool_manager(4)
    assert type(pool).__name__ == "ProxyManager"


@pytest.mark.parametrize("plugin", ["exec", "auth-provider"])
def test_a_credential_plugin_is_refused_by_name(tmp_path: Path, plugin: str) -> None:
    path = _kubeconfig(tmp_path / "config", {plugin: {"command": "aws"}})
    with pytest.raises(CredentialsError) as info:
        load_kubeconfig([path])
    assert f"kubeconfig user 'u' authenticates with '{plugin}'" in str(info.value)


def test_kubeconfigs_merge_the_first_file_wins(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path / "a", {"token": "first"})
    second = tmp_path / "b"
    second.write_text(
        yaml.safe_dump(
            {
                "current-context": "other",
                "users": [{"name": "u", "user": {"token": "second"}}],
                "clusters": [{"name": "c", "cluster": {"server": "https://elsewhere"}}],
            }
        )
    )
    creds = load_kubeconfig([tmp_path / "missing", first, second])
    assert (creds.server, creds.token) == ("https://10.0.0.1:6443", "first")


def test_no_kubeconfig_and_no_cluster_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError) as info:
        load_credentials({"KUBECONFIG": str(tmp_path / "nope")}, tmp_path / "sa")
    assert str(tmp_path / "nope") in str(info.value)
    path = _kubeconfig(tmp_path / "config", {"token": "x"})
    path.write_text(path.read_text().replace("current-context: ctx", "current-context: gone"))
    with pytest.raises(CredentialsError, match="current-context 'gone' is not a context"):
        load_kubeconfig([path])


def test_in_cluster_reads_the_service_account_and_rereads_a_rotated_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("one\n")
    (sa / "ca.crt").write_text("CA")
    (sa / "namespace").write_text("ops")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    clock = [1000.0]
    monkeypatch.setattr(creds_module.time, "monotonic", lambda: clock[0])
    creds = load_credentials(env, sa)
    assert creds.server == "https://[fd00::1]:443"
    assert (creds.ca_file, creds.namespace) == (str(sa / "ca.crt"), "ops")
    assert creds.headers() == {"Authorization": "Bearer one"}
    (sa / "token").write_text("two\n")
    clock[0] += TOKEN_RECHECK_S / 2
    assert creds.current_token() == "one"  # not read on every request
    clock[0] += TOKEN_RECHECK_S
    assert creds.current_token() == "two"
    assert creds.connection_info().token == "two"  # kopf's login after a 401 gets the new one


def test_the_operator_process_runs_kopf_without_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "from deepseek_operator.controller.main import without_kubernetes_client\n"
        "without_kubernetes_client()\n"
        "import kopf\n"
        "from deepseek_operator.controller.wiring import registry\n"
        "registry()\n"
        "print(sorted(m for m in sys.modules if m.startswith('kubernetes') and sys.modules[m]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_refuses_an_exec_kubeconfig_at_start_in_one_line(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", {"exec": {"command": "aws", "args": ["eks"]}})
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
    assert "kubeconfig user 'u' authenticates with 'exec'" in lines[0]


def test_a_token_file_is_read_relative_to_the_kubeconfig_and_a_token_wins(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    creds = load_kubeconfig([_kubeconfig(tmp_path / "config", {"tokenFile": "tok"})])
    assert creds.headers() == {"Authorization": "Bearer from-file"}
    both = load_kubeconfig([_kubeconfig(tmp_path / "config", {"tokenFile": "tok", "token": "t"})])
    assert both.headers() == {"Authorization": "Bearer t"}
