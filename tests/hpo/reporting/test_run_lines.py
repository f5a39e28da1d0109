"""A run's closing line after a stop signal says which trials it interrupted, and never claims one it did not."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from hpo.reporting._run_lines import stop_checkpoint_lost, stopped_line, trial_line
from hpo.study._outcomes import INTERRUPTED, was_interrupted

PROG = "python -m hpo.run"


def _failed(reason: str) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": reason})


def test_only_a_trial_failed_by_the_stop_signal_counts_as_interrupted() -> None:
    assert was_interrupted(_failed(INTERRUPTED))
    assert not was_interrupted(_failed("worker_died: exit -9"))
    assert not was_interrupted(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.5))


def test_the_stopped_line_names_the_interrupted_trials_or_says_there_were_none() -> None:
    rerun = ": rerun the same command to resume the study"
    assert stopped_line(PROG, [3]) == f"{PROG}: stopped by a signal; trial 3 was checkpointed and re-queued{rerun}"
    assert stopped_line(PROG, [7, 4]) == f"{PROG}: stopped by a signal; trials 4, 7 were checkpointed and re-queued{rerun}"
    # Stopped after a trial ended and before the next began: nothing was checkpointed, and the line says so.
    none = stopped_line(PROG, [])
    assert none == f"{PROG}: stopped by a signal between trials, none interrupted{rerun}" and "checkpointed" not in none


def test_a_majority_class_trial_line_names_both_causes() -> None:
    from hpo._attrs import MAJORITY_CLASS_ATTR
    from hpo.reporting._run_lines import trial_line

    # Seen on TREC with MiniLM: one epoch at the bottom of the range (1.3e-5) never left the majority class.
    trial = optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.11, user_attrs={MAJORITY_CLASS_ATTR: True})
    line = trial_line(trial, ["accuracy"])
    assert "(majority class: learned nothing; the learning rate may be too high, or the training too short for it)" in line


def test_majority_class_trials_at_fine_tuning_rates_are_said_to_be_too_short_not_too_fast(tmp_path: Path) -> None:
    """TREC's 50 classes on MiniLM, 20 steps at 5.5e-5 and 1.9e-4: the hint blamed a learning rate range that was
    finetune.yaml's own. A rate above 3e-4 among them keeps both causes."""
    from hpo._attrs import MAJORITY_CLASS_ATTR, MAJORITY_CLASS_HINT
    from hpo.reporting._report import build_report, summary_lines
    from hpo.reporting._status import status_lines, study_status

    def study_at(*rates: float) -> optuna.Study:
        study = optuna.create_study(storage=f"sqlite:///{tmp_path / f'{len(rates)}-{rates[-1]}.db'}", direction="maximize")
        study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
        distribution = optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)
        for rate in rates:
            study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.11, user_attrs={MAJORITY_CLASS_ATTR: True},
                                                      params={"learning_rate": rate}, distributions={"learning_rate": distribution}))
        study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.6, params={"learning_rate": 1e-2},
                                                  distributions={"learning_rate": distribution}))  # learned: not counted
        return study

    low = study_at(5.477e-5, 1.861e-4)
    too_short = "their learning rates (at most 0.000186) are no higher than fine-tuning's (~1e-5..3e-4): the training was likely too short"
    assert too_short in "\n".join(summary_lines(build_report(low, "sqlite")))
    assert too_short in "\n".join(status_lines(study_status(low._storage, low)))
    assert trial_line(low.trials[0], ["accuracy"]).endswith("(majority class: learned nothing; the training was likely too short for its learning rate)")
    high = study_at(5.477e-5, 2e-3)
    assert MAJORITY_CLASS_HINT in "\n".join(summary_lines(build_report(high, "sqlite")))
    assert MAJORITY_CLASS_HINT in "\n".join(status_lines(study_status(high._storage, high)))
    assert "the learning rate may be too high, or the training too short for it" in trial_line(high.trials[1], ["accuracy"])


