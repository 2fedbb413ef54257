"""The cluster the control-plane benchmarks share (bench/reaction.py, bench/soak.py,
bench/admission_openb.py): the cached kcp binary (never built here), kube-apiserver,
kube-scheduler and kube-controller-manager (tests/cluster), simulated kubelets, gpupool's CRDs,
RBAC and admission objects (tests/integration/world.py `install`), the GPU operator's NVIDIA
ConfigMaps, the PriorityClasses and policy directory of a policy text, GPU nodes with their
NVIDIA stand-ins and node agent added in parallel; a `World` whose settle and step scale to
hundreds of nodes (`make_world`); and the Pool and PriorityPolicy documents the three write
(`pool_doc`, `priority_doc`)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The benchmarks measure gpupool, hundreds of nodes at a time: the Python device-plugin stand-in
# serves their nodes, not one NVIDIA plugin process pair per node (tests/nvidia/real_plugin.py;
# the test suite runs the real one). GPUPOOL_DEVICE_PLUGIN=real asks for it here too.
os.environ.setdefault("GPUPOOL_DEVICE_PLUGIN", "standin")

POOL_HEAD = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: {pool}}}
spec:
  gpuModel: {model}
  nodeSelector: {{matchLabels: {{gpupool.io/pool: {pool}}}}}
  capacity: {{nodes: {nodes}, gpusPerNode: 8}}
  training: {{minGPUs: 0, topology: node}}
"""


def pool_doc(pool: str, model: str, nodes: int, extra: str = "") -> str:
    """A Pool `pool` of `nodes` nodes of 8 `model` cards, selected by `gpupool.io/pool`, with
    no training minimum; `extra`: more lines of its `spec` (indented two spaces)."""
    return POOL_HEAD.format(pool=pool, model=model, nodes=nodes) + extra


def priority_doc(
    name: str, default: str, classes: list[tuple[str, int, str, bool]], extra: str = ""
) -> str:
    """A PriorityPolicy `name` (after a `---`) with defaultClass `default` and `classes`
    (name, value, workload, preemptible); `extra`: more lines of its `spec`."""
    lines = [
        "---",
        "apiVersion: gpupool.io/v1alpha1",
        "kind: PriorityPolicy",
        f"metadata: {{name: {name}}}",
        "spec:",
        f"  defaultClass: {default}",
        "  classes:",
    ]
    for cls, value, workload, preemptible in classes:
        tail = "" if preemptible else ", preemptible: false"
        lines.append(f"    - {{name: {cls}, value: {value}, workload: {workload}{tail}}}")
    return "\n".join(lines) + "\n" + extra


def cached_binary() -> Path | None:
    """The kcp binary scripts/build-control-plane.sh would print, if it is built: $KCP_BINARY,
    else the cache path the script derives (its hash of go.mod, go.sum, the .go files and the
    script itself). None when not built; no benchmark builds it."""
    override = os.environ.get("KCP_BINARY")
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    src = ROOT / "tests" / "cluster" / "kcp"
    script = ROOT / "scripts" / "build-control-plane.sh"
    try:
        gomod = (src / "go.mod").read_bytes()
        version = next(
            f[1]
            for f in (line.split() for line in gomod.decode().splitlines())
            if len(f) > 1 and f[0] == "k8s.io/kubernetes"
        )
        h = hashlib.sha256(gomod + (src / "go.sum").read_bytes())
        for go in sorted(src.glob("*.go"), key=lambda p: p.name.encode()):
            h.update(f"== {go.name}\n".encode() + go.read_bytes())
        h.update(script.read_bytes())
    except (OSError, StopIteration):
        return None
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    cache = Path(os.environ.get("GPUPOOL_CACHE") or Path(xdg) / "gpupool")
    path = cache / "control-plane" / f"{version}-{h.hexdigest()[:16]}" / "kcp"
    return path if os.access(path, os.X_OK) else None


def held_cards(devices: Any) -> tuple:
    """What a node's device manager hands out now (the kubelet threads change it)."""
    for _ in range(20):
        try:
            return tuple(sorted((k, tuple(v)) for k, v in list(devices.assigned.items()) if v))
        except RuntimeError:  # changed during the copy
            time.sleep(0.001)
    return ()


def make_world(plane: Any, kubelets: Any, api: Any) -> Any:
    """tests/integration/world.py's World, with `settle()` and `step_nodes()` that scale: the
    node agents publish only where the device manager's assignments changed since their last
    publication (a World publishes every node, about 45 ms each), and the NVIDIA stand-ins
    step only while their ConfigMaps changed within the mount delay (about 85 ms a node)."""
    from tests.integration.world import MIG_CM, OPERATOR_NS, SHARING_CM, World
    from tests.nvidia.mounted import SYNC_PERIOD_PLUS_CACHE_TTL

    class BenchWorld(World):
        transient_pod_resources = True  # no idle gRPC server per node (World's note)

        def settle(self, timeout: float = 30.0) -> None:  # noqa: ARG002 - World's signature
            published = self.__dict__.setdefault("_published", {})
            dirty = []
            for name, sim in list(self.nodes.items()):
                held = held_cards(sim.gpus)
                if published.get(name) != held:
                    dirty.append((name, sim, held))
            if dirty:
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(lambda d: d[1].publish(), dirty))
            for name, _, held in dirty:
                published[name] = held

        def step_nodes(self) -> None:
            rvs = tuple(
                self.core.read_namespaced_config_map(cm, OPERATOR_NS).metadata.resource_version
                for cm in (MIG_CM, SHARING_CM)
            )
            seen = self.__dict__.get("_config_rvs")
            if seen is None:  # the stand-ins read these at their start
                self.__dict__["_config_rvs"] = (rvs, None)
                return
            if seen[0] != rvs:
                seen = self.__dict__["_config_rvs"] = (rvs, self.clock.now)
            if seen[1] is not None and (
                (self.clock.now - seen[1]).total_seconds() <= 2 * SYNC_PERIOD_PLUS_CACHE_TTL
            ):
                super().step_nodes()

    return BenchWorld(plane, kubelets, api)


