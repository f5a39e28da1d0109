"""Trial checkpoints in the artifact store: a worker killed at any point of an upload leaves nothing unnamed behind.

The worker's death is a ``BaseException`` raised inside the real store's write or remove (what
``except Exception`` in the checkpoint code does not catch, as it cannot catch a SIGKILL); its
retry is Optuna's own ``RetryHeartbeatStaleTrialCallback``, as a stale heartbeat's trial gets.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import BinaryIO

import optuna
import pytest
from _tiny_study import TINY
from optuna.artifacts import FileSystemArtifactStore
from optuna.trial import TrialState

import hpo
from hpo._attrs import (
    CHECKPOINT_ATTR,
    CHECKPOINT_UPLOADING_ATTR,
    FAIL_REASON_ATTR,
    RESUMED_AT_STEP_ATTR,
    RESUMED_FROM_TRIAL_ATTR,
    SKIP_REASON_ATTR,
    WORKER_ATTR,
)
from hpo.storage._checkpoints import KEPT, REMOVED_WHEN_TOLD, TrialCheckpoints, remove_told_checkpoint, sweep_checkpoints
from hpo.storage._storage import Heartbeat, create_storage
from hpo.study._liveness import checkpoint_sweep, fail_and_requeue, worker_identity
from hpo.study._outcomes import SKIP_DUPLICATE
from trial_executor import demo_dataset


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


def _finished_with_checkpoints(study: optuna.Study, store: DyingStore, checkpoint_file: Path, *, keep: bool = False) -> optuna.Trial:
    """A trial that saved at steps 10, 20 and 30 and then finished training: closed, not yet told."""
    trial = study.ask()
    checkpoints = TrialCheckpoints(trial, store, keep=keep)
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
    """A told trial's marked checkpoint goes; a just-failed trial's stays (its retry may resume from it), a running
    trial's is in use, and a file of another study or storage, or not a checkpoint, is not this sweep's."""
    store = DyingStore(tmp_path / "artifacts")
    completed = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(completed, 0.5)  # and the worker dies before remove_told_checkpoint
    pruned = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(pruned, state=TrialState.PRUNED)
    failed = _finished_with_checkpoints(study, store, checkpoint_file)
    study.tell(failed, state=TrialState.FAIL)  # a stale heartbeat's sweep: its retry resumes from this checkpoint
    running = study.ask()
    TrialCheckpoints(running, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
    other_study = optuna.create_study(storage=study._storage, study_name="another")
    in_other = _finished_with_checkpoints(other_study, store, checkpoint_file)
    other_study.tell(in_other, 0.5)
    others = {"checkpoint-99999-0b8f5bde-8a4c-4d0e-9a49-1e2f3a4b5c6d", "6b1d8a52-7c1e-4f57-b0d3-2a9e8f7c6b5a"}
    for name in others:  # another storage's trial sharing the directory; a registered artifact (config.json)
        (tmp_path / "artifacts" / name).write_bytes(b"kept")
    ids = {t.number: t.user_attrs[CHECKPOINT_ATTR]["artifact_id"] for t in study.trials}
    assert all(ids[t.number].startswith(f"checkpoint-{t._trial_id}-") for t in study.trials)

    sweep = checkpoint_sweep(study, max_retry=3, keep=False)
    removed = sweep_checkpoints(sweep, store, tmp_path / "artifacts")
    assert sorted(removed) == sorted([ids[completed.number], ids[pruned.number]])
    in_other_id = other_study.trials[0].user_attrs[CHECKPOINT_ATTR]["artifact_id"]
    assert _files(tmp_path / "artifacts") == {ids[failed.number], ids[running.number], in_other_id, *others}
    assert sweep_checkpoints(sweep, store, tmp_path / "artifacts") == []  # nothing twice


def _beating(url: str, grace_period: int) -> optuna.storages.BaseStorage:
    """A run's storage, with heartbeats: a failed trial's retry, if one is coming, comes within the grace period (its
    worker re-queues it at once); after it, only the retry policy re-queues it (a lost re-queue)."""
    return create_storage(url, heartbeat=Heartbeat(interval=1, grace_period=grace_period))


def _killed(study: optuna.Study, trial: optuna.Trial, max_retry: int) -> None:
    """``trial``'s worker found dead: failed ``worker_died`` and re-queued while ``max_retry`` allows, as a sweep does."""
    fail_and_requeue(study, [(study._storage.get_trial(trial._trial_id), "killed in this test")], max_retry)


