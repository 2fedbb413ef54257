"""Print the structural numbers the docs state, read from the tree rather than remembered.

    .venv/bin/python scripts/doc_numbers.py              # everything, as a table
    .venv/bin/python scripts/doc_numbers.py --no-collect # without counting the tests (~30 s)
    .venv/bin/python scripts/doc_numbers.py --json       # the same as JSON

Every figure below has one source in the tree (named next to it). README.md, docs/ and
tests/README.md quote these figures; tests/test_docs_numbers.py fails when a quoted figure
and this script disagree. Timings are not structural (they depend on the machine and its
load) and are not printed here: docs/development.md gives each with its conditions.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the repository's own package first
    sys.path.insert(0, str(ROOT))

GOLDEN = ROOT / "tests" / "golden"
GO_MOD = ROOT / "tests" / "cluster" / "kcp" / "go.mod"
CRDS = ROOT / "tests" / "integration" / "crds.py"
FETCH_PROMETHEUS = ROOT / "scripts" / "fetch-prometheus.sh"
PYPROJECT = ROOT / "pyproject.toml"


def golden_scenarios() -> list[str]:
    """The golden desired/observed/plan triples: one directory each under tests/golden."""
    return sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())


def policy_kinds() -> list[str]:
    from reconciler.policy.models import KINDS

    return list(KINDS)


def catalog_models() -> dict[str, bool]:
    """GPU model -> whether it has MIG, from reconciler/policy/mig_catalog.yaml."""
    from reconciler.policy.catalog import default_catalog

    return {name: m.mig_capable for name, m in default_catalog().models.items()}


def action_kinds() -> list[str]:
    """The `kind` of every action type in the plan's `Action` union."""
    from reconciler.plan.actions import Action

    union = get_args(Action)[0]
    return [cls.model_fields["kind"].default for cls in get_args(union)]


def subcommands() -> list[str]:
    """`gpupool`'s subcommands, as `gpupool --help` lists them."""
    from reconciler.cli import build_parser

    parser = build_parser()
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse keeps them here
        return list(action.choices)
    return []


def placement_shortlist() -> int:
    """How many nodes each placement scores (the planner's and the simulator's shortlist)."""
    from reconciler.plan.run import SHORTLIST

    return SHORTLIST


def github_comment_limit() -> int:
    from reconciler.plan.render import GITHUB_COMMENT_LIMIT

    return GITHUB_COMMENT_LIMIT


def _module_constants(path: Path) -> dict[str, Any]:
    """The module-level NAME = "literal" assignments of a file, read without importing it."""
    out: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def versions() -> dict[str, str]:
    """The versions the docs name, each from the one file that pins it."""
    go_mod = GO_MOD.read_text()
    go = re.search(r"^go (\S+)$", go_mod, re.M)
    kubernetes = re.search(r"^\s*k8s\.io/kubernetes (v\S+)$", go_mod, re.M)
    crds = _module_constants(CRDS)
    prometheus = re.search(r'PROMETHEUS_DEB_VERSION:-([^}"]+)', FETCH_PROMETHEUS.read_text())
    python = tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"]
    if not (go and kubernetes and prometheus):
        raise SystemExit("doc_numbers: a pinned version was not found where it used to be")
    return {
        "python": python.removeprefix(">="),
        "go": go.group(1),
        "kubernetes": kubernetes.group(1),
        "kueue": crds["KUEUE_VERSION"],
        "keda": crds["KEDA_VERSION"],
        "prometheus": prometheus.group(1),
    }


def collected_tests() -> int:
    """How many tests `pytest --collect-only` finds (the whole suite; nothing is run)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^(\d+) tests? collected", proc.stdout, re.M)
    if proc.returncode != 0 or not found:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise SystemExit(
            f"doc_numbers: pytest --collect-only failed (exit {proc.returncode}):\n{tail}"
        )
    return int(found.group(1))


def about(n: int) -> str:
    """A count as the docs round it: two significant figures, thousands with a comma."""
    digits = len(str(n))
    rounded = round(n, 2 - digits) if digits > 2 else n
    return f"{rounded:,}"


def numbers(collect: bool = True) -> dict[str, Any]:
    models = catalog_models()
    out: dict[str, Any] = {
        "golden_scenarios": len(golden_scenarios()),
        "policy_kinds": len(policy_kinds()),
        "policy_kind_names": policy_kinds(),
        "gpu_models": len(models),
        "mig_models": [m for m, mig in models.items() if mig],
        "models_without_mig": [m for m, mig in models.items() if not mig],
        "action_kinds": len(action_kinds()),
        "action_kind_names": action_kinds(),
        "subcommands": subcommands(),
        "placement_shortlist": placement_shortlist(),
        "github_comment_limit": github_comment_limit(),
        "versions": versions(),
    }
    if collect:
        out["tests_collected"] = collected_tests()
        out["tests_about"] = about(out["tests_collected"])
    return out


def render(n: dict[str, Any]) -> str:
    v = n["versions"]
    rows = [
        ("golden scenarios", n["golden_scenarios"], "directories under tests/golden/"),
    ]
    if "tests_collected" in n:
        rows.append(
            (
                "tests collected",
                f"{n['tests_collected']} (docs: about {n['tests_about']})",
                "pytest --collect-only",
            )
        )
    rows += [
        (
            "policy kinds",
            f"{n['policy_kinds']}: {', '.join(n['policy_kind_names'])}",
            "KINDS, reconciler/policy/models.py",
        ),
        (
            "GPU models in the catalog",
            f"{n['gpu_models']}; with MIG {len(n['mig_models'])}: {', '.join(n['mig_models'])}; "
            f"without: {', '.join(n['models_without_mig'])}",
            "reconciler/policy/mig_catalog.yaml",
        ),
        (
            "action kinds",
            f"{n['action_kinds']}: {', '.join(n['action_kind_names'])}",
            "Action, reconciler/plan/actions.py",
        ),
        (
            "gpupool subcommands",
            f"{len(n['subcommands'])}: {', '.join(n['subcommands'])}",
            "reconciler/cli.py, reconciler/commands/",
        ),
        (
            "placement shortlist",
            f"{n['placement_shortlist']} nodes",
            "SHORTLIST, reconciler/plan/run.py",
        ),
        (
            "GitHub comment limit",
            f"{n['github_comment_limit']:,} characters",
            "GITHUB_COMMENT_LIMIT, reconciler/plan/render.py",
        ),
        ("Python", f">= {v['python']}", "requires-python, pyproject.toml"),
        ("Go", f">= {v['go']}", "go directive, tests/cluster/kcp/go.mod"),
        ("Kubernetes (control plane)", v["kubernetes"], "tests/cluster/kcp/go.mod"),
        ("Kueue CRDs", v["kueue"], "KUEUE_VERSION, tests/integration/crds.py"),
        ("KEDA CRDs", v["keda"], "KEDA_VERSION, tests/integration/crds.py"),
        ("Prometheus (Debian package)", v["prometheus"], "scripts/fetch-prometheus.sh"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name:<{width}}  {value}  [{src}]" for name, value, src in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-collect", action="store_true", help="do not count the tests")
    args = p.parse_args(argv)
    n = numbers(collect=not args.no_collect)
    print(json.dumps(n, indent=2) if args.json else render(n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
