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


def test_global_flags_are_set_by_every_trial() -> None:
    # A previous trial (or user code) left TF32 and cudnn.benchmark on; an fp32 trial must reset both.
    set_tf32(True)
    torch.backends.cudnn.benchmark = True
    assert tf32_enabled()
    data = demo_dataset(n_train=64, n_valid=16)
    run_trial(TrainConfig(fp_precision="fp32", epochs=1, batch_size=32, eval_every=0, device="cpu"), data)
    assert not tf32_enabled()
    assert torch.backends.cudnn.benchmark is False
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert torch.backends.cudnn.conv.fp32_precision == "ieee"


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

