"""The training step never makes the host wait for the device (issue 12).

Runs real trials on the CPU under ``torch.profiler`` and fails if an op that reads a tensor's
value on the host (on a GPU: a sync) runs inside a training step, or between steps anywhere but
the loop's periodic host read (or collate, which works on host tensors by design). The CPU has
no device queue, so the profiler is the witness: the same ops on a GPU would stall the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import (
    AlbertConfig,
    AutoModelForSequenceClassification,
    ElectraConfig,
    PretrainedConfig,
    RobertaConfig,
    XLMRobertaConfig,
)

from trial_executor import TextClassificationData, TrainConfig, demo_dataset, run_trial
from trial_executor.batches._batching import COLLATE_RANGE
from trial_executor.model import PaddingMaskForward
from trial_executor.model._loading import train_wordpiece_tokenizer
from trial_executor.train._step import READ_RANGE, STEP_RANGE

# Ops that read a tensor's value on the host (a device sync on a GPU) or give data-dependent shapes.
SYNC_OPS = {
    "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero", "aten::equal",
    "aten::masked_select", "aten::unique", "aten::_unique2", "aten::tolist", "aten::allclose",
}
# The CPU kernel of fused AdamW reads its step count with item(); the CUDA kernel reads it on the device.
_CPU_KERNEL_INTERNALS = {"aten::_fused_adamw_"}


def _ancestors(event: Any) -> list[str]:
    names, parent = [], event.cpu_parent
    while parent is not None:
        names.append(parent.name)
        parent = parent.cpu_parent
    return names


def _syncs_outside_reads(config: TrainConfig, data: TextClassificationData | None = None) -> tuple[int, int, list[str]]:
    """(steps, host reads, sync ops in a step or between steps outside a host read or collate)."""
    data = data or demo_dataset(n_train=240, n_valid=32, seed=0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = run_trial(config, data)
    events = prof.events()
    ranges = {name: [e.time_range for e in events if e.name == name] for name in (STEP_RANGE, READ_RANGE, COLLATE_RANGE)}
    steps = ranges[STEP_RANGE]
    assert len(steps) == result.steps
    begin, end = steps[0].start, steps[-1].end
    bad = []
    for event in events:
        if event.name not in SYNC_OPS or not begin <= event.time_range.start <= end:
            continue
        ancestors = _ancestors(event)
        if _CPU_KERNEL_INTERNALS & set(ancestors):
            continue
        allowed = (READ_RANGE in ancestors or COLLATE_RANGE in ancestors) and STEP_RANGE not in ancestors
        if not allowed:
            bad.append(" <- ".join([event.name, *ancestors]))
    return len(steps), len(ranges[READ_RANGE]), bad


@pytest.mark.parametrize(
    "knobs",
    [
        {"fp_precision": "fp32"},  # packed forward
        {"fp_precision": "fp16", "grad_accum_steps": 2},  # GradScaler: skipped steps counted on the device
        {"fp_precision": "bf16", "packed_forward": False, "chunk_by_length": True, "buckets": True},  # HF forward
        {"fp_precision": "fp32", "model": "tiny-distilbert"},
        {"fp_precision": "bf16", "master_weights": True, "grad_accum_steps": 2},  # bf16 copies of float32 masters
    ],
    ids=["packed-fp32", "packed-fp16-accum", "hf-bf16-chunks-buckets", "distilbert", "packed-bf16-master-accum"],
)
def test_no_host_sync_inside_or_between_training_steps(knobs: dict[str, Any]) -> None:
    config = TrainConfig(**{"batch_size": 16, "max_steps": 6, "eval_every": 0, "device": "cpu", **knobs})
    steps, reads, bad = _syncs_outside_reads(config)
    assert not bad, f"{len(bad)} host syncs in or between steps, e.g. {bad[:3]}"
    assert steps == 6 and 1 <= reads <= steps + 1


def _tiny(kind: str, vocab: int) -> PretrainedConfig:
    """A tiny config of each architecture the README lists beside BERT and DistilBERT (issue 23)."""
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    common = {"vocab_size": vocab, "pad_token_id": 0, "max_position_embeddings": 130, "num_labels": 2}
    if kind == "roberta":
        return RobertaConfig(**sizes, **common)
    if kind == "xlm-roberta":
        return XLMRobertaConfig(**sizes, **common)
    if kind == "electra":
        return ElectraConfig(embedding_size=16, **sizes, **common)
    return AlbertConfig(embedding_size=16, **sizes, **common)


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta", "electra", "albert"])
def test_every_listed_architecture_trains_without_a_host_read(kind: str, tmp_path: Path) -> None:
    """Each gets the 4D boolean mask: transformers' 2D-mask path reads ``mask.all()`` every forward."""
    data = demo_dataset(n_train=240, n_valid=32, seed=0)
    tokenizer = train_wordpiece_tokenizer(data.train_texts)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(_tiny(kind, len(tokenizer)), attn_implementation="sdpa")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert PaddingMaskForward.applies(model)
    config = TrainConfig(model=str(tmp_path), batch_size=16, max_steps=4, eval_every=0, device="cpu", max_length=32)
    steps, _, bad = _syncs_outside_reads(config, data)
    assert steps == 4 and not bad, f"{kind}: {len(bad)} host syncs in or between steps, e.g. {bad[:3]}"


def test_the_witness_sees_a_sync_in_the_step() -> None:
    """The check is not vacuous: a forward that reads a value on the host is caught."""

    def item_in_forward(module: torch.nn.Module, args: Any, output: torch.Tensor) -> None:
        if isinstance(module, torch.nn.LayerNorm):
            output.sum().item()

    handle = torch.nn.modules.module.register_module_forward_hook(item_in_forward)
    try:
        _, _, bad = _syncs_outside_reads(TrainConfig(batch_size=16, max_steps=2, eval_every=0, device="cpu"))
    finally:
        handle.remove()
    assert bad and all(STEP_RANGE in line for line in bad)
