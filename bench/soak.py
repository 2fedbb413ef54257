"""A long chaos run (issue 29, item 6): `gpupool reconcile` as its own processes (two replicas,
one Lease) against the real control plane of tests/cluster, under churn and faults, with the
invariants checked all along and reported at the end.

    .venv/bin/python bench/soak.py --smoke          # ~40 s of chaos, ~80 s in all
    .venv/bin/python bench/soak.py --minutes 25     # the documented run (bench/README.md)

**Cluster.** kube-apiserver, kube-scheduler and kube-controller-manager v1.37.2 (the cached kcp
binary; this script never builds it and exits 0 saying so when it is missing), simulated
kubelets, `--nodes` H100 nodes of 8 cards with the NVIDIA stand-ins and gpupool's node agent
(tests/integration/world.py `add_gpu_node`), node-monitor grace 10 s. The controllers talk to
the API server through the fault proxy (tests/faultproxy) with the controller ServiceAccount's
token (deploy/rbac.yaml's rights), `--interval 2s`, `--path` a policy directory: one Pool,
classes `train` (training) and `serve` (inference, higher).

**Load.** In a namespace gated for gpupool's admission: training gangs (`gpupool.io/gang`, two
pods of 4 or 8 cards, so a gang may span two nodes) and single pods of 1, 2 or 4 cards that
finish (Succeeded) after a drawn work time, kept `--backlog` pods deep; an inference Deployment
of 1-card replicas (class `serve`) that bursts from 1 to 3 replicas and back. Every pod tolerates
NotReady/unreachable for 5 s, so taint eviction follows a node's loss quickly.

**Chaos** (drawn with `--seed`; rates per minute of run, the smoke has one of each):
* a node fails: its kubelet stops heartbeating (`SimulatedKubelets.kill`; the node-lifecycle
  controller marks it Unknown and taints it unreachable, taint eviction starts) and its node
  agent stops; after a repair time it returns (`set_ready`), rebooted: pods bound to it from
  before the failure are deleted (their containers are gone);
* a leader failover, alternating: SIGKILL of replica b (restarted at once as a standby), or
  SIGSTOP of replica a for 20 s (longer than the 15 s Lease: a paused leader that wakes up
  must not act) then SIGCONT; so replica a lives through the whole run (its RSS is the series);
* the API server restarts (`ControlPlane.restart_apiserver`; etcd keeps the state);
* the fault proxy, for a few requests each time: 500s on pod writes, a 503 with Retry-After
  on reads, 2 s delays, a PATCH applied whose reply is lost.

**Checked** every second from the cluster (bench/soak_checks.py), reported at the end:
* over-committed cards: on any poll, a node whose bound, unfinished pods (Terminating included)
  ask for more `nvidia.com/gpu` than it has; and pods the kubelet refused because the devices
  were not free (UnexpectedAdmissionError). Must be 0.
* actions done twice: a pod whose `gpupool.io/admitted` changed value (admitted twice, to two
  places), and evictions gpupool's ServiceAccount sent successfully more than once for one pod
  (the audit log). Actions lost: after the chaos stops and `--drain` seconds pass, pods gpupool
  admitted that are still unbound, and gated pods that would fit on the free cards (gang: all
  members, groups one after the other) of the Ready nodes gpupool may use by its own rules:
  not a node back from a failure for less than the Pool's `nodeSettleTime` (30 s here); a
  gang with fewer pods than its size (a creation refused during an API server restart) waits
  for the rest and is listed apart. Must be 0. When something counts as lost, gpupool's own
  view is printed too (a plan made from the cluster: fenced nodes and why each group waits).
* cycles by result (/metrics of each replica, summed over its lifetimes) and why cycles failed
  (the replicas' logs: connection, HTTP status, other).
* gangs stopped whole on every loss: for each gang with a member on a failed node, whether all
  its other members were stopped (deleted or terminating) within 60 s of the failure
  (gang-aware recovery: reconciler/plan/stages/recovery.py). Counted, not asserted.
* RSS of replica a over the run (first sample after 60 s, last, max, growth per hour);
  cycle-time p50/p95/p99 (histogram buckets of gpupool_reconcile_duration_seconds);
  GPU-seconds: useful (pods that ran to Succeeded, a gang's only when all its pods did), lost
  (ran, then evicted/deleted/failed, or a gang member whose gang did not finish whole), against
  the cards' capacity over the run.

The cluster clock is real time (the issue allows a faster one; nothing here needs it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soak_checks import (  # noqa: E402
    NOT_LOST,
    Observer,
    failure_reasons,
    lost_groups,
    percentile,
    rss_mib,
    scrape,
    stopped_whole,
)

from bench import cluster_setup  # noqa: E402
from bench.cluster_setup import add_nodes, cached_binary, held_cards, pool_doc, priority_doc  # noqa: E402
from reconciler.conventions import (  # noqa: E402
    GANG_ANN,
    GANG_SIZE_ANN,
    GPU_RESOURCE,
    POOL_LABEL,
)

MODEL, POOL = "H100-SXM5-80GB", "soak"
LEASE = "gpupool-controller"
PAUSE = 20.0  # SIGSTOP of the leader: longer than its 15 s Lease
TOLERATION = 5  # s a pod tolerates a NotReady/unreachable node
STOP_WINDOW = 60.0  # s after a failure by which a gang's other members must be stopped
SETTLE = 30.0  # s: the Pool's nodeSettleTime (a returned node is no capacity before)
AGENT_INTERVAL = 30.0  # s between a node agent's publications (its default --interval)
SMOKE = {"nodes": 3, "minutes": 0.6, "drain": 15.0, "backlog": 4}
PRIORITY = priority_doc(
    "soak",
    "train",
    [("serve", 30000, "inference", False), ("train", 10000, "training", True)],
    "  preemption: {checkpointGracePeriod: 20s}\n",  # survivors stopped within STOP_WINDOW
)


def say(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `gpupool reconcile` process; each (re)start is a new lifetime with its own last
    /metrics scrape."""

    def __init__(self, name: str, run: Path, kubeconfig: Path, policy_root: Path):
        self.name, self.run, self.kubeconfig, self.policy_root = name, run, kubeconfig, policy_root
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.lives: list[dict] = []  # last scrape of each lifetime
        self.rss: list[tuple[float, float]] = []
        self.log = run / f"replica-{name}.log"

    def start(self) -> None:
        from tests.integration.world import NS, OPERATOR_NS

        self.port = free_port()
        cmd = [
            sys.executable, "-c",
            "import sys; from reconciler.cli import main; sys.exit(main(sys.argv[1:]))",
            "reconcile", f"--path={self.policy_root}", "--interval=2s", f"--namespace={NS}",
            f"--mig-config-namespace={OPERATOR_NS}", f"--kubeconfig={self.kubeconfig}",
            f"--identity=soak-{self.name}", "--health-port=0",
            f"--metrics-bind-address=127.0.0.1:{self.port}",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1"}
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.lives.append({})

    def sample(self, t: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        m = scrape(self.port)
        if m is not None:
            self.lives[-1] = m
        r = rss_mib(self.proc.pid)
        if r is not None:
            self.rss.append((t, r))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Soak:
    def __init__(self, args: argparse.Namespace, world: Any, proxy: Any, run: Path, ns: str):
        self.args, self.world, self.proxy, self.run, self.ns = args, world, proxy, run, ns
        self.rng = random.Random(args.seed)
        self.obs = Observer(world.core, ns)
        self.replicas: dict[str, Replica] = {}
        self.dead: dict[str, float] = {}  # node -> when it failed
        self.returned: dict[str, float] = {}  # node -> when it last came back
        self.losses: list[dict] = []  # one per node failure: gangs it hit
        self.events: Counter = Counter()
        self.failovers: list[str] = []
        self.seq = 0
        self.stop = threading.Event()
        self.window = 35.0 if args.smoke else STOP_WINDOW
        self.settled_at = 0.0  # no failover before this (run seconds)
        self.settle = 10.0 if args.smoke else 30.0
        self.reaped: set[str] = set()
        self.view: list[str] = []  # gpupool's view at the end, when something counts as lost

    # ---- load ----------------------------------------------------------------------------
    def pod_body(self, name: str, gpus: int, work: float, gang: tuple[str, int] | None) -> dict:
        from tests.cluster.kubelets import SUCCEED_AFTER_ANNOTATION

        ann = {SUCCEED_AFTER_ANNOTATION: str(work / self.world.kubelets.grace_scale)}
        if gang:
            ann |= {GANG_ANN: gang[0], GANG_SIZE_ANN: str(gang[1])}
        return {
            "metadata": {"name": name, "labels": {"app": "soak"}, "annotations": ann},
            "spec": {**pod_spec(gpus, "train"), "restartPolicy": "Never"},
        }

    def top_up(self) -> None:
        """Keep `backlog` pods waiting: a gang (2 pods of 4 or 8 cards) or a single pod."""
        waiting = sum(1 for p in list(self.obs.pods.values()) if p.running_at is None and not p.end)
        lo, hi = (5.0, 15.0) if self.args.smoke else (20.0, 120.0)
        while waiting < self.args.backlog:
            self.seq += 1
            work = self.rng.uniform(lo, hi)
            if self.rng.random() < 0.4:
                gang, gpus = f"g{self.seq}", self.rng.choice((4, 8))
                bodies = [self.pod_body(f"{gang}-{i}", gpus, work, (gang, 2)) for i in range(2)]
            else:
                gpus = self.rng.choice((1, 2, 4))
                bodies = [self.pod_body(f"p{self.seq}", gpus, work, None)]
            for b in bodies:
                try:
                    self.world.core.create_namespaced_pod(self.ns, b)
                    self.events["pods created"] += 1
                except Exception:  # noqa: BLE001 - the API server may be restarting
                    self.events["pod creations refused"] += 1
            waiting += len(bodies)

    def scale_inference(self, replicas: int) -> None:
        with contextlib.suppress(Exception):
            self.world.apps.patch_namespaced_deployment_scale(
                "serve", self.ns, {"spec": {"replicas": replicas}}
            )
            self.events[f"inference scaled to {replicas}"] += 1

    # ---- chaos ---------------------------------------------------------------------------
    def fail_node(self) -> None:
        live = [n for n in self.world.nodes if n not in self.dead]
        if len(live) < 2:
            return
        # the node holding a gang member if any, else the busiest: a failure that costs something
        load = {
            n: (any(p.gang for p in self.obs.on_node(n)), len(self.obs.on_node(n))) for n in live
        }
        node = max(live, key=lambda n: (load[n], self.rng.random()))
        t = self.obs.now()
        gangs = {p.gang for p in self.obs.on_node(node) if p.gang}
        self.world.kubelets.kill(node)
        self.dead[node] = t
        self.losses.append({"node": node, "t": t, "gangs": sorted(gangs)})
        self.events["node failures"] += 1
        say(f"  {t:6.0f}s node {node} fails (gangs on it: {sorted(gangs) or 'none'})")

    def repair_node(self, node: str) -> None:
        failed_at = self.dead.pop(node)
        self.world.kubelets.set_ready(node)
        self.returned[node] = self.obs.now()
        self.__dict__.get("_published", {}).pop(node, None)  # its agent publishes on start
        for p in self.obs.on_node(node):  # rebooted: what ran there before is gone
            if p.created <= failed_at:
                with contextlib.suppress(Exception):
                    self.world.core.delete_namespaced_pod(p.name, self.ns)
        self.events["node returns"] += 1
        say(f"  {self.obs.now():6.0f}s node {node} returns")

    def settling(self) -> dict[str, float]:
        """Nodes back from a failure for less than the Pool's nodeSettleTime: seconds left."""
        now = self.obs.now()
        return {n: SETTLE - (now - t) for n, t in self.returned.items() if now - t < SETTLE}

    def failover(self) -> None:
        """Kill b or pause a, whichever holds the Lease; skipped while the last one is still
        settling (a paused, or under 30 s ago; 10 s in the smoke). A thread times the
        handover."""
        t = self.obs.now()
        if t < self.settled_at:
            self.events["leader failovers skipped (settling)"] += 1
            return
        holder = leader(self.world)
        a, b = self.replicas["a"], self.replicas["b"]
        if holder == "soak-a" and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGSTOP)
            what = f"{t:.0f}s SIGSTOP a (leader) for {PAUSE:.0f}s"
            self.after(PAUSE, lambda: os.kill(a.proc.pid, signal.SIGCONT))
            self.settled_at = t + PAUSE + self.settle
        else:
            b.stop(signal.SIGKILL)
            b.start()
            what = f"{t:.0f}s SIGKILL b ({'leader' if holder == 'soak-b' else 'standby'})"
            self.settled_at = t + self.settle
        self.events["leader failovers"] += 1
        i = len(self.failovers)
        self.failovers.append(what)

        def handover() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                now = leader(self.world)
                if now and now != holder:
                    self.failovers[i] = f"{what}: {now} leads after {self.obs.now() - t:.0f}s"
                    return
                time.sleep(0.5)
            self.failovers[i] = f"{what}: {holder} still leads after 90s"

        if holder:
            threading.Thread(target=handover, daemon=True).start()

    def reap(self) -> None:
        """Finished pods are deleted (as a Job's TTL or a batch system would), so the cluster's
        object count, and the controller's caches, stay level over a long run."""
        for p in list(self.obs.pods.values()):
            if p.end in ("", "deleted") or p.name in self.reaped:
                continue
            with contextlib.suppress(Exception):
                self.world.core.delete_namespaced_pod(p.name, self.ns, _request_timeout=5)
                self.reaped.add(p.name)

    def restart_apiserver(self) -> None:
        t = time.monotonic()
        try:
            self.world.plane.restart_apiserver()
            self.events["API server restarts"] += 1
            say(f"  {self.obs.now():6.0f}s API server restarted in {time.monotonic() - t:.1f}s")
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            self.events[f"API server restart failed: {type(exc).__name__}"] += 1

    def proxy_fault(self) -> None:
        kind = self.rng.choice(("500", "503", "delay", "lost reply"))
        p = self.proxy
        if kind == "500":
            p.fail(500, "PATCH", r"/pods/", times=2)
            p.fail(500, "POST", r"/eviction$", times=1)
        elif kind == "503":
            p.fail(503, "GET", None, times=3, retry_after=1)
        elif kind == "delay":
            p.delay(2.0, None, None, times=5)
        else:
            p.drop_response("PATCH", r"/pods/", times=1)
        self.events[f"proxy fault: {kind}"] += 1

    def after(self, delay: float, fn: Any) -> None:
        t = threading.Timer(delay, fn)
        t.daemon = True
        t.start()

    # ---- the node stand-ins ----------------------------------------------------------------
    def step_nodes(self) -> None:
        """What each live node's agent and NVIDIA stand-ins do: publish who holds which card
        when that changed, and every AGENT_INTERVAL s as the real agent does (`gpupool agent
        --interval`, 30 s: gpupool fences a node whose agent has not published since its Ready
        transition); a dead node's agent is down with its kubelet."""
        self.world.clock.now = datetime.now(UTC)
        published = self.__dict__.setdefault("_published", {})
        now = time.monotonic()
        for name, sim in list(self.world.nodes.items()):
            if name in self.dead:
                continue
            held = held_cards(sim.gpus)
            last = published.get(name)
            if last is None or last[0] != held or now - last[1] >= AGENT_INTERVAL:
                try:
                    sim.publish()
                    published[name] = (held, now)
                except Exception:  # noqa: BLE001 - the API server may be restarting
                    self.events["agent publish failed"] += 1

    # ---- the run ---------------------------------------------------------------------------
    def schedule(self, seconds: float) -> list[tuple[float, str]]:
        """(time, event) for the chaos; the smoke has one of each at fixed times."""
        if self.args.smoke:
            return [(8, "fail"), (9, "fault"), (12, "failover"), (14, "apiserver"), (16, "burst"),
                    (20, "fault"), (26, "failover"), (28, "repair"), (30, "unburst")]  # fmt: skip
        rates = {"fail": 1 / 180, "failover": 1 / 120, "apiserver": 1 / 300, "fault": 1 / 20,
                 "burst": 1 / 90}  # fmt: skip
        out: list[tuple[float, str]] = []
        for kind, rate in rates.items():
            t = self.rng.expovariate(rate)
            while t < seconds - 30:
                out.append((t, kind))
                if kind == "burst":
                    out.append((t + self.rng.uniform(20, 60), "unburst"))
                t += self.rng.expovariate(rate)
        return sorted(out)

    def loop(self, seconds: float) -> None:
        plan = self.schedule(seconds)
        t0 = time.monotonic()
        repairs: dict[str, float] = {}
        while (t := time.monotonic() - t0) < seconds:
            while plan and plan[0][0] <= t:
                kind = plan.pop(0)[1]
                if kind == "fail":
                    self.fail_node()
                    node = next(reversed(self.dead), None)
                    if node and node not in repairs and not self.args.smoke:
                        repairs[node] = t + self.rng.uniform(60, 150)
                elif kind == "repair":
                    for node in list(self.dead):
                        self.repair_node(node)
                else:
                    self.act(kind)
            for node, at in list(repairs.items()):
                if at <= t:
                    del repairs[node]
                    self.repair_node(node)
            self.top_up()
            self.reap()
            self.step_nodes()
            for r in self.replicas.values():
                r.sample(t)
            self.check_gangs()
            time.sleep(1.0)
        for node in list(self.dead):
            self.repair_node(node)

    def act(self, kind: str) -> None:
        if kind == "failover":
            self.failover()
        elif kind == "apiserver":
            self.restart_apiserver()
        elif kind == "fault":
            self.proxy_fault()
        elif kind == "burst":
            self.scale_inference(3)
        elif kind == "unburst":
            self.scale_inference(1)

    def check_gangs(self, final: bool = False) -> None:
        """Each gang a failure hit with members running on other nodes ("split") is judged by
        `stopped_whole` once the window after the failure has passed; a gang wholly on the
        failed node, or one whose other members finished (Succeeded) within the window, is
        only counted."""
        now = self.obs.now()
        for loss in self.losses:
            if "whole" in loss or (now - loss["t"] < self.window and not final):
                continue
            whole, alone, finished = [], 0, 0
            for g in loss["gangs"]:
                others = [p for p in self.obs.gang_members(g) if p.node != loss["node"]]
                verdict = stopped_whole(others, loss["t"], self.window)
                if not [p for p in others if p.ended_at is None or p.ended_at > loss["t"]]:
                    alone += 1
                elif verdict is None:
                    finished += 1
                else:
                    whole.append(verdict)
            loss["whole"], loss["alone"], loss["finished"] = whole, alone, finished


def pod_spec(gpus: int, cls: str) -> dict:
    tol = [
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    return {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
            }
        ],
        "priorityClassName": cls,
        "nodeSelector": {POOL_LABEL: POOL},
        "tolerations": tol,
        "terminationGracePeriodSeconds": 1,
    }


