"""``python -m hpo <command>``: dispatch, --help, and status / best / export on real studies in PostgreSQL."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import ROOT, SMALL_SPACE, _throwaway_database, cli_args
from optuna.trial import TrialState

from hpo import create_storage, executor_config, make_objective, open_study, parse_search_space, run_to_budget
from hpo.__main__ import COMMANDS
from hpo.__main__ import main as hpo_main
from trial_executor import demo_dataset

# One test process for this module: its module-scoped fixture (real runs) is then made once, not once per process.
pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("test_cli")]

SECRET = "Cl1Secret"
TINY = {**SMALL_SPACE, "fixed": {**SMALL_SPACE["fixed"], "max_steps": 3, "eval_every": 1}}
PARETO = {
    "objectives": [{"name": "accuracy"}, {"name": "throughput_samples_per_s"}],
    "pruner": {"type": "none"},
    "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
               "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
    "fixed": {"model": "tiny-bert", "batch_size": 16, "max_steps": 3, "eval_every": 0, "max_length": 32},
}


def hpo(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m hpo ARGS`` in a real subprocess."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hpo", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def storage_url(pg_server: str, small_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database holding 'single' (run by `python -m hpo run`) and 'pareto' (two objectives), URL with a password."""
    with _throwaway_database("hpo_cli") as plain:
        url = plain.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")  # trust auth: any password works
        work = tmp_path_factory.mktemp("cli")
        space = work / "tiny.yaml"
        space.write_text(yaml.safe_dump(TINY))
        # `python -m hpo run`'s main in this process (torch is loaded already), its output kept to be read.
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = hpo_main(["run", *cli_args(url, space, small_data, "--study-name", "single", "--n-trials", "2")])
        assert code == 0, err.getvalue()[-3000:]
        assert SECRET not in out.getvalue() + err.getvalue()
        data = demo_dataset(n_train=96, n_valid=24, seed=2)
        pareto = parse_search_space(PARETO)
        study = open_study(create_storage(url), "pareto", pareto, data, seed=0)
        run_to_budget(study, make_objective(pareto, data, base_seed=0, device="cpu"), 3)
        yield url


