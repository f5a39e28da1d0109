"""TPE's random start counted in trials that trained: real Optuna studies, asked and told as workers do."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

import trial_executor
from hpo import FINETUNE_SPACE, create_storage, load_search_space, open_study
from trial_executor import demo_dataset

DATA = demo_dataset(n_train=32, n_valid=8, seed=1)
CATEGORICAL = ("fp_precision", "batch_size", "warmup_ratio", "weight_decay")
# TPE (constant_liar) records the params it drew from its model on the trial; a random draw records none.
MODELLED = "tpe:relative_params:0"
SPACE = load_search_space(FINETUNE_SPACE)
_STUDY_NUMBERS = itertools.count()


def _study(tmp_path: Path, name: str, seed: int) -> optuna.Study:
    storage = create_storage(f"sqlite:///{tmp_path / 'sampler.db'}")
    return open_study(storage, name, SPACE, DATA, seed=seed)


def _run_one(study: optuna.Study, skip: str | None, value: float) -> optuna.trial.FrozenTrial:
    """One trial as the objective would end it: skipped (pruned at once, its reason recorded) or complete with ``value``."""
    trial = study.ask()
    SPACE.suggest(trial)
    if skip is not None:
        trial.set_user_attr("skip_reason", skip)
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, value)
    return study.trials[-1]


def _fresh_draws(db: Path, name: str, seed: int) -> list[dict]:
    """The params of a new study's first six trials, each completed: the fp32 baseline, the random start, then TPE's model."""
    study = open_study(create_storage(f"sqlite:///{db}"), name, SPACE, DATA, seed=seed)
    return [_run_one(study, None, 0.5 + i / 100).params for i in range(6)]


def test_a_seed_draws_the_same_trials_in_any_process_and_workers_sharing_a_study_draw_apart(tmp_path: Path) -> None:
    """Each trial's draws are seeded with --seed mixed with the trial's number. Seeded per process (the seed mixed with
    the host and pid), no rerun of a study drew the trials its first run drew."""
    here = _fresh_draws(tmp_path / "here.db", "s", 0)
    code = (f"import json, sys; from pathlib import Path; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"from test_sampler import _fresh_draws; print(json.dumps(_fresh_draws(Path({str(tmp_path / 'there.db')!r}), 's', 0)))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert there.returncode == 0, there.stderr[-3000:]
    assert json.loads(there.stdout.splitlines()[-1]) == here
    assert _fresh_draws(tmp_path / "here.db", "another-seed", 1)[1:] != here[1:]  # the baseline's params are fixed
    # Two workers of one study, each with its sampler and the same --seed, asking in turn: no two trials alike.
    first, second = (_study(tmp_path, "shared", 0) for _ in range(2))
    drawn = [_run_one(study, None, 0.5).params for _ in range(3) for study in (first, second)]
    assert len({json.dumps(params, sort_keys=True) for params in drawn}) == len(drawn), drawn


def test_skipped_trials_do_not_end_the_random_start(tmp_path: Path) -> None:
    """The fp32 baseline trained, three draws skipped as unsupported on this machine: TPE (n_startup_trials 4) counted
    four finished trials and modelled the one measured, redrawing the baseline's categorical values."""
    copies = modelled = 0
    for seed in range(12):
        study = _study(tmp_path, f"s{seed}", seed)
        baseline = _run_one(study, None, 0.6)
        for _ in range(3):
            _run_one(study, "unsupported_precision", 0.0)
        drawn = [_run_one(study, None, 0.5) for _ in range(3)]  # 1, 2, 3 measured: still the random start
        copies += sum(all(t.params[k] == baseline.params[k] for k in CATEGORICAL) for t in drawn)
        modelled += sum(MODELLED in t.system_attrs for t in drawn)
        assert MODELLED in _run_one(study, None, 0.5).system_attrs  # the fifth measured: four before it, TPE models
    # Random: each draw matches the baseline's four categorical values with chance 1/108 (0.33 expected in 36);
    # TPE's model copied 13 of 36.
    assert modelled == 0 and copies <= 3, (copies, modelled)


def test_a_study_without_skips_models_after_its_fourth_trial_as_before(tmp_path: Path) -> None:
    study = _study(tmp_path, "plain", 0)
    trials = [_run_one(study, None, 0.5 + i / 100) for i in range(6)]
    assert [MODELLED in t.system_attrs for t in trials] == [False] * 4 + [True] * 2


