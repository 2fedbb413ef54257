"""Output for `gpupool simulate`: a text table, JSON records, a PNG plot, a progress bar."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import TextIO


class ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.label = label
        self.width = width
        self.start = time.monotonic()
        self._last = -1.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        frac = done / total
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {frac * 100:5.1f}% {now - self.start:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def text_table(records: Sequence[dict], columns: Sequence[tuple[str, str, str]]) -> str:
    """Columns are (key, header, format spec)."""
    head = [h for _, h, _ in columns]
    rows = []
    for r in records:
        row = []
        for key, _, fmt in columns:
            v = r.get(key, "")
            row.append(format(v, fmt) if v != "" and v is not None else "-")
        rows.append(row)
    widths = [
        max(len(head[i]), *(len(row[i]) for row in rows)) if rows else len(head[i])
        for i in range(len(head))
    ]
    lines = [
        "  ".join(
            h.rjust(w) if i else h.ljust(w)
            for i, (h, w) in enumerate(zip(head, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


REPLAY_COLUMNS = [
    ("policy", "policy", ""),
    ("seed", "seed", "d"),
    ("total_gpus", "GPUs", "d"),
    ("pods", "pods", "d"),
    ("alloc_pct", "alloc %", ".2f"),
    ("frag_pct", "frag %", ".1f"),
    ("unscheduled_pods", "unscheduled", "d"),
    ("migrations", "migrations", "d"),
    ("seconds", "time s", ".1f"),
]

TIMELINE_COLUMNS = [
    ("policy", "setup", ""),
    ("seed", "seed", "d"),
    ("total_gpus", "GPUs", "d"),
    ("alloc_pct", "time-wtd alloc %", ".1f"),
    ("train_wait_p50_s", "train wait p50 s", ".0f"),
    ("train_wait_p99_s", "train wait p99 s", ".0f"),
    ("infer_pending_p99_s", "infer pending p99 s", ".0f"),
    ("preemptions", "preemptions", "d"),
    ("migrations", "migrations", "d"),
    ("unscheduled_pods", "never ran", "d"),
    ("seconds", "time s", ".1f"),
]


def with_percentages(records: Sequence[dict]) -> list[dict]:
    out = []
    for r in records:
        r = dict(r)
        r["alloc_pct"] = r["gpu_allocation_ratio"] * 100
        r["frag_pct"] = r.get("fragmentation_rate", 0.0) * 100
        out.append(r)
    return out


def dumps(records: Sequence[dict]) -> str:
    return json.dumps(list(records), indent=2)


def plot_replay(records: Sequence[dict], path: str, title: str = "") -> None:
    """Allocation ratio vs arrived workload, one line per policy (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_policy: dict[str, list[list[float]]] = {}
    for r in records:
        by_policy.setdefault(r["policy"], []).append(r["allocation_curve"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for policy, curves in by_policy.items():
        n = min(len(c) for c in curves)
        mean = [sum(c[i] for c in curves) / len(curves) for i in range(n)]
        ax.plot(range(n), mean, label=f"{policy} ({mean[-1]:.1f}%)")
    ax.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPU allocation (% of capacity)")
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    _finish(plt, fig, ax, path, title)


def _finish(plt, fig, ax, path: str, title: str) -> None:
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_timeline(records: Sequence[dict], path: str, title: str = "") -> None:
    """Allocated GPU % over time, one line per setup (first seed of each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    seen = set()
    for r in records:
        if r["policy"] in seen or not r.get("series"):
            continue
        seen.add(r["policy"])
        xs = [p[0] / 3600 for p in r["series"]]
        ys = [p[1] for p in r["series"]]
        ax.step(
            xs,
            ys,
            where="post",
            linewidth=0.8,
            label=f"{r['policy']} (mean {r['gpu_allocation_ratio'] * 100:.0f}%)",
        )
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("GPU allocation (% of capacity)")
    ax.set_ylim(0, 100)
    _finish(plt, fig, ax, path, title)


# ----------------------------------------------------------------------------- twin mode
TWIN_COLUMNS = [
    ("run", "run", ""),
    ("inference_cards", "infer cards", ""),
    ("useful_utilisation", "useful", ".1%"),
    ("allocation", "alloc", ".1%"),
    ("inference_needed", "inf need", ".1%"),
    ("inference_overprovisioned", "inf over", ".1%"),
    ("training", "train", ".1%"),
    ("slo_attainment", "SLO", ".2%"),
    ("shortfall_gpu_s", "short GPU-s", ".0f"),
    ("training_gpu_h_done", "train GPU-h", ".0f"),
    ("jobs_done", "jobs", "d"),
    ("queue_wait_p50_s", "wait p50 s", ".0f"),
    ("queue_wait_p99_s", "wait p99 s", ".0f"),
    ("preemptions_per_hour", "preempt/h", ".2f"),
    ("gpu_h_lost", "lost GPU-h", ".1f"),
    ("seconds", "wall s", ".1f"),
    ("best", "", ""),
]
FAILURE_COLUMNS = [
    ("failures", "failures", "d"),
    ("failure_gpu_h_lost", "fail lost GPU-h", ".1f"),
    ("failure_gpu_h_down", "down GPU-h", ".1f"),
    ("recovery_p50_s", "recover p50 s", ".0f"),
    ("recovery_max_s", "recover max s", ".0f"),
    ("not_recovered", "unrecovered", "d"),
]
"""Added to TWIN_COLUMNS when the twin ran with node failures (`reconciler.sim.failures`)."""


def twin_columns(failures: bool) -> list[tuple[str, str, str]]:
    """TWIN_COLUMNS, with FAILURE_COLUMNS before the wall time when the run had failures."""
    if not failures:
        return list(TWIN_COLUMNS)
    at = next(i for i, c in enumerate(TWIN_COLUMNS) if c[0] == "seconds")
    return [*TWIN_COLUMNS[:at], *FAILURE_COLUMNS, *TWIN_COLUMNS[at:]]


def plot_twin(result, path: str, title: str = "") -> None:
    """Both pools over time: the unified pool's inference and training cards, the cards the
    load needed, and the best static split's line (or the largest one run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.6, 4.2), dpi=100)
    s = result.unified.series
    xs = [p[0] for p in s]
    ax.step(xs, [p[1] for p in s], where="post", linewidth=0.7, label="inference cards (unified)")
    ax.step(xs, [p[3] for p in s], where="post", linewidth=0.7, label="training cards (unified)")
    ax.plot(xs, [p[2] for p in s], linewidth=0.5, color="black", label="inference cards needed")
    static = dict(result.static)
    n = result.best if result.best is not None else max(static, default=None)
    if n is not None:
        ax.axhline(n, color="grey", linestyle="--", linewidth=0.8, label=f"static split: {n}")
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("cards")
    ax.set_ylim(0, result.unified.pool_gpus)
    _finish(plt, fig, ax, path, title)
