"""``pruner.report_step: samples``: reported steps count training samples, so rungs compare trials after equal data."""

from __future__ import annotations

from pathlib import Path

import optuna

from hpo import create_storage, make_objective, open_study, parse_search_space, run_to_budget
from trial_executor import demo_dataset

SPACE = {
    "params": {"batch_size": {"type": "categorical", "choices": [4, 8]}},
    "fixed": {"model": "tiny-bert", "learning_rate": 1e-3, "grad_accum_steps": 2, "max_steps": 4, "eval_every": 2,
              "max_length": 16},
    "enqueue": [{"batch_size": 4}, {"batch_size": 8}],
}


def _study(tmp_path: Path, report_step: str) -> list[optuna.trial.FrozenTrial]:
    # min_resource far beyond the run: nothing is pruned, every evaluation is reported.
    space = parse_search_space({**SPACE, "pruner": {"type": "successive_halving", "min_resource": 10_000,
                                                    "report_step": report_step}})
    data = demo_dataset(n_train=80, n_valid=16, seed=0)
    study = open_study(create_storage(f"sqlite:///{tmp_path / f'{report_step}.db'}"), "s", space, data, seed=0)
    run_to_budget(study, make_objective(space, data, base_seed=0, device="cpu"), 2)
    return study.get_trials()


def test_samples_report_steps_times_batch_times_accumulation(tmp_path: Path) -> None:
    trials = _study(tmp_path, "samples")
    assert [t.params["batch_size"] for t in trials] == [4, 8]
    # Evaluations after optimizer steps 2 and 4; each step is batch x 2 accumulated micro-batches.
    assert [sorted(t.intermediate_values) for t in trials] == [[16, 32], [32, 64]]


def test_steps_is_the_default_and_stored_as_before(tmp_path: Path) -> None:
    trials = _study(tmp_path, "steps")
    assert [sorted(t.intermediate_values) for t in trials] == [[2, 4], [2, 4]]
    plain = parse_search_space(SPACE)
    assert "report_step" not in plain.stored_form()["pruner"]  # studies stored before the key existed resume
    samples = parse_search_space({**SPACE, "pruner": {"type": "median", "report_step": "samples"}})
    assert samples.stored_form()["pruner"]["report_step"] == "samples" and samples.reports_samples
    assert not plain.reports_samples


def test_eval_every_samples_evaluates_every_trial_after_the_same_data(tmp_path: Path) -> None:
    space = parse_search_space({
        **SPACE, "pruner": {"type": "median", "n_startup_trials": 10, "report_step": "samples"},
        "fixed": {**SPACE["fixed"], "max_steps": 8, "eval_every": 1, "eval_every_samples": 32},  # in place of eval_every
    })
    data = demo_dataset(n_train=200, n_valid=16, seed=0)
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'e.db'}"), "e", space, data, seed=0)
    run_to_budget(study, make_objective(space, data, base_seed=0, device="cpu"), 2)
    # batch 4 x 2: every 4 steps (32, 64 samples); batch 8 x 2: every 2 steps (32, ..., 128).
    assert [sorted(t.intermediate_values) for t in study.get_trials()] == [[32, 64], [32, 64, 96, 128]]


def test_eval_every_samples_reports_equal_steps_when_the_batch_does_not_divide_it(tmp_path: Path) -> None:
    # Batch 6 x 2: 32 samples round to 3 steps (36 samples). Reported as 32, 64 all the same, so a
    # median pruner finds the batch-4 trial's values at the same steps; the last evaluation (step 8)
    # at the same rate, 32 samples per 3 steps.
    space = parse_search_space({
        **SPACE, "params": {"batch_size": {"type": "categorical", "choices": [4, 6]}},
        "enqueue": [{"batch_size": 4}, {"batch_size": 6}],
        "pruner": {"type": "median", "n_startup_trials": 10, "report_step": "samples"},
        "fixed": {**SPACE["fixed"], "max_steps": 8, "eval_every_samples": 32},
    })
    data = demo_dataset(n_train=200, n_valid=16, seed=0)
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'u.db'}"), "u", space, data, seed=0)
    run_to_budget(study, make_objective(space, data, base_seed=0, device="cpu"), 2)
    assert [sorted(t.intermediate_values) for t in study.get_trials()] == [[32, 64], [32, 64, 85]]


def test_a_retry_that_starts_over_reports_its_predecessors_steps_again_without_a_warning_each(tmp_path: Path) -> None:
    """Seen in an audit: a trial stopped by SIGTERM, its retry run with its checkpoint out of reach (another artifact
    store) started over, as said in one warning, then printed Optuna's two-line "already reported" UserWarning for each
    step its predecessor had reported. Those steps keep their first value; nothing is printed for them."""
    import warnings

    from optuna.artifacts import FileSystemArtifactStore

    from hpo.study import RunOptions
    from hpo.study._outcomes import was_interrupted

    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, "fixed": {
        "model": "tiny-bert", "batch_size": 16, "eval_batch_size": 8, "max_steps": 10, "eval_every": 2, "max_length": 16}})
    data = demo_dataset(n_train=256, n_valid=16, seed=4)
    study = open_study(create_storage(f"sqlite:///{tmp_path / 's.db'}"), "s", space, data, seed=0)
    evaluated: list[int] = []

    def objective(store: Path, stop_at: int | None) -> object:
        store.mkdir()
        return make_objective(space, data, RunOptions(seed=0, device="cpu", artifact_store=str(store)),
                              checkpoints=FileSystemArtifactStore(str(store)), on_evaluation=lambda t, step, m: evaluated.append(step),
                              stop_requested=lambda: stop_at is not None and bool(evaluated) and evaluated[-1] >= stop_at)

    study.optimize(objective(tmp_path / "first", stop_at=6), n_trials=1, catch=(Exception,))
    stopped = study.trials[0]
    assert was_interrupted(stopped) and sorted(stopped.intermediate_values) == [2, 4, 6]
    optuna.storages.RetryHeartbeatStaleTrialCallback(inherit_intermediate_values=True)(study, stopped)  # as the run re-queues it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        study.optimize(objective(tmp_path / "elsewhere", stop_at=None), n_trials=1)
    assert [str(w.message) for w in caught if "already reported" in str(w.message)] == []
    retry = study.trials[1]
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.user_attrs.get("resumed_at_step") is None
    assert sorted(retry.intermediate_values) == [2, 4, 6, 8, 10] and retry.intermediate_values[4] == stopped.intermediate_values[4]
