"""Full studies on SQLite through the real CLI, Optuna and torch."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import yaml
from _tiny_study import assert_trial_records
from conftest import ROOT, cli_args, write_tsv
from optuna.trial import TrialState

from hpo import create_storage, finished_count, load_search_space, open_study, parse_search_space
from hpo.cli._run import main
from trial_executor import demo_dataset, make_synthetic_reviews


def _study(db: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_full_study_resume_and_extend(tmp_path: Path, small_space: Path, small_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "studies.db"
    args = cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "s", "--seed", "3")
    assert main([*args, "--n-trials", "3"]) == 0
    out = capsys.readouterr().out
    study = _study(db, "s")
    assert finished_count(study) == 3
    for trial in study.get_trials(states=(TrialState.COMPLETE,)):
        assert_trial_records(trial)
        assert f"trial {trial.number:>3}  COMPLETE" in out
    for trial in study.get_trials(states=(TrialState.PRUNED,)):
        # tf32 on a CPU: refused at once, with the hardware still recorded, and not counted.
        assert trial.user_attrs["skip_reason"] == "unsupported_precision"
        assert "tf32" in trial.user_attrs["skip_detail"]
        assert trial.user_attrs["hardware"]["device_type"] == "cpu"
    # Once a model's data is tokenized, its later trials read the shared cache.
    seen: set[str] = set()
    for trial in sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.number):
        if trial.params["model"] in seen:
            assert trial.user_attrs["tokenize_cache"] == "hit"
        seen.add(trial.params["model"])
    assert study.user_attrs["dataset_fingerprint"] and study.user_attrs["search_space"]["params"]["fp_precision"]
    assert study.user_attrs["label_names"] == ["negative", "positive"]
    assert "Best trial" in out and f"optuna-dashboard sqlite:///{db}" in out

    # The same command again: the budget is met, nothing runs.
    before = len(study.get_trials())
    assert main([*args, "--n-trials", "3"]) == 0
    assert len(_study(db, "s").get_trials()) == before

    # A larger budget extends the same study.
    assert main([*args, "--n-trials", "5"]) == 0
    assert finished_count(_study(db, "s")) == 5
    assert len(optuna.get_all_study_names(f"sqlite:///{db}")) == 1


def test_enqueued_trial_runs_with_its_values(tmp_path: Path, small_space: Path, small_data: Path) -> None:
    db = tmp_path / "studies.db"
    args = cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "q")
    assert main([*args, "--n-trials", "1"]) == 0
    wanted = {"fp_precision": "bf16", "batch_size": 16, "learning_rate": 0.0015, "model": "tiny-distilbert"}
    _study(db, "q").enqueue_trial(wanted)
    assert main([*args, "--n-trials", "2"]) == 0
    trial = [t for t in _study(db, "q").get_trials() if t.state == TrialState.COMPLETE][-1]
    assert trial.params == wanted
    assert {k: trial.user_attrs["config"][k] for k in wanted} == wanted
    assert trial.user_attrs["precision_effective"] == "bf16"


def test_resuming_with_another_space_or_data_is_refused(
    tmp_path: Path, small_space: Path, small_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "studies.db"
    assert main([*cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "r"), "--n-trials", "1"]) == 0
    other = tmp_path / "other.yaml"
    other.write_text(small_space.read_text().replace("- 16", "- 8"))
    assert main([*cli_args(f"sqlite:///{db}", other, small_data, "--study-name", "r"), "--n-trials", "2"]) == 2
    assert "different search space (params.batch_size.choices was [16, 32], now [8, 32]); rerun with its original --space " \
           "(and --model), or pick a new --study-name" in capsys.readouterr().err  # not --fix: it never changes the stored space
    # Another hold-out is other data (another --seed is not: it seeds the trials only, test_data_source).
    assert main([*cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "r", "--valid-fraction", "0.3"), "--n-trials", "2"]) == 2
    assert "different data" in capsys.readouterr().err
    assert finished_count(_study(db, "r")) == 1


def test_rerun_after_a_crash_finishes_the_remainder(tmp_path: Path, small_space: Path, small_data: Path) -> None:
    db = tmp_path / "studies.db"
    args = [*cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "c"), "--n-trials", "4"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpo.run", *args], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "COMPLETE" in line or "PRUNED" in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    crashed = _study(db, "c")
    assert 1 <= finished_count(crashed) < 4

    assert main(args) == 0  # the rerun: in this process, which has torch loaded already
    assert finished_count(_study(db, "c")) == 4


def test_timeout_stops_starting_trials(tmp_path: Path, small_space: Path, small_data: Path) -> None:
    db = tmp_path / "studies.db"
    args = cli_args(f"sqlite:///{db}", small_space, small_data, "--study-name", "t", "--timeout", "0.1")
    assert main([*args, "--n-trials", "50"]) == 0
    # Optuna checks the timeout between trials: the trial in flight finishes, no new one starts
    # (an instant tf32 skip may come first).
    study = _study(db, "t")
    assert finished_count(study) <= 1 and len(study.get_trials()) <= 2
    assert all(t.state != TrialState.RUNNING for t in study.get_trials())


def test_storage_defaults_to_the_environment_variable(
    tmp_path: Path, small_space: Path, small_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "from-env.db"
    monkeypatch.setenv("HPO_STORAGE", f"sqlite:///{db}")
    args = ["--space", str(small_space), "--data", str(small_data), "--text-column", "sentence", "--study-name", "e"]
    assert main([*args, "--n-trials", "1"]) == 0
    assert finished_count(_study(db, "e")) == 1


def test_sampler_is_seeded(tmp_path: Path, small_space: Path) -> None:
    from hpo import create_storage, load_search_space, open_study
    from trial_executor import demo_dataset

    space, data = load_search_space(small_space), demo_dataset(n_train=50, n_valid=10)
    storage = create_storage(f"sqlite:///{tmp_path / 'seed.db'}")

    def first_params(name: str, seed: int) -> list[dict[str, object]]:
        study = open_study(storage, name, space, data, seed)
        sampled = []
        for _ in range(3):
            trial = study.ask()
            sampled.append(space.suggest(trial))
            study.tell(trial, 0.5)
        return sampled

    assert first_params("a", 1) == first_params("b", 1)
    assert first_params("c", 1) != first_params("d", 2)


# --- fp32 baseline, several objectives, constraints ----------------------------------------

TINY_FIXED = {"model": "tiny-bert", "batch_size": 16, "max_steps": 3, "eval_every": 0, "max_length": 32}


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 synthetic reviews: enough for three optimizer steps and a validation split."""
    texts, labels = make_synthetic_reviews(120, seed=5)
    return write_tsv(tmp_path_factory.mktemp("tiny") / "tiny.tsv", list(zip(texts, labels, strict=True)))


