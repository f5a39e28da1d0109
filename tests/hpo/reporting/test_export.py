"""The best trial written out for reuse (`python -m hpo best`), on studies of every origin."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from hpo.__main__ import main as hpo_main


def test_best_as_a_space_refuses_a_study_the_service_did_not_make(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plain Optuna study's best trial came out as a "space" `run` refuses: no objective, an invented fp32
    and its own params (x) as training settings, with exit 0."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="plain", storage=url, direction="minimize")
    study.add_trial(optuna.trial.create_trial(params={"x": 0.25}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
                                              value=0.25))
    assert hpo_main(["best", "--storage", url, "--format", "space"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        "python -m hpo.best: error: study 'plain' was not made by python -m hpo run (trial 0 has no stored training config): "
        "--format space cannot write a space that retrains it; use --format yaml to read its params"
    )
    assert hpo_main(["best", "--storage", url]) == 0  # its params, as they are
    assert "x: 0.25" in capsys.readouterr().out


def test_best_as_json_is_json_even_where_a_value_is_not_finite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A study made elsewhere may hold inf (Optuna refuses only NaN): `best --format json` printed `Infinity`, which JSON
    parsers refuse; the export writes null there, and so does best now."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="front", storage=url, directions=["maximize", "minimize"])
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, values=[0.5, float("-inf")], user_attrs={"config": {"seed": 3}}))
    assert hpo_main(["best", "--storage", url, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"not JSON: {name}"))
    assert document["pareto_front"][0]["values"] == {"value_0": 0.5, "value_1": None}
    assert document["pareto_front"][0]["trial_seed"] == 3


def test_best_says_on_stderr_when_its_best_trial_learned_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TREC on MiniLM, 20 steps: the best trial predicted the majority class for every row, and `best` handed its config
    over to reuse without a word. The note goes to stderr: stdout stays YAML or JSON to paste or parse."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = optuna.create_study(study_name="trec", storage=url, direction="maximize")
    rate = optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)
    for value, majority in ((0.11, True), (0.098, False)):
        study.add_trial(optuna.trial.create_trial(params={"learning_rate": 5.477e-5}, distributions={"learning_rate": rate},
                                                  value=value, user_attrs={"majority_class": majority}))
    assert hpo_main(["best", "--storage", url, "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["trial"] == 0
    assert captured.err == (
        "python -m hpo.best: note: trial 0 learned nothing (majority class: one class predicted for every row): no configuration "
        "worth reusing; the learning rate (5.48e-05) is no higher than fine-tuning's (~1e-5..3e-4): the training was likely too "
        "short for it (more max_steps or epochs)\n"
    )
    assert hpo_main(["best", "--storage", url, "--format", "space"]) == 2  # no stored config: refused
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err  # a refusal is its one line: no note beside it
    study.add_trial(optuna.trial.create_trial(params={"learning_rate": 1e-4}, distributions={"learning_rate": rate}, value=0.6))
    assert hpo_main(["best", "--storage", url]) == 0
    assert capsys.readouterr().err == ""  # a best trial that learned: nothing to say
