"""`LoadMemo`: the controller parses its policies once per content of the source."""

from __future__ import annotations

import pytest

from reconciler.policy.files import SourceFile, files_from_paths
from reconciler.policy.loader import LoadMemo, load
from reconciler.policy.problems import InvalidDesiredState
from tests.policy.loading import HERE

ROOT = HERE.parents[1]


def example() -> list[SourceFile]:
    return files_from_paths([ROOT / "pools", ROOT / "policies"])


def test_the_same_files_give_the_same_state_without_a_parse():
    memo = LoadMemo()
    first = memo.load(example(), revision="r1")
    again = memo.load(example(), revision="r1")  # read again: equal files, new objects
    assert again is first and memo.loads == 1
    assert first == load(example(), revision="r1")


def test_a_changed_text_a_changed_revision_or_another_file_loads_again():
    memo = LoadMemo()
    files = example()
    first = memo.load(files, revision="r1")
    assert memo.load(files, revision="r2").revision == "r2" and memo.loads == 2
    edited = [*files[:-1], SourceFile(files[-1].path, files[-1].text + "# a comment\n")]
    changed = memo.load(edited, revision="r2")  # any change of text: parsed again
    assert changed is not first and changed == load(edited, revision="r2") and memo.loads == 3
    assert memo.load(files[:-1], revision="r2") is not changed and memo.loads == 4


def test_bad_policies_raise_their_problems_every_time_and_parse_once():
    memo = LoadMemo()
    bad = [SourceFile("pool.yaml", "apiVersion: gpupool.io/v1alpha1\nkind: Pool\nspec: {}\n")]
    with pytest.raises(InvalidDesiredState) as one:
        memo.load(bad)
    depth = len(list(_frames(one.value.__traceback__)))
    for _ in range(3):
        with pytest.raises(InvalidDesiredState) as again:
            memo.load(bad)
        assert again.value.problems == one.value.problems
        # the traceback does not grow with each raise of the kept exception
        assert len(list(_frames(again.value.__traceback__))) == depth
    assert memo.loads == 1
    good = example()
    assert memo.load(good) == load(good) and memo.loads == 2


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next
