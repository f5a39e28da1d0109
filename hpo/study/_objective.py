"""From an Optuna trial to a training run and back: sample, configure, train, record.

How a trial ends is described in :mod:`hpo.study._outcomes`; which exception ends it how is the one
table ``_OUTCOMES`` below. Building the trial's config happens inside the same handler, so a
bad enqueued trial fails with a ``fail_reason`` and the worker goes on to the next trial.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import FrozenTrial

# The training code (torch, transformers' modeling: seconds at start-up) through trial_executor's deferred names, at the first
# trial: a run whose budget is already met, or whose workers trained it all, never imports it.
import trial_executor
from hpo._attrs import (
    CONFIG_ATTR,
    CONSTRAINTS_ATTR,
    FAIL_REASON_ATTR,
    FEASIBLE_ATTR,
    HARDWARE_ATTR,
    INTERRUPTED_AT_STEP_ATTR,
    MAX_LENGTH_AUTO_ATTR,
    MEMORY_AFTER_ATTR,
    MEMORY_BEFORE_ATTR,
    OOM_FALLBACK_ATTR,
    OUTCOME_ATTRS,
    SKIP_DETAIL_ATTR,
    SKIP_REASON_ATTR,
    WORKER_ATTR,
    result_attrs,
    verdict_trial_of,
)
from hpo.space._measures import MEASUREMENTS, constraint_measure, constraint_violation
from hpo.space._space import SearchSpace
from hpo.space._trial_values import InvalidTrialError, check_enqueued
from hpo.storage import set_user_attrs
from hpo.storage._checkpoints import TrialCheckpoints, remove_told_checkpoint
from hpo.storage._retrying_storage import storage_failure_in
from hpo.storage._scratch import remove_dead_workers_scratch, scratch_dir
from hpo.study._liveness import worker_identity
from hpo.study._options import RunOptions
from hpo.study._outcomes import INTERRUPTED, SKIP_NON_FINITE, SKIP_OOM, SKIP_UNSUPPORTED, TrialFailedError
from hpo.study._workers import defer_second_signal, second_signal_in, stop_on_second_signal
from trial_executor import (
    METRICS,
    NonFiniteLossError,
    StepProgress,
    TextClassificationData,
    TrainConfig,
    TrialInterrupted,
    TrialOutOfMemoryError,
    TrialResult,
    UnsupportedPrecisionError,
)

if TYPE_CHECKING:
    from trial_executor import Checkpointing

CONFIG_FILE = "config.json"
OOM_FALLBACK_CONFIG_FILE = "config-oom-fallback.json"  # the config an oom_fallback retry trained with
_SEED_MODULUS = 2**32  # trial seeds (base seed + trial number) wrap into numpy's seed range

_logger = logging.getLogger(__name__)


def executor_config(
    params: dict[str, Any], space: SearchSpace, *, seed: int, device: str, cache_dir: str | None
) -> TrainConfig:
    """The one place that turns sampled parameters into an executor config; :class:`InvalidTrialError` if invalid."""
    values = {**space.fixed, **params, "seed": seed, "device": device, "cache_dir": cache_dir}
    # Early stopping watches the space's first evaluation-metric objective (else the task's first metric) unless told.
    if values.get("early_stopping_patience") is not None and values.get("early_stopping_metric") is None:
        values["early_stopping_metric"] = next((name for name in space.objective_names if name in METRICS), None)
    try:
        return TrainConfig(**values)
    except (TypeError, ValueError) as err:
        raise InvalidTrialError(f"invalid trial config: {err}; fix the enqueued values or the space") from None


def _skip(trial: optuna.Trial, reason: str, detail: str, **attrs: Any) -> optuna.TrialPruned:
    set_user_attrs(trial, {SKIP_REASON_ATTR: reason, SKIP_DETAIL_ATTR: detail[:1000], **attrs})  # never a reason without its detail
    return optuna.TrialPruned(f"{reason}: {detail}")


def _upload_config(trial: optuna.Trial, store: FileSystemArtifactStore, config: TrainConfig, name: str = CONFIG_FILE) -> None:
    # The trial's resolved config as a file artifact: optuna-dashboard lists it under the trial's Artifacts. Its scratch
    # carries the worker's key, so a worker killed mid-upload leaves none for good: the next worker here sweeps it.
    scratch = scratch_dir(trial.number, "config")
    try:
        path = scratch / name
        path.write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial, mimetype="application/json")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _result_value(result: TrialResult, name: str) -> float:
    return float(getattr(result, name)) if name in MEASUREMENTS else float(result.metrics[name])


def _non_finite(result: TrialResult, names: Sequence[str]) -> str | None:
    """What is not finite in the result; eval loss counts too (NaN logits still give an accuracy)."""
    checked = dict.fromkeys([*names, "loss", "train_loss"])
    for name in checked:
        if name in MEASUREMENTS or name in result.metrics:
            value = _result_value(result, name)
            if not math.isfinite(value):
                return f"final {name} is {value}"
    return None


def _set_constraints(trial: optuna.Trial, space: SearchSpace, result: TrialResult) -> None:
    # Optuna 5's Trial.set_constraint: TPE and NSGA-II read it, no constraints_func needed; the attr keeps limit and measure.
    recorded = {}
    for key, limit in space.constraints.items():
        value = _result_value(result, constraint_measure(key))
        violation = constraint_violation(key, limit, value)
        trial.set_constraint(key, violation)
        recorded[key] = {"limit": limit, "value": value, "satisfied": violation <= 0}
    set_user_attrs(trial, {CONSTRAINTS_ATTR: recorded, FEASIBLE_ATTR: all(c["satisfied"] for c in recorded.values())})


def _one_line(err: BaseException) -> str:
    # One line, so the trial's printed line and the dashboard stay readable; the log has it all.
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:1000]


def _interrupted(trial: optuna.Trial, err: TrialInterrupted) -> BaseException:
    set_user_attrs(trial, {FAIL_REASON_ATTR: INTERRUPTED, INTERRUPTED_AT_STEP_ATTR: err.step})
    return TrialFailedError(f"{INTERRUPTED} at step {err.step}; the next run resumes it")


def _invalid(trial: optuna.Trial, err: InvalidTrialError) -> BaseException:
    # Bad input, not a bug: one line in the log, no traceback.
    reason = _one_line(err)
    trial.set_user_attr(FAIL_REASON_ATTR, reason)
    _logger.warning("trial %d failed: %s", trial.number, reason)
    return TrialFailedError(reason)


def _failed(trial: optuna.Trial, err: Exception) -> BaseException:
    reason = _one_line(err)
    trial.set_user_attr(FAIL_REASON_ATTR, reason)
    _logger.error("trial %d failed: %s", trial.number, reason, exc_info=err)
    return TrialFailedError(reason)


# How each exception ends a trial (see hpo.study._outcomes): the first row whose type matches.
_OUTCOMES: tuple[tuple[type[Exception], Callable[[optuna.Trial, Any], BaseException]], ...] = (
    (optuna.TrialPruned, lambda trial, err: err),  # the study's pruner, as Optuna expects it
    (TrialInterrupted, _interrupted),  # FAIL "interrupted", re-queued by run_to_budget
    (UnsupportedPrecisionError, lambda trial, err: _skip(trial, SKIP_UNSUPPORTED, str(err))),
    (NonFiniteLossError, lambda trial, err: _skip(trial, SKIP_NON_FINITE, err.detail, skip_step=err.step)),
    (TrialOutOfMemoryError, lambda trial, err: _skip(trial, SKIP_OOM, err.detail, oom_batch_size=err.batch_size)),
    (InvalidTrialError, _invalid),  # FAIL with fail_reason, no traceback
    (Exception, _failed),  # FAIL with fail_reason; the traceback goes to the log
)


def _outcome(trial: optuna.Trial, err: Exception) -> BaseException:
    """What to raise to Optuna for ``err``, after recording why on ``trial``."""
    return next(outcome(trial, err) for kind, outcome in _OUTCOMES if isinstance(err, kind))


@dataclass
class Objective:
    """An Optuna objective that trains one config per trial and records what it measured (see :func:`make_objective`)."""

    space: SearchSpace
    data: TextClassificationData
    options: RunOptions
    checkpoints: FileSystemArtifactStore | None = None
    stop_requested: Callable[[], bool] | None = None
    progress: Callable[[int, StepProgress], None] | None = None
    on_evaluation: Callable[[optuna.Trial, int, dict[str, float]], None] | None = None

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, ...]:
        saved: TrialCheckpoints | None = None
        unfinished = False  # interrupted, or its storage failed: its retry resumes from its checkpoint, which stays
        precision: str | None = None
        try:
            trial.set_user_attr(MEMORY_BEFORE_ATTR, self._memory_in_use())
            config, original = self._configure(trial)
            precision = config.fp_precision
            saved = self._checkpoints(trial, config, original)
            result = self._train(trial, config, saved.checkpointing() if saved else None, original)
            defer_second_signal()  # trained: its outcome is stored and told whole (run_to_budget ends the deferral)
            return self._finish(trial, config, result)
        except BaseException as err:
            unfinished = (not isinstance(err, Exception) or second_signal_in(err) or isinstance(err, TrialInterrupted)
                          or storage_failure_in(err) is not None)  # SystemExit too: its trial stays RUNNING, for a retry
            stop_on_second_signal(trial, err)  # no new checkpoint: the last one stays, for the retry the run makes
            if not isinstance(err, Exception):
                raise
            raise _outcome(trial, err) from None
        finally:
            try:
                self._record_end(trial, precision)
            except BaseException as err:  # a second signal raised here, or in flight from above (any error's context then)
                unfinished = unfinished or second_signal_in(err) or storage_failure_in(err) is not None
                stop_on_second_signal(trial, err)
                raise
            finally:
                if saved is not None:  # its scratch files go however it ended (a storage down included)
                    saved.close(finished=not unfinished)

    def told(self, trial: FrozenTrial) -> None:
        """After Optuna told ``trial``: remove the stored checkpoint it finished with (kept until the tell, so that a worker
        killed in between leaves its retry something to resume). An Optuna callback: ``lambda study, t: objective.told(t)``."""
        if self.checkpoints is not None:
            remove_told_checkpoint(trial, self.checkpoints)

    def _record_end(self, trial: optuna.Trial, precision: str | None) -> None:
        """The trial's hardware and the memory in use after it, whichever way it ended."""
        # tf32_enabled from the trial's precision: the process's own flags are back by now.
        described: dict[str, Any] = {}
        with contextlib.suppress(RuntimeError):  # --device cuda without CUDA: nothing to describe
            described[HARDWARE_ATTR] = trial_executor.hardware_metadata(trial_executor.resolve_device(self.options.device), precision)
        # run_trial has released the trial's memory, whichever way it ended.
        set_user_attrs(trial, {**described, MEMORY_AFTER_ATTR: self._memory_in_use()})

    def _memory_in_use(self) -> float | None:
        with contextlib.suppress(RuntimeError):  # --device cuda without CUDA
            return round(trial_executor.memory_in_use_mb(trial_executor.resolve_device(self.options.device)), 1)
        return None

    def _configure(self, trial: optuna.Trial) -> tuple[TrainConfig, int | None]:
        """The trial's validated config, and the number of the trial it retries (``None`` for a first attempt)."""
        # Optuna 5's Trial has no system_attrs; the stored trial has them (a retry's "failed_trial").
        system_attrs = trial.storage.get_trial(trial._trial_id).system_attrs
        original = system_attrs.get("failed_trial")
        # A retry's seed is its predecessor's (its config attr's): a rerun given another --seed could not resume it.
        fell_back, inherited = (trial.user_attrs.get(key) if original is not None else None for key in (OOM_FALLBACK_ATTR, CONFIG_ATTR))
        # A retry starts with a copy of its predecessor's user attrs: clear what that attempt found.
        found = {key: None for key in OUTCOME_ATTRS if key in trial.user_attrs} if original is not None else {}
        set_user_attrs(trial, {**found, WORKER_ATTR: worker_identity(trial.number, self.options.max_retry)})
        check_enqueued(self.space, system_attrs.get("fixed_params") or {})
        params = self.space.suggest(trial)
        seed = inherited.get("seed") if isinstance(inherited, dict) else None
        seed = (self.options.seed_of(trial.study) + (trial.number if original is None else original)) % _SEED_MODULUS if seed is None else seed
        verdict = verdict_trial_of(trial)  # type: ignore[arg-type]
        if verdict is not None:  # paired across precisions: the verdict's seed, whatever the trial's number
            params, seed = {**params, "fp_precision": verdict["precision"]}, verdict["seed"]
        config = executor_config(params, self.space, seed=seed, device=self.options.device, cache_dir=self.options.cache_path)
        if fell_back and fell_back.get("from_batch_size") == config.batch_size:
            # Its predecessor ran out of memory and went on at half the batch: so does the retry, and its checkpoint fits.
            config = _halved(config)
            trial.set_user_attr(OOM_FALLBACK_ATTR, fell_back)
        trial.set_user_attr(CONFIG_ATTR, config.to_dict())
        return config, original

    def _checkpoints(self, trial: optuna.Trial, config: TrainConfig, original: int | None) -> TrialCheckpoints | None:
        if self.checkpoints is None:
            return None
        try:
            if original is None:
                # A retry lists its predecessor's config.json already: Optuna copies the system attrs.
                _upload_config(trial, self.checkpoints, config)
            return TrialCheckpoints(trial, self.checkpoints, keep=self.options.keep_checkpoints)
        except OSError as err:  # a read-only or full artifact store costs the checkpoints, not the trial
            _logger.warning("trial %d runs without checkpoints: the artifact store cannot be written (%s)", trial.number, err)
            return None

    def _report(self, trial: optuna.Trial, config: TrainConfig, taken: Collection[int] = ()) -> Callable[[int, dict[str, float]], bool]:
        """The executor's ``report``; ``taken``: steps an earlier attempt (or a retry's predecessor) reported: not sent again."""
        metric = self.space.objective_names[0]
        reported_step = _reported_step(config, samples=self.space.reports_samples)
        # A verdict trial trains to the end: the pruner neither stops it nor learns from it.
        reports = self.space.reports_intermediate_values and verdict_trial_of(trial) is None  # type: ignore[arg-type]

        def callback(step: int, metrics: dict[str, float]) -> bool:
            if self.on_evaluation is not None:  # experiment tracking sees every evaluation's metrics
                self.on_evaluation(trial, step, metrics)
            if not reports:
                return False
            if math.isfinite(metrics[metric]) and reported_step(step) not in taken:
                trial.report(metrics[metric], reported_step(step))
            return trial.should_prune()

        return callback

    def _train(self, trial: optuna.Trial, config: TrainConfig, checkpointing: Checkpointing | None, original: int | None) -> TrialResult:
        shown = functools.partial(self.progress, trial.number) if self.progress is not None else None
        run = functools.partial(trial_executor.run_trial, data=self.data, stop_requested=self.stop_requested, progress=shown)
        carried = set(trial.storage.get_trial(trial._trial_id).intermediate_values) if original is not None else set()
        try:
            return run(config, report=self._report(trial, config, carried), checkpointing=checkpointing)
        except TrialOutOfMemoryError:
            if not self.space.oom_fallback or config.batch_size < 2 or trial.user_attrs.get(OOM_FALLBACK_ATTR):
                raise  # (a retry that starts at half the batch already: falls back once, not twice)
        smaller = _halved(config)  # the executor released the first attempt's memory
        fallback: dict[str, Any] = {"from_batch_size": config.batch_size, "to_batch_size": smaller.batch_size, "grad_accum_steps": smaller.grad_accum_steps}
        # The same config and seed at half the micro-batch: the curve keeps the first attempt's points, which Optuna cannot replace.
        taken = set(trial.storage.get_trial(trial._trial_id).intermediate_values)
        if taken:
            fallback["curve_from_first_attempt_until_step"] = max(taken)
        set_user_attrs(trial, {OOM_FALLBACK_ATTR: fallback, CONFIG_ATTR: smaller.to_dict()})  # the config that ran with its reason
        if self.checkpoints is not None and checkpointing is not None:  # config.json is the config that ran out of memory
            with contextlib.suppress(OSError):
                _upload_config(trial, self.checkpoints, smaller, OOM_FALLBACK_CONFIG_FILE)
        _logger.warning("trial %d ran out of memory at batch size %d; retrying with %s", trial.number, config.batch_size, fallback)
        # It goes on from the first attempt's last checkpoint: the half batch trains the same rows at every step (not so at
        # an odd batch size or with length grouping: the executor refuses the checkpoint, and on_unusable says it starts over).
        result = run(smaller, report=self._report(trial, smaller, taken), checkpointing=checkpointing and checkpointing.going_on())
        trial.set_user_attr(OOM_FALLBACK_ATTR, {**fallback, "resumed_at_step": result.resumed_at_step})
        return result

    def _finish(self, trial: optuna.Trial, config: TrainConfig, result: TrialResult) -> float | tuple[float, ...]:
        set_user_attrs(trial, result_attrs(result))  # one transaction, all or none
        if config.max_length == "auto":
            # The length auto chose, per model, on the study (one per model at a fixed max_length_percentile).
            chosen = trial.study.user_attrs.get(MAX_LENGTH_AUTO_ATTR, {})
            if chosen.get(config.model) != result.max_length:
                trial.study.set_user_attr(MAX_LENGTH_AUTO_ATTR, {**chosen, config.model: result.max_length})
        problem = _non_finite(result, self.space.objective_names)
        if problem:
            raise NonFiniteLossError(result.steps, problem)
        if self.space.constraints:
            _set_constraints(trial, self.space, result)
        if result.stopped_early:
            raise optuna.TrialPruned(f"pruned at step {result.steps}")
        values = tuple(_result_value(result, name) for name in self.space.objective_names)
        return values if self.space.is_multi_objective else values[0]


