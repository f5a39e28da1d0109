"""Study orchestration: search spaces, storage, and running studies to a global budget.

The names are imported here directly, except those whose modules import torch (the objective,
the Python API built on it, and the speed test): they are imported on first use through
``__getattr__`` below, so that reading a space or a study (``status``, ``report``, ``export``,
``best``) never pays for torch. This table, the one in ``trial_executor/__init__.py`` and the
one in ``trial_executor/model/__init__.py`` are the only deferred imports of the project.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from hpo._errors import UserError
from hpo._ranking import best_trials
from hpo.cli._check_models import CHECK_MODELS
from hpo.reporting import PrecisionRow, StudyReport, build_report
from hpo.space import (
    CONSTRAINT_KEYS,
    DEFAULT_SPACE,
    FINETUNE_SPACE,
    MEASUREMENTS,
    OBJECTIVE_NAMES,
    SearchSpace,
    SearchSpaceError,
    load_search_space,
    measured_value,
    parse_search_space,
)
from hpo.storage import StorageError, create_storage, mask_url, resolve_storage_url
from hpo.study import (
    BASELINE_ATTR,
    SKIP_NON_FINITE,
    SKIP_OOM,
    SKIP_REASONS,
    SKIP_UNSUPPORTED,
    RunOptions,
    TrialFailedError,
    counts_toward_budget,
    finished_count,
    open_study,
    run_to_budget,
)
from trial_executor._deferred import deferred_names

if TYPE_CHECKING:
    from hpo._api import RunHooks, load, optimize, verdict
    from hpo.cli._speed_test import SpeedRow, speed_test
    from hpo.study._objective import executor_config, make_objective

# The deferred (torch-bound) names, by module: the same names as the block above.
_TORCH_BOUND = {
    "hpo._api": ("RunHooks", "load", "optimize", "verdict"),
    "hpo.cli._speed_test": ("SpeedRow", "speed_test"),
    "hpo.study._objective": ("executor_config", "make_objective"),
}
__getattr__ = deferred_names(globals(), _TORCH_BOUND)


class _Package(types.ModuleType):
    """``hpo`` itself, whose public names a submodule of the same name never replaces.

    Python binds an imported submodule on its package: ``import hpo.verdict`` (the entry module
    behind ``python -m hpo.verdict``) would make ``hpo.verdict`` that module, not the function,
    for the rest of the process. ``from hpo.verdict import main`` still finds the module
    (in ``sys.modules``); ``import hpo.verdict as m`` would give the function.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in __all__:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "BASELINE_ATTR",
    "CHECK_MODELS",
    "CONSTRAINT_KEYS",
    "DEFAULT_SPACE",
    "FINETUNE_SPACE",
    "MEASUREMENTS",
    "OBJECTIVE_NAMES",
    "SKIP_NON_FINITE",
    "SKIP_OOM",
    "SKIP_REASONS",
    "SKIP_UNSUPPORTED",
    "PrecisionRow",
    "RunHooks",
    "RunOptions",
    "SearchSpace",
    "SearchSpaceError",
    "SpeedRow",
    "StorageError",
    "StudyReport",
    "TrialFailedError",
    "UserError",
    "best_trials",
    "build_report",
    "counts_toward_budget",
    "create_storage",
    "executor_config",
    "finished_count",
    "load",
    "load_search_space",
    "make_objective",
    "mask_url",
    "measured_value",
    "open_study",
    "optimize",
    "parse_search_space",
    "resolve_storage_url",
    "run_to_budget",
    "speed_test",
    "verdict",
]
