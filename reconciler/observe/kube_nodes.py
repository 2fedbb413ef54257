"""Nodes: each Node with the cards its `GpuNodeState` publishes (else its `nvidia.com/gpu`
capacity, as that many whole cards), the device plugin's shared slices laid over them, and the
cards `ObservedState` would refuse left out (see `reconciler/observe/kube.py`).

What a node says about its size is bounded (`reconciler/conventions.py`): a node with more
cards than `MAX_GPUS_PER_NODE` (by its capacity or its agent's list) is unreadable and left out,
before one card is made per unit of the number; shared slices beyond
`MAX_SHARED_SLICES_PER_GPU` per card read as not shared, and a published time outside the years
the cluster can mean as absent, each reported. The Ready condition's `lastTransitionTime` and
the node's creation time are read (bounded like every time) for the settle time of a node back
from a failure."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from reconciler import conventions as C
from reconciler.observe.kube_common import (
    VersionMemo,
    _each,
    _stamp,
    _unreadable,
    log,
)
from reconciler.observe.model import (
    Gpu,
    MigInstance,
    Node,
    Taint,
    count_problem,
    node_problems,
)
from reconciler.policy.quantity import parse_quantity


def read_node_states(api_client: Any, cached: list[dict] | None = None) -> dict[str, dict]:
    """Node name -> its `GpuNodeState` (the node agent's object, as a dict): from `cached` (a
    watch cache's objects) when given, else listed; none when the CRD is not installed (node
    capacity is read instead)."""
    from kubernetes import client

    if cached is None:
        try:
            cached = (
                client.CustomObjectsApi(api_client)
                .list_cluster_custom_object(C.GROUP, C.VERSION, C.NODE_STATE_PLURAL)
                .get("items", [])
            )
        except client.ApiException as exc:
            if exc.status != 404:  # no CRD installed: fall back to node capacity
                raise
            cached = []
    return dict(_each("GpuNodeState", cached, lambda o: (o["metadata"]["name"], o)))


class CardMemo:
    """The cards each node's `GpuNodeState` publishes, converted once per version of it
    (`cards`), and each whole `Node`, the same object while its Node and GpuNodeState keep
    their resourceVersions (`node`): a `VersionMemo` kept by the controller across cycles and
    passed to `observe_cluster`, the snapshot the same as one made without it. An object
    without a resourceVersion is converted every time. Only the nodes of the last
    observation are kept (`begin` / `end`)."""

    def __init__(self) -> None:
        self._memo = VersionMemo(("cards", "node"))

    def begin(self) -> None:
        self._memo.begin()

    def end(self) -> None:
        self._memo.end()

    @property
    def hits(self) -> int:
        """Nodes' cards read from the memo."""
        return self._memo.hits["cards"]

    @property
    def misses(self) -> int:
        """Nodes' cards converted."""
        return self._memo.misses["cards"]

    @property
    def node_hits(self) -> int:
        """Nodes handed back whole (`node`): their Node and their GpuNodeState unchanged."""
        return self._memo.hits["node"]

    def node(self, n: Any, state: dict | None, build: Callable[[], Node]) -> Node:
        """The `Node` read from `n` and its GpuNodeState `state`: the same object as last
        observation when both have the resourceVersions they had then (the reports made
        reading it are made again), else `build()`. So an unchanged node keeps its identity,
        which the planner's view memo (`plan/kept.py`) recognises. A Node or state without a
        resourceVersion is read every time."""
        name = n.metadata.name
        key = (
            getattr(n.metadata, "resource_version", None) or "",
            ((state.get("metadata") or {}).get("resourceVersion") or "") if state else "-",
        )
        before = self.node_hits
        node = self._memo.get("node", name, key if all(key) else None, build)
        if self.node_hits > before:  # its cards stay kept for the day the Node changes
            self._memo.carry("cards", name)
        return node

    def cards(self, node: str, state: dict, entries: Any) -> list[Gpu]:
        rv = (state.get("metadata") or {}).get("resourceVersion")
        return list(self._memo.get("cards", node, rv, lambda: published_gpus(node, entries)))