def _halved(config: TrainConfig) -> TrainConfig:
    """``oom_fallback``'s config: the same effective batch, half the activation memory (evaluation's too: it may be what ran out)."""
    return config.replace(
        batch_size=config.batch_size // 2, grad_accum_steps=config.grad_accum_steps * 2, eval_batch_size=max(1, config.eval_batch_size // 2),
    )


def _reported_step(config: TrainConfig, *, samples: bool) -> Callable[[int], int]:
    """What an evaluation after optimizer step ``step`` is reported at: the step, or (``samples``) the samples seen.

    Samples per step are batch x accumulation (an OOM retry halves one and doubles the other). With
    ``eval_every_samples``, they are counted at its nominal rate, ``eval_every_samples`` per
    evaluation interval, so that the k-th periodic evaluation reports k x ``eval_every_samples`` for
    every batch size, however its steps rounded the interval (batch 48: 21 steps, 1,008 samples, for
    1,000): ``median`` and the other percentile pruners compare trials only at equal steps.
    """
    if not samples:
        return lambda step: step
    if config.eval_every_samples is not None:
        per_interval, interval = config.eval_every_samples, config.eval_interval_steps
        return lambda step: round(step * per_interval / interval)
    per_step = config.batch_size * config.grad_accum_steps
    return lambda step: step * per_step


