"""Narrow unit tests of controller parts: the discovery-backed resource table, the credential
hook's throttle and the diff base kopf is given (the pure node and owner indexes have theirs:
test_node_tracker.py, test_owned_index.py).

The real API server paths are exercised by tests/integration and tests/e2e; these pin down that a
new kind needs no hand-written path.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import kopf
import pytest

from deepseek_operator.controller.state import keep_out_of_gc
from deepseek_operator.controller.wiring import NoDiffBase
from deepseek_operator.kube.client import (
    ApiError,
    EncodedObject,
    ForeignObject,
    KubeClient,
    KubeError,
    refusal,
)

LWS_DISCOVERY = {
    "kind": "APIResourceList",
    "groupVersion": "leaderworkerset.x-k8s.io/v1",
    "resources": [
        {"name": "leaderworkersets", "kind": "LeaderWorkerSet", "namespaced": True},
        {"name": "leaderworkersets/status", "kind": "LeaderWorkerSet", "namespaced": True},
    ],
}


class DiscoveryOnly(KubeClient):
    """A KubeClient whose API server answers discovery requests only, and counts them."""

    def __init__(self, listings: dict[str, Any]) -> None:
        super().__init__()
        self.listings = listings
        self.requests: list[tuple[str, str]] = []

    def _call(self, method: str, path: str, body: Any, content_type: str, query: Any = None) -> Any:
        self.requests.append((method, path))
        return self.listings.get(path, {"resources": []})


def test_a_new_kind_is_written_through_discovery_without_a_hand_written_path() -> None:
    kube = DiscoveryOnly({"/apis/leaderworkerset.x-k8s.io/v1": LWS_DISCOVERY})
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "dsv41", "namespace": "llm"},
    }
    assert kube.object_path(lws) == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/dsv41"  # fmt: skip
    kube.object_path(lws)
    assert kube.requests == [("GET", "/apis/leaderworkerset.x-k8s.io/v1")]  # cached after one GET


def test_core_group_and_unknown_kinds() -> None:
    core = {"resources": [{"name": "services", "kind": "Service", "namespaced": True}]}
    kube = DiscoveryOnly({"/api/v1": core})
    assert kube.resource("v1", "Service").path("llm", "a") == "/api/v1/namespaces/llm/services/a"
    with pytest.raises(KubeError, match="ComputeDomain"):
        kube.resource("v1", "ComputeDomain")


def test_stores_keep_bodies_without_managed_fields_or_kopf_annotations() -> None:
    from deepseek_operator.actions.children import kept as _kept

    body = {
        "kind": "Deployment",
        "metadata": {"name": "a", "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
        "spec": {"replicas": 1},
    }
    kept = _kept(body)  # type: ignore[arg-type]
    assert kept == {"kind": "Deployment", "metadata": {"name": "a", "resourceVersion": "7"},
                    "spec": {"replicas": 1}}  # fmt: skip
    assert body["metadata"]["managedFields"] == [{"manager": "x"}]  # the event's body is untouched
    serving = {
        "metadata": {
            "name": "a",
            "annotations": {
                "serving.deepseek-operator.io/last-handled-configuration": "{...}",
                "team": "x",
            },
        },
        "spec": {},
    }
    assert _kept(serving)["metadata"]["annotations"] == {"team": "x"}


class _Discovery:
    """A KubeClient stand-in answering ``served`` from a set, counting discovery rounds."""

    def __init__(self, served: set[str]) -> None:
        self.served_kinds = served
        self.asked = 0

    def forget_resources(self) -> None:
        pass

    def served(self, api_version: str, kind: str) -> bool:
        self.asked += 1
        return kind in self.served_kinds


def test_addon_crd_events_decide_what_is_served_before_discovery_catches_up() -> None:
    from deepseek_operator.controller.discovery import LWS_CRD, ClusterApiProbe

    kube = _Discovery(set())  # discovery has not listed the new group yet
    probe = ClusterApiProbe(kube, compute_domain_enabled=True)  # type: ignore[arg-type]
    assert probe.current().leader_worker_set is False
    established = {"status": {"conditions": [{"type": "Established", "status": "True"}]}}
    probe.crd_seen(LWS_CRD, {"status": {"conditions": []}})
    assert probe.current().leader_worker_set is False  # created, not yet established
    probe.crd_seen(LWS_CRD, established)
    assert probe.current().leader_worker_set is True  # the event wins over stale discovery
    probe.crd_seen(LWS_CRD, None)
    assert probe.current().leader_worker_set is False
    assert kube.asked == 4  # one discovery round (four kinds), cached since


def test_the_peering_gate_follows_kopfs_rule() -> None:
    import datetime as dt

    from deepseek_operator.controller.peering_gate import PeeringGate

    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)

    def peer(priority: int, seconds_ago: int, lifetime: int = 8) -> dict[str, Any]:
        seen = (now - dt.timedelta(seconds=seconds_ago)).isoformat()
        return {"priority": priority, "lastseen": seen, "lifetime": lifetime}

    assert PeeringGate(None).active(now)  # standalone always acts
    gate = PeeringGate(50)
    assert not gate.active(now)  # nothing known yet: never act on a guess
    gate.listed_all({"ha": {"status": {"us": peer(50, 1)}}})
    assert gate.active(now)
    gate.seen("MODIFIED", "ha", {"status": {"us": peer(50, 1), "them": peer(70, 2)}})
    assert not gate.active(now)  # a live peer with a higher priority acts
    assert gate.active(now + dt.timedelta(seconds=10))  # ... until its heartbeat is too old
    gate.seen("MODIFIED", "ha", {"status": {"us": peer(50, 1), "them": peer(30, 2)}})
    assert gate.active(now)  # a lower priority waits for us
    gate.seen("MODIFIED", "ha", {"status": {"us": peer(50, 1), "twin": peer(50, 2)}})
    assert not gate.active(now)  # the same priority twice: kopf pauses both
    gate.seen("DELETED", "ha", {})
    assert gate.active(now)


def test_kopf_is_given_no_diff_base_to_deep_copy() -> None:
    body = kopf.Body(
        {"metadata": {"name": "a", "annotations": {"x": "y"}}, "spec": {"big": [1] * 100}}
    )
    storage = NoDiffBase()
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=kopf.BodyEssence())
    assert not patch  # nothing is written back to the object


def test_objects_alive_at_a_full_listing_are_kept_out_of_the_collectors_passes() -> None:
    # (a dict of ints alone is not tracked by the collector at all: each holds a list)
    index = [{"node": [i]} for i in range(1000)]
    before = gc.get_freeze_count()
    try:
        keep_out_of_gc()
        assert gc.get_freeze_count() >= before + len(index)
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual


def _http_error(status: int, message: str | None = None) -> Exception:
    body = json.dumps({"kind": "Status", "message": message}).encode() if message else b"oops"
    return ApiError(status, "Some Reason", body)


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422, 500, 501])
def test_every_http_error_answer_to_a_child_write_is_a_refusal_in_the_servers_words(
    status: int,
) -> None:
    # 500 is what the API server answers a server-side apply with duplicate list-map keys.
    words = "failed to create typed patch object (llm/a; apps/v1, Kind=Deployment): duplicate"
    refused = refusal(_http_error(status, words))
    assert refused is not None and refused.status == status and refused.message == words
    # A body that is not a Status: the HTTP reason phrase, never nothing.
    unreadable = refusal(_http_error(status))
    assert unreadable is not None and unreadable.message == "Some Reason"


@pytest.mark.parametrize("status", [429, 503, 504])
def test_try_again_answers_are_retried_as_outages_not_reported(status: int) -> None:
    assert refusal(_http_error(status, "slow down")) is None


def test_connection_failures_and_timeouts_are_not_refusals() -> None:
    import urllib3

    pool = urllib3.HTTPConnectionPool("127.0.0.1")
    for exc in (
        ConnectionRefusedError(111, "refused"),
        urllib3.exceptions.MaxRetryError(pool, "/api", None),
        urllib3.exceptions.ReadTimeoutError(pool, "/api", "read timed out"),
        urllib3.exceptions.ProtocolError("connection reset"),
        TimeoutError(),
    ):
        assert refusal(exc) is None, exc


class OneObject(KubeClient):
    """A KubeClient whose API server holds at most one object (``existing``), and logs calls."""

    def __init__(self, existing: dict[str, Any] | None) -> None:
        super().__init__()
        self.existing = existing
        self.requests: list[str] = []

    def _call(self, method: str, path: str, body: Any, content_type: str, query: Any = None) -> Any:
        if path == "/api/v1":
            return {"resources": [{"name": "services", "kind": "Service", "namespaced": True}]}
        self.requests.append(method)
        if method == "GET":
            if self.existing is None:
                raise _http_error(404, 'services "a-api" not found')
            return self.existing
        return {"metadata": {"resourceVersion": "7"}}


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a-api", "namespace": "llm"}}


def _owned_by(kind: str, uid: str) -> dict[str, Any]:
    ref = {"kind": kind, "name": "a", "uid": uid, "controller": True}
    return {"metadata": {"name": "a-api", "ownerReferences": [ref]}}


@pytest.mark.parametrize(
    ("existing", "written"),
    [
        (None, True),  # absent: created
        (_owned_by("DeepSeekServing", "uid-a"), True),  # ours (the watch lagged): written
        (_owned_by("LeaderWorkerSet", "uid-l"), False),  # another controller's
        ({"metadata": {"name": "a-api"}}, False),  # nobody's: a server-side apply would adopt it
        (_owned_by("DeepSeekServing", "uid-old"), False),  # a deleted object of the same name
    ],
)
def test_a_child_not_seen_yet_is_read_first_and_written_only_when_absent_or_ours(
    existing: dict[str, Any] | None, written: bool
) -> None:
    kube = OneObject(existing)
    if written:
        kube._apply(EncodedObject.of(SERVICE), only_if_ours="uid-a")
        assert kube.requests == ["GET", "PATCH"]
    else:
        with pytest.raises(ForeignObject) as caught:
            kube._apply(EncodedObject.of(SERVICE), only_if_ours="uid-a")
        assert kube.requests == ["GET"]  # never written over
        assert caught.value.message.startswith("Service/a-api already exists and ")
    kube.requests.clear()
    kube._apply(EncodedObject.of(SERVICE))  # a child the watches show as ours: no read
    assert kube.requests == ["PATCH"]


def test_bodies_go_out_as_utf8_with_only_what_yaml_refuses_escaped() -> None:
    import json as json_

    from deepseek_operator.kube.client import encode_body

    body = {"v": "\x7f \x85 \ufeff \u00e9 \U0001f642 \x01"}
    sent = encode_body(body)
    assert json_.loads(sent) == body  # the same value
    text = sent.decode("utf-8")
    assert "\U0001f642" in text and "\u00e9" in text  # raw, never a surrogate pair
    assert all(c not in text for c in "\x7f\x85\ufeff\x01")  # escaped


def test_retry_after_reads_seconds_and_caps_them() -> None:
    from deepseek_operator.kube.api_errors import RETRY_AFTER_MAX_S, retry_after

    assert retry_after("3", 1.0) == 3.0
    assert retry_after(None, 2.0) == 2.0
    # An HTTP date (allowed by RFC 9110) or garbage: the caller's own back-off.
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 4.0) == 4.0
    assert retry_after("3600", 1.0) == RETRY_AFTER_MAX_S
    assert retry_after("-5", 1.0) == 0.0
