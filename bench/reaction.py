"""How fast gpupool reacts to a burst (issue 28, item 3), on the real control plane.

    .venv/bin/python bench/reaction.py                         # 100 nodes, 20 trials a case
    .venv/bin/python bench/reaction.py --sizes 100,300 --trials 30
    .venv/bin/python bench/reaction.py --cases free --sizes 1000
    .venv/bin/python bench/reaction.py --smoke                 # 4 nodes, 2 trials, ~1-2 min

The suite's control plane (tests/cluster: kube-apiserver, kube-scheduler,
kube-controller-manager, simulated kubelets; per GPU node the NVIDIA stand-ins and gpupool's
node agent, `World.add_gpu_node`), `--sizes` nodes of 8 H100 each, and gpupool's controller
running its real loop (`Controller.run`, as its ServiceAccount) with a 300 s interval: only a
wake can make it react in seconds. An inference Deployment `chat` (ScalingPolicy with source
annotations, scale-up over 10 queued requests a replica, step 1, cooldown 1 s) sits in a
namespace labelled for gpupool's admission (its pods are gated until gpupool admits them).
Background churn: 1-card training pods created and deleted in another gated namespace
(`--churn` pods a second, each living `--churn-life` s), admitted by gpupool as they come.

A trial: the Deployment's queue annotation jumps from 5 (inside the band) to 1,000; measured
from that write, polling the API server every 20 ms: **decision** (the Deployment's replicas
grow), **admitted** (the new pod carries gpupool's admission), **bound** (the new pod has a
node). Then the trial is undone (queue back, replicas back to 1, the replica's pod gone) and
the loop left to settle.

Cases (each its own Deployment, all three in one cluster):
- **free**: a replica asks 1 whole card, and free cards exist;
- **preempt**: a replica asks 1 whole card of the `preempt` nodes, every one of which is held
  by checkpointable training (training-low, the ScalingPolicy's borrowFrom): gpupool asks a
  checkpoint, the stand-in of the training job answers at once (`checkpoint-done`), gpupool
  evicts, the simulated kubelet deletes the victim after its grace period; the **grace** column
  is the time from the checkpoint request to the victim's deletion, counted separately (the
  victim's own shutdown, not gpupool's reaction); then a new victim is started for the next
  trial;
- **repartition**: a replica asks a MIG slice (`nvidia.com/mig-3g.40gb`) and only whole cards
  are free: gpupool repartitions a card (cordon, mig-manager config, uncordon), the stand-ins
  apply it. The first repartition to a layout writes mig-manager's ConfigMap and waits the
  kubelet's ConfigMap propagation (150 s, `config_propagation_seconds`); that one-off is a
  warm-up trial outside the figures, and each later trial reuses the layout.

Prints one table: per size and case, trials, p50/p99 of spike -> decision, -> admitted,
-> bound, and for preempt the grace. Exits 0 with a message when the control-plane binary is
missing (scripts/build-control-plane.sh builds it). Target (issue 28): burst with free
capacity, spike -> bound p99 <= 5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import cluster_setup  # noqa: E402
from bench.cluster_setup import (  # noqa: E402
    add_nodes,
    cached_binary,
    cpu_line,
    cpu_seconds,
    pool_doc,
    priority_doc,
)
from reconciler import conventions as C  # noqa: E402

MODEL = "H100-SXM5-80GB"
INTERVAL = 300.0
CALM, SPIKE = 5, 1000
CASES = ("free", "repartition", "preempt")
SMOKE = {"sizes": "4", "trials": 2, "churn": 0.5, "cases": "free,preempt", "idle": 0.0}
"""--smoke leaves out repartition: its every trial waits the kubelet's ConfigMap propagation
(150 s), not seconds."""
MIG = "3g.40gb"
MOUNT_DELAY = 140.0  # s; the kubelet's worst case is 150 s (tests/nvidia/mounted.py)

INFERENCE_TEXT = """\
  inference:
    minGPUs: 0
    maxGPUs: {cards}
    prefer: mig
    mig:
      layouts:
        - {{name: two-3g, profiles: [3g.40gb, 3g.40gb]}}
