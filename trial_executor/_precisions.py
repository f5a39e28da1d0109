"""Every numeric precision a trial can run in, and its facts: the one table the rest derives from.

Torch-free, so that reading a config or a study does not import torch: the autocast dtype is
named here (``"float16"``) and resolved to a ``torch.dtype`` only when a trial runs
(:mod:`trial_executor.precision._policy`). Adding a precision is one row here; its support check and
policy follow from the row's facts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """One precision: ``autocast_dtype`` (a ``torch`` dtype name; ``None``: float32 forward),
    whether fp16-style loss scaling (``GradScaler``) is needed, whether CUDA matmuls run in TF32,
    the CUDA compute capability it needs (``None``: any), ``cpu_instructions``: the x86 flags (any
    of them) with which a CPU runs its matmuls natively (without them autocast emulates it, far
    slower than fp32), and ``policy``: the :class:`~trial_executor.precision.PrecisionPolicy`
    subclass that runs it, as ``"module:Class"`` (``None``: the plain policy, or
    ``GradScalerPolicy`` when ``grad_scaler``)."""

    name: str
    autocast_dtype: str | None = None
    grad_scaler: bool = False
    tf32: bool = False
    min_cuda_capability: tuple[int, int] | None = None
    cpu_instructions: tuple[str, ...] = ()
    policy: str | None = None


REGISTRY: tuple[Precision, ...] = (
    Precision("fp32"),
    Precision("tf32", tf32=True, min_cuda_capability=(8, 0)),
    # bf16 has fp32's exponent range, so only fp16 gradients underflow without scaling.
    # Measured: fp16 at 0.07x fp32 on an AMD EPYC without avx512_fp16, 0.75x on a Xeon with it (RESULTS.md).
    Precision("fp16", autocast_dtype="float16", grad_scaler=True, cpu_instructions=("avx512_fp16", "amx_fp16")),
    Precision("bf16", autocast_dtype="bfloat16", min_cuda_capability=(8, 0), cpu_instructions=("avx512_bf16", "amx_bf16")),
)
BY_NAME: dict[str, Precision] = {p.name: p for p in REGISTRY}
# In the registry's order: reports list precisions in it.
PRECISIONS: tuple[str, ...] = tuple(BY_NAME)
# Other names for a precision, as some HPO scripts and launchers spell them (accelerate's
# --mixed-precision no|fp16|bf16): normalised when the config is built.
PRECISION_ALIASES: dict[str, str] = {"none": "fp32", "no": "fp32"}
# accelerate's --mixed-precision values -> the precision each fixes.
MIXED_PRECISION: dict[str, str] = {"no": "fp32", **{p.name: p.name for p in REGISTRY if p.autocast_dtype}}
