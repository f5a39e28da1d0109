"""The Python API, driven as a notebook would: hpo.optimize and hpo.load, through real Optuna, torch and SQLite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from _tiny_study import TINY
from conftest import ROOT, cli_args, run_cli
from optuna.trial import TrialState

import hpo
from hpo.cli._run import main as run_main
from trial_executor import demo_dataset


# A few optimizer steps per trial: seconds, not minutes.
def test_optimize_runs_a_study_from_a_dict_and_in_memory_data_then_load_reads_it(tmp_path: Path) -> None:
    os.chdir(tmp_path)  # the artifact store defaults to ./hpo-artifacts, as in a notebook's directory
    storage = f"sqlite:///{tmp_path / 'nb.db'}"
    data = demo_dataset(n_train=200, n_valid=64, seed=1)
    seen: list[int] = []
    study = hpo.optimize(
        TINY, data, storage=storage, study_name="nb", n_trials=2, device="cpu", seed=5,
        on_trial_finished=lambda trial, finished: seen.append(finished),
    )
    assert isinstance(study, optuna.Study)
    assert seen == [1, 2]
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 2 and all(0 <= t.value <= 1 for t in complete)
    # The same call again extends the study to its new budget (here with no artifact store: no checkpoints).
    again = hpo.optimize(TINY, data, storage=storage, study_name="nb", n_trials=3, device="cpu", seed=5, artifact_store=None)
    assert len(again.get_trials(states=(TrialState.COMPLETE,))) == 3
    loaded = hpo.load("nb", storage=storage)
    assert loaded.best_trial.number == again.best_trial.number
    assert (tmp_path / "hpo-artifacts").is_dir()
    # The same call once more, in a fresh process: the budget is met, nothing trains, and the training code
    # (transformers' modeling, seconds at start-up) is never imported.
    code = (
        "import sys, hpo\nfrom trial_executor import demo_dataset\n"
        f"hpo.optimize({TINY!r}, demo_dataset(n_train=200, n_valid=64, seed=1), storage={storage!r}, study_name='nb', n_trials=3, "
        "device='cpu', seed=5, artifact_store=None)\n"
        "print(sorted(m for m in ('trial_executor.train', 'transformers.modeling_utils') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    assert len(hpo.load("nb", storage=storage).trials) == 3


def test_optimize_takes_a_yaml_path_a_data_file_model_and_fix(tmp_path: Path, small_data: Path) -> None:
    space = tmp_path / "tiny.yaml"
    space.write_text(yaml.safe_dump(TINY))
    study = hpo.optimize(
        space, small_data, text_column="sentence", storage=f"sqlite:///{tmp_path / 'p.db'}", study_name="p",
        n_trials=1, device="cpu", model="tiny-distilbert", fix=["fp_precision=bf16"], artifact_store=str(tmp_path / "art"),
    )
    (trial,) = study.get_trials()
    assert trial.user_attrs["config"]["model"] == "tiny-distilbert" and "model" not in trial.params
    assert trial.params["fp_precision"] == "bf16"
    assert study.user_attrs["label_names"] == ["negative", "positive"]


def test_bad_input_raises_one_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "bad.db"
    with pytest.raises(hpo.UserError, match=r"params\.learning_rat: unknown parameter"):
        hpo.optimize({**TINY, "params": {"learning_rat": TINY["params"]["learning_rate"]}}, storage=f"sqlite:///{db}")
    with pytest.raises(hpo.UserError, match="no-such-model"):
        hpo.optimize(TINY, storage=f"sqlite:///{db}", model="no-such-model")
    with pytest.raises(hpo.UserError, match="n_trials must be at least 1, got 0"):  # as --n-trials 0 is refused
        hpo.optimize(TINY, storage=f"sqlite:///{db}", n_trials=0)
    with pytest.raises(hpo.UserError, match="in-memory SQLite database, lost when the run ends"):
        hpo.optimize(TINY, storage="sqlite:///:memory:")
    assert not db.exists()
    with pytest.raises(hpo.UserError, match="no SQLite database"):
        hpo.load("nb", storage=f"sqlite:///{db}")
    # Wrong types from Python: an AttributeError from deep in the storage factory, a "data file 5 not found".
    with pytest.raises(hpo.UserError, match=r"^storage must be a database URL \(a str\) or None, got 5; pass e\.g\. 'sqlite:///hpo-studies\.db'$"):
        hpo.load("nb", storage=5)  # type: ignore[arg-type]
    # An empty URL is no URL: it read $HPO_STORAGE or wrote ./hpo-studies.db, another database than asked.
    with pytest.raises(hpo.UserError, match=r"^storage URL is empty; give one such as sqlite:///hpo-studies\.db, or None for \$HPO_STORAGE"):
        hpo.optimize(TINY, storage=" ")
    with pytest.raises(hpo.UserError, match=r"^data must be a file path, a TextClassificationData or None \(the demo reviews\), got a dict; pass"):
        hpo.optimize(TINY, {"train_texts": ["a"]}, storage=f"sqlite:///{db}")  # type: ignore[arg-type]
    # A hook that cannot be called: a TypeError once the first trial had trained.
    with pytest.raises(hpo.UserError, match=r"^on_trial_finished must be a function or None, got 5; pass a function, or leave it out$"):
        hpo.optimize(TINY, storage=f"sqlite:///{db}", on_trial_finished=5)  # type: ignore[arg-type]
    # workers without Ray ran one process, without a word.
    with pytest.raises(hpo.UserError, match=r"^workers=2 needs ray \(ray=True, or a cluster's address\); for worker processes on this machine, "
                                            r"run python -m hpo run --workers 2$"):
        hpo.optimize(TINY, storage=f"sqlite:///{db}", workers=2)
    # Wrong types for the verdict: a TypeError from deep inside, or a string read as its letters (--precisions: unknown b, f, 1, 6).
    for arguments, said in (({"seeds": "3"}, "seeds must be a whole number, got '3'"), ({"trial": "1"}, "trial must be a whole number, got '1'"),
                            ({"precisions": "bf16"}, "precisions must be a list of precision names, got 'bf16'")):
        with pytest.raises(hpo.UserError, match=f"^{re.escape(said)}; pass e.g."):
            hpo.verdict("nb", storage=f"sqlite:///{db}", **arguments)  # type: ignore[arg-type]
    # An unknown keyword: "Extra inputs are not permitted (got 1); pass a value of that type" named no fix.
    with pytest.raises(hpo.UserError, match=r"^bogus is no option \(got 1\); check its spelling or drop it$"):
        hpo.verdict("nb", storage=f"sqlite:///{db}", bogus=1)
    assert not db.exists()


def test_a_search_space_built_in_python_is_checked_as_a_mapping_is(tmp_path: Path) -> None:
    """SearchSpace(...) is checked for its types only: an unknown constraint made a study whose trials failed with a
    KeyError traceback each, a pruner on several objectives an Optuna error in the first trial."""
    db = tmp_path / "built.db"
    two = [{"name": "accuracy"}, {"name": "throughput_samples_per_s"}]
    for changes, said in (({"objective": None, "objectives": two, "constraints": {"min_acc": 0.5}},
                           "search space: constraints.min_acc: unknown constraint (did you mean 'min_accuracy'?)"),
                          ({"objective": None, "objectives": two, "pruner": {"type": "median"}},
                           "search space: pruner: 'median' cannot prune a study with several objectives; use pruner: {type: none}")):
        space = hpo.SearchSpace.model_validate({**TINY, **changes})
        with pytest.raises(hpo.SearchSpaceError, match=f"^{re.escape(said)}$"):
            hpo.optimize(space, storage=f"sqlite:///{db}", device="cpu")
    assert not db.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        # Each ran before: "2" and True as 2 and 1 trials, a fix read one character at a time ("--fix 'l'"),
        # a negative timeout making an empty study, a TypeError for a space that is no space.
        ({"n_trials": "2"}, "n_trials: Input should be a valid integer (got '2'); pass a value of that type"),
        ({"n_trials": True}, "n_trials: Input should be a valid integer (got True)"),
        ({"fix": "learning_rate=0.002"}, "fix must be a list, e.g. ['batch_size=16'] (got 'learning_rate=0.002'); pass one"),
        ({"timeout": -1}, "timeout must be a positive number of seconds, got -1"),
        ({"timeout": float("nan")}, "timeout: Input should be a finite number (got nan)"),
        ({"max_retry": -1}, "max_retry must be at least 0, got -1"),
        ({"workers": 0}, "workers must be at least 1, got 0"),
        ({"gpus_per_trial": -1.0}, "gpus_per_trial must be at least 0, got -1.0"),
        ({"track": [5]}, "track entries are a tracker or a tracker and its argument, e.g. ['mlflow', ('tensorboard', 'runs')] (got 5)"),
        ({"track": [None]}, "track entries are a tracker or a tracker and its argument, e.g. ['mlflow', ('tensorboard', 'runs')] (got None)"),
        ({"track": [("tensorboard", None)]}, "(got ('tensorboard', None)); pass entries of that form"),
        ({"space": [1, 2]}, "space must be a YAML file's path, a mapping or an hpo.SearchSpace, got [1, 2]; pass one of them"),
        # Each ignored before, without a word: no Ray to place GPUs, no store to keep checkpoints in.
        ({"gpus_per_trial": 1.0}, "gpus_per_trial=1 places trials through Ray: pass ray=True (or a cluster's address), or drop gpus_per_trial"),
        ({"keep_checkpoints": True, "artifact_store": None}, "keep_checkpoints=True keeps checkpoints in the artifact store, and "
                                                             "artifact_store=None writes none; pass an artifact_store directory"),
    ],
)
def test_python_arguments_the_command_line_would_refuse_are_refused(tmp_path: Path, arguments: dict[str, Any], message: str) -> None:
    db = tmp_path / "bad.db"
    with pytest.raises(hpo.UserError) as refused:
        hpo.optimize(**{"space": TINY, "storage": f"sqlite:///{db}", **arguments})
    assert message in str(refused.value) and not db.exists()


def test_cli_model_flag_overrides_the_space_and_keeps_transformers_quiet(tmp_path: Path, small_data: Path) -> None:
    # Real pretrained weights: transformers' "Loading weights" bar must not write over the study's lines.
    space = tmp_path / "tiny.yaml"
    space.write_text(yaml.safe_dump({**TINY, "fixed": {**TINY["fixed"], "max_steps": 1, "eval_every": 0}}))
    url = f"sqlite:///{tmp_path / 'm.db'}"
    proc = run_cli([*cli_args(url, space, small_data, "--n-trials", "1", "--model", "minilm-l6", "--fix", "fp_precision=bf16")], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Loading weights" not in proc.stderr + proc.stdout
    assert "LOAD REPORT" not in proc.stderr + proc.stdout
    (trial,) = optuna.load_study(study_name="precision-demo", storage=url).get_trials()
    assert trial.user_attrs["config"]["model"] == "minilm-l6"
    assert trial.state == TrialState.COMPLETE


def test_cli_unknown_model_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--model", "no-such-model", "--storage", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no-such-model" in err, err
    assert not (tmp_path / "x.db").exists()


def test_load_without_a_name_reads_the_storage_s_only_study_and_lists_several(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    optuna.create_study(study_name="first", storage=url)
    assert hpo.load(None, url).study_name == "first"
    optuna.create_study(study_name="second", storage=url)
    with pytest.raises(hpo.UserError, match=r"first.*second"):
        hpo.load(None, url)
