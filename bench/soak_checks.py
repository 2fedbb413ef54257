"""What bench/soak.py checks while it runs and reports at the end: the cluster seen by polling
(over-committed cards, admissions, runs and losses of pods, gangs), the controller replicas'
/metrics (cycles by result, cycle-time histogram) and memory (VmRSS), and their logs (why cycles
failed). Nothing here changes the cluster."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.conventions import (
    ADMISSION_GATE,
    ADMITTED_ANN,
    GANG_ANN,
    GANG_SIZE_ANN,
    GPU_RESOURCE,
)

TERMINAL = ("Succeeded", "Failed")


def gpus_of(pod: dict) -> int:
    n = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        n += int(limits.get(GPU_RESOURCE, 0) or 0)
    return n


@dataclass
class PodLife:
    """One pod as the observer saw it (names are never reused by the generator)."""

    name: str
    gpus: int
    gang: str | None
    created: float
    admitted: list[str] = field(default_factory=list)  # every distinct ADMITTED_ANN value seen
    node: str | None = None
    running_at: float | None = None
    ended_at: float | None = None
    end: str = ""  # Succeeded | Failed:<reason> | deleted | ""
    stopping_at: float | None = None  # deletionTimestamp first seen


class Observer:
    """Polls the workload namespace's pods and the nodes every `period` seconds (lists, not
    watches: the API server restarts under it) and keeps each pod's life and the invariants."""

    def __init__(self, core: Any, ns: str, period: float = 1.0):
        self.core, self.ns, self.period = core, ns, period
        self.pods: dict[str, PodLife] = {}
        self.allocatable: dict[str, int] = {}
        self.ready: dict[str, bool] = {}
        self.overcommit: list[str] = []  # "t node: bound N > cards M"
        self.admitted_to_failed: list[str] = []
        self.errors: Counter = Counter()
        self.polls = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> None:
        while not self.stop.wait(self.period):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - the API server may be restarting
                self.errors[type(exc).__name__] += 1

    def _list(self, fn: Any, *args: Any) -> list[dict]:
        resp = fn(*args, _preload_content=False, _request_timeout=10)
        return json.loads(resp.data)["items"]

    def poll(self) -> None:
        nodes = self._list(self.core.list_node)
        pods = self._list(self.core.list_namespaced_pod, self.ns)
        t = self.now()
        with self.lock:
            self.polls += 1
            for n in nodes:
                name = n["metadata"]["name"]
                alloc = (n.get("status") or {}).get("allocatable") or {}
                self.allocatable[name] = int(alloc.get(GPU_RESOURCE, 0) or 0)
                conds = {c["type"]: c["status"] for c in n["status"].get("conditions") or []}
                self.ready[name] = conds.get("Ready") == "True"
            seen = set()
            for p in pods:
                seen.add(p["metadata"]["name"])
                self._see(p, t)
            for life in self.pods.values():
                if life.name not in seen and not life.end:
                    life.end, life.ended_at = "deleted", t
            self._check_overcommit(pods, t)

    def _see(self, p: dict, t: float) -> None:
        meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
        ann = meta.get("annotations") or {}
        life = self.pods.get(meta["name"])
        if life is None:
            life = self.pods[meta["name"]] = PodLife(meta["name"], gpus_of(p), ann.get(GANG_ANN), t)
        adm = ann.get(ADMITTED_ANN)
        if adm and adm not in life.admitted:
            life.admitted.append(adm)
            if self.ready.get(adm) is False:
                self.admitted_to_failed.append(f"{t:.0f}s {life.name} -> {adm} (NotReady)")
        life.node = spec.get("nodeName") or life.node
        phase = status.get("phase")
        if phase == "Running" and life.running_at is None:
            life.running_at = t
        if meta.get("deletionTimestamp") and life.stopping_at is None:
            life.stopping_at = t
        if phase in TERMINAL and not life.end:
            life.end, life.ended_at = phase, t
            if phase == "Failed":
                life.end = f"Failed:{status.get('reason') or '?'}"

    def _check_overcommit(self, pods: list[dict], t: float) -> None:
        """Cards asked for by the pods bound to each node and not finished (Terminating ones
        included: their cards are not free until the kubelet's final delete) against the
        node's allocatable nvidia.com/gpu."""
        bound: Counter = Counter()
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in TERMINAL:
                bound[node] += gpus_of(p)
        for node, n in bound.items():
            cards = self.allocatable.get(node, 0)
            if n > cards:
                self.overcommit.append(f"{t:.0f}s {node}: bound {n} > cards {cards}")

    # ---- figures ---------------------------------------------------------------------------

    def on_node(self, node: str) -> list[PodLife]:
        with self.lock:
            return [p for p in self.pods.values() if p.node == node and not p.end]

    def gang_members(self, gang: str) -> list[PodLife]:
        with self.lock:
            return [p for p in self.pods.values() if p.gang == gang]

    def gpu_seconds(self, until: float) -> dict[str, float]:
        """useful: GPU-seconds of pods that ran to Succeeded; lost: of pods that ran and ended
        otherwise (deleted, evicted, Failed) or were stopped; running: still running at the end."""
        out = {"useful": 0.0, "lost": 0.0, "running": 0.0}
        with self.lock:
            for p in self.pods.values():
                if p.running_at is None:
                    continue
                end = p.ended_at if p.ended_at is not None else until
                key = "useful" if p.end == "Succeeded" else ("running" if not p.end else "lost")
                out[key] += p.gpus * max(0.0, end - p.running_at)
        return out

    def repeated_admissions(self) -> list[str]:
        with self.lock:
            return [
                f"{p.name}: {' then '.join(p.admitted)}"
                for p in self.pods.values()
                if len(p.admitted) > 1
            ]

    def kubelet_refusals(self) -> list[str]:
        with self.lock:
            return [
                f"{p.name} on {p.node}"
                for p in self.pods.values()
                if p.end == "Failed:UnexpectedAdmissionError"
            ]