def leader(world: Any) -> str | None:
    from tests.integration.world import NS

    try:
        lease = world.coordination.read_namespaced_lease(LEASE, NS, _request_timeout=5)
    except Exception:  # noqa: BLE001 - no Lease yet, or the API server restarting
        return None
    return lease.spec.holder_identity


# --------------------------------------------------------------------------- at the end


def lost_actions(soak: Soak) -> dict[str, list[str]]:
    """After the drain: pods gpupool admitted that are still unbound, and gated groups that
    fit the free cards of the nodes gpupool may use by its own rules (`lost_groups`): Ready,
    and not returned from a failure within the Pool's nodeSettleTime."""
    obs = soak.obs
    items = json.loads(soak.world.core.list_namespaced_pod(soak.ns, _preload_content=False).data)
    settling = soak.settling()
    capacity = {
        n: c
        for n, c in obs.allocatable.items()
        if obs.ready.get(n) and n in soak.world.nodes and n not in settling
    }
    out = lost_groups(items["items"], capacity, held_reason)
    out["waiting, not lost: nodes settling"] = [
        f"{n} back {SETTLE - left:.0f}s ago" for n, left in sorted(settling.items())
    ]
    return out


def gpupool_view(soak: Soak) -> list[str]:
    """What gpupool itself sees at the end (a plan made here from the cluster, as the leader
    would): nodes it does not count as capacity and why, cards each node's agent says are held
    by pods the API server no longer lists or that ended, and why each gated group waits."""
    from reconciler.loop.sources import DirectorySource
    from reconciler.observe.kube import observe_cluster
    from reconciler.plan.planner import plan
    from reconciler.policy.loader import load

    snap = DirectorySource(soak.run / "policy").read()
    observed = observe_cluster(soak.world.api_client)
    p = plan(load(snap.files, revision=snap.revision), observed)
    out = [
        f"{f.code} {f.subject}: {f.message[:200]}"
        for f in p.findings
        if f.code in ("node-settling", "node-unavailable", "waits", "gang-member-lost")
    ]
    live = {f"{w.namespace}/{w.name}" for w in observed.workloads}
    for name, sim in sorted(soak.world.nodes.items()):
        held = {k for k, v in sim.gpus.pod_resources().items() if v}
        stale = sorted(k for k in held if k.split("/")[-1] not in {x.split("/")[-1] for x in live})
        if stale:
            out.append(f"{name}: device manager holds cards for pods gpupool does not see: {stale}")
    return out


