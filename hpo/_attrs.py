"""Every user attribute the package stores on a trial or a study: its key, and how it is written and read.

Trials and studies are read back by commands that run long after the writer (``status``,
``report``, ``export``, ``best``) and by other versions of the package, so each key is named
once here and read through the helpers below, never as a string literal elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from trial_executor import TrialResult

# Trial attrs: what ran, where, and by whom.
CONFIG_ATTR = "config"  # the trial's resolved TrainConfig as a dict
HARDWARE_ATTR = "hardware"
WORKER_ATTR = "worker"  # host, pid and start time of the process running the trial
# Keys of the WORKER_ATTR dict saying where the trial ran: the node (host name), under Ray its node, worker
# and actor ids and the run of the driver that started the actor, the GPU fraction reserved, and how many
# trials may share the GPU (1: it had it alone).
NODE_KEY = "node"
RAY_NODE_KEY = "ray_node"
RAY_WORKER_KEY = "ray_worker"
RAY_ACTOR_KEY = "ray_actor"
RAY_DRIVER_KEY = "ray_driver"
GPU_FRACTION_KEY = "gpu_fraction"
TRIALS_PER_GPU_KEY = "trials_per_gpu"
# The --max-retry of the run whose worker started the attempt: the trial's retry policy, whichever worker fails it.
MAX_RETRY_KEY = "max_retry"
BASELINE_ATTR = "fp32_baseline"  # the enqueued fp32 trial speedups are measured against
# Where an enqueued known configuration came from: "space:<its values as JSON>" (the space's enqueue list, by
# hpo.study._known_good; "space:<index>" in studies of earlier versions) or
# "study:<name>:<number>" (--warm-start); each is enqueued once per study.
ENQUEUED_FROM_ATTR = "enqueued_from"
# A verdict trial (hpo.study._verdict): {"of_trial": n, "precision": p, "seed": s, "seed_index": i}; its seed and
# precision are these, it reports nothing to the pruner and does not count toward --n-trials.
VERDICT_TRIAL_ATTR = "verdict_trial"
# Trial attrs: how it ended (a retry clears the OUTCOME_ATTRS its predecessor left).
FAIL_REASON_ATTR = "fail_reason"
WORKER_DIED = "worker_died"  # a fail reason's start: the trial's worker is gone (a stale heartbeat, an exited process)
INTERRUPTED = "interrupted"  # the fail reason of a planned stop: SIGINT/SIGTERM, the trial checkpointed and re-queued
SKIP_REASON_ATTR = "skip_reason"
SKIP_DETAIL_ATTR = "skip_detail"
SKIP_STEP_ATTR = "skip_step"
OOM_BATCH_SIZE_ATTR = "oom_batch_size"
OOM_FALLBACK_ATTR = "oom_fallback"
INTERRUPTED_AT_STEP_ATTR = "interrupted_at_step"
OUTCOME_ATTRS = (
    FAIL_REASON_ATTR, SKIP_REASON_ATTR, SKIP_DETAIL_ATTR, SKIP_STEP_ATTR, OOM_BATCH_SIZE_ATTR, OOM_FALLBACK_ATTR, INTERRUPTED_AT_STEP_ATTR,
)
CONSTRAINTS_ATTR = "constraints"
FEASIBLE_ATTR = "feasible"
# The trial's own number once it holds one of the budget's slots (hpo.study._study): finished + held <= budget.
BUDGET_SLOT_ATTR = "budget_slot"
# Trial attrs: resuming from a checkpoint, and tracking runs.
CHECKPOINT_ATTR = "checkpoint"
# The checkpoint being uploaded, named before its first byte is written, so that no file a killed
# worker leaves in the artifact store goes unnamed: its retry removes it (hpo.storage._checkpoints).
CHECKPOINT_UPLOADING_ATTR = "checkpoint_uploading"
RESUMED_FROM_TRIAL_ATTR = "resumed_from_trial"
RESUMED_AT_STEP_ATTR = "resumed_at_step"
MLFLOW_RUN_ID_ATTR = "mlflow_run_id"
TENSORBOARD_RUN_ATTR = "tensorboard_run"
# Trial attrs: what the run measured, each from the executor's TrialResult.
METRICS_ATTR = "metrics"
THROUGHPUT_ATTR = "throughput_samples_per_s"
PEAK_MEMORY_ATTR = "peak_memory_mb"
STEPS_ATTR = "steps"
HOST_LIMITED_ATTR = "host_limited"
CPU_CONTENDED_ATTR = "cpu_contended"
TRAIN_SECONDS_ATTR = "train_seconds"  # the whole training loop, start-up steps included
# The start-up steps of each new batch shape (compiling, CUDA-graph capture, kernel selection), timed apart
# and left out of the throughput: on CUDA, and on the CPU when compiling; 0 in an eager CPU run, which times none apart.
STARTUP_SECONDS_ATTR = "compile_seconds"
# Memory in use just before the trial and just after the executor released it (CUDA memory allocated
# to tensors, or the process's RSS on the CPU): a trial that leaves graphs or tensors behind shows
# "after" above "before", and the next trial starts that much fuller.
MEMORY_BEFORE_ATTR = "memory_before_trial_mb"
MEMORY_AFTER_ATTR = "memory_after_trial_mb"
# More CUDA memory than this still held after a trial is reported as not released.
MEMORY_KEPT_REPORTED_MB = 64.0
# A worker's first CUDA trial (nothing allocated before it) also leaves what the process keeps once CUDA has run
# a matmul, such as cuBLAS's workspaces (32 MiB per stream on Hopper). An H200 worker's first trial left
# 65.0 MB, every later trial of that worker 0 (benchmarks/RESULTS.md, session 22): allowed on top.
CUDA_SETUP_MB = 80.0
# A trial that kept more than this share of its peak memory paid its process's first use (see paid_first_use); the
# memory figures of the report and the verdict leave it out. Later trials kept 0-0.1 MB here; a first one 89%.
FIRST_USE_SHARE = 0.25
MAJORITY_CLASS_ATTR = "majority_class"  # trained to its end and still at the majority class
SKIPPED_STEPS_ATTR = "skipped_steps"
RESULT_ATTRS: dict[str, Callable[[TrialResult], Any]] = {
    METRICS_ATTR: lambda r: r.metrics,
    "precision_effective": lambda r: r.precision_effective,
    THROUGHPUT_ATTR: lambda r: r.throughput_samples_per_s,
    "throughput_tokens_per_s": lambda r: r.throughput_tokens_per_s,
    PEAK_MEMORY_ATTR: lambda r: r.peak_memory_mb,
    TRAIN_SECONDS_ATTR: lambda r: r.train_seconds,
    "eval_seconds": lambda r: r.eval_seconds,
    STEPS_ATTR: lambda r: r.steps,
    "padding_efficiency": lambda r: r.padding_efficiency,
    "tokenize_seconds": lambda r: r.tokenize_seconds,
    "tokenize_cache": lambda r: "hit" if r.tokenize_cache_hit else "miss",
    "trainable_params": lambda r: r.trainable_params,
    "trainable_fraction": lambda r: r.trainable_fraction,
    "max_length_effective": lambda r: r.max_length,
    "truncated_fraction": lambda r: r.truncated_fraction,
    "stopped_reason": lambda r: r.stopped_reason,
    # How the throughput was measured, and whether the host (not the precision) set the pace.
    "throughput_all_samples_per_s": lambda r: r.throughput_all_samples_per_s,
    "throughput_steady_state": lambda r: r.steady_state,
    STARTUP_SECONDS_ATTR: lambda r: r.compile_seconds,
    "device_busy_fraction": lambda r: r.device_busy_fraction,
    HOST_LIMITED_ATTR: lambda r: r.host_limited,
    # Whether other processes held the cores while it trained (the speed partly theirs).
    "cpu_wait_fraction": lambda r: r.cpu_wait_fraction,
    CPU_CONTENDED_ATTR: lambda r: r.cpu_contended,
    MAJORITY_CLASS_ATTR: lambda r: r.majority_class,
    "checkpoint_dtype": lambda r: r.checkpoint_dtype,
    # Pruning saw evaluations on this many sampled rows; the objective is on every row when metrics_full_split.
    "eval_sample_rows": lambda r: r.eval_sample_rows,
    "metrics_full_split": lambda r: r.metrics_full_split,
    "eval_precision": lambda r: r.eval_precision,
    SKIPPED_STEPS_ATTR: lambda r: r.skipped_steps,
    # Whether the whole step ran compiled (CUDA graphs on CUDA), and why not when it was asked for.
    "compiled_step": lambda r: r.compiled_step,
    "captured_step": lambda r: r.captured_step,
    "compile_refused": lambda r: r.compile_refused,
    # What "bf16" meant: autocast over float32 weights, or bf16 copies of float32 master weights.
    "master_weights": lambda r: r.master_weights,
    "master_weights_refused": lambda r: r.master_weights_refused,
}

# Study attrs.
SEARCH_SPACE_ATTR = "search_space"  # the space's stored form: a resumed study must be run with the same
DATASET_FINGERPRINT_ATTR = "dataset_fingerprint"
# The data flags the study last ran with ({} for the demo reviews; absent for a dataset given in Python):
# named when other data is given, and read by a verdict given no --data (hpo.study._data).
DATA_SOURCE_ATTR = "data_source"
LABEL_NAMES_ATTR = "label_names"
# Local model directory -> {file: hash} of what from_pretrained reads (hpo.study._model_files): a resumed study
# must train the weights it began with.
MODEL_FILES_ATTR = "model_files"
# The --seed the study was made with: trial k of every run trains with seed + k (hpo.study._resuming.study_seed).
SEED_ATTR = "seed"
MAX_LENGTH_AUTO_ATTR = "max_length_auto"  # model -> the length max_length: auto chose
BEST_MODEL_ATTR = "best_model"
VERDICT_ATTR = "precision_verdict"  # the last verdict's table (hpo.reporting._verdict.Verdict.to_dict())


def result_attrs(result: TrialResult) -> dict[str, Any]:
    """What the executor measured, as the trial's user attrs (:data:`RESULT_ATTRS`), to be stored together."""
    return {key: value_of(result) for key, value_of in RESULT_ATTRS.items()}


