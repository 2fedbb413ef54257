"""Help that helps: every option of every `gpupool` command says what it is for and, when it
has a default, what that default is (argparse's own text, `%(default)s` or "(default ...)").

The environment can change a default (POD_NAMESPACE, GITHUB_API_URL, ...): the parsers are
built here with none of those set, so the default shown is the one in the help text.
"""

from __future__ import annotations

import argparse

import pytest

from reconciler.cli import build_parser, subparsers

ENV_DEFAULTS = ("POD_NAMESPACE", "POD_RESOURCES_SOCKET", "GITHUB_API_URL", "NODE_NAME", "POD_NAME")


@pytest.fixture(autouse=True)
def no_env_defaults(monkeypatch):
    for name in ENV_DEFAULTS:
        monkeypatch.delenv(name, raising=False)


def gaps(parser: argparse.ArgumentParser) -> set[str]:
    """What an option's help lacks: any text, or its default."""
    formatter = parser._get_formatter()
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        name = action.option_strings[-1] if action.option_strings else action.metavar or action.dest
        if not action.help or action.help is argparse.SUPPRESS or not action.help.strip():
            found.add(f"{name}: no help")
            continue
        shown = formatter._expand_help(action)
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS):
            continue
        if "default" not in shown.lower():
            found.add(f"{name}: default {default!r} not shown")
    return found


@pytest.mark.parametrize("command", sorted(subparsers(build_parser())))
def test_every_option_has_help_and_shows_its_default(command):
    sub = subparsers(build_parser())[command]
    assert gaps(sub) == set()


def test_gpupool_itself():
    assert gaps(build_parser()) == set()


def test_defaults_are_in_the_rendered_help():
    """The formatter shows the default where the help text does not (reconcile --path)."""
    text = subparsers(build_parser())["reconcile"].format_help()
    assert "(default: .)" in " ".join(text.split())


@pytest.mark.parametrize(
    ("command", "option", "shown"),
    [
        ("agent", "--interval", "(default 30s)"),
        ("reconcile", "--namespace", "gpupool-system"),
        ("reconcile", "--health-port", "(default 8080)"),
        ("pr-comment", "--token-env", "(default: GITHUB_TOKEN)"),
        ("pr-comment", "--api-url", "https://api.github.com"),
        ("plan", "--format", "(default: text)"),
        ("validate", "--format", "(default: text)"),
    ],
)
def test_the_known_gaps_are_closed(command, option, shown):
    text = " ".join(subparsers(build_parser())[command].format_help().split())
    at = text.index(option + " ", text.index("options:"))
    assert shown in text[at : at + 400]
