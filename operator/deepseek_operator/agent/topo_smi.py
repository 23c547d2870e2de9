"""Parse a captured ``nvidia-smi topo -m`` into the GPU×GPU matrix and a :class:`GpuTopology`.

Format notes (docs/node-facts.md): the header names ``GPU0..GPUn-1`` then NIC columns (``NIC#``
or device names such as ``mlx5_0``), then optional CPU/NUMA affinity columns. Cells are
separated by tabs or runs of spaces; cells can be glued together (``SYSSYS``), so only the first
``n`` cells after a row's label are read, and a glued run of codes is split. ``NV#`` means
NVLink (``#`` bonded links); ``X`` is the diagonal; everything else is a PCIe path.

Real captures are often excerpts: the header may be missing (the GPU count is then inferred from
the rows and NVLink cells), rows may be cut after their GPU cells, and whole rows may be
missing. The matrix is symmetric, so a missing row is rebuilt from the other rows' columns;
pairs shown nowhere stay unknown (``None``). A collect_env preamble (``GPU 0,1: NVIDIA B200``,
``... Compute Capability: 10.0``, ``CUDA Driver Version: ...``) supplies names, CC and driver.
Anything after the matrix (legend, NIC legend, a second ``topo -p2p`` block) is ignored.

Bad input raises :class:`ValueError` whose message names the line. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deepseek_operator.agent.gpu_topology import GpuInfo, GpuTopology

SOURCE = "nvidia-smi topo -m"

_CODE_RE = re.compile(r"X|SYS|NODE|PHB|PXB|PIX|SOC|NV\d+")
_GLUED_RE = re.compile(r"(?:X|SYS|NODE|PHB|PXB|PIX|SOC|NV\d+)+")
_GPU_LABEL_RE = re.compile(r"GPU(\d+)")
_NAME_RE = re.compile(r"^GPU\s+(\d+(?:\s*,\s*\d+)*)\s*:\s*(\S.*?)\s*$")
_CC_RE = re.compile(r"^GPU\s+(\d+(?:\s*,\s*\d+)*)\s+Compute Capability:\s*(\d+)\.(\d+)\s*$")
_DRIVER_RE = re.compile(
    r"^(?:CUDA Driver Version|Nvidia driver version|Driver Version)\s*:\s*(\d[\w.\-]*)\s*$",
    re.IGNORECASE,
)
_EXPECTED_CODES = "X, NV#, SYS, NODE, PHB, PXB or PIX"


@dataclass(frozen=True)
class TopoMatrix:
    """The GPU×GPU part of a ``topo -m`` capture, plus what its preamble said.

    ``codes[i][j]`` is the cell text (``X``, ``NV18``, ``SYS`` …, ``SOC`` read as ``SYS``), or
    None when the capture shows that pair nowhere.
    """

    codes: tuple[tuple[str | None, ...], ...]
    header_line: int | None
    names: dict[int, str] = field(default_factory=dict)
    compute_capabilities: dict[int, tuple[int, int]] = field(default_factory=dict)
    driver_version: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def gpu_count(self) -> int:
        """Number of GPU columns."""
        return len(self.codes)

    def nvlink(self) -> tuple[tuple[bool | None, ...], ...]:
        """The NVLink matrix: True for ``NV#`` (and the diagonal), False for PCIe, None unknown."""
        return tuple(
            tuple(None if c is None else (c == "X" or c.startswith("NV")) for c in row)
            for row in self.codes
        )

    def nvlink_link_counts(self) -> tuple[tuple[int | None, ...], ...]:
        """Bonded NVLink count per pair from ``NV#`` (0 for PCIe, None unknown or diagonal)."""
        return tuple(
            tuple(
                None if c is None or c == "X" else (int(c[2:]) if c.startswith("NV") else 0)
                for c in row
            )
            for row in self.codes
        )


def _split_cells(tokens: list[str]) -> list[str]:
    """Split glued runs of codes (``SYSSYS`` → ``SYS``, ``SYS``); keep other tokens as they are."""
    cells: list[str] = []
    for tok in tokens:
        if not _CODE_RE.fullmatch(tok) and _GLUED_RE.fullmatch(tok):
            cells.extend(_CODE_RE.findall(tok))
        else:
            cells.append(tok)
    return cells


def _is_code(token: str) -> bool:
    return bool(_CODE_RE.fullmatch(token) or _GLUED_RE.fullmatch(token))


