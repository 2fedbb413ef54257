"""What goes wrong outside gpupool, said in one line: the cluster a command talks to (its
kubeconfig or the in-cluster config, the network, the API server's answers) and the files the
command line names.

Every command reaches the cluster through `api_client` and `talking_to`: a failure to load the
configuration or to get an answer becomes a `CommandError` whose message names the API
server's address and where it came from ("--kubeconfig k.yaml", "the in-cluster config").
`reconciler.cli.main` prints a `CommandError` as `gpupool COMMAND: error: MESSAGE` and exits 1,
so a CI gate never reads a broken kubeconfig as "changes pending" (2, `plan
--detailed-exitcode`) and a user never reads a traceback. Anything not recognised here is left
to propagate (`main` reports it as a bug).

Nothing here imports the Kubernetes client at module level: `gpupool --help` stays fast, and the
commands that never talk to a cluster never load it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

IN_CLUSTER_HINT = "give --kubeconfig FILE to reach a cluster from outside it"


class CommandError(Exception):
    """An error already worded for the user: one line, printed by `main` after
    `gpupool COMMAND: error: `; the exit code is 1."""


def origin(kubeconfig: str | None) -> str:
    """Where the cluster's address came from, for the messages."""
    return f"from --kubeconfig {kubeconfig}" if kubeconfig else "from the in-cluster config"


def kubeconfig_arg(text: str) -> str:
    """argparse type of `--kubeconfig`: an empty value is a usage error, not a silent fall back
    to the in-cluster config."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give the path of a kubeconfig file")
    return text


def api_client(kubeconfig: str | None, make: Callable[[str | None], Any] | None = None) -> Any:
    """The official client's ApiClient for `kubeconfig` (else the in-cluster config), its
    every request bounded in time (`make`, default `reconciler.observe.kube.make_api_client`);
    a configuration that cannot be used is a CommandError."""
    if make is None:
        from reconciler.observe.kube import make_api_client as make

    if kubeconfig:
        _check_kubeconfig_files(kubeconfig)
    try:
        return make(kubeconfig)
    except Exception as exc:  # noqa: BLE001 - loading only reads files: any failure is the config's
        raise CommandError(config_message(exc, kubeconfig)) from exc


def _check_kubeconfig_files(kubeconfig: str) -> None:
    """The files `--kubeconfig` names (a list separated by ':', like $KUBECONFIG) exist and are
    files: the client itself only says "No configuration found"."""
    paths = [p for p in kubeconfig.split(os.pathsep) if p]
    found = [p for p in paths if os.path.exists(os.path.expanduser(p))]
    if not found:
        raise CommandError(
            f"--kubeconfig {kubeconfig}: no such file; give the path of a kubeconfig "
            "(kubectl's is ~/.kube/config)"
        )
    for p in found:
        if os.path.isdir(os.path.expanduser(p)):
            raise CommandError(f"--kubeconfig {p}: a directory, not a kubeconfig file")


def config_message(exc: BaseException, kubeconfig: str | None) -> str:
    """Why the kubeconfig or the in-cluster config cannot be used."""
    from kubernetes.config.config_exception import ConfigException

    if not kubeconfig:
        if isinstance(exc, ConfigException) and "host/port is not set" in str(exc):
            return (
                "not running in a cluster (KUBERNETES_SERVICE_HOST is not set) and no "
                f"--kubeconfig given: {IN_CLUSTER_HINT}"
            )
        return f"cannot use the in-cluster config: {_one_line(exc)}; {IN_CLUSTER_HINT}"
    where = f"--kubeconfig {kubeconfig}"
    if isinstance(exc, ConfigException):
        text = re.sub(r"^Invalid kube-?config( file)?\.\s*", "", _one_line(exc))
        return f"{where}: not a usable kubeconfig: {text}"
    if isinstance(exc, UnicodeDecodeError):
        return f"{where}: not a text file (byte {exc.object[exc.start]:#04x} is not UTF-8)"
    if isinstance(exc, OSError):
        return f"{where}: cannot read {exc.filename or kubeconfig}: {_strerror(exc)}"
    mark = getattr(exc, "problem_mark", None)  # a YAML syntax error says where
    if mark is not None:
        problem = getattr(exc, "problem", None) or _one_line(exc)
        return (
            f"{where}: not YAML (line {mark.line + 1}, column {mark.column + 1}: {problem}); "
            "give a kubeconfig file (`kubectl config view --raw` prints one)"
        )
    return (
        f"{where}: not a kubeconfig (a YAML mapping with clusters, contexts, users and "
        f"current-context): {type(exc).__name__}: {_one_line(exc)}"
    )


@contextlib.contextmanager
def talking_to(api: Any, kubeconfig: str | None) -> Iterator[None]:
    """Calls to the API server inside this block: no answer, a refused connection, a TLS
    failure or an error status become one CommandError naming the server and where its
    address came from. urllib3's "Retrying" warnings are held back meanwhile: the error
    says how it ended."""
    retries = logging.getLogger("urllib3.connectionpool")
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        yield
    except Exception as exc:
        message = api_message(exc, _host(api), origin(kubeconfig))
        if message is None:
            raise
        raise CommandError(message) from exc
    finally:
        retries.setLevel(level)


def _host(api: Any) -> str | None:
    configuration = getattr(api, "configuration", None)
    return getattr(configuration, "host", None)


def api_message(
    exc: BaseException, host: str | None = None, source: str | None = None
) -> str | None:
    """One line for a failed API call to the server at `host` (its address from `source`), or
    None when `exc` is not about the network or the server's answer."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    at = f"the API server at {_pool_address(exc) or host or '(address unknown)'}"
    if source:
        at += f" ({source})"
    if isinstance(exc, ApiException):
        return _status_message(exc, at)
    reason = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    if isinstance(reason, urllib3.exceptions.NameResolutionError):
        return f"cannot reach {at}: its host name does not resolve"
    if isinstance(reason, urllib3.exceptions.NewConnectionError):  # a ConnectTimeoutError too
        cause = reason.__cause__ or reason.__context__
        why = _strerror(cause) if isinstance(cause, OSError) else _bare(reason)
        return f"cannot reach {at}: {why}"
    if isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
        return f"cannot reach {at}: no connection within the connect timeout ({_bare(reason)})"
    if isinstance(reason, urllib3.exceptions.ReadTimeoutError | TimeoutError):
        return f"no answer from {at}: {_bare(reason)}"
    if isinstance(reason, urllib3.exceptions.SSLError):
        return f"TLS with {at} failed: {_bare(reason)}"
    if isinstance(reason, urllib3.exceptions.HTTPError | ConnectionError):
        return f"cannot reach {at}: {_bare(reason)}"
    return None


