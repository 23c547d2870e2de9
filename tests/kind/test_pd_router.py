"""A prefill/decode pair behind the operator's vLLM router, end to end on real pod networking.

The 1P1D example ``examples/dsv41-flash-1p1d-gb200.yaml`` (one prefill and one decode pool, TP4
with expert parallelism per GB200 tray) on the vLLM stand-in, with small CPU/memory requests and
the router's ``round_robin`` policy (``cache_aware``, the default, may pin a prompt to one decode
pod; the prompts here are distinct anyway). The router image is the one the README's recipe
builds (target ``router``), loads with ``kind load`` and hands to the chart (``routerImage``): the
real vllm-router, discovering the engines through the API server with its own ServiceAccount.

* ``kubectl apply`` of the serving; Ready (router and both pools) is timed.
* A client pod of another namespace sends completions to ``<name>-api.<ns>.svc`` (cluster DNS):
  the answer is the decode stand-in's, which names the prefill pod whose side channel it opened
  (``podIP:5600``, handed over in ``kv_transfer_params``) and itself; the Service's only endpoint
  is the router pod, and the same client cannot open an engine's HTTP port directly (the engines'
  NetworkPolicy admits the router only), so the answer came through the router.
* Decode scaled 1 -> 2: both decode pods answer requests.
* The prefill pod deleted: requests succeed again (through the new prefill pod) within a bound;
  the time is printed.
* The NIXL side channel (prefill ``podIP:5600``): the decode pod opens it; a pod of another
  namespace and a pod of this namespace carrying another serving's labels cannot (the prefill
  workload's NetworkPolicy, enforced by kube-network-policies).

Three TP4 pods of V4.1-Flash need 12 GPUs of at least 146390 MiB (the checkpoint's weights per
GPU at TP4; an H200 has 143771), more than the cluster's two GB200 trays hold. For this file the
H200 node is relabelled as a third GB200 tray of the same NVLink clique (the labels GPU Feature
Discovery writes, as hack/kind-cluster.yaml sets them on the trays; no node here has a GPU) and
its H200 labels are put back at the end.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import wait_for
from tests.kind.conftest import GB200_TRAYS, H200_NODE, ROOT, STANDIN_IMAGE, KindCluster

pytestmark = pytest.mark.kind

NS = "llm"
NAME = "dsv41-pd"
API = f"{NAME}-api"
URL = f"http://{API}.{NS}.svc:8000/v1/completions"
CLIENT_NS = "pd-client"
SIDE_CHANNEL_PORT = 5600
ENGINE_PORT = 8000
PD_ROLE = "serving.deepseek-operator.io/pd-role"
INSTANCE = "app.kubernetes.io/instance"
RECOVERY_BOUND_S = 120
#: Node labels of a GB200 tray (hack/kind-cluster.yaml's trays), given to the H200 node here.
GPU_LABELS = (
    "product", "family", "compute.major", "compute.minor", "count", "memory", "clique",
)  # fmt: skip

# Sends one completion per prompt to the router's Service; prints a JSON list of
# [status, answer's "standin" field or error text]. Runs in a client pod (Python, no deps).
SEND = r"""
import json, sys, urllib.error, urllib.request
url, prompts = sys.argv[1], json.loads(sys.argv[2])
out = []
for prompt in prompts:
    body = json.dumps({"model": "dsv41", "prompt": prompt, "max_tokens": 8}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = json.loads(resp.read())
            out.append([resp.status, answer.get("standin"), answer["choices"][0]["text"]])
    except urllib.error.HTTPError as exc:
        out.append([exc.code, exc.read().decode(errors="replace")[:300], ""])
    except OSError as exc:
        out.append([0, repr(exc), ""])
print(json.dumps(out))
"""

# Opens host:port with a timeout; prints "open <first line, if the peer speaks first>" or
# "closed <error>" (the connection itself failed: refused, or dropped until the timeout).
CONNECT = r"""
import socket, sys
try:
    conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
except OSError as exc:
    print("closed", repr(exc))
    sys.exit(0)
with conn:
    conn.settimeout(2)
    try:
        line = conn.recv(256).decode(errors="replace").strip()
    except OSError:
        line = ""  # an HTTP server waits for the request: connected is what counts
    print("open", line)
"""


def serving(decode_replicas: int = 1) -> dict[str, Any]:
    """The 1P1D example on the stand-in, small requests, round-robin routing."""
    doc = yaml.safe_load((ROOT / "examples" / "dsv41-flash-1p1d-gb200.yaml").read_text())
    assert doc["metadata"] == {"name": NAME, "namespace": NS}
    doc["spec"]["image"] = STANDIN_IMAGE
    doc["spec"]["router"] = {"policy": "round_robin"}
    for role in doc["spec"]["disaggregation"]["roles"]:
        role["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
        if role["role"] == "decode":
            role["replicas"] = decode_replicas
    return doc


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def live_pods(kc: KindCluster, selector: str) -> list[dict[str, Any]]:
    """Running, Ready pods of *selector* in NS, not being deleted."""
    items = kc.kubectl_json("get", "pods", "-n", NS, "-l", selector)["items"]
    ready = []
    for pod in items:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
        if conds.get("Ready") == "True" and pod["status"].get("podIP"):
            ready.append(pod)
    return ready


def role_pods(kc: KindCluster, role: str) -> list[dict[str, Any]]:
    return live_pods(kc, f"{INSTANCE}={NAME},{PD_ROLE}={role}")


def ready(kc: KindCluster, decode: int) -> dict[str, Any] | None:
    """The serving once Ready=True with its router and *decode* decode pods ready."""
    got = kc.kubectl("get", "dss", NAME, "-n", NS, "-o", "json", check=False)
    if got.returncode != 0:
        return None
    obj = json.loads(got.stdout)
    if condition(obj, "Ready").get("status") != "True":
        return None
    if obj["status"].get("router", {}).get("readyReplicas") != 1:
        return None
    if len(role_pods(kc, "prefill")) != 1 or len(role_pods(kc, "decode")) != decode:
        return None
    return obj


def send(kc: KindCluster, client: str, prompts: list[str]) -> list[list[Any]]:
    out = kc.exec_python(client, CLIENT_NS, SEND, URL, json.dumps(prompts)).stdout
    result: list[list[Any]] = json.loads(out.strip().splitlines()[-1])
    return result


def connect(kc: KindCluster, pod: str, ns: str, host: str, port: int, timeout: float = 3) -> str:
    return kc.exec_python(pod, ns, CONNECT, host, str(port), str(timeout)).stdout.strip()


def as_gb200_tray(kc: KindCluster, node: str) -> dict[str, str]:
    """Give *node* the GPU labels and count of a GB200 tray; returns its GPU labels before."""
    labels = kc.kubectl_json("get", "node", node)["metadata"]["labels"]
    tray = kc.kubectl_json("get", "node", GB200_TRAYS[0])["metadata"]["labels"]
    keys = [f"nvidia.com/gpu.{k}" for k in GPU_LABELS]
    before = {k: labels[k] for k in keys if k in labels}
    kc.kubectl("label", "node", node, "--overwrite", *[f"{k}={tray[k]}" for k in keys if k in tray])
    gpus = tray["nvidia.com/gpu.count"]
    body = {
        "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}
    }
    kc.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(body)
    )
    return before


def restore_node(kc: KindCluster, node: str, before: dict[str, str]) -> None:
    keys = [f"nvidia.com/gpu.{k}" for k in GPU_LABELS]
    gone = [f"{k}-" for k in keys if k not in before]
    kc.kubectl("label", "node", node, "--overwrite", *[f"{k}={v}" for k, v in before.items()])
    if gone:
        kc.kubectl("label", "node", node, *gone, check=False)
    gpus = before.get("nvidia.com/gpu.count", "0")
    body = {
        "status": {"capacity": {"nvidia.com/gpu": gpus}, "allocatable": {"nvidia.com/gpu": gpus}}
    }
    kc.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(body)
    )


def check_answers(
    answers: list[list[Any]], prefill: dict[str, Any], decodes: dict[str, str]
) -> set[str]:
    """Every answer came from a decode pod that opened *prefill*'s side channel; returns which
    decode pods answered. *decodes*: decode pod name -> pod IP."""
    ip = prefill["status"]["podIP"]
    seen = set()
    for code, served, text in answers:
        assert code == 200, (code, served)
        assert served["prefill"] == prefill["metadata"]["name"], served
        assert served["decode"] in decodes, (served, decodes)
        assert served["side_channel"] == f"{ip}:{SIDE_CHANNEL_PORT}", served
        assert served["side_channel_reached"] is True, served
        assert json.loads(text) == served  # what the client reads in the completion itself
        seen.add(served["decode"])
    return seen


def test_a_pd_pair_serves_through_the_router_scales_recovers_and_fences_its_side_channel(
    kind_cluster: KindCluster,
) -> None:
    kc = kind_cluster
    # The README's seed serving holds a tray (test_kind.py deletes it; again here for this file
    # alone), and the LWS example both trays (test_lws.py deletes it).
    kc.kubectl("delete", "dss", "dsv41", "dsv41-dep8", "-n", NS, "--ignore-not-found",
               "--wait=true", timeout=180)  # fmt: skip
    before = as_gb200_tray(kc, H200_NODE)
    try:
        run_pair(kc)
    finally:
        kc.kubectl("delete", "dss", NAME, "-n", NS, "--ignore-not-found", "--wait=true",
                   timeout=180, check=False)  # fmt: skip
        kc.kubectl("delete", "namespace", CLIENT_NS, "--ignore-not-found", "--wait=false",
                   check=False)  # fmt: skip
        kc.kubectl("delete", "pod", "impostor", "-n", NS, "--ignore-not-found", "--wait=false",
                   check=False)  # fmt: skip
        restore_node(kc, H200_NODE, before)


def run_pair(kc: KindCluster) -> None:
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    kc.apply(serving(decode_replicas=1))
    try:
        obj = wait_for(lambda: ready(kc, 1), timeout=300, interval=2, what="1P1D Ready")
    except BaseException:
        print(kc.kubectl("get", "pods,deploy,dss", "-n", NS, "-o", "wide", check=False).stdout)
        print(kc.kubectl("describe", "pods", "-n", NS, check=False).stdout[-5000:])
        raise
    timings["ready_1p1d"] = time.monotonic() - t0
    print(f"1P1D behind the router: Ready {timings['ready_1p1d']:.1f} s after kubectl apply")
    assert obj["status"]["endpoint"]["url"] == f"http://{API}.{NS}.svc:8000", obj["status"]
    (prefill,) = role_pods(kc, "prefill")
    (decode,) = role_pods(kc, "decode")
    router_pods = live_pods(kc, f"app.kubernetes.io/name=deepseek-router,{INSTANCE}={NAME}")
    assert len(router_pods) == 1, [p["metadata"]["name"] for p in router_pods]
    router = router_pods[0]
    image = router["spec"]["containers"][0]["image"]
    assert image == "deepseek-operator-router:dev", (
        image
    )  # the chart's routerImage, from the recipe

    # The Service's only endpoint is the router pod.
    slices = kc.kubectl_json(
        "get", "endpointslices", "-n", NS, "-l", f"kubernetes.io/service-name={API}"
    )["items"]
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == {router["status"]["podIP"]}, addresses

    kc.kubectl("create", "namespace", CLIENT_NS)
    client = kc.probe_pod("client", CLIENT_NS, GB200_TRAYS[0])["metadata"]["name"]

    # One request through the router: prefilled by the prefill pod, decoded by the decode pod,
    # which opened the prefill pod's side channel first.
    answers = send(kc, client, ["a first prompt"])
    served = answers[0][1]
    print("answer through the router:", served)
    assert check_answers(answers, prefill, {decode["metadata"]["name"]: ""}) == {
        decode["metadata"]["name"]
    }
    # The same client cannot reach an engine's HTTP port itself: only the router can.
    direct = connect(kc, client, CLIENT_NS, decode["status"]["podIP"], ENGINE_PORT)
    assert direct.startswith("closed"), direct
    # The router found both engines itself (vllm-router's service discovery, by pod labels).
    rlog = kc.kubectl("logs", router["metadata"]["name"], "-n", NS).stdout
    for pod, kind in ((prefill, "Prefill"), (decode, "Decode")):
        found = f"Adding pod: {pod['metadata']['name']} | type: Some({kind})"
        assert found in rlog, rlog[-3000:]

    # The side channel: the decode pod opens it; another namespace's pod and a pod carrying
    # another serving's labels (a decode pod of serving "other") cannot.
    p_ip = prefill["status"]["podIP"]
    got = connect(kc, decode["metadata"]["name"], NS, p_ip, SIDE_CHANNEL_PORT)
    assert got == f"open nixl side channel of {prefill['metadata']['name']} port 5600", got
    got = connect(kc, client, CLIENT_NS, p_ip, SIDE_CHANNEL_PORT)
    assert got.startswith("closed"), got
    impostor_labels = {**decode["metadata"]["labels"], INSTANCE: "other"}
    impostor_labels = {k: v for k, v in impostor_labels.items() if k != "pod-template-hash"}
    kc.probe_pod("impostor", NS, GB200_TRAYS[1], labels=impostor_labels)
    got = connect(kc, "impostor", NS, p_ip, SIDE_CHANNEL_PORT)
    assert got.startswith("closed"), got
    # ...while the impostor itself can open sockets (the router's port, open to every pod).
    got = connect(kc, "impostor", NS, router["status"]["podIP"], ENGINE_PORT)
    assert got.startswith("open"), got

    # Decode 1 -> 2: both decode pods answer.
    t1 = time.monotonic()
    roles = serving(decode_replicas=2)["spec"]["disaggregation"]["roles"]
    body = json.dumps({"spec": {"disaggregation": {"roles": roles}}})
    kc.kubectl("patch", "dss", NAME, "-n", NS, "--type=merge", "-p", body)
    wait_for(lambda: ready(kc, 2), timeout=180, interval=2, what="1P2D Ready")
    timings["ready_1p2d"] = time.monotonic() - t1
    decodes = {p["metadata"]["name"]: p["status"]["podIP"] for p in role_pods(kc, "decode")}
    assert len(decodes) == 2, decodes
    seen: set[str] = set()
    deadline = time.monotonic() + 60  # the router's discovery adds the new pod on its watch
    batches = 0
    while seen != set(decodes) and time.monotonic() < deadline:
        batches += 1
        seen |= check_answers(send(kc, client, [f"prompt {batches}-{i}" for i in range(8)]),
                              prefill, decodes)  # fmt: skip
    assert seen == set(decodes), (seen, decodes)
    timings["both_decodes_answered"] = time.monotonic() - t1

    # Delete the prefill pod: requests succeed again, through its replacement, within a bound.
    old = prefill["metadata"]["name"]
    t2 = time.monotonic()
    kc.kubectl("delete", "pod", old, "-n", NS, "--wait=false")
    failures: list[Any] = []
    recovered: dict[str, Any] | None = None
    attempt = 0
    while recovered is None and time.monotonic() - t2 < RECOVERY_BOUND_S:
        attempt += 1
        code, served, _ = send(kc, client, [f"after the deletion {attempt}"])[0]
        if code == 200 and served["prefill"] != old:
            recovered = served
        else:
            failures.append([code, served])
            time.sleep(0.5)
    recovery_s = time.monotonic() - t2
    assert recovered is not None, failures[-5:]
    (new_prefill,) = role_pods(kc, "prefill")
    assert recovered["prefill"] == new_prefill["metadata"]["name"], recovered
    assert recovered["side_channel"] == f"{new_prefill['status']['podIP']}:5600", recovered
    timings["recovered_after_prefill_deleted"] = recovery_s
    print(f"requests failing or served by the old prefill during the recovery: {len(failures)}"
          f" (first: {failures[:1]})")  # fmt: skip
    print("P/D through the router (s):", {k: round(v, 1) for k, v in timings.items()})
