"""Parse desired-state YAML with positions, validate each document, collect every problem."""

from __future__ import annotations

import datetime
import re
import types
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, TaggedScalar
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from reconciler.policy import limits
from reconciler.policy.catalog import Catalog, default_catalog
from reconciler.policy.files import MAX_FILE_BYTES, SourceFile, size_refusal
from reconciler.policy.models import API_VERSION, DNS_LABEL, KINDS, TIME_OF_DAY, Model
from reconciler.policy.positions import format_path, locate, node_position
from reconciler.policy.problems import InvalidDesiredState, Problem
from reconciler.policy.quantity import DURATION_PATTERN, QUANTITY_PATTERN
from reconciler.policy.state import DesiredState, Located
from reconciler.policy.validate import check_semantics


@dataclass(frozen=True, slots=True)
class RawDocument:
    file: str
    index: int  # position of the document in its file
    node: Any  # the ruamel round-trip node (CommentedMap for a good document)
    line: int
    column: int


class _Unreadable(ValueError):
    """A node that has no plain-Python form (limits.check refuses these first)."""


class _Recursive(_Unreadable):
    """A YAML alias that refers to one of its own ancestors (`&a [*a]`)."""


def _key(k: Any) -> str:
    """A mapping key as a plain string: one written as a string (`"1"`, `!!str 1`), never a
    number, boolean, null or collection turned into one (`1` and `"1"` would collapse)."""
    if isinstance(k, str):
        return str(k)
    if isinstance(k, TaggedScalar) and str(k.tag) == "tag:yaml.org,2002:str":
        return str(k.value)
    raise _Unreadable(f"mapping keys must be strings (got {k!r})")


def _plain(node: Any, _ancestors: frozenset[int] = frozenset()) -> Any:
    """ruamel round-trip types -> plain Python (so strict validation sees ordinary types)."""
    if isinstance(node, dict | list):
        if id(node) in _ancestors:
            raise _Recursive("a YAML alias refers to a mapping or list that contains it")
        inner = _ancestors | {id(node)}
        if isinstance(node, dict):
            return {_key(k): _plain(v, inner) for k, v in node.items()}
        return [_plain(v, inner) for v in node]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _short_tag(tag: Any) -> str:
    tag = str(tag)
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org") else tag


def _located(fn: Any) -> Any:
    """A ruamel constructor function whose failures name the node they failed on: ruamel's
    constructors raise plain ValueError, KeyError, TypeError or AssertionError for bad tagged
    values (`!!int abc`, `!!bool maybe`, a `!!omap` with a repeated key, a timestamp with a
    99-hour offset), which carry no position."""

    def fail(node: Any, exc: Exception) -> ConstructorError:
        detail = str(exc).splitlines()[0] if str(exc) else ""
        detail = f" ({detail})" if detail else ""
        return ConstructorError(
            None,
            None,
            f"cannot read this {_short_tag(node.tag)} value{detail}",
            node.start_mark,
        )

    def run(self: Any, *args: Any) -> Any:
        node = args[-1]
        try:
            data = fn(self, *args)
        except YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AssertionError, OverflowError) as exc:
            raise fail(node, exc) from None
        if not isinstance(data, types.GeneratorType):
            return data

        def steps() -> Any:  # mappings and lists are built in steps, after construct_object
            try:
                yield from data
            except YAMLError:
                raise
            except (ValueError, TypeError, KeyError, AssertionError, OverflowError) as exc:
                raise fail(node, exc) from None

        return steps()

    return run


def locating(base: type) -> type:
    """`base` (a ruamel constructor class) whose every failure is a located ConstructorError."""
    return type(
        f"Locating{base.__name__}",
        (base,),
        {
            "yaml_constructors": {t: _located(f) for t, f in base.yaml_constructors.items()},
            "yaml_multi_constructors": {
                t: _located(f) for t, f in base.yaml_multi_constructors.items()
            },
        },
    )


_RoundTripConstructor = locating(RoundTripConstructor)


