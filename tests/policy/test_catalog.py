"""The MIG catalog and its placement rules, checked against recorded facts and by brute force."""

from __future__ import annotations

import itertools
from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.policy.catalog import default_catalog

CAT = default_catalog()
A100_80 = CAT.model("A100-SXM4-80GB")
MIG_MODELS = [m for m in CAT.models.values() if m.mig_capable]

ROOT = Path(__file__).resolve().parents[2]
FACTS_CANDIDATES = [
    ROOT / "shared/data/mig/profiles.yaml",
    ROOT.parent / "shared/data/mig/profiles.yaml",
]


def _facts() -> dict:
    for p in FACTS_CANDIDATES:
        if p.is_file():
            return YAML(typ="safe").load(p.read_text())
    pytest.skip(
        "MIG facts table not found (looked for shared/data/mig/profiles.yaml next to or inside the "
        "repository); the catalog cannot be compared with its sources here"
    )


# --------------------------------------------------------------------------- hand-picked layouts

PLACEMENT_CASES = [
    # (model, layout, fits, why)
    ("A100-SXM4-80GB", ["1g.10gb"] * 7, True, "7 x 1g fills slices 0..6"),
    (
        "A100-SXM4-80GB",
        ["1g.10gb"] * 7 + ["1g.20gb"],
        False,
        "8 instances; slice 7 cannot take a 2-slice 1g",
    ),
    ("A100-SXM4-80GB", ["1g.10gb"] * 8, False, "at most 7 x 1g (no 1g start at slice 7)"),
    ("A100-SXM4-80GB", ["4g.40gb", "3g.40gb"], True, "4g at 0, 3g at 4"),
    ("A100-SXM4-80GB", ["4g.40gb", "4g.40gb"], False, "4g starts only at 0"),
    ("A100-SXM4-80GB", ["3g.40gb"] * 3, False, "3g starts only at 0 and 4"),
    ("A100-SXM4-80GB", ["3g.40gb", "3g.40gb"], True, "3g at 0 and 4"),
    ("A100-SXM4-80GB", ["1g.10gb+me", "1g.10gb+me"], False, "one media-extension instance per GPU"),
    ("A100-SXM4-80GB", ["1g.10gb+me", "1g.10gb"], True, "one +me beside a plain 1g"),
    ("A100-SXM4-80GB", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], True, "the balanced layout"),
    (
        "A100-SXM4-80GB",
        ["4g.40gb", "2g.20gb", "2g.20gb"],
        False,
        "8 slices by sum, but 2g cannot start at 6",
    ),
    ("A100-SXM4-80GB", ["4g.40gb", "2g.20gb", "1g.20gb"], True, "1g.20gb can start at 6"),
    ("A100-SXM4-80GB", ["2g.20gb"] * 3 + ["1g.20gb"], True, "2g at 0,2,4 and the 2-slice 1g at 6"),
    ("A100-SXM4-80GB", ["2g.20gb"] * 4, False, "at most 3 x 2g"),
    ("A100-SXM4-80GB", ["7g.80gb"], True, "the whole card"),
    ("A100-SXM4-80GB", ["7g.80gb", "1g.10gb"], False, "nothing beside 7g"),
    ("A100-SXM4-80GB", ["1g.20gb"] * 4, True, "four 2-slice 1g at 0,2,4,6"),
    ("A100-SXM4-80GB", ["1g.20gb"] * 5, False, "at most 4 x 1g.20gb"),
    ("A100-SXM4-80GB", [], True, "an empty layout"),
    ("A100-SXM4-80GB", ["5g.50gb"], False, "not a profile"),
    ("A100-SXM4-40GB", ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], True, "balanced on 40GB"),
    ("A100-SXM4-40GB", ["3g.40gb"], False, "an 80GB profile on a 40GB card"),
    ("H100-SXM5-80GB", ["4g.40gb", "3g.40gb"], True, "same placements as A100-80GB"),
    ("H100-NVL-94GB", ["3g.47gb", "2g.24gb", "1g.12gb", "1g.12gb"], True, "balanced on NVL"),
    ("H200-SXM5-141GB", ["1g.18gb"] * 7, True, "7 x 1g"),
    ("H200-SXM5-141GB", ["4g.71gb", "4g.71gb"], False, "4g only at 0"),
    ("L40S-48GB", ["1g.10gb"], False, "no MIG on L40S"),
    ("L40S-48GB", [], True, "nothing to place"),
]


