"""Issue 24: settings that would reap live trials, trackers that cannot work, --gpus without CUDA, bounded messages.

Each bad setting is one line on stderr, exit 2, before anything is written (no storage file);
through the real command (``hpo.cli._run.main``), the real MLflow client and real data files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from _tiny_study import TINY
from conftest import write_tsv

from hpo import UserError
from hpo.cli._report import main as report_main
from hpo.cli._run import main
from hpo.study._run_checks import check_heartbeat
from trial_executor.data._messages import bounded_list


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


@pytest.mark.parametrize(("interval", "grace"), [(60, 1), (60, 60), (60, 120)])
def test_a_grace_period_a_missed_beat_would_outlast_is_refused_before_anything_is_written(
    tmp_path: Path, interval: int, grace: int, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    assert main(["--storage", f"sqlite:///{db}", "--heartbeat-interval", str(interval), "--grace-period", str(grace)]) == 2
    line = _one_error_line(capsys)
    assert f"--grace-period {grace} is not longer than two --heartbeat-interval {interval} ({2 * interval} s)" in line
    assert f"pass --grace-period above {2 * interval}" in line
    assert not db.exists()


def test_a_heartbeat_interval_too_long_to_wait_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It passed, and the heartbeat thread died mid-run with an OverflowError traceback (its wait cannot be timed).
    db, huge = tmp_path / "s.db", str(10**20)
    assert main(["--storage", f"sqlite:///{db}", "--heartbeat-interval", huge, "--grace-period", str(10**21)]) == 2
    assert f"--heartbeat-interval {huge} is longer than the longest wait this machine can time" in _one_error_line(capsys)
    assert not db.exists()


def test_the_heartbeat_rule_accepts_room_for_one_missed_beat() -> None:
    check_heartbeat(30, 120)  # the defaults
    check_heartbeat(1, 3)  # the tests' fast heartbeat
    with pytest.raises(UserError):
        check_heartbeat(1, 2)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("file:///{tmp}/mlruns", "The filesystem tracking backend (e.g., './mlruns') is in maintenance mode"),
        ("http://mlflow.invalid:5000", "its host name does not resolve"),
        ("http://user:s3cret-pw@127.0.0.1:9", "nothing answers at that address (connection refused)"),
    ],
)
@pytest.mark.parametrize("given", ["env", "flag"])
def test_a_tracking_uri_mlflow_refuses_or_cannot_reach_is_one_line_before_anything_is_written(
    tmp_path: Path, uri: str, expected: str, given: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = uri.format(tmp=tmp_path)
    db = tmp_path / "s.db"
    if given == "env":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    track = ["--track", "mlflow"] + ([uri] if given == "flag" else [])
    assert main(["--storage", f"sqlite:///{db}", *track]) == 2
    line = _one_error_line(capsys)
    assert "--track mlflow: tracking store " in line and expected in line
    assert "set $MLFLOW_TRACKING_URI (or --track mlflow URI) to a database" in line
    assert "s3cret-pw" not in line
    assert not db.exists() and not (tmp_path / "mlruns").exists()


def test_tracking_without_the_mlflow_extra_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # what an environment without mlflow gives: ImportError
    db = tmp_path / "s.db"
    assert main(["--storage", f"sqlite:///{db}", "--track", "mlflow"]) == 2
    assert "--track mlflow needs the optional package mlflow; install it with pip install 'precision-hpo[tracking]'" in _one_error_line(capsys)
    assert not db.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA is what this test is about")
def test_gpus_without_cuda_warns_once_that_trials_run_on_the_cpu(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**TINY, "params": {"learning_rate": TINY["params"]["learning_rate"]}, "fixed": {**TINY["fixed"], "model": "tiny-bert"}}))
    url = f"sqlite:///{tmp_path / 's.db'}"
    flags = ["--storage", url, "--space", str(space), "--data", str(small_data), "--text-column", "sentence", "--n-trials", "1", "--quiet"]
    assert main([*flags, "--gpus", "0", "--artifact-store", str(tmp_path / "a"), "--cache-dir", str(tmp_path / "c")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--gpus" in line]
    assert warnings == ["python -m hpo.run: warning: --gpus 0: torch sees no CUDA device on this machine, so trials run on the CPU"]
    (trial,) = optuna.load_study(study_name="precision-demo", storage=url).get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.user_attrs["hardware"]["device_type"] == "cpu"
    assert main([*flags, "--gpus", "0", "--device", "cuda"]) == 2  # asking for CUDA itself is refused, as without --gpus
    assert "--device cuda: torch" in _one_error_line(capsys)


def test_lists_in_messages_are_cut_with_and_n_more() -> None:
    assert bounded_list([]) == "none"
    assert bounded_list(["a", "b"]) == "a, b"
    assert bounded_list(range(25), limit=3) == "0, 1, 2 and 22 more"
    assert bounded_list(["x" * 500]) == "x" * 77 + "..."


def test_validation_labels_missing_from_training_are_named_in_one_bounded_line(
    tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    valid = write_tsv(tmp_path / "valid.tsv", [(f"text {i}", f"class-{i:04d}-with-a-long-descriptive-name") for i in range(2000)])
    db = tmp_path / "s.db"
    flags = ["--storage", f"sqlite:///{db}", "--data", str(small_data), "--valid-data", str(valid), "--text-column", "sentence"]
    assert main(flags) == 2
    line = _one_error_line(capsys)
    assert "validation labels ['class-0000-with-a-long-descriptive-name', " in line and " and 1990 more] never occur in training" in line
    assert len(line) < 1200 and not db.exists()


def test_a_missing_study_among_many_lists_a_bounded_few(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = optuna.storages.RDBStorage(url)
    for i in range(40):
        optuna.create_study(storage=storage, study_name=f"study-{i:02d}")
    storage.engine.dispose()
    assert report_main(["--storage", url, "--study-name", "nope"]) == 2
    line = _one_error_line(capsys)
    assert "studies found: study-00, study-01," in line and "study-09 and 30 more (pass one with --study-name)" in line
