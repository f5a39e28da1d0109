"""``python -m hpo.proxy``: the ``proxy`` command; it lives in :mod:`hpo.cli._proxy`."""

import sys

from hpo.cli._parsing import exit_code_of
from hpo.cli._proxy import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(exit_code_of(main))