def _node(n: Any, state: dict | None, memo: CardMemo | None = None) -> Node:
    labels = n.metadata.labels or {}
    cond = next((c for c in (n.status.conditions or []) if c.type == "Ready"), None)
    ready = cond is not None and cond.status == "True"
    who = ("Node", "", n.metadata.name)
    changed = getattr(cond, "last_transition_time", None)
    published = (state or {}).get("status") or {}
    if "gpus" in published:  # an agent's object with nothing published yet says nothing
        entries = published.get("gpus")
        listed = len(entries) if isinstance(entries, list) else 0
        _check_card_count(listed, f"its GpuNodeState's status.gpus has {listed} entries")
        gpus = (
            memo.cards(n.metadata.name, state or {}, entries)
            if memo is not None
            else published_gpus(n.metadata.name, entries)
        )
    else:
        value = (n.status.capacity or {}).get(C.GPU_RESOURCE, "0")
        count = int(value or 0)
        _check_card_count(count, f"status.capacity[{C.GPU_RESOURCE}]={value!r}")
        gpus = [Gpu(index=i) for i in range(count)]
    gpus = _overlay_sharing(n.metadata.name, gpus, n.status.allocatable)
    node = Node(
        name=n.metadata.name,
        labels=labels,
        annotations=n.metadata.annotations or {},
        allocatable={k: str(v) for k, v in (n.status.allocatable or {}).items()},
        unschedulable=bool(n.spec.unschedulable),
        taints=[
            Taint(key=t.key, value=t.value or "", effect=t.effect) for t in (n.spec.taints or [])
        ],
        ready=ready,
        ready_changed_at=_when(changed, "status.conditions[Ready].lastTransitionTime", who),
        created_at=_when(
            getattr(n.metadata, "creation_timestamp", None), "metadata.creationTimestamp", who
        ),
        agent_reported_at=(
            _when(published.get("updatedAt"), "GpuNodeState status.updatedAt", who)
            if "gpus" in published
            else None
        ),
        gpus=gpus,
    )
    return _without_broken_cards(node)


def _when(value: Any, field: str, who: tuple[str, str, str]) -> str | None:
    """A time the client gives as a datetime (or text) as ISO text with a timezone; None when
    absent, unreadable or outside the years the cluster can mean (reported by `_stamp`)."""
    if value is None:
        return None
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return _stamp(text, field, who)


def _check_card_count(count: int, said: str) -> None:
    """Raise (the node is left out and reported, `_each`) when `count` cannot be the cards of
    one node: negative, or over `conventions.MAX_GPUS_PER_NODE`."""
    why = (
        "a negative count"
        if count < 0
        else count_problem(count, C.MAX_GPUS_PER_NODE, "GPUs on one node", "MAX_GPUS_PER_NODE")
    )
    if why:
        raise ValueError(f"{said}: {why}")


def published_gpus(node: str, entries: Any) -> list[Gpu]:
    """The cards a `GpuNodeState` publishes (`status.gpus`); an entry that does not validate
    is left out, logged, and a time without a timezone is read as UTC (`idleSince` and each
    `belowSince` level; an unreadable idle time is read as not idle)."""
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            _unreadable("GpuNodeState", "", node, f"status.gpus[{i}] is not an object; left out")
            continue
        entry = _known_fields(Gpu, entry)  # fields a newer agent adds are ignored
        if isinstance(entry.get("migInstances"), list):
            entry["migInstances"] = [
                _known_fields(MigInstance, m) if isinstance(m, dict) else m
                for m in entry["migInstances"]
            ]
        who = ("GpuNodeState", "", node)
        for key in ("idleSince", "idle_since"):
            if isinstance(entry.get(key), str):  # a time without a timezone is UTC
                entry[key] = _stamp(entry[key], f"status.gpus[{i}].{key}", who)
        for key in ("belowSince", "below_since"):
            if isinstance(entry.get(key), dict):  # level -> time, read the same way
                stamps = {
                    level: _stamp(value, f"status.gpus[{i}].{key}[{level}]", who)
                    if isinstance(value, str)
                    else value
                    for level, value in entry[key].items()
                }
                # an unreadable time drops its level: that idle stretch is not known
                entry[key] = {level: t for level, t in stamps.items() if t is not None}
        try:
            out.append(Gpu.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(x) for x in first.get("loc", ()))
            _unreadable(
                "GpuNodeState",
                "",
                node,
                f"status.gpus[{i}] left out: {where}: {first.get('msg', exc)}",
            )
    return out


