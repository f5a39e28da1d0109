"""Checkpoints: everything a run needs to go on from an optimizer step in another process.

A checkpoint holds the model, optimizer, scheduler and GradScaler states, every random
generator (Python, NumPy, torch, CUDA, and the batch-order generator as it was when the
epoch began), the position in the epoch and the run's counters and history, so a resumed
run continues exactly where its predecessor saved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trial_executor._caches import BoundedCache
from trial_executor._config import TrainConfig
from trial_executor.data import TextClassificationData
from trial_executor.model import load_trainable_state_dict, trainable_state_dict
from trial_executor.train._build import TrialParts
from trial_executor.train._early_stopping import EarlyStopping
from trial_executor.train._optimizer import load_optimizer_state
from trial_executor.train._progress import RunProgress

CHECKPOINT_FILE = "checkpoint.pt"
_logger = logging.getLogger(__name__)
# Directories whose checkpoint write failed once: warned about, not again (the last few dozen).
_UNWRITABLE: BoundedCache[Path, bool] = BoundedCache("train.unwritable_checkpoint_dirs", size=32)


@dataclass(frozen=True)
class Checkpointing:
    """Where a run saves its latest checkpoint and what it resumes from.

    ``directory`` receives ``checkpoint.pt`` at each evaluation (and on interruption),
    replaced atomically; ``on_saved(path, step)`` is called after each save, e.g. to upload
    it. ``resume_from`` is a predecessor's checkpoint file, or ``None`` to start at step 0.
    ``final_model``, when set, receives the trained model and tokenizer (``save_pretrained``
    format; LoRA merged) once the run ends, unless the caller pruned it.
    """

    directory: Path
    resume_from: Path | None = None
    on_saved: Callable[[Path, int], None] | None = None
    final_model: Path | None = None
    # Called with the error when ``resume_from`` cannot be resumed (unreadable, or saved by another config or data):
    # the run then starts at step 0. Without it, that :class:`UnusableCheckpointError` ends the run.
    on_unusable: Callable[[UnusableCheckpointError], None] | None = None

    def going_on(self) -> Checkpointing:
        """This checkpointing for another run of the same work (``oom_fallback``'s half batch, say): it resumes from the
        checkpoint this run saved last, else from the one this run resumed from."""
        latest = self.directory / CHECKPOINT_FILE
        return dataclasses.replace(self, resume_from=latest if latest.is_file() else self.resume_from)


class UnusableCheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable (truncated, not a checkpoint), or saved by another config or data."""


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(state: dict[str, Any], checkpointing: Checkpointing) -> Path | None:
    """Write ``state`` atomically (a reader never sees half a file) and notify ``on_saved``.

    A write that fails (a full or read-only disk) costs the checkpoint, not the run: one
    warning per directory, and ``None``; the previous checkpoint, if any, stays in place.
    """
    path = checkpointing.directory / CHECKPOINT_FILE
    tmp = None
    try:
        checkpointing.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=checkpointing.directory, suffix=".tmp")
        os.close(fd)
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # torch.save reports a full disk as RuntimeError from its zip writer
        if checkpointing.directory not in _UNWRITABLE:
            _UNWRITABLE.put(checkpointing.directory, True)
            _logger.warning("checkpoint at step %s not saved (%s); the run goes on without it", state["step"], err)
        return None
    finally:
        if tmp is not None and os.path.exists(tmp):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if checkpointing.on_saved is not None:
        checkpointing.on_saved(path, state["step"])
    return path


# How a config cuts an optimizer step's rows into micro-batches (and evaluation's rows into batches): see micro_batch_split.
_SPLIT_FIELDS = frozenset({"batch_size", "grad_accum_steps", "eval_batch_size"})


def micro_batch_split(saved: dict[str, Any], wanted: dict[str, Any]) -> int | None:
    """Into how many of ``wanted``'s micro-batches each of ``saved``'s is cut, where the two configs train the same rows
    at every optimizer step (``oom_fallback``'s half batch, say); ``None`` where they do not.

    Without length grouping an epoch's batches are its shuffled rows taken ``batch_size`` at a time, so a batch of 16
    is exactly the rows of two batches of 8 in a row: with the same rows per step (batch x accumulation), a checkpoint
    saved at one split resumes at the other. With length grouping, batches of another size hold other rows.
    """
    (batch, accum), (to_batch, to_accum) = ((c["batch_size"], c["grad_accum_steps"]) for c in (saved, wanted))
    if saved["length_grouping"] or wanted["length_grouping"] or batch % to_batch or batch * accum != to_batch * to_accum:
        return None
    return batch // to_batch


