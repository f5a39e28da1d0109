"""The one place that decides a trial's speed knobs per device, each default with its evidence.

A config field left ``None`` takes the device's default; a value the user gave always wins.
What was measured on a 2-core CPU is never the GPU default without a GPU figure: GPU defaults
below cite the figures in ``../shared/gpu/README.md`` (H100, main at ec43d9b), and those not
yet measured on a GPU say so (``PENDING_GPU``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trial_executor._config import CHUNKING_MIN_PARAMS, TrainConfig
from trial_executor._precisions import BY_NAME

PENDING_GPU = "pending a GPU measurement"


@dataclass(frozen=True)
class DeviceDefaults:
    """Defaults for one device type; ``chunk_by_length=None`` means by model size (CPU rule)."""

    chunk_by_length: bool | None
    packed_forward: bool
    buckets: bool
    torch_compile: bool
    varlen_attention: bool
    host_read_every: int  # optimizer steps between reads of the loss on the host (a GPU syncs there)
    evidence: dict[str, str]


DEVICE_DEFAULTS: dict[str, DeviceDefaults] = {
    "cpu": DeviceDefaults(
        chunk_by_length=None, packed_forward=True, buckets=False, torch_compile=False, varlen_attention=False,
        host_read_every=1,
        evidence={
            "chunk_by_length": "CPU benchmark: HF forward, >= 5M params gains ~40%, tiny-bert loses ~35%",
            "packed_forward": "benchmarks/RESULTS.md: packed minilm-l6 fastest in fp32 and bf16",
            "buckets": "dynamic padding measured best; chunks already cut on multiples of 8 rows",
            "torch_compile": "dynamic-shape compile recompiles per width; not measured faster",
            "varlen_attention": "FlashAttention varlen is CUDA only",
            "host_read_every": "reading a CPU tensor costs nothing: every step, failures stop at once",
        },
    ),
    "cuda": DeviceDefaults(
        chunk_by_length=False, packed_forward=True, buckets=True, torch_compile=False, varlen_attention=False,
        host_read_every=8,
        evidence={
            "chunk_by_length": "H100: HF forward + chunking made bf16 and fp16 3.6x slower than fp32",
            "packed_forward": "H100 bert-base: packed 1305 vs HF forward 427 samples/s (SST-2, batch 32, fp32)",
            "buckets": f"one-time setup per new width in half precision (H100, SST-2: dozens of widths); {PENDING_GPU}",
            "torch_compile": f"H100: dynamic-shape compile 108 samples/s (recompiles); reduce-overhead per bucket {PENDING_GPU}",
            "varlen_attention": f"no attention-probability dropout on that path; speed and accuracy {PENDING_GPU}",
            "host_read_every": "each read syncs the GPU; 8 steps keeps the queue full",
        },
    ),
}


@dataclass(frozen=True)
class Knobs:
    """What a trial runs with, every default resolved."""

    chunk_by_length: bool
    packed_forward: bool
    buckets: bool
    torch_compile: bool
    compile_mode: str | None  # torch.compile mode; "reduce-overhead" captures CUDA graphs
    compile_dynamic: bool
    varlen_attention: bool
    host_read_every: int


def defaults_for(device: torch.device) -> DeviceDefaults:
    return DEVICE_DEFAULTS.get(device.type, DEVICE_DEFAULTS["cpu"])


def resolve_knobs(config: TrainConfig, device: torch.device, *, packed_supported: bool, total_params: int) -> Knobs:
    """The knobs for ``config`` on ``device``; ``packed_supported``: the model has a packed forward."""
    base = defaults_for(device)

    def pick(value: bool | None, default: bool) -> bool:
        return default if value is None else value

    packed = pick(config.packed_forward, base.packed_forward) and packed_supported
    chunk_default = base.chunk_by_length
    if chunk_default is None:
        # Packed, only the attention product is padded: chunks would save little and cost calls.
        chunk_default = not packed and total_params >= CHUNKING_MIN_PARAMS
    buckets = pick(config.buckets, base.buckets)
    compile_ = pick(config.torch_compile, base.torch_compile)
    # Static shapes (buckets, HF forward: the packed token count varies) can be captured as CUDA graphs.
    static = buckets and not packed
    capture = compile_ and device.type == "cuda" and static
    half = BY_NAME[config.fp_precision].autocast_dtype is not None
    return Knobs(
        chunk_by_length=pick(config.chunk_by_length, chunk_default),
        packed_forward=packed,
        buckets=buckets,
        torch_compile=compile_,
        compile_mode="reduce-overhead" if capture else None,
        compile_dynamic=not static,
        varlen_attention=packed and half and device.type == "cuda" and pick(config.varlen_attention, base.varlen_attention),
        host_read_every=base.host_read_every,
    )
