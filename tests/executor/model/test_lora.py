"""LoRA fine-tuning through real peft: what trains, the packed forward, checkpoints, the missing-package line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from trial_executor import Checkpointing, TextClassificationData, TrainConfig, TrialInterrupted, demo_dataset, run_trial
from trial_executor.batches._batching import collate
from trial_executor.batches._tokenization import tokenize
from trial_executor.model._loading import load_model
from trial_executor.model._lora import apply_lora, trainable_state_dict
from trial_executor.model._packed import PackedBertClassifier
from trial_executor.train._loop import seed_everything
from trial_executor.train._optimizer import make_optimizer


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=600, n_valid=100, seed=5)


def _lora_model(data: TextClassificationData, model: str = "tiny-bert", **fields: object) -> torch.nn.Module:
    seed_everything(0)
    base, tokenizer = load_model(model, data.label_names, data.train_texts)
    return apply_lora(base, TrainConfig(model=model, finetune="lora", **fields)), tokenizer


def _batch(data: TextClassificationData, tokenizer: object, rows: int = 24) -> dict[str, torch.Tensor]:
    split, _ = tokenize(tokenizer, data.train_texts[:rows], data.train_labels[:rows], 64)
    return collate(split, list(range(rows)), tokenizer.pad_token_id)


@pytest.mark.parametrize("model", ["tiny-bert", "tiny-distilbert"])
def test_only_adapters_and_head_change(data: TextClassificationData, model: str) -> None:
    lora, tokenizer = _lora_model(data, model, lora_rank=4)
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or "modules_to_save" in name for name in trainable)
    assert any("classifier" in name for name in trainable)  # the head trains too
    before = {name: t.clone() for name, t in lora.state_dict().items()}
    optimizer = make_optimizer(lora, TrainConfig(learning_rate=1e-2), torch.device("cpu"))
    batch = _batch(data, tokenizer)
    lora.train()
    for _ in range(3):
        lora(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    changed = {name for name, t in lora.state_dict().items() if not torch.equal(t, before[name])}
    assert changed == trainable


def test_lora_trial_learns_and_records_its_parameter_share(data: TextClassificationData) -> None:
    config = TrainConfig(finetune="lora", lora_rank=8, learning_rate=5e-3, epochs=3, eval_every=10, device="cpu")
    result = run_trial(config, data)
    assert result.packed_forward
    first, last = result.history[0][1], result.history[-1][1]
    assert last["train_loss"] < first["train_loss"], result.history
    lora, _ = _lora_model(data, lora_rank=8)
    assert result.trainable_params == sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert result.trainable_fraction == result.trainable_params / sum(p.numel() for p in lora.parameters())
    assert 0 < result.trainable_fraction < 0.5
    full = run_trial(TrainConfig(max_steps=1, device="cpu"), data)
    assert full.trainable_fraction == 1.0 and full.trainable_params > result.trainable_params


def test_packed_forward_goes_through_the_adapters(data: TextClassificationData) -> None:
    lora, tokenizer = _lora_model(data, lora_rank=4, lora_dropout=0.0)
    with torch.no_grad():  # lora_B starts at zero: make the adapters count
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    lora.eval()
    batch = _batch(data, tokenizer)
    hf = lora(**batch)
    packed = PackedBertClassifier(lora)(**batch)
    torch.testing.assert_close(packed.logits, hf.logits, atol=1e-5, rtol=1e-4)
    # Without the adapters the logits differ: the comparison above did see them.
    for module in lora.modules():
        if hasattr(module, "lora_B"):
            module.scaling = {k: 0.0 for k in module.scaling}
    assert not torch.allclose(lora(**batch).logits, hf.logits, atol=1e-4)


def test_checkpoints_hold_only_trainable_params_and_resume_exactly(data: TextClassificationData, tmp_path: Path) -> None:
    config = TrainConfig(finetune="lora", lora_rank=4, learning_rate=5e-3, epochs=1, batch_size=32, eval_every=4, device="cpu")
    straight = run_trial(config, data)
    calls = {"n": 0}

    def stop_after_six() -> bool:
        calls["n"] += 1
        return calls["n"] >= 6

    with pytest.raises(TrialInterrupted) as caught:
        run_trial(config, data, checkpointing=Checkpointing(tmp_path / "a"), stop_requested=stop_after_six)
    saved = torch.load(caught.value.checkpoint, weights_only=False)["model"]
    lora, _ = _lora_model(data, lora_rank=4)
    assert set(saved) == set(trainable_state_dict(lora))
    resumed = run_trial(config, data, checkpointing=Checkpointing(tmp_path / "b", resume_from=caught.value.checkpoint))
    assert resumed.resumed_at_step == 6 and [s for s, _ in resumed.history] == [s for s, _ in straight.history]
    for (_, got), (_, want) in zip(resumed.history, straight.history, strict=True):
        # Same weights: the same evaluations. The training-loss mean of the window the
        # interruption split is summed in two parts (float32), so it may differ in the last bits.
        assert {k: v for k, v in got.items() if k != "train_loss"} == {k: v for k, v in want.items() if k != "train_loss"}
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-6)


def test_missing_peft_is_one_line(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "params:\n  learning_rate: {type: float, low: 1.0e-3, high: 2.0e-3}\nfixed: {finetune: lora, epochs: 1}\n"
    )
    # peft made unimportable in the child only (sys.modules[name] = None makes `import peft` fail).
    code = "import sys, runpy; sys.modules['peft'] = None; sys.argv = sys.argv[1:]; runpy.run_module('hpo.run', run_name='__main__')"
    proc = subprocess.run(
        [sys.executable, "-c", code, "hpo.run", "--space", str(space), "--storage", f"sqlite:///{tmp_path / 's.db'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "pip install 'precision-hpo[lora]'" in proc.stderr
    assert not (tmp_path / "s.db").exists()


def test_target_modules_a_model_lacks_are_refused_before_the_study_is_written(tmp_path: Path) -> None:
    """peft refused them in every trial (three FAIL trials and their tracebacks), after the study was written."""
    from hpo import UserError, optimize

    space = {
        "params": {"learning_rate": {"type": "float", "low": 1e-3, "high": 2e-3}},
        "fixed": {"finetune": "lora", "lora_target_modules": "query,q_proj", "max_steps": 2, "eval_every": 0},
    }
    with pytest.raises(UserError) as refused:
        optimize(space, demo_dataset(n_train=40, n_valid=10), storage=f"sqlite:///{tmp_path / 's.db'}", device="cpu")
    assert str(refused.value) == (
        "lora_target_modules: q_proj names no module of model 'tiny-bert'; name some of its linear layers (classifier, dense, key, query, value)"
    )
    assert not (tmp_path / "s.db").exists()
    from trial_executor.model import lora_target_problem

    assert lora_target_problem("tiny-distilbert", None) is None  # the architecture's own targets (q_lin, v_lin)


def test_run_trial_with_target_modules_the_model_lacks_is_one_value_error() -> None:
    """Called directly (no study to check them first), peft's NoMatchingPeftModuleError came from deep inside."""
    config = TrainConfig(finetune="lora", lora_target_modules="nope_mod", max_steps=2, eval_every=0, batch_size=8, max_length=32, device="cpu")
    with pytest.raises(ValueError, match=r"^lora_target_modules: nope_mod names no module of model 'tiny-bert'; name some of its linear "
                                         r"layers \(classifier, dense, key, query, value\)$"):
        run_trial(config, demo_dataset(n_train=40, n_valid=10, seed=1))
