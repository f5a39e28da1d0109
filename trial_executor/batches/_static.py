"""Static shapes for a compiled training step: a handful of input shapes per trial, known up front.

A step compiled with ``dynamic=False`` (and on CUDA captured as graphs) is specialised to its
input shapes: every new shape is a new compile. Dynamic padding gives nearly every batch its
own shape, and the packed forward's token count changes every batch. :class:`StaticCollation`
makes them few:

- every micro-batch has ``rows`` rows: a short batch (an epoch's last) gets dummy rows of one
  padding token each, weighted 0 in the loss (``row_weight``), so no loss or gradient sees them;
- the HF forward pads its width up to one of a few width buckets (multiples of 16);
- the packed forward pads to one fixed width and its packed token count up to one of a few
  token buckets (multiples of :data:`TOKEN_MULTIPLE`), chosen by :func:`token_buckets` from the
  data's own histogram of tokens per batch. The padding tokens are one dummy segment: their
  ``packed_index`` entries point one past the grid (a slot the packed forward drops), and
  ``cu_seqlens`` carries them as one last segment, so no [CLS] read, loss or metric sees them.

``packed_index`` (tokens), ``cls_index`` (rows) and ``cu_seqlens`` (rows + 2) are therefore
fixed-size host tensors, pinned on CUDA like the rest of the batch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.profiler import record_function

from trial_executor.batches._batching import (
    COLLATE_RANGE,
    Batch,
    Collation,
    TokenizedSplit,
    bucket_width,
    collate,
    epoch_batches,
    packing,
)

TOKEN_MULTIPLE = 64  # token buckets are multiples of this (tensor-core and vector friendly)
MAX_TOKEN_BUCKETS = 4  # at most this many packed shapes (compiles, CUDA graphs) per trial
WIDTH_MULTIPLE = 16


def round_up(value: int, multiple: int) -> int:
    return max(multiple, math.ceil(value / multiple) * multiple)


def token_buckets(
    split: TokenizedSplit, batch_size: int, *, length_grouping: bool, seed: int, count: int = MAX_TOKEN_BUCKETS,
) -> tuple[int, ...]:
    """Up to ``count`` packed-token sizes that hold every batch, chosen from the data's batch totals.

    The largest holds ``batch_size`` rows of the longest row; the others minimise the padded
    tokens over the batches of the first epoch as the loop draws them (same seed and grouping),
    by dynamic programming over the totals rounded up to :data:`TOKEN_MULTIPLE`.
    """
    lengths = [len(row) for row in split.input_ids]
    largest = round_up(batch_size * max(lengths), TOKEN_MULTIPLE)
    batches = epoch_batches(split, batch_size, torch.Generator().manual_seed(seed), length_grouping=length_grouping)
    # A short batch gets one token per dummy row.
    totals = [sum(lengths[i] for i in rows) + batch_size - len(rows) for rows in batches]
    histogram = Counter(round_up(total, TOKEN_MULTIPLE) for total in totals)
    histogram.setdefault(largest, 0)
    sizes = sorted(histogram)
    m = len(sizes)
    counts, sums = [0], [0]  # prefix sums: batches, and their tokens as rounded
    for size in sizes:
        counts.append(counts[-1] + histogram[size])
        sums.append(sums[-1] + histogram[size] * size)

    def padding(i: int, j: int) -> int:  # sizes[i..j] all padded up to sizes[j]
        return sizes[j] * (counts[j + 1] - counts[i]) - (sums[j + 1] - sums[i])

    # best[k][j]: the least padding covering sizes[:j + 1] with k + 1 buckets, the last one sizes[j].
    best, back = [[padding(0, j) for j in range(m)]], [[-1] * m]
    for k in range(1, count):
        options = [min(((best[k - 1][i] + padding(i + 1, j), i) for i in range(j)), default=(math.inf, -1)) for j in range(m)]
        best.append([value for value, _ in options])
        back.append([i for _, i in options])
    k = min(range(count), key=lambda k: (best[k][m - 1], k))
    chosen, j = [], m - 1
    while j >= 0:
        chosen.append(sizes[j])
        j, k = back[k][j], k - 1
    return tuple(sorted(chosen))


def packed_width(max_length: int) -> int:
    """The packed forward's one grid width (only its attention product is padded)."""
    return round_up(max_length, WIDTH_MULTIPLE)


@dataclass(frozen=True)
class StaticCollation(Collation):
    """:class:`Collation` with fixed rows, and for the packed forward, token counts padded to a bucket."""

    rows: int = 1
    token_buckets: tuple[int, ...] = ()

    def __call__(self, split: TokenizedSplit, indices: Sequence[int]) -> Batch:
        with record_function(COLLATE_RANGE):
            lengths = [len(split.input_ids[i]) for i in indices]
            inputs = collate(split, indices, self.pad_id, width=bucket_width(max(lengths), self.buckets))
            real_cells = inputs["attention_mask"].numel()
            inputs = _add_dummy_rows(inputs, self.rows - len(indices), self.pad_id)
            if self.packed:
                inputs.update(_pad_packing(packing(inputs["attention_mask"]), self.token_buckets, inputs["input_ids"].numel()))
            if self.pin:
                inputs = {k: v.pin_memory() for k, v in inputs.items()}
            return Batch(inputs, len(indices), sum(lengths), real_cells, tuple(tuple(t.shape) for t in inputs.values()))


def _add_dummy_rows(inputs: dict[str, torch.Tensor], missing: int, pad_id: int) -> dict[str, torch.Tensor]:
    """``missing`` rows of one padding token each, weighted 0 (``row_weight``); never a row without a token."""
    rows, width = inputs["input_ids"].shape
    weight = torch.cat([torch.ones(rows), torch.zeros(missing)])
    if missing <= 0:
        return {**inputs, "row_weight": weight}
    ids = torch.full((missing, width), pad_id, dtype=torch.long)
    mask = torch.zeros((missing, width), dtype=torch.long)
    mask[:, 0] = 1  # a row with no token to attend to would give NaN attention
    labels = inputs["labels"]
    padded = {
        "input_ids": torch.cat([inputs["input_ids"], ids]), "attention_mask": torch.cat([inputs["attention_mask"], mask]),
        "labels": torch.cat([labels, labels.new_zeros((missing, *labels.shape[1:]))]), "row_weight": weight,
    }
    if "token_type_ids" in inputs:
        padded["token_type_ids"] = torch.cat([inputs["token_type_ids"], torch.zeros((missing, width), dtype=torch.long)])
    return padded


def _pad_packing(packed: dict[str, torch.Tensor], buckets: Sequence[int], cells: int) -> dict[str, torch.Tensor]:
    """Pad ``packed_index`` to the smallest token bucket holding it: one dummy segment, one past the grid."""
    tokens = packed["packed_index"].numel()
    size = next((b for b in buckets if b >= tokens), round_up(tokens, TOKEN_MULTIPLE))
    index = torch.cat([packed["packed_index"], torch.full((size - tokens,), cells, dtype=torch.long)])
    cu_seqlens = torch.cat([packed["cu_seqlens"], torch.tensor([size], dtype=torch.int32)])
    return {"packed_index": index, "cls_index": packed["cls_index"], "cu_seqlens": cu_seqlens}
