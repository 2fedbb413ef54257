"""What the controller pays each cycle to read its policies, with and without `LoadMemo`.

    .venv/bin/python bench/policy_load.py                     # the example, +100, +1,000 teams
    .venv/bin/python bench/policy_load.py --teams 0,5000 --repeat 3
    .venv/bin/python bench/policy_load.py --smoke             # +10 teams, once (the test suite)

The repository's example policies (pools/, policies/), then the same with a Quota file of N
more teams (one Quota each: its own namespace, borrowing up to 8 H100s, nothing guaranteed)
as a large organisation's repository would hold. Per row: the files' size, one `load` (parse,
validate, cross-check: what every cycle did before the memo; best of `--repeat`), and a read
of the same unchanged files through a warm `LoadMemo` (what a cycle does now while the
policies do not change; median of 100). Exit 0 always: figures are for reading.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.policy.files import SourceFile, files_from_paths  # noqa: E402
from reconciler.policy.loader import LoadMemo, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMOKE = "--teams 10 --repeat 1"


def teams_file(n: int) -> SourceFile:
    """A Quota file of `n` teams (one document each)."""
    docs = [
        "apiVersion: gpupool.io/v1alpha1\nkind: Quota\n"
        f"metadata:\n  name: team-{i:05d}\n"
        f"spec:\n  namespaces: [team-{i:05d}]\n  pools:\n"
        "    - pool: h100\n      whole: {guaranteed: 0, borrowingLimit: 8}\n"
        for i in range(n)
    ]
    return SourceFile("policies/teams.yaml", "---\n".join(docs))


def row(teams: int, repeat: int) -> str:
    files = files_from_paths([ROOT / "pools", ROOT / "policies"])
    if teams:
        files = [*files, teams_file(teams)]
    kb = sum(len(f.text.encode()) for f in files) / 1024
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        load(files, revision="r")
        best = min(best, time.perf_counter() - t)
    memo = LoadMemo()
    memo.load(files, revision="r")
    reads = []
    for _ in range(100):
        again = [SourceFile(f.path, f.text) for f in files]  # a new read: equal, not the same
        t = time.perf_counter()
        memo.load(again, revision="r")
        reads.append(time.perf_counter() - t)
    assert memo.loads == 1
    label = "example" if not teams else f"example + {teams:,} teams"
    return (
        f"| {label} | {len(files)} | {kb:,.0f} | {best * 1000:,.1f} | "
        f"{statistics.median(reads) * 1000:.3f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teams", default="0,100,1000", help="extra teams per row (comma-separated)")
    ap.add_argument("--repeat", type=int, default=3, help="loads per row, the best counted")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes: {SMOKE}")
    args = ap.parse_args(argv)
    if args.smoke:
        args = ap.parse_args(SMOKE.split())
    print("| policies | files | KB | load ms (every cycle before) | memo ms (unchanged read) |")
    print("|---|---:|---:|---:|---:|")
    for n in (int(x) for x in args.teams.split(",")):
        print(row(n, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
