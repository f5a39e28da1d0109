"""A process's first trial in a precision pays what the process keeps for later trials (modeling code, oneDNN's
kernel caches): the report's and the verdict's memory leave such peaks out, where other trials measured the same.

The attrs are those measured on a 2-core Intel Xeon (AMX), tiny-bert, in one process: fp32, bf16, bf16, fp32 (peak,
before, after). Real Optuna studies; what is tested is the arithmetic on them, so no trial trains.
"""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from hpo._attrs import paid_first_use
from hpo.reporting._report import build_report
from hpo.reporting._verdict import build_verdict

MEASURED = [("fp32", 34.9, 388.0, 419.0), ("bf16", 53.2, 419.0, 465.6), ("bf16", 7.7, 465.6, 465.7), ("fp32", 8.9, 465.7, 465.7)]
PRECISION = {"fp_precision": CategoricalDistribution(["fp32", "bf16"])}


def _trial(precision: str, peak: float, before: float, after: float, **attrs: object) -> optuna.trial.FrozenTrial:
    return create_trial(state=TrialState.COMPLETE, value=0.9, params={"fp_precision": precision}, distributions=PRECISION, user_attrs={
        "config": {"fp_precision": precision, "model": "tiny-bert", "batch_size": 16, "seed": 0}, "hardware": {"device_name": "a CPU"},
        "throughput_samples_per_s": 100.0, "peak_memory_mb": peak, "memory_before_trial_mb": before, "memory_after_trial_mb": after,
        **attrs,
    })


def test_a_first_use_peak_is_left_out_of_the_reports_memory() -> None:
    study = optuna.create_study(direction="maximize")
    for row in MEASURED:
        study.add_trial(_trial(*row))
    assert [paid_first_use(t) for t in study.trials] == [True, True, False, False]
    rows = {r.precision: r for r in build_report(study, "sqlite:///x.db").rows}
    assert rows["fp32"].median_peak_memory_mb == pytest.approx(8.9) and rows["bf16"].median_peak_memory_mb == pytest.approx(7.7)
    alone = optuna.create_study(direction="maximize")  # only first-use trials: their peaks are all there is
    alone.add_trial(_trial(*MEASURED[1]))
    assert build_report(alone, "sqlite:///x.db").rows[0].median_peak_memory_mb == pytest.approx(53.2)


def test_the_verdicts_memory_ratio_pairs_the_seeds_neither_trial_paid_first_use_in() -> None:
    # A verdict in a fresh process: seed 0's fp32 and bf16 trials are the process's first in each (1.52x), seed 1's are not.
    study = optuna.create_study(direction="maximize")
    for (precision, peak, before, after), seed in zip(MEASURED, (0, 0, 1, 1), strict=True):
        study.add_trial(_trial(precision, peak, before, after, verdict_trial={"of_trial": 0, "precision": precision, "seed": seed}))
    bf16 = next(r for r in build_verdict(study, 0, [0, 1], ["fp32", "bf16"], {}).rows if r.precision == "bf16")
    assert bf16.memory_ratio == pytest.approx(7.7 / 8.9) and bf16.peak_memory_mb == pytest.approx(7.7)
