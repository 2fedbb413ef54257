"""Hypothesis-generated garbage through the loader and the CLI.

Whatever the input, the outcome is a valid DesiredState or InvalidDesiredState with at least one
problem, each naming a file and saying something; never another exception, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.cli import main
from reconciler.policy.files import SourceError, SourceFile, files_from_paths
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.state import DesiredState
from tests.policy.fuzzing import mutate

ROOT = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _examples() -> list[dict]:
    yaml = YAML(typ="safe")
    docs = []
    for f in sorted([*ROOT.glob("pools/*.yaml"), *ROOT.glob("policies/*.yaml")]):
        docs.extend(d for d in yaml.load_all(f.read_text()) if d)
    return docs


EXAMPLES = _examples()


def check_outcome(files: list[SourceFile]) -> None:
    try:
        state = load(files)
    except InvalidDesiredState as exc:
        assert exc.problems, "InvalidDesiredState without problems"
        names = {f.path for f in files}
        for p in exc.problems:
            assert p.file in names, p
            assert p.message.strip(), p
            assert p.line >= 0 and p.column >= 0, p
            assert str(p)
    else:
        assert isinstance(state, DesiredState)


# --------------------------------------------------------------------------- raw text

YAML_CHARS = st.sampled_from(
    list(":-?[]{},&*!|>'\"#%@`\n\t ")
    + [
        "---\n",
        "...\n",
        "  ",
        "<<",
        "!!",
        "~",
        "kind",
        "Pool",
        "apiVersion",
        "gpupool.io/v1alpha1",
        "spec",
        "metadata",
        "name",
    ]
)


@FUZZ
@given(st.text(max_size=300))
def test_random_text(text):
    check_outcome([SourceFile("fuzz.yaml", text)])


@FUZZ
@given(st.lists(st.one_of(YAML_CHARS, st.text(max_size=5)), max_size=80).map("".join))
def test_yaml_shaped_text(text):
    check_outcome([SourceFile("fuzz.yaml", text)])


@FUZZ
@given(st.sampled_from(EXAMPLES), st.data())
def test_corrupted_valid_text(doc, data):
    """A valid document's text with a few characters replaced, inserted or deleted."""
    buf = io.StringIO()
    YAML().dump(doc, buf)
    text = buf.getvalue()
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        i = data.draw(st.integers(0, len(text)), label="at")
        piece = data.draw(st.one_of(YAML_CHARS, st.text(max_size=3)), label="piece")
        cut = data.draw(st.integers(0, 3), label="cut")
        text = text[:i] + piece + text[i + cut :]
    check_outcome([SourceFile("fuzz.yaml", text)])


# --------------------------------------------------------------------------- structural mutations


@settings(FUZZ, max_examples=100)
@given(st.lists(st.sampled_from(EXAMPLES), min_size=1, max_size=3), st.data())
def test_mutated_documents(docs, data):
    """Mutated documents beside the (valid) example pools, so references have targets."""
    check_outcome(
        [
            SourceFile("a.yaml", dump_all([mutate(d, data) for d in docs])),
            SourceFile("b.yaml", POOLS_TEXT),
        ]
    )


def dump_all(docs) -> str:
    buf = io.StringIO()
    YAML().dump_all(docs, buf)
    return buf.getvalue()


YAML_TEXT = dump_all(EXAMPLES)
POOLS_TEXT = dump_all([d for d in EXAMPLES if d["kind"] == "Pool"])


def test_examples_round_trip_through_the_dumper():
    """The mutation test starts from documents that load cleanly when re-dumped."""
    load([SourceFile("all.yaml", YAML_TEXT)])


# --------------------------------------------------------------------------- bytes and the CLI


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_through_the_cli(raw):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fuzz.yaml"
        f.write_bytes(raw)
        try:
            files = files_from_paths([f])
        except SourceError as exc:
            assert "cannot read" in str(exc) or "not UTF-8 text" in str(exc)
        else:
            check_outcome(files)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["validate", str(f)])
        assert rc in (0, 1)
        assert "Traceback" not in err.getvalue()
        if rc == 1:
            assert err.getvalue().startswith("error: ")
        assert sorted(p.name for p in Path(d).iterdir()) == ["fuzz.yaml"], "validate wrote a file"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(EXAMPLES), min_size=1, max_size=3), st.data())
def test_mutated_documents_through_the_cli(docs, data):
    text = dump_all([mutate(d, data) for d in docs])
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "x.yaml").write_text(text)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(["validate", d])
        assert rc in (0, 1)
        if rc == 1:
            lines = err.getvalue().splitlines()
            assert lines[-1].endswith("nothing was changed.")
            assert all(line.startswith(f"error: {d}/x.yaml") for line in lines[:-1]), lines