def lost_groups(
    items: list[dict], capacity: dict[str, int], why: Any = lambda p: ""
) -> dict[str, list[str]]:
    """What counts as lost in the pods `items` (the API's JSON) once the chaos is over: pods
    gpupool admitted that are still unbound, and gated groups (a gang: all its members, one
    group after the other by name, so two cannot share one free node) that fit, each pod on one
    node, the free cards of `capacity` (node -> cards, the nodes gpupool may place on) less what
    the bound, unfinished pods there ask. Terminating pods are left out, as gpupool leaves them
    out. A gang with fewer pods than its `gpupool.io/gang-size` is not complete: gpupool waits
    for the rest, so it is listed apart, not as lost. `why(pod)`: gpupool's hold reason."""
    free = dict(capacity)
    waiting: dict[str, list[dict]] = {}
    unbound: list[str] = []
    for p in items:
        meta, spec = p["metadata"], p.get("spec") or {}
        if meta.get("deletionTimestamp"):
            continue
        node = spec.get("nodeName")
        if node:
            if node in free and (p.get("status") or {}).get("phase") not in TERMINAL:
                free[node] -= gpus_of(p)
            continue
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        ann = meta.get("annotations") or {}
        if ADMISSION_GATE in gates:
            waiting.setdefault(ann.get(GANG_ANN) or meta["name"], []).append(p)
        elif ADMITTED_ANN in ann:
            unbound.append(f"{meta['name']} -> {ann[ADMITTED_ANN]}")
    fits, incomplete = [], []
    taken = dict(free)
    for group, pods in sorted(waiting.items()):
        size = (pods[0]["metadata"].get("annotations") or {}).get(GANG_SIZE_ANN)
        if size and size.isdigit() and len(pods) < int(size):
            incomplete.append(f"{group} ({len(pods)} of {size} pods)")
            continue
        left = placed(pods, taken)
        if left is not None:
            taken = left
            fits.append(
                f"{group} ({len(pods)} pod(s), {sum(gpus_of(p) for p in pods)} cards; "
                f"held: {why(pods[0])}; free {dict(sorted(free.items()))})"
            )
    return {
        "admitted, unbound": unbound,
        "gated, fits the free cards": fits,
        "waiting, not lost: gang incomplete": incomplete,
    }


