"""Search spaces: the YAML schema, loading and validating it, ``--fix`` overrides, and the measures a study can optimize."""

from hpo.space._measures import CONSTRAINT_KEYS, MEASUREMENTS, OBJECTIVE_NAMES, measured_value, quality_objective
from hpo.space._params import SearchSpaceError
from hpo.space._space import DEFAULT_SPACE, FINETUNE_SPACE, SearchSpace
from hpo.space._space_loading import load_search_space, parse_search_space

__all__ = [
    "CONSTRAINT_KEYS",
    "DEFAULT_SPACE",
    "FINETUNE_SPACE",
    "MEASUREMENTS",
    "OBJECTIVE_NAMES",
    "SearchSpace",
    "SearchSpaceError",
    "load_search_space",
    "measured_value",
    "parse_search_space",
    "quality_objective",
]
