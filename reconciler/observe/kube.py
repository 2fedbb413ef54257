"""Kubernetes adapter: read nodes, pods, workloads' demand and policy objects into a snapshot.

Thin and read-only. The seam is the official client's `ApiClient`: in a cluster it comes from
the in-cluster config or a kubeconfig; in tests it points at the fake API server over HTTP.
Adapters never decide policy: this only translates API objects into `ObservedState`.

Where Kubernetes does not say something gpupool needs, it reads conventions:
- per-node GPU facts (MIG layout, utilization, idle time) from the node agent's
  `GpuNodeState` object (gpupool.io/v1alpha1, cluster-scoped, named after the node); without
  one, a node's `nvidia.com/gpu` capacity gives that many whole cards;
- which cards a running pod holds from its node's `GpuNodeState` `status.pods`: the node agent
  asks the kubelet's PodResources API (the only place Kubernetes knows it) and maps the device
  IDs to cards through NVML UUIDs. Only for a node whose agent publishes no `status.pods` (an
  older agent, no PodResources socket, a failed List) is the pod's `gpupool.io/gpus` annotation
  read instead ("0,1", "2:4" = GPU 2, MIG instance at start 4, "3/2" = two shared slices),
  only where the node agent's field manager wrote it (`trust.py`; anyone else's leaves a bound
  pod's cards unknown: `allocation-unknown`, fenced). A pod known neither way (say it
  started after the agent's last publication) gets whole cards guessed: the lowest indices
  nobody is known to hold, in creation order (an approximation);
- workload traits from annotations: `gpupool.io/checkpointable`, `gpupool.io/migratable`,
  `gpupool.io/last-checkpoint` (RFC 3339);
- inference services: Deployments/StatefulSets labelled `gpupool.io/inference=true`, with
  `gpupool.io/queue-length` and `gpupool.io/pending-p99-seconds` annotations kept current by
  the serving stack's exporter, and `gpupool.io/last-scale` written by gpupool's apply.

What the cluster publishes is not trusted to be well formed, and nothing here raises on it:
a time without a timezone is read as UTC; a negative, infinite or unreadable demand signal
counts as absent, reported; a published card that does not validate, a GPU index published
twice (every copy) and a card whose MIG instances collide (`node_problems`) are left out,
logged; an unreadable `gpupool.io/gpus` annotation counts as absent. Counts, sizes and times
are bounded by what the object can mean (`reconciler/conventions.py`: GPUs per node, shared
slices per card, gang sizes, years): beyond, the object or the field is unreadable, reported.
So a snapshot dumped from here always loads (`ObservedState` refuses exactly what is left out
here). Drift between cards and what pods hold is kept as observed: the planner reports and
fences it (`reconciler/plan/consistency.py`).

This module is the adapter's entry point (`observe_cluster`, the API client); what each kind
of object reads as lives beside it, by concept: `kube_nodes.py` (nodes and the cards their
agents publish), `kube_pods.py` (pods as workloads: admission, what they hold),
`kube_owners.py` (Jobs and PodGroups: gangs, suspensions, reservations), `kube_services.py`
(inference services and their autoscalers), `kube_objects.py` (quotas, priority classes,
Kueue's objects), `kube_requests.py` (GPU requests) and `kube_common.py` (what they share).
The names other code imports from this module stay importable from it (`__all__`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler import conventions as C
from reconciler.observe.dra_holdings import ClaimReader
from reconciler.observe.kube_common import (
    _CACHED_LISTS,
    _UNREADABLE,
    _each,
    _float,
    _identified,
    _json_type,
    _ts,
    _unreadable,
    listed,
)
from reconciler.observe.kube_dra import read_dra
from reconciler.observe.kube_nodes import CardMemo, _node, published_gpus, read_node_states
from reconciler.observe.kube_objects import read_kueue, read_priority_classes, read_quotas
from reconciler.observe.kube_owners import JOB_CONTROLLER, Owners, read_owners
from reconciler.observe.kube_pod_delta import identified_pods, read_pods
from reconciler.observe.kube_pods import (
    WorkloadMemo,
    _known_allocations,
    _workload,
    admission_event,
    admitted_allocations,
    published_pods,
    terminating_event,
)
from reconciler.observe.kube_requests import pod_request, request_from_resources, template_request
from reconciler.observe.kube_services import (
    TargetRef,
    _hpa,
    _scaled_object,
    read_autoscalers,
    read_services,
    with_autoscalers,
)
from reconciler.observe.model import (
    Node,
    ObservedState,
    PriorityClassObject,
    QuotaObject,
    UnreadableObject,
)

__all__ = [
    # this module's own
    "REQUEST_TIMEOUT",
    "bound_requests",
    "make_api_client",
    "observe_cluster",
    # the adapter's other public names, and the private ones tests use, kept importable here
    "CardMemo",
    "JOB_CONTROLLER",
    "Owners",
    "TargetRef",
    "WorkloadMemo",
    "_UNREADABLE",
    "_float",
    "_hpa",
    "_known_allocations",
    "_node",
    "_scaled_object",
    "_ts",
    "_workload",
    "admission_event",
    "admitted_allocations",
    "pod_request",
    "published_gpus",
    "published_pods",
    "read_autoscalers",
    "read_kueue",
    "read_owners",
    "request_from_resources",
    "template_request",
    "terminating_event",
    "with_autoscalers",
]


REQUEST_TIMEOUT = (5.0, 60.0)
"""(connect, read) seconds for every API call that names no timeout of its own."""
LIST_WORKERS = 5
"""Threads an observation lists on at once (`_observe`), one per reader: Jobs and pod groups
(3 lists); inference Deployments and StatefulSets (2); HPAs and ScaledObjects (2); quotas,
priority classes and gated namespaces (3); Kueue's objects (3). Each holds one connection of
the client's pool beside the informers' watches."""
T = TypeVar("T")


def make_api_client(kubeconfig: str | None = None) -> Any:
    """An official-client ApiClient from a kubeconfig file, or the in-cluster config, whose
    every call is bounded in time (`bound_requests`)."""
    from kubernetes import client, config

    if kubeconfig:
        return bound_requests(config.new_client_from_config(config_file=kubeconfig))
    config.load_incluster_config()
    return bound_requests(client.ApiClient())


def bound_requests(api_client: Any, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> Any:
    """`api_client` with a client-side timeout on every request that sets none.

    The official client waits forever by default: its REST layer hands urllib3
    `timeout=None` when a call passes no `_request_timeout` (kubernetes/client/rest.py,
    `RESTClientObject.request`), and an explicit None overrides any pool default, so a server
    or proxy that accepts and never answers stops the caller for good. Every typed method goes
    through `rest_client.request` (GET, POST, ... call it), so the default is set there. A call
    that passes its own `_request_timeout` (a watch, bounded by its server-side timeout plus a
    grace) keeps it."""
    rest = api_client.rest_client
    if getattr(rest, "gpupool_bounded", False):
        return api_client
    unbounded = rest.request

    def request(method, url, *args, _request_timeout=None, **kw):
        return unbounded(method, url, *args, _request_timeout=_request_timeout or timeout, **kw)

    rest.request = request
    rest.gpupool_bounded = True
    return api_client


def observe_cluster(
    api_client: Any = None,
    *,
    kubeconfig: str | None = None,
    now: datetime | None = None,
    recent_preemptions: list[datetime] | None = None,
    cache: Any = None,
    dra: bool = True,
    cards: CardMemo | None = None,
    workloads: WorkloadMemo | None = None,
    pool: ThreadPoolExecutor | None = None,
) -> ObservedState:
    """The cluster as an ObservedState. Nodes, pods and the agents' GpuNodeStates come from
    `cache` (the controller's watch-fed informers: `cache.nodes()`, `cache.pods()`,
    `cache.node_states()`, each None until synced; the DRA objects, `cache.dra_objects`, while
    the controller watches them; every other resource read, `cache.listed`, where it keeps it
    and has seen gpupool's own writes there) when given, else from lists. `dra`: read
    resource.k8s.io (`read_dra`); False skips its five lists and `ObservedState.dra` is None,
    as where it is not served (the caller knows whether any pool is on DRA; observation does
    not). `cards`, kept across calls, converts a node's published cards once per version of
    its GpuNodeState (`CardMemo`: the same snapshot, less work); `workloads`, likewise, reads a
    pod into the same `Workload` while neither it nor what else it is read with changed
    (`WorkloadMemo`).
    `pool`: the threads the lists go out on (at least `LIST_WORKERS`), kept by a caller that
    observes again and again (the controller): starting five threads per observation was a
    quarter of it (py-spy, bench/admission_openb.py's controller). None: a pool of its own."""
    found: list[UnreadableObject] = []
    token = _UNREADABLE.set(found)
    cached = _CACHED_LISTS.set(getattr(cache, "listed", None))
    memos = [m for m in (cards, workloads) if m is not None]
    for memo in memos:
        memo.begin()
    try:
        api = api_client or make_api_client(kubeconfig)
        with (
            contextlib.nullcontext(pool)
            if pool is not None
            else ThreadPoolExecutor(LIST_WORKERS, thread_name_prefix="gpupool-observe")
        ) as lists:
            observed = _observe(api, now, recent_preemptions, cache, cards, dra, workloads, lists)
    finally:
        _CACHED_LISTS.reset(cached)
        _UNREADABLE.reset(token)
    for memo in memos:
        memo.end()  # only after a whole observation: one that failed keeps the last
    return observed


def _observe(
    api_client: Any,
    now: datetime | None,
    recent_preemptions: list[datetime] | None,
    cache: Any,
    cards: CardMemo | None,
    with_dra: bool,
    memo: WorkloadMemo | None,
    pool: ThreadPoolExecutor,
) -> ObservedState:
    """`observe_cluster`, collecting what does not parse into `_UNREADABLE`: each object is
    converted on its own (`_each`), so one malformed object is left out and reported, and the
    rest of the snapshot is made. The other thirteen resources (Jobs, PodGroups, services,
    autoscalers, quotas, classes, gated namespaces, Kueue's) are read at once, on `pool`'s
    threads, one reader each, while this thread reads nodes and pods: without a watch cache
    for them (`cache.listed`), an observation waits for the slowest reader (up to three lists
    in a row), not for thirteen lists one round trip after another."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def listed(read: Callable[..., T], *args: Any) -> Future[T]:
        # in a copy of this context each: what a reader reports unreadable lands in the
        # observation's list (`_UNREADABLE`, a context variable)
        return pool.submit(contextvars.copy_context().run, read, *args)

    owners_f = listed(read_owners, api_client)
    services_f = listed(read_services, api_client)
    scalers_f = listed(read_autoscalers, api_client)
    policy_f = listed(_policy_objects, api_client, core)
    kueue_f = listed(read_kueue, api_client)
    cached_states = cache.node_states() if cache is not None else None
    states = {
        name: _agent_state(name, s)
        for name, s in read_node_states(api_client, cached_states).items()
    }
    cached_nodes = cache.nodes() if cache is not None else None
    cached_pods = cache.pods() if cache is not None else None
    raw_nodes = cached_nodes if cached_nodes is not None else core.list_node().items
    raw_pods = cached_pods if cached_pods is not None else core.list_pod_for_all_namespaces().items
    # the readers key, sort and report objects by name: one without is left out here, reported
    raw_nodes = _identified("Node", raw_nodes, namespaced=False)
    raw_pods = identified_pods(raw_pods, memo)  # only those the memo has not seen
    nodes = _each("Node", raw_nodes, lambda n: _read_node(n, states.get(n.metadata.name), cards))
    by_name = {n.name: n for n in nodes}
    held = dict(
        _each(
            C.NODE_STATE_KIND,
            states.items(),
            lambda item: (
                item[0],
                published_pods(item[1]) if memo is None else memo.published(*item),
            ),
            named=lambda item: item[1],
        )
    )
    dra = read_dra(api_client, raw_pods, cache) if with_dra else None

    claimed = ClaimReader(dra, by_name) if dra is not None else None  # indexed once

    owners = owners_f.result()
    workloads, failed = read_pods(raw_pods, held, by_name, owners, claimed, memo)
    services = with_autoscalers(services_f.result(), scalers_f.result())
    quotas, classes, gated = policy_f.result()
    kueue = kueue_f.result()
    return ObservedState(
        kueue=kueue,
        dra=dra,
        suspended_jobs=owners.suspended,
        job_recoveries=owners.recoveries,
        failed_members=failed,
        gated_namespaces=sorted(n.metadata.name for n in gated),
        observed_at=_ts(now) or datetime.now(UTC),
        nodes=nodes,
        workloads=workloads,
        services=services,
        quotas=quotas,
        priority_classes=classes,
        recent_preemptions=[t for t in map(_ts, recent_preemptions or []) if t is not None],
        unreadable=sorted(
            {(u.kind, u.namespace, u.name, u.message): u for u in _UNREADABLE.get() or []}.values(),
            key=lambda u: (u.kind, u.namespace, u.name, u.message),
        ),
    )


def _policy_objects(
    api_client: Any, core: Any
) -> tuple[list[QuotaObject], list[PriorityClassObject], list[Any]]:
    """ResourceQuotas, PriorityClasses and the namespaces gated for gpupool's admission."""
    quotas = read_quotas(core)
    classes = read_priority_classes(api_client)
    gated = _identified(
        "Namespace",
        listed(
            C.GATED_NAMESPACES,
            lambda: core.list_namespace(label_selector=C.GATED_NAMESPACE_SELECTOR),
        ),
        namespaced=False,
    )
    return quotas, classes, gated


def _agent_state(node: str, state: dict) -> dict:
    """A node agent's `GpuNodeState` as the readers take it (`_node`, `published_pods`): each
    part of its `status` that is not the JSON type they read (a looser CRD, a buggy agent) is
    reported with the field and read as publishing nothing there. A `status` that is not an
    object, or a `status.gpus` that is not a list, publishes no card: the node's capacity is a
    guess the planner would repartition on, so it is read only where no agent writes (no
    `status.gpus` at all). A `status.pods` that is not a list publishes no pod: the pods there
    are read from their annotations, as under an agent that lists none. `state` is not
    changed."""

    def report(field: str, value: object, read_as: str) -> None:
        _unreadable(C.NODE_STATE_KIND, "", node, f"{field} is {_json_type(value)}, not {read_as}")

    status = state.get("status")
    if status is None:
        return state
    if not isinstance(status, dict):
        report("status", status, "an object; read as publishing no card and no pod")
        return {**state, "status": {"gpus": []}}
    fixed = dict(status)
    gpus, pods = status.get("gpus"), status.get("pods")
    if gpus is not None and not isinstance(gpus, list):
        report("status.gpus", gpus, "a list; read as publishing no card")
        fixed["gpus"] = []
    if pods is not None and not isinstance(pods, list):
        report("status.pods", pods, "a list; read as publishing no pod")
        del fixed["pods"]
    return {**state, "status": fixed}


def _read_node(n: Any, state: dict | None, cards: CardMemo | None) -> Node:
    """One Node with its GpuNodeState; through the memo when the controller keeps one."""
    if cards is None:
        return _node(n, state)
    return cards.node(n, state, lambda: _node(n, state, cards))