def config_of(trial: FrozenTrial) -> dict[str, Any]:
    """The trial's resolved config; ``{}`` before it was built (e.g. a trial still waiting)."""
    return trial.user_attrs.get(CONFIG_ATTR) or {}


def config_or_params(trial: FrozenTrial) -> dict[str, Any]:
    """The trial's resolved config, else its sampled params (a trial whose config was never built)."""
    return trial.user_attrs.get(CONFIG_ATTR) or dict(trial.params)


def skip_reason_of(trial: FrozenTrial) -> str | None:
    """Why the trial was pruned as skipped (``SKIP_*`` of :mod:`hpo.study._outcomes`), else ``None``."""
    return trial.user_attrs.get(SKIP_REASON_ATTR)


def fail_reason_of(trial: FrozenTrial, default: str = "") -> str:
    return str(trial.user_attrs.get(FAIL_REASON_ATTR, default))


def throughput_of(trial: FrozenTrial) -> float | None:
    """Training samples per second (steady state when it was reached), ``None`` if never measured."""
    return trial.user_attrs.get(THROUGHPUT_ATTR)


def startup_seconds_of(trial: FrozenTrial) -> tuple[float, float] | None:
    """The trial's start-up seconds (:data:`STARTUP_SECONDS_ATTR`) and its training loop's seconds; ``None`` unmeasured."""
    startup, train = trial.user_attrs.get(STARTUP_SECONDS_ATTR), trial.user_attrs.get(TRAIN_SECONDS_ATTR)
    return None if startup is None or not train else (float(startup), float(train))


