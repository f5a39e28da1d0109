"""Bring your own model: without --space the space follows the model; trials stuck at the majority class are flagged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT

import hpo
from hpo.cli._run import main as run_main
from hpo.reporting._report import build_report, summary_lines
from hpo.reporting._status import status_lines, study_status
from hpo.space._resolving import choose_space, resolve_space
from trial_executor import TrainConfig, demo_dataset, run_trial
from trial_executor.model._loading import load_model
from trial_executor.train._metrics import evaluation_metrics, stuck_at_majority

FINETUNE = ROOT / "search_spaces" / "finetune.yaml"
DEFAULT = ROOT / "search_spaces" / "default.yaml"


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save_pretrained directory with weights (a tiny BERT and its tokenizer)."""
    data = demo_dataset(n_train=100, n_valid=20)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    path = tmp_path_factory.mktemp("models") / "my-bert"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_finetune_space_searches_fine_tuning_learning_rates_and_every_precision() -> None:
    space = hpo.load_search_space(FINETUNE)
    rate = space.params["learning_rate"]
    assert (rate.low, rate.high, rate.log) == (1.0e-5, 3.0e-4, True)
    assert space.params["fp_precision"].choices == ["fp32", "tf32", "fp16", "bf16"]
    assert space.fixed["max_length"] == "auto" and space.reports_samples
    # The fp32 baseline is itself a fine-tuning configuration: 1e-4 with a short warmup.
    assert space.baseline_params()["learning_rate"] == 1.0e-4
    assert hpo.FINETUNE_SPACE == FINETUNE


@pytest.mark.parametrize(
    ("model", "expected"),
    [(None, DEFAULT), ("tiny-bert", DEFAULT), ("tiny-distilbert", DEFAULT), ("minilm-l6", FINETUNE), ("org/some-model", FINETUNE)],
)
def test_the_space_follows_the_model(model: str | None, expected: Path) -> None:
    choice = choose_space(model)
    assert choice.path == expected
    assert choice.line().startswith(f"Search space: search_spaces/{expected.name} (")


def test_a_directory_with_weights_takes_the_finetune_space_and_says_so(pretrained_dir: Path) -> None:
    said: list[str] = []
    space = resolve_space(None, model=str(pretrained_dir), announce=said.append)
    assert said == [f"Search space: search_spaces/finetune.yaml ({pretrained_dir} is a pretrained model: "
                    "learning rates for fine-tuning, not for random weights; --space to choose another)"]
    assert space.params["learning_rate"].high == 3.0e-4 and space.fixed["model"] == str(pretrained_dir)


def test_a_space_given_explicitly_is_used_as_it_is(pretrained_dir: Path) -> None:
    said: list[str] = []
    space = resolve_space(DEFAULT, model=str(pretrained_dir), announce=said.append)
    assert said == [] and space.params["learning_rate"].high == 4.0e-3


def test_the_run_says_which_space_it_took_on_its_first_line_once_its_checks_pass(
    tmp_path: Path, pretrained_dir: Path, capfd: pytest.CaptureFixture[str],
) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    # A missing data file fails a check: its one line alone, no claim about the model first, nothing written.
    assert run_main(["--model", str(pretrained_dir), "--data", str(tmp_path / "missing.csv"), "--storage", storage]) == 2
    failed = capfd.readouterr()
    assert failed.out == "" and "missing.csv" in failed.err and not (tmp_path / "s.db").exists()
    # Past the checks the choice comes first: an existing study's own space, --model applied to it (for a new study,
    # the space the model takes: the test above). The study then refuses the run, naming the models it searched.
    hpo.open_study(hpo.create_storage(storage), "s", hpo.load_search_space(DEFAULT), demo_dataset(n_train=64, n_valid=16), seed=0)
    assert run_main(["--model", str(pretrained_dir), "--storage", storage, "--study-name", "s"]) == 2
    chosen = capfd.readouterr()
    assert chosen.out.splitlines()[0] == "Search space: the one study 's' was made with (no --space given)"
    assert len(chosen.err.splitlines()) == 1 and f"(model was searched, now fixed at {str(pretrained_dir)!r})" in chosen.err, chosen.err


def test_stuck_at_majority_catches_a_constant_prediction_and_the_majority_share() -> None:
    labels = torch.tensor([0, 0, 0, 1, 1])
    assert stuck_at_majority(torch.tensor([1, 1, 1, 1, 1]), labels)  # constant, even the minority class
    assert stuck_at_majority(torch.tensor([0, 0, 1, 1, 0]), labels)  # 3 of 5 right: the majority's share
    assert not stuck_at_majority(torch.tensor([0, 0, 0, 1, 0]), labels)
    logits = torch.tensor([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.0, 2.0], [0.0, 2.0]])
    assert evaluation_metrics(logits, labels)["majority_class"] == 0.0


def test_a_trial_trained_with_learning_rate_one_is_flagged_in_attrs_status_and_report(tmp_path: Path) -> None:
    space = {
        "pruner": {"type": "none"},
        "params": {"batch_size": {"type": "categorical", "choices": [16]}},
        "fixed": {"model": "tiny-bert", "learning_rate": 1.0, "epochs": 1, "max_length": 32, "eval_every": 0},
    }
    storage = f"sqlite:///{tmp_path / 'm.db'}"
    study = hpo.optimize(space, demo_dataset(n_train=200, n_valid=64, seed=1), storage=storage, study_name="lr1",
                         n_trials=1, device="cpu", artifact_store=None)
    (trial,) = study.get_trials()
    assert trial.user_attrs["majority_class"] is True
    lines = status_lines(study_status(study._storage, study))
    assert any(line.startswith("  majority class: trial 0 ") and "learning rate" in line for line in lines), lines
    summary = summary_lines(build_report(study, storage))
    assert any(line.startswith("Majority-class trials") and ": trial 0;" in line for line in summary), summary
    # The space file in the YAML form the CLI would read gives the same (a mapping and a file are one space).
    path = tmp_path / "lr1.yaml"
    path.write_text(yaml.safe_dump(space))
    assert resolve_space(path).fixed["learning_rate"] == 1.0


def test_a_pruned_trial_is_not_judged_only_one_that_trained_to_its_end() -> None:
    # Pruned at its first evaluation, a run has not had the chance to leave the majority class (a low
    # learning rate needs more rows): only a run that trained to its end is flagged.
    data = demo_dataset(n_train=200, n_valid=64, seed=1)
    config = TrainConfig(model="tiny-bert", batch_size=16, learning_rate=1.0, epochs=1, max_length=32, eval_every=4, device="cpu")
    pruned = run_trial(config, data, report=lambda step, metrics: True)
    assert pruned.stopped_early and pruned.metrics["majority_class"] == 1.0 and not pruned.majority_class
    assert run_trial(config, data).majority_class
