"""Batching with dynamic padding (each batch padded to its own longest row, or up to a bucket width).

Length grouping cuts a shuffled epoch into mega-batches of ``GROUPING_WINDOW`` batches, sorts
each by length, cuts it into batches and then shuffles the batch order: batches are nearly
uniform in length (little padding) while the epoch stays random. Sorting without the final
shuffle, as some trainers do, orders batches from long to short and costs accuracy.

Everything a training step needs to know about a batch is computed here, on the host, while
collating: row and token counts as Python numbers, and for the packed forward the packed
positions, each row's ``[CLS]`` position and the cumulative row lengths as tensors. The step
itself then never reads a device tensor (a GPU would make the host wait) and has no
data-dependent shapes to discover. On CUDA the tensors are pinned, so their copies to the
device are asynchronous (``non_blocking=True``).

Buckets (:func:`width_buckets`): each batch is padded up to the smallest of a few widths that
holds its longest row, so a compiled or captured step meets a handful of shapes instead of one
per distinct batch width.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.profiler import record_function

COLLATE_RANGE = "trial_executor::collate"
GROUPING_WINDOW = 32
# An extra chunk must save at least this share of its batch's padded tokens to be worth a call.
CHUNK_COST = 0.1
# Bucket widths shrink by this factor from max_length down to _MIN_BUCKET, in multiples of
# _BUCKET_MULTIPLE (16: whole tensor-core tiles in half precision).
_BUCKET_RATIO = 2**0.5
_MIN_BUCKET = 16
_BUCKET_MULTIPLE = 16


@dataclass(frozen=True)
class TokenizedSplit:
    """Token ids per example (unpadded), their targets, and token types (sentence pairs only)."""

    input_ids: list[list[int]]
    labels: list[int] | list[float] | list[list[float]]  # class ids, regression targets or multi-hot rows
    token_type_ids: list[list[int]] | None = None  # 0 for the first text, 1 for the second

    def __len__(self) -> int:
        return len(self.labels)


class Batch(NamedTuple):
    """One collated batch: the forward's keyword tensors, and counts read on the host.

    ``shape``: the sizes one-time work is specialised on, so that a new one is start-up cost (a
    compile, a CUDA-graph capture, an attention kernel's plan): the padded grid, and under static
    shapes the token bucket too. Not the dynamic packed token count: it changes nearly every batch
    and eager kernels build nothing per row count.
    """

    inputs: dict[str, torch.Tensor]
    rows: int
    real_tokens: int
    padded_tokens: int
    shape: tuple[tuple[int, ...], ...]


def width_buckets(max_length: int, *, ratio: float = _BUCKET_RATIO, smallest: int = _MIN_BUCKET) -> tuple[int, ...]:
    """A few batch widths from ``smallest`` up to ``max_length``, each about ``ratio`` times the last.

    Widths are multiples of 16 (whole tensor-core tiles), and the largest is ``max_length`` itself,
    so every row fits some bucket.
    """
    widths, k, step = {max_length}, 1, _BUCKET_MULTIPLE
    while max_length / ratio**k >= smallest - 1e-9:
        widths.add(min(max_length, math.ceil(max_length / ratio**k / step - 1e-9) * step))
        k += 1
    return tuple(sorted(widths))


def bucket_width(longest: int, buckets: Sequence[int] | None) -> int:
    """The smallest bucket holding ``longest`` tokens (``longest`` itself without buckets)."""
    if not buckets:
        return longest
    for width in buckets:
        if width >= longest:
            return width
    return longest  # longer than the largest bucket (not cut at max_length): its own width


def collate(split: TokenizedSplit, indices: Sequence[int], pad_id: int, *, width: int | None = None) -> dict[str, torch.Tensor]:
    """Pad the rows at ``indices`` to the longest of them (or to ``width``): the HF forward's inputs."""
    rows = [split.input_ids[i] for i in indices]
    lengths = torch.tensor([len(row) for row in rows])
    width = max(width or 0, int(lengths.max()))
    real = torch.arange(width) < lengths[:, None]  # right-padded: where each row's tokens go
    batch = {
        "input_ids": _right_padded(rows, real, pad_id), "attention_mask": real.long(),
        "labels": label_tensor([split.labels[i] for i in indices]),
    }
    if split.token_type_ids is not None:
        batch["token_type_ids"] = _right_padded([split.token_type_ids[i] for i in indices], real, 0)
    return batch


def _right_padded(rows: list[list[int]], real: torch.Tensor, fill: int) -> torch.Tensor:
    # A few tensor operations a batch, not two a row: the host collates every training step.
    grid = torch.full(real.shape, fill, dtype=torch.long)
    grid[real] = torch.tensor(list(itertools.chain.from_iterable(rows)), dtype=torch.long)
    return grid


def label_tensor(labels: Sequence[Any]) -> torch.Tensor:
    """Targets as the HF loss takes them: class ids (ints) as int64, regression and multi-hot floats as float32."""
    return torch.tensor(labels, dtype=torch.long if isinstance(labels[0], int) else torch.float32)


def packing(attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Where a right-padded batch's real tokens sit, for the packed forward (computed where the mask is).

    ``packed_index``: packed position -> flat grid position; ``cls_index``: each row's first
    packed position; ``cu_seqlens``: cumulative row lengths from 0 (int32, as FlashAttention's
    varlen kernels take them).
    """
    lengths = attention_mask.sum(dim=1)
    cu_seqlens = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=attention_mask.device)
    torch.cumsum(lengths, 0, out=cu_seqlens[1:])
    return {
        "packed_index": attention_mask.flatten().nonzero().squeeze(1),
        "cls_index": cu_seqlens[:-1].long(),
        "cu_seqlens": cu_seqlens,
    }


@dataclass(frozen=True)
class Collation:
    """How batches are collated for one run: padding id, bucket widths, packed metadata, pinning."""

    pad_id: int
    buckets: tuple[int, ...] | None = None
    packed: bool = False  # add the packed forward's index tensors
    pin: bool = False  # pin the tensors (CUDA: asynchronous copies); never in DataLoader workers

    def __call__(self, split: TokenizedSplit, indices: Sequence[int]) -> Batch:
        """:func:`collate` plus what the step needs: counts, and for the packed forward its index tensors."""
        with record_function(COLLATE_RANGE):  # host work: the profiler test tells it from the step's
            lengths = [len(split.input_ids[i]) for i in indices]
            inputs = collate(split, indices, self.pad_id, width=bucket_width(max(lengths), self.buckets))
            if self.packed:
                inputs.update(packing(inputs["attention_mask"]))
            if self.pin:
                inputs = {k: v.pin_memory() for k, v in inputs.items()}
            return Batch(inputs, len(indices), sum(lengths), inputs["attention_mask"].numel(), (tuple(inputs["input_ids"].shape),))


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
    split: TokenizedSplit, batch_size: int, collation: Collation, generator: torch.Generator,
    *, length_grouping: bool = False, chunk_by_length: bool = False, start: int = 0,
) -> Iterator[list[Batch]]:
    """One epoch in a random order drawn from ``generator``: each batch as a list of padded chunks.

    ``start`` skips the epoch's first batches (a resumed run) without collating them.
    """
    for indices in epoch_batches(split, batch_size, generator, length_grouping=length_grouping)[start:]:
        parts = length_chunks(split, indices) if chunk_by_length else [list(indices)]
        yield [collation(split, part) for part in parts]


class _BatchDataset(torch.utils.data.Dataset):
    """Item ``indices`` (one batch's row indices) -> that batch's padded chunks; run in DataLoader workers."""

    def __init__(self, split: TokenizedSplit, collation: Collation, chunk_by_length: bool) -> None:
        self.split, self.collation, self.chunk_by_length = split, collation, chunk_by_length

    def __getitem__(self, indices: list[int]) -> list[Batch]:
        parts = length_chunks(self.split, indices) if self.chunk_by_length else [list(indices)]
        return [self.collation(self.split, part) for part in parts]


class _EpochSampler(torch.utils.data.Sampler):
    """The current epoch's batches, set before each pass; the main process draws them, workers collate."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _as_is(item: list[Batch]) -> list[Batch]:
    return item


class TrainBatches:
    """Each epoch's batches (see :func:`train_batches`), collated in process or by DataLoader workers.

    The batch order is always drawn in this process from the run's generator, so it does not
    depend on ``num_workers``; workers only pad and chunk (in order), and the DataLoader pins
    in this process when ``collation.pin``. One DataLoader serves the whole run, so
    ``persistent_workers`` keeps its workers across epochs.
    """

    def __init__(
        self, split: TokenizedSplit, batch_size: int, collation: Collation, *, length_grouping: bool, chunk_by_length: bool,
        num_workers: int = 0, persistent_workers: bool = False, prefetch_factor: int | None = None,
    ) -> None:
        self.split, self.batch_size, self.collation = split, batch_size, collation
        self.length_grouping, self.chunk_by_length = length_grouping, chunk_by_length
        self.loader: torch.utils.data.DataLoader | None = None
        if num_workers > 0:
            self.sampler = _EpochSampler()
            in_worker = dataclasses.replace(collation, pin=False)
            self.loader = torch.utils.data.DataLoader(
                _BatchDataset(split, in_worker, chunk_by_length), batch_size=None, sampler=self.sampler, collate_fn=_as_is,
                num_workers=num_workers, pin_memory=collation.pin, persistent_workers=persistent_workers,
                prefetch_factor=prefetch_factor,
                # Its own generator: iterating must not draw from torch's global RNG (dropout's).
                generator=torch.Generator().manual_seed(0),
            )

    def epoch(self, generator: torch.Generator, start: int = 0) -> Iterator[list[Batch]]:
        if self.loader is None:
            yield from train_batches(
                self.split, self.batch_size, self.collation, generator,
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


def to_device(inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Copy a batch's tensors to ``device``: asynchronous from pinned memory, a no-op on the CPU."""
    return {k: v.to(device, non_blocking=True) for k, v in inputs.items()}


def padding_efficiency(batch: Batch) -> float:
    """Real tokens / processed tokens of one batch (the loop sums both over an epoch)."""
    return batch.real_tokens / batch.padded_tokens


def eval_batches(split: TokenizedSplit, batch_size: int, collation: Collation) -> Iterator[tuple[list[int], Batch]]:
    """Batches of similar length (less padding); yields the original indices to restore order."""
    order = sorted(range(len(split)), key=lambda i: len(split.input_ids[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        yield indices, collation(split, indices)


def window_shape(window: Sequence[Sequence[Batch]]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Every batch's :attr:`Batch.shape` in an accumulation window: a new one is start-up cost."""
    return tuple(chunk.shape for chunks in window for chunk in chunks)


def window_rows(window: Sequence[Sequence[Batch]]) -> int:
    """The rows an accumulation window trains on."""
    return sum(chunk.rows for chunks in window for chunk in chunks)
