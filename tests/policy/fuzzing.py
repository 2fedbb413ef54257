"""Hypothesis strategies for hostile policy documents, shared by tests/policy/test_fuzz.py (the
loader and `gpupool validate`) and tests/test_hostile_input.py (the CLI's other inputs).

`VALUES` draws any YAML-shaped value (scalars, lists, maps, nested); `mutate(doc, data)` returns
a deep copy of a parsed document with one to three of its values dropped, replaced by a `VALUES`
draw, or added to (a key into a map, an item onto a list, a scalar wrapped into a map).
"""

from __future__ import annotations

import copy

from hypothesis import strategies as st

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(
        ["Pool", "a100", "A100-SXM4-80GB", "3g.40gb", "10m", "4Gi", "-1", "gpupool.io/v1alpha1"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def mutate(doc, data):
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = list(_paths(doc))
        path = data.draw(st.sampled_from(paths), label="path")
        op = data.draw(st.sampled_from(["drop", "replace", "insert"]), label="op")
        if not path:
            if op == "replace":
                doc = data.draw(VALUES, label="value")
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if op == "drop":
            del parent[last]
        elif op == "replace":
            parent[last] = data.draw(VALUES, label="value")
        elif isinstance(parent[last], dict):
            parent[last][data.draw(st.text(min_size=1, max_size=10), label="key")] = data.draw(
                VALUES, label="value"
            )
        elif isinstance(parent[last], list):
            parent[last].append(data.draw(VALUES, label="value"))
        else:
            parent[last] = {"unexpected": parent[last]}
    return doc
