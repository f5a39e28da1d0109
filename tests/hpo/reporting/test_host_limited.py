"""Trials whose device waited for the host are flagged in the report and in status (issue 12)."""

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
    assert any(line.startswith("Host-limited trials") and line.endswith(": 1.") for line in summary_lines(report))
    lines = status_lines(study_status(storage, study))
    assert any("host-limited: trials 1 " in line for line in lines)
    # A study without such trials says nothing about it.
    clean = optuna.create_study(storage=storage, study_name="c", direction="maximize")
    assert not any("ost-limited" in line for line in [*summary_lines(build_report(clean, "x")), *status_lines(study_status(storage, clean))])
