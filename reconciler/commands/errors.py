"""What goes wrong outside gpupool, said in one line: the cluster a command talks to and the
files the command line names."""

from __future__ import annotations

import argparse


def kubeconfig_arg(text: str) -> str:
    """argparse type of `--kubeconfig`: an empty value is a usage error, not a silent fall back
    to the in-cluster config."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give the path of a kubeconfig file")
    return text
