"""A short autocast speed test per precision: random tokens through a random-init BERT.

Numbers from here say what a precision buys on this machine before a study spends hours on
it: time per training step (forward, backward, AdamW), speedup against fp32, peak memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AutoModelForSequenceClassification, BertConfig, PretrainedConfig

from trial_executor import PRECISIONS, PRESETS, PrecisionPolicy, UnsupportedPrecisionError
from trial_executor._hardware import peak_memory_mb, release_memory, reset_peak_memory

_SMALL_VOCAB = 8192


def _small_bert() -> PretrainedConfig:
    # Wide enough that matmuls, not per-op overhead, dominate a step (unlike tiny-bert's 64), shallow
    # enough that the default check takes seconds per precision on 2 CPU cores.
    return BertConfig(
        vocab_size=_SMALL_VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024
    )


# Random-init configs only: no download, and the weights do not change the speed of a step.
CHECK_MODELS: dict[str, Callable[[], PretrainedConfig]] = {
    **{name: (lambda build=build: build(_SMALL_VOCAB)) for name, build in PRESETS.items()},
    "small-bert": _small_bert,
    "bert-base-random": BertConfig,  # BertConfig's defaults are bert-base: 12 layers, 768 hidden, 110M parameters
}
DEFAULT_CHECK_MODEL = "small-bert"


@dataclass(frozen=True)
class SpeedRow:
    """One precision's result; ``note`` says why there are no numbers (unsupported, out of memory)."""

    precision: str
    ms_per_step: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    peak_memory_mb: float | None = None
    final_loss: float | None = None
    note: str = ""


def model_config(name: str) -> PretrainedConfig:
    config = CHECK_MODELS[name]()
    config.num_labels = 2
    return config


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_steps(
    policy: PrecisionPolicy, config: PretrainedConfig, device: torch.device, batch: dict[str, torch.Tensor],
    warmup: int, steps: int, seed: int,
) -> tuple[float, float]:
    """Seconds for ``steps`` timed training steps after ``warmup`` untimed ones, and the last loss."""
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa").to(device).train()
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    except RuntimeError:  # no fused AdamW for this device in this torch
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = policy.grad_scaler()
    start = 0.0
    loss = torch.zeros(())
    for i in range(warmup + steps):
        if i == warmup:
            _sync(device)
            start = time.perf_counter()
        with policy.autocast():
            loss = model(**batch).loss
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    _sync(device)
    return time.perf_counter() - start, float(loss.detach().float().item())


def speed_test(
    model: str, device: torch.device, *, batch_size: int, seq_len: int, steps: int, warmup: int = 2, seed: int = 0
) -> list[SpeedRow]:
    """Time every precision on ``device``; fp32 runs first and is the reference for speedups."""
    config = model_config(model)
    generator = torch.Generator().manual_seed(seed)
    batch = {
        "input_ids": torch.randint(5, config.vocab_size, (batch_size, seq_len), generator=generator),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "labels": torch.randint(0, 2, (batch_size,), generator=generator),
    }
    batch = {k: v.to(device) for k, v in batch.items()}
    rows: list[SpeedRow] = []
    reference: float | None = None
    try:
        for precision in PRECISIONS:
            try:
                policy = PrecisionPolicy.resolve(precision, device)
            except UnsupportedPrecisionError as err:
                rows.append(SpeedRow(precision, note=f"unsupported: {str(err).split(': ', 1)[-1]}"))
                continue
            policy.apply_global_state(cudnn_benchmark=False)
            release_memory(device)
            reset_peak_memory(device)
            try:
                seconds, loss = _time_steps(policy, config, device, batch, warmup, steps, seed)
            except (torch.OutOfMemoryError, MemoryError):
                release_memory(device)
                rows.append(SpeedRow(precision, note=f"out of memory at batch size {batch_size}"))
                continue
            peak = peak_memory_mb(device)
            release_memory(device)
            per_step = seconds / steps
            if precision == "fp32":
                reference = per_step
            rows.append(SpeedRow(
                precision, ms_per_step=per_step * 1000, samples_per_s=batch_size / per_step,
                speedup=reference / per_step if reference else None, peak_memory_mb=peak, final_loss=loss,
                note="" if math.isfinite(loss) else "loss is not finite",
            ))
    finally:
        # Leave the process as every trial expects to find it: TF32 off.
        PrecisionPolicy.resolve("fp32", device).apply_global_state(cudnn_benchmark=False)
    return rows


def parameter_count(model: str) -> int:
    with torch.device("meta"):
        built = AutoModelForSequenceClassification.from_config(model_config(model))
    return sum(p.numel() for p in built.parameters())
