"""A real Prometheus server for tests (Debian's package, obtained by scripts/fetch-prometheus.sh)
scraping, every second, a tiny exporter the test controls.

`Exporter` serves the Prometheus text exposition format (what vLLM and the DCGM exporter
serve) from values the test sets: `exporter.set('vllm:num_requests_waiting', {...}, 12)`,
`exporter.clear()`. `PrometheusServer` runs `prometheus` on a free loopback port with a
config written to a temp dir and its TSDB there too, and stops it at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support import wait

REPO = Path(__file__).resolve().parents[2]
FETCH_SCRIPT = REPO / "scripts" / "fetch-prometheus.sh"
SCRAPE_INTERVAL = "1s"


class PrometheusUnavailable(RuntimeError):
    """The prometheus binary is not there and cannot be obtained."""


def prometheus_binary() -> Path:
    """$PROMETHEUS_BINARY if set, else what scripts/fetch-prometheus.sh prints (downloads
    Debian's package on first use, seconds; then found at once)."""
    override = os.environ.get("PROMETHEUS_BINARY")
    if override:
        if not os.access(override, os.X_OK):
            raise PrometheusUnavailable(f"PROMETHEUS_BINARY={override} is not an executable file")
        return Path(override)
    proc = subprocess.run(["bash", str(FETCH_SCRIPT)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PrometheusUnavailable(
            f"scripts/fetch-prometheus.sh failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Exporter:
    """Serves `/metrics` in the text exposition format from the series the test sets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, name: str, labels: dict[str, str], value: float) -> None:
        with self._lock:
            self._series[(name, tuple(sorted(labels.items())))] = value

    def remove(self, name: str) -> None:
        with self._lock:
            self._series = {k: v for k, v in self._series.items() if k[0] != name}

    def clear(self) -> None:
        with self._lock:
            self._series.clear()

    def text(self) -> str:
        with self._lock:
            items = sorted(self._series.items())
        lines = []
        for (name, labels), value in items:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{name}{{{lab}}} {value!r}")
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusServer:
    def __init__(self, binary: Path, work: Path, exporter: Exporter):
        self.binary = binary
        self.work = work
        self.exporter = exporter
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = work / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        config = self.work / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_INTERVAL}\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL}\n"
            "scrape_configs:\n"
            "  - job_name: test-exporter\n"
            "    honor_labels: true\n"  # keep the exporter's namespace/pod labels as they are
            f"    static_configs: [{{targets: ['{self.exporter.address}']}}]\n"
        )
        tsdb = self.work / "data"
        tsdb.mkdir(exist_ok=True)
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={tsdb}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited at start:\n{self.logs_tail()}")
            if self.query("up") and self.query("up")[0]["value"][1] == "1":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus did not scrape the exporter:\n{self.logs_tail()}")
            time.sleep(0.2)

    def query(self, q: str) -> list:
        """The vector result of an instant query ([] on any failure): for waiting in tests."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': q})}"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                doc = json.load(r)
        except OSError:
            return []
        data = doc.get("data") or {}
        return data.get("result") or [] if data.get("resultType") == "vector" else []

    def wait_for(self, q: str, predicate, timeout: float = 30) -> list:
        """Poll `q` until `predicate(result)` holds (the next scrapes are a second apart)."""
        return wait.wait_for(
            f"{q} to satisfy the test's condition", lambda: self.query(q), timeout, until=predicate
        )

    def logs_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def cleanup(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