TINY_PARAMS = {
    "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
    "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
}


def test_fp32_baseline_is_enqueued_once_with_the_defaults(tmp_path: Path, small_space: Path) -> None:
    space, data = load_search_space(small_space), demo_dataset(n_train=50, n_valid=10)
    storage = create_storage(f"sqlite:///{tmp_path / 'b.db'}")
    study = open_study(storage, "b", space, data, 0)
    open_study(storage, "b", space, data, 0)
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert waiting.user_attrs == {"fp32_baseline": True}
    expected = {"fp_precision": "fp32", "batch_size": 16, "learning_rate": pytest.approx(1e-3), "model": "tiny-bert"}
    assert waiting.system_attrs["fixed_params"] == expected

    trial = study.ask()  # the baseline runs first, with its values
    assert space.suggest(trial) == expected and trial.user_attrs["fp32_baseline"] is True
    study.tell(trial, 0.5)
    open_study(storage, "b", space, data, 0)
    assert len(study.get_trials()) == 1


@pytest.mark.postgres
def test_baseline_once_when_workers_open_the_study_at_once(pg_database: str) -> None:
    space, data = parse_search_space({"params": TINY_PARAMS, "fixed": TINY_FIXED}), demo_dataset(n_train=50, n_valid=10)
    storages = [create_storage(pg_database) for _ in range(6)]
    start, errors = threading.Barrier(len(storages)), []

    def worker(storage: optuna.storages.BaseStorage) -> None:
        try:
            start.wait()
            open_study(storage, "race", space, data, 0)
        except Exception as err:  # surfaced below: a thread's exception would otherwise vanish
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in storages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    trials = optuna.load_study(study_name="race", storage=pg_database).get_trials()
    assert [t.user_attrs for t in trials] == [{"fp32_baseline": True}]


def test_multi_objective_study_has_a_pareto_front_and_constraints(
    tmp_path: Path, tiny_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space_file = tmp_path / "multi.yaml"
    space_file.write_text(yaml.safe_dump({
        "objectives": [{"name": "accuracy"}, {"name": "throughput_samples_per_s"}, {"name": "peak_memory_mb"}],
        "constraints": {"max_peak_memory_mb": 1.0e6, "min_accuracy": 0.0},
        "params": TINY_PARAMS, "fixed": TINY_FIXED,
    }))
    db = tmp_path / "m.db"
    assert main([*cli_args(f"sqlite:///{db}", space_file, tiny_data, "--study-name", "m"), "--n-trials", "3"]) == 0
    out = capsys.readouterr().out
    study = _study(db, "m")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MAXIMIZE", "MINIMIZE"]
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 3 and study.best_trials
    for trial in complete:
        attrs = trial.user_attrs
        assert trial.values == [attrs["metrics"]["accuracy"], attrs["throughput_samples_per_s"], attrs["peak_memory_mb"]]
        assert not trial.intermediate_values  # Optuna prunes single-objective studies only: nothing is reported
        assert trial.constraints == {
            "max_peak_memory_mb": pytest.approx(attrs["peak_memory_mb"] - 1.0e6),
            "min_accuracy": pytest.approx(-attrs["metrics"]["accuracy"]),
        }
        assert attrs["feasible"] is True and attrs["constraints"]["max_peak_memory_mb"]["limit"] == 1.0e6
    for best in study.best_trials:
        assert f"Pareto-front trial {best.number}: accuracy=" in out


def test_infeasible_trials_are_not_best(tmp_path: Path, tiny_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space_file = tmp_path / "constrained.yaml"
    space_file.write_text(yaml.safe_dump({
        "constraints": {"min_throughput_samples_per_s": 1.0e12}, "params": TINY_PARAMS, "fixed": TINY_FIXED,
    }))
    db = tmp_path / "c.db"
    assert main([*cli_args(f"sqlite:///{db}", space_file, tiny_data, "--study-name", "c"), "--n-trials", "1"]) == 0
    out = capsys.readouterr().out
    (trial,) = _study(db, "c").get_trials()
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["feasible"] is False
    assert trial.constraints["min_throughput_samples_per_s"] > 0
    assert "(violates min_throughput_samples_per_s)" in out and "No completed trial meets the space's constraints." in out
    with pytest.raises(ValueError, match="feasible"):
        _ = _study(db, "c").best_trial
