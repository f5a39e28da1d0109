"""From texts to tensors: tokenization (cached), training and evaluation batches, static shapes for a compiled step.
"""

from __future__ import annotations

from trial_executor.batches._batching import (
    Batch,
    Collation,
    TokenizedSplit,
    TrainBatches,
    eval_batches,
    label_tensor,
    packing,
    to_device,
    train_batches,
    width_buckets,
    window_rows,
    window_shape,
)
from trial_executor.batches._static import TOKEN_MULTIPLE, StaticCollation, packed_width, round_up, token_buckets
from trial_executor.batches._tokenization import TokenizedData, tokenize, tokenize_data

__all__ = [
    "TOKEN_MULTIPLE",
    "Batch",
    "Collation",
    "StaticCollation",
    "TokenizedData",
    "TokenizedSplit",
    "TrainBatches",
    "eval_batches",
    "label_tensor",
    "packed_width",
    "packing",
    "round_up",
    "to_device",
    "token_buckets",
    "tokenize",
    "tokenize_data",
    "train_batches",
    "width_buckets",
    "window_rows",
    "window_shape",
]
