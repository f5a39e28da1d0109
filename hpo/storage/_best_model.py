"""The study's best model, kept: no retraining by hand once a study is done.

While :func:`keeping_best_model` is on for a study, each trial's run writes its final model and
tokenizer (``save_pretrained`` format, LoRA merged) to a local scratch directory. When the
trial finishes and is the study's best (one objective; among trials meeting the constraints),
the directory goes to the artifact store as one tar file, named by the study's ``best_model``
user attr, and the previous best's file is removed: the store holds one model per study.
``python -m hpo best --save-model DIR`` writes it out (:func:`export_best_model`).

Two workers finishing new bests at the same moment may both upload; the attr then names one
of them and the other file stays behind. So does the file of a worker killed between its upload
and the attr. Bounded: one file per such race or kill (checkpoints, which a killed worker leaves
far more often, are named before they are written: :mod:`hpo.storage._checkpoints`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import BEST_MODEL_ATTR, config_of
from hpo._errors import UserError
from hpo._ranking import best_trials, why_no_best
from hpo.storage._scratch import scratch_dir

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore

# Studies (storage object, study id) whose trials save their final model, in this process.
_KEEPING: set[tuple[int, int]] = set()
# Trial id -> the directory its run saves the final model to, until the trial has finished.
_FINAL_MODELS: dict[int, Path] = {}

_logger = logging.getLogger(__name__)


@contextlib.contextmanager
def keeping_best_model(study: optuna.Study) -> Iterator[None]:
    """Within this block, trials of ``study`` run in this process save their final model for :func:`keep_if_best`."""
    key = (id(study._storage), study._study_id)
    _KEEPING.add(key)
    try:
        yield
    finally:
        _KEEPING.discard(key)


def final_model_dir(trial: optuna.Trial) -> Path | None:
    """Where ``trial``'s run should save its final model; ``None`` when its study keeps none."""
    if (id(trial.study._storage), trial.study._study_id) not in _KEEPING:
        return None
    directory = scratch_dir(trial.number, "model") / "model"
    _FINAL_MODELS[trial._trial_id] = directory
    return directory


def drop_final_model(trial: optuna.Trial) -> None:
    """Remove ``trial``'s final model copy now: it will never be told here (its storage failed, or it was stopped)."""
    saved = _FINAL_MODELS.pop(trial._trial_id, None)
    if saved is not None:
        shutil.rmtree(saved.parent, ignore_errors=True)


def _is_best(study: optuna.Study, trial: FrozenTrial) -> bool:
    if trial.state != TrialState.COMPLETE or len(study.directions) > 1:
        return False
    return [t.number for t in best_trials(study)] == [trial.number]


def keep_if_best(study: optuna.Study, trial: FrozenTrial, store: FileSystemArtifactStore) -> bool:
    """After ``trial`` finished: store its model if it is the study's best, replacing the previous one; drop the scratch copy."""
    saved = _FINAL_MODELS.pop(trial._trial_id, None)
    if saved is None:
        return False
    try:
        if not saved.is_dir() or not _is_best(study, trial):
            return False
        artifact_id = str(uuid.uuid4())
        archive = saved.parent / "model.tar"
        try:
            with tarfile.open(archive, "w") as tar:
                tar.add(saved, arcname=".")
            with archive.open("rb") as stream:
                store.write(artifact_id, stream)
        except OSError as err:  # a read-only or full artifact store costs the kept model, not the study
            _logger.warning("trial %d is the best so far but its model was not kept: %s", trial.number, err)
            return False
        previous = study.user_attrs.get(BEST_MODEL_ATTR)
        model = config_of(trial).get("model")
        study.set_user_attr(BEST_MODEL_ATTR, {"trial": trial.number, "artifact_id": artifact_id, "value": trial.value, "model": model})
        if previous:
            with contextlib.suppress(Exception):  # already gone: nothing to free
                store.remove(previous["artifact_id"])
        return True
    finally:
        shutil.rmtree(saved.parent, ignore_errors=True)


def _why_none_kept(study: optuna.Study, best: list[FrozenTrial]) -> str:
    if len(study.directions) > 1:  # `best --format space` refuses a front
        keeps_none = "a study with several objectives keeps none (its best trials are a Pareto front)"
        if not best:  # `best` lists no front to paste from
            return f"{keeps_none}, and it has no Pareto front yet ({why_no_best(study)})"
        return f"{keeps_none}; to retrain one, paste its fixed: block from `python -m hpo best` into a search space"
    if not best:
        return f"it has no best trial ({why_no_best(study)}); run more trials with `python -m hpo run`"
    return ("trials keep the best one when run by `python -m hpo run` with an artifact store and a single objective; "
            "rerun the study, or retrain with `best --format space`")


def export_best_model(study: optuna.Study, store_path: str, directory: Path) -> dict[str, Any]:
    """Write the kept best model and tokenizer into ``directory`` (new or empty) from the artifact store at ``store_path``.

    Returns the ``best_model`` attr.
    """
    kept = study.user_attrs.get(BEST_MODEL_ATTR)
    best = best_trials(study)
    if not kept:
        raise UserError(f"study {study.study_name!r} kept no model: {_why_none_kept(study, best)}")
    if best and best[0].number != kept["trial"] and best[0].value != kept.get("value"):
        raise UserError(
            f"the model study {study.study_name!r} kept is trial {kept['trial']}'s ({kept.get('value')}), but its best trial is now "
            f"{best[0].number} ({best[0].value}), whose model was not kept (it ran without an artifact store, or storing it failed); "
            f"retrain trial {best[0].number} from `best --format space`"
        )
    from hpo.storage._checkpoints import existing_artifact_store  # here: that module imports this one

    store = existing_artifact_store(store_path)
    if store is None:
        raise UserError(f"no artifact store at {store_path} (--artifact-store); pass the directory the study ran with")
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--save-model {directory} is a file, not a directory; pass a new or empty directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise UserError(f"--save-model {directory} exists and is not empty; pass a new or empty directory")
    with tempfile.TemporaryDirectory(prefix="hpo-best-model-") as scratch:
        archive = Path(scratch) / "model.tar"
        try:
            with store.open_reader(kept["artifact_id"]) as reader, archive.open("wb") as out:
                shutil.copyfileobj(reader, out)
        except Exception:
            raise UserError(
                f"the best model of study {study.study_name!r} (trial {kept['trial']}) is not in the artifact store; "
                "pass the --artifact-store the study ran with"
            ) from None
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # under a file, in /proc, read-only: was a traceback
            raise UserError(f"cannot create --save-model {directory}: {err.strerror}; pass a new or empty directory that can be made there") from None
        with tarfile.open(archive) as tar:
            tar.extractall(directory, filter="data")
    return kept
