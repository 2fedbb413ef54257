"""`plan --out` records fingerprints; `apply` refuses a plan whose inputs changed, and a plan
whose actions are not what gpupool plans from those inputs (edited after it was saved)."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.cli import main


def test_saved_plan_is_current_then_stale(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert set(saved["fingerprint"]) == {"desired", "observed", "actions", "revision"}
    assert all(v.startswith("sha256:") for v in saved["fingerprint"].values())
    capsys.readouterr()

    assert (
        main(["apply", str(out), "pools", "policies", "--observed", "examples/observed.yaml"]) == 0
    )
    assert "plan is current" in capsys.readouterr().out

    # utilization moves every second: not a reason to refuse
    text = Path("examples/observed.yaml").read_text()
    noisy = tmp_path / "noisy.yaml"
    noisy.write_text(text.replace("utilization: 70.0", "utilization: 71.0"))
    assert main(["apply", str(out), "pools", "policies", "--observed", str(noisy)]) == 0
    capsys.readouterr()

    # a pod finished: the cluster changed
    moved = tmp_path / "moved.yaml"
    moved.write_text(text.replace("name: chat-llm-0\n", "name: chat-llm-0x\n", 1))
    assert main(["apply", str(out), "pools", "policies", "--observed", str(moved)]) == 1
    assert "saved plan is stale: the cluster changed" in capsys.readouterr().err

    # the policy changed
    policies = tmp_path / "policies"
    policies.mkdir()
    for f in ("quotas", "priority", "scaling", "maintenance", "change"):
        (policies / f"{f}.yaml").write_text(Path(f"policies/{f}.yaml").read_text())
    (policies / "maintenance.yaml").write_text(
        Path("policies/maintenance.yaml").read_text().replace("idleFor: 1h", "idleFor: 2h")
    )
    assert (
        main(["apply", str(out), "pools", str(policies), "--observed", "examples/observed.yaml"])
        == 1
    )
    assert "the desired state changed" in capsys.readouterr().err


def test_apply_rejects_a_file_that_is_not_a_plan(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"actions": 3}')
    assert (
        main(["apply", str(bad), "pools", "policies", "--observed", "examples/observed.yaml"]) == 1
    )
    assert "not a saved plan" in capsys.readouterr().err


APPLY = ["pools", "policies", "--observed", "examples/observed.yaml"]


def saved_plan(tmp_path) -> tuple[Path, dict]:
    out = tmp_path / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def edits(saved: dict) -> list[tuple[str, dict]]:
    """Edits an attacker or a careless hand makes to a saved plan's actions."""
    acts = saved["actions"]
    assert len(acts) >= 2, "the example plan should have a few actions"
    retarget = json.loads(json.dumps(saved))
    retarget["actions"][0]["target"] = "kube-system/coredns"
    dropped = json.loads(json.dumps(saved))
    dropped["actions"] = acts[1:]
    swapped = json.loads(json.dumps(saved))
    swapped["actions"] = [acts[1], acts[0], *acts[2:]]
    added = json.loads(json.dumps(saved))
    added["actions"] = [*acts, {**acts[0], "id": acts[0]["id"] + "-again"}]
    return [("retarget", retarget), ("drop", dropped), ("swap", swapped), ("add", added)]


def test_an_edited_plan_is_refused_even_with_its_digest_recomputed(tmp_path, capsys):
    from reconciler.plan.fingerprint import actions_fingerprint
    from reconciler.plan.model import Plan

    out, saved = saved_plan(tmp_path)
    for name, edited in edits(saved):
        for recompute in (False, True):
            if recompute:  # whoever edits the actions can recompute their digest too
                plan = Plan.model_validate(edited)
                edited["fingerprint"]["actions"] = actions_fingerprint(plan.actions)
            out.write_text(json.dumps(edited))
            capsys.readouterr()
            assert main(["apply", str(out), *APPLY]) == 1, (name, recompute)
            err = capsys.readouterr().err
            assert "refused, nothing applied" in err, (name, err)
            assert ("were edited after it was saved" in err) != recompute, (name, err)
            assert "not what gpupool plans from these inputs" in err, (name, err)
    out.write_text(json.dumps(saved))
    assert main(["apply", str(out), *APPLY]) == 0


def _apply(path: Path) -> int:
    return main(["apply", str(path), "pools", "policies", "--observed", "examples/observed.yaml"])


def test_what_a_reviewer_reads_cannot_be_edited_either(tmp_path, capsys):
    """Findings and the capacity table are what a reviewer reads: edited, the plan is refused
    like one with edited actions (nothing of it is applied)."""
    out = tmp_path / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["findings"] and saved["capacity"]
    capsys.readouterr()
    quiet = tmp_path / "quiet.json"
    quiet.write_text(json.dumps({**saved, "findings": saved["findings"][1:]}))
    assert _apply(quiet) == 1
    assert "its findings are not what gpupool finds" in capsys.readouterr().err
    pool = next(iter(saved["capacity"]))
    grown = {**saved["capacity"], pool: {k: v + 1 for k, v in saved["capacity"][pool].items()}}
    bigger = tmp_path / "bigger.json"
    bigger.write_text(json.dumps({**saved, "capacity": grown}))
    assert _apply(bigger) == 1
    assert "its capacity table is not" in capsys.readouterr().err


def test_a_plan_file_that_does_not_parse_is_one_located_line(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    raw = out.read_text()
    capsys.readouterr()
    cases = {
        # a repeated key: json would keep the last one silently
        "dup.json": ('{"actions": [], ' + raw[1:]).encode(),
        "bytes.json": raw.encode().replace(b'"reason"', b'"re\xffson"', 1),
        "deep.json": ("[" * 100_000 + "]" * 100_000).encode(),
    }
    expect = {
        "dup.json": 'duplicate key "actions"',
        "bytes.json": "column",
        "deep.json": "not a saved plan",
    }
    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert _apply(p) == 1, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert expect[name] in err and name in err, err
    line = raw.encode().split(b'"reason"', 1)[0].count(b"\n") + 1
    p = tmp_path / "bytes.json"
    _apply(p)
    assert f"line {line}," in capsys.readouterr().err
