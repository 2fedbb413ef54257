"""Hostile input through the CLI: mutated policy files (`gpupool validate`), observed snapshots
(`gpupool plan --observed`) and saved plans (`gpupool apply`).

Whatever the bytes, the answer is a documented exit code and either a result or errors that each
name the file and the line, one line each; never a traceback, never a hang, nothing written.
A mutation that must be refused (a key that is not a string, a repeated key, an alias bomb,
nesting past the bound, a huge value, a byte that is not UTF-8) must be refused at its line;
a policy file that it takes over 1 MiB is refused by its size, unread, naming the file.

Seeded (`derandomize=True`) and bounded: few examples, a deadline per example, and a watchdog
that stops an example that hangs. The dict mutations (`mutate`, `VALUES`) are
tests/policy/fuzzing.py's, shared with tests/policy/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import signal
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from reconciler.cli import main
from reconciler.plan.model import Plan
from reconciler.policy.files import MAX_FILE_BYTES
from tests.policy.fuzzing import VALUES, mutate

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = settings(
    derandomize=True,
    database=None,
    max_examples=50,
    deadline=timedelta(seconds=10),
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),  # no shrinking: bounded time, failing or not
)
WATCHDOG_S = 10


class Hung(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: int = WATCHDOG_S):
    """Stop an example that runs past `seconds`: a hang is a failure, not a stuck suite."""

    def fire(*_):
        raise Hung(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cli(args: list[str]) -> tuple[int, str, str]:
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


def plan_mutated(case: str, raw: bytes, suffix: str, tmp: Path) -> tuple[int, str, str, Path]:
    snap = tmp / f"observed{suffix}"
    snap.write_bytes(raw)
    before = contents(tmp)
    desired = ROOT / "tests/golden" / case / "desired.yaml"
    rc, out, err = cli(["plan", str(desired), "--observed", str(snap), "--detailed-exitcode"])
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
