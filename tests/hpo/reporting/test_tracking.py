"""Experiment tracking read back with the real MLflow client and TensorBoard's own event reader."""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path

import optuna
import pytest
import yaml
from _tiny_study import TINY
from conftest import cli_args, run_cli
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import hpo
from hpo.cli._run import main
from trial_executor import demo_dataset

# Evaluated at steps 2 and 4: a learning curve of two points per run.
SPACE = {**TINY, "params": {k: v for k, v in TINY["params"].items() if k != "fp_precision"}}


def test_mlflow_gets_one_run_per_trial_in_the_default_local_store(tmp_path: Path, small_data: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    url = f"sqlite:///{tmp_path / 'm.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = run_cli([*cli_args(url, space, small_data, "--study-name", "tracked", "--n-trials", "2"), "--track", "mlflow"],
                   cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mlflow" not in proc.stderr.lower(), proc.stderr  # no store notices over the study's lines
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tracked")
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    trials = optuna.load_study(study_name="tracked", storage=url).get_trials()
    assert len(runs) == len(trials) == 2
    for trial in trials:
        run = runs[trial.user_attrs["mlflow_run_id"]]
        assert run.info.run_name == f"trial-{trial.number}" and run.info.status == "FINISHED"
        assert run.data.params["learning_rate"] == str(trial.params["learning_rate"])
        assert run.data.params["model"] == trial.params["model"] and run.data.params["max_steps"] == "4"
        assert run.data.tags["hardware.device_type"] == "cpu" and run.data.tags["state"] == TrialState.COMPLETE.name
        history = client.get_metric_history(run.info.run_id, "eval/accuracy")
        assert [m.step for m in history] == [2, 4]
        assert history[-1].value == pytest.approx(trial.value)
        assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/train_loss")] == [2, 4]
        assert client.get_metric_history(run.info.run_id, "train/loss")
        assert run.data.metrics["final/throughput_samples_per_s"] == pytest.approx(trial.user_attrs["throughput_samples_per_s"])


def test_tensorboard_gets_one_event_directory_per_trial(tmp_path: Path) -> None:
    runs = tmp_path / "tb"
    study = hpo.optimize(
        SPACE, demo_dataset(n_train=120, n_valid=32, seed=4), storage=f"sqlite:///{tmp_path / 't.db'}", study_name="tb",
        n_trials=2, device="cpu", track=[("tensorboard", runs)], artifact_store=str(tmp_path / "a"),
    )
    for trial in study.get_trials():
        directory = Path(trial.user_attrs["tensorboard_run"])
        assert directory == runs / "tb" / f"trial-{trial.number}"
        events = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        accuracy = events.Scalars("eval/accuracy")
        assert [e.step for e in accuracy] == [2, 4] and accuracy[-1].value == pytest.approx(trial.value)
        assert events.Scalars("train/loss") and [e.step for e in events.Scalars("eval/train_loss")] == [2, 4]
        assert events.Scalars("objective/accuracy")[-1].value == pytest.approx(trial.value)  # the HParams column, by name
        texts = {tag: events.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in ("state/text_summary", "tags/text_summary")}
        assert texts["state/text_summary"] == "COMPLETE" and "hardware.device_type: cpu" in texts["tags/text_summary"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--track", "tensorboard"], "--track tensorboard needs a directory"),
        (["--track", "wandb"], "unknown tracker 'wandb'"),
        # A URL given where the tracker's name goes was quoted with its password.
        (["--track", "http://u:S3cretPW@127.0.0.1:1"], "unknown tracker 'http://u:***@127.0.0.1:1'"),
        # '' logged to ./mlflow.db, '   ' made a directory named by three spaces.
        (["--track", "mlflow", ""], "--track mlflow is given an empty argument; give it a value or leave it out"),
        (["--track", "tensorboard", "   "], "--track tensorboard is given an empty argument"),
        # The store's error quoted what the URL parser took for the host: the rest of the password.
        (["--track", "mlflow", "postgresql://postgres:p@ssS3cretPW@127.0.0.1/x"],
         "--track mlflow: tracking URI 'postgresql://postgres:***@127.0.0.1/x': the password contains a character that URLs reserve"),
        # Two MLflow runs per trial, the trial recording one of them.
        (["--track", "mlflow", "--track", "mlflow"], "--track mlflow is given twice; a trial records one run of each tracker: keep one"),
        # MLflow tried such a store 15 times over 105 s, each a 4-line warning, before the line.
        (["--track", "mlflow", "sqlite:////proc/hpo-mlflow.db"],
         "--track mlflow: tracking store sqlite:////proc/hpo-mlflow.db cannot be used: (sqlite3.OperationalError) unable to open database file"),
    ],
)
def test_bad_track_flags_are_one_line(tmp_path: Path, flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "x.db"
    assert main(["--storage", f"sqlite:///{db}", *flags]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert "S3cretPW" not in err and not db.exists()


class _FailingMlflowServer(http.server.BaseHTTPRequestHandler):
    """An MLflow server that finds the experiment, then answers every other call 503 (a server gone bad mid-study)."""

    def _answer(self) -> None:
        if "experiments/get-by-name" in self.path:
            body = json.dumps({"experiment": {"experiment_id": "1", "name": "s", "lifecycle_stage": "active"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(503)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def test_a_tracking_server_failing_mid_study_costs_a_masked_warning_per_trial_not_minutes(tmp_path: Path, small_data: Path) -> None:
    """Each logged step waited out MLflow's 7 retries with backoff (a 2-second trial held for minutes, a SIGTERM
    ignored meanwhile); its warning and MLflow's "View run" line printed the URI's password."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingMlflowServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    uri = f"http://u:S3cretPW@127.0.0.1:{server.server_port}"
    try:
        args = cli_args(f"sqlite:///{tmp_path / 'm.db'}", space, small_data, "--study-name", "s", "--n-trials", "2", "--track", "mlflow", uri)
        proc = run_cli(args, cwd=tmp_path, timeout=120)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "S3cretPW" not in proc.stdout + proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "tracking to http://u:***@127.0.0.1" in line]
    assert len(warnings) == 2 and all(w.endswith("is tracked no further") and "error code 503" in w for w in warnings), proc.stderr
    assert "<html" not in proc.stderr.lower(), proc.stderr  # one line each: the server's error page is not quoted
    trials = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'm.db'}").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