@pytest.mark.parametrize(
    ("model", "layout", "fits", "why"),
    PLACEMENT_CASES,
    ids=[f"{c[0]}:{'+'.join(c[1]) or 'empty'}" for c in PLACEMENT_CASES],
)
def test_place_table(model, layout, fits, why):
    m = CAT.model(model)
    got = CAT.place(m, layout)
    assert (got is not None) == fits, why
    if got is not None:
        _assert_legal(m, layout, got)


def test_seven_1g_strand_slice_7():
    got = CAT.place(A100_80, ["1g.10gb"] * 7)
    assert sorted(s for _, s in got) == [0, 1, 2, 3, 4, 5, 6]
    assert CAT.fits_after(A100_80, got, "1g.10gb") is None
    assert CAT.fits_after(A100_80, got, "1g.20gb") is None


def test_4g_3g_positions():
    assert CAT.place(A100_80, ["3g.40gb", "4g.40gb"]) == [("4g.40gb", 0), ("3g.40gb", 4)]


FITS_AFTER_CASES = [
    # (existing, profile, expected start)
    ([], "3g.40gb", 0),
    ([("4g.40gb", 0)], "3g.40gb", 4),
    ([("4g.40gb", 0)], "4g.40gb", None),
    ([("3g.40gb", 0)], "4g.40gb", None),
    ([("3g.40gb", 4)], "4g.40gb", 0),
    ([("4g.40gb", 0), ("2g.20gb", 4)], "2g.20gb", None),
    ([("4g.40gb", 0), ("2g.20gb", 4)], "1g.20gb", 6),
    ([("4g.40gb", 0), ("2g.20gb", 4)], "1g.10gb", 6),
    ([("1g.10gb", s) for s in range(7)], "1g.10gb", None),
    ([("1g.10gb", 0)], "1g.10gb", 1),
    ([("1g.10gb+me", 3)], "1g.10gb+me", None),
    ([("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4)], "2g.20gb", None),
    ([("7g.80gb", 0)], "1g.10gb", None),
    ([], "no-such-profile", None),
]


@pytest.mark.parametrize(("existing", "profile", "start"), FITS_AFTER_CASES)
def test_fits_after(existing, profile, start):
    assert CAT.fits_after(A100_80, existing, profile) == start


def test_fits_after_respects_max_instances():
    # 6 x 1g.10gb at 0..5 and a 1g.10gb+me at 6: seven instances, slice 7 free but no start there.
    existing = [("1g.10gb", s) for s in range(6)] + [("1g.10gb+me", 6)]
    assert CAT.fits_after(A100_80, existing, "1g.10gb") is None


# --------------------------------------------------------------------------- the facts table


def test_catalog_matches_facts_table():
    facts = _facts()
    gpus = facts["gpus"]
    mig_models = {m.name for m in MIG_MODELS}
    assert mig_models == set(gpus), "MIG models in the catalog and in profiles.yaml differ"
    assert CAT.memory_slices == facts["common"]["memory_slices_per_gpu"]
    assert CAT.compute_slices == facts["common"]["compute_slices_per_gpu"]
    assert CAT.max_instances == facts["common"]["max_gpu_instances_per_gpu"]
    nvml_index = facts["common"]["nvml_profile_index"]
    for name, gpu in gpus.items():
        model = CAT.model(name)
        assert model.memory_gib == gpu["total_memory_gb"], name
        assert [p["name"] for p in gpu["profiles"]] == list(model.profiles), name
        for row in gpu["profiles"]:
            p = model.profiles[row["name"]]
            where = f"{name} {p.name}"
            assert p.compute_slices == row["compute_slices"], where
            assert p.memory_slices == row["memory_slices"] == row["placement_size"], where
            assert p.max_count == row["max_count"], where
            assert list(p.starts) == row["placement_starts"], where
            if "nvml" in row:
                assert p.nvml_index == nvml_index[row["nvml"]], where


def test_catalog_pci_ids_from_facts():
    facts = _facts()
    for name, gpu in facts["gpus"].items():
        family = set(gpu["pci_device_filter_family"])
        assert set(CAT.model(name).pci_device_ids) <= family, name


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_profiles_are_self_consistent(model):
    for p in model.profiles.values():
        for s in p.starts:
            assert s >= 0 and s + p.memory_slices <= CAT.memory_slices, (p.name, s)
        # every max count is actually reachable on an empty GPU
        assert CAT.place(model, [p.name] * p.max_count) is not None, p.name
        assert CAT.place(model, [p.name] * (p.max_count + 1)) is None, p.name


def test_product_lookup():
    assert CAT.model_for_product("NVIDIA-A100-SXM4-80GB") is A100_80
    assert CAT.model_for_product("NVIDIA A100-SXM4-80GB") is A100_80
    assert CAT.model_for_product("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb") is A100_80
    assert CAT.model_for_product("NVIDIA-H100-80GB-HBM3").name == "H100-SXM5-80GB"
    assert CAT.model_for_product("Voodoo-3") is None


# --------------------------------------------------------------------------- properties


def _assert_legal(model, layout, placed):
    assert Counter(n for n, _ in placed) == Counter(layout)
    assert len(placed) <= CAT.max_instances
    used = 0
    for name, start in placed:
        p = model.profiles[name]
        assert start in p.starts, (name, start)
        span = ((1 << p.memory_slices) - 1) << start
        assert not used & span, f"{name}@{start} overlaps"
        used |= span
    counts = Counter(layout)
    for name, n in counts.items():
        assert n <= model.profiles[name].max_count
    assert sum(n for name, n in counts.items() if name.endswith("+me")) <= 1
    assert sum(model.profiles[n].compute_slices for n in layout) <= CAT.compute_slices


@cache
def _placeable_multisets(model_name: str) -> frozenset[tuple[str, ...]]:
    """Every multiset of profiles that has some legal placement, by enumerating all slot sets.

    Independent of `place()`: it walks the (profile, start) slots in a fixed order and keeps every
    non-overlapping set that respects the instance, per-profile and +me limits.
    """
    model = CAT.model(model_name)
    slots = [
        (p.name, s, ((1 << p.memory_slices) - 1) << s)
        for p in model.profiles.values()
        for s in p.starts
    ]
    found: set[tuple[str, ...]] = set()

    def go(i: int, used: int, chosen: list[str]) -> None:
        found.add(tuple(sorted(chosen)))
        if len(chosen) == CAT.max_instances:
            return
        for j in range(i, len(slots)):
            name, _, span = slots[j]
            if used & span:
                continue
            p = model.profiles[name]
            if chosen.count(name) >= p.max_count:
                continue
            if name.endswith("+me") and any(c.endswith("+me") for c in chosen):
                continue
            chosen.append(name)
            go(j + 1, used | span, chosen)
            chosen.pop()

    go(0, 0, [])
    return frozenset(found)


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.name)
def test_place_agrees_with_brute_force_exhaustively(model):
    """For every multiset of up to 8 profiles: place() finds a placement exactly when one exists."""
    ok = _placeable_multisets(model.name)
    names = sorted(model.profiles)
    checked = 0
    for k in range(CAT.max_instances + 2):
        for combo in itertools.combinations_with_replacement(names, k):
            got = CAT.place(model, list(combo))
            assert (got is not None) == (combo in ok), combo
            if got is not None:
                _assert_legal(model, combo, got)
            checked += 1
    assert checked > 6000


def _layouts(model):
    return st.lists(st.sampled_from(sorted(model.profiles)), max_size=10)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_place_property(data):
    model = data.draw(st.sampled_from(MIG_MODELS), label="model")
    layout = data.draw(_layouts(model), label="layout")
    got = CAT.place(model, layout)
    if got is not None:
        _assert_legal(model, layout, got)
    assert (got is not None) == (tuple(sorted(layout)) in _placeable_multisets(model.name))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fits_after_property(data):
    """fits_after() answers a start that keeps the GPU legal, or None if the profile cannot fit."""
    model = data.draw(st.sampled_from(MIG_MODELS), label="model")
    layout = data.draw(_layouts(model), label="layout")
    existing = CAT.place(model, layout)
    if existing is None:
        return
    profile = data.draw(st.sampled_from(sorted(model.profiles)), label="profile")
    start = CAT.fits_after(model, existing, profile)
    if start is None:
        # then no start for this profile keeps the existing instances where they are
        p = model.profiles[profile]
        for s in p.starts:
            try:
                _assert_legal(model, [*layout, profile], [*existing, (profile, s)])
            except AssertionError:
                continue
            raise AssertionError(f"fits_after said no, but {profile}@{s} is legal")
    else:
        _assert_legal(model, [*layout, profile], [*existing, (profile, start)])
