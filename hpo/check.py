"""``python -m hpo.check``: the ``check`` command; it lives in :mod:`hpo.cli._check`."""

import sys

from hpo.cli._check import main
from hpo.cli._parsing import exit_code_of

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
