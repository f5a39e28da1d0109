"""Whether an existing study may go on with this run's space, data and models: what it stores of them, and the checks.

A study's trials compare only when they searched the same space, on the same data, with the same
weights: a run that differs in any is refused in one line, before anything is written, rather than
mixing incomparable trials. So is a study this service did not make (a plain Optuna script's), whose
trials and direction are not this space's.
"""

from __future__ import annotations

from typing import Any

import optuna

from hpo._attrs import (
    CONFIG_ATTR,
    DATA_SOURCE_ATTR,
    DATASET_FINGERPRINT_ATTR,
    LABEL_NAMES_ATTR,
    MODEL_FILES_ATTR,
    SEARCH_SPACE_ATTR,
    SEED_ATTR,
    is_verdict_trial,
    stored_space,
)
from hpo._errors import UserError
from hpo.space._fixes import same_value
from hpo.space._space import SearchSpace
from hpo.storage._inspect import open_existing_storage
from hpo.study._data import OtherDataError, data_flags
from hpo.study._model_files import check_same_model_files, space_model_files
from trial_executor import TextClassificationData, TrainConfig


def study_attrs(space: SearchSpace, data: TextClassificationData, source: dict[str, Any] | None) -> dict[str, Any]:
    """What a study stores of the run that made or resumed it (``source``: the data flags; ``None`` keeps those stored)."""
    attrs = {
        SEARCH_SPACE_ATTR: space.stored_form(),
        DATASET_FINGERPRINT_ATTR: data.fingerprint,
        LABEL_NAMES_ATTR: data.label_names,
        **({MODEL_FILES_ATTR: models} if (models := space_model_files(space)) else {}),
    }
    return attrs if source is None else {**attrs, DATA_SOURCE_ATTR: source}


def check_resumable(existing: optuna.Study, space: SearchSpace, wanted: dict[str, Any]) -> None:
    """Raise :class:`UserError` (or :class:`OtherDataError`) unless ``existing`` may go on with ``space`` and ``wanted``
    (:func:`study_attrs`)."""
    # The attrs read once and judged as read: a worker opening the study beside another that writes them (through a
    # proxy, with no lock) found the space absent, then present on a second read (a KeyError).
    name, stored = existing.study_name, existing.user_attrs
    if not isinstance(stored.get(SEARCH_SPACE_ATTR), dict):  # made elsewhere, or by a run stopped before it stored anything
        directions = [d.name.lower() for d in existing.directions]
        if directions != space.directions:
            raise UserError(f"study {name!r} {_goal(directions)}, and this space {_goal(space.directions)}: "
                            f"{', '.join(space.objective_names)}; pick a new --study-name")
        trials = len(existing.get_trials(deepcopy=False))
        if not trials:
            return
        stored = existing.user_attrs  # read after its trials: a worker beside this one stores its space before queuing any
        if not isinstance(stored.get(SEARCH_SPACE_ATTR), dict):
            raise UserError(f"study {name!r} holds {trials} trial{'s' * (trials != 1)} this service did not make (no search space is stored on it): "
                            "its trials are not this space's; pick a new --study-name")
    # The enqueue list and the sampler are no part of it: an entry added to a running study's YAML is queued once.
    was, now = (_identity(space_form) for space_form in (stored[SEARCH_SPACE_ATTR], wanted[SEARCH_SPACE_ATTR]))
    if not _same_space(was, now):
        raise UserError(
            f"study {name!r} was created with a different search space ({_first_difference(was, now)}); "
            "rerun with its original --space (and --model), or pick a new --study-name"
        )
    if DATASET_FINGERPRINT_ATTR in stored and stored[DATASET_FINGERPRINT_ATTR] != wanted[DATASET_FINGERPRINT_ATTR]:
        raise _other_data(name, stored, wanted[DATASET_FINGERPRINT_ATTR], wanted.get(DATA_SOURCE_ATTR))
    check_same_model_files(name, stored.get(MODEL_FILES_ATTR), wanted.get(MODEL_FILES_ATTR, {}))


def study_seed(existing: optuna.Study | None, given: int | None) -> int:
    """The --seed of study ``existing`` (trial k trains with seed + k): the one it was made with; ``given`` (0 for ``None``)
    where it is new. A run given another is refused: its trials would train from another origin, and could repeat seeds."""
    if existing is None or (stored := _stored_seed(existing)) is None:
        return 0 if given is None else given
    if given is not None and given != stored:
        raise UserError(f"study {existing.study_name!r} trains trial k with seed {stored} + k (it was made with --seed {stored}), "
                        f"and this run has --seed {given}; rerun with --seed {stored} (or without --seed), or pick a new --study-name")
    return stored


