"""`gpupool observe`: export the observed state of a cluster as a snapshot file."""

from __future__ import annotations

import argparse
import sys


def cmd_observe(args: argparse.Namespace) -> int:
    from reconciler.observe.kube import make_api_client, observe_cluster
    from reconciler.observe.snapshot import dump_snapshot

    try:
        text = dump_snapshot(
            observe_cluster(make_api_client(args.kubeconfig)),
            "json" if args.out.endswith(".json") else "yaml",
        )
    except Exception as exc:  # noqa: BLE001 - report any client/config failure in one line
        print(f"error: cannot observe the cluster: {exc}", file=sys.stderr)
        return 1
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "observe",
        help="export the cluster's observed state as a snapshot file",
        description=(
            "Read nodes, GPUs (from the node agents), pods and policy objects and write them as "
            "a snapshot for `gpupool plan --observed` (e.g. for pull-request plans in CI)."
        ),
    )
    p.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster config)")
    p.add_argument("--out", default="-", help="file to write (.json or .yaml), - for stdout")
    p.set_defaults(func=cmd_observe)
