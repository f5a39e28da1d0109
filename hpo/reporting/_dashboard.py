"""optuna-dashboard served on our storage and artifact store, by a quiet threaded WSGI server."""

from __future__ import annotations

import ipaddress
import socket
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import optuna
import optuna_dashboard
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


def make_dashboard_server(
    storage: optuna.storages.BaseStorage, host: str, port: int, artifacts: FileSystemArtifactStore | None
) -> WSGIServer:
    """A bound (not yet serving) HTTP server running optuna-dashboard's WSGI app; call ``serve_forever``."""
    # Served through a view of the storage whose nested user attrs read as one row per leaf.
    app = optuna_dashboard.wsgi(ReadableStorage(storage), artifact_store=artifacts)
    server_class = _ThreadedServer6 if ":" in host else _ThreadedServer
    try:
        return make_server(host.strip("[]"), port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(f"cannot listen on {host}:{port} ({reason}); pick another --port or --host") from None
