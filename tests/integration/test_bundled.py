"""The bundled policy (the repository's own pools/ and policies/) converges a cluster seeded from
the bundled snapshot (examples/observed.yaml), on the real control plane with the NVIDIA
stand-ins.

Seeding goes through the World as a real cluster would have got there: GPU nodes registered by
their kubelets with their NVIDIA components (MIG layouts at boot), PriorityClasses, the teams'
ResourceQuotas, pods bound to their nodes and admitted by the kubelet with devices from the
node's device manager, the inference Deployments (whose replicas the real scheduler places),
and the node agents publishing from NVML. The snapshot's times are moved so that its
"now" is two hours after the agents' first publication (the agent stamps idle-since with the
wall clock, the controller plans on the test clock). Pods the snapshot shows Pending wait
behind a scheduling gate (as under an admission controller such as Kueue): a free node must not
let the real scheduler run them.

The snapshot shares h100-01 the way the device plugin does, every card not in MIG mode (its
two plain cards, beside six MIG cards); the bundled plan takes one of those MIG cards out of
MIG for the scale-up, and it comes back shared. The A100 pool (MIG cards under running work, an
idle notebook, a scaling target within its band, team caps) changes no MIG mode.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from reconciler.apply.configs import config_name, render_sharing, yaml_text
from reconciler.apply.handlers import ApplyConfig
from reconciler.conventions import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    SHARED_RESOURCE,
)
from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.observe.kube import observe_cluster
from reconciler.observe.model import ObservedState, Workload
from reconciler.observe.snapshot import load_snapshot
from reconciler.plan.actions import SetSharing

from .harness import (
    NS,
    OPERATOR_NS,
    add_gpu_node,
    audit_mark,
    conditions,
    create_pod,
    evictions,
    writes,
)
from .world import SHARING_CM

ROOT = Path(__file__).resolve().parents[2]
GATE = "gpupool.test/seeded-pending"


def snapshot() -> ObservedState:
    return load_snapshot(ROOT / "examples" / "observed.yaml")


def _limits(request) -> dict[str, str]:
    if request.gpus:
        return {GPU_RESOURCE: str(request.gpus)}
    if request.mig:
        return {f"nvidia.com/mig-{p}": str(n) for p, n in request.mig.items()}
    return {SHARED_RESOURCE: str(request.shared_slices)}


def _annotations(w: Workload, shift: timedelta) -> dict[str, str]:
    anns = {
        "gpupool.io/checkpointable": str(w.checkpointable).lower(),
        "gpupool.io/migratable": str(w.migratable).lower(),
    }
    if w.last_checkpoint_at:
        anns["gpupool.io/last-checkpoint"] = (w.last_checkpoint_at + shift).isoformat()
    return anns


def _pending(kube, w: Workload, shift: timedelta) -> None:
    """A pod the snapshot shows Pending: gated, so the scheduler leaves it alone."""
    kube.core.create_namespaced_pod(
        w.namespace,
        {
            "metadata": {
                "name": w.name,
                "labels": {"app": w.name},
                "annotations": _annotations(w, shift),
            },
            "spec": {
                "schedulingGates": [{"name": GATE}],
                "priorityClassName": w.priority_class,
                "nodeSelector": {"gpupool.io/pool": w.pool},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/w:1",
                        "resources": {"limits": _limits(w.request)},
                    }
                ],
            },
        },
    )


def _cards_without_work(sim, cards: list[int]) -> None:
    """The pod holds these cards but runs nothing on them (a notebook whose kernel stopped):
    no compute process, 0% utilization, which is what the node agent calls idle."""
    for i in cards:
        dev = sim.gpus.nvml.devices[i]
        dev.processes = []
        dev.spec = dataclasses.replace(dev.spec, utilization=0)
    sim.publish()


def _sharing_config(kube, node: str, slices: int, plain: int) -> str:
    """The device-plugin config gpupool would have written for a node whose `plain` cards (not
    in MIG mode) are shared x`slices` (its own renderer), put into the plugin's ConfigMap
    before the node boots; returns its name."""
    action = SetSharing(
        id=f"set-sharing:{node}",
        target=node,
        reason="seeded from the snapshot",
        cards=(),
        slices=slices,
        plain_cards=plain,
    )
    spec = render_sharing(action)
    name = config_name(spec)
    kube.core.patch_namespaced_config_map(
        SHARING_CM, OPERATOR_NS, {"data": {name: yaml_text(spec)}}
    )
    return name


def _remove_services(kube, namespaces) -> None:
    """Teardown help: the Deployments and their ReplicaSets go before their pods, or the
    ReplicaSets bring the pods back after the kubelets have gone and the namespace waits for
    the pod garbage collector (about 50 s)."""
    for ns in namespaces:
        kube.apps.delete_collection_namespaced_deployment(ns, propagation_policy="Orphan")
        kube.apps.delete_collection_namespaced_replica_set(ns, propagation_policy="Orphan")
        kube.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)


def seed(kube, pools: tuple[str, ...]) -> None:
    """The bundled snapshot's nodes and workloads of `pools` (the teams' namespaces, quotas and
    the PriorityClasses whatever the pools), built on the World."""
    obs = snapshot()
    clock = kube.clock
    clock.now += timedelta(hours=2)  # the agents stamp idle-since with the wall clock: 2 h ago
    shift = clock.now - obs.observed_at
    for c in obs.priority_classes:
        kube.scheduling.create_priority_class(
            {
                "metadata": {"name": c.name},
                "value": c.value,
                "preemptionPolicy": c.preemption_policy,
            }
        )
    nodes = {n.name: n for n in obs.nodes if n.labels.get("gpupool.io/pool") in pools}
    workloads = [
        w for w in obs.workloads if (w.node in nodes) or (w.node is None and w.pool in pools)
    ]
    services = [s for s in obs.services if s.pool in pools]
    # the teams' namespaces and quotas exist whichever pools their work runs in
    namespaces = sorted(
        {w.namespace for w in obs.workloads}
        | {s.namespace for s in obs.services}
        | {q.namespace for q in obs.quotas}
    )
    for ns in namespaces:
        kube.ensure_namespace(ns)
    for q in obs.quotas:
        kube.core.create_namespaced_resource_quota(
            q.namespace,
            {
                "metadata": {
                    "name": q.name,
                    "labels": {"app.kubernetes.io/managed-by": q.managed_by or "gpupool"},
                },
                "spec": {"hard": dict(q.hard)},
            },
        )
    for n in nodes.values():
        mig = {g.index: [i.profile for i in g.mig_instances] for g in n.gpus if g.mig_enabled}
        shared = {g.shared_slices for g in n.gpus if g.shared_slices}
        plain = sum(1 for g in n.gpus if not g.mig_enabled)
        labels = (
            {DEVICE_PLUGIN_CONFIG_LABEL: _sharing_config(kube, n.name, max(shared), plain)}
            if shared
            else {}
        )
        sim = add_gpu_node(
            kube,
            n.name,
            pool=n.labels["gpupool.io/pool"],
            model=n.gpus[0].model,
            count=len(n.gpus),
            mig=mig,
            labels=labels,
        )
        if shared:  # the plugin applies its config
            sim.device_plugin.step()
        assert {i: sorted(sim.gpus.layout(i)) for i in mig} == {
            g.index: sorted((i.profile, i.start) for i in g.mig_instances)
            for g in n.gpus
            if g.mig_enabled
        }
    kube.cleanup(lambda: _remove_services(kube, namespaces))
    for s in services:  # the real scheduler places their replicas, on the nodes that offer them
        anns = {"gpupool.io/queue-length": str(s.queue_length)}
        if s.pending_seconds_p99 is not None:
            anns["gpupool.io/pending-p99-seconds"] = str(s.pending_seconds_p99)
        if s.last_scale_at:
            anns["gpupool.io/last-scale"] = (s.last_scale_at + shift).isoformat()
        kube.apps.create_namespaced_deployment(
            s.namespace,
            {
                "metadata": {
                    "name": s.name,
                    "labels": {"gpupool.io/inference": "true"},
                    "annotations": anns,
                },
                "spec": {
                    "replicas": s.replicas,
                    "selector": {"matchLabels": {"app": s.name}},
                    "template": {
                        "metadata": {"labels": {"app": s.name}},
                        "spec": {
                            "priorityClassName": s.priority_class,
                            "nodeSelector": {"gpupool.io/pool": s.pool},
                            "containers": [
                                {
                                    "name": "srv",
                                    "image": "registry.example/serve:1",
                                    "resources": {"limits": _limits(s.replica_request)},
                                }
                            ],
                        },
                    },
                },
            },
        )
    for w in workloads:
        if w.phase != "Running":
            _pending(kube, w, shift)
            continue
        if any(w.name.startswith(f"{s.name}-") and w.namespace == s.namespace for s in services):
            continue  # the Deployment's own replicas
        r = w.request
        create_pod(
            kube,
            w.namespace,
            w.name,
            node=w.node,
            gpus=r.gpus,
            mig=next(iter(r.mig), None),
            shared=r.shared_slices,
            cls=w.priority_class,
            pool=w.pool or nodes[w.node].labels["gpupool.io/pool"],
            started=w.started_at + shift,
            annotations=_annotations(w, shift),
        )
        held = sorted(a.gpu for a in w.allocations)
        if r.gpus:  # the device manager gave it the cards the snapshot says it holds
            sim = kube.nodes[w.node]
            cards = sorted(
                {
                    sim.gpus.card_of(d)[0]
                    for d in sim.gpus.pod_resources()[f"{w.namespace}/{w.name}"]
                }
            )
            assert cards == held, (w.key, cards, held)
            gpu = {g.index: g for g in nodes[w.node].gpus}
            if all(gpu[i].idle_since for i in held):
                _cards_without_work(sim, held)
    kube.settle()


def bundled_controller(kube) -> Controller:
    """The controller as deployed, reading the repository's pools/ and policies/."""
    cfg = ApplyConfig(mig_config_namespace=OPERATOR_NS)
    return Controller(
        DirectorySource(ROOT),
        kube.controller_client(),
        namespace=NS,
        identity="gpupool-0",
        apply_config=cfg,
        clock=kube.clock,
    )


