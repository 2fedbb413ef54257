"""No module imports a test module: what several test modules share lives in a support module
not named `test_*` (tests/README.md, "Shared helpers"): a test module that others import
cannot change its tables or drop a helper without breaking them.

Every Python file under tests/, bench/ and scripts/ is read with `ast`: its `import` and
`from ... import` statements (at any depth, relative ones resolved against the file's
package) must not name a module that is a `test_*.py` file of this repository.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "bench", "scripts")


def dotted(path: Path) -> str:
    """The module name of a file under ROOT: tests/plan/test_steps.py -> tests.plan.test_steps."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def all_test_modules() -> set[str]:
    return {dotted(p) for folder in SCANNED for p in (ROOT / folder).rglob("test_*.py")}


def imported(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for every module an import statement of `source` may load; `package` is
    the importing file's package, for relative imports. `from P import n` names P and P.n (n
    may be a submodule: `from tests.plan import test_steps`)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def imports_of_tests(path: Path, tests: set[str]) -> list[str]:
    """`path:line imports module` for each test module the file at `path` imports."""
    package = dotted(path.parent) if path.parent != ROOT else ""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for line, module in imported(path.read_text(), package)
        if module in tests and module != dotted(path)
    ]


def test_no_module_imports_a_test_module():
    tests = all_test_modules()
    files = sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))
    assert len(tests) > 50 and len(files) > len(tests), "the scan does not see the repository"
    found = [hit for path in files for hit in imports_of_tests(path, tests)]
    assert not found, (
        "move what is shared into a support module not named test_* (tests/README.md):\n"
        + "\n".join(found)
    )


def test_the_check_sees_every_form_of_import():
    tests = {"tests.plan.test_steps", "tests.policy.test_loader"}
    source = """\
import tests.plan.test_steps
import tests.plan.scenarios
from tests.plan.test_steps import run
from tests.plan import test_steps, scenarios
from .test_loader import CASES
from . import test_loader
from .. import plan
from tests.plan.scenarios import test_like_name


def later():
    from tests.plan.test_steps import desired
"""
    hits = sorted(
        (line, module) for line, module in imported(source, "tests.policy") if module in tests
    )
    assert hits == [
        (1, "tests.plan.test_steps"),
        (3, "tests.plan.test_steps"),
        (4, "tests.plan.test_steps"),
        (5, "tests.policy.test_loader"),
        (6, "tests.policy.test_loader"),
        (12, "tests.plan.test_steps"),
    ]
