"""Study orchestration: search spaces, storage, and running studies to a global budget."""

from hpo._errors import UserError
from hpo._objective import executor_config, make_objective
from hpo._space import DEFAULT_SPACE, SearchSpace, SearchSpaceError, load_search_space, parse_search_space
from hpo._storage import StorageError, create_storage, mask_url, resolve_storage_url
from hpo._study import counts_toward_budget, finished_count, open_study, run_to_budget

__all__ = [
    "DEFAULT_SPACE",
    "SearchSpace",
    "SearchSpaceError",
    "StorageError",
    "UserError",
    "counts_toward_budget",
    "create_storage",
    "executor_config",
    "finished_count",
    "load_search_space",
    "make_objective",
    "mask_url",
    "open_study",
    "parse_search_space",
    "resolve_storage_url",
    "run_to_budget",
]