def parse_files(files: list[SourceFile]) -> tuple[list[RawDocument], list[Problem]]:
    docs: list[RawDocument] = []
    problems: list[Problem] = []
    total = 0
    for f in files:
        # The readers in files.py refuse a file over the size bounds before reading it; a text
        # that came another way is held to the same bounds here, before it is parsed.
        size = len(f.text.encode("utf-8", errors="surrogatepass"))
        too_big = size_refusal(size, total)
        if too_big is not None:
            problems.append(Problem(f.path, 0, 0, "", too_big))
            if size <= MAX_FILE_BYTES:
                break  # over the total: nothing after it is read either
            continue
        total += size
        loaded = _load_yaml(f, problems)
        if loaded is None:
            continue
        for i, node in enumerate(loaded):
            if node is None:
                continue  # an empty document (e.g. a trailing ---)
            if not isinstance(node, CommentedMap):
                problems.append(_not_a_mapping(f, i, node))
                continue
            line, col = node_position(node) or _document_start(f.text, i)
            docs.append(RawDocument(f.path, i, node, line, col))
    return docs, problems


def _load_yaml(f: SourceFile, problems: list[Problem]) -> list | None:
    """The documents of `f`, or None after adding its problem: a directive, a bound, or YAML
    that does not parse (each at its line where the parser says one)."""
    bad = _directive_problem(f.text)
    if bad is not None:
        problems.append(Problem(f.path, bad[0], bad[1], "", bad[2]))
        return None
    over = limits.check(f.text, pure=True)  # the round-trip loader's own parser
    if over is not None:
        problems.append(
            Problem(f.path, over.line, over.column, format_path(over.path), over.message)
        )
        return None
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Constructor = _RoundTripConstructor
    try:
        return list(yaml.load_all(f.text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        msg = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        ctx = exc.context_mark
        if ctx is not None and mark is not None and ctx.line != mark.line:
            msg += f" (the construct began at line {ctx.line + 1}, column {ctx.column + 1})"
        problems.append(Problem(f.path, line, col, "", f"invalid YAML: {msg}"))
    except ReaderError as exc:  # a character YAML does not allow; it has an offset, not a mark
        line, col = _line_col(f.text, exc.position)
        problems.append(
            Problem(
                f.path,
                line,
                col,
                "",
                f"invalid YAML: {_char(exc.character)} is not allowed in YAML text",
            )
        )
    except YAMLError as exc:
        problems.append(Problem(f.path, 0, 0, "", f"invalid YAML: {exc}"))
    except RecursionError:
        problems.append(Problem(f.path, 0, 0, "", "invalid YAML: nested too deeply to read"))
    except Exception as exc:  # noqa: BLE001 - ruamel's constructors raise plain ValueError,
        # TypeError or AssertionError for bad tagged scalars (`!!int abc`, a `!!omap` with a
        # repeated key); bad input must become a located message, never a traceback.
        detail = str(exc) or "a tagged value (`!!...`) could not be constructed"
        problems.append(Problem(f.path, 0, 0, "", f"invalid YAML: {detail}"))
    return None


def _not_a_mapping(f: SourceFile, i: int, node: object) -> Problem:
    line, col = node_position(node) or _document_start(f.text, i)
    what = (
        "a list" if isinstance(node, list) else "a string" if isinstance(node, str) else "a scalar"
    )
    return Problem(
        f.path,
        line,
        col,
        "",
        f"document {i + 1} is {what}, not a mapping with apiVersion, kind, metadata and spec",
    )


_DIRECTIVE_LINE = re.compile(r"^%", re.MULTILINE)
_YAML_VERSIONS = ((1, 1), (1, 2))
_VERSIONS_READ = "policy files are YAML 1.2 (a %YAML 1.1 directive is accepted): remove the line"
_HUGE_VERSION = re.compile(r"^%YAML[ \t]+([0-9]{4000,}\S*|[0-9]+\.[0-9]{4000,})", re.MULTILINE)


def _directive_problem(text: str) -> tuple[int, int, str] | None:
    """The first problem with a `%YAML` or `%TAG` directive, as (line, column, message).

    ruamel's parsers check directives only in part: `%YAML 1.3` fails an assertion (no
    position, and before this check a traceback), `%YAML 2.0` in a later document fails a
    lookup (`invalid YAML: (2, 0)`, no position), and a directive without the `---` that must
    follow it is reported as an error in the next line. Read with the scanner alone (no
    version is resolved), and only when a line starts with `%`: directives cost nothing
    elsewhere. Other syntax errors are left to the loader."""
    starts = [m.start() for m in _DIRECTIVE_LINE.finditer(text)]
    if not starts:
        return None
    tokens = YAML(typ="safe", pure=True).scan(text)
    directive = None  # the last token read, if it was a directive
    while True:
        try:
            tok = next(tokens, None)
        except ValueError:  # Python's int() refuses a version number of 4,300+ digits
            m = _HUGE_VERSION.search(text)
            if m is None:
                return None
            return (
                text.count("\n", 0, m.start()) + 1,
                1,
                f"invalid YAML: %YAML {_short(m.group(1))} is not a YAML version gpupool reads; "
                f"{_VERSIONS_READ}",
            )
        except YAMLError:
            tok = None
            if directive is None:
                return None  # a syntax error elsewhere: the loader reports it, located
        name = type(tok).__name__
        if directive is not None and name not in ("DirectiveToken", "DocumentStartToken"):
            return (
                directive.start_mark.line + 1,
                directive.start_mark.column + 1,
                f"invalid YAML: a %{_short(directive.name)} directive must be followed by a "
                "line `---` that starts the document",
            )
        if tok is None or (name != "DirectiveToken" and tok.start_mark.index > starts[-1]):
            return None  # no directive after this token
        directive = tok if name == "DirectiveToken" else None
        if directive is not None and tok.name == "YAML" and tok.value not in _YAML_VERSIONS:
            major, minor = tok.value
            return (
                tok.start_mark.line + 1,
                tok.start_mark.column + 1,
                f"invalid YAML: %YAML {_short(f'{major}.{minor}')} is not a YAML version "
                f"gpupool reads; {_VERSIONS_READ}",
            )


def _short(text: str) -> str:
    return text if len(text) <= 20 else text[:17] + "..."


def _char(c: Any) -> str:
    code = c if isinstance(c, int) else ord(c) if isinstance(c, str) and len(c) == 1 else None
    return f"character U+{code:04X}" if code is not None else f"character {c!r}"


def _line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset in `text`."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _document_start(text: str, index: int) -> tuple[int, int]:
    """Where the content of document `index` of a YAML stream starts (scalars carry no position)."""
    try:
        seen = -1
        after_start = False
        for event in YAML(typ="rt").parse(text):
            if after_start:
                return event.start_mark.line + 1, event.start_mark.column + 1
            if type(event).__name__ == "DocumentStartEvent":
                seen += 1
                after_start = seen == index
    except Exception:  # noqa: BLE001 - positions are a nicety; never fail on them
        pass
    return 0, 0


_PATTERN_HINTS = {
    DNS_LABEL: (
        "is not a valid name: use lower-case letters, digits and '-', "
        "starting and ending with a letter or digit"
    ),
    DURATION_PATTERN: "is not a duration like 30s, 10m, 1h or 1h30m",
    QUANTITY_PATTERN: "is not a quantity like 4Gi, 512Mi or 2",
    TIME_OF_DAY: "is not a time of day in 24-hour HH:MM form, e.g. 02:30",
}


def _friendly(err: dict) -> str:
    kind = err["type"]
    loc = err["loc"]
    if kind == "extra_forbidden":
        return f"unknown field {loc[-1]!r}"
    if kind == "missing":
        return f"missing required field {loc[-1]!r}"
    if kind == "string_pattern_mismatch":
        hint = _PATTERN_HINTS.get(err.get("ctx", {}).get("pattern", ""))
        if hint:
            return f"{err['input']!r} {hint}"
    msg = err["msg"]
    if kind == "value_error" and (err.get("ctx") or {}).get("error") is not None:
        msg = str(err["ctx"]["error"])  # our own validators' words, without "Value error, "
    value = err.get("input")
    if isinstance(value, datetime.date):
        msg += f" (got the date/time {value.isoformat()}; quote it to make it a string)"
    elif "input" in err and not isinstance(value, dict | list):
        msg += f" (got {value!r})"
    return msg


def validate_document(raw: RawDocument) -> tuple[Located | None, list[Problem]]:
    node = raw.node
    kind = node.get("kind")
    api = node.get("apiVersion")
    name = node.get("metadata", {}).get("name") if isinstance(node.get("metadata"), dict) else None
    known_kind = isinstance(kind, str) and kind in KINDS  # kind may be any YAML value, even a list
    label = (
        f"{kind}/{name}" if known_kind and isinstance(name, str) else (kind if known_kind else "")
    )
    problems: list[Problem] = []

    def add(path: tuple, msg: str) -> None:
        line, col = locate(node, path)
        problems.append(Problem(raw.file, line, col, format_path(path), msg, label))

    if "apiVersion" not in node:
        add(("apiVersion",), f"missing apiVersion (expected apiVersion: {API_VERSION})")
    elif api != API_VERSION:
        add(("apiVersion",), f"apiVersion must be {API_VERSION!r} (got {api!r})")
    if "kind" not in node:
        add(("kind",), f"missing kind (one of: {', '.join(KINDS)})")
        return None, problems
    if not known_kind:
        add(("kind",), f"unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
        return None, problems
    cls: type[Model] = KINDS[kind]
    try:
        plain = _plain(node)
    except (_Unreadable, RecursionError) as exc:
        msg = str(exc) if isinstance(exc, _Unreadable) else "nested too deeply"
        add((), f"cannot be read: {msg}")
        return None, problems
    try:
        model = cls.model_validate(plain)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            if err["loc"] == ("apiVersion",) and api != API_VERSION:
                continue  # already reported in plain words
            add(tuple(err["loc"]), _friendly(err))
        return None, problems
    if problems:
        return None, problems
    return Located(model=model, file=raw.file, line=raw.line, node=node), problems


def _identity(node: Any) -> tuple[str, str]:
    """(kind, name) of a raw document as written, '' where it is not a string."""
    kind = node.get("kind")
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return (kind if isinstance(kind, str) else "", name if isinstance(name, str) else "")


def load(
    files: list[SourceFile], *, revision: str | None = None, catalog: Catalog | None = None
) -> DesiredState:
    """Parse, validate and cross-check; raise InvalidDesiredState with every problem found."""
    catalog = catalog or default_catalog()
    raws, problems = parse_files(files)
    located: list[Located] = []
    invalid: set[tuple[str, str]] = set()
    for raw in raws:
        doc, probs = validate_document(raw)
        problems.extend(probs)
        if doc is not None:
            located.append(doc)
        else:
            invalid.add(_identity(raw.node))
    state = DesiredState.from_documents(located, revision=revision, catalog=catalog)
    problems.extend(check_semantics(state, invalid))
    if problems:
        raise InvalidDesiredState(problems)
    return state


class LoadMemo:
    """`load` once per content: a read whose files (paths and texts, in order) and revision are
    those of the last one gets the last outcome again, the same DesiredState object or the same
    problems, without parsing anything. A long-running reader (the controller, every cycle) pays
    the parse and the checks only when the policies change: for a small repository tens of
    milliseconds a cycle, for a 1,000-team Quota file seconds. Holds one outcome: the last."""

    def __init__(self) -> None:
        self._last: tuple[tuple[str | None, tuple[SourceFile, ...]], Any] | None = None
        self.loads = 0
        """How many reads parsed (the rest were answered from the memo)."""

    def load(self, files: list[SourceFile], *, revision: str | None = None) -> DesiredState:
        key = (revision, tuple(files))
        last = self._last
        if last is None or last[0] != key:
            self.loads += 1
            try:
                out: Any = load(files, revision=revision)
            except InvalidDesiredState as exc:
                out = exc
            self._last = last = (key, out)
        out = last[1]
        if isinstance(out, InvalidDesiredState):
            raise out.with_traceback(None)
        return out
