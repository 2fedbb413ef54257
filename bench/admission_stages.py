"""Where the time between a pod's creation and its binding goes in `admission_openb.py`'s gated
runs (issue 32: the DRA run's allocation under the device plugin's), from the replay's watch of
the namespace's pods (created, admitted, bound, running; the delete sent and the pod gone), a
watch of its ResourceClaims on DRA (`ClaimWatch`: the pinned claim's creation, the allocation
first seen, the allocation gone), and the controller's own record of each Admit step
(`StepClock`: the cycle that admitted the pod, when the step began and ended, its requests).

Every time is wall seconds since the replay's start, as the replay counts them (the controller
child counts from the same instant). A pod admitted to a node waited for cards there; the last
*release* on that node before its Admit step ends (the device plugin: a pod of the run gone
from the API; DRA: its claim's allocation gone as well, which the Admit step waits for,
`Admit.after_claims`, and a plan made after the pod went, `dra-claim-unreleased`) or its
creation, whichever is later, is when it could first be admitted
(`ready`; a step that waited for the pod it frees cards from to go began before that, so its
`ready -> cycle` is negative). From there:
the cycle that admitted it starts (`ready -> cycle`), reaches its Admit step (`cycle -> step`:
the status read, observe, plan and the steps before), the step's requests (`step`), the pod seen
ungated (`step end -> admitted`), the scheduler binds it (`admitted -> bound`; on DRA the claim
is allocated first, `admitted -> allocated`), the kubelet runs it (`bound -> running`). On the
way out: the delete sent -> the pod gone (`delete -> gone`), and on DRA the pod gone -> its
claim's allocation gone (`gone -> freed`: kube-controller-manager's resourceclaim controller).
A card idles from a release to the next holder's start (`ready -> running` on the device
plugin, whose allocation is the kubelets' device managers; `ready -> allocated` on DRA, whose
allocation is the claims')."""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.openb_baselines import pct  # noqa: E402

STAGES = (
    ("creation -> claim named", "created", "claimed"),
    ("delete -> gone", "deleted", "gone"),
    ("gone -> claim freed", "gone", "freed"),
    ("ready -> cycle start", "ready", "cycle"),
    ("cycle start -> Admit step", "cycle", "step"),
    ("Admit step", "step", "step_end"),
    ("step end -> seen ungated", "step_end", "admitted"),
    ("ungated -> claim allocated", "admitted", "allocated"),
    ("ungated -> bound", "admitted", "bound"),
    ("bound -> running", "bound", "running"),
    ("creation -> ungated", "created", "admitted"),
    ("ready -> ungated", "ready", "admitted"),
    ("ready -> card taken", "ready", "taken"),
)


