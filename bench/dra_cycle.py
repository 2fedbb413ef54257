"""One controller cycle's observe and plan on a DRA cluster, in process (issue 32).

    .venv/bin/python bench/dra_cycle.py                       # 40 nodes, ~500 claims
    .venv/bin/python bench/dra_cycle.py --nodes 100 --pending 800 --profile
    .venv/bin/python bench/dra_cycle.py --nodes 20 --pending 20 --cycles 200   # live cycles
    .venv/bin/python bench/dra_cycle.py --smoke               # 3 nodes, seconds (the test suite)

The cluster is the one bench/admission_openb.py's dra-gpupool run makes, built as API objects
and served by the in-process fake API server (tests/observe/fake_cluster.py `serving`), so no
control plane is started: `--nodes` nodes of 8 A100s, each publishing its cards as a
ResourceSlice as NVIDIA's DRA driver does (tests/cluster/dra_slices.py); gpupool's DeviceClass
and ResourceClaimTemplates for its `backend: dra` pool; running pods filling all but one card of
every node with 1- and 2-card claims made from the templates, allocated and reserved for them;
and `--pending` gated pods whose claims are made but not allocated (the queue); `--gone` running
pods deleted while their claims are still allocated. No node agent publishes: DRA says which
cards a pod holds.

It times `observe_cluster` (listing through the fake server, reading the DRA objects, each pod's
request and holdings), the planner's consistency check and the whole plan (`plan_with_facts`),
the best of `--repeat`, and prints one table; then a second one: `observe_cluster` through a
synced watch cache (`ClusterCache`'s nodes, pods and five DRA resources, as the controller
reads them once its informers hold them: `SyncedCache` below) against the listed one, with the
requests each makes and whether the two snapshots are equal. `--profile` prints cProfile's
top functions of one observe (listed, and through the cache) and one plan. Apply is not timed
here (its DRA work is writing the admitted pods' claims: API calls, the same with or without
this cycle's reading). Exit 0 always: figures are for reading, not a target.

A third table, live cycles: `--cycles` cycles as the controller makes them, each observing
through the synced cache with the controller's memos (the pods' `WorkloadMemo`, the cache's
`DraMemo`) and planning through the last cycle's memo (`plan_incremental`, the clock a second
on), with the cyclic collector paused around the plan as the controller has it; before each,
one claim and one pod are replaced by a new version of themselves (a new resourceVersion: what
an admission's writes look like to the watch cache). It prints the CPU milliseconds per cycle
(`time.process_time`) of the observation and of the plan: what a busy controller pays per
cycle, which the first table (a plan from scratch, objects without versions) does not show.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cluster_setup import pool_doc  # noqa: E402
from bench.dra_setup import claim_pod_spec, quota_doc, template  # noqa: E402

POOL, MODEL, DRIVER = "a100", "A100-SXM4-80GB", "gpu.nvidia.com"
NS = "openb-dra"
SMOKE = {"nodes": 3, "pending": 6, "repeat": 1, "gone": 1, "cycles": 3}


def _claim(ns: str, name: str, cards: int, alloc: tuple[str, list[int]] | None, pod: str) -> dict:
    from reconciler.plan.dra import class_name

    status: dict = {}
    if alloc is not None:
        node, minors = alloc
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{m}"}
                        for m in minors
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{ns}-{pod}"}],
        }
    req = {"name": "gpu", "exactly": {"deviceClassName": class_name(POOL), "count": cards}}
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": f"uid-claim-{name}",
            "resourceVersion": "1",
        },
        "spec": {"devices": {"requests": [req]}},
        "status": status,
    }


def _pod(name: str, cards: int, node: str | None, claim: str) -> dict:
    from tests.observe.fake_cluster import pod

    p = pod(NS, name, node_name=node, limits={}, gated=node is None)
    spec = claim_pod_spec(POOL, cards)
    p["spec"]["resourceClaims"] = spec["resourceClaims"]
    p["spec"]["containers"][0]["resources"] = spec["resources"]
    p["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": claim}]
    p["metadata"]["resourceVersion"] = "1"
    return p


def build(nodes: int, pending: int, gone: int = 0) -> tuple[Any, str]:
    """The fake cluster and the policy text; the first pod of the first `gone` nodes is
    deleted with its claim still allocated (the resourceclaim controller has not released it
    yet: the planner's `dra-claim-unreleased`)."""
    from reconciler import conventions as C
    from reconciler.plan.dra import class_name
    from tests.cluster.dra_slices import gpu_device, node_slice
    from tests.observe.fake_cluster import Cluster, node

    names = [f"gpu-node-{i:03d}" for i in range(nodes)]
    pods, claims = [], []
    for i, n in enumerate(names):
        minor = 0
        for k, cards in enumerate([2, 1, 2, 1, 1] if i % 2 else [1, 1, 2, 2, 1]):
            pname, cname = f"run-{i}-{k}", f"run-{i}-{k}-gpus-x"
            claims.append(_claim(NS, cname, cards, (n, list(range(minor, minor + cards))), pname))
            if not (k == 0 and i < gone):
                pods.append(_pod(pname, cards, n, cname))
            minor += cards
    for j in range(pending):
        cards = (1, 1, 2, 4)[j % 4]
        pname, cname = f"queued-{j}", f"queued-{j}-gpus-y"
        claims.append(_claim(NS, cname, cards, None, pname))
        pods.append(_pod(pname, cards, None, cname))
    sizes = (1, 2, 4, 8)
    dra = {
        "resourceslices": [node_slice(n, [gpu_device(n, m) for m in range(8)]) for n in names],
        "deviceclasses": [
            {
                "metadata": {
                    "name": class_name(POOL),
                    "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: POOL},
                },
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            }
        ],
        "resourceclaims": claims,
        "resourceclaimtemplates": [
            {
                "metadata": {
                    "namespace": NS,
                    "name": template(POOL, k),
                    "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
                },
                "spec": {"spec": _claim(NS, "", k, None, "")["spec"]},
            }
            for k in sizes
        ],
    }
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": NS,
            "labels": {C.ADMISSION_NAMESPACE_LABEL: C.ADMISSION_NAMESPACE_VALUE},
        },
    }
    cluster = Cluster(
        nodes=[node(n) for n in names],
        pods=pods,
        node_states=[],
        namespaces=[namespace],
        dra=dra,
    )
    policy = pool_doc(POOL, MODEL, nodes, "  backend: dra\n") + quota_doc(
        "bench-dra", POOL, [NS], nodes * 8
    )
    return cluster, policy


