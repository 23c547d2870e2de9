"""The fill Job's manifest (``spec.modelCache.fill``), pure: its name, owners and pod.

One fill Job per (claim, model, revision), named from a hash of the three, so every serving of the
same checkpoint on the same claim finds the same Job: the first to look creates it, the others
add themselves to its owner references (never as controller), and the garbage collector removes
it with the last of them. The Job runs ``deepseek-operator fill-weights`` under the restricted Pod
Security level with no ServiceAccount token; the token reaches it only as an env var from the
user's Secret (a ``secretKeyRef``), so no object the operator writes holds it.

Reading the Job back is :mod:`.fill_progress`'s; what it means for ``WeightsReady`` is
:mod:`.weights`'.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from deepseek_operator.api.load import ServingObject
from deepseek_operator.names import (
    API_VERSION,
    FILL_COMPONENT,
    FILL_CONTAINER,
    FILL_EXIT_CODES,
    FILL_FATAL_CAUSES,
    FILL_JOB_PREFIX,
    FILL_USER,
    GROUP,
    KIND,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MANAGED_BY,
    PROJECT,
)
from deepseek_operator.render.metadata import restricted_container_security

FILL_HF_HOME = "/cache"
"""Where the fill pod mounts the claim (its ``--hf-home``); the vLLM pods' mountPath may differ:
the cache's links are relative."""
TERMINATION_LOG = "/dev/termination-log"
FILL_BACKOFF_LIMIT = 6
"""Retries of a fill pod that failed for a cause a retry may cure (network, busy, killed): each
resumes from what is on the volume."""
ANNOTATION_MODEL = f"{GROUP}/model"
ANNOTATION_REVISION = f"{GROUP}/revision"
ANNOTATION_CLAIM = f"{GROUP}/claim"


def fill_enabled(serving: ServingObject) -> bool:
    """Whether ``serving`` asks the operator to fill its cache."""
    return serving.spec.model_cache.fill is not None


def fill_job_name(claim: str, model: str, revision: str) -> str:
    """The one Job name of (claim, model, revision): readable prefix, hash of all three.

    At most 49 characters, so the ``job-name`` label the Job controller puts on its pods (63 at
    most) always fits.
    """
    digest = hashlib.sha256(f"{claim}\n{model}\n{revision}".encode()).hexdigest()[:10]
    base = re.sub(r"[^a-z0-9]+", "-", model.rsplit("/", 1)[-1].lower()).strip("-")[:30]
    return f"{FILL_JOB_PREFIX}{base.rstrip('-') or 'model'}-{digest}"


def serving_fill_job_name(serving: ServingObject) -> str:
    """The fill Job of ``serving`` (its claim, model and revision)."""
    spec = serving.spec
    return fill_job_name(
        spec.model_cache.claim_name or "", spec.model.name, spec.model.revision or ""
    )


def owner_reference(serving: ServingObject) -> dict[str, Any]:
    """``serving`` as one of the fill Job's owners: not its controller (the Job is shared), and
    not blocking deletion (a serving deleted while its fill runs goes at once)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": serving.name,
        "uid": serving.uid,
    }


def render_fill_job(serving: ServingObject, image: str) -> dict[str, Any]:
    """The fill Job of ``serving``, owned by it (the controller adds the other owners later)."""
    spec = serving.spec
    cache = spec.model_cache
    fill = cache.fill
    assert fill is not None and cache.claim_name
    name = serving_fill_job_name(serving)
    labels = {
        LABEL_NAME: PROJECT,
        LABEL_COMPONENT: FILL_COMPONENT,
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    env: list[dict[str, Any]] = []
    if fill.token_secret_ref is not None:
        # Read by the command from HF_TOKEN; the value stays in the Secret.
        ref = fill.token_secret_ref
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    if fill.endpoint:
        env.append({"name": "HF_ENDPOINT", "value": fill.endpoint})
    container = {
        "name": FILL_CONTAINER,
        "image": image,
        "args": [
            "fill-weights",
            f"--model={spec.model.name}",
            f"--revision={spec.model.revision}",
            f"--hf-home={FILL_HF_HOME}",
            f"--termination-log={TERMINATION_LOG}",
        ],
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": restricted_container_security(),
        "resources": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [
            {"name": "weights", "mountPath": FILL_HF_HOME},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    fatal = sorted(FILL_EXIT_CODES[c] for c in FILL_FATAL_CAUSES)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": serving.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_MODEL: spec.model.name,
                ANNOTATION_REVISION: spec.model.revision or "",
                ANNOTATION_CLAIM: cache.claim_name,
            },
            "ownerReferences": [owner_reference(serving)],
        },
        "spec": {
            "backoffLimit": FILL_BACKOFF_LIMIT,
            "podFailurePolicy": {
                "rules": [
                    # A bad token, gated repo, wrong revision, full volume or bad checksum does
                    # not get better by retrying: the Job fails at once, with that exit code.
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": FILL_CONTAINER,
                            "operator": "In",
                            "values": fatal,
                        },
                    },
                    # A pod evicted or preempted is not the fill's fault: its retry is free.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": FILL_USER,
                        "runAsGroup": FILL_USER,
                        "fsGroup": FILL_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "weights",
                            "persistentVolumeClaim": {"claimName": cache.claim_name},
                        },
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }
