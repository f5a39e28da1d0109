"""How a trial computes: the policy resolved from a precision row (autocast, the GradScaler's whole lifecycle, TF32).

The rows themselves (torch-free) are in :mod:`trial_executor._precisions`.
"""

from __future__ import annotations

from trial_executor._failures import UnsupportedPrecisionError
from trial_executor.precision._policy import (
    GradScalerPolicy,
    PrecisionPolicy,
    cpu_instructions,
    emulated_precisions,
    global_state_kept,
    policy_class,
    precision_support,
    runs_in_tf32,
    set_tf32,
    tf32_enabled,
)

__all__ = [
    "GradScalerPolicy",
    "PrecisionPolicy",
    "UnsupportedPrecisionError",
    "cpu_instructions",
    "emulated_precisions",
    "global_state_kept",
    "policy_class",
    "precision_support",
    "runs_in_tf32",
    "set_tf32",
    "tf32_enabled",
]