"""

POLICY = priority_doc(
    "bench",
    "training-low",
    [("serving", 30000, "inference", False), ("training-low", 10000, "training", True)],
    """\
  preemption:
    checkpointGracePeriod: 30s
    minRuntime: 1m
    budgetPerHour: 10000
    rules:
      - {preemptor: serving, victims: [training-low]}
---
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata: {name: default}
spec:
  defragmentation: {enabled: false}
""",
)

SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {{name: {name}}}
spec:
  pool: {pool}
  targets:
    - {{namespace: {ns}, name: {name}, minReplicas: 1, maxReplicas: 4}}
  scaleUp: {{queueLengthPerReplica: 10, step: 1, cooldown: 1s}}
  scaleDown: {{queueLengthPerReplica: 0.001, step: 1, cooldown: 24h}}
  borrowFrom: [training-low]
"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class WallClock:
    """The world's and the controller's clock: real time (cooldowns, grace periods, the
    kubelet's ConfigMap propagation take what they take)."""

    @property
    def now(self) -> datetime:
        return datetime.now(UTC)

    def __call__(self) -> datetime:
        return datetime.now(UTC)

    def advance(self, seconds: float) -> None:  # noqa: ARG002 - World's clock interface
        return None


@dataclass
class Trial:
    decision: float | None = None
    admitted: float | None = None
    bound: float | None = None
    grace: float | None = None


@dataclass
class Case:
    name: str
    limits: dict[str, str]
    nodes: list[str] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    skipped: str = ""


# --------------------------------------------------------------------------- the cluster


def split(n: int, cases: list[str]) -> dict[str, list[str]]:
    """Each case's nodes (its own Pool): repartition and preempt about a tenth each (at least
    one), free the rest (at least one)."""
    small = {c: max(1, n // 10) for c in cases if c != "free"}
    sizes = {**small, **({"free": max(1, n - sum(small.values()))} if "free" in cases else {})}
    out, i = {}, 0
    for c in cases:
        out[c] = [f"{c[:4]}-{j:04d}" for j in range(i, i + sizes[c])]
        i += sizes[c]
    return out


def start_cluster(
    binary: Path, workdir: Path, nodes: dict[str, list[str]], idle: float = 0.0
) -> Any:
    """The cluster with `nodes`, saying what the setup cost (wall time, CPU of this process
    and of each control-plane component) and, for `idle` s after it, what the idle cluster
    costs (the simulated kubelets' heartbeats and watch, the stand-ins)."""
    t = time.monotonic()
    plane, kubelets, world = cluster_setup.start_cluster(
        binary, workdir, policy_text(nodes, []), say=say
    )
    cpu = cpu_seconds(plane)
    world.clock = WallClock()
    todo = [(name, case, 8) for case, names in nodes.items() for name in names]
    t_nodes = time.monotonic()
    add_nodes(world, todo, MODEL, say=say, every=max(len(todo) // 4, 1))
    done = cpu_seconds(plane)
    say(
        f"setup: {len(todo)} nodes in {time.monotonic() - t_nodes:.0f}s (cluster up in "
        f"{t_nodes - t:.0f}s); CPU: {cpu_line(cpu, done, time.monotonic() - t_nodes)}"
    )
    if idle > 0:
        time.sleep(idle)
        say(f"idle {len(todo)} nodes, CPU: {cpu_line(done, cpu_seconds(plane), idle)}")
    return plane, kubelets, world


def deployment(name: str, limits: dict[str, str]) -> dict:
    spec: dict[str, Any] = {
        "priorityClassName": "serving",
        "nodeSelector": {C.POOL_LABEL: name},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "srv", "image": "registry.example/serve:1", "resources": {"limits": limits}}
        ],
    }
    return {
        "metadata": {
            "name": name,
            "labels": {C.INFERENCE_LABEL: "true"},
            "annotations": {C.QUEUE_LENGTH_ANN: str(CALM), C.LAST_SCALE_ANN: hour_ago()},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def hour_ago() -> str:
    return (datetime.now(UTC) - timedelta(hours=1)).isoformat()


def training_pod(name: str, pool: str, node: str | None, gpus: int = 1) -> dict:
    spec: dict[str, Any] = {
        "priorityClassName": "training-low",
        "nodeSelector": {C.POOL_LABEL: pool},
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "labels": {"app": "train"},
            "annotations": {C.CHECKPOINTABLE_ANN: "true", C.LAST_CHECKPOINT_ANN: hour_ago()},
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------- background


class Background:
    """The threads around the controller: the node agents and NVIDIA stand-ins (settle,
    step), the training job's checkpoint stand-in, and the churn."""

    def __init__(
        self,
        world: Any,
        churn_ns: str,
        train_ns: str,
        rate: float,
        life: float,
        mig_nodes: list[str],
    ):
        self.world, self.churn_ns, self.train_ns = world, churn_ns, train_ns
        self.mig_nodes = mig_nodes
        self.rate, self.life = rate, life
        self.stop = threading.Event()
        self.asked: dict[str, float] = {}  # victim -> when its checkpoint was asked (monotonic)
        self.gone: dict[str, float] = {}  # victim -> when it was seen gone
        self.churned = 0

    def start(self) -> None:
        for fn in (self._settle, self._checkpoints, self._churn):
            threading.Thread(target=self._guard, args=(fn,), daemon=True).start()

    def _guard(self, fn: Any) -> None:
        while not self.stop.is_set():
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a background hiccup must not end the run
                say(f"background {fn.__name__}: {type(exc).__name__}: {exc}")
                self.stop.wait(0.5)

    def _settle(self) -> None:
        """The node agents publish where cards changed hands (`World.settle` of
        admission_openb's world); the NVIDIA stand-ins of the repartition nodes look at their
        mounted ConfigMaps and step every round (the kubelet's propagation delay counts from
        when the API server had the version; a stand-in that looked late would see it late)."""
        from tests.nvidia.mounted import server_write_time

        sims = [self.world.nodes[n] for n in self.mig_nodes]
        for sim in sims:
            # a kubelet a little faster than the worst case gpupool waits for, counting from the
            # API server's write: a stand-in that counted from when this loop first looked (a
            # round takes seconds at 1,000 nodes on a loaded machine) would see the version after
            # gpupool's 150 s, fail, and make gpupool write it again, round after round
            for mounted in (sim.mig_manager.mounted, sim.device_plugin.mounted):
                mounted.delay = MOUNT_DELAY
                mounted.written = server_write_time
        while not self.stop.wait(0.1):
            self.world.settle()
            for sim in sims:
                sim.observe()
                sim.step()

    def _checkpoints(self) -> None:
        """The training jobs checkpoint at once when asked; a victim's end is recorded."""
        core = self.world.core
        while not self.stop.wait(0.02):
            live = set()
            for p in core.list_namespaced_pod(self.train_ns).items:
                name, ann = p.metadata.name, p.metadata.annotations or {}
                live.add(name)
                if C.CHECKPOINT_REQUESTED_ANN in ann and name not in self.asked:
                    self.asked[name] = time.monotonic()
                    core.patch_namespaced_pod(
                        name,
                        self.train_ns,
                        {"metadata": {"annotations": {C.CHECKPOINT_DONE_ANN: "true"}}},
                    )
            for name in list(self.asked):
                if name not in live and name not in self.gone:
                    self.gone[name] = time.monotonic()

    def _churn(self) -> None:
        if self.rate <= 0:
            return
        core = self.world.core
        born: list[tuple[float, str]] = []
        while not self.stop.wait(1.0 / self.rate):
            now = time.monotonic()
            while born and born[0][0] + self.life < now:
                _, name = born.pop(0)
                with contextlib.suppress(Exception):
                    core.delete_namespaced_pod(name, self.churn_ns, grace_period_seconds=0)
            self.churned += 1
            name = f"churn-{self.churned}"
            core.create_namespaced_pod(self.churn_ns, training_pod(name, "free", None))
            born.append((now, name))


# --------------------------------------------------------------------------- a trial


def new_pod(world: Any, ns: str, app: str, before: set[str]) -> Any:
    for p in world.core.list_namespaced_pod(ns, label_selector=f"app={app}").items:
        if p.metadata.name not in before and not p.metadata.deletion_timestamp:
            return p
    return None


def trial(world: Any, ns: str, case: Case, bg: Background, limit: float) -> Trial:
    apps, core = world.apps, world.core
    before = {
        p.metadata.name
        for p in core.list_namespaced_pod(ns, label_selector=f"app={case.name}").items
    }
    out = Trial()
    asked_before = set(bg.asked)
    t0 = time.monotonic()
    apps.patch_namespaced_deployment(
        case.name, ns, {"metadata": {"annotations": {C.QUEUE_LENGTH_ANN: str(SPIKE)}}}
    )
    while time.monotonic() - t0 < limit:
        now = time.monotonic() - t0
        if (
            out.decision is None
            and apps.read_namespaced_deployment(case.name, ns).spec.replicas > 1
        ):
            out.decision = now
        p = new_pod(world, ns, case.name, before)
        if p is not None:
            ann = p.metadata.annotations or {}
            if out.admitted is None and C.ADMITTED_ANN in ann:
                out.admitted = now
            if p.spec.node_name:
                out.admitted = out.admitted if out.admitted is not None else now
                out.decision = out.decision if out.decision is not None else now
                out.bound = now
                break
        time.sleep(0.02)
    victims = [v for v in bg.asked if v not in asked_before]
    if victims:
        v = victims[0]
        deadline = time.monotonic() + 30
        while v not in bg.gone and time.monotonic() < deadline:
            time.sleep(0.05)
        if v in bg.gone:
            out.grace = bg.gone[v] - bg.asked[v]
    return out


def undo(world: Any, ns: str, case: Case, train_ns: str, bg: Background) -> None:
    """Back to one replica and a calm queue; a preempted victim is replaced (the node's cards
    full of training again)."""
    world.apps.patch_namespaced_deployment(
        case.name,
        ns,
        {
            "metadata": {
                "annotations": {C.QUEUE_LENGTH_ANN: str(CALM), C.LAST_SCALE_ANN: hour_ago()}
            },
            "spec": {"replicas": 1},
        },
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = world.core.list_namespaced_pod(ns, label_selector=f"app={case.name}").items
        if len(pods) <= 1:
            break
        time.sleep(0.1)
    if case.name == "preempt":
        fill(world, train_ns, case.nodes, bg)


def fill(world: Any, ns: str, nodes: list[str], bg: Background) -> None:
    """Every card of `nodes` held by a 1-card training pod (started an hour ago: past its
    minimum runtime), except those the case's serving replica holds."""
    held: dict[str, int] = {}
    for p in world.core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items:
        if p.spec.node_name in nodes and not p.metadata.deletion_timestamp:
            for c in p.spec.containers:
                g = ((c.resources.limits if c.resources else None) or {}).get("nvidia.com/gpu")
                held[p.spec.node_name] = held.get(p.spec.node_name, 0) + int(g or 0)
    for node in nodes:
        for _ in range(8 - held.get(node, 0)):
            bg.churned += 1
            name = f"victim-{bg.churned}"
            world.core.create_namespaced_pod(ns, training_pod(name, "preempt", node))
            deadline = time.monotonic() + 20
            while world.core.read_namespaced_pod(name, ns).status.phase == "Pending":
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            world.core.patch_namespaced_pod_status(
                name,
                ns,
                {"status": {"startTime": hour_ago()}},
                _content_type="application/merge-patch+json",
            )


# --------------------------------------------------------------------------- a size


def run_size(binary: Path, n: int, args: argparse.Namespace) -> list[Case]:
    from reconciler.loop.controller import Controller
    from reconciler.loop.sources import DirectorySource
    from tests.integration.gating import gated_namespace
    from tests.integration.harness import write_policy
    from tests.integration.world import NS

    nodes = split(n, args.cases)
    cases = {c: Case(c, {"nvidia.com/gpu": "1"}, nodes[c]) for c in args.cases}
    if "repartition" in cases:
        cases["repartition"].limits = {f"nvidia.com/mig-{MIG}": "1"}
    plane = kubelets = loop = None
    stop = threading.Event()
    bg: Background | None = None
    with tempfile.TemporaryDirectory(prefix="gpupool-reaction-") as tmp:
        workdir = Path(tmp)
        try:
            plane, kubelets, world = start_cluster(binary, workdir, nodes, args.idle)
            serve_ns, churn_ns = (gated_namespace(world) for _ in range(2))
            train_ns, fill_ns = "training", "fillers"  # pods bound where they run: not gated
            for ns in (train_ns, fill_ns):
                world.ensure_namespace(ns)
            write_policy(workdir / "policy", policy_text(nodes, [(c, serve_ns) for c in cases]))
            bg = Background(
                world, churn_ns, train_ns, args.churn, args.churn_life, nodes.get("repartition", [])
            )
            if "preempt" in cases:
                t = time.monotonic()
                fill(world, train_ns, nodes["preempt"], bg)
                say(
                    f"{len(nodes['preempt'])} preempt node(s) filled in {time.monotonic() - t:.0f}s"
                )
            for c in cases.values():
                world.apps.create_namespaced_deployment(serve_ns, deployment(c.name, c.limits))
            bg.start()
            ctl = Controller(
                DirectorySource(workdir / "policy"),
                world.controller_client(),
                namespace=NS,
                identity="gpupool-bench",
                clock=WallClock(),
                signal_poll_seconds=0,
            )
            loop = threading.Thread(target=ctl.run, args=(stop, INTERVAL), daemon=True)
            loop.start()
            settled(world, serve_ns, cases.values())
            for c in cases.values():
                warm = 1 if c.name == "repartition" else 0
                trials = args.repartition_trials if c.name == "repartition" else args.trials
                for i in range(trials + warm):
                    if c.name == "repartition":
                        fill_slices(world, fill_ns, c.nodes)
                    limit = 400 if c.name == "repartition" else args.limit
                    t = trial(world, serve_ns, c, bg, limit)
                    note = " (warm-up: first use of the layout)" if i < warm else ""
                    say(f"  {n} nodes {c.name} trial {i + 1 - warm}: {fmt_trial(t)}{note}")
                    if i >= warm:
                        c.trials.append(t)
                    undo(world, serve_ns, c, train_ns, bg)
                    time.sleep(args.pause)
            say(f"{n} nodes: {bg.churned} pods created in the background")
        finally:
            stop.set()
            logging.getLogger().setLevel(logging.CRITICAL)  # the teardown's refused connections
            if loop is not None:
                loop.join(20)
            if bg is not None:
                bg.stop.set()
            if kubelets is not None:
                with contextlib.suppress(Exception):
                    kubelets.stop()
            if plane is not None:
                with contextlib.suppress(Exception):
                    plane.stop()
    return list(cases.values())


def settled(world: Any, ns: str, cases: Any, timeout: float = 900) -> None:
    """Each case's first replica bound (the controller admitted it) before the trials. The
    repartition case's pays the ConfigMap propagation (150 s) and mig-manager's run; at 1,000
    nodes on the loaded 2-core machine that took 302 s from gpupool's write (2026-12-05), over
    the 300 s this waited then."""
    deadline = time.monotonic() + timeout
    for c in cases:
        while True:
            pods = world.core.list_namespaced_pod(ns, label_selector=f"app={c.name}").items
            if any(p.spec.node_name for p in pods):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {c.name} Deployment's first replica was never bound")
            time.sleep(0.2)
    say("first replicas bound")


def fill_slices(world: Any, ns: str, nodes: list[str]) -> None:
    """Every free MIG slice of `nodes` taken by a filler pod, so that the next replica needs a
    card repartitioned, not a slice an earlier trial left."""
    resource = f"nvidia.com/mig-{MIG}"
    used: dict[str, int] = {}
    for p in world.core.list_pod_for_all_namespaces().items:
        if p.spec.node_name in nodes and not p.metadata.deletion_timestamp:
            for c in p.spec.containers:
                lim = (c.resources.limits if c.resources else None) or {}
                used[p.spec.node_name] = used.get(p.spec.node_name, 0) + int(lim.get(resource, 0))
    for node in nodes:
        have = int((world.core.read_node(node).status.allocatable or {}).get(resource, 0))
        for _ in range(have - used.get(node, 0)):
            name = f"filler-{time.monotonic_ns()}"
            body = training_pod(name, "repartition", node)
            body["spec"]["priorityClassName"] = "serving"
            body["spec"]["containers"][0]["resources"]["limits"] = {resource: "1"}
            world.core.create_namespaced_pod(ns, body)


def policy_text(nodes: dict[str, list[str]], targets: list[tuple[str, str]]) -> str:
    """A Pool per case (named after it, over its nodes), the priorities, and a ScalingPolicy
    per case's Deployment (`targets`: (name, namespace))."""
    text = "".join(
        "---\n" + pool_doc(c, MODEL, len(names), INFERENCE_TEXT.format(cards=8 * len(names)))
        for c, names in nodes.items()
    )
    text += POLICY
    for name, ns in targets:
        text += SCALING.format(name=name, ns=ns, pool=name)
    return text


# --------------------------------------------------------------------------- the table


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def fmt_trial(t: Trial) -> str:
    return f"decision {fmt(t.decision)} admitted {fmt(t.admitted)} bound {fmt(t.bound)}" + (
        f" grace {fmt(t.grace)}" if t.grace is not None else ""
    )


def table(rows: list[tuple[int, Case]]) -> str:
    head = (
        "| nodes | case | trials | bound | decision p50 / p99 s | admitted p50 / p99 s "
        "| bound p50 / p99 s | grace p50 / p99 s |"
    )
    out = [head, "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for n, c in rows:
        cols = {
            f: [getattr(t, f) for t in c.trials if getattr(t, f) is not None]
            for f in ("decision", "admitted", "bound", "grace")
        }
        pair = {f: f"{fmt(pct(v, 0.5))} / {fmt(pct(v, 0.99))}" for f, v in cols.items()}
        out.append(
            f"| {n} | {c.name} | {len(c.trials)} | {len(cols['bound'])} | {pair['decision']} "
            f"| {pair['admitted']} | {pair['bound']} | {pair['grace']} |"
        )
    return "\n".join(out)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100", help="comma-separated node counts (default 100)")
    p.add_argument("--trials", type=int, default=20, help="trials per case and size (default 20)")
    p.add_argument("--cases", default=",".join(CASES), help=f"which of {', '.join(CASES)}")
    p.add_argument("--churn", type=float, default=2.0, help="background pods a second (default 2)")
    p.add_argument("--churn-life", type=float, default=20.0, help="their life, s (default 20)")
    p.add_argument(
        "--repartition-trials",
        type=int,
        default=3,
        help="trials of the repartition case (each waits ~150 s of ConfigMap propagation; "
        "default 3, after one warm-up)",
    )
    p.add_argument("--limit", type=float, default=60.0, help="a trial's limit, s (default 60)")
    p.add_argument("--pause", type=float, default=1.0, help="between trials, s (default 1)")
    p.add_argument(
        "--idle",
        type=float,
        default=30.0,
        help="after the setup, s the idle cluster's CPU is measured (default 30; smoke 0)",
    )
    p.add_argument("--log", metavar="FILE", help="the controller's log (INFO) goes here")
    p.add_argument("--smoke", action="store_true", help="4 nodes, 2 trials a case")
    args = p.parse_args(argv)
    if args.smoke:
        given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in (argv or sys.argv[1:])}
        for k, v in SMOKE.items():
            if k not in given:
                setattr(args, k, v)
    args.cases = [c for c in args.cases.split(",") if c]
    bad = [c for c in args.cases if c not in CASES]
    if bad:
        p.error(f"--cases: unknown {bad}; choose from {', '.join(CASES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.log:
        handler = logging.FileHandler(args.log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.getLogger("gpupool").addHandler(handler)
        logging.getLogger("gpupool").setLevel(logging.INFO)
    binary = cached_binary()
    if binary is None:
        print("skipped: no control-plane binary (scripts/build-control-plane.sh builds it)")
        return 0
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for c in run_size(binary, n, args):
            rows.append((n, c))
    print(f"reaction to a queue spike, {datetime.now(UTC):%Y-%m-%d}, seconds from the spike")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
