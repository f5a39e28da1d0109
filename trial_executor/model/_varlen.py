"""FlashAttention's varlen kernel on packed rows: whether this process can run it, and the call.

Torch only (no transformers), so deciding a trial's knobs (``device._defaults``) knows whether
varlen attention can run without importing the modeling code the packed forward needs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch

# attend(q, k, v, cu_q, cu_k, max_q, max_k, scale): (tokens, heads, head_dim) in, (tokens, heads * head_dim) out.
VarlenAttend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, float], torch.Tensor]


@functools.cache
def varlen_kernel() -> VarlenAttend | None:
    """Attention through FlashAttention's varlen entry point (no attention-probability dropout); ``None`` below torch 2.10.

    Looked up on first call, since ``torch.nn.attention.varlen`` imports dynamo (about a second), which a
    process on a machine without CUDA, where the kernel cannot run, never needs. Call this once, outside
    compiled code (the packed forward does when it is built): the function it returns is what a traced
    step calls.
    """
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    # torch 2.9's varlen_attn takes no ``scale`` (its default, head_dim ** -0.5, is BERT's own).
    takes_scale = "scale" in inspect.signature(varlen_attn).parameters

    def attend(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int, scale: float,
    ) -> torch.Tensor:
        scaling = {"scale": scale} if takes_scale else {}
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **scaling).flatten(1)

    return attend


def varlen_attention_available() -> bool:
    """Whether this torch has FlashAttention's varlen entry point (torch >= 2.10) and a CUDA device."""
    return torch.cuda.is_available() and varlen_kernel() is not None
