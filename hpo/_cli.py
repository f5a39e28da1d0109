"""What every command line of this package shares: one-line errors, masked URLs, exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from sqlalchemy.exc import SQLAlchemyError

from hpo._errors import UserError
from hpo._storage import mask_secrets, mask_url


class Parser(argparse.ArgumentParser):
    """``argparse`` that reports a bad flag in one line, without the usage dump."""

    def __init__(self, prog: str, description: str | None, epilog: str) -> None:
        super().__init__(prog=prog, description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def port(text: str) -> int:
    """An ``argparse`` type for a TCP port."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a port number between 1 and 65535, got {text!r}")
    return int(text)


def run_guarded(prog: str, url: str, body: Callable[[], int]) -> int:
    """Run ``body``; a user error is one masked line on stderr (exit 2), a storage failure too (exit 1)."""
    try:
        return body()
    except UserError as err:
        print(f"{prog}: error: {mask_secrets(str(err), url)}", file=sys.stderr)
        return 2
    except SQLAlchemyError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"{prog}: error: storage {mask_url(url)} failed: {mask_secrets(first, url)}", file=sys.stderr)
        return 1
