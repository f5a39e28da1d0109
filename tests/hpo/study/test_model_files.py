"""A study that began on a local model directory resumes only on the same files: other weights saved under its name are refused."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import torch
from transformers import AutoModelForSequenceClassification

import hpo
from hpo._attrs import MODEL_FILES_ATTR
from trial_executor import demo_dataset
from trial_executor.model import model_files
from trial_executor.model._loading import load_model

DATA = demo_dataset(n_train=64, n_valid=16)


@pytest.fixture
def pretrained_dir(tmp_path: Path) -> Path:
    model, tokenizer = load_model("tiny-bert", DATA.label_names, DATA.train_texts)
    path = tmp_path / "my-bert"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "README.md").write_text("notes no trial reads")
    return path


def _open(url: str, model: Path) -> optuna.Study:
    space = hpo.parse_search_space({"params": {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True}},
                                    "fixed": {"model": str(model), "max_steps": 2}})
    return hpo.open_study(hpo.create_storage(url), "m", space, DATA, seed=0)


def test_a_study_refuses_to_resume_on_other_weights_saved_under_its_model_name(tmp_path: Path, pretrained_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    began = _open(url, pretrained_dir).user_attrs[MODEL_FILES_ATTR]
    assert set(began) == {str(pretrained_dir)}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(began[str(pretrained_dir)])
    assert "README.md" not in began[str(pretrained_dir)]  # from_pretrained reads no README: editing it changes nothing
    (pretrained_dir / "README.md").write_text("edited")
    _open(url, pretrained_dir)  # the same files: the study resumes

    model = AutoModelForSequenceClassification.from_pretrained(pretrained_dir)
    with torch.no_grad():
        model.classifier.weight.add_(1.0)
    model.save_pretrained(pretrained_dir)  # fine-tuned again, saved under the same name
    with pytest.raises(hpo.UserError, match=rf"^study 'm' began on other files in model '{pretrained_dir}' \(model.safetensors has "
                                            r"changed since\); restore the model the study began with, or pick a new --study-name"):
        _open(url, pretrained_dir)
    assert hpo.load("m", storage=url).user_attrs[MODEL_FILES_ATTR] == began  # the record of what it began on stays


def test_a_study_made_before_models_were_hashed_takes_the_files_it_resumes_on(tmp_path: Path, pretrained_dir: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _open(url, pretrained_dir)
    study.set_user_attr(MODEL_FILES_ATTR, None)  # as a study made before has nothing stored
    assert _open(url, pretrained_dir).user_attrs[MODEL_FILES_ATTR] == {str(pretrained_dir): model_files(str(pretrained_dir))}


def test_presets_and_hub_ids_have_no_files_to_hash() -> None:
    assert model_files("tiny-bert") == {} and model_files("org/some-model") == {}


@pytest.mark.parametrize(("now", "said"), [
    ({"config.json": "a", "model.safetensors": "b"}, None),
    ({"config.json": "a"}, "model.safetensors is gone"),
    ({"config.json": "a", "model.safetensors": "b", "added_tokens.json": "c"}, "added_tokens.json is new"),
    ({"config.json": "x", "model.safetensors": "y"}, "config.json has changed"),  # the first that differs, by name
])
def test_which_file_differs_is_named(now: dict[str, str], said: str | None) -> None:
    from hpo.study._model_files import check_same_model_files

    stored = {"m": {"config.json": "a", "model.safetensors": "b"}}
    if said is None:
        check_same_model_files("s", stored, {"m": now})
        return
    with pytest.raises(hpo.UserError, match=rf"model 'm' \({said} since\)"):
        check_same_model_files("s", stored, {"m": now})
