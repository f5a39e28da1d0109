"""Trial checkpoints in an Optuna artifact store, so a retried trial resumes where its predecessor stopped.

A trial's latest checkpoint is uploaded at each evaluation and named in its user attr
``checkpoint``. When a worker dies, Optuna's ``RetryHeartbeatStaleTrialCallback`` re-queues the
trial with its user attrs, so the retry starts with its predecessor's ``checkpoint`` attr and
resumes from it. Only the latest checkpoint of a retry chain is kept, and none once a trial
finishes unless ``keep`` is set: a finished trial's checkpoint is removed once Optuna has told the
trial (:func:`remove_told_checkpoint`), never before, so a worker killed between the end of
training and the tell leaves its retry the checkpoint to resume from (the pointer then says
``removed_when_told``, with the number of the trial that finished with it: a retry that inherits the pointer
and is told without having run, as one started past the budget is, removes nothing).

A worker can die at any point of an upload, so every file is named in the trial's attrs before
it is written and until it is removed: ``checkpoint_uploading`` names the upload in progress, and
the ``checkpoint`` pointer names the one it ``superseded`` until the next upload. A retry removes
both (the committed checkpoint, which it resumes from, aside), so a killed worker's leftovers
(a checkpoint half-written or never committed, or a superseded one not yet removed) do not pile up.

What no trial will resume from is swept when a run starts (:func:`sweep_checkpoints`): the checkpoint of a
trial whose worker was killed between the tell and the removal, of a trial whose retries ran out, and what a
killed worker left that no retry came to remove. Each checkpoint is named after the trial that wrote it
(``checkpoint-<trial id>-<uuid>``), so the sweep reads that trial, and its retries only once it has ended.

Checkpoints are written to the store directly, not registered as trial artifacts: they come
and go while the trial runs, and a registered artifact that is gone would stay listed in
optuna-dashboard (Optuna can't remove a trial's system attr).
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, download_artifact
from optuna.trial import TrialState

from hpo._attrs import CHECKPOINT_ATTR, CHECKPOINT_UPLOADING_ATTR, RESUMED_AT_STEP_ATTR, RESUMED_FROM_TRIAL_ATTR
from hpo._errors import UserError
from hpo.storage._best_model import drop_final_model, final_model_dir
from hpo.storage._scratch import scratch_dir
from hpo.storage._trial_attrs import set_user_attrs

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from trial_executor import Checkpointing

DEFAULT_ARTIFACT_DIR = "hpo-artifacts"
REMOVED_WHEN_TOLD = "removed_when_told"
KEPT = "kept"  # the finished trial's number, on a checkpoint kept by --keep-checkpoints
_MARKS = (REMOVED_WHEN_TOLD, KEPT)
# A checkpoint's artifact id: the id (the storage's, not the study's number) of the trial that wrote it, and a uuid.
_CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointSweep:
    """What :func:`sweep_checkpoints` needs to know of a run: its study, whether a failed trial's retry may yet come
    (the run's retry policy: ``hpo.study._liveness.retry_may_come``), which trials are placeholders that never ran
    (``hpo.study._outcomes.never_ran``), whose copied pointers name checkpoints they never trained from, and whether it
    keeps finished trials' checkpoints."""

    study: optuna.Study
    retry_may_come: Callable[[FrozenTrial, list[FrozenTrial]], bool]  # (a chain's last trial, the study's trials)
    never_ran: Callable[[FrozenTrial], bool]
    keep: bool = False


def artifact_store(path: str | None, sweep: CheckpointSweep | None = None) -> FileSystemArtifactStore:
    """A local (or shared network) directory store: ``--artifact-store PATH``; for a run, the checkpoints in it that no
    trial of its study will resume from are swept first (:func:`sweep_checkpoints`).

    For S3-style stores, Optuna's ``optuna.artifacts.Boto3ArtifactStore`` has the same
    interface; every worker of a study must reach the same store.
    """
    directory = Path(path or DEFAULT_ARTIFACT_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(str(directory))
    if sweep is not None:
        sweep_checkpoints(sweep, store, directory)
    return store


def existing_artifact_store(path: str) -> FileSystemArtifactStore | None:
    """The artifact store at ``path`` if the directory exists (reading commands never create one); a file there is
    a mistyped path, refused (the dashboard served on with a warning, for /etc/passwd)."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise UserError(f"--artifact-store {directory} is a file, not a directory; pass the directory the study ran with")
    return FileSystemArtifactStore(str(directory)) if directory.is_dir() else None


class TrialCheckpoints:
    """Checkpointing for one Optuna trial: resume from the inherited checkpoint, upload new ones."""

    def __init__(self, trial: optuna.Trial, store: FileSystemArtifactStore, *, keep: bool = False) -> None:
        self.trial = trial
        self.store = store
        self.keep = keep
        self.scratch = scratch_dir(trial.number)
        # A retry starts with its predecessor's user attrs, the checkpoint pointer among them.
        self.inherited: dict[str, Any] | None = trial.user_attrs.get(CHECKPOINT_ATTR)
        if self.inherited and any(mark in self.inherited for mark in _MARKS):  # its predecessor died before the tell: this one's now
            self.inherited = {k: v for k, v in self.inherited.items() if k not in _MARKS}
            trial.set_user_attr(CHECKPOINT_ATTR, self.inherited)
        self.latest = self.inherited
        self.upload_failed = False
        self._remove_leftovers(trial.user_attrs.get(CHECKPOINT_UPLOADING_ATTR))

    def _remove_leftovers(self, uploading: str | None) -> None:
        """Remove what a predecessor killed mid-upload left: its upload in progress, and the checkpoint its last one superseded."""
        committed = self.inherited["artifact_id"] if self.inherited else None
        for artifact_id in (uploading, (self.inherited or {}).get("superseded")):
            if artifact_id and artifact_id != committed:
                _remove(self.store, {"artifact_id": artifact_id})

    def checkpointing(self) -> Checkpointing:
        # Imported here: the dashboard reads this module's store and must not pay for torch.
        from trial_executor import Checkpointing

        resume_from = None
        if self.inherited is not None:
            resume_from = self.scratch / "resume.pt"
            try:
                download_artifact(artifact_store=self.store, file_path=str(resume_from), artifact_id=self.inherited["artifact_id"])
            except Exception as err:  # a lost checkpoint means starting over, not failing; said, as it costs the work
                resume_from = None
                self._not_resumed()
                _logger.warning(
                    "trial %d: the checkpoint it would resume from (trial %d, step %d) is not in this artifact store (%s); "
                    "it starts over from step 0 (to resume, run with the --artifact-store the interrupted trial used)",
                    self.trial.number, self.inherited["trial"], self.inherited["step"], type(err).__name__,
                )
            else:
                self.trial.set_user_attr(RESUMED_FROM_TRIAL_ATTR, self.inherited["trial"])
                self.trial.set_user_attr(RESUMED_AT_STEP_ATTR, self.inherited["step"])
        return Checkpointing(
            directory=self.scratch / "latest", resume_from=resume_from, on_saved=self._saved,
            final_model=final_model_dir(self.trial), on_unusable=self._unusable,
        )

    def _not_resumed(self) -> None:
        """A retry starts with its predecessor's user attrs: that one resumed says nothing of this one, which did not."""
        for key in (RESUMED_FROM_TRIAL_ATTR, RESUMED_AT_STEP_ATTR):
            if self.trial.user_attrs.get(key) is not None:
                self.trial.set_user_attr(key, None)

    def _unusable(self, err: Exception) -> None:
        """The inherited checkpoint cannot be resumed (truncated; another config, e.g. a rerun's other --seed before the
        seed was inherited): the trial starts over, said, as it costs the work. It failed for good before."""
        self._not_resumed()
        _logger.warning("trial %d: %s; it starts over from step 0", self.trial.number, err)

    def _saved(self, path: Path, step: int) -> None:
        artifact_id = f"checkpoint-{self.trial._trial_id}-{uuid.uuid4()}"
        self.trial.set_user_attr(CHECKPOINT_UPLOADING_ATTR, artifact_id)  # named before a byte of it is written
        try:
            with path.open("rb") as checkpoint:
                self.store.write(artifact_id, checkpoint)
        except Exception as err:  # a read-only or full store costs this checkpoint, not the trial
            _remove(self.store, {"artifact_id": artifact_id})  # what a full disk left half-written
            if not self.upload_failed:
                kept = f"step {self.latest['step']}" if self.latest else "none"
                _logger.warning(
                    "trial %d: checkpoint at step %d not saved to the artifact store (%s); the trial goes on, "
                    "a retry would resume from the last saved one (%s)", self.trial.number, step, err, kept,
                )
            self.upload_failed = True
            return
        previous, self.latest = self.latest, {"artifact_id": artifact_id, "step": step, "trial": self.trial.number}
        if previous is not None:
            self.latest["superseded"] = previous["artifact_id"]  # named until removed: see the module's docstring
        self.trial.set_user_attr(CHECKPOINT_ATTR, self.latest)
        if previous is not None:
            _remove(self.store, previous)


    def close(self, *, finished: bool) -> None:
        """Drop local files; once the trial finished, mark its stored checkpoint for removal when told (``kept`` if ``keep``)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        if not finished:  # no tell will come to hand its model to keep_if_best, which removes it otherwise
            drop_final_model(self.trial)
            return
        marked: dict[str, Any] = {}
        if self.latest is not None:
            marked[CHECKPOINT_ATTR] = {**self.latest, (KEPT if self.keep else REMOVED_WHEN_TOLD): self.trial.number}
        if self.trial.user_attrs.get(CHECKPOINT_UPLOADING_ATTR) is not None:
            marked[CHECKPOINT_UPLOADING_ATTR] = None  # the upload it named is committed or removed
        set_user_attrs(self.trial, marked)  # one write: a pointer marked to go, its upload no longer in flight


def remove_told_checkpoint(trial: FrozenTrial, store: FileSystemArtifactStore) -> None:
    """Remove the stored checkpoint ``trial`` finished with, now that Optuna has told it (see the module's docstring)."""
    pointer = trial.user_attrs.get(CHECKPOINT_ATTR)
    if trial.state.is_finished() and pointer and _marked_by(pointer, trial):
        _remove(store, pointer)


def _marked_by(pointer: dict[str, Any], trial: FrozenTrial) -> bool:
    """Whether ``trial`` itself finished with ``pointer``'s checkpoint and marked it for removal (not a predecessor)."""
    mark = pointer.get(REMOVED_WHEN_TOLD)
    return mark is True or (type(mark) is int and mark == trial.number)  # True: the mark before it named its trial


def sweep_checkpoints(sweep: CheckpointSweep, store: FileSystemArtifactStore, directory: Path) -> list[str]:
    """Remove the checkpoints in ``directory`` (``store``'s) that no trial of ``sweep.study`` will resume from; their ids.

    A checkpoint belongs to its writer's retry chain: the writer and the trials that retry it (``retry_history``).
    While a trial of the chain waits or runs, or a retry of its last failed trial may yet come, its files stay. Once
    the chain has ended, only the checkpoint its last trial finished with and kept (``--keep-checkpoints``) stays:
    one marked for removal when told goes (its worker was killed between the tell and the removal), as do a failed
    trial's whose retries ran out (unless this run keeps checkpoints) and any file the last trial does not name (a
    superseded checkpoint, an upload never committed). Files not named as this module names checkpoints, or written
    by another study's trial, are left.
    """
    checkpoints = {path.name: int(match.group(1)) for path in (sorted(directory.iterdir()) if directory.is_dir() else ())
                   if (match := _CHECKPOINT_NAME.fullmatch(path.name))}
    if not checkpoints:  # the study's trials are read only when there is something to judge
        return []
    trials = {t._trial_id: t for t in sweep.study.get_trials(deepcopy=False)}
    retries: dict[int, list[FrozenTrial]] = {}  # a trial's number -> the trials that retry it
    for trial in trials.values():
        for number in trial.system_attrs.get("retry_history", ()):
            retries.setdefault(number, []).append(trial)
    removed = []
    for artifact_id, writer_id in checkpoints.items():
        writer = trials.get(writer_id)
        if writer is None or not writer.state.is_finished():  # another study's checkpoint, or in use
            continue
        chain = [writer, *(t for t in retries.get(writer.number, ()) if not sweep.never_ran(t))]
        if not _resumable_or_kept(artifact_id, chain, sweep, list(trials.values())):
            _remove(store, {"artifact_id": artifact_id})
            removed.append(artifact_id)
    return removed


def _resumable_or_kept(artifact_id: str, chain: list[FrozenTrial], sweep: CheckpointSweep, trials: list[FrozenTrial]) -> bool:
    """Whether a trial of the retry chain ``chain`` (of the study's ``trials``) may resume from ``artifact_id``, or its
    last trial keeps it."""
    last = max(chain, key=lambda t: t.number)
    if any(not t.state.is_finished() for t in chain) or sweep.retry_may_come(last, trials):
        return True  # the chain goes on: which of its files the next trial needs is its own business
    pointer = last.user_attrs.get(CHECKPOINT_ATTR) or {}
    if pointer.get("artifact_id") != artifact_id or REMOVED_WHEN_TOLD in pointer:
        return False
    # Kept by --keep-checkpoints (unmarked: kept before the mark existed); a trial's whose retries ran out, if this run keeps.
    return KEPT in pointer or last.state != TrialState.FAIL or sweep.keep


def _remove(store: FileSystemArtifactStore, pointer: dict[str, Any]) -> None:
    with contextlib.suppress(Exception):  # a store gone read-only keeps a file, not the study from going on
        store.remove(pointer["artifact_id"])
