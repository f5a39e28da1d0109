"""A local model directory whose trained head is sized for other labels than the data's: refused, never replaced in silence."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from transformers import AutoModel

import hpo
from trial_executor import TextClassificationData, demo_dataset
from trial_executor.model._loading import load_model


def _three_classes() -> TextClassificationData:
    data = demo_dataset(n_train=60, n_valid=15)
    names = ["neg", "neu", "pos"]
    return TextClassificationData(
        train_texts=data.train_texts, train_labels=[i % 3 for i in range(len(data.train_texts))],
        valid_texts=data.valid_texts, valid_labels=[i % 3 for i in range(len(data.valid_texts))], label_names=names,
    )


def test_a_head_trained_for_another_number_of_labels_is_refused_before_the_study_is_written(tmp_path: Path) -> None:
    # from_pretrained(ignore_mismatched_sizes=True) replaced the trained 2-label head with a random 3-label one, without a word.
    two = demo_dataset(n_train=60, n_valid=15)
    model, tokenizer = load_model("tiny-bert", two.label_names, two.train_texts)
    saved = tmp_path / "two-label-bert"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    space = {"objective": {"metric": "accuracy"}, "params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}},
             "fixed": {"model": str(saved), "max_steps": 2, "eval_every": 0, "max_length": 32}}
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with pytest.raises(hpo.UserError) as refused:
        hpo.optimize(space, _three_classes(), storage=url, study_name="h", n_trials=1, device="cpu")
    line = str(refused.value)
    assert f"model directory {saved} has a head trained for 2 labels" in line and "the data has 3" in line and "\n" not in line, line
    assert "AutoModel.from_pretrained" in line
    assert optuna.get_all_study_names(url) == []
    # The fix the line gives: the body saved alone trains with a new head.
    body = tmp_path / "body"
    AutoModel.from_pretrained(saved).save_pretrained(body)
    tokenizer.save_pretrained(body)
    study = hpo.optimize({**space, "fixed": {**space["fixed"], "model": str(body)}}, _three_classes(), storage=url,
                         study_name="h", n_trials=1, device="cpu")
    assert study.trials[0].state == optuna.trial.TrialState.COMPLETE
