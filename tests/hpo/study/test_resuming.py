"""A study this service did not make is not taken over: its direction and its trials are not the space's."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from conftest import SMALL_SPACE

import hpo
from trial_executor import demo_dataset

DATA = demo_dataset(n_train=64, n_valid=16)


def _open(url: str, name: str) -> optuna.Study:
    return hpo.open_study(hpo.create_storage(url), name, hpo.parse_search_space(SMALL_SPACE), DATA, seed=0)


def _untouched(url: str, name: str, trials: int) -> None:
    study = optuna.load_study(study_name=name, storage=url)
    assert study.user_attrs == {} and len(study.trials) == trials


def test_a_plain_optuna_study_of_another_direction_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    # `optuna create-study` minimises by default: accuracy was then minimised, the sampler steering to the worst trials.
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="mini", storage=url)
    with pytest.raises(hpo.UserError, match=r"^study 'mini' minimizes one objective, and this space maximizes one objective: "
                                            r"accuracy; pick a new --study-name$"):
        _open(url, "mini")
    _untouched(url, "mini", 0)


def test_a_plain_optuna_study_with_trials_is_refused_for_a_run_and_a_verdict(tmp_path: Path) -> None:
    # Its trials counted toward the budget and one of them was reported as the best (x: 0.89 as "accuracy").
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="plain", storage=url, direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    study.set_user_attr("search_space", "x in [0, 1]")  # a script's own note under the attribute's name
    refused = r"^study 'plain' holds 2 trials this service did not make \(no search space is stored on it\)"
    with pytest.raises(hpo.UserError, match=refused):
        _open(url, "plain")
    with pytest.raises(hpo.UserError, match=refused):  # it wrote its attributes, then failed three trials with tracebacks
        hpo.verdict("plain", storage=url, device="cpu", artifact_store=None)
    left = optuna.load_study(study_name="plain", storage=url)
    assert len(left.trials) == 2 and left.user_attrs == {"search_space": "x in [0, 1]"}


def test_an_empty_study_made_beforehand_in_the_same_direction_is_taken(tmp_path: Path) -> None:
    """`optuna create-study --direction maximize` first, or a run stopped between making the study and storing its space."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="made", storage=url, direction="maximize")
    assert "search_space" in _open(url, "made").user_attrs


def test_a_run_without_a_space_resumes_a_study_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It took the demo space and was refused as "a different search space": a study made from a YAML file could not be
    extended on a machine without that file."""
    import yaml

    from hpo.cli._run import main as run_main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "params": {"learning_rate": SMALL_SPACE["params"]["learning_rate"]},
                                     "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}))
    monkeypatch.chdir(tmp_path)
    common = ["--storage", f"sqlite:///{tmp_path / 's.db'}", "--device", "cpu", "--quiet"]
    assert run_main([*common, "--space", str(space), "--n-trials", "1"]) == 0
    capsys.readouterr()
    space.unlink()  # another machine: no YAML
    assert run_main([*common, "--n-trials", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Search space: the one study 'precision-demo' was made with (no --space given)\n"), out
    assert len(hpo.load(storage=f"sqlite:///{tmp_path / 's.db'}").trials) == 2
    # --model applies to the study's own space: another model is refused as such. It took the demo space for the
    # model, and the refusal named that space's first difference (its pruner), not the model. The space names no
    # model: it trains the executor's default, which --model tiny-bert names.
    assert run_main([*common, "--model", "tiny-distilbert", "--n-trials", "3"]) == 2
    assert "(fixed.model was 'tiny-bert', now 'tiny-distilbert')" in capsys.readouterr().err
    assert run_main([*common, "--model", "tiny-bert", "--n-trials", "3"]) == 0
    assert len(hpo.load(storage=f"sqlite:///{tmp_path / 's.db'}").trials) == 3


def test_a_study_on_a_local_model_directory_resumes_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`--model ./my-bert` was stored as typed: the study resumed from another directory could not find the model, and
    `--model my-bert`, the same directory, was refused as another search space."""
    import yaml

    from hpo._attrs import SEARCH_SPACE_ATTR
    from hpo.cli._run import main as run_main
    from trial_executor.model._loading import load_model

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    model, tokenizer = load_model("tiny-bert", DATA.label_names, DATA.train_texts)
    model.save_pretrained(work / "my-bert")
    tokenizer.save_pretrained(work / "my-bert")
    space = work / "space.yaml"
    space.write_text(yaml.safe_dump({"params": {"learning_rate": SMALL_SPACE["params"]["learning_rate"]},
                                     "fixed": {"max_steps": 2, "eval_every": 0}}))
    url = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--storage", url, "--device", "cpu", "--quiet"]

    monkeypatch.chdir(work)
    assert run_main([*common, "--space", "space.yaml", "--model", "./my-bert", "--n-trials", "1"]) == 0
    stored = hpo.load(storage=url).user_attrs[SEARCH_SPACE_ATTR]
    assert stored["fixed"]["model"] == str(work / "my-bert")
    assert run_main([*common, "--space", "space.yaml", "--model", "my-bert", "--n-trials", "2"]) == 0  # one directory
    monkeypatch.chdir(elsewhere)
    assert run_main([*common, "--n-trials", "3"]) == 0  # on the study's own space, the model found from here
    trials = hpo.load(storage=url).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 and {t.user_attrs["config"]["model"] for t in trials} == {str(work / "my-bert")}

    # A study an earlier version made stored the directory as typed: it resumes from its directory, and stores it absolute.
    study = hpo.load(storage=url)
    study.set_user_attr(SEARCH_SPACE_ATTR, {**stored, "fixed": {**stored["fixed"], "model": "./my-bert"}})
    monkeypatch.chdir(work)
    assert run_main([*common, "--space", "space.yaml", "--model", "./my-bert", "--n-trials", "4"]) == 0
    assert hpo.load(storage=url).user_attrs[SEARCH_SPACE_ATTR] == stored


def test_a_verdict_given_no_data_on_a_study_made_on_data_given_in_python_says_to_pass_it(tmp_path: Path) -> None:
    """Such a study names no file to read again: the demo reviews were tried in its place, and refused as "different data"
    with no word on why they were read or what to pass."""
    from hpo._api import open_existing, open_run
    from hpo.study._options import RunOptions

    options = RunOptions(storage=f"sqlite:///{tmp_path / 'py.db'}", study_name="py", device="cpu", artifact_store=None)
    made = open_run(SMALL_SPACE, DATA, options, announce=None).prepared
    with pytest.raises(hpo.UserError, match=rf"^study 'py' was created on different data \(fingerprint {made.data.fingerprint}, now \w+\): "
                                            r"it names no data file to read again \(it was made on data given in Python, or before data "
                                            r"files were stored\), so pass that same data; rerun with its original data"):
        open_existing(None, None, options)
    assert open_existing(None, DATA, options).data.fingerprint == made.data.fingerprint
