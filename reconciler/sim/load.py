"""The digital twin's inputs as files: an inference load curve and a list of training jobs.

* Inference load: a CSV of request counts per fixed interval, `Time,TIMESTAMP` (the Azure LLM
  inference trace 2024 as binned in `../shared/data/inference-load`: `Time` a UTC label
  `YYYY-MM-DD HH:MM:SS`, `TIMESTAMP` the requests in that bin). Times strictly increase; the
  bin width is the most common step between rows.
* Training jobs: a CSV `arrival,gpus,duration[,checkpoint_period][,checkpointable]`
  (seconds, whole cards, seconds of work, seconds between the job's own checkpoints, 0/1:
  whether it checkpoints when asked), rows sorted by arrival; or the openb trace's whole-card
  training pods (`openb_jobs`).

`scaled` stretches or compresses the jobs' arrival times (never their durations) and repeats
the list so that the offered training work is a chosen multiple of the capacity training can
use. Bad input raises `TraceError` with the file and line, one line of text.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from reconciler.sim.timeline import BUSY_FROM
from reconciler.sim.trace import Pod, TraceError

DEFAULT_CHECKPOINT_PERIOD = 1800.0
"""Seconds between a training job's own checkpoints when its input does not say."""


@dataclass(frozen=True)
class LoadCurve:
    """Requests arriving per bin of `bin_seconds`, from `start`."""

    path: str
    start: datetime
    bin_seconds: float
    counts: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return self.bin_seconds * len(self.counts)

    def window(self, t0: float, t1: float) -> list[tuple[float, float, float]]:
        """(start, width, requests) of the bins overlapping [t0, t1), cut at the edges (a bin
        cut in part brings its requests in proportion)."""
        out = []
        b = self.bin_seconds
        i = max(0, int(t0 // b))
        while i < len(self.counts) and i * b < t1:
            lo, hi = max(t0, i * b), min(t1, (i + 1) * b)
            if hi > lo:
                out.append((lo, hi - lo, self.counts[i] * (hi - lo) / b))
            i += 1
        return out

    def mean_rate(self, t1: float | None = None) -> float:
        """Mean requests per second over [0, t1) (default: the whole curve)."""
        n = (
            len(self.counts)
            if t1 is None
            else max(1, min(len(self.counts), int(t1 // self.bin_seconds)))
        )
        return sum(self.counts[:n]) / (n * self.bin_seconds)

    def peak_rate(self, window_seconds: float = 600.0) -> float:
        """The highest mean request rate over `window_seconds` (aligned windows)."""
        k = max(1, int(round(window_seconds / self.bin_seconds)))
        best = 0.0
        for i in range(0, len(self.counts), k):
            chunk = self.counts[i : i + k]
            best = max(best, sum(chunk) / (len(chunk) * self.bin_seconds))
        return best


@dataclass(frozen=True)
class JobSpec:
    """A whole-card training job: `gpus` cards on one node for `duration` seconds of work."""

    name: str
    arrival: float
    gpus: int
    duration: float
    checkpoint_period: float = DEFAULT_CHECKPOINT_PERIOD
    checkpointable: bool = False


def _rows(path: Path, required: Sequence[str]):
    try:
        f = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}:1: missing column{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} (found: {', '.join(header) or 'nothing'})"
            )
        for row in reader:
            yield reader.line_num, row


def _number(path: Path, line: int, column: str, text: str | None, *, positive=False) -> float:
    try:
        v = float(text or "")
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} {text!r} is not a number") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise TraceError(f"{path}:{line}: {column} {text!r} is not a finite number")
    if v < 0 or (positive and v == 0):
        raise TraceError(
            f"{path}:{line}: {column} {text} must be {'positive' if positive else '>= 0'}"
        )
    return v


def read_load(path: str | Path) -> LoadCurve:
    """The load curve in `path` (`Time,TIMESTAMP`), or TraceError naming file and line."""
    path = Path(path)
    times: list[datetime] = []
    counts: list[float] = []
    for line, row in _rows(path, ("Time", "TIMESTAMP")):
        text = (row.get("Time") or "").strip()
        try:
            t = datetime.fromisoformat(text)
        except ValueError:
            raise TraceError(f"{path}:{line}: Time {text!r} is not YYYY-MM-DD HH:MM:SS") from None
        t = t if t.tzinfo else t.replace(tzinfo=UTC)
        if times and t <= times[-1]:
            raise TraceError(
                f"{path}:{line}: Time {text} is not after the previous row's "
                f"({times[-1]:%Y-%m-%d %H:%M:%S}): rows must be sorted, one per bin"
            )
        times.append(t)
        counts.append(_number(path, line, "TIMESTAMP (requests)", row.get("TIMESTAMP")))
    if len(times) < 2:
        raise TraceError(
            f"{path}: {len(times)} row{'s' if len(times) != 1 else ''} of requests; a load needs "
            "at least two (one per bin: the bin width is the step between rows)"
        )
    steps = Counter((b - a).total_seconds() for a, b in zip(times, times[1:], strict=False))
    width = steps.most_common(1)[0][0]
    return LoadCurve(str(path), times[0], width, tuple(counts))


def read_jobs(path: str | Path) -> list[JobSpec]:
    """Training jobs from a CSV (see the module docstring), or TraceError."""
    path = Path(path)
    out: list[JobSpec] = []
    for line, row in _rows(path, ("arrival", "gpus", "duration")):
        arrival = _number(path, line, "arrival", row.get("arrival"))
        if out and arrival < out[-1].arrival:
            raise TraceError(
                f"{path}:{line}: arrival {row.get('arrival')} is before the previous row's "
                f"({out[-1].arrival:g}): rows must be sorted by arrival"
            )
        gpus = _number(path, line, "gpus", row.get("gpus"), positive=True)
        if gpus != int(gpus):
            raise TraceError(f"{path}:{line}: gpus {row.get('gpus')} is not a whole number")
        duration = _number(path, line, "duration", row.get("duration"), positive=True)
        period = DEFAULT_CHECKPOINT_PERIOD
        if (row.get("checkpoint_period") or "").strip():
            period = _number(
                path, line, "checkpoint_period", row.get("checkpoint_period"), positive=True
            )
        flag = (row.get("checkpointable") or "0").strip().lower()
        if flag not in ("0", "1", "true", "false", ""):
            raise TraceError(f"{path}:{line}: checkpointable {flag!r} is not 0 or 1")
        out.append(
            JobSpec(
                f"job-{len(out)}",
                arrival,
                int(gpus),
                duration,
                period,
                flag in ("1", "true"),
            )
        )
    if not out:
        raise TraceError(
            f"{path}: no jobs, only the header: give one row per job (arrival,gpus,duration)"
        )
    return out


def openb_jobs(
    pods: Sequence[Pod],
    checkpoint_period: float = DEFAULT_CHECKPOINT_PERIOD,
    busy_from: int = BUSY_FROM,
) -> list[JobSpec]:
    """The openb trace's training pods as jobs: whole cards, not latency-sensitive (the
    timeline's `classify`), created in the trace's busy period (from `busy_from` s, as the
    timeline), with creation and deletion times; run time = deletion - creation, arrivals
    relative to the first."""
    raw = [
        p
        for p in pods
        if p.req.num_gpu >= 1
        and (p.creation_time or 0) >= busy_from
        and p.req.gpu_milli >= 1000
        and p.qos != "LS"
        and p.creation_time is not None
        and p.deletion_time is not None
        and p.deletion_time > p.creation_time
    ]
    if not raw:
        raise TraceError(
            "no whole-card training pods with creation and deletion times "
            f"(created from {busy_from} s on, not LS) to make jobs of"
        )
    raw.sort(key=lambda p: (p.creation_time, p.name))
    t0 = raw[0].creation_time
    return [
        JobSpec(
            p.name,
            float(p.creation_time - t0),
            int(p.req.num_gpu),
            float(p.deletion_time - p.creation_time),
            checkpoint_period,
        )
        for p in raw
    ]


def work(jobs: Sequence[JobSpec]) -> float:
    return sum(j.gpus * j.duration for j in jobs)


def _spread(jobs: Sequence[JobSpec], factor: float, horizon: float) -> list[JobSpec]:
    """The jobs with the time between arrivals multiplied by `factor`, the list repeated
    (one mean gap after its last arrival) until `horizon`."""
    t0 = jobs[0].arrival
    span = jobs[-1].arrival - t0
    gap = span / max(len(jobs) - 1, 1) or 1.0
    period = max((span + gap) * factor, 1e-3)
    out: list[JobSpec] = []
    rnd = 0
    while True:
        for j in jobs:
            t = rnd * period + (j.arrival - t0) * factor
            if t >= horizon:
                return out
            out.append(replace(j, name=f"{j.name}-{rnd}" if rnd else j.name, arrival=t))
        rnd += 1


def offered(jobs: Sequence[JobSpec], horizon: float) -> float:
    """Card-seconds the jobs would hold within [0, horizon) if each started on arrival."""
    return sum(j.gpus * min(j.duration, horizon - j.arrival) for j in jobs if j.arrival < horizon)


def scaled(jobs: Sequence[JobSpec], *, load: float, gpus: float, horizon: float) -> list[JobSpec]:
    """The jobs with arrivals spread or compressed (one factor for every gap; the list
    repeated when it ends before `horizon`) so that the work they offer within the
    simulated span, `offered`, is `load` x `gpus` x `horizon`. Durations, sizes and order
    are kept; only the time between arrivals changes."""
    if not load > 0 or not gpus > 0:
        raise ValueError("training load and the capacity it is relative to must be positive")
    if not jobs:
        raise ValueError("no training jobs")
    want = load * gpus * horizon
    lo, hi = 1e-6, 1e3  # factors: lo offers the most work, hi the least
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        if offered(_spread(jobs, mid, horizon), horizon) >= want:
            lo = mid
        else:
            hi = mid
    return _spread(jobs, lo, horizon)