def _known_fields(model: type, entry: dict) -> dict:
    """`entry` without the keys `model` does not know (by YAML name or Python name): a model of
    what another component writes accepts what a newer version of it adds."""
    known = set()
    for name, f in model.model_fields.items():
        known.update({name, f.alias or name})
    return {k: v for k, v in entry.items() if k in known}


def _without_broken_cards(node: Node) -> Node:
    """`node` without the cards `ObservedState` would refuse: every copy of an index
    published twice, and cards whose MIG instances collide. Logged, never raised."""
    problems = node_problems(node)
    if not problems:
        return node
    bad = {node.gpus[path[1]].index for path, _ in problems}
    for path, msg in problems:
        _unreadable("GpuNodeState", "", node.name, f"{path[:2]}: {msg}; card left out")
    return node.model_copy(update={"gpus": [g for g in node.gpus if g.index not in bad]})


def _overlay_sharing(node: str, gpus: list[Gpu], allocatable: Any) -> list[Gpu]:
    """Shared slices come from what the device plugin advertises, not from NVML: it shares every
    card of the node not in MIG mode the same number of ways (its config applies per node and
    ignores a `devices` list), advertised as `nvidia.com/gpu.shared` in the node's allocatable.
    S of them over P such cards: each is shared S // P ways. Never raises: a remainder is
    logged and floored, slices with no such card (or none published) are logged and ignored;
    a value that is not a count (a negative one too: `parse_quantity` refuses it), or more than
    `conventions.MAX_SHARED_SLICES_PER_GPU` per card, is unreadable: reported, read as not
    shared."""
    value = (allocatable or {}).get(C.SHARED_RESOURCE)
    try:
        total = int(math.floor(parse_quantity(str(value)))) if value is not None else 0
    except (ValueError, TypeError, ArithmeticError):
        _unreadable(
            "Node",
            "",
            node,
            f"status.allocatable[{C.SHARED_RESOURCE}]={value!r} unreadable; read as not shared",
        )
        return gpus
    if total <= 0:
        return gpus
    plain = [g for g in gpus if not g.mig_enabled]
    if not plain:
        log.warning(
            "node %s: %s=%d but no card out of MIG mode is published; read as not shared",
            node,
            C.SHARED_RESOURCE,
            total,
        )
        return gpus
    each, rest = divmod(total, len(plain))
    why = count_problem(
        each, C.MAX_SHARED_SLICES_PER_GPU, "shared slices of one card", "MAX_SHARED_SLICES_PER_GPU"
    )
    if why:
        _unreadable(
            "Node",
            "",
            node,
            f"status.allocatable[{C.SHARED_RESOURCE}]={value!r} over {len(plain)} card(s) out "
            f"of MIG mode: {why}; read as not shared",
        )
        return gpus
    if rest:
        log.warning(
            "node %s: %s=%d is not a multiple of its %d cards out of MIG mode; %d slices each",
            node,
            C.SHARED_RESOURCE,
            total,
            len(plain),
            each,
        )
    return [
        g if g.mig_enabled else g.model_copy(update={"shared_slices": each or None}) for g in gpus
    ]