def _measured_start(study: optuna.Study) -> None:
    """The fp32 baseline and four trials of this machine, at fixed precisions: TPE's random start is over."""
    _run_one(study, None, 0.8)
    for number, precision in enumerate(("fp32", "bf16", "fp16", "bf16")):
        study.enqueue_trial({"fp_precision": precision})
        _run_one(study, None, 0.78 + number / 100)


def _skips_of_another_machine(study: optuna.Study, precision: str, n: int, skip: str = "unsupported_precision",
                              hardware: dict | None = None) -> None:
    """``n`` trials of ``precision`` skipped by another machine (by default: one that cannot run it), as its worker leaves
    them in the storage, with ``hardware`` recorded when given."""
    shape = study.trials[-1]
    attrs = {"skip_reason": skip} | ({"hardware": hardware} if hardware is not None else {})
    for _ in range(n):
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.PRUNED, params={**shape.params, "fp_precision": precision}, distributions=shape.distributions,
            user_attrs=attrs,
        ))


def _draws(study: optuna.Study, n: int = 8) -> list[dict]:
    """What the study's sampler draws next, ``n`` times, from its model (each draw ended FAIL, which TPE leaves out)."""
    drawn = []
    for _ in range(n):
        trial = study.ask()
        SPACE.suggest(trial)
        study.tell(trial, state=TrialState.FAIL)
        frozen = study.trials[-1]
        assert MODELLED in frozen.system_attrs and set(frozen.params) == set(SPACE.params)
        drawn.append(frozen.params)
    return drawn


def _draws_with_and_without_skips(tmp_path: Path, device: str | None, precision: str, **skips) -> tuple[list[dict], list[dict]]:
    """The draws on ``device`` after another machine's 16 skips of ``precision``, and the draws of a study whose same
    trials are placeholders every worker leaves out (starts past the budget), judged on this CPU. The studies' draws
    have the same trial numbers, hence the same seeds (one --seed, mixed with each trial's number)."""
    tag = f"{device}-{precision}-{next(_STUDY_NUMBERS)}"
    with_skips, without = _study_on(tmp_path, f"fleet-{tag}", device), _study_on(tmp_path, f"alone-{tag}", "cpu")
    for study in (with_skips, without):
        _measured_start(study)
    _skips_of_another_machine(with_skips, precision, 16, **skips)
    _skips_of_another_machine(without, precision, 16, skip="over_budget")
    return _draws(with_skips), _draws(without)


def _study_on(tmp_path: Path, name: str, device: str | None) -> optuna.Study:
    storage = create_storage(f"sqlite:///{tmp_path / 'sampler.db'}")
    return open_study(storage, name, SPACE, DATA, seed=0, device=device)


def test_another_machines_skips_of_a_precision_this_one_runs_are_not_modelled(tmp_path: Path) -> None:
    """A T4 sharing the study skipped 16 bf16 draws, which TPE read as 16 poor bf16 results: the CPU beside it (which runs
    bf16) drew bf16 in 20 of 120 draws after four measured trials, against 34 of 120 in the same study without them
    (6 seeds x 20 draws, measured once on a 2-core AMD EPYC)."""
    fleet, alone = _draws_with_and_without_skips(tmp_path, "cpu", "bf16")
    assert fleet == alone
    # Without a device to judge by, every trial is modelled, as Optuna's TPE does: the skips change the draws.
    fleet, alone = _draws_with_and_without_skips(tmp_path, None, "bf16")
    assert fleet != alone


def test_skips_of_a_precision_this_machine_cannot_run_are_still_modelled(tmp_path: Path) -> None:
    """tf32 skipped on a CPU says something here: TPE still reads it as poor and draws tf32 less on this machine."""
    fleet, alone = _draws_with_and_without_skips(tmp_path, "cpu", "tf32")
    assert fleet != alone


def test_another_machines_out_of_memory_skips_are_modelled_only_from_a_device_as_large(tmp_path: Path) -> None:
    """An OOM on a device with less memory than this one (a 16 GB card's, read on an 80 GB one) says nothing here and is
    left out; an OOM on a device of this kind holding as much or more would happen here too, and stays modelled."""
    here = trial_executor.hardware_metadata(trial_executor.resolve_device("cpu"))
    smaller = {**here, "host": "small.invalid", "total_memory_mb": here["total_memory_mb"] // 4}
    fleet, alone = _draws_with_and_without_skips(tmp_path, "cpu", "fp32", skip="oom", hardware=smaller)
    assert fleet == alone
    larger = {**here, "host": "large.invalid", "total_memory_mb": here["total_memory_mb"] * 4}
    fleet, alone = _draws_with_and_without_skips(tmp_path, "cpu", "fp32", skip="oom", hardware=larger)
    assert fleet != alone

