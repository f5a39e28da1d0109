"""``python -m hpo.export``: the ``export`` command; it lives in :mod:`hpo.cli._export`."""

import sys

from hpo.cli._export import main
from hpo.cli._parsing import exit_code_of

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
