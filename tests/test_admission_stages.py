"""bench/admission_stages.py's figures from a saved run: `idle_by_kind` splits the admitted
pods by how their cards became ready, and `main` prints a run's table from its JSON."""

from __future__ import annotations

import json

import pytest

from bench.admission_stages import (
    arrival_legs,
    card_time,
    idle_by_kind,
    main,
    pairs_line,
    timeline,
)


def test_idle_by_kind_splits_arrivals_from_hand_offs():
    pods = {
        "a": {"created": 1.0, "ready": 1.0, "taken": 1.04},  # cards were free: an arrival
        "b": {"created": 1.0, "ready": 2.0, "taken": 2.01},  # a release on its node: hand-off
        "c": {"created": 1.0, "ready": 1.0},  # not taken (never started)
    }
    got = idle_by_kind(pods)
    assert got["arrival"][0] == 1 and got["hand-off"][0] == 1 and got["all"][0] == 2
    assert got["all"][1] == pytest.approx(0.05)


def test_main_prints_the_runs_of_a_saved_json(tmp_path, capsys):
    timeline = {"p": {"created": 0.0, "ready": 0.0, "admitted": 0.01, "taken": 0.03}}
    run = {"name": "dra-gpupool", "mean_alloc": 0.73981, "notes": {"timeline": timeline}}
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"results": [run, {"name": "default", "mean_alloc": 0.7}]}))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "dra-gpupool: GPU allocation, time-weighted mean sampled every 0.25 s 73.981 %" in out
    assert "ready -> card taken by kind, mean ms (pods): arrival 30.0 (1), all 30.0 (1)" in out
    assert "default" not in out  # no timeline: not a gated run


def test_main_prints_the_controllers_cpu_beside_the_wall(tmp_path, capsys):
    """The cycles that admitted: wall per phase, then the controller thread's CPU per phase
    (runs saved before 2026-12-07 09:20 UTC have the wall only: no second line)."""
    timeline = {"p": {"created": 0.0, "claimed": 0.02, "ready": 0.0, "taken": 0.05}}
    phases = {"observe": 0.008, "observe cpu": 0.004, "plan": 0.012, "plan cpu": 0.009}
    notes = {"timeline": timeline, "admitting_cycles": 3, "admitting_phases": phases}
    path = tmp_path / "run.json"
    run = {"name": "dra-gpupool", "mean_alloc": 0.7, "notes": notes}
    path.write_text(json.dumps({"results": [run]}))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "the 3 cycles that admitted, mean wall s: observe 0.008, plan 0.012\n" in out
    assert "of which the controller's thread on a CPU, s: observe 0.004, plan 0.009" in out
    assert "creation -> claim named" in out
    del phases["observe cpu"], phases["plan cpu"]
    run = {"name": "dra-gpupool", "mean_alloc": 0.7, "notes": notes}
    path.write_text(json.dumps({"results": [run]}))
    assert main([str(path)]) == 0
    assert "on a CPU" not in capsys.readouterr().out


def test_a_release_seen_after_the_step_but_before_the_card_was_taken_counts():
    """The replay's watches may see a release late (the step that waited for it has ended);
    a release seen before the pod's card was seen taken is still what the pod waited for."""
    pods = {
        "old": {"gone": 6.56, "freed": 6.764},  # seen freed after the next pod's step ended
        "earlier": {"gone": 0.0, "freed": 0.0},
        "next": {"created": -4.0, "step": 6.551, "step_end": 6.627, "allocated": 6.765},
    }
    node_of = dict.fromkeys(pods, "n")
    t = timeline(pods, node_of, dra=True)["next"]
    assert (t["ready"], t["taken"]) == (6.764, 6.765)
    # on the device plugin the card is taken when the pod runs
    dp = {
        "old": {"gone": 6.56},
        "next": {"created": -4.0, "step": 6.5, "step_end": 6.55, "running": 6.6},
    }
    assert timeline(dp, dict.fromkeys(dp, "n"), dra=False)["next"]["ready"] == 6.56


