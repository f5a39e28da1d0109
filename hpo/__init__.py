"""Study orchestration: search spaces, storage, and running studies to a global budget.

Names are imported on first use: reading a search space or a study must not pay for torch.
"""

from __future__ import annotations

from trial_executor._lazy import lazy_exports

# name -> (module, name in that module)
_EXPORTS: dict[str, tuple[str, str]] = {
    "BASELINE_ATTR": ("hpo.study._outcomes", "BASELINE_ATTR"),
    "CHECK_MODELS": ("hpo.cli._speed_test", "CHECK_MODELS"),
    "CONSTRAINT_KEYS": ("hpo.space._measures", "CONSTRAINT_KEYS"),
    "DEFAULT_SPACE": ("hpo.space._space", "DEFAULT_SPACE"),
    "MEASUREMENTS": ("hpo.space._measures", "MEASUREMENTS"),
    "RunHooks": ("hpo._api", "RunHooks"),
    "OBJECTIVE_NAMES": ("hpo.space._measures", "OBJECTIVE_NAMES"),
    "SKIP_NON_FINITE": ("hpo.study._outcomes", "SKIP_NON_FINITE"),
    "SKIP_OOM": ("hpo.study._outcomes", "SKIP_OOM"),
    "SKIP_REASONS": ("hpo.study._outcomes", "SKIP_REASONS"),
    "SKIP_UNSUPPORTED": ("hpo.study._outcomes", "SKIP_UNSUPPORTED"),
    "PrecisionRow": ("hpo.reporting._report", "PrecisionRow"),
    "SearchSpace": ("hpo.space._space", "SearchSpace"),
    "SearchSpaceError": ("hpo.space._params", "SearchSpaceError"),
    "SpeedRow": ("hpo.cli._speed_test", "SpeedRow"),
    "StorageError": ("hpo.storage._storage", "StorageError"),
    "StudyReport": ("hpo.reporting._report", "StudyReport"),
    "TrialFailedError": ("hpo.study._outcomes", "TrialFailedError"),
    "UserError": ("hpo._errors", "UserError"),
    "build_report": ("hpo.reporting._report", "build_report"),
    "counts_toward_budget": ("hpo.study._study", "counts_toward_budget"),
    "create_storage": ("hpo.storage._storage", "create_storage"),
    "executor_config": ("hpo.study._objective", "executor_config"),
    "finished_count": ("hpo.study._study", "finished_count"),
    "load": ("hpo._api", "load"),
    "load_search_space": ("hpo.space._space_loading", "load_search_space"),
    "make_objective": ("hpo.study._objective", "make_objective"),
    "mask_url": ("hpo.storage._storage", "mask_url"),
    "measured_value": ("hpo.space._measures", "measured_value"),
    "optimize": ("hpo._api", "optimize"),
    "open_study": ("hpo.study._study", "open_study"),
    "parse_search_space": ("hpo.space._space_loading", "parse_search_space"),
    "resolve_storage_url": ("hpo.storage._storage", "resolve_storage_url"),
    "run_to_budget": ("hpo.study._study", "run_to_budget"),
    "speed_test": ("hpo.cli._speed_test", "speed_test"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
