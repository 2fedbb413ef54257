"""tests/support/wait.py: what the shared waits return, and what their failures say."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest

from tests.support.wait import wait_for, wait_for_process


def test_returns_the_checks_first_truthy_value():
    values = iter([None, 0, [], ["ready"]])
    assert wait_for("a list", lambda: next(values), timeout=5, interval=0) == ["ready"]


def test_until_accepts_a_falsy_value():
    values = iter([[1], []])
    assert wait_for("an empty list", lambda: next(values), 5, 0, until=lambda r: r == []) == []


def test_a_timeout_names_what_and_the_last_value():
    with pytest.raises(
        AssertionError, match=r"^timed out after 0.05 s waiting for pods; last value: \[\]$"
    ):
        wait_for("pods", lambda: [], 0.05, 0.01)
    count = itertools.count()
    with pytest.raises(AssertionError) as err:
        wait_for("a count past 10**9", lambda: next(count), 0.05, 0.01, until=lambda n: n > 1e9)
    assert int(str(err.value).rsplit(" ", 1)[1]) > 1  # the last value, not the first


def test_ignored_exceptions_are_retried_and_the_last_one_reported():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("refused")
        return "up"

    assert wait_for("the server", flaky, 5, 0, ignore=(ConnectionError,)) == "up"

    def down():
        raise ConnectionError("still refused")

    with pytest.raises(AssertionError, match="last exception: ConnectionError: still refused"):
        wait_for("the server", down, 0.05, 0.01, ignore=(ConnectionError,))


def test_other_exceptions_end_the_wait_at_once():
    def broken():
        raise KeyError("x")

    start = time.monotonic()
    with pytest.raises(KeyError) as err:
        wait_for("a key", broken, timeout=30)
    assert time.monotonic() - start < 5
    assert "while waiting for a key" in "".join(err.value.__notes__)


def python(code: str, log) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)


def test_a_process_that_exits_fails_the_wait_at_once_with_its_log(tmp_path):
    log = tmp_path / "log"
    proc = python("print('bad config'); raise SystemExit(3)", log)
    start = time.monotonic()
    with pytest.raises(AssertionError) as err:
        wait_for_process("a reply", lambda: False, proc, log, timeout=30, name="the server")
    assert time.monotonic() - start < 20
    assert str(err.value).startswith("the server exited 3 while waiting for a reply:\n")
    assert "bad config" in str(err.value)


def test_a_process_wait_returns_the_value_or_times_out_with_the_logs_tail(tmp_path):
    log = tmp_path / "log"
    proc = python("import time; print('x' * 5000 + 'listening', flush=True); time.sleep(30)", log)
    try:
        ready = wait_for_process(
            "the banner", lambda: "listening" in log.read_text(), proc, log, 20, 0.05
        )
        assert ready is True
        with pytest.raises(AssertionError) as err:
            wait_for_process("a reply", lambda: None, proc, log, 0.05, 0.01)
        message = str(err.value)
        assert message.startswith("timed out after 0.05 s waiting for a reply; last value: None")
        assert message.endswith("listening\n") and "x" * 5000 not in message
    finally:
        proc.kill()
        proc.wait()
