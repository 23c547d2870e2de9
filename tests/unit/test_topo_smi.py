"""`nvidia-smi topo -m` parsing on the real captures of docs/node-facts.md and the labels they give.

Each fixture under tests/fixtures/topo/ is one captured block copied verbatim; the expected answers are
the "Expected" lines of the doc.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from deepseek_operator import names
from deepseek_operator.agent.labels import is_valid_label_value, labels_for
from deepseek_operator.agent.topo_smi import parse_topo, parse_topo_matrix
from deepseek_operator.commands import topology as topology_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topo"


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


# (fixture, count, fully-connected label, domain size, the NVLink domain)
CAPTURES = [
    pytest.param(
        "t01-hgx-h100-nvswitch", 8, "true", 8, tuple(range(8)),
        id="T1 tab-separated HGX H100 is fully connected over 8 GPUs",
    ),
    pytest.param(
        "t02-hgx-b300-excerpt", 8, "true", 8, tuple(range(8)),
        id="T2 HGX B300 excerpt without the GPU7 row is fully connected by symmetry",
    ),
    pytest.param(
        "t03-b300-slice-2gpu", 2, "true", 2, (0, 1),
        id="T3 a 2-GPU B300 slice is fully connected",
    ),
    pytest.param(
        "t04-b200-column-glue", 8, "unknown", 2, (0, 1),
        id="T4 B200 with column glue shows only GPU0's row so full connectivity is unknown",
    ),
    pytest.param(
        "t05-gb200-tray", 4, "true", 4, (0, 1, 2, 3),
        id="T5 GB200 tray is fully connected over its 4 GPUs",
    ),
    pytest.param(
        "t07-b200-degraded-nvlink", 8, "false", 7, (0, 1, 3, 4, 5, 6, 7),
        id="T7 degraded B200 without a header is not fully connected and its domain is 7",
    ),
    pytest.param(
        "t08-dgx-a100-nv12", 8, "unknown", 5, (0, 1, 2, 3, 4),
        id="T8 DGX A100 excerpt sees only NV12 pairs but not all of them",
    ),
    pytest.param(
        "t09-h100-direct-nv6", 4, "true", 4, (0, 1, 2, 3),
        id="T9 4x H100 with direct NV6 links and a legend is fully connected",
    ),
    pytest.param(
        "t10-v100-hybrid-cube-mesh", 8, "false", 4, (0, 1, 2, 3),
        id="T10 V100 hybrid cube mesh is a partial mesh whose largest clique is a quad",
    ),
    pytest.param(
        "t11-l40s-pcie-legend", 4, "false", 1, (0,),
        id="T11 4x L40S on PCIe with NIC legend has no NVLink",
    ),
    pytest.param(
        "t12-rtx4090-pcie-sys", 8, "false", 1, (0,),
        id="T12 tab-separated 8x RTX 4090 all SYS has no NVLink",
    ),
    pytest.param(
        "t14-rtx5090-phb-p2p", 2, "false", 1, (0,),
        id="T14 2x RTX 5090 PHB ignores the following topo -p2p block",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "count", "connected", "domain_size", "domain"), CAPTURES)
def test_capture_gives_the_documented_answer(
    name: str, count: int, connected: str, domain_size: int, domain: tuple[int, ...]
) -> None:
    topology = parse_topo(fixture(name))
    labels = labels_for(topology)
    assert labels[names.AGENT_PRESENT] == "true"
    assert labels[names.AGENT_COUNT] == str(count)
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == connected
    assert labels[names.AGENT_NVLINK_DOMAIN_SIZE] == str(domain_size)
    assert topology.nvlink_domain() == domain
    assert all(k.startswith(names.AGENT_PREFIX) for k in labels)
    assert all(is_valid_label_value(v) for v in labels.values())
    # A capture cannot say these; the labels are left out rather than guessed.
    for absent in (names.AGENT_NVLINK_LINKS, names.AGENT_NVLINK_SWITCH, names.AGENT_MIG):
        assert absent not in labels
    assert names.AGENT_MNNVL_STATE not in labels


def test_t1_every_pair_is_nv18() -> None:
    matrix = parse_topo_matrix(fixture("t01-hgx-h100-nvswitch"))
    assert matrix.gpu_count == 8
    for i in range(8):
        for j in range(8):
            assert matrix.codes[i][j] == ("X" if i == j else "NV18")


def test_t3_preamble_gives_product_cc_sm_family_and_driver() -> None:
    labels = labels_for(parse_topo(fixture("t03-b300-slice-2gpu")))
    assert labels[names.AGENT_PRODUCT] == "NVIDIA-B300-SXM6-AC"
    assert labels[names.AGENT_CC] == "10.3"
    assert labels[names.AGENT_SM_FAMILY] == "sm100"
    assert labels[names.AGENT_DRIVER] == "595.71.05"


def test_t4_glued_nic_cells_do_not_disturb_the_gpu_cells() -> None:
    matrix = parse_topo_matrix(fixture("t04-b200-column-glue"))
    assert matrix.codes[0] == ("X", *["NV18"] * 7)
    labels = labels_for(parse_topo(fixture("t04-b200-column-glue")))
    assert labels[names.AGENT_PRODUCT] == "NVIDIA-B200"
    assert labels[names.AGENT_CC] == "10.0"
    assert labels[names.AGENT_DRIVER] == "570.124.06"


def test_t5_gb200_tray_names_and_cc() -> None:
    labels = labels_for(parse_topo(fixture("t05-gb200-tray")))
    assert labels[names.AGENT_PRODUCT] == "NVIDIA-GB200"
    assert labels[names.AGENT_SM_FAMILY] == "sm100"


def test_t7_gpu2_has_no_nvlink_and_the_rest_is_complete() -> None:
    matrix = parse_topo_matrix(fixture("t07-b200-degraded-nvlink"))
    assert matrix.header_line is None
    assert matrix.gpu_count == 8
    nvlink = matrix.nvlink()
    assert all(nvlink[2][j] is False for j in range(8) if j != 2)
    assert all(nvlink[i][j] is True for i in (0, 1, 3, 4, 5, 6, 7) for j in (0, 1, 3, 4, 5, 6, 7))
    assert any("no header" in note for note in matrix.notes)


def test_t9_direct_links_are_counted_per_pair() -> None:
    counts = parse_topo_matrix(fixture("t09-h100-direct-nv6")).nvlink_link_counts()
    assert {counts[i][j] for i in range(4) for j in range(4) if i != j} == {6}


def test_t10_mixed_link_counts_and_sys_pairs() -> None:
    matrix = parse_topo_matrix(fixture("t10-v100-hybrid-cube-mesh"))
    assert matrix.codes[0][4] == "SYS"
    assert matrix.codes[0][1] == "NV1"
    assert matrix.codes[0][2] == "NV2"
    assert matrix.codes[5][6] is None  # neither GPU5's nor GPU6's row is in the excerpt


def test_t14_the_p2p_block_after_the_legend_is_ignored() -> None:
    matrix = parse_topo_matrix(fixture("t14-rtx5090-phb-p2p"))
    assert matrix.codes == (("X", "PHB"), ("PHB", "X"))


def test_every_fixture_file_is_covered() -> None:
    named = {p.values[0] for p in CAPTURES}
    assert {p.stem for p in FIXTURES.glob("*.txt")} == named


# --- bad input -----------------------------------------------------------------------------

HEADER = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"

BAD = [
    pytest.param("", "no `nvidia-smi topo -m` matrix found", id="an empty file has no matrix"),
    pytest.param(
        "hello\nworld\n", "no `nvidia-smi topo -m` matrix found",
        id="prose without a GPU0 header or row is rejected",
    ),
    pytest.param(HEADER, "line 1: the header names GPU columns but no GPU rows follow",
                 id="a header without rows is rejected"),
    pytest.param(
        "\tGPU0\tGPU2\nGPU0\t X \tNV4\n", "line 1: header column 'GPU2' is out of order",
        id="header GPU columns out of order are rejected",
    ),
    pytest.param(
        HEADER + "GPU0\t X \tNV18\tFOO\t0-3\n",
        "line 2: GPU0 row, column GPU2: 'FOO' is not a topology code",
        id="an unknown code in a GPU cell names the line and column",
    ),
    pytest.param(
        HEADER + "GPU0\tNV18\t X \tNV18\t0-3\n",
        "line 2: GPU0 row has 'NV18' in column GPU0; 'X' must be exactly on the diagonal",
        id="a diagonal that is not X is rejected",
    ),
    pytest.param(
        HEADER + "GPU0\t X \tNV18\tNV18\nGPU0\t X \tNV18\tNV18\n",
        "line 3: a second row for GPU0 (the first is on line 2)",
        id="a duplicated row is rejected",
    ),
    pytest.param(
        HEADER + "GPU3\tNV18\tNV18\tNV18\t X\n",
        "line 2: row GPU3, but the matrix has only 3 GPU columns",
        id="a row beyond the header's GPU columns is rejected",
    ),
    pytest.param(
        HEADER + "GPU0\t X \tNV18\tNV18\nGPU1\tSYS\t X \tNV18\n",
        "GPU0-GPU1 is 'NV18' on line 2 but GPU1-GPU0 is 'SYS' on line 3",
        id="an asymmetric matrix is rejected with both lines",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_capture_raises_a_clear_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_topo_matrix(text)
    assert message in str(info.value)


def test_glued_gpu_cells_are_split() -> None:
    matrix = parse_topo_matrix("GPU0 GPU1 GPU2\nGPU0 X NV18NV18 0-3\n")
    assert matrix.codes[0] == ("X", "NV18", "NV18")


def test_old_soc_code_is_read_as_sys() -> None:
    matrix = parse_topo_matrix("GPU0 GPU1\nGPU0 X SOC\nGPU1 SOC X\n")
    assert matrix.codes[0][1] == "SYS"
    assert (
        labels_for(parse_topo("GPU0 GPU1\nGPU0 X SOC\n"))[names.AGENT_NVLINK_FULLY_CONNECTED]
        == "false"
    )


def test_nic_columns_named_like_mlx5_are_ignored() -> None:
    text = (
        "        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity\n"
        "GPU0     X      NV4     PIX     SYS     0-15\n"
        "GPU1    NV4      X      SYS     PIX     0-15\n"
        "mlx5_0  PIX     SYS      X      SYS\n"
        "mlx5_1  SYS     PIX     SYS      X\n"
    )
    labels = labels_for(parse_topo(text))
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == "true"
    assert labels[names.AGENT_COUNT] == "2"


def test_single_gpu_without_nics_or_affinity_columns() -> None:
    labels = labels_for(parse_topo("\tGPU0\nGPU0\t X \n"))
    assert labels[names.AGENT_COUNT] == "1"
    assert labels[names.AGENT_NVLINK_FULLY_CONNECTED] == "true"  # vacuously, as in vLLM
    assert labels[names.AGENT_NVLINK_DOMAIN_SIZE] == "1"


# --- the command -----------------------------------------------------------------------------


def run_command(path: Path, output: str = "text") -> int:
    return topology_command.run(argparse.Namespace(topo_file=str(path), output=output))


def test_command_text_prints_aligned_labels(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(FIXTURES / "t07-b200-degraded-nvlink.txt") == 0
    out = capsys.readouterr().out
    assert "gpu.deepseek-operator.io/nvlink.fully-connected  false\n" in out
    assert "gpu.deepseek-operator.io/nvlink.domain-size      7\n" in out
    assert "# largest NVLink domain: GPU0, GPU1, GPU3, GPU4, GPU5, GPU6, GPU7" in out


def test_command_json_has_labels_and_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command(FIXTURES / "t09-h100-direct-nv6.txt", "json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["labels"][names.AGENT_NVLINK_FULLY_CONNECTED] == "true"
    assert doc["matrix"]["codes"][0] == ["X", "NV6", "NV6", "NV6"]
    assert doc["matrix"]["nvlink"][1] == [True, True, True, True]
    assert doc["annotation"]["nvlink"] == "1" * 16


def test_command_bad_file_is_one_line_on_stderr_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tWAT\n")
    assert run_command(bad) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert "line 2" in captured.err and "'WAT'" in captured.err
    assert "Traceback" not in captured.err


def test_command_missing_file_is_one_line_on_stderr_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(tmp_path / "absent.txt") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read") and err.count("\n") == 1