def test_python_m_hpo_lists_every_command_and_each_help_has_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    proc = hpo("--help")
    assert proc.returncode == 0 and all(f"  {name} " in proc.stdout for name in COMMANDS)
    for name in COMMANDS:
        with pytest.raises(SystemExit) as info:
            hpo_main([name, "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0, name
        assert f"python -m hpo.{name}" in out and "example" in out.lower(), name
        assert f"python -m hpo.{name} --" in out.split("example", 1)[1] or f"python -m hpo.{name}\n" in out, name


def test_unknown_command_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert hpo_main(["stauts"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'stauts'; did you mean 'status'?" in err and len(err.strip().splitlines()) == 1


def test_status_counts_best_data_flags_and_masked_url(storage_url: str, small_data: Path) -> None:
    proc = hpo("status", "--storage", storage_url)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr and "postgres:***@" in proc.stdout
    single = optuna.load_study(study_name="single", storage=storage_url)
    trials = single.get_trials()
    complete = sum(t.state == TrialState.COMPLETE for t in trials)
    lines = proc.stdout.splitlines()
    at = lines.index("single  (maximize accuracy)")
    assert lines[at + 1].startswith(f"  trials: {len(trials)}: complete {complete}, ")
    assert f"  best: trial {single.best_trial.number}  accuracy={single.best_value:.4g}" == lines[at + 2]
    # The flags that read its data again, from another machine too (absolute path; a new study's stratified hold-out).
    assert lines[at + 3] == f"  data: --data {small_data.resolve()} --text-column sentence --label-column label"
    pareto = optuna.load_study(study_name="pareto", storage=storage_url)
    front = len(pareto.best_trials)
    assert f"  Pareto front: {front} trial{'s' * (front != 1)}" in proc.stdout
    assert "pareto  (maximize accuracy, maximize throughput_samples_per_s)" in lines


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_status_shows_running_trials_workers_and_heartbeats(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = request.getfixturevalue("pg_database") if backend == "postgresql" else f"sqlite:///{tmp_path / 'hb.db'}"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=60)
    study = optuna.create_study(study_name="live", storage=storage)
    beating, silent = study.ask(), study.ask()
    beating.set_user_attr("worker", {"host": "gpu-node-7", "pid": 4242})
    silent.set_user_attr("worker", {"host": "cpu-node-2", "pid": 99})
    storage.record_heartbeat(beating._trial_id)  # what Optuna's optimize loop does every heartbeat_interval
    study.tell(study.ask(), 0.5)
    time.sleep(1.2)  # the age is measured: at least a second by now
    assert hpo_main(["status", "--storage", url, "--study-name", "live"]) == 0
    out = capsys.readouterr().out
    assert "  trials: 3: complete 1, pruned 0, fail 0, running 2" in out and "  best: trial 2  value=0.5" in out
    beat_line = next(line for line in out.splitlines() if "trial 0 on" in line)
    assert beat_line.startswith("  running: trial 0 on gpu-node-7 pid 4242, for ") and "last heartbeat " in beat_line
    age = beat_line.rsplit("last heartbeat ", 1)[1]
    assert age.endswith("s ago") and 1 <= int(age.split("s")[0]) < 60, age
    assert "  running: trial 1 on cpu-node-2 pid 99, for " in out and out.count("no heartbeat") == 1


def test_best_is_a_config_that_trains_the_same_trial_again(storage_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert hpo_main(["best", "--study-name", "single", "--storage", storage_url]) == 0
    text = capsys.readouterr().out
    document = yaml.safe_load(text)
    best = optuna.load_study(study_name="single", storage=storage_url).best_trial
    assert document["trial"] == best.number and document["params"] == best.params
    assert document["values"] == {"accuracy": best.value}
    fixed = document["fixed"]
    assert not {"seed", "device", "cache_dir"} & set(fixed)
    # Paste it into a space: searching only the precision, the same config comes out for that precision.
    precision = fixed.pop("fp_precision")
    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": [precision]}}, "fixed": fixed})
    stored = best.user_attrs["config"]
    again = executor_config({"fp_precision": precision}, space, seed=stored["seed"], device=stored["device"], cache_dir=stored["cache_dir"])
    assert again.to_dict() == stored and document["trial_seed"] == stored["seed"]
    assert hpo_main(["best", "--study-name", "single", "--storage", storage_url, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {k: v for k, v in document.items()} | {"fixed": {**fixed, "fp_precision": precision}}


def test_best_of_two_objectives_is_the_pareto_front(storage_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert hpo_main(["best", "--study-name", "pareto", "--storage", storage_url, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    front = optuna.load_study(study_name="pareto", storage=storage_url).best_trials
    assert document["objectives"] == ["accuracy", "throughput_samples_per_s"]
    assert [entry["trial"] for entry in document["pareto_front"]] == [t.number for t in front]
    for entry, trial in zip(document["pareto_front"], front, strict=True):
        assert entry["values"] == dict(zip(document["objectives"], trial.values, strict=True))
        assert entry["fixed"]["fp_precision"] == trial.params["fp_precision"] and entry["fixed"]["max_steps"] == 3


def test_export_flattens_every_trial(storage_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trials.csv"
    assert hpo_main(["export", "--study-name", "single", "--format", "csv", "--out", str(out), "--storage", storage_url]) == 0
    trials = optuna.load_study(study_name="single", storage=storage_url).get_trials()
    assert f"Wrote {len(trials)} trials of study 'single' to {out}" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [int(r["number"]) for r in rows] == [t.number for t in trials]
    for row, trial in zip(rows, trials, strict=True):
        assert row["state"] == trial.state.name
        assert row["hardware.device_name"] == trial.user_attrs["hardware"]["device_name"]
        assert row["worker.host"] == trial.user_attrs["worker"]["host"]
        assert row["params.fp_precision"] == trial.params["fp_precision"]
        assert row["values.accuracy"] == (str(trial.value) if trial.value is not None else "")
    assert hpo_main(["export", "--study-name", "pareto", "--format", "json", "--storage", storage_url]) == 0
    exported = json.loads(capsys.readouterr().out)
    pareto = optuna.load_study(study_name="pareto", storage=storage_url).get_trials()
    assert len(exported) == len(pareto)
    for row, trial in zip(exported, pareto, strict=True):
        assert row["values.throughput_samples_per_s"] == (trial.values[1] if trial.values else None)
        assert row["config.learning_rate"] == trial.params["learning_rate"] == row["params.learning_rate"]
        assert row["metrics.accuracy"] == trial.user_attrs["metrics"]["accuracy"]


def test_best_and_export_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    optuna.create_study(study_name="empty", storage=url).ask()
    assert hpo_main(["best", "--storage", url, "--study-name", "empty"]) == 2
    err = capsys.readouterr().err
    assert "error: study 'empty' has no best trial: none has completed yet; run more trials" in err and err.count("\n") == 1
    out = tmp_path / "missing-dir" / "trials.json"
    assert hpo_main(["export", "--storage", url, "--study-name", "empty", "--format", "json", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: cannot write --out {out}: No such file or directory" in err and err.count("\n") == 1
    assert not out.parent.exists()
    # --out naming the storage's own file wrote the CSV over the database: the study was gone.
    before = (tmp_path / "e.db").read_bytes()
    assert hpo_main(["export", "--storage", url, "--study-name", "empty", "--format", "csv", "--out", str(tmp_path / "." / "e.db")]) == 2
    err = capsys.readouterr().err
    assert f"error: --out {tmp_path / '.' / 'e.db'} is the study's own database (--storage); write the export to another file" in err
    assert (tmp_path / "e.db").read_bytes() == before


def test_a_flag_given_an_empty_value_is_refused_not_taken_for_its_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --storage '' read $HPO_STORAGE (another database than asked); --out '' wrote ./hpo-report-<study>.
    url = f"sqlite:///{tmp_path / 'e.db'}"
    optuna.create_study(study_name="s", storage=url)
    monkeypatch.setenv("HPO_STORAGE", url)
    monkeypatch.chdir(tmp_path)
    for argv, flag in ((["status", "--storage", ""], "--storage"), (["report", "--out", ""], "--out"), (["run", "--data", " "], "--data"),
                       (["dashboard", "--host", ""], "--host"), (["best", "--save-model="], "--save-model")):
        with pytest.raises(SystemExit) as exited:
            hpo_main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.endswith(f"error: {flag} is empty; give it a value or leave it out (see --help)\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.db"]  # no report directory, no study file


def test_a_password_in_words_the_command_line_did_not_take_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["status", "postgresql://u:s3cret@127.0.0.1:1/db"], ["best", "--storage-url", "postgresql://u:s3cret@db.invalid/x"],
                 ["status", "--st=postgresql://u:s3cret@127.0.0.1:1/db"], ["export", "--format", "csv", "u:s3cret@127.0.0.1/db"]):
        with pytest.raises(SystemExit):
            hpo_main(argv)
        err = capsys.readouterr().err
        assert "s3cret" not in err and "***@" in err and len(err.splitlines()) == 1, err


def test_an_export_or_best_flag_that_names_no_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    optuna.create_study(study_name="s", storage=url).add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"config": {}}))
    assert hpo_main(["export", "--storage", url, "--format", "csv", "--out", "/"]) == 2  # a ValueError's traceback
    assert capsys.readouterr().err.endswith(" error: cannot write --out /: Is a directory; pick a writable path with room for it\n")
    # --artifact-store is read by --save-model only: alone it was ignored without a word.
    assert hpo_main(["best", "--storage", url, "--artifact-store", str(tmp_path / "store")]) == 2
    assert capsys.readouterr().err.endswith("error: --artifact-store is where --save-model finds the model; add --save-model DIR, or drop it\n")


def test_an_export_cut_short_by_the_disk_leaves_the_previous_one_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CSV was written in place: a full disk (here a file-size limit, which fails a write the same way) left the half
    that fitted, and a traceback."""
    import resource

    url = f"sqlite:///{tmp_path / 'e.db'}"
    study = optuna.create_study(study_name="wide", storage=url, direction="maximize")
    for i in range(40):
        study.enqueue_trial({"x": i / 40}, user_attrs={"note": "a long note kept with every trial " * 4})
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=40)
    out = tmp_path / "trials.csv"
    out.write_text("number,state\n0,COMPLETE\n")  # the export made yesterday
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # Python ignores SIGXFSZ: a write past it raises EFBIG
    try:
        code = hpo_main(["export", "--storage", url, "--study-name", "wide", "--format", "csv", "--out", str(out)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    err = capsys.readouterr().err
    assert code == 2 and f"error: cannot write --out {out}: File too large; pick a writable path with room for it" in err
    assert err.count("\n") == 1 and out.read_text() == "number,state\n0,COMPLETE\n" and sorted(p.name for p in tmp_path.iterdir()) == ["e.db", "trials.csv"]
    assert hpo_main(["export", "--storage", url, "--study-name", "wide", "--format", "csv", "--out", str(out)]) == 0
    assert len(list(csv.DictReader(io.StringIO(out.read_text())))) == 40


def test_reading_an_sqlite_study_leaves_nothing_beside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.5, user_attrs={"config": {}}))
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["status"], ["best", "--study-name", "s"], ["export", "--study-name", "s", "--format", "json"]):
        assert hpo_main([*argv, "--storage", url]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before == ["studies.db"]


def test_a_study_made_elsewhere_with_its_own_search_space_attribute_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A plain Optuna script may keep a text under the attribute name this service stores its space in (an AttributeError before)."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="plain", storage=url, direction="maximize")
    study.set_user_attr("search_space", "lr in [1e-5, 1e-3]")
    study.add_trial(optuna.trial.create_trial(params={"lr": 1e-4}, distributions={"lr": optuna.distributions.FloatDistribution(1e-5, 1e-3)},
                                              value=0.5))
    monkeypatch.chdir(tmp_path)
    for argv in (["status"], ["best"], ["export", "--format", "csv"], ["report"]):
        assert hpo_main([*argv, "--storage", url]) == 0, capsys.readouterr().err
    assert "best: trial 0  value=0.5" in capsys.readouterr().out


def test_without_study_name_the_commands_read_the_storages_only_study(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    optuna.delete_study(study_name="gone", storage=optuna.create_study(study_name="gone", storage=url)._storage)
    assert hpo_main(["best", "--storage", url]) == 2  # a storage that holds no study: one line
    assert capsys.readouterr().err.strip() == f"python -m hpo.best: error: no study in {url} yet; run one with python -m hpo run, or pass the --storage it ran with"
    study = optuna.create_study(study_name="only", storage=url, direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.5, user_attrs={"config": {}}))
    monkeypatch.chdir(tmp_path)
    for argv in (["best", "--format", "json"], ["export", "--format", "json"], ["report"]):
        assert hpo_main([*argv, "--storage", url]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert '"study": "only"' in out and (tmp_path / "hpo-report-only" / "report.md").is_file()
    # An empty name is not "no name": the verdict took the only study and trained 9 trials.
    with pytest.raises(SystemExit) as exited:
        hpo_main(["verdict", "--storage", url, "--study-name", ""])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().endswith(": error: --study-name is empty; give it a value or leave it out (see --help)")
    optuna.create_study(study_name="other", storage=url)
    for command in ("best", "export", "report"):
        assert hpo_main([command, "--storage", url, *(["--format", "csv"] if command == "export" else [])]) == 2
        assert capsys.readouterr().err.strip() == f"python -m hpo.{command}: error: {url} holds 2 studies: only, other; pass one with --study-name"


def test_a_signal_while_the_run_is_prepared_starts_nothing_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With --workers N, a SIGINT before the workers started was ignored: the whole study ran to its budget and
    exited 0. In one process, the run exited 130 with nothing said."""
    import argparse
    import signal

    from hpo._api import RunOptions, open_run
    from hpo.cli._run import _run_here, _run_workers
    from hpo.study._workers import StopSignal

    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="early", n_trials=2, device="cpu", artifact_store=None)
    run = open_run(SMALL_SPACE, demo_dataset(n_train=40, n_valid=10), options, announce=None)
    stop = StopSignal()
    stop.signum = signal.SIGINT  # as its handler records a Ctrl-C that came while the space, data and models were read
    assert _run_here(run, quiet=True, stop=stop) == 130
    args = argparse.Namespace(workers=2, study_name="early", n_trials=2, gpus=None, quiet=True)
    assert _run_workers(run, [], args, stop) == 130
    shown = capsys.readouterr()
    assert shown.out == "" and shown.err.splitlines() == [
        "python -m hpo.run: stopped by a signal between trials, none interrupted: rerun the same command to resume the study"
    ] * 2
    assert {t.state for t in run.prepared.study.get_trials()} <= {TrialState.WAITING}  # the enqueued baseline, not run


def test_a_signal_after_the_budget_was_met_asks_for_no_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SIGTERM just after the last trial completed said "between trials, none interrupted: rerun the same command to
    resume the study", with nothing left to resume."""
    import signal

    from hpo._api import RunOptions, open_run
    from hpo.cli._run import _run_here
    from hpo.study._workers import StopSignal

    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="met", n_trials=1, device="cpu", artifact_store=None)
    run = open_run(SMALL_SPACE, demo_dataset(n_train=40, n_valid=10), options, announce=None)

    class SignalOnceDone(StopSignal):  # the signal lands once the study's one trial is told
        def requested(self) -> bool:
            if self.signum is None and any(t.state.is_finished() for t in run.prepared.study.get_trials(deepcopy=False)):
                self.signum = signal.SIGTERM
            return super().requested()

    assert _run_here(run, quiet=True, stop=SignalOnceDone()) == 143
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m hpo.run: stopped by a signal after the study reached its budget of 1 finished trial: nothing to resume"
    )
    assert [t.state for t in run.prepared.study.get_trials()] == [TrialState.COMPLETE]


def test_workers_on_a_study_that_holds_its_budget_are_not_started(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rerun with --workers 2 on a study that held its budget started both workers: each imported torch and
    transformers (seconds apiece), found nothing to do and stopped."""
    from hpo.cli._run import main as run_main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2}}))
    args = cli_args(f"sqlite:///{tmp_path / 's.db'}", space, small_data, "--n-trials", "1", "--artifact-store", str(tmp_path / "artifacts"))
    assert run_main(args) == 0
    capsys.readouterr()
    assert run_main([*args, "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "Starting" not in out and "[worker" not in out, out
    assert ": 1 of 1 budgeted trials already finished; training on" in out and "1 of 1 budgeted trials finished (1 complete" in out


def test_a_signal_during_a_storage_outage_ends_the_command_at_once_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while the proxy was down: the first did nothing for up to 300 s, the fourth printed Optuna's UnboundLocalError."""
    import signal
    import threading

    from _proxy_process import free_port

    from hpo.cli._training import run_training
    from hpo.storage._proxy_client import ProxyStorage
    from hpo.study._outcomes import TrialFailedError
    from hpo.study._workers import StopSignal

    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 60.0)
    stop = StopSignal()
    threading.Timer(1.0, lambda: setattr(stop, "signum", signal.SIGINT)).start()  # the first Ctrl-C, as its handler records it
    started = time.monotonic()
    code = run_training("prog", "grpc://127.0.0.1:1", lambda: len(ProxyStorage(host="127.0.0.1", port=free_port()).get_all_studies()), stop,
                        failures=(TrialFailedError,), resume="the study")
    assert code == 1 and time.monotonic() - started < 4.0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("prog: error: storage proxy 127.0.0.1:") and "not waited for: this worker was told to stop" in line

    def second_ctrl_c_masked_by_optuna() -> int:
        try:
            raise KeyboardInterrupt  # raised by StopSignal's handler inside a storage call of Optuna's _run_trial
        except KeyboardInterrupt:
            raise UnboundLocalError("cannot access local variable 'updated_state'")  # noqa: B904 (as Optuna raises it)

    assert run_training("prog", "sqlite://", second_ctrl_c_masked_by_optuna, stop, failures=(), resume="the verdict") == 130
    assert capsys.readouterr().err.splitlines() == ["prog: interrupted; rerun the same command to resume the verdict"]


def test_a_second_signal_mid_trial_names_the_trial_it_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second Ctrl-C while a trial trained ended with "interrupted; rerun the same command to resume the study": which
    trial, and whether it was checkpointed at the stop, went unsaid."""
    import signal

    from hpo._api import RunOptions, open_run
    from hpo.cli._run import _run_here
    from hpo.study._workers import StopSignal

    space = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}},
             "fixed": {**SMALL_SPACE["fixed"], "max_steps": 8, "eval_every": 0}}
    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="twice", n_trials=1, device="cpu",
                         artifact_store=str(tmp_path / "store"))
    run = open_run(space, demo_dataset(n_train=64, n_valid=16), options, announce=None)

    class TwoSignals(StopSignal):  # the first at the trial's 3rd step poll, a second at the next, as the handler takes them
        polls = 0

        def requested(self) -> bool:
            self.polls += 1
            if self.polls == 3:
                self.signum = signal.SIGINT
            elif self.polls == 4:
                self._handle(signal.SIGINT, None)
            return super().requested()

    assert _run_here(run, quiet=True, stop=TwoSignals()) == 130
    lines = capsys.readouterr().err.splitlines()
    # The second landed while the first's checkpoint was written: owed until the trial was told, then the run ended.
    assert lines[-1] == "python -m hpo.run: stopped by a signal; trial 0 was checkpointed and re-queued: rerun the same command to resume the study"
    assert [t.state for t in run.prepared.study.get_trials()] == [TrialState.FAIL, TrialState.WAITING]


def test_a_run_with_a_smaller_budget_than_done_says_so_as_its_summary_does(tmp_path: Path) -> None:
    """The start line said '3 of 2 budgeted trials already finished' where the summary says '3 (more than the 2 budgeted)'."""
    from hpo._api import RunOptions, open_run
    from hpo.cli._run import _start_line

    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="over", n_trials=2, device="cpu", artifact_store=None)
    run = open_run(SMALL_SPACE, demo_dataset(n_train=40, n_valid=10), options, announce=None)
    for _ in range(3):
        run.prepared.study.add_trial(optuna.trial.create_trial(value=0.5))
    assert ": 3 (more than the 2 budgeted) trials already finished; training on 40 rows, validating on 10." in _start_line(run)
