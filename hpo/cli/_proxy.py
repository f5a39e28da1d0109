"""``python -m hpo.proxy``: share one study database among many workers through a gRPC proxy.

Workers pass ``--storage grpc://HOST:PORT`` instead of the database URL, so only the proxy
holds database connections. It helps when hundreds of workers would otherwise each hold some
(PostgreSQL's ``max_connections``), and it caches finished trials in memory.

It does not support Optuna's heartbeats: heartbeats and stale-trial recovery (failing
trials whose worker died) live in ``RDBStorage`` only, so the stale-trial sweep must run in a
process that uses the database directly, e.g. this proxy or any worker started with the
``postgresql://`` URL, never in a ``grpc://`` worker. The proxy has no authentication or TLS:
listen on 127.0.0.1 (the default) or a private network only.

examples:
  %(prog)s --storage postgresql://user:pass@db:5432/hpo              # listens on 127.0.0.1:13000
  %(prog)s --storage "$HPO_STORAGE" --host 0.0.0.0 --port 13000   # private network only
  python -m hpo.run --storage grpc://PROXY_HOST:13000 --study-name sst2   # on each worker
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from collections.abc import Sequence
from types import FrameType

import optuna

from hpo._errors import UserError
from hpo.cli._parsing import Parser, command_prog, port, run_storage_command
from hpo.storage._storage import GRPC_SCHEME, STORAGE_ENV, create_storage, mask_url

PROG = command_prog("proxy")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 13000


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(PROG, __doc__)
    parser.add_argument(
        "--storage", default=None,
        help=f"the database: sqlite:///file.db or postgresql://user:pass@host:5432/db (default: ${STORAGE_ENV}, else sqlite:///hpo-studies.db)",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on; 0.0.0.0 for all interfaces (default: %(default)s)")
    parser.add_argument("--port", type=port, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    return parser


def _check_can_listen(host: str, port: int) -> None:
    # gRPC binds with SO_REUSEPORT and may not fail on a busy port; a plain bind does.
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(f"cannot listen on {host}:{port} ({reason}); pick another --port or --host") from None


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the storage until interrupted; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        host = args.host.strip("[]")
        grpc_host = f"[{host}]" if ":" in host else host  # gRPC wants IPv6 addresses in brackets
        if url.lower().startswith(GRPC_SCHEME):
            raise UserError("--storage must be the database itself (sqlite:/// or postgresql://), not another proxy")
        _check_can_listen(host, args.port)  # first: a busy port leaves no new database file behind
        storage = create_storage(url)
        worker_host = socket.gethostname() if host in ("0.0.0.0", "::") else grpc_host
        print(f"Serving {mask_url(url)} on {grpc_host}:{args.port}; start workers with --storage grpc://{worker_host}:{args.port}", flush=True)
        signal.signal(signal.SIGTERM, _stop)
        try:
            # create_storage's storage holds Optuna's in-process cache of finished trials, as run_grpc_proxy_server
            # recommends; get_storage returns it as it is.
            optuna.storages.run_grpc_proxy_server(optuna.storages.get_storage(storage), host=grpc_host, port=args.port)
        except RuntimeError as err:  # gRPC could not bind after all
            raise UserError(f"cannot listen on {grpc_host}:{args.port} ({err}); pick another --port or --host") from None
        except KeyboardInterrupt:
            print(f"{PROG}: stopped", file=sys.stderr)
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)

if __name__ == "__main__":
    sys.exit(main())
