"""Loader and semantic validation: every kind of bad input, located by file, line, column and path.

The hand-written cases live in tests/policy/broken/ (one concern per file, each with a comment
saying what is wrong); their expectations (CASES, in tests/policy/loading.py, which
test_cli.py shares) pin the exact position and a message fragment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.policy.files import SourceFile, files_from_paths
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState, Problem
from tests.policy.loading import BROKEN, CASES, HERE

ROOT = HERE.parents[1]


def problems_of(*paths: Path) -> list[Problem]:
    with pytest.raises(InvalidDesiredState) as info:
        load(files_from_paths(list(paths)))
    assert info.value.problems, "InvalidDesiredState without problems"
    return info.value.problems


def rel(p: Problem) -> str:
    return Path(p.file).resolve().relative_to(BROKEN).as_posix()


def test_every_broken_file_has_a_case_and_a_comment():
    covered = {c[0] for c in CASES} | {"several_problems.yaml"}
    present = {p.name for p in BROKEN.iterdir()}
    assert present == covered, "each file in broken/ needs a row in CASES (and vice versa)"
    for f in BROKEN.rglob("*.yaml"):
        assert f.read_text().startswith("# "), (
            f"{f.name}: start with a comment saying what is wrong"
        )


@pytest.mark.parametrize(
    ("case", "file", "line", "col", "path", "fragment"), CASES, ids=[c[0] for c in CASES]
)
def test_broken_case(case, file, line, col, path, fragment):
    problems = problems_of(BROKEN / case)
    assert len(problems) == 1, "one concern per file:\n" + "\n".join(map(str, problems))
    p = problems[0]
    assert (rel(p), p.line, p.column, p.path) == (file, line, col, path), str(p)
    assert fragment in p.message, str(p)
    text = str(p)
    assert text.startswith(f"{p.file}:{line}:{col}: ")
    if path:
        assert f" {path}: " in f" {text}"


def test_several_problems_are_all_reported():
    problems = problems_of(BROKEN / "several_problems.yaml")
    got = [(p.line, p.path) for p in problems]
    assert got == [
        (16, "spec.inference.mig.layouts[0].profiles"),
        (25, "spec.capacity.nodes"),
        (35, "spec.pools[0].pool"),
        (46, "spec.target"),
    ], "\n".join(map(str, problems))
    assert "2 x 4g.40gb but at most 1 fit" in problems[0].message
    assert [p.document for p in problems] == [
        "Pool/a100",
        "Pool/h100",
        "Quota/vision",
        "ScalingPolicy/chat",
    ]


def test_whole_broken_folder_reports_every_file():
    problems = problems_of(BROKEN)
    files = {rel(p) for p in problems}
    # duplicate_name/a.yaml is the first definition; dangling_maintenance_pool.yaml names h100,
    # which exists in this mix (several_problems.yaml, invalid there, so not reported twice)
    expected = {f.relative_to(BROKEN).as_posix() for f in BROKEN.rglob("*.yaml")} - {
        "duplicate_name/a.yaml",
        "dangling_maintenance_pool.yaml",
    }
    assert expected <= files


def test_bundled_example_is_valid():
    state = load(files_from_paths([ROOT / "pools", ROOT / "policies"]))
    assert set(state.pools) == {"a100", "h100"}
    assert len(state.quotas) == 4
    assert state.priority is not None and state.change is not None


# --------------------------------------------------------------------------- inline oddities

OK_POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: a100
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {nodes: 1, gpusPerNode: 8}
"""