class StepClock:
    """The controller's side: per admitted pod, the cycle's start, the Admit step's start and
    end (wall s since `zero`, a time.monotonic()) and the API requests the step made; per cycle
    the time to its first step. Installed on a `Controller` by wrapping its executor's `step`
    and counting its ApiClient's requests per thread."""

    def __init__(self) -> None:
        self.zero = 0.0
        self.cycle_at = 0.0
        self.admits: dict[str, list[float]] = {}  # pod -> [cycle, step, step end, requests]
        self.tries: Counter = Counter()  # pod -> Admit steps that did not admit it
        self.requests: Counter = Counter()  # "METHOD kind" over the admitting steps
        self.to_gate: list[float] = []  # per admitting step: requests up to its last gate
        self.starts: list[float] = []  # every cycle's start
        self.orders: dict[str, list[str]] = {}  # pod -> its admitting step's requests, in order
        self.phase: Counter = Counter()  # this cycle: wall s in the cache wait, observe, ...
        self.phases: Counter = Counter()  # summed over the cycles that admitted a pod
        self.admitting = 0  # cycles that admitted a pod
        self.other_phases: Counter = Counter()  # summed over the other cycles
        self.others = 0  # cycles that admitted no pod
        self._admitted = False
        self._local = threading.local()

    def wall(self) -> float:
        return time.monotonic() - self.zero

    def install(self, ctl: Any) -> None:
        api = ctl.ops.api
        call = api.call_api
        local = self._local

        def counted(method: str, url: str, *a: Any, **kw: Any) -> Any:
            log = getattr(local, "log", None)
            if log is not None:
                path = url.split("?", 1)[0].rstrip("/").split("/")
                kind = next((p for p in reversed(path) if p in KINDS), "other")
                log.append(f"{method} {kind}")
            return call(method, url, *a, **kw)

        api.call_api = counted
        step = ctl.executor.step

        def timed(action: Any, ctx: Any) -> Any:
            if not action.id.startswith("admit:"):
                return step(action, ctx)
            local.log = []
            t = self.wall()
            try:
                out = step(action, ctx)
            finally:
                log, local.log = local.log, None
            pods = [p.name for p in getattr(action, "pods", ())]
            if out.status == "done" and out.changed:
                self._admitted = True
                for pod in pods:
                    self.admits[pod] = [self.cycle_at, t, self.wall(), len(log) / len(pods)]
                    self.orders[pod] = log
                self.requests.update(log)
                # up to the last gate's removal ("PATCH pods"; the status is "PATCH status"):
                # what stands between the plan and the pods' scheduling
                gate = max((i for i, r in enumerate(log) if r == "PATCH pods"), default=-1)
                self.to_gate.append((gate + 1 if gate >= 0 else len(log)) / len(pods))
            else:
                self.tries.update(pods)
            return out

        ctl.executor.step = timed
        import reconciler.loop.controller as loop
        import reconciler.observe.kube_dra as dra

        for owner, attr, name in (
            (ctl, "_cache", "cache wait"),
            (loop, "observe_cluster", "observe"),
            (dra, "_claims_caught_up", "of which claims caught up"),
            (ctl, "_plan", "plan"),
            (ctl, "_apply", "apply"),
        ):
            setattr(owner, attr, self._timer(getattr(owner, attr), name))

    def _timer(self, fn: Any, name: str) -> Any:
        def timed(*a: Any, **kw: Any) -> Any:
            t, cpu = time.monotonic(), time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                self.phase[name] += time.monotonic() - t
                self.phase[f"{name} cpu"] += time.thread_time() - cpu

        return timed

    def start_cycle(self, at: float) -> None:
        self.cycle_at, self.phase, self._admitted = at, Counter(), False
        self.starts.append(round(at, 4))

    def end_cycle(self, seconds: float) -> None:
        """The cycle's phases count with those of the cycles that admitted a pod (`phases`,
        `admitting`) or with the others' (`other_phases`, `others`)."""
        self.phase["cycle"] += seconds
        if self._admitted:
            self.admitting += 1
            self.phases.update(self.phase)
        else:
            self.others += 1
            self.other_phases.update(self.phase)

    def notes(self) -> dict[str, Any]:
        return {
            "admits": self.admits,
            "admit_tries": dict(self.tries),
            "admit_requests": dict(self.requests),
            "admit_requests_to_gate": sum(self.to_gate) / len(self.to_gate) if self.to_gate else 0,
            "admitting_cycles": self.admitting,
            "admitting_phases": {k: v / max(1, self.admitting) for k, v in self.phases.items()},
            "other_cycles": self.others,
            "other_phases": {k: v / max(1, self.others) for k, v in self.other_phases.items()},
            "cycle_starts": self.starts,
            "admit_orders": self.orders,
        }


KINDS = {
    "pods",
    "status",
    "resourceclaims",
    "deviceclasses",
    "resourceclaimtemplates",
    "eviction",
    "jobs",
    "events",
}