class SyncedCache:
    """What `ClusterCache` answers once its informers are synced and caught up: the objects of
    one list of each resource, the same objects every cycle (a watch replaces only the ones
    that change), and its `dra_memo`."""

    def __init__(self) -> None:
        from kubernetes import client

        from reconciler import conventions as C
        from reconciler.observe.kube_dra import DraMemo

        self.dra_memo = DraMemo()
        core, custom = client.CoreV1Api(None), client.CustomObjectsApi(None)
        self._nodes = core.list_node().items
        self._pods = core.list_pod_for_all_namespaces().items
        self._dra = {
            plural: custom.list_cluster_custom_object(C.DRA_GROUP, C.DRA_VERSION, plural)["items"]
            for plural in C.DRA_PLURALS.values()
        }

    def nodes(self) -> list[Any]:
        return self._nodes

    def pods(self) -> list[Any]:
        return self._pods

    def node_states(self) -> list[dict]:
        return []

    def dra_objects(self, plural: str) -> list[dict]:
        return self._dra[plural]


class Counting:
    """Counts the list calls the fake server answers (`serving` patches the client's API
    classes; this wraps them)."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> Counting:
        from kubernetes import client

        self._saved = {}
        counter = self
        for name in ("CoreV1Api", "CustomObjectsApi"):
            cls = getattr(client, name)
            self._saved[name] = cls

            class Wrapped(cls):  # type: ignore[misc, valid-type]
                def __getattribute__(self, attr: str) -> Any:
                    if attr.startswith("list_"):
                        counter.calls += 1
                    return super().__getattribute__(attr)

            setattr(client, name, Wrapped)
        return self

    def __exit__(self, *exc: Any) -> None:
        from kubernetes import client

        for name, cls in self._saved.items():
            setattr(client, name, cls)


def cached_table(args: Any, observed: Any, t_obs: float) -> None:
    """The second table: observe through a synced cache against the listed observe."""
    from reconciler.observe.kube import observe_cluster
    from tests.observe.fake_cluster import NOW

    cache = SyncedCache()
    t_cached, via_cache = best(lambda: observe_cluster(object(), now=NOW, cache=cache), args.repeat)
    with Counting() as listed:
        observe_cluster(object(), now=NOW)
    with Counting() as cached:
        observe_cluster(object(), now=NOW, cache=cache)
    same = repr(via_cache.dra) == repr(observed.dra) and len(via_cache.workloads) == len(
        observed.workloads
    )
    print()
    print("| nodes | claims | observe s listed | observe s cached | lists listed / cached | same |")
    print("|---:|---:|---:|---:|---:|---|")
    claims = len(observed.dra.claims) if observed.dra else 0
    print(
        f"| {args.nodes} | {claims} | {t_obs:.3f} | {t_cached:.3f} "
        f"| {listed.calls} / {cached.calls} | {'yes' if same else 'NO'} |"
    )


def live_cycles(args: Any, desired: Any) -> None:
    """The third table (the module's docstring)."""
    import copy
    from datetime import timedelta

    from reconciler.loop.collector import paused_collector
    from reconciler.observe.kube import observe_cluster
    from reconciler.observe.kube_nodes import CardMemo
    from reconciler.observe.kube_pods import WorkloadMemo
    from reconciler.plan.incremental import plan_incremental
    from tests.observe.fake_cluster import NOW

    cache, pods, cards, memo = SyncedCache(), WorkloadMemo(), CardMemo(), None
    for i, n in enumerate(cache._nodes):  # a version on every object, as the API server has it
        n.metadata.uid, n.metadata.resource_version = f"uid-node-{i}", "1"
    for plural, items in cache._dra.items():
        for i, o in enumerate(items):
            o["metadata"].setdefault("uid", f"uid-{plural}-{i}")
            o["metadata"].setdefault("resourceVersion", "1")
    claims = cache._dra["resourceclaims"]
    spent = {"observe": 0.0, "plan": 0.0}

    def cycle(i: int) -> None:
        nonlocal memo
        k = i % len(claims)
        claims[k] = copy.deepcopy(claims[k])
        claims[k]["metadata"]["resourceVersion"] = str(100 + i)
        j = i % len(cache._pods)
        cache._pods[j] = copy.deepcopy(cache._pods[j])
        cache._pods[j].metadata.resource_version = str(100 + i)
        now = NOW + timedelta(seconds=i)
        t = time.process_time()
        observed = observe_cluster(object(), now=now, cache=cache, cards=cards, workloads=pods)
        t1 = time.process_time()
        with paused_collector():
            memo = plan_incremental(desired, observed, now, memo).memo
        spent["observe"] += t1 - t
        spent["plan"] += time.process_time() - t1

    for i in range(3):  # the memos filled, as after a controller's first cycles
        cycle(i)
    spent.update(observe=0.0, plan=0.0)
    for i in range(args.cycles):
        cycle(3 + i)
    n = max(args.cycles, 1)
    print()
    print("| nodes | claims | live cycles | observe CPU ms / cycle | plan CPU ms / cycle |")
    print("|---:|---:|---:|---:|---:|")
    print(
        f"| {args.nodes} | {len(claims)} | {args.cycles} | {1000 * spent['observe'] / n:.2f} "
        f"| {1000 * spent['plan'] / n:.2f} |"
    )


def best(fn: Any, repeat: int) -> tuple[float, Any]:
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def profiled(fn: Any, title: str, top: int = 18) -> None:
    prof = cProfile.Profile()
    prof.runcall(fn)
    print(f"\n## {title}: cProfile, top {top} by cumulative time")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--pending", type=int, default=300, help="gated pods with claims (queue)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    ap.add_argument(
        "--gone", type=int, default=0, help="pods deleted while their claims are still allocated"
    )
    ap.add_argument(
        "--cycles", type=int, default=50, help="live cycles for the third table (0: none)"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile one observe and one plan")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes: {SMOKE}")
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)

    from reconciler.observe.kube import observe_cluster
    from reconciler.plan import consistency
    from reconciler.plan.planner import plan_with_facts
    from reconciler.policy.files import SourceFile
    from reconciler.policy.loader import load
    from tests.observe.fake_cluster import NOW, serving

    cluster, policy = build(args.nodes, args.pending, args.gone)
    desired = load([SourceFile("policy.yaml", policy)])
    with serving(cluster):
        t_obs, observed = best(lambda: observe_cluster(object(), now=NOW), args.repeat)
        if args.profile:
            profiled(lambda: observe_cluster(object(), now=NOW), "observe_cluster")
        cache = SyncedCache()
        if args.profile:
            profiled(
                lambda: observe_cluster(object(), now=NOW, cache=cache),
                "observe_cluster through the cache",
            )
    canon = consistency.canonical(observed)
    t_check, _ = best(lambda: consistency.check(desired, canon), args.repeat)
    t_plan, (plan, _) = best(lambda: plan_with_facts(desired, observed), args.repeat)
    if args.profile:
        profiled(lambda: plan_with_facts(desired, observed), "plan_with_facts")
    dra = observed.dra
    claims = len(dra.claims) if dra else 0
    kinds: dict[str, int] = {}
    for a in plan.actions:
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    unreleased = sum(1 for f in plan.findings if f.code == "dra-claim-unreleased")
    print(
        "| nodes | claims | pods | observe s | consistency s | plan s | cycle s "
        "| unreleased claims | actions |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    acts = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
    print(
        f"| {args.nodes} | {claims} | {len(observed.workloads)} | {t_obs:.3f} | {t_check:.3f} "
        f"| {t_plan:.3f} | {t_obs + t_plan:.3f} | {unreleased} | {acts} |"
    )
    with serving(cluster):
        cached_table(args, observed, t_obs)
        if args.cycles:
            live_cycles(args, desired)
    return 0


if __name__ == "__main__":
    sys.exit(main())
