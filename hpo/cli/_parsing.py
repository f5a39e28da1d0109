"""What every command line of this package shares: one-line errors, masked URLs, exit codes."""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import optuna
from sqlalchemy.exc import SQLAlchemyError

from hpo._errors import UserError
from hpo.storage._retrying_storage import storage_failure_in
from hpo.storage._storage import STORAGE_ENV, mask_secrets, mask_url, resolve_storage_url
from hpo.storage._url_secrets import mask_urls_in


def command_prog(command: str) -> str:
    """How the user started ``command``, for usage and error lines: ``python -m hpo run`` or ``python -m hpo.run``."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if started.name == "__main__.py" and started.parent.name == "hpo":
        return f"python -m hpo {command}"
    return f"python -m hpo.{command}"


class Parser(argparse.ArgumentParser):
    """``argparse`` that reports a bad flag in one line, without the usage dump.

    ``doc`` is the command module's docstring: the description, then its ``examples:`` section
    (``%(prog)s`` in it is the command), which ``--help`` shows after the flags.
    """

    def __init__(self, prog: str, doc: str | None) -> None:
        description, found, examples = (doc or "").partition("\nexamples:\n")
        epilog = "examples:\n" + examples.rstrip() if found else None
        super().__init__(prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(given, namespace)
        for action in self._actions:
            # An empty value is never "the default": --storage '' read $HPO_STORAGE, --out '' wrote ./hpo-report-<study>.
            # A flag given bare takes its const (--ray alone is a local cluster); given an empty value that reads the same
            # (--ray "$RAY_ADDRESS" with it unset), it is refused too: read from the words typed.
            value = getattr(parsed, action.dest, None)
            if action.option_strings and isinstance(value, str) and not value.strip() and (
                value not in (action.default, action.const) or (value == action.const and _given_blank(given, action.option_strings))
            ):
                self.error(f"{action.option_strings[-1]} is empty; give it a value or leave it out")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        # argparse quotes what was typed ("unrecognized arguments: postgresql://u:pw@host/db"): passwords masked.
        self.exit(2, f"{self.prog}: error: {mask_urls_in(message)} (see --help)\n")


def _given_blank(args: Sequence[str], options: Sequence[str]) -> bool:
    """Whether one of ``options`` was given a blank value in ``args`` (``--ray ''``, ``--ray=``), not given bare."""
    for index, arg in enumerate(args):
        name, equals, value = arg.partition("=")
        if name not in options:
            continue
        if equals:
            if not value.strip():
                return True
        elif index + 1 < len(args) and not args[index + 1].strip():
            return True
    return False


def at_least(low: int, most: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type for a whole number of ``low`` or more (and ``most`` or fewer, when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if most is not None and not low <= value <= most:
            raise argparse.ArgumentTypeError(f"must be between {low} and {most}, got {value}")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def between(low: float, high: float, what: str) -> Callable[[str], float]:
    """An ``argparse`` type for a finite number strictly between ``low`` and ``high``, described as ``what``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and low < value < high):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


def port(text: str) -> int:
    """An ``argparse`` type for a TCP port."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number between 1 and 65535, got {text!r}")
    return int(text)


# The last guard of "one readable line": lists are already cut where messages are made (bounded_list).
MAX_ERROR_CHARS = 1500


def _error_line(err: BaseException, url: str) -> str:
    text = mask_secrets(str(err), url)
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return f"{text[:MAX_ERROR_CHARS]}... ({len(text) - MAX_ERROR_CHARS} more characters)"


def run_guarded(
    prog: str, url: str, body: Callable[[], int], *,
    user_errors: tuple[type[Exception], ...] = (UserError,), failures: tuple[type[Exception], ...] = (),
) -> int:
    """Run ``body``; each error below is one line on stderr with ``url``'s password masked.

    ``user_errors`` (bad input) exit 2; ``failures`` and storage errors exit 1.
    """
    try:
        return body()
    except user_errors as err:
        print(f"{prog}: error: {_error_line(err, url)}", file=sys.stderr)
        return 2
    except failures as err:
        print(f"{prog}: error: {_error_line(err, url)}", file=sys.stderr)
        return 1
    except SQLAlchemyError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"{prog}: error: storage {mask_url(url)} failed: {mask_secrets(first, url)}", file=sys.stderr)
        return 1
    except Exception as err:
        failure = storage_failure_in(err)  # a storage that waiting cannot fix, however Optuna re-raised it
        if failure is None:
            raise
        print(f"{prog}: error: {_error_line(failure, url)}", file=sys.stderr)
        return 1


def add_storage_argument(parser: argparse.ArgumentParser, what: str = "database URL") -> None:
    """``--storage URL``, defaulting to ``$HPO_STORAGE``, else the demo's SQLite file."""
    parser.add_argument("--storage", default=None, help=f"{what} (default: ${STORAGE_ENV}, else sqlite:///hpo-studies.db)")


def run_storage_command(
    prog: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None, body: Callable[[argparse.Namespace, str], int]
) -> int:
    """Parse ``argv``, resolve ``--storage``, and run ``body(args, url)`` under :func:`run_guarded`; its exit code."""
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    url = resolve_storage_url(args.storage)
    return run_guarded(prog, url, lambda: body(args, url))


# 128 + SIGPIPE: what a shell reports for a command whose reader went away (`yes | head`).
BROKEN_PIPE_EXIT = 141


def exit_code_of(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """``main(argv)``'s exit code; a reader that went away (``| head``) ends the command quietly, no traceback."""
    try:
        code = main(argv)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return code
    except BrokenPipeError:
        # Python flushes stdout again on exit: point it at /dev/null so that flush has nowhere to fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
