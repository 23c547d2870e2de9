"""A child write the real API server answers with a 5xx is a refusal like a 4xx (issue 26).

kube-apiserver answers a server-side apply whose list-map has duplicate keys (a container's
``env`` with one name twice) with HTTP 500 "failed to create typed patch object", every time.
Admission now refuses such a DeepSeekServing, so the body is spoiled at the child-write level:
the real :class:`Reconciler` and :class:`KubeClient` against the real API server, the client
adding a duplicate env entry to the Deployment on its way out. The status, the Warning Event
and the back-off are what the operator would show for any such answer.
"""

from __future__ import annotations

import asyncio
import copy
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from deepseek_operator.actions import BACKOFF_FIRST_S
from deepseek_operator.controller.reconcile import Reconciler
from deepseek_operator.engine.cluster_apis import ClusterApis
from deepseek_operator.kube.client import EncodedObject, KubeClient, refusal
from deepseek_operator.kube.credentials import load_kubeconfig
from tests.k8s.cluster import ControlPlane, start_control_plane, stop_control_plane
from tests.k8s.conditions import condition
from tests.k8s.operator import install_crds
from tests.unit.factories import gb200_pool

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((REPO / "examples/dsv41-flash-gb200.yaml").read_text())


class DuplicateEnvKube(KubeClient):
    """The real client against the test cluster; while ``spoil`` is set, each Deployment goes
    out with its first env entry twice. Records the HTTP status of every refused write."""

    def __init__(self, cp: ControlPlane) -> None:
        super().__init__(credentials=load_kubeconfig(cp.kubeconfig))
        self.spoil = True
        self.answers: list[int] = []

    def _apply(self, obj: EncodedObject, only_if_ours: str | None = None) -> Any:
        if self.spoil and obj.kind == "Deployment":
            spoiled = obj.decoded()
            env = spoiled["spec"]["template"]["spec"]["containers"][0]["env"]
            env.append(dict(env[0]))
            obj = EncodedObject.of(spoiled)
        try:
            return super()._apply(obj, only_if_ours)
        except Exception as exc:
            self.answers.append(int(getattr(exc, "status", 0) or 0))
            raise


@pytest.fixture(scope="module")
def private_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of this module's own, with our CRDs: on the session's, an operator started
    by an earlier test reconciles every DeepSeekServing too, and its (unspoiled) apply would
    race the Reconciler under test."""
    cp = start_control_plane(lambda: tmp_path_factory.mktemp("private-plane"))
    try:
        install_crds(cp)
        cp.create_namespace("refusals")
        yield cp
    finally:
        stop_control_plane(cp)


def test_a_500_answer_to_a_child_write_is_in_the_status_an_event_and_backs_off(
    private_plane: ControlPlane,
) -> None:
    cp, namespace = private_plane, "refusals"
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": "dup", "namespace": namespace}
    doc["spec"]["env"] = [{"name": "A", "value": "1"}]
    cp.apply(doc)
    kube = DuplicateEnvKube(cp)
    events: list[tuple[str, str, str]] = []
    rec = Reconciler(
        kube,
        post_event=lambda body, etype, reason, message: events.append((etype, reason, message)),
        apis_of=ClusterApis,
    )
    inventory = gb200_pool()

    def reconcile(trigger: str = "create") -> Any:
        return asyncio.run(
            rec.reconcile(
                (namespace, "dup"),
                lambda: cp.kubectl_json("get", "dss", "dup", "-n", namespace),
                lambda: inventory,
                dict,  # the watches show no child: each is read before it is written
                trigger,
            )
        )

    first = reconcile()
    # The API server's answer is a 5xx (the reason it used to be retried out of sight).
    assert kube.answers and all(500 <= a < 600 for a in kube.answers), kube.answers
    assert first.retry_after == BACKOFF_FIRST_S
    assert len(first.refused) == 1 and first.refused[0].startswith("Deployment/dup: ")
    body = cp.kubectl_json("get", "dss", "dup", "-n", namespace)
    applied = condition(body, "WorkloadApplied")
    assert applied["status"] == "False" and applied["reason"] == "WorkloadRefused"
    assert "Deployment/dup" in applied["message"] and "duplicate" in applied["message"]
    ready = condition(body, "Ready")
    assert ready["reason"] == "WorkloadRefused" and ready["message"] == applied["message"]
    refusals = [e for e in events if e[1] == "WorkloadRefused"]
    assert [e[:2] for e in refusals] == [("Warning", "WorkloadRefused")]
    assert "Deployment/dup" in refusals[0][2] and "duplicate" in refusals[0][2]
    # The rest of the workload was written: the Service is there (and ours).
    service = cp.kubectl_json("get", "service", "dup-api", "-n", namespace)
    assert service["metadata"]["ownerReferences"][0]["uid"] == body["metadata"]["uid"]

    # The same answer again: twice the wait, no second Event, no status rewrite.
    version = body["metadata"]["resourceVersion"]
    second = reconcile("backoff")
    assert second.retry_after == 2 * BACKOFF_FIRST_S
    assert len([e for e in events if e[1] == "WorkloadRefused"]) == 1
    assert cp.kubectl_json("get", "dss", "dup", "-n", namespace)["metadata"]["resourceVersion"] == (
        version
    )

    # The body is fine again: written, the condition flips, the back-off resets.
    kube.spoil = False
    done = reconcile()
    assert not done.refused and done.retry_after is None
    body = cp.kubectl_json("get", "dss", "dup", "-n", namespace)
    assert condition(body, "WorkloadApplied")["status"] == "True"
    cp.kubectl_json("get", "deployment", "dup", "-n", namespace)


def test_the_api_servers_5xx_for_duplicate_keys_is_classified_as_a_refusal(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The classification on the API server's actual answer, not on a hand-made exception."""
    kube = DuplicateEnvKube(control_plane)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "dup", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "dup"}},
            "template": {
                "metadata": {"labels": {"app": "dup"}},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "env": [{"name": "A", "value": "1"}]}
                    ]
                },
            },
        },
    }
    with pytest.raises(Exception) as caught:
        kube._apply(EncodedObject.of(deployment))
    refused = refusal(caught.value)
    assert refused is not None and 500 <= refused.status < 600
    assert "duplicate" in refused.message