def test_an_over_budget_placeholder_is_shown_and_counted_as_not_run_everywhere() -> None:
    """A worker that started a trial when the budget was already held printed 'trial 6 PRUNED accuracy=None',
    and the summary, status and report counted it as pruned: '5 of 5 finished (5 complete, 1 pruned)'."""
    from hpo.reporting._report import build_report, summary_lines
    from hpo.reporting._run_lines import run_summary, trial_line
    from hpo.reporting._status import status_lines, study_status

    study = optuna.create_study(direction="maximize")
    for value in (0.7, 0.8):
        study.add_trial(optuna.trial.create_trial(value=value))
    study.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={"skip_reason": "over_budget"}))
    placeholder = study.get_trials()[-1]
    assert trial_line(placeholder, ["accuracy"]).startswith("trial   2  NOT RUN   (other workers' running trials held the rest")
    summary = run_summary(study, "sqlite:///x.db", 2, ["accuracy"])
    assert "2 of 2 budgeted trials finished (2 complete, 0 pruned); not counted: 0 failed, 0 skipped as unsupported on this machine, " \
           "1 not run (the budget was held by running trials)" in summary
    assert "pruned 1 (of them, 1 not run: the budget was held)" in status_lines(study_status(study._storage, study))[1]
    assert "Trials: 2 complete, 1 not run" in summary_lines(build_report(study, "sqlite:///x.db"))[2]


def test_a_precision_skipped_as_unsupported_is_counted_as_skipped_everywhere() -> None:
    """On a CPU, a tf32 trial is skipped: the run's summary said "1 skipped as unsupported", but the report's summary said
    "Trials: 4 complete, 1 pruned", counting the skip with the pruner's trials."""
    from hpo.reporting._report import build_report, summary_lines
    from hpo.reporting._run_lines import run_summary
    from hpo.reporting._status import status_lines, study_status

    study = optuna.create_study(direction="maximize")
    for value in (0.7, 0.8):
        study.add_trial(optuna.trial.create_trial(value=value))
    for attrs in ({"skip_reason": "unsupported_precision", "skip_detail": "tf32 unsupported"}, {}, {"skip_reason": "oom"}):
        study.add_trial(optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs=attrs))
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL))
    summary = run_summary(study, "sqlite:///x.db", 4, ["accuracy"])
    assert "(2 complete, 2 pruned (0 non_finite_loss, 1 oom)); not counted: 1 failed, 1 skipped as unsupported on this machine" in summary
    assert "pruned 3 (of them, 1 skipped as unsupported)" in status_lines(study_status(study._storage, study))[1]
    assert summary_lines(build_report(study, "sqlite:///x.db"))[2] == "Trials: 2 complete, 2 pruned, 1 failed, 1 skipped as unsupported"


def test_the_browse_hint_works_for_the_storage_it_names() -> None:
    """optuna-dashboard cannot open grpc:// (NoSuchModuleError: sqlalchemy.dialects:grpc): the hint failed for proxy studies."""
    from hpo.reporting._run_lines import run_summary

    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.7))
    assert "Browse it:  python -m hpo dashboard --storage grpc://127.0.0.1:13000" in run_summary(study, "grpc://127.0.0.1:13000", 1, ["a"])
    assert "Browse it:  optuna-dashboard sqlite:///x.db" in run_summary(study, "sqlite:///x.db", 1, ["a"])


def test_a_summary_names_the_trials_other_workers_still_run() -> None:
    """A run that ended while another worker's trial ran said '1 of 2 budgeted trials finished' and nothing of it."""
    from hpo.reporting._run_lines import run_summary

    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.7))
    assert "Still running" not in run_summary(study, "sqlite:///x.db", 2, ["accuracy"])
    study.ask()  # another worker's trial, RUNNING
    summary = run_summary(study, "sqlite:///x.db", 2, ["accuracy"])
    assert "1 of 2 budgeted trials finished" in summary
    assert "\nStill running: trial 1 (other workers'; `python -m hpo status` shows where)\n" in summary


def test_a_trial_line_names_start_up_only_when_it_was_most_of_the_training() -> None:
    def line(startup: float, train: float) -> str:
        attrs = {"throughput_samples_per_s": 3746.5, "peak_memory_mb": 514.9, "compile_seconds": startup, "train_seconds": train}
        return trial_line(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.85, user_attrs=attrs), ["accuracy"])

    assert line(64.98, 67.07).endswith("3746 samples/s  515 MB peak  (start-up 65 s of 67 s training: the first steps of "
                                       "each batch shape, compiling included; not in samples/s)")
    assert line(5.0, 60.0).endswith("3746 samples/s  515 MB peak")  # a small share: the samples/s tell the story
    assert line(0.6, 0.9).endswith("515 MB peak")  # under a second: nothing a user waits for
    assert line(0.0, 0.0).endswith("515 MB peak")


def test_a_trial_line_says_when_other_processes_held_the_cores() -> None:
    def line(contended: bool | None) -> str:
        attrs = {"throughput_samples_per_s": 340.0, "peak_memory_mb": 515.0, "cpu_wait_fraction": 0.51, "cpu_contended": contended}
        return trial_line(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.85, user_attrs=attrs), ["accuracy"])

    assert line(True).endswith("340 samples/s  515 MB peak  (CPU-contended: waited 51% of its time for a core other "
                               "processes held; its samples/s are partly theirs)")
    assert line(False).endswith("515 MB peak") and line(None).endswith("515 MB peak")  # None: too short to tell


