"""optuna-dashboard served on our storage and artifact store, by a quiet threaded WSGI server."""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import sys
import threading
from socketserver import ThreadingMixIn
from typing import IO, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna
from optuna.artifacts import FileSystemArtifactStore

from hpo._errors import UserError
from hpo.reporting._dashboard_view import ReadableStorage


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request (the page polls) would bury the address line


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open connection must not keep the process alive on Ctrl-C


class _ThreadedServer6(_ThreadedServer):
    address_family = socket.AF_INET6


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def address(host: str, port: int) -> str:
    """The URL to open: the host as given, this machine's name when bound to every interface."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


class _FailedRequests(logging.Filter):
    """A failed request, said on stderr once per distinct error in one line: optuna-dashboard logs the error and its
    stack (its API views) or writes the whole traceback to ``wsgi.errors`` (its pages), and the page polls, so a
    storage gone (a deleted SQLite file, a dropped database) wrote one traceback per request, the fix buried inside."""

    def __init__(self, stream: IO[str], prog: str) -> None:
        super().__init__()
        self.stream, self.prog = stream, prog
        self.said: set[str] = set()
        self.lock = threading.Lock()

    def _say(self, error: str) -> None:
        with self.lock:
            if error and error not in self.said:
                self.said.add(error)
                self.stream.write(f"{self.prog}: a request failed: {error}\n")
                self.stream.flush()

    def filter(self, record: logging.LogRecord) -> bool:
        """optuna-dashboard's ``Exception: <error>`` and its stack: the error, once (the record is not logged)."""
        lines = record.getMessage().splitlines()
        self._say(lines[0].removeprefix("Exception: ") if lines else "")
        return False

    def write(self, text: str) -> None:
        """``wsgi.errors``: a traceback, whose last line is the error."""
        lines = [line for line in text.splitlines() if line.strip()]
        self._say(re.sub(r"^[\w.]+: ", "", lines[-1]) if lines else "")

    def flush(self) -> None:
        self.stream.flush()


_DASHBOARD_LOGGER = logging.getLogger("optuna_dashboard._bottle_util")


def _with_one_line_errors(app: Any, failed: _FailedRequests) -> Any:
    for earlier in [f for f in _DASHBOARD_LOGGER.filters if isinstance(f, _FailedRequests)]:
        _DASHBOARD_LOGGER.removeFilter(earlier)  # one server's at a time
    _DASHBOARD_LOGGER.addFilter(failed)

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        environ["wsgi.errors"] = failed
        return app(environ, start_response)

    return wrapped


def make_dashboard_server(
    storage: optuna.storages.BaseStorage, host: str, port: int, artifacts: FileSystemArtifactStore | None,
    prog: str = "dashboard",
) -> WSGIServer:
    """A bound (not yet serving) HTTP server running optuna-dashboard's WSGI app; call ``serve_forever``.

    A failed request is said on stderr once per distinct error, as one line starting with ``prog``."""
    # Imported here: optuna-dashboard imports scikit-learn (through optuna.importance), over a second that
    # --help, a mistyped flag and a bad storage URL need not wait for.
    import optuna_dashboard

    # Served through a view of the storage whose nested user attrs read as one row per leaf.
    app = optuna_dashboard.wsgi(ReadableStorage(storage), artifact_store=artifacts)
    app = _with_one_line_errors(app, _FailedRequests(sys.stderr, prog))
    server_class = _ThreadedServer6 if ":" in host else _ThreadedServer
    try:
        return make_server(host.strip("[]"), port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(f"cannot listen on {host}:{port} ({reason}); pick another --port or --host") from None
