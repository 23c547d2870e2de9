"""docs/weights.md stays true: its Job is hardened and fills what its serving reads.

The manifests are read out of the page's ``yaml`` blocks. The Job must meet the restricted Pod
Security level and carry no ServiceAccount token, read the token from a mounted Secret file, and
fail without retrying on exactly the causes a retry cannot fix; the serving (the page's snippet
on top of examples/dsv41-flash-gb200.yaml) must be admitted and read the Job's volume, model and
revision; the exit-code table must be :data:`EXIT_CODES`.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import yaml

from deepseek_operator.api.load import parse_serving
from deepseek_operator.commands.fill_weights.plan import EXIT_CODES

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs/weights.md").read_text()
BLOCKS: dict[str, Any] = {
    doc["kind"]: doc for doc in map(yaml.safe_load, re.findall(r"```yaml\n(.*?)```", PAGE, re.S))
}
JOB = BLOCKS["Job"]
POD = JOB["spec"]["template"]["spec"]
(FILL,) = POD["containers"]


def _flag(name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in FILL["args"] if a.startswith(f"--{name}=")]
    return value


def test_the_job_is_hardened() -> None:
    assert POD["automountServiceAccountToken"] is False
    assert POD["securityContext"]["runAsNonRoot"] is True
    assert POD["securityContext"]["runAsUser"] == 65532  # the image's USER
    assert POD["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = FILL["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["readOnlyRootFilesystem"] is True
    # Restricted admits these volume types only (no hostPath).
    assert all({"persistentVolumeClaim", "secret"} & set(v) for v in POD["volumes"])


def test_the_token_is_a_secret_file() -> None:
    token = _flag("token-file")
    (mount,) = [m for m in FILL["volumeMounts"] if token.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in POD["volumes"] if v["name"] == mount["name"]]
    assert "secretName" in volume["secret"]
    # Root-owned files in fsGroup's group: the non-root user reads them through the group bits.
    assert volume["secret"]["defaultMode"] & 0o040
    assert "env" not in FILL or all("TOKEN" not in e["name"] for e in FILL["env"])


def test_the_job_fails_at_once_on_what_a_retry_cannot_fix() -> None:
    (rule,) = JOB["spec"]["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob"
    final = {"bad-input", "token-rejected", "gated", "not-found", "no-space", "checksum"}
    assert sorted(rule["onExitCodes"]["values"]) == sorted(EXIT_CODES[c] for c in final)
    assert POD["restartPolicy"] == "Never"


def test_the_serving_reads_what_the_job_filled() -> None:
    example = yaml.safe_load((ROOT / "examples/dsv41-flash-gb200.yaml").read_text())
    snippet = BLOCKS["DeepSeekServing"]
    spec = {**example["spec"], **snippet["spec"]}
    spec["model"] = {**example["spec"]["model"], **snippet["spec"]["model"]}
    serving = parse_serving({**example, "metadata": snippet["metadata"], "spec": spec})
    cache = serving.spec.model_cache
    (volume,) = [v for v in POD["volumes"] if "persistentVolumeClaim" in v]
    assert cache.claim_name == volume["persistentVolumeClaim"]["claimName"]
    assert cache.claim_name == BLOCKS["PersistentVolumeClaim"]["metadata"]["name"]
    assert "ReadWriteMany" in BLOCKS["PersistentVolumeClaim"]["spec"]["accessModes"]
    assert serving.spec.model.name == _flag("model")
    assert serving.spec.model.revision == _flag("revision")
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in [e.manifest() for e in serving.spec.env]
    namespaces = {doc["metadata"]["namespace"] for doc in BLOCKS.values()}
    assert namespaces == {"llm"}


def test_the_exit_code_table_is_the_commands() -> None:
    rows = re.findall(r"^\| (\d+) \| `([a-z-]+)` \|", PAGE, re.M)
    assert {cause: int(code) for code, cause in rows} == dict(EXIT_CODES)
