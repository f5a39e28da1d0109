"""Honest training throughput: steady state after warm-up, start-up cost apart, and who set the pace.

A trial's first steps pay for things a long run pays once: kernel selection, allocator growth,
compilation and CUDA-graph capture (per bucket width on a GPU). :class:`TrainClock` counts
samples and seconds over the whole training loop and, separately, in steady state: from the
first host read (a sync point on a GPU, so the time is the device's too) after at least
``WARMUP_STEPS`` steps and ``WARMUP_SECONDS``. On CUDA, and on the CPU when compiling, the
first ``SETUP_OCCURRENCES`` steps of each new batch shape are timed apart (synced before and
after) as ``compile_seconds`` and left out of the throughput: the steady figures, and a run's
whole-loop figure when it is too short to reach steady state.

:class:`DeviceLag` (CUDA only) tells whether the host or the device set the pace. Right after a
sync the device is idle, so an event recorded then is an anchor between the two clocks; an
event recorded after each following step completes on the device at a time comparable with
the host's time of recording it. The device lagging the host by more than
``BUSY_LAG_SHARE`` of a step means it still had queued work when the host finished issuing
that step: the device was busy and set the pace. A device that kept up was waiting for the
host. ``device_busy_fraction`` is the share of measured steps where the device set the pace;
below one half, the trial is host-limited (the executor's overhead, not the precision, set its
speed).

:class:`CpuWait` tells whether the process had its CPUs to itself. Linux counts, per thread,
the time it ran and the time it was ready to run but waited for a CPU (``/proc/self/task/*/schedstat``).
Waiting more than ``CPU_CONTENDED_ABOVE`` of its ready time while training (judged over at least
``CPU_WAIT_JUDGED_FROM_S`` of it) means other processes
(another trial, a build, anything) held the cores the trial asked for: its speed is theirs too,
on the CPU as on a GPU's host. Spinning OpenMP threads are ready all the time, so two torch
processes sharing two cores each wait about half of it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path

import torch

from trial_executor._result import CPU_CONTENDED_ABOVE, CPU_WAIT_JUDGED_FROM_S
from trial_executor.batches import Batch, window_rows, window_shape

WARMUP_STEPS = 10
WARMUP_SECONDS = 0.5
SETUP_OCCURRENCES = 3  # eager warm-up, CUDA-graph recording, first replay
BUSY_LAG_SHARE = 0.1
HOST_LIMITED_BELOW = 0.5
_THREADS = Path("/proc/self/task")


class TrainClock:
    """Steady-state samples and seconds of the training loop, and its start-up (setup) steps apart."""

    def __init__(self, device: torch.device, *, track_setup: bool) -> None:
        self.device = device
        self.track_setup = track_setup
        self.steady_seconds = self.setup_seconds = 0.0
        self.steady_samples = self.setup_samples = self.steps = 0
        self._seen: dict[Hashable, int] = {}
        self._first_tick: float | None = None
        self._tick = self._steady_tick = 0.0
        self._steady = False

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        """A training segment starts (the device is idle: just synced or nothing queued)."""
        self._tick = self._steady_tick = time.perf_counter()
        if self._first_tick is None:
            self._first_tick = self._tick

    @property
    def steady(self) -> bool:
        return self._steady

    @property
    def segment_started(self) -> float:
        return self._tick

    def stop(self) -> float:
        """A training segment ends (the caller synced, so the time covers the device's work): its seconds."""
        now = time.perf_counter()
        if self._steady:
            self.steady_seconds += now - self._steady_tick
        return now - self._tick

    def is_setup(self, shape: Hashable) -> bool:
        """Whether a step of ``shape`` is one of that shape's first few (start-up cost, timed apart)."""
        if not self.track_setup:
            return False
        seen = self._seen.get(shape, 0)
        self._seen[shape] = seen + 1
        return seen < SETUP_OCCURRENCES

    def setup_begin(self) -> float:
        self._sync()
        return time.perf_counter()

    def setup_end(self, began: float) -> None:
        self._sync()
        elapsed = time.perf_counter() - began
        self.setup_seconds += elapsed
        if self._steady:
            self._steady_tick += elapsed  # not steady time

    def stepped(self, samples: int, setup: bool) -> None:
        self.steps += 1
        if setup:
            self.setup_samples += samples
        elif self._steady:
            self.steady_samples += samples

    def synced(self) -> None:
        """At a host read (a sync point): steady state begins here once warm-up has passed."""
        now = time.perf_counter()
        warm = self._first_tick is not None and self.steps >= WARMUP_STEPS and now - self._first_tick >= WARMUP_SECONDS
        if warm and not self._steady:
            self._steady, self._steady_tick = True, now

    def steady_samples_per_s(self) -> float | None:
        """Steady-state samples/s, or ``None`` when the run never got past warm-up."""
        if self.steady_seconds > 0 and self.steady_samples:
            return self.steady_samples / self.steady_seconds
        return None

    def samples_per_s_after_setup(self, samples: int, seconds: float) -> float | None:
        """A whole run's ``samples`` over its training ``seconds``, less the start-up steps timed apart.

        For a run too short to reach steady state: its compile and capture seconds are still not
        speed. ``None`` when only start-up steps ran (nothing else was timed).
        """
        rest, left = samples - self.setup_samples, seconds - self.setup_seconds
        return rest / left if rest > 0 and left > 0 else None


class DeviceLag:
    """CUDA events against host time: per step, did the device still have queued work (see the module)."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self._anchor: tuple[float, torch.cuda.Event] | None = None
        self._pending: list[tuple[float, float, torch.cuda.Event]] = []  # (step start, host time, event)
        self.busy_steps = self.measured_steps = 0

    def _event(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def anchor(self) -> None:
        """Call right after a sync: the device is idle, its clock and the host's meet here."""
        if self.enabled:
            self._anchor, self._pending = (time.perf_counter(), self._event()), []

    def step_done(self, started: float) -> None:
        if self.enabled and self._anchor is not None:
            self._pending.append((started, time.perf_counter(), self._event()))

    def collect(self) -> None:
        """Call after a sync (all pending events complete), before :meth:`anchor`."""
        if not (self.enabled and self._anchor):
            return
        host_anchor, event_anchor = self._anchor
        for started, issued, event in self._pending:
            done_on_device = host_anchor + event_anchor.elapsed_time(event) / 1000
            lag, host_step = done_on_device - issued, max(issued - started, 1e-9)
            self.measured_steps += 1
            self.busy_steps += lag > BUSY_LAG_SHARE * host_step
        self._anchor, self._pending = None, []

    def busy_fraction(self) -> float | None:
        return self.busy_steps / self.measured_steps if self.measured_steps else None


def _ran_and_waited_ns() -> tuple[int, int] | None:
    """This process's threads' nanoseconds on a CPU and waiting for one; ``None`` off Linux (no ``/proc/self/task``).
    A kernel without schedstat counts nothing: (0, 0), and :meth:`CpuWait.fraction` is then ``None``."""
    ran = waited = 0
    try:
        threads = list(_THREADS.iterdir())
    except OSError:
        return None
    for thread in threads:
        try:
            fields = (thread / "schedstat").read_text().split()
        except OSError:  # the thread ended since the listing
            continue
        ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran, waited


class CpuWait:
    """The share of its ready time this process's threads waited for a CPU, over the segments timed."""

    def __init__(self) -> None:
        self.ran_ns = self.waited_ns = 0
        self._mark: tuple[int, int] | None = None

    def start(self) -> None:
        self._mark = _ran_and_waited_ns()

    def stop(self) -> None:
        now = _ran_and_waited_ns()
        if self._mark is not None and now is not None:
            # A thread that ended within the segment takes its counts away: never below nothing.
            self.ran_ns += max(0, now[0] - self._mark[0])
            self.waited_ns += max(0, now[1] - self._mark[1])
        self._mark = None

    def fraction(self) -> float | None:
        ready = self.ran_ns + self.waited_ns
        return self.waited_ns / ready if ready else None

    def contended(self) -> bool | None:
        """Other processes held the cores (see the module); ``None`` over too little ready time to tell."""
        fraction = self.fraction()
        if fraction is None or (self.ran_ns + self.waited_ns) / 1e9 < CPU_WAIT_JUDGED_FROM_S:
            return None
        return fraction > CPU_CONTENDED_ABOVE


class LoopTiming:
    """A training loop's clocks behind three calls: each optimizer step timed, host reads, pauses.

    ``with timing.step(window):`` around one optimizer step (the first few of a new batch shape
    are start-up cost, timed apart); :meth:`synced` after each host read;
    ``with timing.paused() as seconds:`` around what is not training (evaluation, a checkpoint),
    ``seconds`` being the training segment that just ended.
    """

    def __init__(self, device: torch.device, *, track_setup: bool) -> None:
        self.device = device
        self.clock = TrainClock(device, track_setup=track_setup)
        self.lag = DeviceLag(device)
        self.cpu_wait = CpuWait()

    def start(self) -> None:
        self.clock.start()
        self.lag.anchor()
        self.cpu_wait.start()

    @contextlib.contextmanager
    def step(self, window: Sequence[Sequence[Batch]]) -> Iterator[None]:
        clock, lag = self.clock, self.lag
        setup = clock.track_setup and clock.is_setup(window_shape(window))  # shapes counted only when tracked
        began = clock.setup_begin() if setup else time.perf_counter()
        yield
        if setup:  # synced: re-anchor the device clock
            clock.setup_end(began)
            lag.collect()
            lag.anchor()
        elif clock.steady:
            lag.step_done(began)
        clock.stepped(window_rows(window), setup)

    def synced(self) -> None:
        """Call right after the host read the device's state (a sync point)."""
        self.lag.collect()
        self.clock.synced()
        self.lag.anchor()

    @contextlib.contextmanager
    def paused(self) -> Iterator[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.lag.collect()
        self.cpu_wait.stop()
        yield self.clock.stop()
        self.start()
