"""A run's position and counters: where it is in its epochs and what it has trained on so far."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trial_executor.batches import Batch


@dataclass
class RunProgress:
    """What a checkpoint needs besides the tensors' states. ``step``: optimizer steps taken."""

    step: int = 0
    epoch: int = 0
    next_batch: int = 0  # micro-batches of the current epoch already trained on
    epoch_rng: torch.Tensor | None = None  # batch-order generator state when the epoch began
    samples: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    loss_sum: float = 0.0  # the loss summed over the rows trained on since the last evaluation
    loss_count: int = 0  # those rows (micro-batches in checkpoints written before: the mean stays a mean)
    # The float32 loss sum of an interrupted evaluation window: a resumed run adds to it in
    # float32, as the uninterrupted run would, so its train_loss comes out bit for bit the same.
    window_loss: float = 0.0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> RunProgress:
        """From :func:`dataclasses.asdict`'s form; fields it does not know (older checkpoints) are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known})

    def count(self, window: Sequence[Sequence[Batch]]) -> None:
        """One optimizer step over ``window`` taken: its micro-batches, rows and tokens."""
        for chunks in window:
            for chunk in chunks:
                self.loss_count += chunk.rows
                self.samples += chunk.rows
                self.tokens += chunk.real_tokens
                self.padded_tokens += chunk.padded_tokens
        self.step += 1

    def train_loss(self) -> float:
        """The mean loss per row trained on since the last evaluation (``loss_sum`` read from the device).

        Per row, not per micro-batch: an epoch's short last batch counts by its rows, so the same
        training in batches of 32 or in 4 accumulated micro-batches of 8 records the same loss."""
        return self.loss_sum / max(1, self.loss_count)
