"""The training step's own parts: the window's loss by rows, the schedule over applied steps, clipping by torch's rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from trial_executor import TrainConfig, demo_dataset
from trial_executor.batches import Batch, Collation
from trial_executor.batches._tokenization import tokenize
from trial_executor.model._loading import load_model
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._optimizer import LearningRateSchedule, lr_lambda, make_optimizer, warmup_steps
from trial_executor.train._progress import RunProgress
from trial_executor.train._step import TrainStep, clip_grad_norm

CPU = torch.device("cpu")


def test_a_short_last_window_weighs_its_rows_as_one_batch_of_them_would() -> None:
    # An epoch's last window: micro-batches of 4 and 2 rows. Its update is one batch of those 6
    # rows' (row mean), not the mean of the two micro-batch means (the 2 rows would count twice).
    data = demo_dataset(n_train=64, n_valid=8)
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.eval()  # no dropout: both updates are deterministic
    split, _ = tokenize(tokenizer, data.train_texts, data.train_labels, 64)
    collation = Collation(pad_id=tokenizer.pad_token_id)

    def updated(window: list[list[int]]) -> list[torch.Tensor]:
        trained = copy.deepcopy(model)
        optimizer = torch.optim.SGD(trained.parameters(), lr=1.0)  # the update is the gradient itself
        schedule = LearningRateSchedule(optimizer, 1.0, lambda step: 1.0, total_steps=1)
        step = TrainStep(trained, trained, optimizer, schedule, PrecisionPolicy.resolve("fp32", CPU), max_grad_norm=None, device=CPU)
        step([[collation(split, rows)] for rows in window])
        return [p.detach() for p in trained.parameters()]

    one_batch, short_window = updated([[0, 1, 2, 3, 4, 5]]), updated([[0, 1, 2, 3], [4, 5]])
    for expected, got in zip(one_batch, short_window, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "layout",
    [
        [[[0, 1, 2, 3], [4, 5]]],  # one window of two micro-batches, the second short
        [[[0, 1, 2, 3]], [[4, 5]]],  # two windows (an epoch's short last batch)
        [[[0, 1, 2, 3, 4, 5]]],  # one batch of them all
    ],
)
def test_the_recorded_training_loss_is_the_mean_over_the_rows_however_they_were_batched(layout: list[list[list[int]]]) -> None:
    # The same rows at the same weights must record the same train_loss whether they came as one
    # batch, accumulated micro-batches or a short last batch: each row counts once, as in the update.
    data = demo_dataset(n_train=64, n_valid=8)
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny-bert", data.label_names, data.train_texts)
    model.eval()  # no dropout: each row's loss is fixed
    with torch.no_grad():
        model.classifier.weight.mul_(100.0)  # rows' losses far apart (a fresh head gives every row about ln 2)
    split, _ = tokenize(tokenizer, data.train_texts, data.train_labels, 64)
    collation = Collation(pad_id=tokenizer.pad_token_id)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(**collation(split, range(6)).inputs).logits, torch.tensor(split.labels[:6]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay put
    schedule = LearningRateSchedule(optimizer, 0.0, lambda step: 1.0, total_steps=len(layout))
    step = TrainStep(model, model, optimizer, schedule, PrecisionPolicy.resolve("fp32", CPU), max_grad_norm=None, device=CPU)
    run = RunProgress()
    for window in layout:
        batches = [[collation(split, rows)] for rows in window]
        step(batches)
        run.count(batches)
    run.loss_sum = step.read().loss_sum
    assert run.train_loss() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize(("ratio", "total", "expected"), [(0.1, 5, 1), (0.5, 5, 3), (0.5, 7, 4), (0.1, 37, 4), (0.1, 33, 3), (0.0, 9, 0)])
def test_warmup_is_the_ratio_of_the_steps_to_the_nearest_a_half_up(ratio: float, total: int, expected: int) -> None:
    # round() is to the even step on a half: 0.1 of 5 steps was no warmup at all, 0.5 of 5 two steps but of 7 four.
    assert warmup_steps(ratio, total) == expected


def test_steps_that_gradscaler_skips_do_not_advance_the_learning_rate_schedule() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    policy = PrecisionPolicy.resolve("fp16", CPU)
    policy.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)  # inf fp16 gradients until the scale falls
    optimizer = make_optimizer(model, TrainConfig(learning_rate=1e-3, weight_decay=0.0), CPU, rate_on_device=True)
    factor = lr_lambda("linear", warmup_steps=4, total_steps=12)
    schedule = LearningRateSchedule(optimizer, 1e-3, factor, 12, policy.skipped_count())

    def forward(x: torch.Tensor, y: torch.Tensor) -> Any:
        return SimpleNamespace(loss=torch.nn.functional.cross_entropy(model(x).float(), y))

    step = TrainStep(model, forward, optimizer, schedule, policy, max_grad_norm=1.0, device=CPU)
    batch = Batch({"x": torch.randn(4, 8) * 100, "y": torch.tensor([0, 1, 0, 1])}, rows=4, real_tokens=4, padded_tokens=4, shape=())
    for taken in range(1, 13):
        step([[batch]])
        applied = taken - policy.skipped_steps()
        assert [group["lr"].item() for group in optimizer.param_groups] == pytest.approx([1e-3 * factor(applied)] * 2)
    assert 0 < policy.skipped_steps() < 12  # some steps skipped, then the scale fitted


def _gradients(scale: float, layers: int = 1) -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape)) for _ in range(layers) for shape in ((16, 8), (8,), (8, 4), (4,))]
    for p in params:
        p.grad = torch.randn_like(p) * scale
    return params


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("scale", [10.0, 0.01])  # clipped, and left alone (the coefficient clamps at 1)
def test_clipping_scales_the_gradients_as_torch_does(traced: bool, scale: float) -> None:
    ours, theirs = _gradients(scale), _gradients(scale)
    clip_grad_norm(ours, 1.0, traced=traced)
    torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-6, atol=0)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ours]))
    assert norm.item() == pytest.approx(1.0, rel=1e-5) if scale > 1 else norm.item() < 1.0


def test_clipping_dispatches_fewer_host_operations_than_torchs() -> None:
    def top_level_ops(clip: Callable[[list[torch.nn.Parameter]], None]) -> int:
        params = _gradients(10.0, layers=25)  # a hundred parameters, as a BERT's layers have
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            clip(params)
        events = [e for e in prof.events() if e.name.startswith("aten::")]
        return sum(1 for e in events if not (e.cpu_parent and e.cpu_parent.name.startswith("aten::")))

    ours = top_level_ops(lambda params: clip_grad_norm(params, 1.0))
    theirs = top_level_ops(lambda params: torch.nn.utils.clip_grad_norm_(params, 1.0))
    assert ours < 10 < 100 < theirs, (ours, theirs)  # torch's adds a no-op .to() per parameter
