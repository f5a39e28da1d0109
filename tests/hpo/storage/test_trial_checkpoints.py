"""Trial checkpoints in the artifact store: a worker killed at any point of an upload leaves nothing unnamed behind.

The worker's death is a ``BaseException`` raised inside the real store's write or remove (what
``except Exception`` in the checkpoint code does not catch, as it cannot catch a SIGKILL); its
retry is Optuna's own ``RetryHeartbeatStaleTrialCallback``, as a stale heartbeat's trial gets.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

from hpo._attrs import CHECKPOINT_ATTR, CHECKPOINT_UPLOADING_ATTR, RESUMED_AT_STEP_ATTR
from hpo.storage._checkpoints import REMOVED_WHEN_TOLD, TrialCheckpoints, remove_told_checkpoint, sweep_told_checkpoints


class WorkerKilled(BaseException):
    """The worker's death, at the point of the upload where the store raises it."""


class DyingStore(FileSystemArtifactStore):
    """A real directory store whose worker dies during its ``die_on_write``-th write (half written) or its first remove."""

    def __init__(self, base_path: Path, *, die_on_write: int = 0, die_on_remove: bool = False) -> None:
        base_path.mkdir(parents=True, exist_ok=True)  # as hpo.storage.artifact_store makes it
        super().__init__(base_path)
        self.base = base_path
        self.writes, self.die_on_write, self.die_on_remove = 0, die_on_write, die_on_remove

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.writes += 1
        if self.writes == self.die_on_write:
            (Path(self._base_path) / artifact_id).write_bytes(content_body.read()[:100])
            raise WorkerKilled
        super().write(artifact_id, content_body)

    def remove(self, artifact_id: str) -> None:
        if self.die_on_remove:
            raise WorkerKilled
        super().remove(artifact_id)


@pytest.fixture(autouse=True)
def scratch_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' scratch directories under ``tmp_path``: a worker that "dies" here cleans nothing, as a killed one would."""
    scratch = tmp_path / "temp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))


@pytest.fixture
def study(tmp_path: Path) -> optuna.Study:
    return optuna.create_study(storage=f"sqlite:///{tmp_path / 'studies.db'}")


