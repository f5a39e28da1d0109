"""From an Optuna trial to a training run and back: sample, configure, train, record."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import optuna

from hpo._space import SearchSpace
from trial_executor import (
    TextClassificationData,
    TrainConfig,
    UnsupportedPrecisionError,
    hardware_metadata,
    resolve_device,
    run_trial,
)

SKIP_UNSUPPORTED = "unsupported_precision"


def executor_config(
    params: dict[str, Any], space: SearchSpace, *, seed: int, device: str, cache_dir: str | None
) -> TrainConfig:
    """The one place that turns sampled parameters into an executor config."""
    return TrainConfig(**{**space.fixed, **params, "seed": seed, "device": device, "cache_dir": cache_dir})


def make_objective(
    space: SearchSpace, data: TextClassificationData, *, base_seed: int, device: str, cache_dir: str | None = None
) -> Callable[[optuna.Trial], float]:
    """An Optuna objective that trains one config per trial and records what it measured.

    Each trial's seed is ``base_seed + trial.number``. A precision the device cannot run
    ends the trial PRUNED with ``skip_reason`` set; it never runs in another precision.
    """
    metric = space.objective.metric

    def objective(trial: optuna.Trial) -> float:
        params = space.suggest(trial)
        config = executor_config(params, space, seed=base_seed + trial.number, device=device, cache_dir=cache_dir)
        trial.set_user_attr("config", config.to_dict())

        def report(step: int, metrics: dict[str, float]) -> bool:
            if math.isfinite(metrics[metric]):
                trial.report(metrics[metric], step)
            return trial.should_prune()

        try:
            result = run_trial(config, data, report)
        except UnsupportedPrecisionError as err:
            trial.set_user_attr("skip_reason", SKIP_UNSUPPORTED)
            trial.set_user_attr("skip_detail", str(err))
            raise optuna.TrialPruned(str(err)) from None
        except Exception as err:
            trial.set_user_attr("fail_reason", f"{type(err).__name__}: {err}"[:1000])
            raise
        finally:
            # After run_trial, so tf32_enabled is the state this trial ran with.
            trial.set_user_attr("hardware", hardware_metadata(resolve_device(config.device)))

        trial.set_user_attr("metrics", result.metrics)
        trial.set_user_attr("precision_effective", result.precision_effective)
        trial.set_user_attr("throughput_samples_per_s", result.throughput_samples_per_s)
        trial.set_user_attr("throughput_tokens_per_s", result.throughput_tokens_per_s)
        trial.set_user_attr("peak_memory_mb", result.peak_memory_mb)
        trial.set_user_attr("train_seconds", result.train_seconds)
        trial.set_user_attr("eval_seconds", result.eval_seconds)
        trial.set_user_attr("steps", result.steps)
        trial.set_user_attr("padding_efficiency", result.padding_efficiency)
        trial.set_user_attr("tokenize_seconds", result.tokenize_seconds)
        trial.set_user_attr("tokenize_cache", "hit" if result.tokenize_cache_hit else "miss")
        if result.stopped_early:
            raise optuna.TrialPruned(f"pruned at step {result.steps}")
        return result.metrics[metric]

    return objective
