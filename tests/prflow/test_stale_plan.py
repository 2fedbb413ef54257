"""`plan --out` records fingerprints; `apply` refuses a plan whose inputs changed."""

from __future__ import annotations

import json
from pathlib import Path

from reconciler.cli import main


def test_saved_plan_is_current_then_stale(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert set(saved["fingerprint"]) == {"desired", "observed"}
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