def load_checkpoint(path: Path, config: dict[str, Any], data_fingerprint: str) -> dict[str, Any]:
    """The state saved at ``path``; :class:`UnusableCheckpointError` for a file that is none, or one saved by a run with
    another config (naming the first field that differs; the same rows per step cut into other micro-batches do not
    count, see :func:`micro_batch_split`) or data."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # EOFError (empty), OSError or RuntimeError (truncated), UnpicklingError (garbage)
        raise UnusableCheckpointError(f"checkpoint {path} cannot be read ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or "data_fingerprint" not in state:
        raise UnusableCheckpointError(f"checkpoint {path} is no checkpoint of a trial (no config or data fingerprint in it)")
    ignored = {"device", "cache_dir"}
    # Fields added since the checkpoint was written count at their defaults.
    saved = {k: v for k, v in {**TrainConfig.defaults(), **state["config"]}.items() if k not in ignored}
    wanted = {k: v for k, v in config.items() if k not in ignored}
    split = micro_batch_split(saved, wanted)
    if split is not None:
        ignored |= _SPLIT_FIELDS
    differs = next((k for k in sorted(saved.keys() | wanted.keys()) if k not in ignored and saved.get(k) != wanted.get(k)), None)
    if differs is not None:
        raise UnusableCheckpointError(f"checkpoint {path} was saved by a run with {differs}={saved.get(differs)!r}, "
                                      f"not {wanted.get(differs)!r}; it cannot be resumed")
    if state["data_fingerprint"] != data_fingerprint:
        raise UnusableCheckpointError(f"checkpoint {path} was saved by a run on other data; it cannot be resumed")
    state["micro_batch_split"] = split or 1  # this run's micro-batches per saved one (restore_trial maps the position)
    return state


def trial_state(
    parts: TrialParts, config: TrainConfig, data: TextClassificationData, run: RunProgress, stopping: EarlyStopping,
) -> dict[str, Any]:
    """Everything :func:`restore_trial` needs to go on from ``run.step`` in another process."""
    return {
        "config": config.to_dict(), "data_fingerprint": data.fingerprint, "step": run.step,
        "progress": dataclasses.asdict(run), "early_stopping": dataclasses.asdict(stopping), "rng": rng_states(),
        # LoRA: the frozen weights are rebuilt from the model's source; only what trains is saved.
        "model": trainable_state_dict(parts.model) if config.finetune == "lora" else parts.model.state_dict(),
        "optimizer": parts.step_parts.optimizer.state_dict(), "scheduler": parts.step_parts.scheduler.state_dict(),
        "scaler": parts.policy.state_dict(),
    }


def restore_trial(
    parts: TrialParts, config: TrainConfig, data: TextClassificationData, path: Path, stopping: EarlyStopping,
) -> RunProgress:
    """Load the checkpoint at ``path`` into ``parts`` and ``stopping``; the run's progress as it was saved."""
    state = load_checkpoint(path, config.to_dict(), data.fingerprint)
    if config.finetune == "lora":
        load_trainable_state_dict(parts.model, state["model"])
    else:
        parts.model.load_state_dict(state["model"])
    load_optimizer_state(parts.step_parts.optimizer, state["optimizer"])
    parts.policy.load_state_dict(state["scaler"])
    parts.step_parts.scheduler.load_state_dict(state["scheduler"])  # after the policy: fp16's rate counts its skips
    if "early_stopping" in state:  # older checkpoints: the count starts again
        stopping.best_score, stopping.evals_since_best = state["early_stopping"]["best_score"], state["early_stopping"]["evals_since_best"]
    run = RunProgress.from_dict(state["progress"])
    # Saved at another cut of the same rows: the epoch's position in this run's micro-batches (its end stays its end).
    run.next_batch = min(run.next_batch * state["micro_batch_split"], parts.micro_per_epoch)
    restore_rng_states(state["rng"])
    parts.train_step.loss_sum.fill_(run.window_loss)
    run.window_loss = 0.0  # handed to the step: a later checkpoint must not carry it again
    return run
