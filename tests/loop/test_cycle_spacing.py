"""How the loop spaces the cycles events start (`reconciler/loop/controller.py`,
`next_cycle_at`): at least `--wake-gap` from one start to the next, so a burst is planned
together, and never sooner after a cycle's end than half the time it took, so the controller
cycles at most two thirds of the time however often it is woken."""

from __future__ import annotations

import pytest

from reconciler.loop.controller import WAKE_GAP_SECONDS, next_cycle_at


@pytest.mark.parametrize(
    ("started", "ended", "gap", "at"),
    [
        (10.0, 10.06, 0.1, 10.1),  # a short cycle: the gap from its start
        (10.0, 10.08, 0.1, 10.12),  # over 2/3 of the gap: half as long again after its end
        (10.0, 12.0, 0.1, 13.0),  # a 2 s cycle (a large cluster): 1 s of rest
        (10.0, 10.0, 0.0, 10.0),  # no gap, no time: at once
        (0.0, 0.0, WAKE_GAP_SECONDS, WAKE_GAP_SECONDS),  # before the first cycle: at once
    ],
)
def test_the_next_cycle_waits_for_the_gap_and_half_what_the_last_took(started, ended, gap, at):
    assert next_cycle_at(started, ended, gap) == pytest.approx(at)


def test_a_loop_woken_without_pause_is_busy_at_most_two_thirds_of_the_time():
    start, busy = 0.0, 0.0
    for took in (0.03, 0.3, 1.5, 0.05, 0.08, 2.0, 0.01):  # woken again at once every time
        busy += took
        start = next_cycle_at(start, start + took, WAKE_GAP_SECONDS)
    assert busy <= start * 2 / 3
