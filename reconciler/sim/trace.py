"""Read cluster traces in the openb CSV schema (Alibaba GPU-sharing trace, FGD ATC '23).

Nodes: ``sn, cpu_milli, memory_mib, gpu, model``.
Pods:  ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec, qos,
pod_phase, creation_time, deletion_time, scheduled_time``.

Errors are `TraceError`s whose message names the file and, where it applies, the line.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from reconciler.plan.placement import GPU_MILLI, NodeState, PodDemand

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPENB_ENV = "GPUPOOL_OPENB_DIR"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"


class TraceError(Exception):
    """A trace file is missing or malformed; the message names the file (and line)."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def state(self) -> NodeState:
        return NodeState(
            self.name, self.model, self.cpu_milli, self.memory_mib, [GPU_MILLI] * self.gpus
        )


@dataclass(frozen=True)
class Pod:
    name: str
    req: PodDemand
    qos: str = ""
    phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def openb_dir() -> Path:
    """Where the openb trace lives: $GPUPOOL_OPENB_DIR, else ../shared/data/openb next to
    the repository."""
    env = os.environ.get(OPENB_ENV)
    if env:
        return Path(env)
    return repo_root().parent / "shared" / "data" / "openb"


def openb_file(name: str, instead: str) -> Path:
    """The openb trace's file `name`, read by default when the user names no file; if it is
    not there, a TraceError that says where it looked, why there, and how to point elsewhere:
    $GPUPOOL_OPENB_DIR, or `instead` (the command's options, e.g. "--nodes CSV")."""
    path = openb_dir() / name
    if path.is_file():
        return path
    env = os.environ.get(OPENB_ENV)
    why = (
        f"the openb folder from {OPENB_ENV}={env}"
        if env
        else f"{OPENB_ENV} is not set, so the openb folder is ../shared/data/openb next to "
        "the repository"
    )
    raise TraceError(
        f"{path}: file not found (the default trace file: {why}): set {OPENB_ENV} to the "
        f"folder that holds {name}, or give {instead}"
    )


def _rows(path: Path, required: tuple[str, ...]):
    try:
        f = open(path, newline="", encoding="utf-8")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise TraceError(f"{path}: file not found") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        if not header:
            raise TraceError(f"{path}:1: empty file, expected a header row ({','.join(required)})")
        header = [h.strip() for h in header]
        reader.fieldnames = header
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column(s) {', '.join(missing)} (have {', '.join(header)})"
            )
        try:
            for row in reader:
                if None in row:  # more fields than the header has
                    raise TraceError(
                        f"{path}:{reader.line_num}: {len(header) + len(row[None])} fields, "
                        f"the header has {len(header)}"
                    )
                yield reader.line_num, row
        except csv.Error as exc:
            raise TraceError(f"{path}:{reader.line_num}: {exc}") from None
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text") from None


def _int(
    path: Path,
    line: int,
    row: dict,
    col: str,
    *,
    optional: bool = False,
    lo: int = 0,
    hi: int | None = None,
) -> int | None:
    raw = row.get(col)
    raw = "" if raw is None else raw.strip()
    if raw == "":
        if optional:
            return None
        raise TraceError(f"{path}:{line}: column {col} is empty")
    try:
        v = int(raw)
    except ValueError:
        try:
            fv = float(raw)
        except ValueError:
            raise TraceError(f"{path}:{line}: column {col}: {raw!r} is not a number") from None
        if not fv.is_integer():
            raise TraceError(f"{path}:{line}: column {col}: {raw!r} is not an integer") from None
        v = int(fv)
    if v < lo or (hi is not None and v > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise TraceError(f"{path}:{line}: column {col}: {v} out of range ({bound})")
    return v


def read_nodes(path: str | os.PathLike) -> list[NodeSpec]:
    path = Path(path)
    out, seen = [], set()
    for line, row in _rows(path, NODE_COLUMNS):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: column sn is empty")
        if name in seen:
            raise TraceError(f"{path}:{line}: duplicate node {name}")
        seen.add(name)
        out.append(
            NodeSpec(
                name,
                _int(path, line, row, "cpu_milli"),
                _int(path, line, row, "memory_mib"),
                _int(path, line, row, "gpu", hi=64),
                (row["model"] or "").strip(),
            )
        )
    if not out:
        raise TraceError(f"{path}: no nodes, only the header: give one row per node")
    return out


def read_pods(path: str | os.PathLike) -> list[Pod]:
    path = Path(path)
    out = []
    for line, row in _rows(path, POD_COLUMNS):
        name = (row["name"] or "").strip()
        if not name:
            raise TraceError(f"{path}:{line}: column name is empty")
        num_gpu = _int(path, line, row, "num_gpu", hi=64)
        gpu_milli = _int(path, line, row, "gpu_milli", hi=GPU_MILLI)
        if num_gpu > 0 and gpu_milli == 0:
            raise TraceError(f"{path}:{line}: num_gpu is {num_gpu} but gpu_milli is 0")
        if num_gpu > 1 and gpu_milli < GPU_MILLI:
            raise TraceError(
                f"{path}:{line}: a {num_gpu}-GPU pod must take whole GPUs (gpu_milli 1000)"
            )
        if num_gpu == 0:
            gpu_milli = 0
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m.strip() for m in spec.split("|") if m.strip()) if spec else None
        req = PodDemand(
            num_gpu=num_gpu,
            gpu_milli=gpu_milli,
            cpu_milli=_int(path, line, row, "cpu_milli"),
            memory_mib=_int(path, line, row, "memory_mib"),
            gpu_models=models if num_gpu > 0 else None,
        )
        out.append(
            Pod(
                name,
                req,
                qos=(row.get("qos") or "").strip(),
                phase=(row.get("pod_phase") or "").strip(),
                creation_time=_int(path, line, row, "creation_time", optional=True)
                if "creation_time" in row
                else None,
                deletion_time=_int(path, line, row, "deletion_time", optional=True)
                if "deletion_time" in row
                else None,
                scheduled_time=_int(path, line, row, "scheduled_time", optional=True)
                if "scheduled_time" in row
                else None,
            )
        )
    if not out:
        raise TraceError(f"{path}: no pods, only the header: give one row per pod")
    return out
