"""The local model directories a study trains, by the hashes of their files: stored when it begins, compared when it resumes.

A dataset is fingerprinted for the same reason: a study's trials compare only when they trained on
the same things. A model directory saved again under the same name (other weights, another
tokenizer) would resume the study with nothing to say its later trials trained something else.
"""

from __future__ import annotations

from typing import Any

from hpo._errors import UserError
from hpo.space._resolving import candidate_values
from hpo.space._space import SearchSpace


def space_model_files(space: SearchSpace) -> dict[str, dict[str, str]]:
    """``{model name: {file: hash}}`` for each local directory a trial of ``space`` can train (presets and hub ids have none)."""
    from trial_executor.model import model_files  # here: the package imports torch, which reading a study does not need

    files = {str(name): model_files(str(name)) for name in candidate_values(space, "model")}
    return {name: hashes for name, hashes in files.items() if hashes}


def check_same_model_files(study_name: str, stored: Any, wanted: dict[str, dict[str, str]]) -> None:
    """Refuse to resume study ``study_name`` on a model directory whose files differ from those it ``stored`` (a study
    made before models were hashed has none stored: nothing to compare)."""
    stored = stored if isinstance(stored, dict) else {}
    for name, now in wanted.items():
        before = stored.get(name)
        if not isinstance(before, dict) or before == now:
            continue
        changed = next(f for f in sorted({*before, *now}) if before.get(f) != now.get(f))
        how = "is new" if changed not in before else "is gone" if changed not in now else "has changed"
        raise UserError(f"study {study_name!r} began on other files in model {name!r} ({changed} {how} since); restore the "
                        "model the study began with, or pick a new --study-name for this one")
