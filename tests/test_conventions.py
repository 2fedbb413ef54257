"""Every label, annotation and resource key gpupool shares with the cluster is spelled once, in
reconciler/conventions.py; any other module that writes one as a string literal fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "reconciler"
# a key-shaped literal (no spaces): a label, annotation or resource name, also as a quota's
# `requests.` key or the start of an f-string; YAML examples in documentation are not keys
KEY = re.compile(
    r"^((requests|limits)\.)?(gpupool\.io|nvidia\.com|app\.kubernetes\.io|kueue\.x-k8s\.io|scheduling\.x-k8s\.io)/\S*$"
)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
        else:
            continue
        for stmt in body:  # a docstring, or a string under an assignment (attribute docs)
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                ids.add(id(stmt.value))
    return ids


def key_literals(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docs
        and KEY.match(n.value)
    ]


def test_no_key_is_spelled_outside_conventions():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "conventions.py" and path.parent == PACKAGE:
            continue
        found += [
            f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
            for line, text in key_literals(path.read_text())
        ]
    assert not found, "use reconciler.conventions instead:\n" + "\n".join(found)


def test_the_check_sees_literals_and_f_strings_but_not_docs():
    src = (
        'def f():\n    """gpupool.io/gpus is documented here."""\n    x = "gpupool.io/pool"\n'
        '    y = "requests.nvidia.com/gpu"\n    z = "see gpupool.io/pool"\n'
        '    return f"nvidia.com/mig-{x}"\n'
    )
    assert [line for line, _ in key_literals(src)] == [3, 4, 6]