def held_reason(p: dict) -> str:
    """gpupool's `gpupool.io/Admitted` False condition on a gated pod: why it waits."""
    from reconciler.conventions import ADMITTED_CONDITION

    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == ADMITTED_CONDITION:
            return f"{c.get('reason')}: {(c.get('message') or '')[:160]}"
    return "(no condition)"


def gpus(p: dict) -> int:
    from soak_checks import gpus_of

    return gpus_of(p)


def repeated_evictions(plane: Any) -> list[str]:
    """Evictions gpupool's ServiceAccount got 201 for more than once, by pod (audit log)."""
    from tests.integration.world import CONTROLLER_SA, NS

    user = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
    done = Counter(
        e.name
        for e in plane.audit_events(
            user=user, verb="create", resource="pods", subresource="eviction"
        )
        if e.code is not None and 200 <= e.code < 300
    )
    return [f"{name}: {n} times" for name, n in done.items() if n > 1]


def useful_gpu_seconds(obs: Observer, until: float) -> dict[str, float]:
    """Observer.gpu_seconds, with a gang's work counted useful only when all its pods
    Succeeded (a gang that lost a member did not finish its step)."""
    out = obs.gpu_seconds(until)
    by_gang: dict[str, list] = {}
    for p in list(obs.pods.values()):
        if p.gang:
            by_gang.setdefault(p.gang, []).append(p)
    for members in by_gang.values():
        if any(m.end != "Succeeded" for m in members):
            for m in members:
                if m.end == "Succeeded" and m.running_at is not None:
                    w = m.gpus * (m.ended_at - m.running_at)
                    out["useful"] -= w
                    out["lost"] += w
    return out


