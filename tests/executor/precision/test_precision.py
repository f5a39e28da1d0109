"""PrecisionPolicy on the CPU: autocast dtypes, GradScaler only for fp16, TF32 state reset."""

from __future__ import annotations

import pytest
import torch

from trial_executor import PrecisionPolicy, TrainConfig, UnsupportedPrecisionError, demo_dataset, run_trial, tf32_enabled
from trial_executor._precisions import BY_NAME
from trial_executor.precision import GradScalerPolicy, cpu_instructions, emulated_precisions, set_tf32

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("name", "dtype", "scaler"),
    [("fp32", None, False), ("fp16", torch.float16, True), ("bf16", torch.bfloat16, False)],
)
def test_policy_on_cpu(name: str, dtype: torch.dtype | None, scaler: bool) -> None:
    policy = PrecisionPolicy.resolve(name, CPU)
    assert policy.autocast_dtype == dtype
    assert policy.uses_grad_scaler is scaler
    assert isinstance(policy, GradScalerPolicy) is scaler
    linear = torch.nn.Linear(8, 8)
    with policy.autocast():
        out = linear(torch.randn(2, 8))
    assert out.dtype == (dtype or torch.float32)


def test_tf32_is_refused_on_cpu_not_downgraded() -> None:
    with pytest.raises(UnsupportedPrecisionError, match="tf32"):
        PrecisionPolicy.resolve("tf32", CPU)


def test_unknown_precision_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown precision"):
        PrecisionPolicy.resolve("fp8", CPU)


def test_every_trial_sets_the_global_flags_for_itself_and_gives_the_callers_back() -> None:
    # A previous trial (or user code) left TF32 and cudnn.benchmark on: an fp32 trial trains with
    # both off, and the caller finds its own settings again afterwards.
    new_api = hasattr(torch.backends.cuda.matmul, "fp32_precision")
    set_tf32(True)
    torch.backends.cudnn.benchmark = True
    during: list[tuple[bool, bool, str | None]] = []

    def report(step: int, metrics: dict[str, float]) -> bool:
        conv = torch.backends.cudnn.conv.fp32_precision if new_api else None
        during.append((tf32_enabled(), torch.backends.cudnn.benchmark, conv))
        return False

    try:
        data = demo_dataset(n_train=64, n_valid=16)
        run_trial(TrainConfig(fp_precision="fp32", epochs=1, batch_size=32, eval_every=1, device="cpu"), data, report)
        assert during == [(False, False, "ieee" if new_api else None)] * 2
        assert tf32_enabled() and torch.backends.cudnn.benchmark is True
        if new_api:
            assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    finally:
        set_tf32(False)
        torch.backends.cudnn.benchmark = False


def _fp16_steps(policy: PrecisionPolicy, steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    for _ in range(steps):
        with policy.autocast():
            loss = model(torch.randn(4, 8)).float().pow(2).mean()
        policy.backward(loss)
        policy.optimizer_step(optimizer, clip=lambda: None)
        optimizer.zero_grad()


def test_a_resumed_fp16_policy_goes_on_counting_its_skipped_steps() -> None:
    policy = PrecisionPolicy.resolve("fp16", CPU)
    policy.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # every step's fp16 gradients are inf
    _fp16_steps(policy, 3)
    assert policy.skipped_steps() == 3
    resumed = PrecisionPolicy.resolve("fp16", CPU)
    resumed.load_state_dict(policy.state_dict())
    assert resumed.skipped_steps() == 3 and resumed.scaler.get_scale() == policy.scaler.get_scale() == 2.0**37
    _fp16_steps(resumed, 2)  # the streak goes on from 3: the non-finite guard sees 5 in a row
    assert resumed.skipped_steps() == 5 and resumed.read_skip_streak() == 5
    # A checkpoint written before the counts were saved holds the scaler's state alone: it still loads.
    older = PrecisionPolicy.resolve("fp16", CPU)
    older.load_state_dict(policy.scaler.state_dict())
    assert older.skipped_steps() == 0 and older.scaler.get_scale() == 2.0**37


def test_tf32_policy_sets_tf32_flags() -> None:
    policy = PrecisionPolicy(BY_NAME["tf32"], torch.device("cuda"))  # built, not resolved: this machine may have no GPU
    try:
        policy.apply_global_state(cudnn_benchmark=True)
        assert tf32_enabled()
        assert torch.backends.cudnn.benchmark is True
    finally:
        set_tf32(False)
        torch.backends.cudnn.benchmark = False


def test_a_cpu_without_a_precisions_instructions_is_said_to_emulate_it() -> None:
    cpu = torch.device("cpu")
    # An AMD EPYC with avx512_bf16 but no avx512_fp16 (fp16 ran at 0.07x fp32 there), a Xeon with AMX, an AVX2-only CPU.
    assert emulated_precisions(cpu, {"avx2", "avx512f", "avx512_bf16"}) == ["fp16"]
    assert emulated_precisions(cpu, {"avx2", "amx_bf16", "amx_tile", "avx512_fp16"}) == []
    assert emulated_precisions(cpu, {"avx2", "fma"}) == ["fp16", "bf16"]
    assert emulated_precisions(cpu, set()) == []  # flags unknown (not Linux, not x86): nothing claimed
    assert emulated_precisions(torch.device("cuda"), {"avx2"}) == []  # a GPU's matmuls are not the CPU's
    assert emulated_precisions(cpu) == emulated_precisions(cpu, cpu_instructions())  # this machine's flags by default

