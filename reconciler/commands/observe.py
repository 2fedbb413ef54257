"""`gpupool observe`: export the observed state of a cluster as a snapshot file."""

from __future__ import annotations

import argparse
import sys


def cmd_observe(args: argparse.Namespace) -> int:
    from reconciler.commands.errors import api_client, talking_to, write_text
    from reconciler.observe.kube import observe_cluster
    from reconciler.observe.snapshot import dump_snapshot

    desired = None
    if args.prometheus_url:  # the policies say which queries; their readings go in the file
        from reconciler.commands.policy import load_from_args, report_load_error
        from reconciler.policy.files import SourceError
        from reconciler.policy.problems import InvalidInput

        try:
            desired = load_from_args(args)
        except (SourceError, InvalidInput) as exc:
            return report_load_error(exc)
    api = api_client(args.kubeconfig)
    with talking_to(api, args.kubeconfig):
        observed = observe_cluster(api)
    if desired is not None:
        from reconciler.loop.signals import with_signals

        observed = with_signals(
            desired, observed, args.prometheus_url, timeout=args.prometheus_timeout
        )
    text = dump_snapshot(observed, "json" if args.out.endswith(".json") else "yaml")
    if args.out == "-":
        sys.stdout.write(text)
    else:
        write_text(args.out, text)
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
    from reconciler.commands.errors import kubeconfig_arg
    from reconciler.commands.policy import add_source_args
    from reconciler.loop.signals import add_prometheus_args

    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=kubeconfig_arg,
        help="the cluster to read (default: the in-cluster config)",
    )
    p.add_argument(
        "--out", default="-", help="file to write (.json or .yaml), - for stdout (default: -)"
    )
    add_prometheus_args(p)
    add_source_args(p)  # with --prometheus-url: the policies whose queries are read
    p.set_defaults(func=cmd_observe)
