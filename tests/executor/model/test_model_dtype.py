"""Checkpoints saved in half precision train on float32 master weights; a model's limits are checked up front."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch
import yaml
from conftest import SMALL_SPACE

from hpo.space._space_loading import parse_search_space
from hpo.study._objective import make_objective
from trial_executor import ModelLimitError, TrainConfig, demo_dataset, run_trial
from trial_executor.model import checkpoint_dtype, load_model


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    return demo_dataset(n_train=96, n_valid=32)


def _saved(path: Path, data, dtype: torch.dtype) -> tuple[Path, torch.Tensor]:  # type: ignore[no-untyped-def]
    """A tiny model saved in ``dtype``, and its word embeddings as saved."""
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.to(dtype).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model.bert.embeddings.word_embeddings.weight.detach().clone()


@pytest.mark.parametrize(("dtype", "name"), [(torch.float16, "float16"), (torch.bfloat16, "bfloat16")])
def test_half_precision_checkpoints_load_as_float32_and_the_trial_records_their_dtype(
    tmp_path: Path, data, dtype: torch.dtype, name: str  # type: ignore[no-untyped-def]
) -> None:
    saved, embeddings = _saved(tmp_path / name, data, dtype)
    assert embeddings.dtype == dtype
    assert checkpoint_dtype(str(saved)) == name
    model, _ = load_model(str(saved), data.label_names, data.train_texts)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # Upcast, not re-initialised: the float32 weights are the checkpoint's values.
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, embeddings.float())

    space = parse_search_space({
        **SMALL_SPACE, "params": {"learning_rate": SMALL_SPACE["params"]["learning_rate"]},
        "fixed": {**SMALL_SPACE["fixed"], "model": str(saved), "fp_precision": "fp32", "max_steps": 2},
    })
    study = optuna.create_study(direction="maximize")
    study.optimize(make_objective(space, data, base_seed=0, device="cpu"), n_trials=1)
    trial = study.trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs
    assert trial.user_attrs["checkpoint_dtype"] == name
    assert trial.user_attrs["precision_effective"] == "fp32"


def test_float32_checkpoints_and_presets_record_float32(tmp_path: Path, data) -> None:  # type: ignore[no-untyped-def]
    assert checkpoint_dtype(str(_saved(tmp_path / "fp32", data, torch.float32)[0])) == "float32"
    result = run_trial(TrainConfig(model="tiny-bert", max_steps=1, eval_every=0, device="cpu"), data)
    assert result.checkpoint_dtype == "float32"


def test_max_length_beyond_the_models_positions_is_refused_before_training(data) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelLimitError, match=r"max_length 1024 is more than model 'tiny-bert' takes \(max_position_embeddings 512\); set max_length to 512 or less"):
        run_trial(TrainConfig(model="tiny-bert", max_length=1024, max_steps=1, device="cpu"), data)


def test_max_length_beyond_the_models_positions_is_one_line_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hpo.cli._run import main

    space = tmp_path / "space.yaml"
    params = {**SMALL_SPACE["params"], "max_length": {"type": "categorical", "choices": [64, 2048]}}
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "params": params, "fixed": {"epochs": 1}}))
    db = tmp_path / "s.db"
    assert main(["--space", str(space), "--storage", f"sqlite:///{db}", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "max_length 2048 is more than model 'tiny-bert' takes (max_position_embeddings 512)" in err
    assert len(err.strip().splitlines()) == 1 and not db.exists()