def hardware_of(trial: FrozenTrial) -> dict[str, Any]:
    return trial.user_attrs.get(HARDWARE_ATTR) or {}


def cuda_memory_kept_mb(trial: FrozenTrial) -> float | None:
    """CUDA memory a trial left allocated after its release (after minus before), ``None`` off CUDA or unmeasured."""
    before, after = trial.user_attrs.get(MEMORY_BEFORE_ATTR), trial.user_attrs.get(MEMORY_AFTER_ATTR)
    if hardware_of(trial).get("device_type") != "cuda" or before is None or after is None:
        return None
    return float(after) - float(before)


def paid_first_use(trial: FrozenTrial) -> bool:
    """Whether most of the trial's peak memory stayed with its process after it: what a process sets up once (on the CPU,
    modeling code and oneDNN's kernel caches; measured: a first bf16 tiny-bert trial peaked at 53 MB and kept 47, the
    next 8 MB and kept none), which its later trials no longer pay. Such a peak is not the configuration's own."""
    before, after, peak = (trial.user_attrs.get(key) for key in (MEMORY_BEFORE_ATTR, MEMORY_AFTER_ATTR, PEAK_MEMORY_ATTR))
    if before is None or after is None or not peak:
        return False
    return float(after) - float(before) > FIRST_USE_SHARE * float(peak)


def cuda_memory_not_released_mb(trial: FrozenTrial) -> float | None:
    """:func:`cuda_memory_kept_mb` where it is more than a trial may keep (``MEMORY_KEPT_REPORTED_MB``, and for a
    worker's first CUDA trial ``CUDA_SETUP_MB`` more), else ``None``."""
    kept = cuda_memory_kept_mb(trial)
    first = trial.user_attrs.get(MEMORY_BEFORE_ATTR) == 0
    return kept if kept is not None and kept > MEMORY_KEPT_REPORTED_MB + (CUDA_SETUP_MB if first else 0.0) else None


