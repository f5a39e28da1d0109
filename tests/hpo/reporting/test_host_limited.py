"""Trials whose speed is not their precision's are flagged in the report and in status: the device waited for the
host (issue 12), or the trial's threads waited for cores other processes held."""

from __future__ import annotations

from pathlib import Path

import optuna

from hpo.reporting._report import build_report, summary_lines
from hpo.reporting._status import status_lines, study_status


def test_report_and_status_name_the_host_limited_trials(tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'h.db'}")
    study = optuna.create_study(storage=storage, study_name="h", direction="maximize")
    distribution = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    for number, (precision, host_limited) in enumerate([("fp32", False), ("bf16", True), ("bf16", None)]):
        study.add_trial(optuna.trial.create_trial(
            params={"fp_precision": precision}, distributions={"fp_precision": distribution}, value=0.5 + number / 10,
            user_attrs={"throughput_samples_per_s": 100.0 * (number + 1), "host_limited": host_limited},
        ))
    report = build_report(study, "sqlite:///h.db")
    assert report.host_limited == [1]
    assert any(line.startswith("Host-limited trials") and line.endswith(": trial 1.") for line in summary_lines(report))
    lines = status_lines(study_status(storage, study))
    assert any("host-limited: trial 1 " in line for line in lines)
    # A study without such trials says nothing about it.
    clean = optuna.create_study(storage=storage, study_name="c", direction="maximize")
    assert not any("ost-limited" in line for line in [*summary_lines(build_report(clean, "x")), *status_lines(study_status(storage, clean))])


def test_cpu_contended_trials_are_named_and_left_out_of_every_speed(tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'c.db'}")
    study = optuna.create_study(storage=storage, study_name="c", direction="maximize")
    distribution = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    # fp32 at 100 samples/s; bf16 at 150 alone and at 30 while another process held the cores.
    for precision, speed, contended in [("fp32", 100.0, False), ("bf16", 150.0, False), ("bf16", 30.0, True)]:
        study.add_trial(optuna.trial.create_trial(
            params={"fp_precision": precision}, distributions={"fp_precision": distribution}, value=0.8,
            user_attrs={"throughput_samples_per_s": speed, "cpu_wait_fraction": 0.5 if contended else 0.01, "cpu_contended": contended},
        ))
    report = build_report(study, "sqlite:///c.db")
    assert report.cpu_contended == [2]
    bf16 = next(r for r in report.rows if r.precision == "bf16")
    assert bf16.median_samples_per_s == 150.0 and bf16.speedup == 1.5 and bf16.trials == 2  # counted, its speed left out
    assert any(line.startswith("CPU-contended trials") and line.endswith(": trial 2.") for line in summary_lines(report))
    assert any("CPU-contended: trial 2 " in line for line in status_lines(study_status(storage, study)))
    clean = optuna.create_study(storage=storage, study_name="clean", direction="maximize")
    assert not any("contended" in line for line in [*summary_lines(build_report(clean, "x")), *status_lines(study_status(storage, clean))])