def _status_message(exc: Any, at: str) -> str:
    status = f"{exc.status} {exc.reason}" if exc.reason else str(exc.status)
    said = _status_text(exc.body)
    tail = f": {said}" if said else ""
    if exc.status == 401:
        return (
            f"{at} does not accept the credentials ({status}){tail}; check the user of the "
            "kubeconfig (an expired token or certificate?)"
        )
    if exc.status == 403:
        return f"{at} forbids it ({status}){tail}"
    return f"{at} answered {status}{tail}"


def _status_text(body: Any) -> str:
    """The `message` of a Kubernetes Status body, else the body's first line, shortened."""
    import json

    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return ""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    text = data.get("message") if isinstance(data, dict) else None
    return _shorten(str(text) if text else _one_line(body))


def _pool_address(exc: BaseException) -> str | None:
    """scheme://host:port of the connection pool a urllib3 error came from."""
    pool = getattr(exc, "pool", None)
    if pool is None or not getattr(pool, "host", None):
        return None
    host = f"[{pool.host}]" if ":" in pool.host else pool.host
    return f"{pool.scheme}://{host}:{pool.port}" if pool.port else f"{pool.scheme}://{host}"


def _bare(exc: BaseException) -> str:
    """urllib3's message without its "HTTPConnectionPool(host=..., port=...): " prefix."""
    text = re.sub(r"^\w+\(host=[^)]*\):\s*", "", _one_line(exc))
    text = text.replace(". (", " (")
    return (text[:1].lower() + text[1:]).rstrip(".") if text else type(exc).__name__


def _strerror(exc: OSError) -> str:
    return (exc.strerror or _one_line(exc) or type(exc).__name__).lower()


def _one_line(exc: Any) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_message(exc: OSError, option: str, path: str, doing: str = "cannot read") -> str:
    """`--out /tmp: cannot write: is a directory`."""
    return f"{option} {path}: {doing}: {_strerror(exc)}"


def write_text(path: str, text: str, option: str = "--out") -> None:
    """Write a file the command line names; a failure is a CommandError naming the option."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except (OSError, ValueError) as exc:  # ValueError: a path no file system can hold
        reason = exc if isinstance(exc, OSError) else OSError(str(exc))
        raise CommandError(file_message(reason, option, path, "cannot write")) from exc


def describe(exc: BaseException) -> str | None:
    """The one-line message for a failure that reached `main` without a command saying it:
    the API server (its address from the error), a file; None when `exc` is a bug, not the
    environment."""
    if _from_kubernetes_client(exc):
        return api_message(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{_strerror(exc)}"
    return None


def _from_kubernetes_client(exc: BaseException) -> bool:
    """An urllib3 or official-client error (checked without importing either)."""
    module = type(exc).__module__
    return module.startswith(("urllib3.", "kubernetes."))
