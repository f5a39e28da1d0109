"""Per-device speed knobs: decided in one place, the CPU keeps its measured defaults, the user's value wins."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trial_executor import TrainConfig
from trial_executor.device._defaults import DEVICE_DEFAULTS, PENDING_GPU, DeviceDefaults, resolve_knobs

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # resolve_knobs reads the device type only
BIG = 22_000_000  # minilm-l6's size: above the CPU's chunking threshold


def test_cpu_keeps_its_measured_defaults() -> None:
    packed = resolve_knobs(TrainConfig(), CPU, packed_supported=True, total_params=BIG)
    assert (packed.packed_forward, packed.chunk_by_length, packed.buckets, packed.torch_compile) == (True, False, False, False)
    assert packed.host_read_every == 1 and not packed.varlen_attention
    hf_big = resolve_knobs(TrainConfig(), CPU, packed_supported=False, total_params=BIG)
    hf_tiny = resolve_knobs(TrainConfig(), CPU, packed_supported=False, total_params=300_000)
    assert hf_big.chunk_by_length and not hf_tiny.chunk_by_length


def test_cuda_defaults_follow_the_gpu_figures() -> None:
    hf_big = resolve_knobs(TrainConfig(fp_precision="bf16"), CUDA, packed_supported=False, total_params=BIG)
    assert not hf_big.chunk_by_length  # H100: chunking made bf16 3.6x slower than fp32
    knobs = resolve_knobs(TrainConfig(fp_precision="bf16"), CUDA, packed_supported=True, total_params=BIG)
    assert knobs.packed_forward and knobs.buckets and knobs.host_read_every > 1 and not knobs.varlen_attention
    for name in ("buckets", "torch_compile", "varlen_attention"):
        assert PENDING_GPU in DEVICE_DEFAULTS["cuda"].evidence[name]
    fields = {f.name for f in dataclasses.fields(DeviceDefaults)} - {"evidence"}
    assert all(set(d.evidence) == fields for d in DEVICE_DEFAULTS.values())


@pytest.mark.parametrize(
    ("config", "packed_supported", "expected"),
    [
        (TrainConfig(torch_compile=True, packed_forward=False), True, ("reduce-overhead", False)),
        (TrainConfig(torch_compile=True), True, (None, True)),  # packed: the token count varies
        (TrainConfig(torch_compile=True, buckets=False, packed_forward=False), True, (None, True)),
    ],
)
def test_cuda_graphs_only_for_static_shapes(config: TrainConfig, packed_supported: bool, expected: tuple[str | None, bool]) -> None:
    knobs = resolve_knobs(config, CUDA, packed_supported=packed_supported, total_params=BIG)
    assert (knobs.compile_mode, knobs.compile_dynamic) == expected
    assert resolve_knobs(config, CPU, packed_supported=packed_supported, total_params=BIG).compile_mode is None


def test_the_users_values_win() -> None:
    config = TrainConfig(
        fp_precision="bf16", chunk_by_length=True, packed_forward=False, buckets=False, torch_compile=True, varlen_attention=True,
    )
    knobs = resolve_knobs(config, CUDA, packed_supported=True, total_params=BIG)
    assert (knobs.chunk_by_length, knobs.packed_forward, knobs.buckets, knobs.torch_compile) == (True, False, False, True)
    assert not knobs.varlen_attention  # varlen needs the packed forward
    varlen = resolve_knobs(
        TrainConfig(fp_precision="bf16", varlen_attention=True), CUDA, packed_supported=True, total_params=BIG, varlen_supported=True,
    )
    assert varlen.varlen_attention
    # A torch without FlashAttention's varlen entry point (< 2.10) reports it off, not on.
    assert not resolve_knobs(
        TrainConfig(fp_precision="bf16", varlen_attention=True), CUDA, packed_supported=True, total_params=BIG, varlen_supported=False,
    ).varlen_attention
    fp32 = resolve_knobs(TrainConfig(varlen_attention=True), CUDA, packed_supported=True, total_params=BIG)
    assert not fp32.varlen_attention  # FlashAttention needs fp16/bf16


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        ({"fp_precision": "bf16"}, None),
        ({"fp_precision": "fp16"}, "fp16: master weights are for bf16 only"),
        ({"fp_precision": "bf16", "compile_step": True}, "compile_step: the compiled step fuses autocast's casts itself"),
        ({"fp_precision": "bf16", "capture_step": True}, "capture_step: the recorded step replays autocast's casts"),
        ({"fp_precision": "bf16", "gradient_checkpointing": True}, "gradient_checkpointing: the recomputed forward"),
    ],
)
def test_master_weights_run_in_eager_bf16_only_and_say_why_not(changes: dict[str, object], refused: str | None) -> None:
    knobs = resolve_knobs(TrainConfig(master_weights=True, **changes), CUDA, packed_supported=True, total_params=BIG)
    assert knobs.master_weights is (refused is None)
    assert (knobs.master_weights_refused or "").startswith(refused or "")
    assert (refused is None) is (knobs.master_weights_refused is None)
    # Left to the device's default (off until a GPU measures it), nothing is refused.
    default = resolve_knobs(TrainConfig(**changes), CUDA, packed_supported=True, total_params=BIG)
    assert not default.master_weights and default.master_weights_refused is None


@pytest.mark.parametrize(
    ("changes", "device", "refused"),
    [
        ({"fp_precision": "bf16"}, CUDA, None),
        ({"fp_precision": "bf16"}, CPU, "capture_step: CUDA graphs are CUDA only, not cpu; the step runs eager"),
        ({"grad_accum_steps": 2}, CUDA, "grad_accum_steps=2: more than one backward per optimizer step is never captured"),
        ({"fp_precision": "fp16"}, CUDA, "fp16: GradScaler's unscale, inf check and skipped step are not captured"),
        ({"chunk_by_length": True}, CUDA, "chunk_by_length: one backward per chunk"),
    ],
)
def test_capture_step_records_one_backward_on_cuda_only_else_the_step_runs_eager(
    changes: dict[str, object], device: torch.device, refused: str | None,
) -> None:
    knobs = resolve_knobs(TrainConfig(capture_step=True, **changes), device, packed_supported=True, total_params=BIG)
    # The whole step on static shapes (compile_step), recorded rather than compiled; or neither, with the reason.
    assert (knobs.capture_step, knobs.compile_step) == ((True, True) if refused is None else (False, False))
    assert (knobs.compile_refused or "").startswith(refused or "") and (refused is None) is (knobs.compile_refused is None)
    assert not knobs.torch_compile and knobs.compile_mode is None  # the recording is the only graph
    default = resolve_knobs(TrainConfig(**changes), device, packed_supported=True, total_params=BIG)
    assert not default.capture_step and default.compile_refused is None  # off by default until a GPU measures it
    assert PENDING_GPU in DEVICE_DEFAULTS["cuda"].evidence["capture_step"]
    with pytest.raises(ValueError, match="compile_step and capture_step are two ways to run the same whole step: turn one off"):
        TrainConfig(capture_step=True, compile_step=True)


def test_capture_step_needs_a_forward_known_to_read_nothing_on_the_host() -> None:
    # The packed forward, or an HF forward given the 4D padding mask (tests/executor/train/test_no_sync.py); another
    # architecture's own forward may read the device (a 2D mask's .all(), a loss's nonzero), which fails a recording.
    config = TrainConfig(fp_precision="bf16", capture_step=True)
    packed = resolve_knobs(config, CUDA, packed_supported=True, total_params=BIG)
    masked = resolve_knobs(config, CUDA, packed_supported=False, total_params=BIG, padding_mask_forward=True)
    other = resolve_knobs(config, CUDA, packed_supported=False, total_params=BIG)
    assert packed.capture_step and masked.capture_step and not other.capture_step and not other.compile_step
    assert other.compile_refused == (
        "capture_step: this model's forward may read the device on the host, which a recording cannot; the step runs eager"
    )
    unpacked = resolve_knobs(config.replace(packed_forward=False), CUDA, packed_supported=True, total_params=BIG)
    assert not unpacked.capture_step  # BERT on its HF forward without the mask's applying: not known to be free of reads
    compiled = resolve_knobs(TrainConfig(fp_precision="bf16", compile_step=True), CUDA, packed_supported=False, total_params=BIG)
    assert compiled.compile_step  # a compiler breaks its graph at a host read instead of failing
