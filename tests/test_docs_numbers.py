"""What the docs quote is what the tree says.

Counts and versions come from scripts/doc_numbers.py (each from its one source); a figure
written in README.md, docs/ or the READMEs under tests/, deploy/ and bench/ that disagrees with
it fails here, and so does a figure no doc states any more in the words this test looks for
(reword the pattern with the doc). The README's commands table must name every subcommand, its
plan excerpt must be what the quick start prints today, and every relative link and anchor in
those files must resolve. Timings are not checked: they depend on the machine and its load, and
docs/development.md gives each with its conditions.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [
    README,
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "tests").glob("**/README.md")),
    ROOT / "deploy" / "README.md",
    ROOT / "bench" / "README.md",
]
FIX = "run `.venv/bin/python scripts/doc_numbers.py` and write what it prints"


def _load_doc_numbers():
    spec = importlib.util.spec_from_file_location(
        "doc_numbers", ROOT / "scripts" / "doc_numbers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


doc_numbers = _load_doc_numbers()

NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
WORDS = {w: i for i, w in enumerate(NUMBER_WORDS.split(" "))}
NUM = rf"(\d[\d,]*|(?i:{'|'.join(WORDS)}))"
"""A figure in digits or, up to twenty, in words."""


def as_int(text: str) -> int:
    return WORDS[text.lower()] if text.lower() in WORDS else int(text.replace(",", ""))


def prose(path: Path) -> str:
    """The file with line breaks as spaces, so a figure wrapped onto the next line is found."""
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


def found(pattern: str) -> list[tuple[str, re.Match]]:
    out = []
    for path in DOCS:
        for m in re.finditer(pattern, prose(path)):
            out.append((str(path.relative_to(ROOT)), m))
    return out


@pytest.fixture(scope="module")
def numbers() -> dict:
    return doc_numbers.numbers(collect=False)


# (name in doc_numbers.numbers(), the words a doc states it in: group 1 is the figure)
COUNTS = [
    ("golden_scenarios", rf"\b{NUM} golden `?desired/observed/plan`? (?:triples|scenarios)"),
    ("policy_kinds", rf"\b{NUM} (?:policy )?kinds, several per file"),
    ("gpu_models", rf"\b{NUM} GPU models\b"),
    ("placement_shortlist", rf"\bshortlist of {NUM} nodes"),
    ("github_comment_limit", rf"\b{NUM}-character limit"),
]


@pytest.mark.parametrize(("name", "pattern"), COUNTS, ids=[c[0] for c in COUNTS])
def test_counts_in_the_docs_are_the_trees(numbers, name, pattern):
    hits = found(pattern)
    assert hits, f"no doc states {name} as /{pattern}/ any more: reword the pattern or the doc"
    wrong = [
        f"{path}: {m.group(0)!r}, but the tree says {numbers[name]}"
        for path, m in hits
        if as_int(m.group(1)) != numbers[name]
    ]
    assert not wrong, f"{FIX}:\n" + "\n".join(wrong)


def test_the_catalog_models_are_named_as_the_catalog_has_them(numbers):
    pattern = rf"{NUM} GPU models: {NUM} with MIG \(([^)]*)\) and {NUM} without \(([^)]*)\)"
    hits = found(pattern)
    assert hits, "docs/reference.md no longer lists the catalog's models"
    for path, m in hits:
        total, mig, mig_names, plain, plain_names = m.groups()
        assert as_int(total) == numbers["gpu_models"], (path, FIX)
        assert as_int(mig) == len(numbers["mig_models"]), (path, FIX)
        assert as_int(plain) == len(numbers["models_without_mig"]), (path, FIX)
        assert re.split(r",\s*", mig_names) == numbers["mig_models"], (path, FIX)
        assert re.split(r",\s*", plain_names) == numbers["models_without_mig"], (path, FIX)


def test_the_action_kinds_are_listed_as_the_plan_has_them(numbers):
    hits = found(rf"\({NUM} kinds: ([a-z, -]+)[;)]")
    assert hits, "docs/reference.md no longer lists the action kinds"
    for path, m in hits:
        assert as_int(m.group(1)) == numbers["action_kinds"], (path, FIX)
        assert re.split(r",\s*", m.group(2)) == numbers["action_kind_names"], (path, FIX)


def _major_minor(version: str) -> str:
    return ".".join(version.lstrip("v").split("+")[0].split(".")[:2])


# (the version's name, the words a doc states it in, how much of it the docs give)
VERSIONS = [
    ("python", r"\bPython (?:≥|>=) ?(\d+\.\d+)\b", _major_minor),
    ("go", r"\bGo (?:≥|>=) ?(\d+\.\d+)\b", _major_minor),
    ("kubernetes", r"(?<![\w.])(v1\.\d+\.\d+)\b", str),
    ("kueue", r"(?i)\bkueue\S*[ @](v\d+\.\d+\.\d+)\b", str),
    ("keda", r"(?i)\bkeda\S*[ @](v\d+\.\d+\.\d+)\b", str),
    ("prometheus", r"\b(\d+\.\d+\.\d+\+ds[\w.+~-]*\d)", str),
    ("prometheus", r"\bDebian's (\d+\.\d+) package", _major_minor),
]


@pytest.mark.parametrize(("name", "pattern", "part"), VERSIONS, ids=[v[1] for v in VERSIONS])
def test_versions_in_the_docs_are_the_pinned_ones(numbers, name, pattern, part):
    want = part(numbers["versions"][name])
    hits = found(pattern)
    assert hits, f"no doc states the {name} version as /{pattern}/ any more"
    wrong = [f"{path}: {m.group(0)!r}, pinned: {want}" for path, m in hits if m.group(1) != want]
    assert not wrong, f"{FIX}:\n" + "\n".join(wrong)


def test_the_test_count_is_about_right():
    """`about N tests` within 15% of what pytest collects (~30 s: it collects the suite)."""
    collected = doc_numbers.collected_tests()
    hits = found(r"\babout ([\d,]+) tests\b")
    assert hits, "no doc says how many tests there are (`about N tests`)"
    wrong = [
        f"{path}: {m.group(0)!r}, collected: {collected} (about {doc_numbers.about(collected)})"
        for path, m in hits
        if abs(as_int(m.group(1)) - collected) > 0.15 * collected
    ]
    assert not wrong, f"{FIX}:\n" + "\n".join(wrong)


def test_the_commands_table_names_every_subcommand_and_what_it_needs(numbers):
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `gpupool ")]
    named = {re.match(r"\| `gpupool ([a-z-]+)", row).group(1) for row in rows}
    assert named == set(numbers["subcommands"]), (
        f"README's commands table names {sorted(named)}; gpupool has {numbers['subcommands']}"
    )
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 3 and cells[2], f"no 'needs' for: {row}"


def _excerpt() -> list[list[str]]:
    """The README's plan, as runs of lines between the `…` that mark what is left out."""
    text = README.read_text()
    section = text[text.index("## What a plan looks like") :]
    block = re.search(r"^```\n(.*?)^```", section, re.M | re.S).group(1)
    runs: list[list[str]] = [[]]
    for line in block.splitlines():
        if line.strip() == "…":
            runs.append([])
        else:
            runs[-1].append(line)
    return [r for r in runs if r]


def test_the_readme_plan_is_what_the_quick_start_prints(monkeypatch, capsys):
    from reconciler.cli import main

    command = "gpupool plan pools policies --observed examples/observed.yaml"
    assert command in (ROOT / "scripts" / "quickstart.sh").read_text()
    assert command in README.read_text()
    monkeypatch.chdir(ROOT)
    assert main(command.split()[1:]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = 0
    for run in _excerpt():
        starts = [i for i in range(at, len(lines) - len(run) + 1) if lines[i : i + len(run)] == run]
        assert starts, (
            "README's plan excerpt is not what the quick start prints today; paste the new one "
            "(abridged with lines of `…`). Missing, in order:\n"
            + "\n".join(run)
            + "\n\nThe plan today:\n"
            + "\n".join(lines)
        )
        at = starts[0] + len(run)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out, seen = set(), {}
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    for line in text.splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        out.update(re.findall(r'<a id="([^"]+)"', line))
    return out


def test_relative_links_and_anchors_resolve():
    broken = []
    for path in DOCS:
        text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file) if file else path
            where = f"{path.relative_to(ROOT)}: ({target})"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)
