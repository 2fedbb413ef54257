"""The controller's card memo (reconciler/observe/kube_nodes.py, `CardMemo`) and GpuNodeStates
read from a watch cache: a node's published cards are converted once per resourceVersion of its
GpuNodeState, and the snapshot equals the one observed without the memo, through changes of the
objects, a node state gone, and unreadable entries (reported again on every observation)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

from reconciler.observe.kube import CardMemo, observe_cluster
from tests.observe.fake_cluster import NOW, base, card, node, node_state, serving


def cluster():
    c = base()
    c.nodes.append(node("a100-3"))
    # a100-3's agent publishes a card that does not read (reported) beside two that do
    c.node_states.append(node_state("a100-3", [card(0), "not a card", card(1)], []))
    for i, s in enumerate(c.node_states):
        s["metadata"]["resourceVersion"] = str(100 + i)
    return c


def both(c, memo: CardMemo, cache=None):
    """The snapshot without and with the memo (and `cache`), from the same objects."""
    with serving(c):
        plain = observe_cluster(object(), now=NOW)
        memoized = observe_cluster(object(), now=NOW, cache=cache, cards=memo)
    return plain, memoized


def test_the_memo_gives_the_snapshot_made_without_it_through_changes():
    c = cluster()
    memo = CardMemo()
    plain, memoized = both(c, memo)
    assert memoized == plain and memo.misses == 2 and memo.hits == 0
    assert any(u.name == "a100-3" and "status.gpus[1]" in u.message for u in plain.unreadable)

    # nothing changed: every node's cards come from the memo, reports included
    plain, memoized = both(c, memo)
    assert memoized == plain and memo.hits == 2 and memo.misses == 2

    # a100-1's agent republishes (a new resourceVersion): that node alone is converted again
    state = c.find("node_states", "a100-1")
    state["status"]["gpus"][3]["utilization"] = 97.0
    state["metadata"]["resourceVersion"] = "200"
    plain, memoized = both(c, memo)
    assert memoized == plain and memo.misses == 3 and memo.hits == 3
    gpu3 = next(g for n in memoized.nodes if n.name == "a100-1" for g in n.gpus if g.index == 3)
    assert gpu3.utilization == 97.0

    # a100-3's state is gone (read from capacity now), then comes back under a new version
    gone = c.find("node_states", "a100-3")
    c.node_states.remove(gone)
    plain, memoized = both(c, memo)
    assert memoized == plain
    back = copy.deepcopy(gone)
    back["metadata"]["resourceVersion"] = "300"
    back["status"]["gpus"] = [card(0)]
    c.node_states.append(back)
    plain, memoized = both(c, memo)
    assert memoized == plain
    assert [g.index for n in memoized.nodes if n.name == "a100-3" for g in n.gpus] == [0]


def test_a_state_without_a_resource_version_is_converted_every_time():
    c = cluster()
    del c.find("node_states", "a100-1")["metadata"]["resourceVersion"]
    memo = CardMemo()
    for _ in range(2):
        plain, memoized = both(c, memo)
        assert memoized == plain
    assert memo.hits == 1 and memo.misses == 3  # a100-3 once from the memo; a100-1 never


def test_node_states_from_the_cache_give_the_listed_snapshot():
    """`cache.node_states()` replaces the list; None (not synced, or the CRD not served) lists."""
    c = cluster()
    listed = copy.deepcopy(c.node_states)
    cache = SimpleNamespace(nodes=lambda: None, pods=lambda: None, node_states=lambda: listed)
    plain, cached = both(c, CardMemo(), cache)
    assert cached == plain
    # the cache is what is read: a state only the list has does not count
    c.node_states[0]["status"]["gpus"][0]["utilization"] = 55.0
    plain, cached = both(c, CardMemo(), cache)
    assert cached != plain
    unsynced = SimpleNamespace(nodes=lambda: None, pods=lambda: None, node_states=lambda: None)
    plain, cached = both(c, CardMemo(), unsynced)
    assert cached == plain


def test_an_unchanged_node_is_handed_back_as_the_same_object():
    """With resourceVersions on the Nodes too, a node whose Node and GpuNodeState are both
    unchanged is the same `Node` object as last observation (the planner's view memo keys on
    identity), with its reports made again; a change of either reads it afresh."""
    c = cluster()
    for i, n in enumerate(c.nodes):
        n["metadata"]["resourceVersion"] = str(500 + i)
    memo = CardMemo()
    _, first = both(c, memo)
    plain, again = both(c, memo)
    assert again == plain and memo.node_hits == len(c.nodes)
    assert all(a is b for a, b in zip(first.nodes, again.nodes, strict=True))
    assert any(u.name == "a100-3" and "status.gpus[1]" in u.message for u in again.unreadable)

    # a100-1's Node changes (a label), a100-3's agent republishes: those two are read afresh
    c.find("nodes", "a100-1")["metadata"]["labels"]["team"] = "x"
    c.find("nodes", "a100-1")["metadata"]["resourceVersion"] = "900"
    c.find("node_states", "a100-3")["metadata"]["resourceVersion"] = "901"
    plain, third = both(c, memo)
    assert third == plain
    fresh = {n.name for n, o in zip(third.nodes, again.nodes, strict=True) if n is not o}
    assert fresh == {"a100-1", "a100-3"}
