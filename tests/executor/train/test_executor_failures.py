"""Trials that diverge or run out of memory end with a typed error and leave nothing behind."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from transformers import PreTrainedModel

from trial_executor import NonFiniteLossError, TextClassificationData, TrainConfig, TrialOutOfMemoryError, demo_dataset, run_trial


@pytest.fixture(scope="module")
def data() -> TextClassificationData:
    return demo_dataset(n_train=400, n_valid=60, seed=5)


@pytest.fixture
def global_forward_hook() -> Iterator[Callable[[Callable[..., Any]], None]]:
    handles = []

    def install(hook: Callable[..., Any]) -> None:
        handles.append(torch.nn.modules.module.register_module_forward_hook(hook))

    yield install
    for handle in handles:
        handle.remove()


def _live_models() -> int:
    gc.collect()
    return sum(PreTrainedModel in type(obj).__mro__ for obj in gc.get_objects())


def _blow_up_logits(module: torch.nn.Module, args: Any, output: Any) -> Any:
    # The classifier head (out_features = 2 labels) overflows: inf logits, then NaN gradients.
    if isinstance(module, torch.nn.Linear) and module.out_features == 2:
        return output * float("inf")
    return None


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_diverging_loss_stops_the_trial(data: TextClassificationData, precision: str, global_forward_hook: Any) -> None:
    global_forward_hook(_blow_up_logits)
    with pytest.raises(NonFiniteLossError, match="loss is") as caught:
        run_trial(TrainConfig(fp_precision=precision, epochs=3, batch_size=16, device="cpu"), data)
    assert caught.value.step == 0  # stopped at the first optimizer step, not at the end


def test_fp16_stops_after_too_many_skipped_steps(data: TextClassificationData, global_forward_hook: Any) -> None:
    global_forward_hook(_blow_up_logits)
    config = TrainConfig(fp_precision="fp16", epochs=3, batch_size=16, max_skipped_steps=4, device="cpu")
    with pytest.raises(NonFiniteLossError, match="5 optimizer steps in a row") as caught:
        run_trial(config, data)
    assert caught.value.step == 4


def test_huge_learning_rate_diverges_for_real(data: TextClassificationData) -> None:
    config = TrainConfig(learning_rate=1e12, max_grad_norm=None, warmup_ratio=0.0, epochs=3, batch_size=16, device="cpu")
    with pytest.raises(NonFiniteLossError):
        run_trial(config, data)


def test_out_of_memory_is_typed_and_releases_the_model(data: TextClassificationData, global_forward_hook: Any) -> None:
    def no_room_for_big_batches(module: torch.nn.Module, args: Any, output: Any) -> None:
        if module.training and isinstance(module, torch.nn.Embedding) and args[0].numel() > 24 * 8:
            raise MemoryError("simulated: the batch does not fit")

    global_forward_hook(no_room_for_big_batches)
    before = _live_models()
    with pytest.raises(TrialOutOfMemoryError, match="batch_size 32") as caught:
        run_trial(TrainConfig(batch_size=32, grad_accum_steps=2, packed_forward=False, epochs=1, device="cpu"), data)
    assert (caught.value.batch_size, caught.value.grad_accum_steps) == (32, 2)
    assert caught.value.__context__ is None and caught.value.__traceback__ is not None
    assert _live_models() == before
    # The next trial, with batches that fit, runs normally in the same process.
    result = run_trial(TrainConfig(batch_size=4, max_steps=3, eval_every=0, packed_forward=False, device="cpu"), data)
    assert result.steps == 3