def merged_cycles(replicas: list[Replica]) -> tuple[Counter, dict[float, float]]:
    cycles: Counter = Counter()
    buckets: Counter = Counter()
    for r in replicas:
        for life in r.lives:
            cycles.update(life.get("cycles") or {})
            buckets.update(life.get("buckets") or {})
    return cycles, dict(buckets)


def rss_line(series: list[tuple[float, float]]) -> tuple[str, float | None]:
    """Replica a's RSS after its first minute (start-up and first caches): at the quarters of
    the run, the peak, and first to last."""
    late = [(t, r) for t, r in series if t >= 60] or series
    if not late:
        return "no samples", None
    r0, r1 = late[0][1], late[-1][1]
    peak = max(r for _, r in late)
    quarters = [late[min(len(late) - 1, int(q * (len(late) - 1)))] for q in (0, 0.25, 0.5, 0.75, 1)]
    path = " / ".join(f"{r:.0f}" for _, r in quarters)
    return (
        f"{path} MiB at {' / '.join(f'{t:.0f}' for t, _ in quarters)} s, max {peak:.0f} MiB "
        f"({r1 - r0:+.1f} MiB first to last)",
        r1 - r0,
    )


def report(soak: Soak, seconds: float, lost: dict[str, list[str]], twice: list[str]) -> int:
    obs = soak.obs
    cycles, buckets = merged_cycles(list(soak.replicas.values()))
    reasons: Counter = Counter()
    for r in soak.replicas.values():
        with contextlib.suppress(OSError):
            reasons.update(failure_reasons(r.log.read_text(errors="replace")))
    until = obs.now()
    gs = useful_gpu_seconds(obs, until)
    cap = sum(obs.allocatable.get(n, 0) for n in soak.world.nodes) * seconds
    share = 100 * gs["useful"] / cap if cap else 0.0
    hit = [w for loss in soak.losses for w in loss.get("whole", [])]
    alone = sum(loss.get("alone", 0) for loss in soak.losses)
    finished = sum(loss.get("finished", 0) for loss in soak.losses)
    rss, _ = rss_line(soak.replicas["a"].rss)
    rep_adm = obs.repeated_admissions()
    refused = obs.kubelet_refusals()
    lost_n = sum(len(v) for k, v in lost.items() if k not in NOT_LOST)
    pct = {q: percentile(buckets, q) for q in (0.5, 0.95, 0.99)}
    rows = [
        ("run", f"{seconds / 60:.1f} min of chaos, {len(soak.world.nodes)} nodes x 8 cards, "
                f"{obs.polls} cluster polls"),
        ("events", ", ".join(f"{k} {v}" for k, v in sorted(soak.events.items()))),
        ("over-committed cards (polls)", str(len(obs.overcommit))),
        ("kubelet refused (devices busy)", str(len(refused))),
        ("actions done twice", f"{len(rep_adm)} admissions, {len(twice)} evictions"),
        ("actions lost", f"{lost_n} ({', '.join(f'{k} {len(v)}' for k, v in lost.items())})"),
        ("admitted to a NotReady node", str(len(obs.admitted_to_failed))),
        ("cycles", ", ".join(f"{k} {v:.0f}" for k, v in sorted(cycles.items())) or "none seen"),
        ("failed cycles, why", ", ".join(f"{k} {v}" for k, v in reasons.most_common()) or "-"),
        ("cycle time p50 / p95 / p99", " / ".join(
            "-" if v is None else f"{v:.2f}s" for v in pct.values())),
        ("gangs stopped whole on a loss", f"{sum(hit)} of {len(hit)}"),
        ("gangs hit wholly on the failed node", str(alone)),
        ("gangs hit that finished meanwhile (not judged)", str(finished)),
        ("leader failovers", "; ".join(soak.failovers) or "-"),
        ("RSS, replica a", rss),
        ("GPU-seconds useful / lost / running", f"{gs['useful']:.0f} / {gs['lost']:.0f} / "
                                                f"{gs['running']:.0f} of {cap:.0f} "
                                                f"({share:.0f}% useful)"),
    ]  # fmt: skip
    say("\n| soak | |\n| --- | --- |")
    for k, v in rows:
        say(f"| {k} | {v} |")
    for title, lines in (
        ("over-commits", obs.overcommit),
        ("kubelet refusals", refused),
        ("repeated admissions", rep_adm),
        ("repeated evictions", twice),
        *((k if k in NOT_LOST else f"lost: {k}", v) for k, v in lost.items()),
        ("admitted to a NotReady node", obs.admitted_to_failed),
    ):
        if lines:
            say(f"{title}: " + "; ".join(lines[:10]) + (" ..." if len(lines) > 10 else ""))
    for line in soak.view:
        say(f"gpupool's view: {line}")
    bad = len(obs.overcommit) + len(refused) + len(rep_adm) + len(twice) + lost_n
    say(f"invariants: {'held' if bad == 0 else 'BROKEN'}")
    return 0 if bad == 0 or not soak.args.strict else 1