INLINE = [
    # (name, text, line, column, path, fragment)
    (
        "kind is a list",
        "apiVersion: gpupool.io/v1alpha1\nkind: [Pool]\n",
        2,
        1,
        "kind",
        "unknown kind ['Pool']",
    ),
    (
        "kind is a map",
        "apiVersion: gpupool.io/v1alpha1\nkind: {a: 1}\n",
        2,
        1,
        "kind",
        "unknown kind",
    ),
    (
        "missing kind",
        "apiVersion: gpupool.io/v1alpha1\nmetadata: {name: a}\n",
        1,
        1,
        "kind",
        "missing kind",
    ),
    (
        "recursive alias",
        "&a {apiVersion: gpupool.io/v1alpha1, kind: Pool, metadata: {name: x}, spec: *a}\n",
        1,
        1,
        "",
        "alias refers to a mapping or list that contains it",
    ),
    ("bad !!int", "a: !!int abc\n", 1, 4, "", "invalid YAML: cannot read this !!int value"),
    ("bad !!float", "a: !!float abc\n", 1, 4, "", "cannot read this !!float value"),
    ("bad !!omap", "!!omap [a: 1, a: 2]\n", 1, 1, "", "cannot read this !!omap value"),
    ("bad !!bool", "a: !!bool maybe\n", 1, 4, "", "cannot read this !!bool value ('maybe')"),
    ("bad timestamp", "a: 2026-01-01T00:00:00+99:00\n", 1, 4, "", "!!timestamp value"),
    ("NUL character", "a: b\nc: \x00\n", 2, 4, "", "U+0000 is not allowed"),
    ("scalar document", "# comment\nhello\n", 2, 1, "", "document 1 is a string"),
    ("second document", OK_POOL + "---\n- 1\n", 9, 1, "", "document 2 is a list"),
    ("deep nesting", "[" * 600 + "]" * 600, 1, 65, "", "nested more than 64 collections deep"),
    (
        "merged field",
        (
            "apiVersion: gpupool.io/v1alpha1\nkind: ChangePolicy\n"
            "metadata:\n  <<: {name: Bad_Name}\nspec: {}\n"
        ),
        3,
        1,
        "metadata.name",
        "is not a valid name",
    ),
    (
        "unquoted date",
        (
            "apiVersion: gpupool.io/v1alpha1\nkind: ChangePolicy\n"
            "metadata: {name: 2024-01-01}\nspec: {}\n"
        ),
        3,
        12,
        "metadata.name",
        "quote it",
    ),
    (
        "yes is not a bool",
        (
            "apiVersion: gpupool.io/v1alpha1\nkind: ChangePolicy\n"
            "metadata: {name: g}\nspec: {allowEmptyPool: yes}\n"
        ),
        4,
        8,
        "spec.allowEmptyPool",
        "valid boolean",
    ),
    (
        "unknown GPU model",
        OK_POOL.replace("A100-SXM4-80GB", "V100-16GB"),
        6,
        3,
        "spec.gpuModel",
        "unknown GPU model 'V100-16GB'",
    ),
    (
        "window time",
        (
            "apiVersion: gpupool.io/v1alpha1\nkind: MaintenancePolicy\nmetadata: {name: m}\nspec:\n"
            "  defragmentation: {when: window, window: {start: '25:00', end: '03:00'}}\n"
        ),
        5,
        44,
        "spec.defragmentation.window.start",
        "not a time of day",
    ),
    (
        "second PriorityPolicy",
        "".join(
            "---\napiVersion: gpupool.io/v1alpha1\nkind: PriorityPolicy\n"
            f"metadata: {{name: p{i}}}\nspec: {{classes: [{{name: a, value: 1}}]}}\n"
            for i in range(2)
        ),
        8,
        1,
        "kind",
        "only one PriorityPolicy may exist",
    ),
]


@pytest.mark.parametrize(
    ("name", "text", "line", "col", "path", "fragment"), INLINE, ids=[c[0] for c in INLINE]
)
def test_inline_case(name, text, line, col, path, fragment):
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("inline.yaml", text)])
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    p = problems[0]
    assert (p.file, p.line, p.column, p.path) == ("inline.yaml", line, col, path), str(p)
    assert fragment in p.message, str(p)


def test_no_cascade_from_an_invalid_pool_or_priority_policy():
    """A reference to a document that exists but is invalid is not also 'missing'."""
    text = (
        OK_POOL.replace("nodes: 1", "nodes: '1'").replace("name: a100", "name: h100")
        + """\
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {name: q}
spec:
  namespaces: [q]
  pools: [{pool: h100, whole: {guaranteed: 1}}]
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {name: p}
spec: {classes: [{name: a, value: 1, colour: red}]}
---
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata: {name: m}
spec:
  pools: [h100]
  idleReclaim: {excludeClasses: [a]}
"""
    )
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("x.yaml", text)])
    assert [p.path for p in info.value.problems] == [
        "spec.capacity.nodes",
        "spec.classes[0].colour",
    ]


def test_empty_files_and_documents_are_fine():
    state = load([SourceFile("a.yaml", ""), SourceFile("b.yaml", "# nothing\n---\n---\n")])
    assert state.documents == ()


def test_problems_are_sorted_and_printable():
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("b.yaml", "kind: Nope\n"), SourceFile("a.yaml", "a: [\n")])
    probs = info.value.problems
    assert [p.file for p in probs] == sorted(p.file for p in probs)
    assert str(Problem("f.yaml", 0, 0, "", "boom")) == "f.yaml: boom"
    assert (
        str(Problem("f.yaml", 3, 4, "spec.x", "boom", "Pool/a"))
        == "f.yaml:3:4: Pool/a spec.x: boom"
    )
    assert "a.yaml:" in str(info.value)
