"""Waiting in tests: call a check until it holds, or fail naming what was awaited.

`wait_for(what, check, timeout, interval)` calls `check()` every `interval` seconds until it
returns something truthy (or, with `until=`, something `until` accepts) and returns that value.
Past `timeout` seconds it raises AssertionError naming `what` and the check's last value, or the
last exception it raised when that exception is of a type in `ignore` (other exceptions end the
wait at once, as they did before this module). `wait_for_process` is the same while a
subprocess runs: it fails at once, with the process's log, when the process exits.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

LOG_TAIL = 4000
"""How much of a process's log (its end) a timeout's message quotes."""


def wait_for(
    what: str,
    check: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.2,
    *,
    until: Callable[[T], Any] = bool,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `check` until `until(value)` holds (by default: the value is truthy); return the
    value. On timeout, an AssertionError naming `what` and the last value or exception."""
    return _poll(what, check, timeout, interval, until, ignore)


def wait_for_process(
    what: str,
    check: Callable[[], T],
    proc: subprocess.Popen,
    log: Path,
    timeout: float = 30.0,
    interval: float = 0.2,
    *,
    name: str = "the process",
) -> T:
    """`wait_for` while `proc` (its output going to `log`) runs: when it has exited, fail at
    once with its exit status and its log; a timeout's message ends with the log's tail."""

    def running() -> None:
        if proc.poll() is not None:
            raise AssertionError(
                f"{name} exited {proc.returncode} while waiting for {what}:\n{_read(log)}"
            )

    return _poll(
        what,
        check,
        timeout,
        interval,
        bool,
        (),
        between=running,
        details=lambda: f"; log:\n{_read(log)[-LOG_TAIL:]}",
    )


def _poll(
    what: str,
    check: Callable[[], T],
    timeout: float,
    interval: float,
    until: Callable[[T], Any],
    ignore: tuple[type[BaseException], ...],
    *,
    between: Callable[[], None] | None = None,
    details: Callable[[], str] | None = None,
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ignore as exc:
            last = f"last exception: {type(exc).__name__}: {exc}"
        except Exception as exc:
            exc.add_note(f"(raised by the check while waiting for {what})")
            raise
        else:
            if until(value):
                return value
            last = f"last value: {_short(repr(value))}"
        if between is not None:
            between()
        if time.monotonic() > deadline:
            more = details() if details is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; {last}{more}")
        time.sleep(interval)


def _short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {log}: {exc})"
