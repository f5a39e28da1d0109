"""The one place that decides a trial's speed knobs per device, each default with its evidence.

A config field left ``None`` takes the device's default; a value the user gave always wins.
What was measured on a 2-core CPU is never the GPU default without a GPU figure: GPU defaults
below cite the figures in ``../shared/gpu/README.md`` (H100, main at ec43d9b), and those not
yet measured on a GPU say so (``PENDING_GPU``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trial_executor._config import CHUNKING_MIN_PARAMS, TrainConfig
from trial_executor._precisions import BY_NAME
from trial_executor.model import varlen_attention_available

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
    compile_step: bool = False
    capture_step: bool = False
    master_weights: bool = False


# Each knob's default per device type, beside the evidence for it: (value, why).
_BY_KNOB: dict[str, dict[str, tuple[Any, str]]] = {
    "chunk_by_length": {
        "cpu": (None, "CPU benchmark: HF forward, >= 5M params gains ~40%, tiny-bert loses ~35%"),
        "cuda": (False, "H100: HF forward + chunking made bf16 and fp16 3.6x slower than fp32"),
    },
    "packed_forward": {
        "cpu": (True, "benchmarks/RESULTS.md: packed minilm-l6 fastest in fp32 and bf16"),
        "cuda": (True, "H100 bert-base: packed 1305 vs HF forward 427 samples/s (SST-2, batch 32, fp32)"),
    },
    "buckets": {
        "cpu": (False, "dynamic padding measured best; chunks already cut on multiples of 8 rows"),
        "cuda": (True, f"one-time setup per new width in half precision (H100, SST-2: dozens of widths); {PENDING_GPU}"),
    },
    "torch_compile": {
        "cpu": (False, "dynamic-shape compile recompiles per width; not measured faster"),
        "cuda": (False, f"H100: dynamic-shape compile 108 samples/s (recompiles); reduce-overhead per bucket {PENDING_GPU}"),
    },
    "varlen_attention": {
        "cpu": (False, "FlashAttention varlen is CUDA only"),
        "cuda": (False, f"no attention-probability dropout on that path; speed and accuracy {PENDING_GPU}"),
    },
    "host_read_every": {
        "cpu": (1, "reading a CPU tensor costs nothing: every step, failures stop at once"),
        "cuda": (8, "each read syncs the GPU; 8 steps keeps the queue full"),
    },
    "compile_step": {
        "cpu": (False, "inductor compile per token bucket costs seconds per trial; not measured faster on a CPU"),
        "cuda": (False, f"H200, torch 2.11: the captured update segfaulted (session 22); forward captured, update not: {PENDING_GPU}"),
    },
    "capture_step": {
        "cpu": (False, "CUDA graphs are CUDA only"),
        "cuda": (False, f"the whole step recorded by hand as a CUDA graph per bucket, no compiler: {PENDING_GPU} (benchmarks.step_capture)"),
    },
    "master_weights": {
        "cpu": (False, "2-core Xeon with AMX, batch 32, packed: minilm-l6 107 ms/step against autocast's 103, tiny-bert 6.4 and 6.4"),
        "cuda": (False, f"a plain loop with bf16 weights ran 1.40x autocast at 32 x 32 tokens on an H100 (shared/gpu); ours {PENDING_GPU}"),
    },
}
DEVICE_DEFAULTS: dict[str, DeviceDefaults] = {
    device: DeviceDefaults(
        **{knob: by_device[device][0] for knob, by_device in _BY_KNOB.items()},
        evidence={knob: by_device[device][1] for knob, by_device in _BY_KNOB.items()},
    )
    for device in ("cpu", "cuda")
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
    # The whole step on static shapes, one backward, per bucket: compiled (trial_executor.train._compiled), or recorded
    # by hand as CUDA graphs where capture_step (trial_executor.train._captured).
    compile_step: bool = False
    capture_step: bool = False
    compile_refused: str | None = None  # why a requested capture or compiled step did not run
    master_weights: bool = False  # bf16 computed on copies of float32 master weights (trial_executor.precision._master_weights)
    master_weights_refused: str | None = None  # why master_weights, asked for, did not run (autocast did)


def defaults_for(device: torch.device) -> DeviceDefaults:
    return DEVICE_DEFAULTS.get(device.type, DEVICE_DEFAULTS["cpu"])


def multiple_backward_reason(config: TrainConfig, chunk_by_length: bool) -> str | None:
    """Why a step must not be captured as CUDA graphs: more than one backward per optimizer step."""
    # A captured backward writes its gradients into the graph's own buffers: a second replay
    # before the optimizer step overwrites the first (pytorch/pytorch#169545, #96693).
    if config.grad_accum_steps > 1:
        return f"grad_accum_steps={config.grad_accum_steps}: more than one backward per optimizer step is never captured"
    if chunk_by_length:
        return "chunk_by_length: one backward per chunk, more than one per optimizer step, is never captured"
    return None


def compile_step_refusal(config: TrainConfig, chunk_by_length: bool) -> str | None:
    """Why the whole step cannot be compiled (it then runs eager), or ``None``."""
    reason = multiple_backward_reason(config, chunk_by_length)
    if reason is None and BY_NAME[config.fp_precision].grad_scaler:
        reason = "fp16: GradScaler's unscale, inf check and skipped step are not captured; the step runs eager"
    if reason is None and config.gradient_checkpointing:
        reason = "gradient_checkpointing: recomputation inside a compiled step is not verified; the step runs eager"
    return reason


def whole_step_refusal(config: TrainConfig, chunk_by_length: bool, device: torch.device, *, captured: bool, sync_free_forward: bool) -> str | None:
    """Why the whole step asked for cannot run (the step then runs eager), or ``None``: compiled, or recorded when ``captured``.

    ``sync_free_forward``: the trial's forward reads no device value on the host (the packed forward, or an HF
    forward given the 4D padding mask: ``tests/executor/train/test_no_sync.py``); a read fails a recording.
    """
    if captured and device.type != "cuda":
        return f"capture_step: CUDA graphs are CUDA only, not {device.type}; the step runs eager"
    if captured and not sync_free_forward:
        return "capture_step: this model's forward may read the device on the host, which a recording cannot; the step runs eager"
    return compile_step_refusal(config, chunk_by_length)


def master_weights_refusal(config: TrainConfig, whole_step: bool, captured: bool = False) -> str | None:
    """Why ``master_weights``, asked for with a half precision, cannot run (autocast then does), or ``None``.

    ``whole_step``: the whole step runs, compiled, or recorded when ``captured``.
    """
    if BY_NAME[config.fp_precision].grad_scaler:  # as PrecisionPolicy.keep_master_weights requires
        return f"{config.fp_precision}: master weights are for bf16 only (not with GradScaler's loss scaling); autocast runs"
    if whole_step:
        how = "capture_step: the recorded step replays" if captured else "compile_step: the compiled step fuses"
        return f"{how} autocast's casts itself; master weights run eager steps only"
    if config.gradient_checkpointing:
        return "gradient_checkpointing: the recomputed forward would not run on the bf16 copies"
    return None


def resolve_knobs(
    config: TrainConfig, device: torch.device, *, packed_supported: bool, total_params: int, varlen_supported: bool | None = None,
    padding_mask_forward: bool = False,
) -> Knobs:
    """The knobs for ``config`` on ``device``; ``packed_supported``: the model has a packed forward;
    ``padding_mask_forward``: its HF forward takes the 4D padding mask (``model.PaddingMaskForward``).

    ``varlen_supported`` (``None``: this process's torch and device decide): FlashAttention's varlen
    entry point can run, so a trial never reports varlen attention on where it could not run.
    """
    base = defaults_for(device)
    if varlen_supported is None:
        varlen_supported = varlen_attention_available()

    def pick(value: bool | None, default: bool) -> bool:
        return default if value is None else value

    packed = pick(config.packed_forward, base.packed_forward) and packed_supported
    chunk_default = base.chunk_by_length
    if chunk_default is None:
        # Packed, only the attention product is padded: chunks would save little and cost calls.
        chunk_default = not packed and total_params >= CHUNKING_MIN_PARAMS
    captured = pick(config.capture_step, base.capture_step)
    whole_step = captured or pick(config.compile_step, base.compile_step)
    # A whole step asked for wins over chunking by default (chunks are more than one backward).
    chunk = pick(config.chunk_by_length, chunk_default and not whole_step)
    buckets = pick(config.buckets, base.buckets)
    compile_ = pick(config.torch_compile, base.torch_compile)
    sync_free = packed or padding_mask_forward
    refused = whole_step_refusal(config, chunk, device, captured=captured, sync_free_forward=sync_free) if whole_step else None
    whole_step, captured = whole_step and refused is None, captured and refused is None
    # Static shapes (buckets, HF forward: the packed token count varies) can be captured as CUDA graphs.
    static = buckets and not packed
    capture = compile_ and device.type == "cuda" and static and not whole_step
    if capture and refused is None:
        refused = multiple_backward_reason(config, chunk)
        capture = refused is None
    half = BY_NAME[config.fp_precision].autocast_dtype is not None
    # fp32 and tf32 have no half-precision copies to make: master weights do not apply, as varlen does not.
    master = pick(config.master_weights, base.master_weights) and half
    # A default that does not apply (a compiled step) is no refusal: only a value asked for is.
    master_refused = master_weights_refusal(config, whole_step, captured) if master else None
    return Knobs(
        chunk_by_length=chunk,
        packed_forward=packed,
        # The compiled step's HF forward pads widths to buckets; the packed one pads token counts.
        buckets=buckets or (whole_step and not packed),
        torch_compile=compile_ and not whole_step,  # a compiled step compiles its own regions
        compile_mode="reduce-overhead" if capture else None,
        compile_dynamic=not static,
        varlen_attention=packed and half and device.type == "cuda" and varlen_supported and pick(config.varlen_attention, base.varlen_attention),
        host_read_every=base.host_read_every,
        compile_step=whole_step,
        capture_step=captured,
        compile_refused=refused,
        master_weights=master and master_refused is None,
        master_weights_refused=master_refused if config.master_weights else None,
    )
