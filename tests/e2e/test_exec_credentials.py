"""``deepseek-operator run`` with a kubeconfig whose user is an ``exec`` credential plugin.

The plugin is a script, as ``aws eks get-token`` or ``kubelogin`` would be: it prints an
``ExecCredential`` holding a token the local API server accepts (its admin token) and counts its
own runs in a file. The credential expires soon after the client's five-minute safety margin,
so the client runs the plugin again while the operator works, and the operator, whose kopf
watches and own writes both authenticate through it, keeps reconciling. A plugin that fails
ends ``run`` with one line and exit status 1.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tests.gpu_nodes import gb200_tray
from tests.k8s.cluster import ControlPlane, wait_for
from tests.k8s.conditions import wait_condition
from tests.k8s.operator import REPO, running_operator
from tests.servings import serving

pytestmark = pytest.mark.e2e

# The client treats a credential as expired five minutes before its expiry: this one is due
# for a new run this many seconds after it is issued.
DUE_AFTER_S = 20


def _exec_kubeconfig(cp: ControlPlane, directory: pathlib.Path, script: str) -> pathlib.Path:
    plugin = directory / "issue-token"
    plugin.write_text("#!/bin/sh\n" + script)
    plugin.chmod(0o755)
    path = directory / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": cp.server,
                            "certificate-authority": str(cp.ca_file),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "sso",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": str(plugin),
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "sso"}}],
                "current-context": "local",
            }
        )
    )
    return path


def _token_plugin(cp: ControlPlane, runs: pathlib.Path) -> str:
    """A plugin that appends a line to ``runs`` and prints a credential expiring soon."""
    return (
        f"echo run >> {runs}\n"
        f"expiry=$(date -u -d '+{300 + DUE_AFTER_S} seconds' +%Y-%m-%dT%H:%M:%SZ)\n"
        "cat <<EOF\n"
        '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",'
        f' "status": {{"token": "{cp.token}", "expirationTimestamp": "$expiry"}}}}\n'
        "EOF\n"
    )


def test_run_authenticates_with_an_exec_plugin_and_runs_it_again_when_due(
    full_cluster: ControlPlane,
    crds: ControlPlane,
    namespace: str,
    node_factory: Any,
    tmp_path: pathlib.Path,
) -> None:
    runs = tmp_path / "runs"
    kubeconfig = _exec_kubeconfig(full_cluster, tmp_path, _token_plugin(full_cluster, runs))
    node_factory(gb200_tray(f"{namespace}-gb0", namespace))
    with running_operator(full_cluster, tmp_path, kubeconfig):
        full_cluster.apply(serving(namespace, "first"))
        first = wait_condition(full_cluster, namespace, "BackendResolved", "True", name="first")
        deployment = full_cluster.kubectl_json("get", "deployment", "first", "-n", namespace)
        assert deployment["metadata"]["ownerReferences"][0]["uid"] == first["metadata"]["uid"]
        issued = dt.datetime.now(dt.UTC)  # no earlier than the plugin's first run
        wait_for(
            lambda: dt.datetime.now(dt.UTC) - issued > dt.timedelta(seconds=DUE_AFTER_S),
            timeout=DUE_AFTER_S + 10,
            what="the credential due",
        )
        # The writes for this one need a token: the client runs the plugin again for it.
        full_cluster.apply(serving(namespace, "second"))
        wait_condition(full_cluster, namespace, "BackendResolved", "True", name="second")
        assert full_cluster.kubectl_json("get", "deployment", "second", "-n", namespace)
        assert len(runs.read_text().splitlines()) >= 2


def test_a_failing_plugin_ends_run_in_one_line(
    control_plane: ControlPlane, tmp_path: pathlib.Path
) -> None:
    kubeconfig = _exec_kubeconfig(
        control_plane, tmp_path, "echo 'the SSO session expired' >&2\nexit 1\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "run", "--standalone"],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "exec: process returned 1. the SSO session expired" in lines[0]
