"""Running a study: the objective, trial outcomes, the budget of finished trials, workers and liveness."""

from hpo.study._objective import executor_config, make_objective
from hpo.study._outcomes import BASELINE_ATTR, SKIP_NON_FINITE, SKIP_OOM, SKIP_REASONS, SKIP_UNSUPPORTED, TrialFailedError
from hpo.study._study import counts_toward_budget, finished_count, open_study, run_to_budget

__all__ = [
    "BASELINE_ATTR",
    "SKIP_NON_FINITE",
    "SKIP_OOM",
    "SKIP_REASONS",
    "SKIP_UNSUPPORTED",
    "TrialFailedError",
    "counts_toward_budget",
    "executor_config",
    "finished_count",
    "make_objective",
    "open_study",
    "run_to_budget",
]
