"""Training one trial: build its parts (:func:`build_step` for the step alone), the step, the loop, evaluation, checkpoints."""

from __future__ import annotations

from trial_executor._failures import TrialInterrupted
from trial_executor.train._build import StepParts, build_step
from trial_executor.train._captured import CapturedStep
from trial_executor.train._checkpoint import CHECKPOINT_FILE, Checkpointing, UnusableCheckpointError
from trial_executor.train._compiled import CompiledStep, release_compiled
from trial_executor.train._loop import STOPPED_EARLY_STOPPING, STOPPED_PRUNED, ReportFn, run_trial, seed_everything
from trial_executor.train._step import TrainStep

__all__ = [
    "CHECKPOINT_FILE",
    "STOPPED_EARLY_STOPPING",
    "STOPPED_PRUNED",
    "CapturedStep",
    "Checkpointing",
    "CompiledStep",
    "ReportFn",
    "StepParts",
    "TrainStep",
    "TrialInterrupted",
    "UnusableCheckpointError",
    "build_step",
    "release_compiled",
    "run_trial",
    "seed_everything",
]
