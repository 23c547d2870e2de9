"""``spec.modelCache.fill`` on kind: the fill Job as a real container, then vLLM reads the cache.

What is real: the kubelet, containerd and the scheduler of the README's kind cluster; the
operator installed by its chart (its fill image is the chart's, the project image built from
this tree); the Job controller running the fill Job the operator writes, whose pod runs
``deepseek-operator fill-weights`` in that image (restricted security context, no
ServiceAccount token, the token from a Secret through ``secretKeyRef``) and fetches through the
real ``huggingface_hub`` client over the pod network and cluster DNS; the kubelet's termination
message and ``pods/log``, which the operator reads for ``WeightsReady``; the vLLM stand-in pod the
operator creates afterwards, with the claim mounted read-only at ``HF_HOME`` and
``HF_HUB_OFFLINE=1``.

What stands in: the Hugging Face Hub is ``tests/hub_standin.py`` (shipped in a ConfigMap, run by
the vLLM stand-in image's Python in a pod behind a Service ``hub``, its repository gated so the
token must arrive), serving a generated checkpoint of two 4 MiB shards under the name
``deepseek-ai/DeepSeek-V4.1-Flash`` (so the catalogue's size check applies: the claim requests
600Gi). The engine is the vLLM stand-in (``tests/kind/vllm-standin``), which never reads the
weights, so the test reads them itself from inside that pod (``kubectl exec``): the snapshot's
files through the hub layout's links, their sha256 against the blob names, and a write that
must fail.

The volume: kind has no ReadWriteMany provisioner, and an NFS server would need kernel NFS
support in the node containers. So the claim binds a pre-created ``hostPath`` PersistentVolume
declared ReadWriteMany with node affinity to one GB200 tray (``kind-worker``): the scheduler puts
the fill pod and the vLLM pod on that node, where both see one directory, as they would see one
NFS export on any node. The directory is created owned by the fill's user (65532), as an NFS
export would be prepared, because a hostPath volume ignores ``fsGroup``. What this does not
prove: pods on two nodes sharing the volume (that is the storage's job, not the operator's).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from typing import Any

import pytest
import yaml

from deepseek_operator import names
from tests.k8s.cluster import wait_for
from tests.kind.conftest import GB200_TRAYS, ROOT, STANDIN_IMAGE, KindCluster

pytestmark = pytest.mark.kind

NS = "weights"
NAME = "dsv41-cache"
MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
COMMIT = hashlib.sha1(MODEL.encode()).hexdigest()  # what `python hub_standin.py` names main
TOKEN = "hf_kind_standin_token_0123"
SHARDS, SHARD_MIB = 2, 4
NODE = GB200_TRAYS[0]
HOST_DIR = "/var/lib/deepseek-weights"
PV = "deepseek-weights-kind"
CLAIM = "deepseek-weights"
MOUNT = "/var/cache/huggingface"  # the stand-in runs as 65532, which cannot enter /root
ENDPOINT = f"http://hub.{NS}.svc:8080"
SEED = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), {})


def fixtures() -> list[dict[str, Any]]:
    """The hub stand-in (ConfigMap, pod, Service), the token Secret, the volume and its claim."""
    labels = {"app": "hub-standin"}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hub-standin", "namespace": NS},
         "data": {"hub_standin.py": (ROOT / "tests" / "hub_standin.py").read_text()}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS},
         "stringData": {"token": TOKEN}},
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hub", "namespace": NS, "labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "hub",
                    "image": STANDIN_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": [
                        "python3", "/standin/hub_standin.py", "--repo", MODEL,
                        "--shards", str(SHARDS), "--shard-mib", str(SHARD_MIB), "--token", TOKEN,
                        "--host", "0.0.0.0", "--port", "8080", "--cdn-port", "8081",
                        "--advertise", f"hub.{NS}.svc",
                    ],
                    "readinessProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "code", "mountPath": "/standin"}],
                }],
                "volumes": [{"name": "code", "configMap": {"name": "hub-standin"}}],
            },
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hub", "namespace": NS},
         "spec": {"selector": labels, "ports": [{"name": "hub", "port": 8080},
                                                {"name": "cdn", "port": 8081}]}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": PV},
            "spec": {
                "capacity": {"storage": "600Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": HOST_DIR, "type": "Directory"},
                "claimRef": {"namespace": NS, "name": CLAIM},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": PV,
                "resources": {"requests": {"storage": "600Gi"}},  # the catalogue: ~476 GiB
            },
        },
    ]  # fmt: skip


def serving() -> dict[str, Any]:
    """The seed example on the vLLM stand-in, small requests, the operator filling the cache."""
    doc = copy.deepcopy(SEED)
    doc["metadata"] = {"name": NAME, "namespace": NS}
    spec = doc["spec"]
    spec["model"]["revision"] = COMMIT
    spec["image"] = STANDIN_IMAGE
    spec["resources"] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    spec["modelCache"] = {
        "claimName": CLAIM,
        "mountPath": MOUNT,
        "fill": {"tokenSecretRef": {"name": "hf-token", "key": "token"}, "endpoint": ENDPOINT},
    }
    return doc


# Run inside the vLLM pod: the environment, the snapshot through the hub layout, a write.
PROBE = r"""
import hashlib, json, os, sys
home = os.environ["HF_HOME"]
repo = os.path.join(home, "hub", "models--" + sys.argv[1].replace("/", "--"))
snap = os.path.join(repo, "snapshots", sys.argv[2])
files = {}
for name in sorted(os.listdir(snap)):
    path = os.path.join(snap, name)
    with open(path, "rb") as fh:
        data = fh.read()
    files[name] = {"link": os.readlink(path), "size": len(data),
                   "sha256": hashlib.sha256(data).hexdigest()}
