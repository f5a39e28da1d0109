"""Batching with dynamic padding (each batch padded to its own longest row).

Length grouping cuts a shuffled epoch into mega-batches of ``GROUPING_WINDOW`` batches, sorts
each by length, cuts it into batches and then shuffles the batch order: batches are nearly
uniform in length (little padding) while the epoch stays random. Sorting without the final
shuffle, as some trainers do, orders batches from long to short and costs accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

GROUPING_WINDOW = 32
# An extra chunk must save at least this share of its batch's padded tokens to be worth a call.
CHUNK_COST = 0.1


@dataclass(frozen=True)
class TokenizedSplit:
    """Token ids per example (unpadded) and their labels."""

    input_ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


def collate(split: TokenizedSplit, indices: Sequence[int], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad the rows at ``indices`` to the longest of them."""
    rows = [split.input_ids[i] for i in indices]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention_mask[r, : len(row)] = 1
    labels = torch.tensor([split.labels[i] for i in indices], dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def epoch_batches(split: TokenizedSplit, batch_size: int, generator: torch.Generator, *, length_grouping: bool) -> list[list[int]]:
    """The row indices of each batch of one epoch; every row appears exactly once."""
    order = torch.randperm(len(split), generator=generator).tolist()
    if not length_grouping:
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    window = batch_size * GROUPING_WINDOW
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: len(split.input_ids[i]))
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


def train_batches(
    split: TokenizedSplit, batch_size: int, pad_id: int, generator: torch.Generator,
    *, length_grouping: bool = False, chunk_by_length: bool = False, start: int = 0,
) -> Iterator[list[dict[str, torch.Tensor]]]:
    """One epoch in a random order drawn from ``generator``: each batch as a list of padded chunks.

    ``start`` skips the epoch's first batches (a resumed run) without collating them.
    """
    for indices in epoch_batches(split, batch_size, generator, length_grouping=length_grouping)[start:]:
        parts = length_chunks(split, indices) if chunk_by_length else [list(indices)]
        yield [collate(split, part, pad_id) for part in parts]


class _BatchDataset(torch.utils.data.Dataset):
    """Item ``indices`` (one batch's row indices) -> that batch's padded chunks; run in DataLoader workers."""

    def __init__(self, split: TokenizedSplit, pad_id: int, chunk_by_length: bool) -> None:
        self.split, self.pad_id, self.chunk_by_length = split, pad_id, chunk_by_length

    def __getitem__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        parts = length_chunks(self.split, indices) if self.chunk_by_length else [list(indices)]
        return [collate(self.split, part, self.pad_id) for part in parts]


class _EpochSampler(torch.utils.data.Sampler):
    """The current epoch's batches, set before each pass; the main process draws them, workers collate."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _as_is(item: list[dict[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    return item


class TrainBatches:
    """Each epoch's batches (see :func:`train_batches`), collated in process or by DataLoader workers.

    The batch order is always drawn in this process from the run's generator, so it does not
    depend on ``num_workers``; workers only pad and chunk (in order). One DataLoader serves
    the whole run, so ``persistent_workers`` keeps its workers across epochs.
    """

    def __init__(
        self, split: TokenizedSplit, batch_size: int, pad_id: int, *, length_grouping: bool, chunk_by_length: bool,
        num_workers: int = 0, pin_memory: bool = False, persistent_workers: bool = False, prefetch_factor: int | None = None,
    ) -> None:
        self.split, self.batch_size, self.pad_id = split, batch_size, pad_id
        self.length_grouping, self.chunk_by_length = length_grouping, chunk_by_length
        self.loader: torch.utils.data.DataLoader | None = None
        if num_workers > 0:
            self.sampler = _EpochSampler()
            self.loader = torch.utils.data.DataLoader(
                _BatchDataset(split, pad_id, chunk_by_length), batch_size=None, sampler=self.sampler, collate_fn=_as_is,
                num_workers=num_workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                prefetch_factor=prefetch_factor,
                # Its own generator: iterating must not draw from torch's global RNG (dropout's).
                generator=torch.Generator().manual_seed(0),
            )

    def epoch(self, generator: torch.Generator, start: int = 0) -> Iterator[list[dict[str, torch.Tensor]]]:
        if self.loader is None:
            yield from train_batches(
                self.split, self.batch_size, self.pad_id, generator,
                length_grouping=self.length_grouping, chunk_by_length=self.chunk_by_length, start=start,
            )
            return
        self.sampler.batches = epoch_batches(self.split, self.batch_size, generator, length_grouping=self.length_grouping)[start:]
        yield from self.loader


def length_chunks(split: TokenizedSplit, indices: Sequence[int], min_rows: int = 8) -> list[list[int]]:
    """Cut one batch into length-sorted chunks that each pad only to their own longest row.

    The chunks hold exactly the batch's rows; training on them with each chunk's mean loss
    weighted by its share of the batch gives the batch's gradient with less padded compute.
    Chosen by dynamic programming: minimise padded tokens plus a fixed cost per extra chunk.
    """
    rows = sorted(indices, key=lambda i: len(split.input_ids[i]))
    n = len(rows)
    if n < 2 * min_rows:
        return [rows]
    lengths = [len(split.input_ids[i]) for i in rows]
    per_chunk = CHUNK_COST * n * lengths[-1]
    best = [0.0] + [math.inf] * n  # best[k]: cost of the first k rows
    cut = [0] * (n + 1)
    # Cuts fall on multiples of min_rows: few distinct chunk shapes keep the backends'
    # per-shape kernel caches (oneDNN's, notably in bf16) small.
    ends = [*range(min_rows, n, min_rows), n]
    for end in ends:
        for start in [0, *(e for e in ends if e <= end - min_rows)]:
            cost = best[start] + (end - start) * lengths[end - 1] + per_chunk
            if cost < best[end]:
                best[end], cut[end] = cost, start
    chunks, end = [], n
    while end:
        chunks.append(rows[cut[end] : end])
        end = cut[end]
    return chunks[::-1]


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def token_counts(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """Real (non-padding) and processed (padded) tokens of one batch, read on the host."""
    mask = batch["attention_mask"]
    return int(mask.sum()), mask.numel()


def padding_efficiency(batch: dict[str, torch.Tensor]) -> float:
    """Real tokens / processed tokens of one batch (the loop sums both over an epoch)."""
    real, processed = token_counts(batch)
    return real / processed


def eval_batches(split: TokenizedSplit, batch_size: int, pad_id: int) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Batches of similar length (less padding); yields the original indices to restore order."""
    order = sorted(range(len(split)), key=lambda i: len(split.input_ids[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        yield indices, collate(split, indices, pad_id)
