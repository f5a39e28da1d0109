"""``python -m hpo.status``: the ``status`` command; it lives in :mod:`hpo.cli._status`."""

import sys

from hpo.cli._parsing import exit_code_of
from hpo.cli._status import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
