"""Parse desired-state YAML with positions, validate each document, collect every problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from reconciler.spec.catalog import Catalog, default_catalog
from reconciler.spec.models import API_VERSION, KINDS, Model
from reconciler.spec.problems import InvalidDesiredState, Problem
from reconciler.spec.sources import SourceFile
from reconciler.spec.state import DesiredState, Located


@dataclass(frozen=True, slots=True)
class RawDocument:
    file: str
    index: int  # position of the document in its file
    node: Any  # the ruamel round-trip node (CommentedMap for a good document)
    line: int
    column: int


def _plain(node: Any) -> Any:
    """ruamel round-trip types -> plain Python (so strict validation sees ordinary types)."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, str) else k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def locate(node: Any, path: tuple) -> tuple[int, int]:
    """1-based (line, column) of the deepest element of `path` that exists in the YAML node."""
    line, col = (node.lc.line + 1, node.lc.col + 1) if hasattr(node, "lc") else (0, 0)
    for part in path:
        if isinstance(node, CommentedMap) and part in node:
            kl, kc = node.lc.key(part)
            line, col = kl + 1, kc + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            il, ic = node.lc.item(part)
            line, col = il + 1, ic + 1
            node = node[part]
        else:
            break
    return line, col


def format_path(path: tuple) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_files(files: list[SourceFile]) -> tuple[list[RawDocument], list[Problem]]:
    docs: list[RawDocument] = []
    problems: list[Problem] = []
    for f in files:
        yaml = YAML(typ="rt")
        yaml.allow_duplicate_keys = False
        try:
            loaded = list(yaml.load_all(f.text))
        except MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
            msg = " ".join(str(x) for x in (exc.context, exc.problem) if x)
            problems.append(Problem(f.path, line, col, "", f"invalid YAML: {msg}"))
            continue
        except YAMLError as exc:
            problems.append(Problem(f.path, 0, 0, "", f"invalid YAML: {exc}"))
            continue
        for i, node in enumerate(loaded):
            if node is None:
                continue  # an empty document (e.g. a trailing ---)
            if not isinstance(node, CommentedMap):
                line = node.lc.line + 1 if hasattr(node, "lc") else 0
                problems.append(
                    Problem(f.path, line, 1, "", f"document {i + 1} is not a mapping with apiVersion/kind/metadata/spec")
                )
                continue
            docs.append(RawDocument(f.path, i, node, node.lc.line + 1, node.lc.col + 1))
    return docs, problems


def _friendly(err: dict) -> str:
    kind = err["type"]
    loc = err["loc"]
    if kind == "extra_forbidden":
        return f"unknown field {loc[-1]!r}"
    if kind == "missing":
        return f"missing required field {loc[-1]!r}"
    msg = err["msg"]
    if "input" in err and not isinstance(err["input"], dict | list):
        msg += f" (got {err['input']!r})"
    return msg


def validate_document(raw: RawDocument) -> tuple[Located | None, list[Problem]]:
    node = raw.node
    kind = node.get("kind")
    api = node.get("apiVersion")
    name = node.get("metadata", {}).get("name") if isinstance(node.get("metadata"), dict) else None
    label = f"{kind}/{name}" if kind and name else (str(kind) if kind else "")
    problems: list[Problem] = []

    def add(path: tuple, msg: str) -> None:
        line, col = locate(node, path)
        problems.append(Problem(raw.file, line, col, format_path(path), msg, label))

    if api != API_VERSION:
        add(("apiVersion",), f"apiVersion must be {API_VERSION!r} (got {api!r})")
    if kind not in KINDS:
        add(("kind",), f"unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
        return None, problems
    cls: type[Model] = KINDS[kind]
    try:
        model = cls.model_validate(_plain(node))
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            if err["loc"] == ("apiVersion",) and api != API_VERSION:
                continue  # already reported in plain words
            add(tuple(err["loc"]), _friendly(err))
        return None, problems
    if problems:
        return None, problems
    return Located(model=model, file=raw.file, line=raw.line, node=node), problems


def load(files: list[SourceFile], *, revision: str | None = None, catalog: Catalog | None = None) -> DesiredState:
    """Parse, validate and cross-check; raise InvalidDesiredState with every problem found."""
    from reconciler.spec.validate import check_semantics

    catalog = catalog or default_catalog()
    raws, problems = parse_files(files)
    located: list[Located] = []
    for raw in raws:
        doc, probs = validate_document(raw)
        problems.extend(probs)
        if doc is not None:
            located.append(doc)
    state = DesiredState.from_documents(located, revision=revision, catalog=catalog)
    problems.extend(check_semantics(state))
    if problems:
        raise InvalidDesiredState(problems)
    return state
