"""The verdict's announced cost (issue 25, item 4): each precision's time from what the study measured, not the best trial's
for all; and a precision the CPU emulated is said so.

The studies here are real Optuna studies whose trials carry the attrs a training run stores;
what is tested is the arithmetic on them, so no trial trains.
"""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from hpo.reporting._verdict import build_verdict
from hpo.reporting._verdict_cost import verdict_cost_line, verdict_costs
from hpo.study._verdict import plan_verdict

ALL_RUN = {"fp32": None, "fp16": None, "bf16": None, "tf32": "TF32 is a mode of NVIDIA tensor cores"}
DISTRIBUTIONS = {"fp_precision": CategoricalDistribution(["fp32", "fp16", "bf16"]), "batch_size": CategoricalDistribution([16, 32, 64])}


def _add(study: optuna.Study, precision: str, batch: int, samples_per_s: float, value: float, seconds: float = 10.0,
         model: str = "tiny-bert", **attrs: object) -> None:
    params = {"fp_precision": precision, "batch_size": batch}
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, value=value, params=params, distributions=DISTRIBUTIONS,
        user_attrs={"config": {**params, "model": model, "learning_rate": 1e-3, "seed": 0}, "hardware": {"device_name": "a CPU"},
                    "throughput_samples_per_s": samples_per_s, "train_seconds": seconds - 4.0, "eval_seconds": 4.0, **attrs},
    ))


def _costs(study: optuna.Study) -> dict[str, tuple[float | None, str, int]]:
    plan = plan_verdict(study, ALL_RUN, seeds=2)
    return {c.precision: (c.seconds, c.basis, c.to_go) for c in verdict_costs(study, plan)}


def test_each_precision_costs_the_source_time_scaled_by_its_matched_speed() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "fp32", 16, 100.0, 0.9, seconds=40.0)  # the source: the best trial
    _add(study, "bf16", 16, 150.0, 0.8)  # matched with the source: 1.5x
    _add(study, "fp32", 32, 200.0, 0.7)
    _add(study, "fp16", 32, 10.0, 0.6)  # matched with the batch-32 fp32 trial: 0.05x
    costs = _costs(study)
    assert costs["fp32"] == (40.0, "trial 0's time", 2)
    assert costs["bf16"][0] == pytest.approx(40.0 / 1.5) and costs["bf16"][1] == "trial 0's time at 1.50x its speed: bf16 from 1 matched trial"
    assert costs["fp16"][0] == pytest.approx(40.0 / 0.05) and "0.05x its speed" in costs["fp16"][1]
    line = verdict_cost_line(study, plan_verdict(study, ALL_RUN, seeds=2))
    assert line.startswith("Verdict of trial 0: 2 seeds x 3 precisions (fp32, fp16, bf16) = 6 trials x fp32 40 s (trial 0's time), ")
    assert f"about {2 * (40 + 40 / 1.5 + 800) / 60:.1f} min of training to go" in line and "; tf32 not run: TF32" in line


def test_a_bf16_source_scales_fp32_by_its_own_speed_and_an_unmatched_precision_is_a_guess() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "bf16", 16, 150.0, 0.9, seconds=30.0)  # the source is bf16: fp32 is slower, not faster
    _add(study, "fp32", 16, 100.0, 0.7)
    _add(study, "fp32", 32, 100.0, 0.6)
    _add(study, "fp16", 32, 300.0, 0.5, model="tiny")  # another model: matches no fp32 trial, says nothing of fp16
    costs = _costs(study)
    assert costs["fp32"][0] == pytest.approx(30.0 * 1.5) and costs["fp32"][1] == "trial 0's time at 0.67x its speed: bf16 from 1 matched trial"
    assert costs["bf16"] == (30.0, "trial 0's time", 2)
    assert costs["fp16"] == (30.0, "trial 0's time: a guess, no fp16 trial of the study matches an fp32 one", 2)
    # On a CPU that emulates fp16 the guess says so (an AMD EPYC without avx512_fp16 ran it at 0.07x fp32).
    plan = plan_verdict(study, ALL_RUN, seeds=2)
    assert "fp16 30 s (trial 0's time: a guess, no fp16 trial of the study matches an fp32 one; fp16 is emulated on this " \
           "CPU: expect it many times longer)" in verdict_cost_line(study, plan, emulated=["fp16"])

    alone = optuna.create_study(direction="maximize")
    _add(alone, "bf16", 64, 400.0, 0.95, seconds=20.0)  # no fp32 trial at batch 64: bf16's speed is unknown too
    _add(alone, "fp32", 32, 100.0, 0.6)
    costs = _costs(alone)
    assert costs["fp32"] == (20.0, "trial 0's time: a guess, no bf16 trial of the study matches an fp32 one", 2)
    assert costs["fp16"] == (20.0, "trial 0's time: a guess, no fp16 or bf16 trial of the study matches an fp32 one", 2)


def test_a_rerun_counts_finished_verdict_trials_and_takes_their_time() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "fp32", 16, 100.0, 0.9, seconds=40.0)
    _add(study, "fp16", 16, 50.0, 0.9, seconds=300.0, verdict_trial={"of_trial": 0, "precision": "fp16", "seed": 0, "seed_index": 0})
    costs = _costs(study)
    assert costs["fp16"] == (300.0, "its 1 finished verdict trial", 1)
    assert costs["fp32"][2] == 2 and costs["bf16"][2] == 2
    assert "= 6 trials (1 already finished) x " in verdict_cost_line(study, plan_verdict(study, ALL_RUN, seeds=2))


def test_a_precision_the_cpu_emulated_is_said_so_in_the_verdict() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "fp32", 16, 100.0, 0.9)
    for seed in (0, 1):
        for precision, speed in (("fp32", 100.0), ("fp16", 7.0)):
            _add(study, precision, 16, speed, 0.9 - seed / 100, verdict_trial={"of_trial": 0, "precision": precision, "seed": seed},
                 hardware={"device_name": "a CPU", "emulated_precisions": ["fp16"]})
    verdict = build_verdict(study, 0, [0, 1], ["fp32", "fp16"], {})
    fp16 = next(r for r in verdict.rows if r.precision == "fp16")
    assert fp16.emulated and fp16.speed_ratio == pytest.approx(0.07)
    assert fp16.line.endswith("[fp16 emulated on this CPU (no native instructions for it): its speed is the emulation's]")
    assert not next(r for r in verdict.rows if r.precision == "fp32").emulated


def test_sub_second_trials_and_a_short_total_are_said_in_seconds() -> None:
    """Tiny models train in under a second: '0 s' each and 'about 0.0 min' in all said nothing."""
    study = optuna.create_study(direction="maximize")
    _add(study, "fp32", 16, 100.0, 0.9, seconds=4.6)  # train 0.6 s + eval 4.0 s
    _add(study, "bf16", 16, 100.0, 0.8)
    line = verdict_cost_line(study, plan_verdict(study, ALL_RUN, seeds=2))
    assert "x fp32 5 s (trial 0's time), fp16 5 s (" in line and f"= about {6 * 4.6:.1f} s of training to go" in line
    short = optuna.create_study(direction="maximize")
    _add(short, "fp32", 16, 100.0, 0.9, train_seconds=0.25, eval_seconds=0.0)
    _add(short, "bf16", 16, 100.0, 0.8)
    line = verdict_cost_line(short, plan_verdict(short, ALL_RUN, seeds=2))
    assert "x fp32 0.25 s (trial 0's time)" in line and "= about 1.5 s of training to go" in line