def ran_emulated(trial: FrozenTrial, precision: str) -> bool:
    """Whether the trial's CPU had no matmul instructions for ``precision`` (its hardware's ``emulated_precisions``)."""
    return precision in hardware_of(trial).get("emulated_precisions", ())


def is_feasible(trial: FrozenTrial) -> bool:
    """The trial meets the space's ``constraints`` (or the space has none): only such a trial is ever the best."""
    return trial.user_attrs.get(FEASIBLE_ATTR) is not False


def is_host_limited(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(HOST_LIMITED_ATTR))


def is_cpu_contended(trial: FrozenTrial) -> bool:
    """Other processes held the trial's cores while it trained: its speed is partly theirs."""
    return bool(trial.user_attrs.get(CPU_CONTENDED_ATTR))


def is_majority_class(trial: FrozenTrial) -> bool:
    """The trial's final evaluation predicted one class for every row, or exactly the majority share (it learned nothing)."""
    return bool(trial.user_attrs.get(MAJORITY_CLASS_ATTR))


# Said wherever majority-class trials are listed (status, report, the verdict), unless their rates clear them.
MAJORITY_CLASS_HINT = (
    "the learning rate range may be too high for this model (a pretrained model wants ~1e-5..3e-4: "
    "search_spaces/finetune.yaml), or the training too short for its rate"
)
FINE_TUNING_TOP_RATE = 3e-4  # search_spaces/finetune.yaml's highest: at or below it, a rate is no likely cause of a collapse onto one class


def majority_class_hint(trials: Iterable[FrozenTrial], *, short: bool = False) -> str:
    """Why ``trials`` (majority-class ones) learned nothing, as far as their learning rates tell: too high a rate or too
    short a training (:data:`MAJORITY_CLASS_HINT`), or, when no rate is above fine-tuning's, too short a training only.
    ``short``: the words for one trial's line."""
    rates = [config_or_params(t).get("learning_rate") for t in trials]
    low = bool(rates) and all(isinstance(r, (int, float)) and r <= FINE_TUNING_TOP_RATE for r in rates)
    if short:
        return "the training was likely too short for its learning rate" if low else \
            "the learning rate may be too high, or the training too short for it"
    if not low:
        return MAJORITY_CLASS_HINT
    one = len(set(rates)) == 1
    rated = f"the learning rate ({rates[0]:.3g}) is" if one else f"their learning rates (at most {max(rates):.3g}) are"
    return (f"{rated} no higher than fine-tuning's (~1e-5..3e-4): "
            f"the training was likely too short for {'it' if one else 'them'} (more max_steps or epochs)")


def trials_per_gpu_of(trial: FrozenTrial) -> int:
    """How many trials could share the trial's GPU (fractional reservation, or workers on the same ``--gpus`` index); 1 alone."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    return int(worker.get(TRIALS_PER_GPU_KEY) or 1) if isinstance(worker, dict) else 1


def retry_policy_of(trial: FrozenTrial, default: int | None) -> int | None:
    """How many retries ``trial``'s chain allows (``None``: no limit): the ``--max-retry`` of the worker that started its
    latest attempt (a retry carries its predecessor's identity until its own worker writes one), else ``default``
    (another objective's trials, and those recorded before the key was)."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    return worker[MAX_RETRY_KEY] if isinstance(worker, dict) and MAX_RETRY_KEY in worker else default


def is_baseline(trial: FrozenTrial) -> bool:
    return bool(trial.user_attrs.get(BASELINE_ATTR))


def verdict_trial_of(trial: FrozenTrial) -> dict[str, Any] | None:
    """What a verdict trial re-trains (:data:`VERDICT_TRIAL_ATTR`), ``None`` for an ordinary trial."""
    return trial.user_attrs.get(VERDICT_TRIAL_ATTR)


def is_verdict_trial(trial: FrozenTrial) -> bool:
    return VERDICT_TRIAL_ATTR in trial.user_attrs


def stored_verdict(study: optuna.Study) -> dict[str, Any] | None:
    """The study's stored precision verdict (:data:`VERDICT_ATTR`), ``None`` before one was computed."""
    return study.user_attrs.get(VERDICT_ATTR)


def stored_data_source(study: optuna.Study) -> dict[str, Any] | None:
    """The data flags the study last ran with (:data:`DATA_SOURCE_ATTR`); ``None`` when it never stored them."""
    return study.user_attrs.get(DATA_SOURCE_ATTR)


def stored_space(study: optuna.Study) -> dict[str, Any]:
    """The search space the study was made with (its stored form), ``{}`` for a study made elsewhere (which may keep
    something else under that name: a plain Optuna script's description of its space, say)."""
    stored = study.user_attrs.get(SEARCH_SPACE_ATTR)
    return stored if isinstance(stored, dict) else {}