def test_a_retry_chain_that_ended_leaves_no_checkpoint_unless_kept(checkpoint_file: Path, tmp_path: Path) -> None:
    """What a sweep of told trials alone left: the checkpoint of a failed trial that its retry resumed and finished
    with, its worker killed before the removal; that of a trial that failed with an error, killed the same way; and
    the last checkpoint of a trial whose retries ran out, with the one it superseded. A retry that may still come
    keeps its checkpoints, and a checkpoint kept by --keep-checkpoints stays."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study, store = optuna.create_study(storage=_beating(url, grace_period=60)), DyingStore(tmp_path / "artifacts")
    resumed = study.ask()
    TrialCheckpoints(resumed, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
    _killed(study, resumed, max_retry=1)
    retry = study.ask()
    TrialCheckpoints(retry, store).close(finished=True)  # resumed at step 10 and trained to the end: no new checkpoint
    study.tell(retry, 0.5)  # and killed before remove_told_checkpoint

    errored = _finished_with_checkpoints(study, store, checkpoint_file)  # an error after its last checkpoint
    kept = _finished_with_checkpoints(study, store, checkpoint_file, keep=True)  # the same, run with --keep-checkpoints
    for trial in (errored, kept):
        study._storage.set_trial_user_attr(trial._trial_id, FAIL_REASON_ATTR, "ValueError: in this test")
        study.tell(trial, state=TrialState.FAIL)  # and killed before remove_told_checkpoint (errored's)

    out_of_retries = study.ask()
    TrialCheckpoints(out_of_retries, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
    _killed(study, out_of_retries, max_retry=1)
    last_retry = study.ask()
    store.die_on_remove = True  # its checkpoint at step 20 is committed, the one at step 10 not yet removed
    with pytest.raises(WorkerKilled):
        TrialCheckpoints(last_retry, store).checkpointing().on_saved(checkpoint_file, 20)  # type: ignore[misc]
    store.die_on_remove = False
    _killed(study, last_retry, max_retry=1)  # its second failure: no retry left
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE, *[TrialState.FAIL] * 4]
    pointers = {t.number: t.user_attrs[CHECKPOINT_ATTR] for t in study.trials}
    assert pointers[kept.number][KEPT] == kept.number and REMOVED_WHEN_TOLD not in pointers[kept.number]
    assert pointers[retry.number]["artifact_id"] == pointers[resumed.number]["artifact_id"]
    superseded, last = pointers[last_retry.number]["superseded"], pointers[last_retry.number]["artifact_id"]
    kept_id = pointers[kept.number]["artifact_id"]
    assert _files(store.base) == {pointers[resumed.number]["artifact_id"], pointers[errored.number]["artifact_id"], kept_id, superseded, last}

    # Within the grace period a failed trial's retry may be on its way: only the finished chain's checkpoint goes.
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=1, keep=False), store, store.base) == [pointers[resumed.number]["artifact_id"]]
    time.sleep(1.1)
    study = optuna.load_study(study_name=study.study_name, storage=_beating(url, grace_period=1))
    # After it: a policy of 2 retries would re-queue the last retry (a lost re-queue), so its checkpoints stay.
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=2, keep=False), store, store.base) == [pointers[errored.number]["artifact_id"]]
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=1, keep=True), store, store.base) == [superseded]
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=1, keep=False), store, store.base) == [last]
    assert _files(store.base) == {kept_id}  # what --keep-checkpoints kept stays, whether or not later runs keep


def test_a_failed_trials_checkpoint_is_judged_by_the_retry_policy_its_own_worker_ran_under(checkpoint_file: Path, tmp_path: Path) -> None:
    """Workers of one study started with different --max-retry: each run's sweep judged a failed trial by its own limit, so
    a --max-retry 3 run kept the checkpoint of a trial that no retry would resume, and a --max-retry 0 run removed the
    one a lost re-queue was yet to resume (the lost-retry sweep of a worker allowing it re-queues it)."""
    study, store = optuna.create_study(storage=_beating(f"sqlite:///{tmp_path / 's.db'}", grace_period=1)), DyingStore(tmp_path / "a")
    for limit in (0, 2):  # each found with its worker dead after its checkpoint; its re-queue lost
        trial = study.ask()
        trial.set_user_attr(WORKER_ATTR, worker_identity(trial.number, limit))
        TrialCheckpoints(trial, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
        study._storage.set_trial_user_attr(trial._trial_id, FAIL_REASON_ATTR, "worker_died: its process exited")
        study.tell(trial, state=TrialState.FAIL)
    allows_none, allows_two = (t.user_attrs[CHECKPOINT_ATTR]["artifact_id"] for t in study.trials)
    time.sleep(1.1)  # past the grace period: a re-queue by its own worker would have come
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=3, keep=False), store, store.base) == [allows_none]
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=0, keep=False), store, store.base) == []
    assert _files(store.base) == {allows_two}


def test_a_retry_queued_twice_leaves_no_checkpoint_once_its_first_copy_finished(checkpoint_file: Path, tmp_path: Path) -> None:
    """Two sweeps with no lock between them (grpc:// workers) re-queued the same failed trial; the second copy, withdrawn
    as a duplicate when claimed, carries the failed trial's pointer without ever resuming from it: the chain ended with the
    first copy's tell, and the checkpoint goes."""
    study, store = optuna.create_study(storage=_beating(f"sqlite:///{tmp_path / 's.db'}", grace_period=60)), DyingStore(tmp_path / "a")
    resumed = study.ask()
    TrialCheckpoints(resumed, store).checkpointing().on_saved(checkpoint_file, 10)  # type: ignore[misc]
    _killed(study, resumed, max_retry=None)
    optuna.storages.RetryHeartbeatStaleTrialCallback()(study, study._storage.get_trial(resumed._trial_id))  # the second sweep's
    retry, duplicate = study.ask(), study.ask()
    TrialCheckpoints(retry, store).close(finished=True)  # resumed at step 10 and trained to the end: no new checkpoint
    study.tell(retry, 0.5)  # and killed before remove_told_checkpoint
    study._storage.set_trial_user_attr(duplicate._trial_id, SKIP_REASON_ATTR, SKIP_DUPLICATE)
    study.tell(duplicate, state=TrialState.PRUNED)
    assert study.trials[2].user_attrs[CHECKPOINT_ATTR] == study.trials[0].user_attrs[CHECKPOINT_ATTR]  # a copied pointer
    artifact_id = study.trials[0].user_attrs[CHECKPOINT_ATTR]["artifact_id"]
    assert sweep_checkpoints(checkpoint_sweep(study, max_retry=None, keep=False), store, store.base) == [artifact_id]
    assert _files(store.base) == set()


def test_a_run_sweeps_its_artifact_store_when_it_starts(tmp_path: Path) -> None:
    """Wired where a run opens its store: a checkpoint its ended trial does not name (its worker was killed while
    replacing it) goes, even with the budget already reached; the kept best model and config files stay."""
    url, store, data = f"sqlite:///{tmp_path / 's.db'}", tmp_path / "store", demo_dataset(n_train=64, n_valid=16, seed=1)
    study = hpo.optimize(TINY, data, storage=url, study_name="s", n_trials=1, device="cpu", artifact_store=str(store))
    kept = _files(store)
    left = store / f"checkpoint-{study.trials[0]._trial_id}-{uuid.uuid4()}"
    left.write_bytes(b"a superseded checkpoint")
    hpo.optimize(TINY, data, storage=url, study_name="s", n_trials=1, device="cpu", artifact_store=str(store))
    assert _files(store) == kept and kept


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


def test_a_retry_whose_checkpoint_cannot_be_resumed_starts_over_and_says_so(
    study: optuna.Study, checkpoint_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A truncated checkpoint (a full disk), or one of another config (a retry of an OOM fallback killed before the
    half batch's first checkpoint): the retry failed for good, recording that it resumed at the checkpoint's step."""
    store = DyingStore(tmp_path / "artifacts", die_on_write=3)
    retry = _killed_then_retried(study, store, checkpoint_file, saves=3)
    checkpointing = TrialCheckpoints(retry, store).checkpointing()
    assert checkpointing.resume_from is not None and checkpointing.on_unusable is not None
    assert study._storage.get_trial(retry._trial_id).user_attrs[RESUMED_AT_STEP_ATTR] == 20
    with caplog.at_level("WARNING", logger="hpo.storage._checkpoints"):
        checkpointing.on_unusable(ValueError("checkpoint x.pt cannot be read (EOFError: Ran out of input)"))
    assert [r.getMessage() for r in caplog.records] == [
        f"trial {retry.number}: checkpoint x.pt cannot be read (EOFError: Ran out of input); it starts over from step 0"]
    attrs = study._storage.get_trial(retry._trial_id).user_attrs
    assert attrs[RESUMED_AT_STEP_ATTR] is None and attrs[RESUMED_FROM_TRIAL_ATTR] is None