def make_objective(
    space: SearchSpace,
    data: TextClassificationData,
    options: RunOptions | None = None,
    *,
    checkpoints: FileSystemArtifactStore | None = None,
    stop_requested: Callable[[], bool] | None = None,
    progress: Callable[[int, StepProgress], None] | None = None,
    on_evaluation: Callable[[optuna.Trial, int, dict[str, float]], None] | None = None,
    base_seed: int | None = None,
    device: str | None = None,
) -> Objective:
    """An Optuna objective that trains one config per trial and records what it measured.

    ``options`` (:class:`hpo.study.RunOptions`): the run's seed, device, tokenized-data cache and whether checkpoints
    are kept; ``base_seed`` and ``device`` alone (the form before ``RunOptions``) stand for
    ``RunOptions(seed=base_seed, device=device, artifact_store=None)``. Each trial's seed is the run's seed plus
    ``trial.number`` (a retry keeps its predecessor's seed, whatever the rerun's). It returns one value per objective
    of ``space`` (a float for one objective, a tuple for several). See :mod:`hpo.study._outcomes` for how trials end;
    ``hardware`` and ``worker`` are recorded whatever happens. An enqueued value outside ``space`` or a config the
    executor refuses fails the trial with a ``fail_reason``. With ``checkpoints`` (an artifact store), trials
    checkpoint at each evaluation and a retried trial resumes from its predecessor's latest checkpoint (or, one it
    cannot resume, starts over, said); a store that cannot be written costs the checkpoints, not the trial. A
    finished trial's checkpoint is removed by :meth:`Objective.told`, to be called once Optuna has told the trial.
    ``stop_requested`` is polled during training (SIGINT/SIGTERM); ``progress(trial_number, update)`` receives the
    executor's progress updates, ``on_evaluation(trial, step, metrics)`` every evaluation's metrics. Making it (a
    worker's start) removes the scratch directories that killed workers of this machine left.
    """
    remove_dead_workers_scratch()
    if options is None:
        options = RunOptions(seed=base_seed or 0, device=device or "auto", artifact_store=None)
    elif base_seed is not None or device is not None:
        raise TypeError("make_objective: give options, or base_seed and device, not both")
    return Objective(
        space, data, options, checkpoints=checkpoints, stop_requested=stop_requested, progress=progress, on_evaluation=on_evaluation,
    )
