"""``python -m hpo.dashboard``: the ``dashboard`` command; it lives in :mod:`hpo.cli._dashboard`."""

import sys

from hpo.cli._dashboard import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
