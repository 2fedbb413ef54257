"""Hostile input through the CLI: mutated policy files (`gpupool validate`), observed snapshots
(`gpupool plan --observed`) and saved plans (`gpupool apply`).

Whatever the bytes, the answer is a documented exit code and either a result or errors that each
name the file and the line, one line each; never a traceback, never a hang, nothing written.
A mutation that must be refused (a key that is not a string, a repeated key, an alias bomb,
nesting past the bound, a huge value, a byte that is not UTF-8) must be refused at its line;
a policy file that it takes over 1 MiB is refused by its size, unread, naming the file.

Snapshots and saved plans also get the classes of tests/test_hostile_cluster.py: extreme
times (year 1, 9999), huge counts (10^9 cards, replicas, gangs), empty allocations and loose
shapes (a value of another JSON type). Sub-cases that fail on this branch for a check another
change adds were xfail until it landed (the reasons stay in the tables).

Seeded (`derandomize=True`) and bounded: few examples, a deadline per example, and a watchdog
that stops an example that hangs (`tests/support/hostile.py`). The dict mutations (`mutate`,
`VALUES`) are tests/policy/fuzzing.py's, shared with tests/policy/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler.cli import main
from reconciler.plan.model import Plan
from reconciler.policy.files import MAX_FILE_BYTES
from tests.policy.fuzzing import VALUES, mutate
from tests.support.hostile import HOSTILE, WATCHDOG_S, bounded, watchdog

ROOT = Path(__file__).resolve().parents[1]


def cli(args: list[str], *, isolated: bool = False) -> tuple[int, str, str]:
    """`gpupool ARGS`: (exit code, stdout, stderr). `isolated`: in a forked child whose
    address space is bounded too (`bounded`), for input that may make gpupool allocate as much
    as it says (10^18 slices), which the watchdog alone would not stop in time."""
    if isolated:
        done = bounded(lambda: cli(args), WATCHDOG_S + 5)
        if done.error:
            pytest.fail(f"gpupool {args[0]}: {done.error}", pytrace=False)
        return done.value
    out, err = io.StringIO(), io.StringIO()
    with watchdog(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def contents(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


LOCATED = re.compile(r"^error: (?P<file>.+?):(?P<line>\d+):(?P<col>\d+): \S")
SUMMARY = re.compile(r"^\d+ problems? found; nothing was changed\.$")


def load_errors(err: str, files: set[str]) -> list[tuple[str, int, str]]:
    """(file, line, line of output) of each error of a refused load; asserts each is located in
    one of `files` and the last line says nothing was changed."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and SUMMARY.match(lines[-1]), err
    found = []
    for line in lines[:-1]:
        m = LOCATED.match(line)
        assert m, f"not a located one-line error: {line!r}"
        assert m["file"] in files and int(m["line"]) >= 1, line
        found.append((m["file"], int(m["line"]), line))
    assert len(found) == int(lines[-1].split()[0]), err
    return found


# --------------------------------------------------------------------------- text mutations


@dataclass(frozen=True)
class Key:
    line: int  # 0-based, as ruamel records it
    col: int
    text: str
    block: bool  # in a block (not flow) mapping
    scalar_value: tuple[int, int] | None  # where a plain scalar value on the same line starts


def keys_of(text: str) -> list[Key]:
    """Every key written plainly at the start of its own text, with where its value starts."""
    out: list[Key] = []
    lines = text.splitlines()
    for doc in YAML(typ="rt").load_all(text):
        stack, seen = [doc], set()
        while stack:
            node = stack.pop()
            if id(node) in seen:  # an alias: its keys were listed where it was written
                continue
            seen.add(id(node))
            if isinstance(node, CommentedMap):
                for k, v in node.items():
                    pos = node.lc.key(k)
                    if pos is None or not isinstance(k, str):
                        continue
                    line, col = pos
                    if not lines[line][col:].startswith(f"{k}:"):
                        continue
                    vpos = node.lc.value(k)
                    plain = (
                        vpos is not None
                        and vpos[0] == line
                        and not isinstance(v, CommentedMap | CommentedSeq)
                        and lines[line][vpos[1] : vpos[1] + 1] not in ("|", ">", "'", '"', "&", "!")
                    )
                    block = not node.fa.flow_style()
                    out.append(Key(line, col, k, block, vpos if plain else None))
                    stack.append(v)
            elif isinstance(node, CommentedSeq):
                stack.extend(node)
    return out


