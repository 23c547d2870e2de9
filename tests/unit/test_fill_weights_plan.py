"""The pure half of ``fill-weights`` (plan, checksums, causes) and the mapping of the client's errors."""

from __future__ import annotations

import httpx2
import pytest
from huggingface_hub.utils import hf_raise_for_status

from deepseek_operator.commands.fill_weights.fetch import cause_of
from deepseek_operator.commands.fill_weights.plan import (
    EXIT_CODES,
    FillError,
    HubFile,
    git_blob_hasher,
    hub_files,
    make_plan,
    one_line,
    repo_folder,
    space_message,
    validate_file_name,
    validate_repo_id,
)

SHA = "a" * 64


def test_every_cause_has_its_own_exit_code() -> None:
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)
    assert 0 not in EXIT_CODES.values()


def test_git_blob_id_is_gits() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    h = git_blob_hasher(6)
    h.update(b"hello\n")
    assert h.hexdigest() == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_hub_files_from_siblings() -> None:
    files = hub_files(
        [
            {"rfilename": "config.json", "size": 10, "blobId": "b" * 40},
            {
                "rfilename": "model-00001.safetensors",
                "size": 133,
                "blobId": "c" * 40,
                "lfs": {"size": 1000, "sha256": SHA, "pointerSize": 133},
            },
        ]
    )
    assert files == (
        HubFile("config.json", 10, "b" * 40, lfs=False),
        HubFile("model-00001.safetensors", 1000, SHA, lfs=True),
    )


@pytest.mark.parametrize(
    "sibling",
    [{"rfilename": "config.json"}, {"rfilename": "x.bin", "size": 3, "blobId": ""}],
)
def test_hub_files_refuse_a_list_without_sizes_or_checksums(sibling: dict[str, object]) -> None:
    with pytest.raises(FillError, match="no size or checksum"):
        hub_files([sibling])


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a/../../x", "a\\b"])
def test_file_names_stay_inside_the_snapshot(name: str) -> None:
    with pytest.raises(FillError, match="outside the snapshot"):
        validate_file_name(name)


@pytest.mark.parametrize("repo", ["deepseek-ai/DeepSeek-V4.1-Flash", "a/b", "org_1/m.v2"])
def test_repo_ids(repo: str) -> None:
    assert validate_repo_id(repo) == repo


@pytest.mark.parametrize("repo", ["model", "a/b/c", "/a", "a/..", "a/-b", "a b/c"])
def test_bad_repo_ids(repo: str) -> None:
    with pytest.raises(FillError) as err:
        validate_repo_id(repo)
    assert err.value.cause == "bad-input" and repr(repo) in err.value.message


def test_repo_folder_is_the_hub_cache_name() -> None:
    assert repo_folder("deepseek-ai/DeepSeek-V4") == "models--deepseek-ai--DeepSeek-V4"


def test_plan_counts_complete_blobs_and_resumable_parts() -> None:
    files = (
        HubFile("config.json", 10, "b" * 40, lfs=False),
        HubFile("s1.safetensors", 1000, "1" * 64, lfs=True),
        HubFile("s2.safetensors", 2000, "2" * 64, lfs=True),
        HubFile("s3.safetensors", 3000, "3" * 64, lfs=True),
    )
    plan = make_plan(
        files,
        blob_sizes={"b" * 40: 10, "1" * 64: 999},  # s1's blob has the wrong size: not complete
        partial_sizes={"2" * 64: 500, "3" * 64: 3001},  # s3's part is longer than s3: worthless
    )
    assert plan.complete == {"config.json"}
    assert plan.bytes_total == 6010
    assert plan.bytes_done == 10 + 500
    assert plan.bytes_remaining == 5500
    assert [f.name for f in plan.pending] == ["s1.safetensors", "s2.safetensors", "s3.safetensors"]


def test_plan_counts_a_blob_two_files_share_once() -> None:
    files = (
        HubFile("a.safetensors", 100, SHA, lfs=True),
        HubFile("copy/a.safetensors", 100, SHA, lfs=True),
    )
    plan = make_plan(files, blob_sizes={}, partial_sizes={SHA: 40})
    assert plan.bytes_done == 40


def test_a_complete_plan_has_nothing_pending() -> None:
    files = (HubFile("a", 5, SHA, lfs=True),)
    plan = make_plan(files, blob_sizes={SHA: 5}, partial_sizes={})
    assert plan.pending == () and plan.bytes_remaining == 0


def test_space_message_has_both_figures() -> None:
    message = space_message(free=1024**3, remaining=3 * 1024**3, path="/cache/hub")
    assert message == (
        "/cache/hub has 1073741824 bytes free (1.00 GiB) but the checkpoint needs 3221225472 "
        "more bytes (3.00 GiB): give the volume at least 2147483648 more bytes"
    )


def test_one_line() -> None:
    assert one_line("401 Client Error.\n\nRepository Not Found\n") == (
        "401 Client Error. Repository Not Found"
    )


def _hub_error(status: int, **headers: str) -> Exception:
    url = "https://hub.invalid/api/models/org/m/revision/main"  # no request is made
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("GET", url))
    try:
        hf_raise_for_status(response)
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")


@pytest.mark.parametrize(
    ("status", "headers", "cause"),
    [
        (401, {"X-Error-Message": "Invalid credentials in Authorization header"}, "token-rejected"),
        (401, {"X-Error-Code": "GatedRepo"}, "gated"),
        (403, {"X-Error-Code": "GatedRepo"}, "gated"),
        (403, {}, "gated"),
        (404, {"X-Error-Code": "RepoNotFound"}, "not-found"),
        (401, {}, "not-found"),  # the hub's answer to a private repository without a token
        (404, {"X-Error-Code": "RevisionNotFound"}, "not-found"),
        (404, {"X-Error-Code": "EntryNotFound"}, "not-found"),
        (503, {}, "network"),
    ],
)
def test_the_clients_errors_map_to_causes(status: int, headers: dict[str, str], cause: str) -> None:
    error = cause_of(_hub_error(status, **headers))
    assert error.cause == cause
    assert "\n" not in error.message


def test_timeouts_are_network_errors() -> None:
    error = cause_of(httpx2.ReadTimeout("timed out"))
    assert error.cause == "network" and error.exit_code == 8


def test_other_errors_are_one_line_failures() -> None:
    error = cause_of(ValueError("first\nsecond"))
    assert (error.cause, error.message) == ("failed", "ValueError: first second")
