"""What a trial ran on: device, versions, precision state, and peak memory."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.metadata
import os
import platform
import resource
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from trial_executor._failures import error_chain
from trial_executor.precision import emulated_precisions, precision_support, runs_in_tf32, tf32_enabled


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device; use --device cpu or auto")
    return torch.device(name)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _nvidia_driver_version() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def hardware_metadata(device: torch.device, precision: str | None = None) -> dict[str, Any]:
    """The facts that make a trial's speed and precision comparable across machines.

    ``tf32_enabled``: with ``precision`` (a trial's), whether that trial ran in TF32; without, the
    process's flags now.
    """
    is_cuda = device.type == "cuda"
    if is_cuda:
        props = torch.cuda.get_device_properties(device)
        name, capability = props.name, f"{props.major}.{props.minor}"
    else:
        name, capability = _cpu_name(), None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "host": socket.gethostname(),
        "device_type": device.type,
        "device_name": name,
        "compute_capability": capability,
        "total_memory_mb": total_memory_mb(device),
        "cuda_version": torch.version.cuda,
        "cudnn_version": str(cudnn) if cudnn is not None else None,
        "driver_version": _nvidia_driver_version() if is_cuda else None,
        "torch_version": torch.__version__,
        "transformers_version": _version("transformers"),
        "optuna_version": _version("optuna"),
        "bf16_supported": precision_support(device)["bf16"] is None,
        "tf32_enabled": tf32_enabled() if precision is None else runs_in_tf32(precision, device),
        "cpu_threads": torch.get_num_threads(),  # intra-op threads; workers on one machine share its cores
        # A CPU without bf16/fp16 matmul instructions emulates them: their speed says so, not the precision.
        "emulated_precisions": emulated_precisions(device),
    }


def total_memory_mb(device: torch.device) -> int:
    """The most memory a trial on ``device`` could have: the GPU's, or the host's RAM on the CPU (MiB)."""
    if device.type == "cuda":
        return round(torch.cuda.get_device_properties(device).total_memory / 2**20)
    return round(psutil.virtual_memory().total / 2**20)


_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak_memory(device: torch.device) -> None:
    """Start a fresh peak-memory window for this trial."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with contextlib.suppress(OSError):
        # Writing 5 resets the kernel's VmHWM (peak RSS) for this process (Linux >= 4.0).
        _CLEAR_REFS.write_text("5")


def release_memory(device: torch.device) -> None:
    """Return freed memory to the OS / driver so the next trial starts from a clean baseline."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    with contextlib.suppress(OSError, AttributeError):
        # glibc keeps freed heap pages mapped; trimming stops one trial's peak inflating the next's RSS.
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def peak_memory_mb(device: torch.device) -> float:
    """CUDA max allocated, or the CPU process's peak RSS, since :func:`reset_peak_memory`."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return _proc_status_mb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _proc_status_mb(key: str) -> float | None:
    # ru_maxrss (the fallback) is the whole process's peak (KiB on Linux), a safe upper bound elsewhere.
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    return None


def memory_in_use_mb(device: torch.device) -> float:
    """What is held now: CUDA memory allocated to tensors on ``device``, or the process's resident memory on the CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**20
    return _proc_status_mb("VmRSS") or 0.0


@dataclass(frozen=True)
class MemoryWindow:
    """One trial's memory: its peak over what the process held when the trial began.

    A worker's earlier trials, libraries and caches are not the trial's: the recorded peak is
    the trial's own increase (CUDA max allocated, or peak RSS on the CPU, minus the start).
    """

    device: torch.device
    start_mb: float

    @classmethod
    def open(cls, device: torch.device) -> MemoryWindow:
        release_memory(device)
        reset_peak_memory(device)
        return cls(device, memory_in_use_mb(device))

    def peak_increase_mb(self) -> float:
        return max(0.0, peak_memory_mb(self.device) - self.start_mb)


# oneDNN (CPU bf16/fp16 matmuls) caches a primitive per tensor shape, and PyTorch's ideep layer
# keeps its own per-shape cache (LRU_CACHE_CAPACITY); both default to 1024 entries of up to a
# few MB. Dynamic padding gives nearly every batch a new shape, so a worker's RSS grew by ~50 MB
# per bf16 trial (benchmarks/memory.py). 128 entries still serve the shapes a step repeats
# (every layer of a batch) and fill within the first trial.
NATIVE_CACHE_CAPACITY = "128"


def bound_native_caches() -> None:
    """Cap the CPU kernel caches before their first use; a capacity the user set is kept."""
    for variable in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(variable, NATIVE_CACHE_CAPACITY)


def oom_in(err: BaseException) -> BaseException | None:
    """The device or the host running out of memory: ``err``, or what it was raised over while that unwound (an
    ``__exit__`` that failed after it, as ``torch.cuda.graph`` ending a capture the OOM broke); else ``None``."""
    # The CPU allocator reports exhaustion as a plain RuntimeError.
    return next((link for link in error_chain(err) if isinstance(link, (torch.OutOfMemoryError, MemoryError))
                 or (isinstance(link, RuntimeError) and "can't allocate memory" in str(link))), None)