@pytest.fixture
def checkpoint_file(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(bytes(range(256)) * 40)
    return path


def _files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def _killed_then_retried(study: optuna.Study, store: DyingStore, checkpoint_file: Path, saves: int) -> optuna.Trial:
    """A trial that saves at steps 10, 20, ... until its worker dies in save number ``saves``; its retry, started."""
    trial = study.ask()
    on_saved = TrialCheckpoints(trial, store).checkpointing().on_saved
    assert on_saved is not None
    with pytest.raises(WorkerKilled):
        for save in range(1, saves + 1):
            on_saved(checkpoint_file, 10 * save)
    study.tell(trial, state=TrialState.FAIL)
    optuna.storages.RetryHeartbeatStaleTrialCallback()(study, study.trials[trial.number])
    return study.ask()  # the re-queued trial, with its predecessor's user attrs


def test_a_worker_killed_mid_upload_leaves_a_half_written_file_its_retry_removes(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    store = DyingStore(tmp_path / "artifacts", die_on_write=2)
    (tmp_path / "artifacts" / "another-trials-checkpoint").write_bytes(b"kept")
    retry = _killed_then_retried(study, store, checkpoint_file, saves=2)
    committed = retry.user_attrs[CHECKPOINT_ATTR]
    uploading = retry.user_attrs[CHECKPOINT_UPLOADING_ATTR]
    assert committed["step"] == 10 and uploading != committed["artifact_id"]
    assert _files(tmp_path / "artifacts") == {"another-trials-checkpoint", committed["artifact_id"], uploading}

    checkpoints = TrialCheckpoints(retry, store)
    assert _files(tmp_path / "artifacts") == {"another-trials-checkpoint", committed["artifact_id"]}
    checkpointing = checkpoints.checkpointing()
    assert checkpointing.resume_from is not None and checkpointing.resume_from.read_bytes() == checkpoint_file.read_bytes()
    assert retry.user_attrs[RESUMED_AT_STEP_ATTR] == 10


def test_a_worker_killed_before_its_first_upload_was_committed_leaves_nothing(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    store = DyingStore(tmp_path / "artifacts", die_on_write=1)
    retry = _killed_then_retried(study, store, checkpoint_file, saves=1)
    assert CHECKPOINT_ATTR not in retry.user_attrs and len(_files(tmp_path / "artifacts")) == 1
    assert TrialCheckpoints(retry, store).checkpointing().resume_from is None
    assert _files(tmp_path / "artifacts") == set()


def test_a_worker_killed_before_removing_the_superseded_checkpoint_leaves_it_to_its_retry(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    store = DyingStore(tmp_path / "artifacts", die_on_remove=True)
    retry = _killed_then_retried(study, store, checkpoint_file, saves=2)
    committed = retry.user_attrs[CHECKPOINT_ATTR]
    assert committed["step"] == 20 and _files(tmp_path / "artifacts") == {committed["artifact_id"], committed["superseded"]}

    store.die_on_remove = False
    TrialCheckpoints(retry, store)
    assert _files(tmp_path / "artifacts") == {committed["artifact_id"]}


def _finished_with_checkpoints(study: optuna.Study, store: DyingStore, checkpoint_file: Path) -> optuna.Trial:
    """A trial that saved at steps 10, 20 and 30 and then finished training: closed, not yet told."""
    trial = study.ask()
    checkpoints = TrialCheckpoints(trial, store)
    on_saved = checkpoints.checkpointing().on_saved
    assert on_saved is not None
    others = _files(store.base)
    for step in (10, 20, 30):
        on_saved(checkpoint_file, step)
        assert len(_files(store.base) - others) == 1  # the latest only, while the trial runs
    checkpoints.close(finished=True)
    return trial


def _failed_stale_then_retried(study: optuna.Study, trial: optuna.Trial) -> optuna.Trial:
    """``trial`` failed by the stale heartbeat's sweep (no tell of its own, no told callback) and re-queued; its retry, asked."""
    study.tell(trial, state=TrialState.FAIL)
    optuna.storages.RetryHeartbeatStaleTrialCallback()(study, study.trials[trial.number])
    return study.ask()


def _files_once_told(study: optuna.Study, trial: optuna.Trial, state: TrialState, store: DyingStore) -> set[str]:
    """Tell ``trial`` ``state`` and remove its checkpoint as a run's told callback does: the files left in the store."""
    study.tell(trial, state=state)
    remove_told_checkpoint(study.trials[trial.number], store)
    return _files(store.base)


def test_a_finished_trial_keeps_its_checkpoint_until_told_then_leaves_none(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    store = DyingStore(tmp_path / "artifacts")
    trial = _finished_with_checkpoints(study, store, checkpoint_file)
    pointer = trial.user_attrs[CHECKPOINT_ATTR]
    assert pointer[REMOVED_WHEN_TOLD] == trial.number and pointer["step"] == 30 and trial.user_attrs[CHECKPOINT_UPLOADING_ATTR] is None
    assert _files(tmp_path / "artifacts") == {pointer["artifact_id"]}
    remove_told_checkpoint(study.trials[trial.number], store)  # still RUNNING: not told, so kept
    assert _files(tmp_path / "artifacts") == {pointer["artifact_id"]}
    study.tell(trial, 0.5)
    remove_told_checkpoint(study.trials[trial.number], store)
    assert _files(tmp_path / "artifacts") == set()


def test_a_worker_killed_between_the_end_of_training_and_the_tell_leaves_its_retry_the_last_checkpoint(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    """The whole trial's work is not lost to a kill in the last moment: the retry resumes at step 30, and an
    interrupted retry's FAIL, once told, does not remove what the next retry resumes from."""
    store = DyingStore(tmp_path / "artifacts")
    trial = _finished_with_checkpoints(study, store, checkpoint_file)
    retry = _failed_stale_then_retried(study, trial)
    checkpoints = TrialCheckpoints(retry, store)
    checkpointing = checkpoints.checkpointing()
    assert checkpointing.resume_from is not None and retry.user_attrs[RESUMED_AT_STEP_ATTR] == 30
    assert REMOVED_WHEN_TOLD not in retry.user_attrs[CHECKPOINT_ATTR]
    checkpoints.close(finished=False)  # interrupted (Ctrl-C): its retry resumes from the same checkpoint
    assert _files_once_told(study, retry, TrialState.FAIL, store) == {retry.user_attrs[CHECKPOINT_ATTR]["artifact_id"]}


def test_a_retry_told_without_having_run_removes_nothing_its_requeued_copy_resumes_from(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    """The trial's worker died between the end of training and the tell; its retry then found the budget held by
    others, was re-queued and told PRUNED without running. Told, it removed the checkpoint its predecessor had
    marked, and the re-queued copy started over from step 0."""
    store = DyingStore(tmp_path / "artifacts")
    study.tell(study.ask(), 0.1)  # trial 0: the mark is a trial's number, and 0 is falsy
    trial = _finished_with_checkpoints(study, store, checkpoint_file)
    retry = _failed_stale_then_retried(study, trial)  # over the budget: no TrialCheckpoints, the inherited mark stays
    assert retry.user_attrs[CHECKPOINT_ATTR][REMOVED_WHEN_TOLD] == trial.number
    assert _files_once_told(study, retry, TrialState.PRUNED, store) == {trial.user_attrs[CHECKPOINT_ATTR]["artifact_id"]}


def test_checkpoints_left_by_a_worker_killed_between_the_tell_and_the_removal_are_swept_by_the_next_run(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path,
) -> None:
    """Only a told COMPLETE or PRUNED trial's marked checkpoint goes: a failed trial's retry may resume from its
    own, a running trial's is in use, and a file of another storage or not a checkpoint is not this sweep's."""
    store = DyingStore(tmp_path / "artifacts")
    completed = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(completed, 0.5)  # and the worker dies before remove_told_checkpoint
    pruned = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(pruned, state=TrialState.PRUNED)
    failed = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(failed, state=TrialState.FAIL)  # a stale heartbeat's sweep: its retry resumes from this checkpoint
    running = study.ask()
    TrialCheckpoints(running, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
    others = {"checkpoint-99999-0b8f5bde-8a4c-4d0e-9a49-1e2f3a4b5c6d", "6b1d8a52-7c1e-4f57-b0d3-2a9e8f7c6b5a"}
    for name in others:  # another storage's trial sharing the directory; a registered artifact (config.json)
        (tmp_path / "artifacts" / name).write_bytes(b"kept")
    ids = {t.number: t.user_attrs[CHECKPOINT_ATTR]["artifact_id"] for t in study.trials}
    assert all(ids[t.number].startswith(f"checkpoint-{t._trial_id}-") for t in study.trials)

    removed = sweep_told_checkpoints(study._storage, store, tmp_path / "artifacts")
    assert sorted(removed) == sorted([ids[completed.number], ids[pruned.number]])
    assert _files(tmp_path / "artifacts") == {ids[failed.number], ids[running.number], *others}
    assert sweep_told_checkpoints(study._storage, store, tmp_path / "artifacts") == []  # nothing twice


def test_a_retry_run_with_another_artifact_store_starts_over_and_says_so(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The same command rerun from another directory takes another (relative) default store: the work since
    step 0 is lost, which was said nowhere."""
    retry = _killed_then_retried(study, DyingStore(tmp_path / "artifacts", die_on_write=3), checkpoint_file, saves=3)
    elsewhere = DyingStore(tmp_path / "another-directory" / "hpo-artifacts")
    with caplog.at_level("WARNING", logger="hpo.storage._checkpoints"):
        assert TrialCheckpoints(retry, elsewhere).checkpointing().resume_from is None
    assert [r.getMessage() for r in caplog.records] == [
        f"trial {retry.number}: the checkpoint it would resume from (trial 0, step 20) is not in this artifact store "
        "(ArtifactNotFound); it starts over from step 0 (to resume, run with the --artifact-store the interrupted trial used)"
    ]
