"""What the hostile-input suites share (tests/test_hostile_input.py, tests/test_hostile_cluster.py):
hypothesis settings that are seeded and bounded (`HOSTILE`), a watchdog that stops an example
that hangs (`watchdog`), and `bounded`, which runs one call in a forked child under a time and
an address-space limit, so that a value that makes the code loop or allocate as long as it says
(a node of 10^9 cards) fails that example in seconds instead of taking the machine's memory.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, settings

HOSTILE = settings(
    derandomize=True,
    database=None,
    max_examples=50,
    deadline=timedelta(seconds=10),
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),  # no shrinking: bounded time, failing or not
)
WATCHDOG_S = 10


class Hung(Exception):
    pass


@contextlib.contextmanager
def watchdog(seconds: float = WATCHDOG_S):
    """Stop an example that runs past `seconds`: a hang is a failure, not a stuck suite."""

    def fire(*_):
        raise Hung(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    """What the call returned (pickled back from the child)."""
    error: str = ""
    """What escaped the call (type, message and traceback), or why the child gave no answer."""
    seconds: float = 0.0


def _vm_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def bounded(fn: Callable[[], Any], seconds: float, memory: int = 1 << 30) -> Outcome:
    """`fn()` in a forked child: stopped past `seconds` (its own watchdog, and a kill a little
    later), its address space bounded to what the process has now plus `memory` bytes (an
    allocation past it is a MemoryError). What it returns must pickle."""
    fd, path = tempfile.mkstemp(prefix="gpupool-bounded-")
    os.close(fd)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test runner
        code = 0
        try:
            limit = _vm_bytes() + memory
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
            t0 = time.monotonic()
            try:
                with watchdog(seconds):
                    out = Outcome(value=fn(), seconds=time.monotonic() - t0)
            except BaseException as exc:  # noqa: BLE001 - every escape is the finding
                text = "".join(traceback.format_exception(exc))[-4000:]
                out = Outcome(error=f"{type(exc).__name__}: {exc}"[:300] + "\n" + text)
            with open(path, "wb") as f:
                pickle.dump(out, f)
        except BaseException:  # noqa: BLE001 - the parent reports a child that said nothing
            code = 1
        finally:
            os._exit(code)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > seconds + 20:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return Outcome(error=f"Hung: killed after {seconds + 20} s", seconds=seconds)
            time.sleep(0.005)
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            return Outcome(
                error=f"the child gave no answer (status {status:#x})",
                seconds=time.monotonic() - start,
            )
    finally:
        os.unlink(path)