def run(ctl, kube, exporter=lambda: None, cycles: int = 16):
    results = []
    for _ in range(cycles):
        r = ctl.cycle()
        results.append(r)
        assert r.error is None, r.error
        if r.converged:
            return results
        kube.settle()
        kube.step_nodes()
        kube.settle()
        exporter()
        kube.clock.advance(301)
    last = [
        (
            r.summary,
            [(o.action, o.status, o.message) for o in (r.applied.outcomes if r.applied else [])],
        )
        for r in results[-2:]
    ]
    raise AssertionError(f"no convergence: {last}")


def test_bundled_policy_converges_the_bundled_a100_pool(kube):
    """The A100 pool of the bundled cluster: four MIG cards serving (a Deployment's replicas on
    a100-01's 3g.40gb instances, embedders on its 2g.20gb), training on whole cards, spot jobs,
    a notebook idle for two hours, a job gated behind its team's cap. The bundled policy
    reclaims the notebook (checkpoint first, then the Eviction API) and raises the assistant
    team's quota; nothing else moves, and a second pass has nothing to do."""
    seed(kube, ("a100",))
    ctl = bundled_controller(kube)
    mark = audit_mark(kube)
    before = {n: kube.nodes[n].gpus.mig_cards() for n in kube.nodes}
    results = run(ctl, kube)
    # what the first plan said is what happened
    first = results[0]
    assert first.summary.startswith("Plan: 1 idle reclaim, 1 quota change"), first.summary
    out = {o.action: o for o in first.applied.outcomes}
    assert (
        out["reclaim:llm-research/stale-notebook"].status == "waiting"
    )  # its checkpoint grace period
    assert evictions(kube, since=mark) == ["llm-research/stale-notebook"]
    log = [e for e in writes(kube, since=mark) if e.name == "stale-notebook"]
    assert [(e.verb, e.subresource) for e in log] == [
        ("patch", None),
        ("create", "eviction"),
    ]  # checkpoint, then evict
    hard = kube.core.read_namespaced_resource_quota("gpupool-assistant", "assistant").spec.hard
    assert hard["requests.nvidia.com/gpu.shared"] == "96"
    # the serving cards kept their layout and their work; the rest of the pool runs on
    assert {n: kube.nodes[n].gpus.mig_cards() for n in kube.nodes} == before
    assert not any(sim.mig_manager.runs for sim in kube.nodes.values())  # no MIG change at all
    running = {
        p.metadata.name
        for p in kube.core.list_pod_for_all_namespaces().items
        if p.status.phase == "Running"
    }
    assert {"detector-v7", "sft-llama-70b", "segmenter", "embedder-0", "tokenizer-bench"} <= running
    assert sum(n.startswith("ranker-") for n in running) == 4
    assert "stale-notebook" not in running
    assert not any(kube.core.read_node(n).spec.unschedulable for n in kube.nodes)
    conds = conditions(kube)
    assert conds["Ready"]["status"] == "True" and conds["Stalled"]["status"] == "False"
    mark = audit_mark(kube)
    assert ctl.cycle().converged
    assert not [
        e for e in writes(kube, since=mark) if e.resource not in ("leases", "reconcilerstatuses")
    ]


