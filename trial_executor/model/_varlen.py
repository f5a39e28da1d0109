"""FlashAttention's varlen kernel on packed rows: whether this process can run it, and the call.

Torch only (no transformers), so deciding a trial's knobs (``device._defaults``) knows whether
varlen attention can run without importing the modeling code the packed forward needs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def _varlen_kernel() -> tuple[Callable[..., torch.Tensor], bool] | None:
    """The entry point and whether it takes ``scale``; ``None`` below torch 2.10.

    Looked up on first use: ``torch.nn.attention.varlen`` imports dynamo (about a second), which a
    process on a machine without CUDA, where the kernel cannot run, never needs.
    """
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    # torch 2.9's varlen_attn takes no ``scale`` (its default, head_dim ** -0.5, is BERT's own).
    return varlen_attn, "scale" in inspect.signature(varlen_attn).parameters


def varlen_kernel_present() -> bool:
    """Whether this torch has FlashAttention's varlen entry point (torch >= 2.10), device aside."""
    return _varlen_kernel() is not None


def varlen_attention_available() -> bool:
    """Whether this torch has FlashAttention's varlen entry point (torch >= 2.10) and a CUDA device."""
    return torch.cuda.is_available() and varlen_kernel_present()


def attend_varlen(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, scale: float,
) -> torch.Tensor:
    """(tokens, heads, head_dim) in, (tokens, heads * head_dim) out; no attention-probability dropout."""
    kernel = _varlen_kernel()
    assert kernel is not None
    varlen_attn, takes_scale = kernel
    scaling: dict[str, Any] = {"scale": scale} if takes_scale else {}
    return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **scaling).flatten(1)