try:
    with open(os.path.join(home, "hub", "written-by-vllm"), "w") as fh:
        fh.write("x")
    write = "succeeded"
except OSError as exc:
    write = f"{exc.errno} {exc.strerror}"
mounts = [line.split() for line in open("/proc/mounts")]
options = next(m[3] for m in mounts if m[1] == home)
print(json.dumps({"env": {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_OFFLINE")},
                  "files": files, "write": write, "mount_options": options}))
"""


def test_the_fill_job_runs_in_a_container_and_vllm_reads_the_cache_read_only(
    kind_cluster: KindCluster,
) -> None:
    kc = kind_cluster
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    # The README's seed serving (and the LWS example, when test_lws.py left it) hold the trays.
    kc.kubectl("delete", "dss", "dsv41", "dsv41-dep8", "-n", "llm", "--ignore-not-found",
               "--wait=true", timeout=180)  # fmt: skip
    kc.run("docker", "exec", NODE, "sh", "-c",
           f"rm -rf {HOST_DIR} && mkdir -p {HOST_DIR} && chown 65532:65532 {HOST_DIR}")  # fmt: skip
    kc.kubectl("create", "namespace", NS)
    try:
        run(kc, t0, timings)
    finally:
        t_cleanup = time.monotonic()
        kc.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true", timeout=180,
                   check=False)  # fmt: skip
        kc.kubectl("delete", "pv", PV, "--ignore-not-found", check=False)
        kc.run("docker", "exec", NODE, "rm", "-rf", HOST_DIR, check=False)
        timings["cleanup"] = time.monotonic() - t_cleanup
    print("weights fill on kind (s):", {k: round(v, 1) for k, v in timings.items()})


def run(kc: KindCluster, t0: float, timings: dict[str, float]) -> None:
    kc.apply(*fixtures())
    wait_for(
        lambda: condition(kc.kubectl_json("get", "pod", "hub", "-n", NS), "Ready").get("status")
        == "True",
        timeout=120, interval=1, what="the hub stand-in pod Ready",
    )  # fmt: skip
    timings["hub_ready"] = time.monotonic() - t0
    kc.apply(serving())

    # No vLLM workload may exist before the fill Job has completed; record what each look saw.
    # (Not "before WeightsReady is True": the operator applies the Deployment and then writes
    # the status, so a look between the two sees a pod while the status is still False.)
    early: list[str] = []

    def fill_complete() -> bool:
        jobs = kc.kubectl_json("get", "jobs", "-n", NS, "-l",
                               f"{names.LABEL_COMPONENT}={names.FILL_COMPONENT}")["items"]  # fmt: skip
        return any(condition(j, "Complete").get("status") == "True" for j in jobs)

    reasons: list[str] = []

    def weights_ready() -> dict[str, Any] | None:
        obj = kc.kubectl_json("get", "dss", NAME, "-n", NS)
        cond = condition(obj, names.WEIGHTS_READY)
        if cond.get("reason") and (not reasons or reasons[-1] != cond["reason"]):
            reasons.append(cond["reason"])
        if cond.get("status") == "True":
            return obj
        seen = kc.kubectl("get", "deployment", NAME, "-n", NS, "--ignore-not-found",
                          "-o", "name").stdout.split()  # fmt: skip
        seen += kc.kubectl("get", "pods", "-n", NS, "-l", f"{names.LABEL_INSTANCE}={NAME}",
                           "-o", "name").stdout.split()  # fmt: skip
        # The Job is read after the workloads: not complete now, so not complete then either.
        if seen and not fill_complete():
            early.extend(seen)
        if cond.get("reason") == "FillFailed":
            pytest.fail(f"WeightsReady=False FillFailed: {cond.get('message')}", pytrace=False)
        return None

    try:
        obj = wait_for(weights_ready, timeout=300, interval=1, what="WeightsReady=True")
    except BaseException:
        print(kc.kubectl("describe", "jobs,pods", "-n", NS, check=False).stdout[-5000:])
        raise
    timings["weights_ready"] = time.monotonic() - t0
    print("WeightsReady reasons seen:", reasons)
    assert early == [], f"vLLM workloads before the fill Job completed: {early}"
    cond = condition(obj, names.WEIGHTS_READY)
    assert cond["reason"] == "Filled", cond
    weights = obj["status"]["weights"]
    files = SHARDS + 2  # config.json and the index beside the shards
    assert weights["filesDone"] == weights["filesTotal"] == files, weights
    assert weights["bytesDone"] == weights["bytesTotal"] >= SHARDS * SHARD_MIB * 2**20, weights

    # The fill Job ran as a real container on the volume's node and completed.
    (job,) = kc.kubectl_json("get", "jobs", "-n", NS, "-l",
                             f"{names.LABEL_COMPONENT}={names.FILL_COMPONENT}")["items"]  # fmt: skip
    assert job["metadata"]["name"] == weights["job"]
    assert condition(job, "Complete").get("status") == "True", job["status"]
    pods = kc.kubectl_json("get", "pods", "-n", NS, "-l",
                           f"batch.kubernetes.io/job-name={job['metadata']['name']}")["items"]  # fmt: skip
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"], [p["status"] for p in pods]
    (fill_pod,) = pods
    assert fill_pod["spec"]["nodeName"] == NODE
    (status,) = fill_pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://"), status
    assert status["state"]["terminated"]["exitCode"] == 0, status
    assert status["image"].endswith(kc.image), status
    env = fill_pod["spec"]["containers"][0]["env"]
    assert {"name": "HF_ENDPOINT", "value": ENDPOINT} in env
    assert TOKEN not in json.dumps(job) + json.dumps(fill_pod)
    log = kc.kubectl("logs", "-n", NS, fill_pod["metadata"]["name"]).stdout.splitlines()
    done = json.loads(log[-1])
    assert done["event"] == "done", log[-5:]
    print("fill pod's last line:", log[-1])

    # Only then the vLLM workload: created after the Job completed, and it turns Ready.
    deployment = kc.kubectl_json("get", "deployment", NAME, "-n", NS)
    created = deployment["metadata"]["creationTimestamp"]
    # RFC 3339 in UTC with second precision: these strings sort as the times they name.
    assert created >= job["status"]["completionTime"], (created, job["status"])
    assert created >= cond["lastTransitionTime"], (created, cond)

    def serving_ready() -> bool:
        got = kc.kubectl_json("get", "dss", NAME, "-n", NS)
        return condition(got, "Ready").get("status") == "True"

    try:
        wait_for(serving_ready, timeout=240, interval=1, what="Ready=True with the vLLM stand-in")
    except BaseException:
        print(kc.kubectl("describe", "pods", "-n", NS, check=False).stdout[-4000:])
        raise
    timings["vllm_ready"] = time.monotonic() - t0
    (vllm,) = [
        p for p in kc.kubectl_json("get", "pods", "-n", NS, "-l",
                                   f"{names.LABEL_INSTANCE}={NAME}")["items"]
        if not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
    assert vllm["spec"]["nodeName"] == NODE

    # Inside the vLLM pod: offline, the files at HF_HOME's hub layout, the mount read-only.
    seen = json.loads(kc.exec_python(vllm["metadata"]["name"], NS, PROBE, MODEL, COMMIT).stdout)
    print("inside the vLLM pod:", json.dumps(seen, sort_keys=True))
    assert seen["env"] == {"HF_HOME": MOUNT, "HF_HUB_OFFLINE": "1"}, seen["env"]
    assert len(seen["files"]) == files, seen["files"]
    assert sum(f["size"] for f in seen["files"].values()) == weights["bytesTotal"]
    for name, f in seen["files"].items():
        assert f["link"].startswith("../../blobs/"), (name, f)
        if name.endswith(".safetensors"):
            # An LFS file's blob is named by its sha256, which the bytes read here must match.
            assert f["link"] == f"../../blobs/{f['sha256']}", (name, f)
    assert seen["write"].startswith("30 "), seen["write"]  # EROFS
    assert "ro" in seen["mount_options"].split(","), seen["mount_options"]
    timings["total"] = time.monotonic() - t0