def test_status_counts_verdict_trials_on_their_own_line_only() -> None:
    from hpo.reporting._status import status_lines, study_status

    study = optuna.create_study(direction="maximize")
    for value in (0.8, 0.7):
        study.add_trial(optuna.trial.create_trial(value=value))
    for seed in (0, 1):  # the verdict re-training trial 0 in fp32 and bf16 (hpo.study._verdict)
        study.add_trial(optuna.trial.create_trial(value=0.75, user_attrs={
            "verdict_trial": {"of_trial": 0, "precision": "bf16", "seed": seed, "seed_index": seed}}))
    lines = status_lines(study_status(study._storage, study))
    assert lines[1] == "  trials: 2: complete 2, pruned 0, fail 0, running 0", lines
    assert "  verdict trials: 2: complete 2 (not counted against --n-trials)" in lines
    assert "  best: trial 0  value=0.8" in lines


def test_status_quotes_a_study_name_that_would_break_its_line() -> None:
    from hpo.reporting._status import status_lines, study_status

    storage = optuna.storages.InMemoryStorage()
    for name in ("plain name", "line1\nline2\x1b[31mRED"):
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
        assert status_lines(study_status(storage, study))[0] == f"{name if name == 'plain name' else repr(name)}  (maximize value)"


def test_a_trial_stopped_while_its_store_is_read_only_is_not_said_to_be_checkpointed(tmp_path: Path) -> None:
    """Seen in an audit: the store full (or read-only), the checkpoint taken at the stop was not saved, one warning said
    so, and the run's last line then said the trial 'was checkpointed'. Its retry resumes from the last saved one."""
    from optuna.artifacts import FileSystemArtifactStore

    from hpo import create_storage, make_objective, open_study, parse_search_space
    from hpo.reporting._run_lines import stop_checkpoint_lost
    from hpo.study import RunOptions
    from tests._read_only import ReadOnlyDirectory
    from trial_executor import demo_dataset

    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, "fixed": {
        "model": "tiny-bert", "batch_size": 16, "eval_batch_size": 8, "max_steps": 12, "eval_every": 2, "max_length": 32}})
    data = demo_dataset(n_train=256, n_valid=16, seed=4)
    study = open_study(create_storage(f"sqlite:///{tmp_path / 's.db'}"), "s", space, data, seed=0)
    with ReadOnlyDirectory(tmp_path / "artifacts") as store:
        evaluated: list[int] = []

        def frozen_after_the_first_checkpoint(trial: optuna.Trial, step: int, metrics: dict[str, float]) -> None:
            evaluated.append(step)
            if step >= 4:
                store.freeze()

        objective = make_objective(space, data, RunOptions(seed=0, device="cpu", artifact_store=str(store.path)),
                                   checkpoints=FileSystemArtifactStore(str(store.path)), on_evaluation=frozen_after_the_first_checkpoint,
                                   stop_requested=lambda: bool(evaluated) and evaluated[-1] >= 6)
        study.optimize(objective, n_trials=1, catch=(Exception,))
    trial = study.trials[0]
    last_saved = trial.user_attrs["checkpoint"]["step"]
    assert was_interrupted(trial) and 2 <= last_saved < trial.user_attrs["interrupted_at_step"]
    assert stop_checkpoint_lost(trial) == last_saved
    line = stopped_line(PROG, [trial.number], {trial.number: last_saved})
    assert "was checkpointed" not in line
    assert f"trial 0 was re-queued without a checkpoint at the stop (it resumes from step {last_saved})" in line


def test_a_trial_whose_stop_checkpoint_was_saved_is_said_to_be_checkpointed() -> None:
    saved = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={
        "fail_reason": INTERRUPTED, "interrupted_at_step": 7, "checkpoint": {"artifact_id": "c", "step": 7, "trial": 0}})
    assert stop_checkpoint_lost(saved) is None
    no_store = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"fail_reason": INTERRUPTED, "interrupted_at_step": 7})
    assert stop_checkpoint_lost(no_store) == 0
    assert stopped_line(PROG, [4, 3], {4: 0}) == (
        f"{PROG}: stopped by a signal; trial 3 was checkpointed and re-queued; trial 4 was re-queued without a checkpoint "
        "at the stop (it resumes from step 0): rerun the same command to resume the study")
