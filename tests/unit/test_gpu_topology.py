"""The pure topology model and label rendering: cliques, tri-state answers, valid label values."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from deepseek_operator import names
from deepseek_operator.agent.gpu_topology import (
    GpuInfo,
    GpuTopology,
    is_fully_connected,
    max_nvlink_clique,
)
from deepseek_operator.agent.labels import (
    annotation_for,
    gfd_product,
    is_valid_label_value,
    labels_for,
    sanitise_label_value,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topo"


def matrix_from_edges(n: int, edges: set[tuple[int, int]]) -> tuple[tuple[bool, ...], ...]:
    return tuple(
        tuple(i == j or (min(i, j), max(i, j)) in edges for j in range(n)) for i in range(n)
    )


def brute_force_clique(n: int, edges: set[tuple[int, int]]) -> int:
    for size in range(n, 0, -1):
        for subset in itertools.combinations(range(n), size):
            if all(pair in edges for pair in itertools.combinations(subset, 2)):
                return size
    return 0


@pytest.mark.parametrize("seed", range(40))
def test_max_clique_matches_brute_force_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 10)
    density = rng.choice([0.3, 0.6, 0.9])
    edges = {pair for pair in itertools.combinations(range(n), 2) if rng.random() < density}
    clique = max_nvlink_clique(matrix_from_edges(n, edges))
    assert len(clique) == brute_force_clique(n, edges)
    assert all(pair in edges for pair in itertools.combinations(clique, 2))


def test_two_nvlink_bridge_pairs_form_domains_of_two() -> None:
    matrix = matrix_from_edges(4, {(0, 1), (2, 3)})
    assert max_nvlink_clique(matrix) == (0, 1)  # ties go to the smallest set
    assert is_fully_connected(matrix, range(4)) is False
    assert is_fully_connected(matrix, [2, 3]) is True


def test_unknown_pairs_make_full_connectivity_unknown_not_false() -> None:
    matrix = ((True, True, None), (True, True, True), (None, True, True))
    assert is_fully_connected(matrix, range(3)) is None
    assert max_nvlink_clique(matrix) == (0, 1)


def test_an_empty_node_has_no_domain() -> None:
    assert max_nvlink_clique(()) == ()
    assert GpuTopology().fully_connected() is True


@pytest.mark.parametrize(
    ("nvlink", "message"),
    [
        pytest.param(((True,),), "must be 2x2", id="a matrix of the wrong size is refused"),
        pytest.param(((True, True), (False, True)), "symmetric", id="an asymmetric matrix is refused"),
        pytest.param(((False, True), (True, True)), "diagonal", id="a false diagonal is refused"),
    ],
)  # fmt: skip
def test_invalid_matrices_are_refused(nvlink: tuple[tuple[bool, ...], ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GpuTopology(gpus=(GpuInfo(index=0), GpuInfo(index=1)), nvlink=nvlink)


@pytest.mark.parametrize(
    ("name", "product"),
    [
        pytest.param("NVIDIA B300 SXM6 AC", "NVIDIA-B300-SXM6-AC", id="B300 name as GFD writes it"),
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", id="H100 SXM name"),
        pytest.param("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB", id="an old Tesla name"),
        pytest.param("NVIDIA RTX (TM) 6000 Ada", "NVIDIA-RTX-TM-6000-Ada", id="parentheses dropped"),
        pytest.param("A" * 80, "A" * 63, id="an overlong name is cut to 63"),
        pytest.param(" -odd name_ ", "odd-name", id="edges are trimmed to alphanumerics"),
    ],
)  # fmt: skip
def test_product_labels_are_gfd_compatible_and_valid(name: str, product: str) -> None:
    assert gfd_product(name) == product
    assert is_valid_label_value(product)


def test_sanitise_always_gives_a_valid_label_value() -> None:
    rng = random.Random(7)
    alphabet = "aZ09-_. /:()é\t"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 90)))
        assert is_valid_label_value(sanitise_label_value(text))


def test_annotation_is_compact_versioned_and_stable() -> None:
    topo = GpuTopology(
        gpus=(GpuInfo(index=0, name="NVIDIA H200", cc_major=9, cc_minor=0, memory_mib=143771),),
        nvlink=((True,),),
        driver_version="570.124.06",
        cuda_driver_version=12080,
    )
    text = annotation_for(topo)
    assert ", " not in text and ": " not in text  # compact separators
    doc = json.loads(text)
    assert doc["v"] == 1 and doc["gen"].startswith("sha256:")
    assert doc["gpus"] == [{"i": 0, "name": "NVIDIA H200", "cc": "9.0", "mib": 143771}]
    assert doc["cuda"] == "12.8"
    assert annotation_for(topo) == text  # deterministic, so "changed" means changed
    assert labels_for(topo)[names.AGENT_SM_FAMILY] == "sm90"


def test_cli_topology_error_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("GPU0 GPU1\nGPU0 X NV18\nGPU1 SYS X\n")
    proc = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "topology", "--topo-file", str(bad)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "must be symmetric" in proc.stderr


def test_cli_topology_json_on_a_real_capture() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deepseek_operator.cli", "topology", "-o", "json",
         "--topo-file", str(FIXTURES / "t07-b200-degraded-nvlink.txt")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    assert doc["labels"][names.AGENT_NVLINK_FULLY_CONNECTED] == "false"
    assert doc["matrix"]["nvlinkDomain"] == ["GPU0", "GPU1", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7"]
