"""The space's ``enqueue:`` entries, known by what they are: a study queues each configuration once, whatever its place.

The list is no part of the space's identity (:func:`hpo.study._resuming.check_resumable`): a known-good configuration
added to the YAML of a running study is queued by the next run. Each entry's origin (user attr ``enqueued_from``) is
``space:`` and its values as JSON, so an entry inserted before others, or edited, is a new configuration, and one
already queued is never queued again, wherever it moved in the list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from optuna.trial import FrozenTrial

from hpo._attrs import ENQUEUED_FROM_ATTR
from hpo.space._space import SearchSpace

# An origin an earlier version recorded: the entry's index in the list.
_BY_INDEX = re.compile(r"space:\d+")


def space_origin(params: dict[str, Any]) -> str:
    """The origin of an ``enqueue:`` entry with these values (as enqueued: :meth:`SearchSpace.enqueued_params`)."""
    return "space:" + json.dumps(params, sort_keys=True)


def space_entries(space: SearchSpace) -> list[tuple[str, dict[str, Any]]]:
    """``(origin, params)`` of each of the space's ``enqueue:`` entries, for :func:`hpo.study._study.enqueue_once`."""
    return [(space_origin(params), params) for params in space.enqueued_params()]


def origins_of(trials: Iterable[FrozenTrial]) -> set[str]:
    """The origins the study's trials were queued from; a trial an earlier version recorded by its entry's index counts
    as its values' origin too (those it was enqueued with)."""
    origins = set()
    for trial in trials:
        origin = trial.user_attrs.get(ENQUEUED_FROM_ATTR)
        origins.add(origin)
        fixed = trial.system_attrs.get("fixed_params")
        if isinstance(origin, str) and _BY_INDEX.fullmatch(origin) and isinstance(fixed, dict):
            origins.add(space_origin(fixed))
    return origins