NON_STRING_KEYS = [
    "1",
    "0",
    "true",
    "False",
    "~",
    "null",
    "1.5",
    ".inf",
    "0x1F",
    "0o17",
    "2026-01-01",
    "[a, b]",
    "{a: 1}",
    "!!int 3",
    "!!bool true",
    "!custom x",
]
TYPE_SWAPS = [
    "[]",
    "{}",
    "~",
    "true",
    "-1",
    "0",
    "1e999",
    "-.inf",
    ".nan",
    "'x'",
    '"\\u0000"',
    "[a, [b, {c: d}]]",
    "{x: 1, y: [2]}",
    "2026-01-01T00:00:00",
    "2026-01-01T00:00:00+99:00",
    "!!binary aGk=",
    "!!int abc",
    "!!bool maybe",
    "!!omap [a: 1, a: 2]",
    "!!set {a}",
    "!!python/object:os.system x",
    "!!timestamp 2026-99-99",
    "*undefined",
    "&a [*a]",
    "99999999999999999999999999999",
    "0x" + "F" * 40,
    "'" + "x" * 300 + "'",
]
BAD_BYTES = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf"]


@dataclass(frozen=True)
class Mutated:
    data: bytes
    line: int | None = None  # 1-based: a problem must be reported here
    fragment: str | None = None  # ... saying this


def _lines(text: str) -> list[str]:
    return text.split("\n")


def non_string_key(text: str, keys: list[Key], data) -> Mutated:
    k = data.draw(st.sampled_from(keys), label="key")
    token = data.draw(st.sampled_from(NON_STRING_KEYS), label="non-string key")
    lines = _lines(text)
    row = lines[k.line]
    lines[k.line] = row[: k.col] + token + row[k.col + len(k.text) :]
    return Mutated("\n".join(lines).encode(), k.line + 1, "mapping keys must be strings")


def duplicate_key(text: str, keys: list[Key], data) -> Mutated:
    """The key again, in the same mapping, after its value."""
    k = data.draw(st.sampled_from([k for k in keys if k.block]), label="key")
    lines = _lines(text)
    at = k.line + 1
    while at < len(lines):
        stripped = lines[at].strip()
        indent = len(lines[at]) - len(lines[at].lstrip(" "))
        if stripped and not stripped.startswith("#") and indent <= k.col:
            break
        at += 1
    lines.insert(at, " " * k.col + k.text + ": 1")
    return Mutated("\n".join(lines).encode(), at + 1, "duplicate key")


def type_swap(text: str, keys: list[Key], data) -> Mutated:
    k = data.draw(st.sampled_from([k for k in keys if k.scalar_value and k.block]), label="key")
    token = data.draw(st.sampled_from(TYPE_SWAPS), label="value")
    lines = _lines(text)
    line, col = k.scalar_value
    lines[line] = lines[line][:col] + token
    return Mutated("\n".join(lines).encode())


def _top_level_insert(text: str, block: str, data) -> tuple[str, int]:
    """`block` (lines at indentation 0) before a top-level key; its 1-based first line."""
    lines = _lines(text)
    tops = [
        i
        for i, row in enumerate(lines)
        if re.match(r"[A-Za-z]", row) and (i == 0 or not lines[i - 1].endswith("|"))
    ]
    at = data.draw(st.sampled_from(tops), label="at")
    lines[at:at] = block.rstrip("\n").split("\n")
    return "\n".join(lines), at + 1


def alias_bomb(text: str, keys: list[Key], data) -> Mutated:
    levels = data.draw(st.integers(1, 12), label="levels")
    fan = data.draw(st.integers(2, 10), label="fan")
    block = f"zz0: &zz0 [{', '.join(['x'] * fan)}]\n" + "".join(
        f"zz{i}: &zz{i} [{', '.join([f'*zz{i - 1}'] * fan)}]\n" for i in range(1, levels)
    )
    new, at = _top_level_insert(text, block, data)
    expands = sum(fan**i for i in range(2, levels + 1))  # what the aliases add, roughly
    if expands > 20_000:
        return Mutated(new.encode(), None, "aliases expand to more than 10,000 values")
    return Mutated(new.encode())