def start_cluster(
    binary: Path,
    workdir: Path,
    policy: str,
    *,
    grace: str = "300s",
    scheduler_args: Iterable[str] = (),
    kubelet_intervals: tuple[float, float] | None = (20, 600),
    scaled: bool = True,
    say: Callable[[str], None] = print,
) -> tuple[Any, Any, Any]:
    """(plane, kubelets, world): the control plane started in `workdir/control-plane` (node
    monitor grace `grace`, kube-scheduler's `scheduler_args`), simulated kubelets (heartbeat
    and status intervals `kubelet_intervals`, None: their defaults), gpupool's objects, the
    NVIDIA ConfigMaps, `policy`'s PriorityClasses, and `policy` written under
    `workdir/policy`. `scaled`: a `make_world` World, else the tests' own."""
    from tests.cluster.controlplane import ControlPlane
    from tests.cluster.kubelets import SimulatedKubelets
    from tests.integration.harness import write_policy
    from tests.integration.scenario import seed_priority_classes
    from tests.integration.world import (
        MIG_CM,
        MIG_DEFAULTS,
        OPERATOR_NS,
        SHARING_CM,
        SHARING_DEFAULTS,
        World,
        create_or_keep,
        install,
    )

    t = time.monotonic()
    plane = ControlPlane(
        binary,
        workdir / "control-plane",
        node_monitor_grace_period=grace,
        extra_scheduler_args=list(scheduler_args),
    )
    plane.start()
    say(f"control plane up in {time.monotonic() - t:.1f}s ({plane.server})")
    kw = {}
    if kubelet_intervals is not None:
        kw = {"heartbeat_interval": kubelet_intervals[0], "status_interval": kubelet_intervals[1]}
    kubelets = SimulatedKubelets(plane.api_client, **kw)
    api = plane.api_client()
    install(api)
    world = make_world(plane, kubelets, api) if scaled else World(plane, kubelets, api)
    for cm, data in ((MIG_CM, MIG_DEFAULTS), (SHARING_CM, SHARING_DEFAULTS)):
        create_or_keep(
            lambda cm=cm, data=data: world.core.create_namespaced_config_map(
                OPERATOR_NS, {"metadata": {"name": cm}, "data": data}
            )
        )
    seed_priority_classes(world, policy)
    write_policy(workdir / "policy", policy)
    return plane, kubelets, world


def add_nodes(
    world: Any,
    nodes: list[tuple[str, str, int]],
    model: str,
    say: Callable[[str], None] = print,
    every: int = 25,
) -> None:
    """GPU nodes (name, pool, cards) of `model` with their NVIDIA stand-ins and node agent,
    six at a time (eight from 100 nodes: each add mostly waits for the node-lifecycle
    controller to lift the not-ready taint), with a progress line every `every`
    nodes and at the end; then the world settles."""
    t = time.monotonic()
    done = 0

    def add(n: tuple[str, str, int]) -> None:
        nonlocal done
        world.add_gpu_node(n[0], pool=n[1], model=model, count=n[2])
        done += 1
        if done % every == 0 or done == len(nodes):
            say(f"  {done}/{len(nodes)} GPU nodes ({time.monotonic() - t:.0f}s)")

    with ThreadPoolExecutor(6 if len(nodes) < 100 else 8) as pool:
        list(pool.map(add, nodes))
    world.settle()


def cpu_seconds(plane: Any) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process (simulated kubelets, NVIDIA
    stand-ins, node agents, and whatever else the benchmark runs in it) and by each
    control-plane component, read from /proc (empty for those it cannot read)."""
    out = {"python": sum(os.times()[:2])}
    tick = os.sysconf("SC_CLK_TCK")
    for name, proc in getattr(plane, "_procs", {}).items():
        pid = getattr(getattr(proc, "proc", None), "pid", None)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, TypeError):
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def cpu_line(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    """CPU used between two `cpu_seconds` readings `seconds` apart: per process, CPU seconds
    and the share of one core; with the load average."""
    parts = []
    for name in after:
        used = after[name] - before.get(name, 0.0)
        parts.append(f"{name} {used:.0f} s ({100 * used / max(seconds, 1e-9):.0f}%)")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{', '.join(parts)} over {seconds:.0f} s; load average {load}"
