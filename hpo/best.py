"""``python -m hpo.best``: the ``best`` command; it lives in :mod:`hpo.cli._best`."""

import sys

from hpo.cli._best import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
