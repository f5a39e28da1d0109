"""The one place that decides numeric precision for a trial.

A :class:`PrecisionPolicy` is resolved from a precision name and a device. It says which
autocast dtype to use, whether a ``GradScaler`` is needed, and sets the process-global TF32
and ``cudnn.benchmark`` flags, which leak from one trial into the next unless every trial
sets them explicitly.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from trial_executor._precisions import BY_NAME, PRECISIONS, Precision


class UnsupportedPrecisionError(RuntimeError):
    """The device cannot run the requested precision; the trial must not silently use another."""


def _has_new_tf32_api() -> bool:
    # torch >= 2.9 exposes per-backend ``fp32_precision``; reading the legacy ``allow_tf32``
    # flags after setting the new ones raises, so a process must use one API only.
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def set_tf32(enabled: bool) -> None:
    """Turn TF32 on or off for CUDA matmuls and cuDNN (new API where torch has it)."""
    if _has_new_tf32_api():
        mode = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
        torch.backends.cudnn.rnn.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def tf32_enabled() -> bool:
    """Whether CUDA matmuls currently run in TF32."""
    if _has_new_tf32_api():
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _cpu_autocast_supports(dtype: torch.dtype) -> bool:
    if not torch.amp.autocast_mode.is_autocast_available("cpu"):
        return False
    try:
        with torch.autocast("cpu", dtype=dtype):
            out = torch.ones(2, 2) @ torch.ones(2, 2)
        return out.dtype == dtype
    except RuntimeError:
        return False


def _autocast_dtype(precision: Precision) -> torch.dtype | None:
    return getattr(torch, precision.autocast_dtype) if precision.autocast_dtype else None


def _cuda_reason(precision: Precision, device: torch.device) -> str | None:
    major, minor = torch.cuda.get_device_capability(device)
    needed = precision.min_cuda_capability
    if needed is None or (major, minor) >= needed:
        return None
    what = "TF32" if precision.tf32 else precision.name
    return f"{what} needs compute capability >= {needed[0]}.{needed[1]}; {torch.cuda.get_device_name(device)} has {major}.{minor}"


def _cpu_reason(precision: Precision) -> str | None:
    if precision.tf32:
        return "TF32 is a mode of NVIDIA tensor cores; this trial runs on the CPU"
    dtype = _autocast_dtype(precision)
    if dtype is None or _cpu_autocast_supports(dtype):
        return None
    return f"this torch build has no CPU {precision.autocast_dtype} autocast"


def precision_support(device: torch.device) -> dict[str, str | None]:
    """Map each precision to ``None`` when ``device`` can run it, else to the reason it cannot."""
    if device.type == "cuda":
        return {name: _cuda_reason(p, device) for name, p in BY_NAME.items()}
    if device.type == "cpu":
        return {name: _cpu_reason(p) for name, p in BY_NAME.items()}
    return {p: (None if p == "fp32" else f"{p} is not supported on device type {device.type}") for p in PRECISIONS}


@dataclass(frozen=True)
class PrecisionPolicy:
    """How a trial computes: autocast dtype, loss scaling and TF32."""

    name: str
    device_type: str
    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool
    tf32: bool

    @classmethod
    def resolve(cls, name: str, device: torch.device) -> PrecisionPolicy:
        """Build the policy for ``name`` on ``device``; raise if the device cannot run it."""
        if name not in PRECISIONS:
            raise ValueError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}")
        reason = precision_support(device)[name]
        if reason is not None:
            raise UnsupportedPrecisionError(f"{name} unsupported: {reason}")
        precision = BY_NAME[name]
        return cls(
            name=name,
            device_type=device.type,
            autocast_dtype=_autocast_dtype(precision),
            use_grad_scaler=precision.grad_scaler,
            tf32=precision.tf32,
        )

    def apply_global_state(self, cudnn_benchmark: bool) -> None:
        """Set the process-global TF32 and cuDNN flags for this trial, whatever the last trial left."""
        set_tf32(self.tf32)
        torch.backends.cudnn.benchmark = cudnn_benchmark

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """The autocast context for forward passes (a no-op for fp32 and tf32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A fresh ``GradScaler`` for fp16, else ``None``."""
        return torch.amp.GradScaler(self.device_type) if self.use_grad_scaler else None

