"""Study orchestration: search spaces, storage, and running studies to a global budget.

Names are imported on first use: reading a search space or a study must not pay for torch.
"""

from __future__ import annotations

from trial_executor._lazy import lazy_exports

# name -> (module, name in that module)
_EXPORTS: dict[str, tuple[str, str]] = {
    "BASELINE_ATTR": ("hpo._outcomes", "BASELINE_ATTR"),
    "CHECK_MODELS": ("hpo._check", "CHECK_MODELS"),
    "CONSTRAINT_KEYS": ("hpo._measures", "CONSTRAINT_KEYS"),
    "DEFAULT_SPACE": ("hpo._space", "DEFAULT_SPACE"),
    "MEASUREMENTS": ("hpo._measures", "MEASUREMENTS"),
    "RunHooks": ("hpo._api", "RunHooks"),
    "OBJECTIVE_NAMES": ("hpo._measures", "OBJECTIVE_NAMES"),
    "SKIP_NON_FINITE": ("hpo._outcomes", "SKIP_NON_FINITE"),
    "SKIP_OOM": ("hpo._outcomes", "SKIP_OOM"),
    "SKIP_REASONS": ("hpo._outcomes", "SKIP_REASONS"),
    "SKIP_UNSUPPORTED": ("hpo._outcomes", "SKIP_UNSUPPORTED"),
    "PrecisionRow": ("hpo._report", "PrecisionRow"),
    "SearchSpace": ("hpo._space", "SearchSpace"),
    "SearchSpaceError": ("hpo._space", "SearchSpaceError"),
    "SpeedRow": ("hpo._check", "SpeedRow"),
    "StorageError": ("hpo._storage", "StorageError"),
    "StudyReport": ("hpo._report", "StudyReport"),
    "TrialFailedError": ("hpo._outcomes", "TrialFailedError"),
    "UserError": ("hpo._errors", "UserError"),
    "build_report": ("hpo._report", "build_report"),
    "counts_toward_budget": ("hpo._study", "counts_toward_budget"),
    "create_storage": ("hpo._storage", "create_storage"),
    "executor_config": ("hpo._objective", "executor_config"),
    "finished_count": ("hpo._study", "finished_count"),
    "load": ("hpo._api", "load"),
    "load_search_space": ("hpo._space_loading", "load_search_space"),
    "make_objective": ("hpo._objective", "make_objective"),
    "mask_url": ("hpo._storage", "mask_url"),
    "measured_value": ("hpo._measures", "measured_value"),
    "optimize": ("hpo._api", "optimize"),
    "open_study": ("hpo._study", "open_study"),
    "parse_search_space": ("hpo._space_loading", "parse_search_space"),
    "resolve_storage_url": ("hpo._storage", "resolve_storage_url"),
    "run_to_budget": ("hpo._study", "run_to_budget"),
    "speed_test": ("hpo._check", "speed_test"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
