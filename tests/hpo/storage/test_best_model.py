"""The best trial's model kept in the artifact store and written out by `best --save-model`, LoRA merged."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import optuna
import pytest
import torch
import yaml
from _tiny_study import TINY
from conftest import ROOT
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import hpo
from hpo.__main__ import main as hpo_main
from hpo.storage._best_model import BEST_MODEL_ATTR, export_best_model
from trial_executor import TextClassificationData, demo_dataset

FP32 = {**TINY, "params": {k: v for k, v in TINY["params"].items() if k != "fp_precision"}, "fixed": {**TINY["fixed"], "max_steps": 6}}


def _accuracy(directory: Path, data: TextClassificationData) -> float:
    """The saved model's validation accuracy, through plain transformers."""
    model = AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(list(data.valid_texts), truncation=True, max_length=32, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    return float((predicted == torch.tensor(list(data.valid_labels))).float().mean())


def _tars(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file() and tarfile.is_tarfile(p)]


def test_the_best_model_replaces_the_previous_and_best_save_model_writes_it(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = demo_dataset(n_train=200, n_valid=64, seed=2)
    url, store = f"sqlite:///{tmp_path / 'b.db'}", tmp_path / "store"
    study = hpo.optimize(FP32, data, storage=url, study_name="b", n_trials=3, device="cpu", artifact_store=str(store))
    kept = study.user_attrs[BEST_MODEL_ATTR]
    assert kept["trial"] == study.best_trial.number and kept["value"] == study.best_value
    assert len(_tars(store)) == 1  # earlier bests' files were removed
    out = tmp_path / "best-model"
    proc = subprocess.run(
        [sys.executable, "-m", "hpo", "best", "--study-name", "b", "--storage", url, "--artifact-store", str(store),
         "--save-model", str(out)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"trial {kept['trial']}" in proc.stdout
    config = yaml.safe_load((out / "hpo-best.yaml").read_text())
    assert config["trial"] == kept["trial"] and config["fixed"]["max_steps"] == 6
    assert _accuracy(out, data) == pytest.approx(study.best_trial.user_attrs["metrics"]["accuracy"])
    # A second export never writes into what is there.
    again = subprocess.run(
        [sys.executable, "-m", "hpo", "best", "--study-name", "b", "--storage", url, "--artifact-store", str(store),
         "--save-model", str(out)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=120,
    )
    assert again.returncode == 2 and "not empty" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    # Each mistake is one line naming what to pass (in process: no process boundary under test here).
    for flags, line in (
        (["--artifact-store", str(tmp_path / "nowhere")], f"no artifact store at {tmp_path / 'nowhere'} (--artifact-store); pass"),
        (["--artifact-store", str(store), "--format", "space"], "--format space prints the best trial; --save-model writes its model"),
    ):
        assert hpo_main(["best", "--study-name", "b", "--storage", url, "--save-model", str(tmp_path / "new"), *flags]) == 2
        assert line in capfd.readouterr().err and not (tmp_path / "new").exists()
    assert hpo_main(["best", "--study-name", "b", "--storage", url, "--artifact-store", str(store), "--save-model", str(tmp_path / "b.db")]) == 2
    assert f"--save-model {tmp_path / 'b.db'} is a file, not a directory" in capfd.readouterr().err
    # Where no directory can be made (under a file, in /proc): one line, not a traceback.
    for where, why in ((tmp_path / "b.db" / "sub", "Not a directory"), (Path("/proc/hpo-best-model"), "No such file or directory")):
        assert hpo_main(["best", "--study-name", "b", "--storage", url, "--artifact-store", str(store), "--save-model", str(where)]) == 2
        assert f"cannot create --save-model {where}: {why}; pass a new or empty directory" in capfd.readouterr().err
    # A better trial whose model was not kept (run without an artifact store): the kept one is not the best's.
    best = study.best_trial
    study.add_trial(optuna.trial.create_trial(params=best.params, distributions=best.distributions, value=2.0))
    assert hpo_main(["best", "--study-name", "b", "--storage", url, "--artifact-store", str(store), "--save-model", str(tmp_path / "stale")]) == 2
    assert (f"the model study 'b' kept is trial {kept['trial']}'s ({kept['value']}), but its best trial is now 3 (2.0), whose "
            "model was not kept") in capfd.readouterr().err and not (tmp_path / "stale").exists()


def test_lora_keeps_the_merged_model(tmp_path: Path) -> None:
    data = demo_dataset(n_train=200, n_valid=64, seed=3)
    space = {**FP32, "fixed": {**FP32["fixed"], "finetune": "lora", "lora_rank": 4}}
    store = tmp_path / "store"
    study = hpo.optimize(space, data, storage=f"sqlite:///{tmp_path / 'l.db'}", study_name="l", n_trials=1, device="cpu",
                         artifact_store=str(store))
    out = tmp_path / "merged"
    export_best_model(study, str(store), out)
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert not any("lora" in name or "modules_to_save" in name for name in model.state_dict())
    # The tokenizer cuts texts where the trial did (its own limit was the model's 512: a pipeline cut elsewhere).
    cut = study.best_trial.user_attrs["max_length_effective"]
    assert AutoTokenizer.from_pretrained(out).model_max_length == cut
    assert _accuracy(out, data) == pytest.approx(study.best_trial.user_attrs["metrics"]["accuracy"])


def test_a_study_without_a_kept_model_is_a_clear_error(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="none", storage=f"sqlite:///{tmp_path / 'n.db'}")
    with pytest.raises(hpo.UserError, match="kept no model"):
        export_best_model(study, str(tmp_path / "s"), tmp_path / "out")


def test_a_study_of_several_objectives_with_no_front_is_not_sent_to_best_for_one(tmp_path: Path) -> None:
    """It said to paste a front trial's fixed: block from `python -m hpo best`, which then had none to list."""
    study = optuna.create_study(study_name="two", storage=f"sqlite:///{tmp_path / 'n.db'}", directions=["maximize", "minimize"])
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    with pytest.raises(hpo.UserError, match=r"keeps none \(its best trials are a Pareto front\), and it has no Pareto front yet \(") as refused:
        export_best_model(study, str(tmp_path / "s"), tmp_path / "out")
    assert "python -m hpo best" not in str(refused.value)
    study.add_trial(optuna.trial.create_trial(values=[0.8, 10.0]))
    with pytest.raises(hpo.UserError, match=r"paste its fixed: block from `python -m hpo best`"):
        export_best_model(study, str(tmp_path / "s"), tmp_path / "out")