def _ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse the text of ``nvidia-smi topo -m`` (possibly with a preamble or excerpted).

    Raises ValueError naming the line for anything that is not a readable matrix.
    """
    header_n: int | None = None
    header_line: int | None = None
    rows: dict[int, tuple[int, list[str]]] = {}
    names: dict[int, str] = {}
    ccs: dict[int, tuple[int, int]] = {}
    driver: str | None = None
    notes: list[str] = []
    in_matrix = False

    for lineno, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        if in_matrix and (tokens[0].lower().startswith("legend") or tokens[0].startswith("---")):
            break
        label = _GPU_LABEL_RE.fullmatch(tokens[0])
        if label is None:
            if not in_matrix:
                stripped = line.strip()
                if m := _CC_RE.match(stripped):
                    for i in _ids(m.group(1)):
                        ccs[i] = (int(m.group(2)), int(m.group(3)))
                elif m := _NAME_RE.match(stripped):
                    for i in _ids(m.group(1)):
                        names[i] = m.group(2)
                elif m := _DRIVER_RE.match(stripped):
                    driver = m.group(1)
            # Inside the matrix: NIC rows (NIC0, mlx5_0 …) say nothing about GPU pairs.
            continue
        is_row = len(tokens) > 1 and _is_code(tokens[1])
        if not is_row:
            if in_matrix:
                notes.append(f"ignored a second matrix starting at line {lineno}")
                break
            header_n = 0
            for tok in tokens:
                col = _GPU_LABEL_RE.fullmatch(tok)
                if col is None:
                    break
                if int(col.group(1)) != header_n:
                    raise ValueError(
                        f"line {lineno}: header column {tok!r} is out of order; "
                        f"expected 'GPU{header_n}'"
                    )
                header_n += 1
            header_line = lineno
            in_matrix = True
            continue
        if not in_matrix:
            notes.append(f"no header row; the matrix starts at line {lineno}")
            in_matrix = True
        index = int(label.group(1))
        if index in rows:
            raise ValueError(
                f"line {lineno}: a second row for GPU{index} (the first is on line "
                f"{rows[index][0]})"
            )
        rows[index] = (lineno, _split_cells(tokens[1:]))

    if not in_matrix:
        raise ValueError(
            "no `nvidia-smi topo -m` matrix found: expected a header row starting with 'GPU0' "
            "or a row starting with 'GPU0'"
        )
    if not rows:
        raise ValueError(f"line {header_line}: the header names GPU columns but no GPU rows follow")

    if header_n is None:
        n = _infer_gpu_count(rows)
        notes.append(f"GPU count inferred as {n} from the rows and NVLink cells (no header)")
    else:
        n = header_n
    codes: list[list[str | None]] = [[None] * n for _ in range(n)]
    where: dict[tuple[int, int], int] = {}
    for index, (lineno, cells) in sorted(rows.items()):
        if index >= n:
            raise ValueError(
                f"line {lineno}: row GPU{index}, but the matrix has only {n} GPU columns"
            )
        for j, cell in enumerate(cells[:n]):
            if not _CODE_RE.fullmatch(cell):
                raise ValueError(
                    f"line {lineno}: GPU{index} row, column GPU{j}: {cell!r} is not a topology "
                    f"code (expected {_EXPECTED_CODES})"
                )
            if (cell == "X") != (j == index):
                raise ValueError(
                    f"line {lineno}: GPU{index} row has {cell!r} in column GPU{j}; 'X' must be "
                    f"exactly on the diagonal"
                )
            codes[index][j] = "SYS" if cell == "SOC" else cell
            where[(index, j)] = lineno

    for i in range(n):
        codes[i][i] = "X"
        for j in range(i + 1, n):
            a, b = codes[i][j], codes[j][i]
            if a is not None and b is not None and a != b:
                raise ValueError(
                    f"GPU{i}-GPU{j} is {a!r} on line {where[(i, j)]} but GPU{j}-GPU{i} is "
                    f"{b!r} on line {where[(j, i)]}; the matrix must be symmetric"
                )
            codes[i][j] = codes[j][i] = a if a is not None else b

    missing = [i for i in range(n) if i not in rows]
    if missing:
        notes.append(
            "rows not in the capture: "
            + ", ".join(f"GPU{i}" for i in missing)
            + "; their pairs were read from the other rows"
        )
    unknown = sum(1 for i in range(n) for j in range(i + 1, n) if codes[i][j] is None)
    if unknown:
        notes.append(f"{unknown} GPU pairs are not shown in the capture (an excerpt?)")
    return TopoMatrix(
        codes=tuple(tuple(row) for row in codes),
        header_line=header_line,
        names={i: v for i, v in names.items() if i < n},
        compute_capabilities={i: v for i, v in ccs.items() if i < n},
        driver_version=driver,
        notes=tuple(notes),
    )


def _infer_gpu_count(rows: dict[int, tuple[int, list[str]]]) -> int:
    """Without a header: the highest row index, and the last NVLink cell (NICs have no NVLink)."""
    n = max(rows) + 1
    for _lineno, cells in rows.values():
        for j, cell in enumerate(cells):
            if not _CODE_RE.fullmatch(cell):
                break
            if cell.startswith("NV"):
                n = max(n, j + 1)
    return n


def topology_from_matrix(matrix: TopoMatrix) -> GpuTopology:
    """Build the :class:`GpuTopology` a capture describes (no UUIDs, link counts or fabric)."""
    gpus = []
    for i in range(matrix.gpu_count):
        cc = matrix.compute_capabilities.get(i)
        gpus.append(
            GpuInfo(
                index=i,
                name=matrix.names.get(i),
                cc_major=cc[0] if cc else None,
                cc_minor=cc[1] if cc else None,
            )
        )
    return GpuTopology(
        gpus=tuple(gpus),
        nvlink=matrix.nvlink(),
        driver_version=matrix.driver_version,
        source=SOURCE,
        notes=matrix.notes,
    )


def parse_topo(text: str) -> GpuTopology:
    """Parse a ``topo -m`` capture straight to a :class:`GpuTopology`."""
    return topology_from_matrix(parse_topo_matrix(text))
