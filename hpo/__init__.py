"""Study orchestration: search spaces, storage, and running studies to a global budget."""

from hpo._check import CHECK_MODELS, SpeedRow, speed_test
from hpo._errors import UserError
from hpo._measures import CONSTRAINT_KEYS, MEASUREMENTS, OBJECTIVE_NAMES, measured_value
from hpo._objective import (
    BASELINE_ATTR,
    SKIP_NON_FINITE,
    SKIP_OOM,
    SKIP_REASONS,
    SKIP_UNSUPPORTED,
    TrialFailedError,
    executor_config,
    make_objective,
)
from hpo._report import PrecisionRow, StudyReport, build_report
from hpo._space import DEFAULT_SPACE, SearchSpace, SearchSpaceError, load_search_space, parse_search_space
from hpo._storage import StorageError, create_storage, mask_url, resolve_storage_url
from hpo._study import counts_toward_budget, finished_count, open_study, run_to_budget

__all__ = [
    "BASELINE_ATTR",
    "CHECK_MODELS",
    "CONSTRAINT_KEYS",
    "DEFAULT_SPACE",
    "MEASUREMENTS",
    "OBJECTIVE_NAMES",
    "SKIP_NON_FINITE",
    "SKIP_OOM",
    "SKIP_REASONS",
    "SKIP_UNSUPPORTED",
    "PrecisionRow",
    "SearchSpace",
    "SearchSpaceError",
    "SpeedRow",
    "StorageError",
    "StudyReport",
    "TrialFailedError",
    "UserError",
    "build_report",
    "counts_toward_budget",
    "create_storage",
    "executor_config",
    "finished_count",
    "load_search_space",
    "make_objective",
    "mask_url",
    "measured_value",
    "open_study",
    "parse_search_space",
    "resolve_storage_url",
    "run_to_budget",
    "speed_test",
]
