"""The node part of the controller's observation, before and after issue 28's watch cache of
GpuNodeStates and card memo (reconciler/loop/informer.py, reconciler/observe/kube_nodes.py).

    .venv/bin/python bench/observe_nodes.py                   # 1,000 nodes
    .venv/bin/python bench/observe_nodes.py --sizes 1000,10000 --rounds 9
    .venv/bin/python bench/observe_nodes.py --smoke           # 16 nodes, seconds (the test suite)

Per size N it generates bench/plan_scale.py's cluster (N nodes x 8 GPUs over the bundled pools,
seeded) and, for each node, the Node and the GpuNodeState its agent would publish (its cards,
with a resourceVersion), as the client hands them over. Then, per cycle (median of `--rounds`):

* `list, decode`: the client's side of listing the N GpuNodeStates (the JSON body decoded; the
  API server's side and the transfer are not counted: a lower bound of what a list costs);
* `cache, read`: the same objects from an `Informer` filled by a list (the watch keeps it);
* `convert, every node`: each node's published cards converted (`_node`, as `observe_cluster`
  does, pydantic per card), the way every cycle did before;
* `convert, memo, none changed` and `convert, memo, 1% changed`: the same through a warm
  `CardMemo`, nothing changed / 1% of the nodes' states republished (a new resourceVersion)
  since the last cycle; the nodes made are checked equal to the ones made without the memo.

"before" = list + convert every node; "after" = cache + memo at 1% changed. No API server: the
whole cycle on a real control plane is bench/reaction.py's. `--smoke` is `--sizes 16
--rounds 2`: tests/test_bench_smoke.py runs it so that the benchmark cannot rot.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import client  # noqa: E402
from plan_scale import generate, scaled_desired  # noqa: E402

from reconciler import conventions as C  # noqa: E402
from reconciler.loop.informer import Informer  # noqa: E402
from reconciler.observe.kube import _agent_state as readable_state  # noqa: E402
from reconciler.observe.kube_common import _UNREADABLE  # noqa: E402
from reconciler.observe.kube_nodes import CardMemo, _node, read_node_states  # noqa: E402
from reconciler.observe.model import Node  # noqa: E402

SMOKE = {"sizes": "16", "rounds": 2}


def k8s_node(n: Node) -> client.V1Node:
    count = str(len(n.gpus))
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=n.name, labels=n.labels),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            capacity={C.GPU_RESOURCE: count},
            allocatable={C.GPU_RESOURCE: count},
            conditions=[client.V1NodeCondition(type="Ready", status="True")],
        ),
    )


def node_state(n: Node, rv: int) -> dict:
    """The GpuNodeState `n`'s agent would publish (its cards, without the device plugin's
    slices), as `CustomObjectsApi` hands it over."""
    gpus = [
        g.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude={"shared_slices"})
        for g in n.gpus
    ]
    return {
        "apiVersion": C.API_VERSION,
        "kind": C.NODE_STATE_KIND,
        "metadata": {"name": n.name, "resourceVersion": str(rv)},
        "status": {"gpus": gpus, "updatedAt": "2026-12-05T03:00:00+00:00"},
    }


def convert(raw_nodes: list, states: list[dict], memo: CardMemo | None) -> list[Node]:
    """What `observe_cluster` does with the nodes and their states (`_observe`)."""
    token = _UNREADABLE.set([])
    if memo is not None:
        memo.begin()
    try:
        by_name = {
            name: readable_state(name, s) for name, s in read_node_states(None, states).items()
        }
        out = [_node(n, by_name.get(n.metadata.name), memo) for n in raw_nodes]
    finally:
        _UNREADABLE.reset(token)
    if memo is not None:
        memo.end()
    return out


def median_ms(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def measure(size: int, rounds: int) -> list[tuple[str, float]]:
    observed = generate(size, scaled_desired(size))
    raw_nodes = [k8s_node(n) for n in observed.nodes]
    states = [node_state(n, 1000 + i) for i, n in enumerate(observed.nodes)]
    body = json.dumps({"items": states, "metadata": {"resourceVersion": "99999"}})
    informer = Informer(lambda **_: json.loads(body), name="gpunodestates")
    informer._relist()

    plain = convert(raw_nodes, states, None)
    memo = CardMemo()
    assert convert(raw_nodes, states, memo) == plain  # warm, and the same nodes
    rv = [2_000_000]
    changed = max(1, size // 100)

    def republish() -> None:  # `changed` agents publish again (untimed)
        for s in states[:changed]:
            rv[0] += 1
            s["metadata"]["resourceVersion"] = str(rv[0])

    def memo_changed() -> list[Node]:
        return convert(raw_nodes, states, memo)

    rows = [
        ("list, decode", median_ms(lambda: json.loads(body), rounds)),
        ("cache, read", median_ms(informer.items, rounds)),
        ("convert, every node", median_ms(lambda: convert(raw_nodes, states, None), rounds)),
        ("convert, memo, none changed", median_ms(memo_changed, rounds)),
    ]
    times = []
    for _ in range(rounds):
        republish()
        t0 = time.perf_counter()
        made = memo_changed()
        times.append(time.perf_counter() - t0)
    assert made == convert(raw_nodes, states, None)
    rows.append(("convert, memo, 1% changed", statistics.median(times) * 1000))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000", help="comma-separated node counts (default 1000)")
    ap.add_argument("--rounds", type=int, default=7, help="median of N cycles (default 7)")
    ap.add_argument("--smoke", action="store_true", help="--sizes 16 --rounds 2, seconds")
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    print("| nodes | step | ms per cycle |")
    print("|---:|---|---:|")
    summary = []
    for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
        rows = dict(measure(size, args.rounds))
        for step, ms in rows.items():
            print(f"| {size} | {step} | {ms:.1f} |", flush=True)
        before = rows["list, decode"] + rows["convert, every node"]
        after = rows["cache, read"] + rows["convert, memo, 1% changed"]
        summary.append(f"{size} nodes: before {before:.1f} ms, after {after:.1f} ms per cycle")
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
