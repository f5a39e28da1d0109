"""The CLI in subprocesses: the best trial as a space that retrains it, and `report | head` without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from _tiny_study import TINY
from conftest import ROOT, cli_args
from optuna.trial import TrialState

from hpo.cli._parsing import BROKEN_PIPE_EXIT
from hpo.cli._run import main as run_main

# One test process for this module: its module-scoped fixture (real runs) is then made once, not once per process.
pytestmark = pytest.mark.xdist_group("test_roundtrip")


def _hpo(*args: str, cwd: Path, stdout: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "hpo", *args], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=stdout, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory: pytest.TempPathFactory, small_data: Path) -> tuple[Path, str]:
    work = tmp_path_factory.mktemp("roundtrip")
    space = work / "tiny.yaml"
    space.write_text(yaml.safe_dump(TINY))
    url = f"sqlite:///{work / 'r.db'}"
    assert run_main(cli_args(url, space, small_data, "--study-name", "first", "--n-trials", "2", "--seed", "11")) == 0
    return work, url


def test_best_as_a_space_is_accepted_by_run_and_retrains_the_same_trial(finished_study: tuple[Path, str], small_data: Path) -> None:
    work, url = finished_study
    best = _hpo("best", "--study-name", "first", "--storage", url, "--format", "space", cwd=work)
    out, err = best.communicate(timeout=120)
    assert best.returncode == 0, err
    (work / "best.yaml").write_text(out)
    first = optuna.load_study(study_name="first", storage=url).best_trial
    seed = first.user_attrs["config"]["seed"]
    assert f"--seed {seed}" in out  # the header says how to retrain it exactly
    assert run_main(cli_args(url, work / "best.yaml", small_data, "--study-name", "again", "--n-trials", "1", "--seed", str(seed))) == 0
    (retrained,) = optuna.load_study(study_name="again", storage=url).get_trials(states=(TrialState.COMPLETE,))
    assert retrained.user_attrs["config"] == first.user_attrs["config"]
    assert retrained.value == first.value and retrained.user_attrs["metrics"] == first.user_attrs["metrics"]


def test_report_into_a_closed_pipe_ends_quietly(finished_study: tuple[Path, str]) -> None:
    work, url = finished_study
    # `| head` that has already exited: the read end is closed before the report writes a line.
    proc = _hpo("report", "--study-name", "first", "--storage", url, "--out", str(work / "rep"), cwd=work)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert proc.returncode == BROKEN_PIPE_EXIT
    assert (work / "rep" / "report.md").is_file()
    # Each command's own module (`python -m hpo.status` is `python -m hpo status`) too: it printed a traceback, exit 1.
    status = subprocess.Popen([sys.executable, "-m", "hpo.status", "--storage", url], cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert status.stdout is not None
    status.stdout.close()
    _, err = status.communicate(timeout=120)
    assert "Traceback" not in err and status.returncode == BROKEN_PIPE_EXIT, err