def test_several_paired_runs_end_with_dra_minus_the_device_plugin(tmp_path, capsys):
    """Given several runs with both gated arms, a last line: DRA minus device plugin over them
    (mean, range, how many at least 0); one run, or a run without both arms, adds none."""
    paths = []
    for i, (dp, dra) in enumerate([(0.7395, 0.7396), (0.7395, 0.73935), (0.74, None)]):
        runs = [{"name": "gpupool", "mean_alloc": dp, "notes": {}}]
        if dra is not None:
            runs.append({"name": "dra-gpupool", "mean_alloc": dra, "notes": {}})
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps({"results": runs}))
        paths.append(str(path))
    assert main(paths) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (
        "== dra-gpupool minus gpupool, GPU allocation sampled every 0.25 s, over 2 runs: mean "
        "-0.0025 point (standard error 0.0125), -0.0150 to +0.0100, at least 0 in 1"
    )
    assert main(paths[:1]) == 0
    assert "minus" not in capsys.readouterr().out
    assert pairs_line([0.0, 0.0]).endswith("at least 0 in 2")


def test_card_time_counts_each_pods_cards_from_taken_to_free_again():
    """From the watch's times, no sampling: the device plugin's cards from the pod running to
    the pod gone; DRA's from the claim allocated to its allocation gone (`freed`, else the pod
    gone), or to the pod gone (`to_pod_end`); within the horizon; over the capacity."""
    dp = {
        "a": {"running": 1.0, "gone": 3.0},  # 2 s x 2 cards
        "b": {"running": 9.0},  # runs past the horizon: 1 s x 1 card
        "c": {"created": 0.0},  # never ran
    }
    cards = {"a": 2, "b": 1, "c": 4}
    assert card_time(dp, cards, False, 10.0, 5) == pytest.approx(5 / 50)
    dra = {"a": {"allocated": 1.0, "gone": 3.0, "freed": 3.5}, "b": {"allocated": 9.0}}
    assert card_time(dra, cards, True, 10.0, 5) == pytest.approx(6 / 50)
    assert card_time(dra, cards, True, 10.0, 5, to_pod_end=True) == pytest.approx(5 / 50)
    assert card_time({"c": {"created": 0.0}}, cards, True, 10.0, 5) is None


def test_main_judges_the_pairs_by_each_measure_and_shows_the_other_cycles(tmp_path, capsys):
    """A saved pair with each pod's cards: the allocation sampled, from the watch's times and
    to each pod's end, each with its pairs line; the cycles that admitted nothing beside
    those that did."""
    workload = {"cards": 4, "t_last": 100.0, "speed": 10.0}  # a horizon of 10 wall s
    cards = {"p": 2}
    phases = {"observe": 0.004, "plan": 0.006}
    paths = []
    for i in range(2):
        runs = [
            {
                "name": "gpupool",
                "mean_alloc": 0.40,
                "notes": {
                    "timeline": {"p": {"created": 0.0, "running": 1.0, "gone": 5.0}},
                    "cards_of": cards,
                    "other_cycles": 7,
                    "other_phases": phases,
                },
            },
            {
                "name": "dra-gpupool",
                "mean_alloc": 0.41,
                "notes": {
                    "timeline": {
                        "p": {"created": 0.0, "allocated": 0.9, "gone": 5.0, "freed": 5.1}
                    },
                    "cards_of": cards,
                },
            },
        ]
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps({"workload": workload, "results": runs}))
    assert main([str(p) for p in paths]) == 0
    out = capsys.readouterr().out
    assert "the 7 cycles that admitted nothing, mean wall s: observe 0.004, plan 0.006" in out
    assert (
        "gpupool: GPU allocation, time-weighted mean sampled every 0.25 s 40.000 %; from the "
        "watch's times 20.000 %; to each pod's end 20.000 %"
    ) in out
    lines = out.strip().splitlines()[-3:]
    assert lines[0].startswith("== dra-gpupool minus gpupool, GPU allocation sampled every ")
    assert "from the watch's times, over 2 runs: mean +1.0000 point" in lines[1]
    assert "to each pod's end, over 2 runs: mean +0.5000 point" in lines[2]


def test_arrival_legs_split_an_arrivals_wait_at_its_cycle_and_its_step():
    """Over the arrivals an Admit step admitted (hand-offs and pods without the controller's
    record left out): creation -> cycle start -> Admit step -> card taken, mean ms."""
    pods = {
        "a": {"created": 0.0, "ready": 0.0, "cycle": 0.010, "step": 0.030, "taken": 0.050},
        "b": {"created": 1.0, "ready": 1.0, "cycle": 1.030, "step": 1.040, "taken": 1.070},
        "c": {"created": 0.0, "ready": 2.0, "cycle": 2.0, "step": 2.01, "taken": 2.02},  # hand-off
        "d": {"created": 0.0, "ready": 0.0, "taken": 0.5},  # no record of its cycle
    }
    assert arrival_legs(pods) == pytest.approx((20.0, 15.0, 25.0))
    assert arrival_legs({"d": pods["d"]}) is None