def deep_nesting(text: str, keys: list[Key], data) -> Mutated:
    depth = data.draw(st.sampled_from([1, 10, 62, 64, 65, 1_000, 100_000]), label="depth")
    if data.draw(st.booleans(), label="flow"):
        block = "zz: " + "[" * depth + "]" * depth
    else:
        depth = min(depth, 200)
        block = "".join(" " * i + f"k{i}:\n" for i in range(depth)) + " " * depth + "v"
    new, at = _top_level_insert(text, block, data)
    # the document is one collection, the inserted value `depth` more
    if depth + 1 > 64:
        return Mutated(new.encode(), None, "nested more than 64 collections deep")
    return Mutated(new.encode())


def huge_scalar(text: str, keys: list[Key], data, *, limit: int) -> Mutated:
    k = data.draw(st.sampled_from([k for k in keys if k.scalar_value and k.block]), label="key")
    size = data.draw(st.sampled_from([1_001, 5_000, limit, limit + 1, 2_000_000]), label="size")
    digits = data.draw(st.booleans(), label="a number")
    token = "9" * size if digits else "x" * size
    lines = _lines(text)
    line, col = k.scalar_value
    lines[line] = lines[line][:col] + token
    # every size drawn is past the 1,000 characters a number may have
    fragment = "refused: a value of" if size > limit else "refused: a number of" if digits else None
    return Mutated("\n".join(lines).encode(), line + 1 if fragment else None, fragment)


def bad_bytes(text: str, keys: list[Key], data) -> Mutated:
    raw = text.encode()
    at = data.draw(st.integers(0, len(raw)), label="offset")
    while at > 0 and (raw[at] & 0xC0) == 0x80 if at < len(raw) else False:
        at -= 1  # not inside a character
    junk = data.draw(st.sampled_from(BAD_BYTES), label="bytes")
    line = raw.count(b"\n", 0, at) + 1
    return Mutated(raw[:at] + junk + raw[at:], line, "not UTF-8 text")


