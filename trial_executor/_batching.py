"""Tokenize once, then batch with dynamic padding (each batch padded to its own longest row)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class TokenizedSplit:
    """Token ids per example (unpadded) and their labels."""

    input_ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


def tokenize(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], labels: Sequence[int], max_length: int) -> TokenizedSplit:
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length)
    return TokenizedSplit(input_ids=encoded["input_ids"], labels=list(labels))


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


def train_batches(split: TokenizedSplit, batch_size: int, pad_id: int, generator: torch.Generator) -> Iterator[dict[str, torch.Tensor]]:
    """One epoch in a random order drawn from ``generator``; the last batch may be short."""
    order = torch.randperm(len(split), generator=generator).tolist()
    for start in range(0, len(order), batch_size):
        yield collate(split, order[start : start + batch_size], pad_id)


def eval_batches(split: TokenizedSplit, batch_size: int, pad_id: int) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Batches of similar length (less padding); yields the original indices to restore order."""
    order = sorted(range(len(split)), key=lambda i: len(split.input_ids[i]))
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        yield indices, collate(split, indices, pad_id)
