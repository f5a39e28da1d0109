"""Evaluation on the validation split: metrics under the trial's autocast.

Early (periodic) evaluations may run on a fixed sample of the validation rows, drawn with a
constant seed so every evaluation of every trial sees the same rows (comparable for pruning);
the final evaluation covers every row. Collated batches are kept and reused by later
evaluations and trials of the process (the last few row sets).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from trial_executor._caches import BoundedCache
from trial_executor._config import TrainConfig
from trial_executor.batches import Batch, Collation, TokenizedSplit, label_tensor, to_device
from trial_executor.precision import PrecisionPolicy
from trial_executor.train._metrics import evaluation_metrics

EVAL_SAMPLE_SEED = 0  # not the trial's seed: every trial evaluates early on the same rows
# Collated row sets kept: a sample and the full split, of one or two datasets.
_COLLATED: BoundedCache[tuple[object, ...], tuple[TokenizedSplit, list[tuple[list[int], Batch]]]] = BoundedCache(
    "train.collated_eval_batches", size=4
)


def eval_rows(n_rows: int, sample_size: int | None) -> list[int]:
    """The validation rows an early evaluation runs on: all, or ``sample_size`` of them drawn with a fixed seed."""
    if sample_size is None or sample_size >= n_rows:
        return list(range(n_rows))
    return sorted(random.Random(EVAL_SAMPLE_SEED).sample(range(n_rows), sample_size))


def _batches(split: TokenizedSplit, rows: Sequence[int], batch_size: int, collation: Collation) -> list[tuple[list[int], Batch]]:
    """Batches of similar length (less padding) with their row indices; collated once per process."""
    # The rows follow from (len(split), len(rows)) (see eval_rows); the split itself is checked by identity.
    key = (id(split), len(split), len(rows), batch_size, collation)
    kept = _COLLATED.get(key)
    if kept is not None and kept[0] is split:
        return kept[1]
    order = sorted(rows, key=lambda i: len(split.input_ids[i]))
    batches = [(order[s : s + batch_size], collation(split, order[s : s + batch_size])) for s in range(0, len(order), batch_size)]
    return _COLLATED.put(key, (split, batches))[1]


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module, forward: Callable[..., Any], split: TokenizedSplit, policy: PrecisionPolicy,
    config: TrainConfig, collation: Collation, num_labels: int, device: torch.device, *, rows: Sequence[int] | None = None,
) -> dict[str, float]:
    """Metrics on ``rows`` of ``split`` (all: ``None``) through ``forward`` (``model`` or its packed forward).

    Runs under the trial's autocast (``policy``), as training does. ``eval_rows`` in the metrics
    counts the rows evaluated.
    """
    rows = range(len(split)) if rows is None else rows
    model.eval()
    logits_by_index: dict[int, torch.Tensor] = {}
    try:
        for indices, batch in _batches(split, rows, config.eval_batch_size, collation):
            inputs = to_device({k: v for k, v in batch.inputs.items() if k != "labels"}, device)
            with policy.autocast():
                logits = forward(**inputs).logits
            for i, row in zip(indices, logits.float().cpu(), strict=True):
                logits_by_index[i] = row
    finally:  # a caller that catches an error here (an OOM, say) gets its model back in training mode
        model.train()
    logits = torch.stack([logits_by_index[i] for i in rows])
    metrics = evaluation_metrics(logits, label_tensor([split.labels[i] for i in rows]))
    metrics["eval_rows"] = float(len(rows))
    return metrics
