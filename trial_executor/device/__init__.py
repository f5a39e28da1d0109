"""The machine: device choice, hardware metadata, memory, per-device defaults and honest throughput.
"""

from __future__ import annotations

from trial_executor.device._defaults import Knobs, defaults_for, resolve_knobs
from trial_executor.device._hardware import (
    MemoryWindow,
    bound_native_caches,
    hardware_metadata,
    memory_in_use_mb,
    oom_in,
    peak_memory_mb,
    release_memory,
    reset_peak_memory,
    resolve_device,
    total_memory_mb,
)
from trial_executor.device._throughput import HOST_LIMITED_BELOW, CpuWait, DeviceLag, LoopTiming, TrainClock

__all__ = [
    "HOST_LIMITED_BELOW",
    "CpuWait",
    "DeviceLag",
    "Knobs",
    "LoopTiming",
    "MemoryWindow",
    "TrainClock",
    "bound_native_caches",
    "defaults_for",
    "hardware_metadata",
    "memory_in_use_mb",
    "oom_in",
    "peak_memory_mb",
    "release_memory",
    "reset_peak_memory",
    "resolve_device",
    "resolve_knobs",
    "total_memory_mb",
]
