"""Running a study: the objective, trial outcomes, the budget of finished trials, workers and liveness.

The objective (``hpo.study._objective``) is not imported here: it imports the executor's
torch-bound names; ``hpo.make_objective`` defers it.
"""

from hpo._attrs import BASELINE_ATTR
from hpo.study._budget import counts_toward_budget, finished_count
from hpo.study._options import RunOptions
from hpo.study._outcomes import (
    SKIP_NON_FINITE,
    SKIP_OOM,
    SKIP_REASONS,
    SKIP_UNSUPPORTED,
    TrialFailedError,
    says_nothing_here,
)
from hpo.study._study import open_study, run_to_budget

__all__ = [
    "BASELINE_ATTR",
    "SKIP_NON_FINITE",
    "SKIP_OOM",
    "SKIP_REASONS",
    "SKIP_UNSUPPORTED",
    "RunOptions",
    "TrialFailedError",
    "counts_toward_budget",
    "finished_count",
    "open_study",
    "run_to_budget",
    "says_nothing_here",
]
