"""``python -m hpo.dashboard``: the ``dashboard`` command; it lives in :mod:`hpo.cli._dashboard`."""

import sys

from hpo.cli._dashboard import main
from hpo.cli._parsing import exit_code_of

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
