"""Progress while a study runs: the executor's updates, bars on a terminal, plain lines elsewhere."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import pty
import struct
import termios
import threading
from pathlib import Path

import optuna
import pytest
import yaml

from hpo.cli._run import main
from hpo.reporting._progress import StudyProgress, best_so_far
from hpo.study import counts_toward_budget
from trial_executor import StepProgress, TrainConfig, demo_dataset, run_trial

SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}},
    "fixed": {"model": "tiny-bert", "fp_precision": "fp32", "epochs": 1, "max_length": 32, "max_steps": 12, "eval_every": 6},
}


def test_executor_sends_step_updates_up_to_the_last_step() -> None:
    updates: list[StepProgress] = []
    config = TrainConfig(model="tiny-bert", epochs=1, batch_size=16, max_steps=9, eval_every=3, device="cpu")
    result = run_trial(config, demo_dataset(n_train=400, n_valid=64, seed=1), progress=updates.append)
    steps = [u.step for u in updates]
    # The first and the last step always; in between at most twice a second.
    assert steps[0] == 1 and steps[-1] == result.steps == 9 and steps == sorted(set(steps))
    assert all(u.total_steps == 9 and u.samples_per_s > 0 and 0 < u.train_loss < 5 for u in updates)
    # The running loss covers the steps since the last evaluation, as the recorded train_loss does.
    assert abs(updates[-1].train_loss - result.history[-1][1]["train_loss"]) < 1e-6


def _finished_study(values: list[float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for value in values:
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=value))
    return study


def test_plain_lines_name_the_study_position_and_show_steps_unless_quiet() -> None:
    study = _finished_study([0.5, 0.75])
    best = best_so_far(study, ["accuracy"])
    assert best == "best accuracy=0.75 (trial 1)"
    assert best_so_far(optuna.create_study(), ["accuracy"]) == ""
    for quiet in (False, True):
        out = io.StringIO()
        progress = StudyProgress(5, 2, bars=False, quiet=quiet, stream=out, step_line_every=0.0)
        with progress.showing():
            for step in (1, 2):
                progress.trial_step(2, StepProgress(step, 4, 0.6931, 123.4))
            progress.trial_finished("trial   2  COMPLETE  accuracy=0.75", 3, best)
        lines = out.getvalue().splitlines()
        step_lines = ["trial   2  step 2/4  loss 0.6931, 123 samples/s"]  # the first update only starts the clock
        assert lines == [*([] if quiet else step_lines), "trial   2  COMPLETE  accuracy=0.75  [3/5 finished; best accuracy=0.75 (trial 1)]"]
        assert "\r" not in out.getvalue()


def _run_in_terminal(args: list[str]) -> tuple[int, str]:
    """``python -m hpo.run ARGS`` in this process (torch already loaded), its stdout a 120x40 pseudo-terminal; its exit code and output."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # a full terminal would block the run's writes
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the run's side is closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with open(terminal, "w", encoding="utf-8") as screen, contextlib.redirect_stdout(screen):
            code = main(args)
        reader.join(timeout=60)
    finally:
        os.close(controller)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_bars_on_a_terminal_plain_lines_with_quiet_or_a_pipe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    common = ["--space", str(space), "--device", "cpu", "--storage", f"sqlite:///{tmp_path / 'studies.db'}", "--cache-dir", str(tmp_path / "cache")]

    code, out = _run_in_terminal([*common, "--n-trials", "2"])
    assert code == 0, out
    screen = out.replace("\r", "\n")
    # The study bar: finished of the budget, then the best so far; the trial bar: steps, loss, samples/s.
    assert "study 0/2 |" in screen and "study 2/2 |" in screen and ", best accuracy=" in screen
    assert "trial 1 12/12 steps |" in screen and " samples/s" in screen and ", loss " in screen
    # Each finished trial's line is printed above the bars, whole.
    assert "\ntrial   0  COMPLETE   accuracy=" in screen and "\ntrial   1  COMPLETE   accuracy=" in screen

    code, out = _run_in_terminal([*common, "--n-trials", "3", "--quiet"])
    assert code == 0, out
    assert "|" not in out and "steps" not in out  # no bar drawn
    assert "trial   2  COMPLETE" in out and "[3/3 finished; best accuracy=" in out

    # Not a terminal (pytest captures the output, as a pipe would): plain lines.
    assert main([*common, "--n-trials", "4"]) == 0
    piped = capsys.readouterr().out
    assert "\r" not in piped and "steps |" not in piped
    assert "[4/4 finished; best accuracy=" in piped

    # --workers 2: this process draws the study bar and prints each worker's lines above it. The run
    # shares out the cores itself, not told how by the OMP_NUM_THREADS this test process sets.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    code, out = _run_in_terminal([*common, "--n-trials", "7", "--workers", "2"])
    assert code == 0, out
    screen = out.replace("\r", "\n")
    assert "study 4/7 |" in screen and "study 7/7 |" in screen
    assert "\n[worker 0] trial " in screen and "\n[worker 1] trial " in screen
    # The two workers share the cores instead of each starting a thread per core.
    study = optuna.load_study(study_name="precision-demo", storage=f"sqlite:///{tmp_path / 'studies.db'}")
    # Trials that trained: not a worker's instant skip when the other held the last slot of the budget.
    by_workers = [t for t in study.trials if t.number >= 4 and counts_toward_budget(t)]
    assert by_workers and {t.user_attrs["hardware"]["cpu_threads"] for t in by_workers} == {max(1, len(os.sched_getaffinity(0)) // 2)}
