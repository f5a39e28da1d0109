"""``python -m hpo.export``: the ``export`` command; it lives in :mod:`hpo.cli._export`."""

import sys

from hpo.cli._export import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
