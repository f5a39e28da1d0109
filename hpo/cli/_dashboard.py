"""``python -m hpo.dashboard``: browse studies in optuna-dashboard, on the same storage and artifact store as the workers.

The storage is opened through the package's storage factory (connections checked with
``pool_pre_ping``, password masked in everything printed). Each trial shows its params,
objective values, learning curve, user attributes (``hardware``, throughput, ``config``...)
and artifacts (its resolved ``config.json``) when the dashboard is given the study's
``--artifact-store``. The dashboard has no authentication: it listens on 127.0.0.1 unless
``--host`` says otherwise (then use a private network, an SSH tunnel or an authenticating proxy).

examples:
  %(prog)s                                   # sqlite:///hpo-studies.db on http://127.0.0.1:8080/
  %(prog)s --storage "$HPO_STORAGE" --artifact-store /shared/hpo-artifacts --port 8081
  ssh -L 8080:127.0.0.1:8080 head-node     # then, on the head node: %(prog)s
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from hpo._errors import UserError
from hpo.cli._parsing import Parser, add_storage_argument, command_prog, port, run_storage_command
from hpo.reporting._dashboard import address, is_loopback, make_dashboard_server
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR, existing_artifact_store
from hpo.storage._inspect import open_existing_storage
from hpo.storage._storage import mask_url

PROG = command_prog("dashboard")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def build_parser() -> Parser:
    parser = Parser(PROG, __doc__)
    add_storage_argument(parser)
    parser.add_argument(
        "--host", default=DEFAULT_HOST,
        help="address to listen on; anything but 127.0.0.1/localhost exposes the unauthenticated dashboard (default: %(default)s)",
    )
    parser.add_argument("--port", type=port, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    parser.add_argument(
        "--artifact-store", default=None,
        help="the studies' artifact directory (python -m hpo.run --artifact-store), for the trials' artifacts "
             f"(default: {DEFAULT_ARTIFACT_DIR}, when it exists)",
    )
    return parser


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the dashboard until interrupted; return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        storage = open_existing_storage(url)
        store_path = args.artifact_store or DEFAULT_ARTIFACT_DIR
        artifacts = existing_artifact_store(store_path)
        if artifacts is None and args.artifact_store is not None:  # a mistyped path served on with a warning
            raise UserError(f"no artifact store at {store_path} (--artifact-store); pass the directory the study ran with, "
                            "or leave the flag out")
        server = make_dashboard_server(storage, args.host, args.port, artifacts, PROG)
        if not is_loopback(args.host):
            print(f"{PROG}: warning: the dashboard has no authentication and listens on {args.host}:{args.port}: anyone who reaches it "
                  "can read and change the studies; use --host 127.0.0.1 with an SSH tunnel, or a private network", file=sys.stderr)
        if artifacts is None:
            print(f"{PROG}: warning: no artifact store at {store_path}; trials' artifacts are not shown "
                  "(pass the --artifact-store the study ran with)", file=sys.stderr)
        shown = f"artifacts in {store_path}" if artifacts is not None else "no artifacts"
        print(f"Serving optuna-dashboard for {mask_url(url)} ({shown}) at {address(args.host, args.port)}  (Ctrl-C to stop)", flush=True)
        signal.signal(signal.SIGTERM, _stop)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print(f"{PROG}: stopped", file=sys.stderr)
        finally:
            server.server_close()
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(main())