# --------------------------------------------------------------------------- setting up


def start(binary: Path, run: Path, args: argparse.Namespace) -> tuple:
    from tests.faultproxy.proxy import FaultProxy

    t = time.monotonic()
    text = pool_doc(POOL, MODEL, args.nodes, f"  nodeSettleTime: {SETTLE:.0f}s\n") + PRIORITY
    plane, kubelets, world = cluster_setup.start_cluster(
        binary, run, text, grace="10s", kubelet_intervals=None, scaled=False, say=say
    )
    add_nodes(world, [(f"soak-{i + 1}", POOL, 8) for i in range(args.nodes)], MODEL, say=say)
    pki = plane.cert_dir
    proxy = FaultProxy(plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")
    proxy.start()
    say(f"cluster up in {time.monotonic() - t:.1f}s: {args.nodes} nodes, proxy {proxy.url}")
    return plane, kubelets, world, proxy


def inference(world: Any, ns: str) -> None:
    spec = pod_spec(1, "serve")
    world.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "serve"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "serve"}},
                "template": {"metadata": {"labels": {"app": "serve"}}, "spec": spec},
            },
        },
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="3 nodes, ~40 s of chaos")
    ap.add_argument("--minutes", type=float, default=20.0, help="minutes of chaos (default 20)")
    ap.add_argument("--nodes", type=int, default=6)
    ap.add_argument("--backlog", type=int, default=8, help="pods kept waiting (default 8)")
    ap.add_argument("--drain", type=float, default=60.0, help="s after the chaos before the "
                    "lost-action check (default 60)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--strict", action="store_true", help="exit 1 when an invariant broke")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    args = ap.parse_args(argv)
    if args.smoke:
        given = {a.split("=")[0].lstrip("-") for a in (argv or sys.argv[1:])}
        for k, v in SMOKE.items():
            if k not in given:
                setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    binary = cached_binary()
    if binary is None:
        say("no kcp control-plane binary (scripts/build-control-plane.sh builds it): skipped")
        return 0
    run = Path(tempfile.mkdtemp(prefix="gpupool-soak-"))
    plane = kubelets = proxy = None
    soak = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        plane, kubelets, world, proxy = start(binary, run, args)
        from tests.integration.gating import gated_namespace
        from tests.integration.world import CONTROLLER_SA, NS

        ns = gated_namespace(world)
        token = plane.service_account_token(NS, CONTROLLER_SA, create=False,
                                            expiration_seconds=6 * 3600)  # fmt: skip
        kubeconfig = proxy.kubeconfig(token, run / "controller.kubeconfig")
        soak = Soak(args, world, proxy, run, ns)
        for name in ("a", "b"):
            soak.replicas[name] = Replica(name, run, kubeconfig, run / "policy")
            soak.replicas[name].start()
        threading.Thread(target=soak.obs.run, name="observer", daemon=True).start()
        inference(world, ns)
        seconds = args.minutes * 60
        say(f"chaos for {seconds:.0f}s (seed {args.seed}), run dir {run}")
        soak.loop(seconds)
        say(f"chaos over; drain {args.drain:.0f}s")
        t = time.monotonic()
        while time.monotonic() - t < args.drain:
            soak.step_nodes()
            for r in soak.replicas.values():
                r.sample(soak.obs.now())
            soak.check_gangs()
            time.sleep(1.0)
        soak.check_gangs(final=True)
        lost = lost_actions(soak)
        if any(lost.values()):  # why gpupool holds what the check counts as fitting
            try:
                soak.view = gpupool_view(soak)
            except Exception as exc:  # noqa: BLE001 - a diagnosis, never the run's end
                soak.view = [f"could not plan here: {type(exc).__name__}: {exc}"]
        twice = repeated_evictions(plane)
        soak.obs.stop.set()
        return report(soak, seconds, lost, twice)
    finally:
        if soak is not None:
            for r in soak.replicas.values():
                with contextlib.suppress(Exception):
                    if r.proc is not None:
                        os.kill(r.proc.pid, signal.SIGCONT)
                    r.stop()
        for part in (proxy, kubelets, plane):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()
        if args.keep:
            say(f"run directory kept: {run}")
        else:
            shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
