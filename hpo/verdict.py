"""``python -m hpo.verdict``: the ``verdict`` command; it lives in :mod:`hpo.cli._verdict`."""

import sys

from hpo.cli._parsing import exit_code_of
from hpo.cli._verdict import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
