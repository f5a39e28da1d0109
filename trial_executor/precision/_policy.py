"""The one place that decides numeric precision for a trial, as Lightning Fabric's precision plugins do.

A :class:`PrecisionPolicy` is resolved from a precision's registry row
(:mod:`trial_executor._precisions`) and a device. It owns autocast, loss scaling with its whole
lifecycle (scale, unscale, skipped steps, checkpoint state), and the process-global TF32 and
``cudnn.benchmark`` flags, which leak from one trial into the next unless every trial sets them
explicitly. A new precision is one registry row and, at most, one policy class.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trial_executor._failures import UnsupportedPrecisionError
from trial_executor._precisions import BY_NAME, PRECISIONS, Precision
from trial_executor.precision._master_weights import MasterWeights


def _has_new_tf32_api() -> bool:
    # torch >= 2.9 exposes per-backend ``fp32_precision``; reading the legacy ``allow_tf32``
    # flags after setting the new ones raises, so a process must use one API only.
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _tf32_flags() -> list[tuple[Any, str]]:
    """The process-global flags that turn TF32 on or off, as (owner, attribute): the new API's where torch has it."""
    if _has_new_tf32_api():
        return [(backend, "fp32_precision") for backend in (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)]
    return [(torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32")]


def set_tf32(enabled: bool) -> None:
    """Turn TF32 on or off for CUDA matmuls and cuDNN (new API where torch has it)."""
    value: str | bool = ("tf32" if enabled else "ieee") if _has_new_tf32_api() else enabled
    for owner, name in _tf32_flags():
        setattr(owner, name, value)


@contextlib.contextmanager
def global_state_kept() -> Iterator[None]:
    """Run the body, then put the process-global TF32 and ``cudnn.benchmark`` flags back as they were.

    A trial sets them for itself (:meth:`PrecisionPolicy.apply_global_state`); the process that
    called it (a notebook, a script around ``hpo.optimize``) gets its own settings back.
    """
    saved = [(owner, name, getattr(owner, name)) for owner, name in [*_tf32_flags(), (torch.backends.cudnn, "benchmark")]]
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def tf32_enabled() -> bool:
    """Whether CUDA matmuls currently run in TF32."""
    if _has_new_tf32_api():
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


def runs_in_tf32(precision: str, device: torch.device) -> bool:
    """Whether a trial in ``precision`` on ``device`` runs its float32 matmuls in TF32: what its policy sets for it.

    The process-global flags say nothing about a finished trial: :func:`global_state_kept`
    puts the caller's back when it ends.
    """
    return device.type == "cuda" and BY_NAME[precision].tf32 and precision_support(device)[precision] is None


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


def cpu_instructions() -> set[str] | None:
    """This machine's x86 CPU flags (``/proc/cpuinfo``), ``None`` where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def emulated_precisions(device: torch.device, flags: set[str] | None = None) -> list[str]:
    """The precisions ``device`` (a CPU) runs without native matmul instructions: emulated, far slower than fp32.

    ``flags``: the CPU's (default: this machine's). Empty on a GPU, or where the flags are unknown.
    """
    flags = cpu_instructions() if flags is None else flags
    if device.type != "cpu" or not flags:
        return []
    return [p.name for p in BY_NAME.values() if p.cpu_instructions and not flags.intersection(p.cpu_instructions)]


def precision_support(device: torch.device) -> dict[str, str | None]:
    """Map each precision to ``None`` when ``device`` can run it, else to the reason it cannot."""
    if device.type == "cuda":
        return {name: _cuda_reason(p, device) for name, p in BY_NAME.items()}
    if device.type == "cpu":
        return {name: _cpu_reason(p) for name, p in BY_NAME.items()}
    return {p: (None if p == "fp32" else f"{p} is not supported on device type {device.type}") for p in PRECISIONS}


class PrecisionPolicy:
    """How one trial computes: autocast, loss scaling and its state, TF32; one instance per trial.

    A trial's step calls :meth:`autocast` around each forward, :meth:`backward` on each loss and
    :meth:`optimizer_step` once per window; checkpoints carry :meth:`state_dict`. This base class
    needs no loss scaling (fp32, tf32, bf16). :class:`GradScalerPolicy` (fp16) owns the
    ``GradScaler``'s whole lifecycle. A registry row picks its class by ``policy`` (``"module:Class"``),
    else by its ``grad_scaler`` fact. After :meth:`keep_master_weights` (bf16), the forward
    computes on half-precision copies of the weights instead of under autocast.
    """

    uses_grad_scaler = False

    def __init__(self, precision: Precision, device: torch.device) -> None:
        self.name = precision.name
        self.device_type = device.type
        self.autocast_dtype = _autocast_dtype(precision)
        self.tf32 = precision.tf32
        self.master_weights: MasterWeights | None = None

    @classmethod
    def resolve(cls, name: str, device: torch.device) -> PrecisionPolicy:
        """A fresh policy for ``name`` on ``device`` (its row's class); raise if the device cannot run it."""
        if name not in BY_NAME:
            raise ValueError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}")
        reason = precision_support(device)[name]
        if reason is not None:
            raise UnsupportedPrecisionError(f"{name} unsupported: {reason}")
        return policy_class(BY_NAME[name])(BY_NAME[name], device)

    def apply_global_state(self, cudnn_benchmark: bool) -> None:
        """Set the process-global TF32 and cuDNN flags for this trial, whatever the last trial left."""
        set_tf32(self.tf32)
        torch.backends.cudnn.benchmark = cudnn_benchmark

    def keep_master_weights(self, model: torch.nn.Module) -> None:
        """From now on ``model``'s forward computes on half-precision copies of its weights, which stay float32 masters.

        Call before the optimizer is built over ``model``'s parameters (the masters); see
        :mod:`trial_executor.precision._master_weights`. Only for a half precision without loss scaling (bf16).
        """
        if self.autocast_dtype is None or self.uses_grad_scaler:
            raise ValueError(f"master weights are for bf16, not {self.name}")
        self.master_weights = MasterWeights(model, self.autocast_dtype)

    def autocast(self, *, cache: bool = True) -> contextlib.AbstractContextManager[None]:
        """The context of every forward: autocast (a no-op for fp32 and tf32), or the half-precision weights.

        ``cache=False``: autocast casts each weight at each use instead of once per forward, as a
        step recorded into a CUDA graph needs (``torch.cuda.make_graphed_callables`` refuses the cache).
        """
        if self.master_weights is not None:
            return self.master_weights.computing()
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype, cache_enabled=cache)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()
        if self.master_weights is not None:
            self.master_weights.collect_gradients()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None]) -> None:
        """Clip (``clip``: the caller's gradient clipping, a no-op without it), then step ``optimizer``."""
        if self.master_weights is not None:
            self.master_weights.hand_gradients_to_masters()
        clip()
        optimizer.step()
        if self.master_weights is not None:
            self.master_weights.masters_stepped()

    def read_skip_streak(self) -> int:
        """The longest run of skipped optimizer steps since the last read (reads the device: syncs)."""
        return 0

    def skipped_steps(self) -> int | None:
        """Every optimizer step skipped so far (``None``: this precision never skips one)."""
        return None

    def skipped_count(self) -> torch.Tensor | None:
        """The device's running count of skipped optimizer steps, read by the schedule without a sync (``None``: none)."""
        return None

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint must carry to resume this policy (``None``: nothing)."""
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Resume from :meth:`state_dict`'s value (after the model's weights were loaded)."""
        if self.master_weights is not None:
            self.master_weights.masters_stepped()  # the masters were just loaded: refresh the copies


