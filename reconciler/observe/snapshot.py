"""Snapshot files: the observed state as YAML or JSON (`gpupool plan --observed FILE`)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from reconciler.observe.model import ObservedState
from reconciler.policy.loader import format_path, locate
from reconciler.policy.problems import InvalidInput, Problem


class InvalidSnapshot(InvalidInput):
    """An observed-state file that cannot be used; carries every problem found."""


def parse_snapshot(text: str, name: str = "<snapshot>") -> ObservedState:
    try:
        if name.endswith(".json"):
            data = json.loads(text)
        else:
            data = YAML(typ="safe", pure=False).load(text)
    except (json.JSONDecodeError, MarkedYAMLError, YAMLError) as exc:
        line = (
            getattr(exc, "lineno", 0) or getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
        )
        raise InvalidSnapshot([Problem(name, line, 0, "", f"cannot parse: {exc}")]) from None
    if not isinstance(data, dict):
        raise InvalidSnapshot(
            [
                Problem(
                    name, 1, 1, "", "an observed-state file is a mapping with kind: ObservedState"
                )
            ]
        )
    try:
        return ObservedState.model_validate(data)
    except ValidationError as exc:
        node = YAML(typ="rt").load(text)  # again, with positions, only to place the messages
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            line, col = locate(node, loc)
            msg = f"unknown field {loc[-1]!r}" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(Problem(name, line, col, format_path(loc), msg, "ObservedState"))
        raise InvalidSnapshot(problems) from None


def load_snapshot(path: str | Path) -> ObservedState:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidSnapshot([Problem(str(p), 0, 0, "", f"cannot read: {exc}")]) from None
    return parse_snapshot(text, str(p))


def dump_snapshot(state: ObservedState, fmt: str = "yaml") -> str:
    data = state.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data = {"apiVersion": state.api_version, "kind": state.kind, **data}
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False) + "\n"
    import io

    buf = io.StringIO()
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.sort_base_mapping_type_on_output = False
    y.dump(data, buf)
    return buf.getvalue()