def control_character(text: str, keys: list[Key], data) -> Mutated:
    raw = text.encode()
    lines = _lines(text)
    row = data.draw(st.integers(0, len(lines) - 1), label="line")
    col = data.draw(st.integers(0, len(lines[row])), label="column")
    ch = data.draw(st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\ufffe"]), label="char")
    lines[row] = lines[row][:col] + ch + lines[row][col:]
    del raw
    return Mutated("\n".join(lines).encode(), row + 1, None)


OPERATORS = {
    "non-string-key": non_string_key,
    "duplicate-key": duplicate_key,
    "type-swap": type_swap,
    "alias-bomb": alias_bomb,
    "deep-nesting": deep_nesting,
    "bad-bytes": bad_bytes,
    "control-character": control_character,
}


ALL_OPERATORS = sorted([*OPERATORS, "huge-scalar"])


def hostile(text: str, data, *, limit: int, operators=None, name: str | None = None) -> Mutated:
    keys = keys_of(text)
    if name is None:
        name = data.draw(st.sampled_from(sorted(operators or ALL_OPERATORS)), label="op")
    event(name)
    if name == "huge-scalar":
        return huge_scalar(text, keys, data, limit=limit)
    return OPERATORS[name](text, keys, data)


def assert_refused_as_expected(m: Mutated, found: list[tuple[str, int, str]], name: str) -> None:
    if m.fragment is None and m.line is None:
        return
    match = [
        f
        for f in found
        if f[0] == name
        and (m.line is None or f[1] == m.line)
        and (m.fragment is None or m.fragment in f[2])
    ]
    assert match, f"expected {m.fragment!r} at line {m.line}, got {found}"


# --------------------------------------------------------------------------- policy files

POLICY_FILES = sorted(
    str(p.relative_to(ROOT)) for p in [*ROOT.glob("pools/*.yaml"), *ROOT.glob("policies/*.yaml")]
)


def _policy_tree(tmp: Path) -> Path:
    tree = tmp / "repo"
    for d in ("pools", "policies"):
        shutil.copytree(ROOT / d, tree / d)
    return tree


@pytest.fixture(scope="module")
def policy_base(tmp_path_factory) -> Path:
    return _policy_tree(tmp_path_factory.mktemp("policy"))


def validate_mutated(base: Path, rel: str, raw: bytes, tmp: Path) -> tuple[int, str, Path]:
    tree = tmp / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(base, tree)
    (tree / rel).write_bytes(raw)
    before = contents(tree)
    rc, _, err = cli(["validate", str(tree / "pools"), str(tree / "policies")])
    assert contents(tree) == before, "validate wrote something"
    assert rc in (0, 1), (rc, err)
    assert "Traceback" not in err
    return rc, err, tree


@pytest.mark.parametrize("op", [op for op in ALL_OPERATORS if op != "bad-bytes"])
@settings(HOSTILE, max_examples=12)
@given(rel=st.sampled_from(POLICY_FILES), data=st.data())
def test_a_hostile_policy_file_is_refused_where_it_is(policy_base, tmp_path_factory, op, rel, data):
    m = hostile((ROOT / rel).read_text(), data, limit=65_536, name=op)
    rc, err, tree = validate_mutated(policy_base, rel, m.data, tmp_path_factory.mktemp("v"))
    if len(m.data) > MAX_FILE_BYTES:  # refused by its size, unread: one line naming the file
        assert rc == 1 and err == (
            f"error: {tree / rel}: the file is {len(m.data):,} bytes, over the limit of "
            f"{MAX_FILE_BYTES:,} (1 MiB) for one policy file; policy files are a few KB: split "
            "it, or remove what does not belong in it\n"
        ), err
        return
    if rc == 0:
        assert m.fragment is None, f"accepted, but {m.fragment!r} was expected"
        return
    found = load_errors(err, {str(p) for p in tree.rglob("*.yaml")} | {str(tree / rel)})
    assert_refused_as_expected(m, found, str(tree / rel))


@settings(HOSTILE, max_examples=10)
@given(st.sampled_from(POLICY_FILES), st.data())
def test_an_invalid_utf8_byte_in_a_policy_file_is_located(policy_base, tmp_path_factory, rel, data):
    m = bad_bytes((ROOT / rel).read_text(), [], data)
    rc, err, tree = validate_mutated(policy_base, rel, m.data, tmp_path_factory.mktemp("v"))
    assert rc == 1 and "Traceback" not in err
    # as a SourceError (one line) or as a Problem (then with the "nothing was changed" line)
    first = LOCATED.match(err.splitlines()[0])
    assert first and first["file"] == str(tree / rel), err
    assert int(first["line"]) == m.line and m.fragment in err, (m.line, err)


@settings(HOSTILE, max_examples=30)
@given(st.sampled_from(POLICY_FILES), st.data())
def test_several_hostile_edits_at_once(policy_base, tmp_path_factory, rel, data):
    """Mutations on mutations: only the general promise holds (located errors, no crash)."""
    text = (ROOT / rel).read_text()
    for _ in range(data.draw(st.integers(2, 4), label="edits")):
        try:
            keys_of(text)
        except Exception:  # noqa: BLE001 - no longer YAML: stop mutating, judge what we have
            break
        if not [k for k in keys_of(text) if k.scalar_value and k.block]:
            break
        m = hostile(
            text,
            data,
            limit=65_536,
            operators=["non-string-key", "duplicate-key", "type-swap", "alias-bomb"],
        )
        text = m.data.decode()
    rc, err, tree = validate_mutated(policy_base, rel, text.encode(), tmp_path_factory.mktemp("v"))
    if rc == 1:
        load_errors(err, {str(p) for p in tree.rglob("*.yaml")})


# --------------------------------------------------------------------------- snapshots

GOLDEN = sorted(p.name for p in (ROOT / "tests/golden").iterdir() if (p / "observed.yaml").exists())


def plan_mutated(
    case: str, raw: bytes, suffix: str, tmp: Path, *, isolated: bool = False, json_out=False
) -> tuple[int, str, str, Path]:
    snap = tmp / f"observed{suffix}"
    snap.write_bytes(raw)
    before = contents(tmp)
    desired = ROOT / "tests/golden" / case / "desired.yaml"
    args = ["plan", str(desired), "--observed", str(snap), "--detailed-exitcode"]
    args += ["--format", "json"] if json_out else []
    rc, out, err = cli(args, isolated=isolated)
    assert contents(tmp) == before, "plan wrote something"
    assert rc in (0, 1, 2), (rc, err)  # with --detailed-exitcode: no changes, error, changes
    assert "Traceback" not in err
    if rc != 1:
        assert out.strip() and not err.strip(), (out, err)
    return rc, out, err, snap


@pytest.mark.parametrize("op", ALL_OPERATORS)
@settings(HOSTILE, max_examples=12)
@given(case=st.sampled_from(GOLDEN), data=st.data())
def test_a_hostile_snapshot_is_a_located_error_or_a_plan(tmp_path_factory, op, case, data):
    text = (ROOT / "tests/golden" / case / "observed.yaml").read_text()
    m = hostile(text, data, limit=1 << 20, name=op)
    rc, _, err, snap = plan_mutated(case, m.data, ".yaml", tmp_path_factory.mktemp("s"))
    if rc != 1:
        assert m.fragment is None, f"planned, but {m.fragment!r} was expected"
        return
    found = load_errors(err, {str(snap)})
    assert_refused_as_expected(m, found, str(snap))


@settings(HOSTILE, max_examples=50)
@given(st.sampled_from(GOLDEN), st.sampled_from([".yaml", ".json"]), st.data())
def test_a_mutated_snapshot_is_a_located_error_or_a_plan(tmp_path_factory, case, suffix, data):
    """Fields dropped, replaced or added anywhere (an inconsistent cluster gets findings and a
    safe plan; a malformed file a located error), as YAML and as JSON."""
    doc = YAML(typ="safe").load((ROOT / "tests/golden" / case / "observed.yaml").read_text())
    doc = mutate(doc, data)
    if suffix == ".json":
        raw = json.dumps(doc, default=str, indent=1).encode()
    else:
        buf = io.StringIO()
        YAML(typ="safe", pure=True).dump(doc, buf)
        raw = buf.getvalue().encode()
    rc, _, err, snap = plan_mutated(case, raw, suffix, tmp_path_factory.mktemp("s"))
    if rc == 1:
        load_errors(err, {str(snap)})


@settings(HOSTILE, max_examples=15)
@given(st.sampled_from(GOLDEN), st.data())
def test_an_inconsistent_cluster_gets_findings_not_an_error(tmp_path_factory, case, data):
    """A pod whose record names a card or node the snapshot does not have is drift, not bad
    input: it gets a finding and a plan."""
    doc = YAML(typ="safe").load((ROOT / "tests/golden" / case / "observed.yaml").read_text())
    placed = [w for w in doc.get("workloads") or [] if w.get("node") and w.get("allocations")]
    if not placed:
        return
    w = data.draw(st.sampled_from(placed), label="workload")
    w["node"] = data.draw(st.sampled_from(["no-such-node", w["node"] + "-gone"]), label="node")
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(doc, buf)
    rc, out, err, _ = plan_mutated(
        case, buf.getvalue().encode(), ".yaml", tmp_path_factory.mktemp("s")
    )
    assert rc in (0, 2), err
    assert "which is not in the snapshot" in out, out


# --------------------------------------------------------------------------- snapshots: classes

TIMES = [
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "2262-04-12T00:00:00+00:00",
]
TIME_KEYS = {
    "observedAt",
    "createdAt",
    "startedAt",
    "lastCheckpointAt",
    "idleSince",
    "lastScaleAt",
    "lastChangeAt",
    "suspendedAt",
    "recentPreemptions",
}
COUNT_KEYS = {
    "cards": {"index"},
    "requests": {"gpus", "slices", "sharedSlices"},
    "slices": {"sharedSlices"},
    "replicas": {"replicas", "minReplicas", "maxReplicas"},
    "gangs": {"parallelism", "gangSize"},
}
COUNTS = [10**9, 2**63, 10**18]
BOUND = "bound not on this branch (the change adding size and time bounds adds it): "
HUGE_XFAIL = {
    "slices": f"{BOUND}MAX_SHARED_SLICES_PER_GPU: 10^18 slices on a card are a MemoryError",
    "gangs": f"{BOUND}MAX_GANG_SIZE: a suspended Job of 10^9 pods is one unit per pod",
}


def _paths_to(doc, keys: set[str], at: tuple = ()) -> list[tuple]:
    """Paths to the values under a key of `keys` (each item of a list under one), scalars."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in keys and not isinstance(v, dict | list):
                out.append((*at, k))
            elif k in keys and isinstance(v, list):
                out += [(*at, k, i) for i, x in enumerate(v) if not isinstance(x, dict | list)]
            out += _paths_to(v, keys, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths_to(v, keys, (*at, i))
    return out


def _put(doc, path: tuple, value) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _golden_with(where: Callable[[Any], list[tuple]] | None) -> list[str]:
    """The golden cases whose snapshot has a value `where` finds (None: all)."""
    return [
        c
        for c in GOLDEN
        if where is None
        or where(YAML(typ="safe").load((ROOT / "tests/golden" / c / "observed.yaml").read_text()))
    ]


def _times(doc) -> list[tuple]:
    return _paths_to(doc, TIME_KEYS)


def _extreme_time(doc, data) -> None:
    path = data.draw(st.sampled_from(_times(doc)), label="time")
    _put(doc, path, data.draw(st.sampled_from(TIMES), label="value"))
    event(str(path[-1] if isinstance(path[-1], str) else path[-2]))


def _counts(keys: set[str]) -> Callable[[Any], list[tuple]]:
    """Where a count of `keys` is in a snapshot; for sharedSlices, what a card offers (a
    request's own is with the requests)."""
    if keys == {"sharedSlices"}:
        return lambda doc: [p for p in _paths_to(doc, keys) if p[0] == "nodes"]
    return lambda doc: _paths_to(doc, keys)


def _huge(where: Callable[[Any], list[tuple]]):
    def edit(doc, data) -> None:
        path = data.draw(st.sampled_from(where(doc)), label="count")
        _put(doc, path, data.draw(st.sampled_from(COUNTS), label="value"))
        event(str(path[-1]))

    return edit


def _many_cards(doc, data) -> None:
    """One node publishing thousands of cards."""
    node = data.draw(st.sampled_from(doc["nodes"]), label="node")
    n = data.draw(st.sampled_from([1_000, 5_000]), label="cards")
    node["gpus"] = [{"index": i, "model": "A100-SXM4-80GB"} for i in range(n)]


def _loose_shape(doc, data) -> None:
    """A value replaced by one of another JSON type that no lax reading accepts (see
    tests/test_hostile_cluster.py, `_other_type`)."""
    paths = [p for p in _all_paths(doc) if p and not isinstance(_get(doc, p), type(None))]
    path = data.draw(st.sampled_from(paths), label="path")
    old = _get(doc, path)
    if isinstance(old, dict | list):
        kind = type(old)
        value = data.draw(VALUES.filter(lambda v: v is not None and not isinstance(v, kind)))
    else:
        value = data.draw(VALUES.filter(lambda v: isinstance(v, dict | list)), label="value")
    _put(doc, path, value)
    event(str(next((p for p in reversed(path) if isinstance(p, str)), "?")))


def _all_paths(doc, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _all_paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _all_paths(v, (*at, i))
    return out


def _get(doc, path: tuple):
    for k in path:
        doc = doc[k]
    return doc


SNAPSHOT_CLASSES = {
    "extreme-times": (
        _extreme_time,
        _times,
        f"{BOUND}times in the years 2000-2199 (a snapshot observed in year 1 is an "
        "OverflowError here)",
    ),
    **{
        f"huge-{k}": (_huge(_counts(keys)), _counts(keys), HUGE_XFAIL.get(k))
        for k, keys in COUNT_KEYS.items()
    },
    "many-cards": (_many_cards, None, None),
    "loose-shapes": (_loose_shape, None, None),
}


def _dump(doc, suffix: str) -> bytes:
    if suffix == ".json":
        return json.dumps(doc, default=str, indent=1).encode()
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(doc, buf)
    return buf.getvalue().encode()


@pytest.mark.parametrize(
    "cls",
    [pytest.param(c, marks=()) for c, (_, _, why) in sorted(SNAPSHOT_CLASSES.items())],
)
@settings(HOSTILE, max_examples=15)
@given(suffix=st.sampled_from([".yaml", ".json"]), data=st.data())
def test_a_snapshot_of_each_hostile_class_is_a_located_error_or_a_plan(
    tmp_path_factory, cls, suffix, data
):
    edit, where, _ = SNAPSHOT_CLASSES[cls]
    case = data.draw(st.sampled_from(_golden_with(where)), label="case")
    doc = YAML(typ="safe").load((ROOT / "tests/golden" / case / "observed.yaml").read_text())
    edit(doc, data)
    raw, tmp = _dump(doc, suffix), tmp_path_factory.mktemp("s")
    rc, _, err, snap = plan_mutated(case, raw, suffix, tmp, isolated=True)
    if rc == 1:
        load_errors(err, {str(snap)})
    elif cls == "loose-shapes":
        raise AssertionError("a value of another JSON type was planned")


def _running_with_cards(doc) -> list[dict]:
    """The workloads of a snapshot that run (the default phase) on cards they hold."""
    return [
        w
        for w in doc.get("workloads") or []
        if w.get("allocations") and w.get("node") and w.get("phase", "Running") == "Running"
    ]


@settings(HOSTILE, max_examples=10)
@given(st.sampled_from(_golden_with(lambda doc: _running_with_cards(doc))), st.data())
def test_a_running_workload_with_empty_allocations_gets_a_finding(tmp_path_factory, case, data):
    doc = YAML(typ="safe").load((ROOT / "tests/golden" / case / "observed.yaml").read_text())
    w = data.draw(st.sampled_from(_running_with_cards(doc)), label="workload")
    w["allocations"] = []
    raw, tmp = _dump(doc, ".yaml"), tmp_path_factory.mktemp("s")
    rc, out, err, _ = plan_mutated(case, raw, ".yaml", tmp, json_out=True)
    assert rc in (0, 2), err
    found = {(f["code"], f["subject"]) for f in json.loads(out)["findings"]}
    assert any(code == "allocation-unknown" for code, _ in found), (w["name"], found)


# --------------------------------------------------------------------------- saved plans

PLAN_CASE = "defragment"  # a plan of several actions of several kinds


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory) -> tuple[list[str], bytes]:
    g = ROOT / "tests/golden" / PLAN_CASE
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    inputs = [str(g / "desired.yaml"), "--observed", str(g / "observed.yaml")]
    rc, _, err = cli(["plan", *inputs, "--out", str(out)])
    assert rc == 0, err
    rc, _, err = cli(["apply", str(out), *inputs])
    assert rc == 0, err
    return inputs, out.read_bytes()


def apply_mutated(inputs: list[str], raw: bytes, tmp: Path) -> tuple[int, str]:
    plan = tmp / "plan.json"
    plan.write_bytes(raw)
    before = contents(tmp)
    rc, out, err = cli(["apply", str(plan), *inputs])
    assert contents(tmp) == before, "apply wrote something"
    assert "Traceback" not in err
    assert rc in (0, 1), (rc, err)  # --observed only checks: done, or error / stale / refused
    if rc == 1:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert str(plan) in lines[0], f"the error does not name the plan: {err}"
        assert not out.strip(), out
    return rc, err


def _same_plan(a: bytes, b: bytes) -> bool:
    """The same actions under the same fingerprint: all that apply carries out. (The other
    fields, findings, capacity, summary and revision, are what `plan` showed, not read by
    apply; an edit there changes nothing applied.)"""
    try:
        x, y = (Plan.model_validate(json.loads(t)) for t in (a, b))
    except Exception:  # noqa: BLE001 - not a plan at all
        return False
    return (x.actions, x.fingerprint) == (y.actions, y.fingerprint)


@HOSTILE
@given(st.data())
def test_an_edited_plan_is_refused_before_any_write(saved_plan, tmp_path_factory, data):
    inputs, raw = saved_plan
    doc = mutate(json.loads(raw), data)
    edited = json.dumps(doc, default=str).encode()
    rc, err = apply_mutated(inputs, edited, tmp_path_factory.mktemp("a"))
    if rc == 0:
        assert _same_plan(edited, raw), "an edited plan was accepted"


def _nested(raw: bytes, depth: int) -> bytes:
    doc = json.loads(raw)
    doc["actions"][0]["reason"] = "@"
    return json.dumps(doc).replace('"@"', "[" * depth + "]" * depth).encode()


@pytest.mark.parametrize("depth", [100_000])
def test_a_deeply_nested_plan_is_one_line_error(saved_plan, tmp_path, depth):
    inputs, raw = saved_plan
    rc, _ = apply_mutated(inputs, _nested(raw, depth), tmp_path)
    assert rc == 1


PLAN_TEXT_EDITS = [
    "truncate",
    "bad-bytes",
    "deep-nesting",
    "huge-number",
    "duplicate-key",
    "not-an-object",
    "bytes",
    "value",
]


@settings(HOSTILE, max_examples=60)
@given(st.sampled_from(PLAN_TEXT_EDITS), st.data())
def test_a_corrupted_plan_file_is_one_line_error(saved_plan, tmp_path_factory, edit, data):
    inputs, raw = saved_plan
    if edit == "truncate":
        bad = raw[: data.draw(st.integers(0, len(raw) - 1), label="length")]
    elif edit == "bad-bytes":
        at = data.draw(st.integers(0, len(raw)), label="at")
        bad = raw[:at] + data.draw(st.sampled_from(BAD_BYTES), label="junk") + raw[at:]
    elif edit == "deep-nesting":
        depth = data.draw(st.sampled_from([10, 100, 900]), label="depth")
        bad = _nested(raw, depth)
    elif edit == "huge-number":
        doc = json.loads(raw)
        doc["actions"][0]["pods"] = "@"
        bad = json.dumps(doc).replace('"@"', "9" * 5_000).encode()
    elif edit == "duplicate-key":
        bad = raw.replace(b'"actions": [', b'"actions": [], "actions": [', 1)
    elif edit == "not-an-object":
        bad = data.draw(st.sampled_from([b"[]", b"null", b"1", b'"plan"', b"", b"{}"]), label="doc")
    elif edit == "bytes":
        at = data.draw(st.integers(0, len(raw)), label="at")
        junk = data.draw(st.binary(min_size=1, max_size=4), label="junk")
        bad = raw[:at] + junk + raw[at + data.draw(st.integers(0, 3), label="cut") :]
    else:
        doc = json.loads(raw)
        doc[data.draw(st.sampled_from(sorted(doc)), label="field")] = data.draw(VALUES)
        bad = json.dumps(doc, default=str).encode()
    rc, err = apply_mutated(inputs, bad, tmp_path_factory.mktemp("a"))
    if rc == 0:
        assert _same_plan(bad, raw), "a corrupted plan was accepted"


SAVED_PLAN_FIELDS = {
    "format-version": (
        "format_version",
        [1, 3, None, "two", [2], "2", 2.0, True],
        "check not on this branch (the saved-plan checks change adds it): format_version "
        "must be exactly the integer 2; here 1 is applied, and pydantic reads '2' as 2",
    ),
    "revision": (
        "revision",
        ["0" * 40, "main", "", 7],
        "check not on this branch (the saved-plan checks change adds it): the revision is "
        "part of the fingerprint; here an edited revision is applied",
    ),
    "observed-at": (
        "observed_at",
        TIMES,
        "check not on this branch (the saved-plan checks change adds it): observed_at must "
        "be a time in the years 2000-2199",
    ),
}


@pytest.mark.parametrize(
    "edit",
    [pytest.param(e, marks=()) for e, (_, _, why) in sorted(SAVED_PLAN_FIELDS.items())],
)
@settings(HOSTILE, max_examples=8)
@given(data=st.data())
def test_a_saved_plans_own_fields_edited_are_refused(saved_plan, tmp_path_factory, edit, data):
    """format_version, revision and observed_at say which plan this is and from when: an edit
    of one is refused before any write, one line naming the plan."""
    inputs, raw = saved_plan
    key, values, _ = SAVED_PLAN_FIELDS[edit]
    doc = json.loads(raw)
    value = data.draw(st.sampled_from([v for v in values if v != doc[key]]), label="value")
    doc[key] = value
    rc, err = apply_mutated(inputs, json.dumps(doc).encode(), tmp_path_factory.mktemp("a"))
    assert rc == 1, f"{key}={value!r} was applied"