def test_bundled_policy_converges_the_whole_bundled_cluster(kube):
    """Both pools, the H100 pool's shared serving included: every pod the plan placed runs, and
    each node advertises what gpupool believes it configured."""
    seed(kube, ("a100", "h100"))
    ctl = bundled_controller(kube)
    mark = audit_mark(kube)

    def exporter():  # the serving stack: after the scale-up the queue per replica is back in band
        kube.apps.patch_namespaced_deployment(
            "chat-llm",
            "assistant",
            {
                "metadata": {
                    "annotations": {
                        "gpupool.io/queue-length": "40",
                        "gpupool.io/pending-p99-seconds": "5",
                    }
                }
            },
        )

    run(ctl, kube, exporter)
    evicted = evictions(kube, since=mark)
    assert len(evicted) == len(set(evicted)) and "llm-research/stale-notebook" in evicted
    assert (
        kube.apps.read_namespaced_deployment("chat-llm", "assistant").spec.replicas > 6
    )  # scaled up
    assert conditions(kube)["Ready"]["status"] == "True"
    seeded = {w.namespace for w in snapshot().workloads}  # not other tests' leftovers
    for p in kube.core.list_pod_for_all_namespaces().items:
        if (
            p.metadata.namespace not in seeded
            or p.spec.scheduling_gates
            or not any(
                k.startswith("nvidia.com/")
                for c in p.spec.containers
                for k in ((c.resources.limits or {}) if c.resources else {})
            )
        ):
            continue
        assert p.status.phase == "Running", (p.metadata.namespace, p.metadata.name, p.status.phase)
    seen = {n.name: n.gpus for n in observe_cluster(kube.controller_client()).nodes}
    for name in kube.nodes:
        node = kube.core.read_node(name)
        # what gpupool believes: the node's cards as the controller observes them
        cards = seen[name]
        alloc = node.status.allocatable or {}
        assert int(alloc.get(SHARED_RESOURCE, "0")) == sum(g.shared_slices or 0 for g in cards), (
            name
        )
        assert int(alloc.get(GPU_RESOURCE, "0")) == sum(1 for g in cards if g.mode == "whole"), name
