"""Evaluation on the validation split: metrics under the trial's autocast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trial_executor._batching import Collation, TokenizedSplit, eval_batches, label_tensor, to_device
from trial_executor._config import TrainConfig
from trial_executor._metrics import evaluation_metrics
from trial_executor._precision import PrecisionPolicy


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module, forward: Callable[..., Any], split: TokenizedSplit, policy: PrecisionPolicy,
    config: TrainConfig, collation: Collation, num_labels: int, device: torch.device,
) -> dict[str, float]:
    """Metrics on ``split`` through ``forward`` (``model`` or its packed forward), under the trial's autocast."""
    model.eval()
    logits_by_index: dict[int, torch.Tensor] = {}
    for indices, batch in eval_batches(split, config.eval_batch_size, collation):
        inputs = to_device({k: v for k, v in batch.inputs.items() if k != "labels"}, device)
        with policy.autocast():
            logits = forward(**inputs).logits
        for i, row in zip(indices, logits.float().cpu(), strict=True):
            logits_by_index[i] = row
    model.train()
    logits = torch.stack([logits_by_index[i] for i in range(len(split))])
    return evaluation_metrics(logits, label_tensor(split.labels))