def placed(pods: list[dict], free: dict[str, int]) -> dict[str, int] | None:
    """`free` after placing `pods` greedily (largest first, each on the first node by name
    with room); None when one does not fit."""
    left = dict(free)
    for p in sorted(pods, key=gpus_of, reverse=True):
        node = next((n for n, c in sorted(left.items()) if c >= gpus_of(p)), None)
        if node is None:
            return None
        left[node] -= gpus_of(p)
    return left


NOT_LOST = ("waiting, not lost: gang incomplete", "waiting, not lost: nodes settling")
"""Entries of `lost_groups`'s answer (and soak.py's) that are reported but not counted as lost."""


def stopped_whole(others: list[PodLife], t: float, window: float) -> bool | None:
    """Whether a gang whose member was lost with a node at `t` was stopped whole: each of its
    `others` (its members on other nodes) that still ran at `t` was stopped (deletion begun, or
    ended other than Succeeded) within `window` s. None: not judged: none of them still ran at
    `t`, or one finished (Succeeded) within the window (its work was done; nothing to stop)."""
    end = t + window
    running = [p for p in others if p.ended_at is None or p.ended_at > t]
    if not running or any(p.end == "Succeeded" and p.ended_at <= end for p in running):
        return None
    return all(
        (p.stopping_at is not None and p.stopping_at <= end)
        or (p.ended_at is not None and p.ended_at <= end and p.end != "Succeeded")
        for p in running
    )


# ---------------------------------------------------------------- the controller's side


def parse_metrics(text: str) -> dict[str, Any]:
    """The figures the soak reads from one /metrics scrape: cycles by result and the cycle-time
    histogram's cumulative buckets."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"cycles": Counter(), "buckets": {}, "count": 0.0, "sum": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "gpupool_reconciles_total":
                out["cycles"][s.labels.get("result", "?")] += s.value
            elif s.name == "gpupool_reconcile_duration_seconds_bucket":
                out["buckets"][float(s.labels["le"])] = s.value
            elif s.name == "gpupool_reconcile_duration_seconds_count":
                out["count"] = s.value
            elif s.name == "gpupool_reconcile_duration_seconds_sum":
                out["sum"] = s.value
    return out


def percentile(buckets: dict[float, float], q: float) -> float | None:
    """Quantile q of a cumulative histogram, interpolated linearly inside the bucket (as
    Prometheus' histogram_quantile does)."""
    edges = sorted(buckets)
    if not edges or buckets[edges[-1]] <= 0:
        return None
    rank = q * buckets[edges[-1]]
    prev_edge, prev_count = 0.0, 0.0
    for e in edges:
        c = buckets[e]
        if c >= rank:
            if e == float("inf"):
                return prev_edge
            span = c - prev_count
            return prev_edge + (e - prev_edge) * ((rank - prev_count) / span if span else 1.0)
        prev_edge, prev_count = e, c
    return prev_edge


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def scrape(port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
            return parse_metrics(r.read().decode())
    except OSError:
        return None


_FAIL = re.compile(r"reconcile cycle failed(?P<rest>.*)")


def failure_reasons(log_text: str) -> Counter:
    """Why cycles failed, from a replica's log: the controller writes one line per failed cycle
    (reconciler/loop/controller.py: connection failures, the API server's refusals by HTTP
    status, anything else with its traceback)."""
    out: Counter = Counter()
    for line in log_text.splitlines():
        m = _FAIL.search(line)
        if not m:
            continue
        rest = m.group("rest")
        if "connection to the API server failed" in rest:
            out["connection to the API server"] += 1
        elif (h := re.search(r"answered HTTP (\d+)", rest)) is not None:
            out[f"HTTP {h.group(1)}"] += 1
        else:
            out["other: " + (rest.strip(" :()")[:80] or "(traceback in the log)")] += 1
    return out
