"""How the loop spaces the cycles events start (`reconciler/loop/controller.py`,
`next_cycle_at`): at least `--wake-gap` from one start to the next, so a burst is planned
together; a cycle that took longer than the gap is followed at once (no rest after it: one
of half a cycle's length slowed the reaction at 1,000 nodes, bench/README.md)."""

from __future__ import annotations

import pytest

from reconciler.loop.controller import WAKE_GAP_SECONDS, next_cycle_at


@pytest.mark.parametrize(
    ("started", "ended", "gap", "at"),
    [
        (10.0, 10.04, 0.1, 10.1),  # a short cycle: the gap from its start
        (10.0, 12.0, 0.1, 10.1),  # a 2 s cycle (a large cluster): at once after it
        (10.0, 10.0, 0.0, 10.0),  # no gap: at once
        (0.0, 0.0, WAKE_GAP_SECONDS, WAKE_GAP_SECONDS),  # the first cycle: at once
    ],
)
def test_the_next_cycle_waits_for_the_gap_from_the_last_start(started, ended, gap, at):
    assert next_cycle_at(started, ended, gap) == pytest.approx(at)