class ClaimWatch:
    """A watch of one namespace's ResourceClaims: per pod (the claim's Pod owner), when its
    pinned claim (`planned`) was first seen, when an allocation was first seen on one of its
    claims, and when the last allocation it had went (the claim deallocated or deleted)."""

    def __init__(self, api: Any, ns: str, planned_key: str, wall: Any, sink: Any = None) -> None:
        """`sink`: also given each list (`listed(items)`) and event (`seen(kind, claim)`)."""
        self.api, self.ns, self.planned_key, self.wall = api, ns, planned_key, wall
        self.sink = sink
        self.pinned: dict[str, float] = {}
        self.allocated: dict[str, float] = {}
        self.freed: dict[str, float] = {}
        self._held: dict[str, str] = {}  # claim uid -> pod, while allocated
        self.stop = threading.Event()

    def listed(self, items: list[dict]) -> None:
        for c in items:
            self._note("ADDED", c)
        if self.sink is not None:
            self.sink.listed(items)

    def seen(self, kind: str, claim: dict) -> None:
        self._note(kind, claim)
        if self.sink is not None:
            self.sink.seen(kind, claim)

    def _note(self, kind: str, claim: dict) -> None:
        now = self.wall()
        meta = claim.get("metadata") or {}
        owners = [o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
        if not owners:
            return
        pod, uid = owners[0], meta.get("uid", "")
        if self.planned_key in (meta.get("annotations") or {}):
            self.pinned.setdefault(pod, now)
        alloc = (claim.get("status") or {}).get("allocation")
        if kind != "DELETED" and alloc:
            self.allocated.setdefault(pod, now)
            self._held[uid] = pod
        elif uid in self._held:
            self.freed[self._held.pop(uid)] = now

    def run(self) -> None:
        from kubernetes import client

        from reconciler import conventions as C

        custom = client.CustomObjectsApi(self.api)
        args = (C.DRA_GROUP, C.DRA_VERSION, self.ns, "resourceclaims")
        watch_list(
            functools.partial(custom.list_namespaced_custom_object, *args),
            self.stop,
            self.listed,
            self.seen,
        )


def watch_list(
    list_call: Callable[..., Any],
    stop: threading.Event,
    on_list: Callable[[list[dict]], Any],
    on_event: Callable[[str, dict], Any],
) -> None:
    """List, then watch from the list's resourceVersion, until `stop` (a dropped or failed
    watch lists again): `on_list` with each list's items, `on_event` with each ADDED, MODIFIED
    or DELETED event's type and object. `list_call(**kw)`: the list call, its fixed arguments
    bound (raw JSON: `_preload_content=False`)."""
    from kubernetes.watch.watch import iter_resp_lines

    rv = None
    while not stop.is_set():
        try:
            if rv is None:
                data = json.loads(list_call(_preload_content=False).data)
                on_list(data.get("items") or [])
                rv = data["metadata"]["resourceVersion"]
            resp = list_call(
                watch=True,
                resource_version=rv,
                allow_watch_bookmarks=True,
                timeout_seconds=30,
                _preload_content=False,
                _request_timeout=(5, 60),
            )
            try:
                for line in iter_resp_lines(resp):
                    if stop.is_set():
                        break
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        rv = None
                        break
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(ev["type"], obj)
            finally:
                resp.release_conn()
        except Exception:  # noqa: BLE001 - timeouts, a dropped watch: relist
            rv = None
            stop.wait(0.5)


def timeline(
    pods: dict[str, dict[str, float]], node_of: dict[str, str], dra: bool
) -> dict[str, dict[str, float]]:
    """`pods`: pod -> its times (created, admitted, bound, running, deleted, gone, and with the
    controller's record cycle, step, step_end; on DRA pinned, allocated, freed); -> the same
    with `ready` and `taken` added to each admitted pod (the module's docstring)."""
    releases: dict[str, list[float]] = {}
    for name, t in pods.items():
        gone = t.get("gone")
        if gone is None or name not in node_of:
            continue
        release = max(gone, t["freed"]) if dra and "freed" in t else gone
        t["release"] = release
        releases.setdefault(node_of[name], []).append(release)
    for name, t in pods.items():
        if "step" not in t or name not in node_of:
            continue
        # a release until the step's end counts: the step may wait for a terminating pod to
        # go (handlers/admission.py `_wait_gone`), and the gate goes after it; and one seen
        # before the pod's card was seen taken: this process's watches may see both late (once
        # by 0.14 s after the step's end, run R2 in bench/README.md), and the step waited for
        # the release it saw (on the device plugin this can only make `ready` later)
        taken = t.get("allocated") if dra else t.get("running")
        end = max(t.get("step_end", t["step"]), taken or 0.0)
        before = [r for r in releases.get(node_of[name], []) if r <= end]
        t["ready"] = max([t.get("created", 0.0), *before])
        if taken is not None:
            t["taken"] = taken
    return pods


def stage_figures(pods: dict[str, dict[str, float]]) -> list[tuple[str, int, Any, Any, float]]:
    """(stage, pods, p50, p95, mean) over the pods that have both ends."""
    out = []
    for label, a, b in STAGES:
        d = [t[b] - t[a] for t in pods.values() if a in t and b in t]
        if d:
            out.append((label, len(d), pct(d, 0.5), pct(d, 0.95), sum(d) / len(d)))
    return out


def compare_orders(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> str:
    """Whether two gated runs admitted the same pods in the same order to the same nodes."""
    order_a = sorted((t["admitted"], n) for n, t in a.items() if "admitted" in t)
    order_b = sorted((t["admitted"], n) for n, t in b.items() if "admitted" in t)
    names_a, names_b = [n for _, n in order_a], [n for _, n in order_b]
    common = set(names_a) & set(names_b)
    prefix = 0
    for x, y in zip(names_a, names_b, strict=False):
        if x != y:
            break
        prefix += 1
    ra = {n: i for i, n in enumerate(x for x in names_a if x in common)}
    rb = {n: i for i, n in enumerate(x for x in names_b if x in common)}
    moved = [abs(ra[n] - rb[n]) for n in common]
    same_node = sum(1 for n in common if a[n].get("node") == b[n].get("node"))
    return (
        f"admitted {len(names_a)} / {len(names_b)}, in both {len(common)}; same order for the "
        f"first {prefix}; rank moved p50/p95/max {pct(moved, 0.5)}/{pct(moved, 0.95)}/"
        f"{max(moved, default=0)}; same node {same_node} of {len(common)}; only in the first: "
        f"{sorted(set(names_a) - common)[:6]}, only in the second: "
        f"{sorted(set(names_b) - common)[:6]}"
    )


def idle_by_kind(pods: dict[str, dict[str, float]]) -> dict[str, tuple[int, float]]:
    """`ready -> card taken` of the admitted pods, by how their cards became ready: `arrival`
    (the pod's creation: cards were free) or `hand-off` (a release on its node after it was
    created), and `all` -> (pods, seconds summed). The sum is the card time the admission path
    leaves idle, per pod (not per card); the part of the allocation gap that comes from speed."""
    out: dict[str, list[float]] = {"arrival": [], "hand-off": [], "all": []}
    for t in pods.values():
        if "ready" not in t or "taken" not in t:
            continue
        kind = "arrival" if _arrival(t) else "hand-off"
        out[kind].append(t["taken"] - t["ready"])
        out["all"].append(t["taken"] - t["ready"])
    return {k: (len(v), sum(v)) for k, v in out.items()}


def card_time(
    pods: dict[str, dict[str, float]],
    cards_of: dict[str, int],
    dra: bool,
    horizon: float,
    capacity: int,
    to_pod_end: bool = False,
) -> float | None:
    """The run's time-weighted GPU allocation from the watch's times of each pod, not from a
    sample every 0.25 s: each pod's cards count from the moment they were seen taken (the
    device plugin: the pod running; DRA: its claim allocated) to the moment they were seen free
    again (the device plugin: the pod gone; DRA: the claim's allocation gone, which Kubernetes'
    resourceclaim controller removes a few ms after the pod), over wall seconds 0 to `horizon`
    (the last arrival), against `capacity` cards. `to_pod_end`: every pod's cards count until
    the pod is gone, on DRA too (the allocation a running or departing pod holds, without the
    claim's release after it). None without any pod seen taken."""
    if horizon <= 0 or capacity <= 0:
        return None
    area, seen = 0.0, False
    for name, t in pods.items():
        start = t.get("allocated") if dra else t.get("running")
        if start is None or name not in cards_of:
            continue
        seen = True
        end = t.get("gone") if to_pod_end or not dra else t.get("freed", t.get("gone"))
        end = horizon if end is None else min(end, horizon)
        if end > start:
            area += cards_of[name] * (end - start)
    return area / (capacity * horizon) if seen else None


def _arrival(t: dict[str, float]) -> bool:
    """Whether an admitted pod's cards were ready at its creation (no release on its node
    since): an arrival, not a hand-off."""
    return t["ready"] - t.get("created", 0.0) <= 1e-6


def run_card_time(
    name: str,
    pods: dict[str, dict[str, float]] | None,
    cards_of: dict[str, int] | None,
    horizon: float,
    capacity: int,
    to_pod_end: bool = False,
) -> float | None:
    """`card_time` of one replayed run, DRA's by its name (`dra-`); None without a timeline or
    the pods' cards, or with MIG partitions among them (a card's worth each: not in the
    times)."""
    if not pods or not cards_of or not all(cards_of.values()):
        return None
    return card_time(pods, cards_of, name.startswith("dra-"), horizon, capacity, to_pod_end)


def arrival_legs(pods: dict[str, dict[str, float]]) -> tuple[float, float, float] | None:
    """Over the arrivals (`idle_by_kind`: cards free at the pod's creation) that an Admit step
    of a recorded cycle admitted: the mean ms from the creation to the cycle's start, from
    there to the Admit step, and from the step to the card taken. None without any."""
    got = [
        t
        for t in pods.values()
        if "ready" in t and "taken" in t and "cycle" in t and "step" in t and _arrival(t)
    ]
    if not got:
        return None
    legs = [("created", "cycle"), ("cycle", "step"), ("step", "taken")]
    a, b, c = (1000 * sum(t[y] - t[x] for t in got) / len(got) for x, y in legs)
    return a, b, c


def report(name: str, notes: dict[str, Any]) -> list[str]:
    """The stage table's lines for one run (nothing when it kept no timeline)."""
    pods = notes.get("timeline")
    if not pods:
        return []
    out = [f"{name}: stages, wall s (pods, p50, p95, mean)"]
    for label, n, p50, p95, mean in stage_figures(pods):
        out.append(f"    {label:28s} {n:4d}  {p50:6.2f}  {p95:6.2f}  {mean:6.2f}")
    idle = idle_by_kind(pods)
    if idle["all"][0]:
        out.append(
            "    ready -> card taken by kind, mean ms (pods): "
            + ", ".join(f"{k} {1000 * s / n:.1f} ({n})" for k, (n, s) in idle.items() if n)
            + f"; summed over the pods {idle['all'][1]:.2f} s"
        )
    legs = arrival_legs(pods)
    if legs:
        out.append(
            "    arrivals, mean ms: creation -> cycle start {:.1f}, -> Admit step {:.1f}, "
            "-> card taken {:.1f}".format(*legs)
        )
    reqs = [t["requests"] for t in pods.values() if "requests" in t]
    if reqs:
        out.append(
            f"    requests per admitted pod (its Admit step): mean {sum(reqs) / len(reqs):.1f}; "
            f"up to the gate's removal {notes.get('admit_requests_to_gate', 0):.1f}; "
            f"over all admitting steps {notes.get('admit_requests')}"
        )
    for what, phases, n in (
        ("that admitted", notes.get("admitting_phases"), notes.get("admitting_cycles")),
        ("that admitted nothing", notes.get("other_phases"), notes.get("other_cycles")),
    ):
        if not phases:  # runs before 2026-12-07 16:00 UTC kept the admitting cycles' only
            continue
        out.append(
            f"    the {n} cycles {what}, mean wall s: "
            + ", ".join(f"{k} {v:.3f}" for k, v in phases.items() if not k.endswith(" cpu"))
        )
        cpu = {k[: -len(" cpu")]: v for k, v in phases.items() if k.endswith(" cpu")}
        if cpu:  # runs before 2026-12-07 09:20 UTC kept the wall only
            out.append(
                "      of which the controller's thread on a CPU, s: "
                + ", ".join(f"{k} {v:.3f}" for k, v in cpu.items())
            )
    tries = notes.get("admit_tries") or {}
    if tries:
        out.append(f"    Admit steps that did not admit: {sum(tries.values())} ({len(tries)} pods)")
    return out


def main(argv: list[str] | None = None) -> int:
    """`python bench/admission_stages.py RUN.json ...`: the stage tables of the gated runs that
    `admission_openb.py --json` saved, with each run's allocation (the figures of bench/README
    are printed this way from the runs' JSON); given several runs with both gated arms, a last
    line on DRA minus device plugin over them (`pairs_line`)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("runs", nargs="+", help="JSON files written by admission_openb.py --json")
    args = ap.parse_args(argv)
    pairs: dict[str, list[float]] = {m: [] for m in MEASURES}
    for path in args.runs:
        data = json.loads(Path(path).read_text())
        print(f"== {path}")
        alloc: dict[str, dict[str, float | None]] = {}
        for r in data.get("results") or []:
            notes = r.get("notes") or {}
            if "timeline" in notes and "node_of" in notes:  # as this version reads it
                dra = r["name"].startswith("dra-")
                notes["timeline"] = timeline(notes["timeline"], notes["node_of"], dra)
            got = alloc[r["name"]] = {MEASURES[0]: r.get("mean_alloc")}
            lines = report(r["name"], notes)
            if lines:
                got.update(watched(data, r))
                print(
                    f"{r['name']}: GPU allocation, time-weighted mean "
                    + "; ".join(f"{m} {_pct(v)}" for m, v in got.items())
                )
                print("\n".join(lines))
        for m in MEASURES:
            a, b = (alloc.get(n, {}).get(m) for n in ("gpupool", DRA_RUN))
            if isinstance(a, float) and isinstance(b, float):
                pairs[m].append(100 * (b - a))
    for m, diffs in pairs.items():
        if len(diffs) > 1:
            print(pairs_line(diffs, m))
    return 0


MEASURES = (
    "sampled every 0.25 s",
    "from the watch's times",
    "to each pod's end",
)
"""The allocation a run is judged by: the bench's sample of the cards in use every 0.25 s of
wall time (`mean_alloc`, the figure of every earlier run), the same from each pod's times as
the watch saw them (`card_time`: no sampling), and that with each pod's cards counted to the
pod's end (on DRA, not to its claim's release by Kubernetes a few ms later)."""


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3f} %"


def watched(data: dict[str, Any], r: dict[str, Any]) -> dict[str, float | None]:
    """The two measures from the watch's times (`MEASURES`) of one gated run of a saved
    `admission_openb.py --json`; the pods' cards from the run (`cards_of`), or for a run saved
    before it kept them, from the workload its arguments make of the openb trace again (None
    where the trace is not there)."""
    notes, wl = r.get("notes") or {}, data.get("workload") or {}
    cards_of = notes.get("cards_of") or _cards_again(data)
    if not wl.get("speed"):
        return {m: None for m in MEASURES[1:]}
    horizon = wl["t_last"] / wl["speed"]
    return {
        m: run_card_time(r["name"], notes.get("timeline"), cards_of, horizon, wl["cards"], end)
        for m, end in zip(MEASURES[1:], (False, True), strict=True)
    }


@functools.cache
def _workload_cards(argv: tuple[str, ...]) -> dict[str, int] | None:
    from bench import admission_openb as bench
    from bench.openb_baselines import build_workload
    from reconciler.sim.trace import read_nodes, read_pods

    data = bench.openb_dir()
    if not (data / bench.DEFAULT_NODES).is_file() or not (data / bench.DEFAULT_PODS).is_file():
        return None
    nodes, pods = read_nodes(data / bench.DEFAULT_NODES), read_pods(data / bench.DEFAULT_PODS)
    wl = build_workload(bench.parse(list(argv)), nodes, pods)
    return {j.name: j.gpus for j in wl.jobs}


def _cards_again(data: dict[str, Any]) -> dict[str, int] | None:
    """Each pod's cards for a run saved without them: its workload made again from its
    arguments (the workload is a function of them and the trace)."""
    args = data.get("args") or {}
    argv: list[str] = []
    for key in ("nodes", "pods", "speed", "window", "tail", "load", "seed"):
        v = args.get(key)
        if v not in (None, "None"):
            argv += [f"--{key}", str(v)]
    return _workload_cards(tuple(argv)) if argv else None


DRA_RUN = "dra-gpupool"


def pairs_line(diffs: list[float], measure: str = MEASURES[0]) -> str:
    """The runs' DRA minus device-plugin allocation (points, one per run with both gated arms)
    by one of `MEASURES`: how many, their mean, the mean's standard error, their range, and how
    many are at least 0 (issue 32's "at least the device-plugin run's", run by run)."""
    mean = sum(diffs) / len(diffs)
    sd = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) ** 0.5
    at_least = sum(1 for d in diffs if d >= 0)
    return (
        f"== {DRA_RUN} minus gpupool, GPU allocation {measure}, over {len(diffs)} runs: mean "
        f"{mean:+.4f} point (standard error {sd / len(diffs) ** 0.5:.4f}), "
        f"{min(diffs):+.4f} to {max(diffs):+.4f}, at least 0 in {at_least}"
    )


if __name__ == "__main__":
    sys.exit(main())
