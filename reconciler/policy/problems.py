"""A problem found in the desired state, located by file, line, column and field path."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True, slots=True)
class Problem:
    file: str
    line: int  # 1-based; 0 when unknown
    column: int  # 1-based; 0 when unknown
    path: str  # field path, e.g. "spec.inference.mig.layouts[0].profiles"
    message: str
    document: str = ""  # "Pool/a100" when known

    def __str__(self) -> str:
        where = self.file
        if self.line:
            where += f":{self.line}:{self.column}"
        what = f"{self.document} " if self.document else ""
        field = f"{self.path}: " if self.path else ""
        return f"{where}: {what}{field}{self.message}"


class InvalidInput(Exception):
    """A file given to gpupool cannot be used; carries every problem found, never just the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class InvalidDesiredState(InvalidInput):
    """Policy files (pools/, policies/) that cannot be used."""
