"""Trials out of the storage: the best configuration ready to reuse, and every trial as flat rows."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial

from hpo._attrs import config_of, config_or_params, is_majority_class, majority_class_hint, stored_space
from hpo._errors import UserError
from hpo._ranking import best_trials, why_no_best
from hpo.reporting._numbers import trials_text
from hpo.space._params import RESERVED_KEYS
from hpo.storage._inspect import objective_names

# Leading columns of an export, before params and user attributes.
BASE_COLUMNS = ("number", "state", "datetime_start", "datetime_complete", "duration_s")


def reusable_config(trial: FrozenTrial) -> dict[str, Any]:
    """The trial's resolved config as a search space's ``fixed:`` block (run flags such as the seed left out)."""
    config = config_or_params(trial)
    return {key: value for key, value in config.items() if key not in RESERVED_KEYS}


def trial_entry(trial: FrozenTrial, names: list[str]) -> dict[str, Any]:
    config = config_of(trial)
    return {
        "trial": trial.number,
        "values": dict(zip(names, trial.values, strict=True)),
        "params": dict(trial.params),
        # Set per run: trial k of a study trains with seed --seed + k.
        "trial_seed": config.get("seed"),
        "fixed": reusable_config(trial),
    }


def best_document(study: optuna.Study) -> dict[str, Any]:
    """The best trial (one objective) or the Pareto front (several), each with a ready-to-use ``fixed`` config."""
    names = objective_names(study)
    best = best_document_trials(study)
    if len(names) == 1:
        return {"study": study.study_name, **trial_entry(best[0], names)}
    return {"study": study.study_name, "objectives": names, "pareto_front": [trial_entry(t, names) for t in best]}


def best_yaml(document: dict[str, Any]) -> str:
    header = (
        "# `fixed:` is the trial's resolved config: paste it into a search space's fixed: section\n"
        "# (and move the keys you still want to search into params:).\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def best_space(study: optuna.Study) -> dict[str, Any]:
    """A search space that trains the study's best trial again: its config fixed, its precision the one choice.

    ``python -m hpo run --space`` accepts it as is; the study's objectives and constraints are
    kept, the pruner is off (one configuration has nothing to compare against).
    """
    if len(study.directions) > 1:
        raise UserError(
            f"study {study.study_name!r} has several objectives: its best trials are a Pareto front; "
            "--format space writes one trial: pick one from `--format yaml` and paste its fixed: block"
        )
    (trial,) = best_document_trials(study)
    stored = stored_space(study)
    if not config_of(trial) or not stored:  # its params are not TrainConfig keys: a space `run` refuses, with no objective
        raise UserError(
            f"study {study.study_name!r} was not made by python -m hpo run (trial {trial.number} has no stored training config): "
            "--format space cannot write a space that retrains it; use --format yaml to read its params"
        )
    fixed = reusable_config(trial)
    precision = fixed.pop("fp_precision", "fp32")
    space: dict[str, Any] = {key: stored[key] for key in ("task", "objective", "objectives", "constraints", "oom_fallback") if key in stored}
    space["pruner"] = {"type": "none"}
    space["params"] = {"fp_precision": {"type": "categorical", "choices": [precision]}}
    space["fixed"] = fixed
    return space


def best_space_yaml(study: optuna.Study, space: dict[str, Any]) -> str:
    trial = best_document_trials(study)[0]
    seed = config_of(trial).get("seed")
    header = (
        f"# Trial {trial.number} of study {study.study_name!r} as a search space: its config fixed, its precision\n"
        f"# the one choice. Retrain it:  python -m hpo run --space THIS_FILE --study-name NEW --n-trials 1"
        f"{f' --seed {seed}' if seed is not None else ''}\n"
        "# (--seed is the trial's own seed; add --data and its columns as in the original run).\n"
    )
    return header + yaml.safe_dump(space, sort_keys=False, default_flow_style=False)


def best_document_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial, or the Pareto front; a :class:`UserError` when there is none."""
    best = best_trials(study)
    if not best:
        raise UserError(f"study {study.study_name!r} has no best trial: {why_no_best(study)}; run more trials with `python -m hpo run`")
    return best


def learned_nothing_note(study: optuna.Study) -> str | None:
    """Said beside ``best``'s output when its best trial(s) learned nothing (majority class): a config not worth reusing."""
    flagged = [t for t in best_trials(study) if is_majority_class(t)]
    if not flagged:
        return None
    return (f"{trials_text(t.number for t in flagged)} learned nothing (majority class: one class predicted for every row): "
            f"no configuration worth reusing; {majority_class_hint(flagged)}")


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: ``{"hardware": {"device_name": x}}`` -> ``{"hardware.device_name": x}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(flatten(item, f"{name}."))
        else:
            flat[name] = item
    return flat


def trial_row(trial: FrozenTrial, names: list[str]) -> dict[str, Any]:
    """One trial as a flat row: state, timings, ``values.<objective>``, ``params.<name>``, then user attrs."""
    duration = trial.duration.total_seconds() if trial.duration is not None else None
    row: dict[str, Any] = {
        "number": trial.number,
        "state": trial.state.name,
        "datetime_start": trial.datetime_start.isoformat() if trial.datetime_start else None,
        "datetime_complete": trial.datetime_complete.isoformat() if trial.datetime_complete else None,
        "duration_s": duration,
    }
    values = trial.values or [None] * len(names)
    row.update({f"values.{name}": value for name, value in zip(names, values, strict=True)})
    row.update(flatten(trial.params, "params."))
    # An attribute set by hand under a column's name (state, say) is kept beside the column, never over it.
    row.update({key if key not in row else f"user_attrs.{key}": value for key, value in flatten(trial.user_attrs).items()})
    return row


def export_rows(study: optuna.Study) -> list[dict[str, Any]]:
    names = objective_names(study)
    return [trial_row(t, names) for t in study.get_trials(deepcopy=False)]


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row)) or list(BASE_COLUMNS)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return value


def rows_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_columns(rows), lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)
    return out.getvalue()


def _json_clean(value: Any) -> Any:
    """NaN and inf are not JSON (``json.dumps`` writes ``Infinity``, which parsers refuse): they become null, inside lists and
    objects too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_json_clean(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_clean(item) for key, item in value.items()}
    return value


def rows_json(rows: list[dict[str, Any]]) -> str:
    return json.dumps([_json_clean(row) for row in rows], indent=2, default=str, allow_nan=False) + "\n"


def best_json(document: dict[str, Any]) -> str:
    """:func:`best_document` as JSON text; a value that is not finite (a study made elsewhere may hold one) is null."""
    return json.dumps(_json_clean(document), indent=2, allow_nan=False) + "\n"