class GradScalerPolicy(PrecisionPolicy):
    """fp16: the loss scaled by a ``GradScaler``, which skips a step whose gradients are inf/NaN.

    Skips are counted on the device (no sync per step): the scaler lowers its scale exactly when
    it skipped, so comparing the scale before and after a step counts them.
    """

    uses_grad_scaler = True

    def __init__(self, precision: Precision, device: torch.device) -> None:
        super().__init__(precision, device)
        self.scaler = torch.amp.GradScaler(device.type)
        self._skip_streak = torch.zeros((), dtype=torch.int32, device=device)
        self._worst_streak = torch.zeros((), dtype=torch.int32, device=device)
        self._skipped_total = torch.zeros((), dtype=torch.int32, device=device)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None]) -> None:
        scaler = self.scaler
        scale_before = scaler._scale.clone() if scaler._scale is not None else None  # read-only; get_scale() syncs
        scaler.unscale_(optimizer)
        clip()
        scaler.step(optimizer)
        scaler.update()
        if scale_before is not None:
            skipped = (scaler._scale < scale_before).to(torch.int32)
            self._skip_streak.add_(1).mul_(skipped)
            self._skipped_total.add_(skipped)
            torch.maximum(self._worst_streak, self._skip_streak, out=self._worst_streak)

    def read_skip_streak(self) -> int:
        worst = int(self._worst_streak.item())
        self._worst_streak.copy_(self._skip_streak)
        return worst

    def skipped_steps(self) -> int | None:
        return int(self._skipped_total.item())

    def skipped_count(self) -> torch.Tensor | None:
        return self._skipped_total

    def state_dict(self) -> dict[str, Any] | None:
        # The counts too: a resumed trial reports every skip, and its streak goes on where it was.
        return {"scaler": self.scaler.state_dict(), "skipped": int(self._skipped_total), "streak": int(self._skip_streak)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        super().load_state_dict(state)
        if state is None:
            return
        if "scaler" not in state:  # written before the counts were saved: the scaler's state alone
            state = {"scaler": state, "skipped": 0, "streak": 0}
        self.scaler.load_state_dict(state["scaler"])
        self._skipped_total.fill_(state["skipped"])
        self._skip_streak.fill_(state["streak"])
        self._worst_streak.fill_(state["streak"])


def policy_class(precision: Precision) -> type[PrecisionPolicy]:
    """The policy class of a registry row: its ``policy`` (``"module:Class"``), else by its facts."""
    if precision.policy is not None:
        module, _, name = precision.policy.partition(":")
        found = getattr(importlib.import_module(module), name)
        if not (isinstance(found, type) and issubclass(found, PrecisionPolicy)):
            raise TypeError(f"precision {precision.name!r}: policy {precision.policy!r} is not a PrecisionPolicy subclass")
        return found
    return GradScalerPolicy if precision.grad_scaler else PrecisionPolicy