def _stored_seed(study: optuna.Study) -> int | None:
    """The study's stored seed; for a study made before it was stored, its first trial's seed less its number."""
    stored = study.user_attrs.get(SEED_ATTR)
    if isinstance(stored, int) and not isinstance(stored, bool):
        return stored
    for trial in study.get_trials(deepcopy=False):  # a retry keeps its original's seed, a verdict trial has the verdict's
        seed = (trial.user_attrs.get(CONFIG_ATTR) or {}).get("seed")
        if isinstance(seed, int) and "failed_trial" not in trial.system_attrs and not is_verdict_trial(trial):
            return (seed - trial.number) % 2**32
    return None


# What a study may change between runs: what is queued next (hpo.study._known_good) and how the next trials are proposed
# (the sampler, built by each run, as Optuna's load_study takes any); neither changes what a finished trial means.
_NOT_IDENTITY = ("enqueue", "sampler")


def _identity(space_form: dict[str, Any]) -> dict[str, Any]:
    """What of a stored space a study's trials compare by: all but its ``enqueue`` list, ``sampler`` and params'
    ``default``; each knob it neither searches nor fixes at the executor's default (naming the default is the same)."""
    form = {key: value for key, value in space_form.items() if key not in _NOT_IDENTITY}
    searched = form.get("params") or {}
    defaults = {name: value for name, value in TrainConfig.defaults().items() if name not in searched}
    # A param's default: only picks the fp32 baseline's value, queued once with the study's first run.
    params = {name: {k: v for k, v in spec.items() if k != "default"} if isinstance(spec, dict) else spec for name, spec in searched.items()}
    return {**form, "params": params, "fixed": {**defaults, **(form.get("fixed") or {})}}


def _same_space(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a study that stored space ``stored`` searches ``wanted``: equal, or stored by an earlier version with its
    fixed model directory as typed (``./my-bert``), which is ``wanted``'s absolute one from this working directory."""
    if stored == wanted:
        return True
    fixed = stored.get("fixed")
    model, now = (fixed or {}).get("model"), (wanted.get("fixed") or {}).get("model")
    if model is None or now is None:
        return False
    return {**stored, "fixed": {**fixed, "model": now}} == wanted and same_value("model", model, now)


def _goal(directions: list[str]) -> str:
    return f"{directions[0]}s one objective" if len(directions) == 1 else f"has {len(directions)} objectives ({', '.join(directions)})"


def _other_data(study_name: str, stored: dict[str, Any], fingerprint: str, now: dict[str, Any] | None) -> OtherDataError:
    source = stored.get(DATA_SOURCE_ATTR)
    # None: a TextClassificationData given in Python (no flags name it), or a study older than stored flags. The demo
    # reviews tried in its place (a verdict given no data) are no guess to let stand unexplained.
    ran_on = (": it names no data file to read again (it was made on data given in Python, or before data files were "
              "stored), so pass that same data" if source is None else f": it ran with {data_flags(source)}")
    if source is not None and now is not None and data_flags(now) != data_flags(source):  # a flag left at its default too
        ran_on += f", this run with {data_flags(now)}"
    return OtherDataError(
        f"study {study_name!r} was created on different data (fingerprint {stored[DATASET_FINGERPRINT_ATTR]}, now {fingerprint})"
        f"{ran_on}; rerun with its original data, or pick a new --study-name",
        source,
    )


def _first_difference(stored: Any, wanted: Any, where: str = "") -> str:
    """Where two stored spaces first differ, and how: ``params.batch_size.choices was [16, 32], now [8, 32]``, or
    ``model was searched, now fixed at 'my-bert'`` for a knob one searches and the other fixes."""
    if not where and (moved := _searched_or_fixed(stored, wanted)) is not None:
        return moved
    if isinstance(stored, dict) and isinstance(wanted, dict):
        for key in [*stored, *(k for k in wanted if k not in stored)]:
            if stored.get(key) != wanted.get(key):
                return _first_difference(stored.get(key), wanted.get(key), f"{where}.{key}" if where else str(key))
    return f"{where or 'the space'} was {stored!r}, now {wanted!r}"


def existing_space(url: str, study_name: str) -> dict[str, Any] | None:
    """The stored space of study ``study_name`` at ``url``, or ``None`` where there is no such study (nothing is created:
    a missing SQLite file or a database without Optuna's tables holds none). A run given no space
    resumes a study on its own space: on another machine, without the YAML it was made with."""
    try:
        storage = open_existing_storage(url)
    except UserError:
        return None
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return None
    return stored_space(study) or None


def _searched_or_fixed(stored: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """A knob one space searches and the other fixes (``--model`` on a space that searches models), said as such."""
    was, now = stored.get("params") or {}, wanted.get("params") or {}
    for name in [*was, *(k for k in now if k not in was)]:
        if (name in was) != (name in now):
            if name in was:
                return f"{name} was searched, now fixed at {(wanted.get('fixed') or {}).get(name)!r}"
            return f"{name} was fixed at {(stored.get('fixed') or {}).get(name)!r}, now searched"
    return None
