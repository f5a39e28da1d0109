"""``python -m hpo.report`` on a real study: the table, report.md and a PNG that opens."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from conftest import ROOT
from optuna.trial import TrialState
from PIL import Image

from hpo import create_storage, make_objective, open_study, parse_search_space, run_to_budget
from hpo.cli._report import main
from hpo.reporting._report import build_report, precision_table, summary_lines
from trial_executor import demo_dataset

DATA = demo_dataset(n_train=96, n_valid=24, seed=2)
FIXED = {"model": "tiny-bert", "batch_size": 16, "max_steps": 3, "eval_every": 0, "max_length": 32}


def _run(url: str, name: str, params: dict[str, object], n_trials: int, enqueue: tuple[dict[str, object], ...] = ()) -> optuna.Study:
    space = parse_search_space({"params": params, "fixed": FIXED})
    study = open_study(create_storage(url), name, space, DATA, seed=0)
    for trial_params in enqueue:
        study.enqueue_trial(trial_params)
    run_to_budget(study, make_objective(space, DATA, base_seed=0, device="cpu"), n_trials)
    return study


def test_report_writes_table_markdown_and_plot(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    precisions = {"fp_precision": {"type": "categorical", "choices": ["fp32", "tf32", "bf16"]}}
    # The baseline, then a tf32 skip and a bf16 trial whatever the sampler would pick, then one sampled trial.
    study = _run(url, "r", precisions, 3, enqueue=({"fp_precision": "tf32"}, {"fp_precision": "bf16"}))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.report", "--storage", url, "--study-name", "r", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    stdout = proc.stdout
    assert "| precision | trials | completed | best accuracy | median accuracy | median samples/s | speedup vs fp32 |" in stdout
    assert "Speedups are against trial 0, the enqueued fp32 baseline" in stdout
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines() if line.startswith("| ")}
    assert "unsupported_precision: " in rows["tf32"]
    counts = {p: int(rows[p].split("|")[2]) for p in rows if p in ("fp32", "tf32", "bf16")}
    finished = [t for t in study.get_trials() if t.state.is_finished()]
    assert sum(counts.values()) == len(finished)
    # bf16 ran with the baseline's batch size and model: every bf16 trial is compared like for like.
    bf16 = [t for t in finished if t.params["fp_precision"] == "bf16" and t.state == optuna.trial.TrialState.COMPLETE]
    assert rows["bf16"].split("|")[8].strip().endswith(f"x ({len(bf16)})")
    base_speed = study.trials[0].user_attrs["throughput_samples_per_s"]
    bf16_speed = statistics.median(t.user_attrs["throughput_samples_per_s"] for t in bf16)
    assert rows["bf16"].split("|")[7].strip() == f"{bf16_speed / base_speed:.2f}x"
    assert "Best trial:" in stdout

    markdown = (out / "report.md").read_text()
    assert "## By precision" in markdown and "## All trials" in markdown and "(fp32 baseline)" in markdown
    assert "![accuracy vs samples/s](precision_tradeoff.png)" in markdown
    with Image.open(out / "precision_tradeoff.png") as image:
        assert image.format == "PNG" and image.size[0] > 300 and image.size[1] > 200
        image.verify()


def test_speedup_falls_back_to_the_median_fp32_trial(tmp_path: Path) -> None:
    # fp_precision is not searched here, so no baseline is enqueued.
    url = f"sqlite:///{tmp_path / 'n.db'}"
    study = _run(url, "n", {"learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}}, 2)
    report = build_report(study, url)
    assert "the median of 2 measured fp32 trials" in report.baseline and "no fp32 baseline trial" in report.baseline
    (fp32,) = report.rows
    assert fp32.speedup == pytest.approx(1.0) and fp32.completed == 2
    # The two trials differ only in learning rate, which does not change speed: each matches the other.
    assert fp32.matched_speedup == pytest.approx(1.0) and fp32.matched_trials == 2
    assert precision_table(report)[2].startswith("| fp32 | 2 | 2 |")


def test_cuda_memory_a_trial_left_allocated_and_emulated_precisions_are_reported() -> None:
    """A trial whose CUDA memory after its release is well above its start is named; CPU RSS and cuBLAS-sized rests are not,
    nor a worker's first CUDA trial that set up cuBLAS (65.0 MB on an H200). So is a trial whose CPU emulated its precision."""
    study = optuna.create_study(direction="maximize")
    for device, before, after in (("cuda", 900.0, 912.0), ("cuda", 912.0, 1350.5), ("cpu", 400.0, 900.0), ("cuda", 1350.5, None),
                                  ("cuda", 0.0, 65.0), ("cuda", 0.0, 512.0)):
        study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={
            "hardware": {"device_type": device}, "memory_before_trial_mb": before, "memory_after_trial_mb": after}))
    study.add_trial(optuna.trial.create_trial(value=0.5, params={"fp_precision": "fp16"}, distributions={
        "fp_precision": optuna.distributions.CategoricalDistribution(["fp32", "fp16"])},
        user_attrs={"hardware": {"device_type": "cpu", "emulated_precisions": ["fp16"]}}))
    report = build_report(study, "sqlite:///x.db")
    assert report.memory_kept == {1: pytest.approx(438.5), 5: pytest.approx(512.0)}
    assert report.emulated == [6]
    assert any(line.startswith("Emulated-precision trials (") and line.endswith("): trial 6.") for line in summary_lines(report))
    assert "Memory not released (CUDA memory still allocated after the trial, over 64 MiB above its start, 144 MiB for a " \
           "worker's first CUDA trial, which also sets up cuBLAS: the next trial started that much fuller): 1 (+438 MiB), " \
           "5 (+512 MiB)." in summary_lines(report)


def test_start_up_time_left_out_of_the_speeds_is_said() -> None:
    """Session 23's CUDA study spent 98% of its training seconds compiling while its samples/s left that out: the
    report says how much, over the trials that timed start-up apart (not the eager CPU one, not one never measured)."""
    study = optuna.create_study(direction="maximize")
    for startup, train in ((64.98, 67.07), (5.62, 6.15), (0.0, 10.0), (None, None)):
        study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"compile_seconds": startup, "train_seconds": train}))
    report = build_report(study, "sqlite:///x.db")
    assert report.startup == (2, pytest.approx(70.6), pytest.approx(73.22))
    assert ("Start-up (the first steps of each new batch shape: compiling, CUDA-graph capture, kernel selection): 71 s of "
            "the 73 s that 2 trials trained (96%); samples/s and speedups here leave it out, a wall clock does not.") in summary_lines(report)
    eager = optuna.create_study(direction="maximize")
    eager.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"compile_seconds": 0.0, "train_seconds": 10.0}))
    assert build_report(eager, "sqlite:///x.db").startup is None
    assert not any(line.startswith("Start-up") for line in summary_lines(build_report(eager, "sqlite:///x.db")))


def test_unknown_study_lists_the_studies_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    for name in ("beta", "alpha"):
        optuna.create_study(storage=url, study_name=name)
    assert main(["--storage", url, "--study-name", "gamma"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"python -m hpo.report: error: no study 'gamma' in {url}; studies found: alpha, beta (pass one with --study-name)"
    # A missing SQLite file is reported, not created.
    assert main(["--storage", f"sqlite:///{tmp_path / 'missing.db'}", "--study-name", "x"]) == 2
    assert "no SQLite database at" in capsys.readouterr().err and not (tmp_path / "missing.db").exists()


def test_a_baseline_still_waiting_is_named_not_called_missing() -> None:
    """Enqueued trials that took the whole budget leave the baseline waiting: 'the study has no fp32 baseline trial' was untrue."""
    from hpo._attrs import BASELINE_ATTR

    study = optuna.create_study(direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    study.add_trial(optuna.trial.create_trial(value=0.8, params={"fp_precision": "bf16"}, distributions={"fp_precision": choice}))
    study.enqueue_trial({"fp_precision": "fp32"}, user_attrs={BASELINE_ATTR: True})
    report = build_report(study, "sqlite:///x.db")
    assert report.baseline == "none: no fp32 trial was measured (the fp32 baseline trial 1 has not finished: it is waiting)"


def test_an_alias_of_fp32_is_reported_as_fp32() -> None:
    """A space searching [none, bf16] stores its fp32 trials as 'none': one fp32 row, measured, the speedups' anchor."""
    study = optuna.create_study(direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["none", "bf16"])
    for precision, speed in (("none", 100.0), ("bf16", 150.0)):
        study.add_trial(optuna.trial.create_trial(value=0.8, params={"fp_precision": precision}, distributions={"fp_precision": choice},
                                                  user_attrs={"throughput_samples_per_s": speed}))
    report = build_report(study, "sqlite:///x.db")
    rows = {row.precision: row for row in report.rows}
    assert set(rows) == {"fp32", "bf16"}
    assert rows["bf16"].speedup == pytest.approx(1.5)


def test_json_export_is_json_and_an_attribute_never_overwrites_a_column() -> None:
    """A NaN inside a list attribute was written as a bare NaN (invalid JSON); an attribute named state replaced the state."""
    import json

    from hpo.reporting._export import export_rows, rows_json

    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"state": "mine", "losses": [1.0, float("nan")],
                                                                     "nested": {"x": [float("inf")]}}))
    (row,) = json.loads(rows_json(export_rows(study)))
    assert row["state"] == "COMPLETE" and row["user_attrs.state"] == "mine"
    assert row["losses"] == [1.0, None] and row["nested.x"] == [None]


def _study_with_verdict(url: str, name: str) -> optuna.Study:
    """Two measured trials and a stored verdict of the first: the report draws both plots."""
    from hpo._attrs import VERDICT_ATTR
    from hpo.reporting._verdict import PrecisionVerdict, Verdict

    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    for value, speed in ((0.8, 100.0), (0.7, 150.0)):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"throughput_samples_per_s": speed}))
    rows = [PrecisionVerdict("fp32", {"0": 2, "1": 4}, samples_per_s=100.0, speed_ratio=1.0, speed_ratio_range=[1.0, 1.0], paired_seeds=2),
            PrecisionVerdict("bf16", {"0": 3, "1": 5}, samples_per_s=150.0, speed_ratio=1.5, speed_ratio_range=[1.4, 1.6],
                             difference=-0.5, interval=[-1.5, 0.5], paired_seeds=2)]
    study.set_user_attr(VERDICT_ATTR, Verdict(name, 0, "accuracy", "points", [0, 1], rows, {}, []).to_dict())
    return study


@pytest.mark.parametrize("name", ["price_$1_to_$2", "cost $\\frac{$ run"])
def test_a_dollar_in_the_study_name_is_drawn_as_written(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """matplotlib parsed the titles as mathtext: an unpaired "$" raised a ValueError (a traceback after report.md was written)."""
    url = f"sqlite:///{tmp_path / 'd.db'}"
    _study_with_verdict(url, name)
    out = tmp_path / "out"
    assert main(["--storage", url, "--study-name", name, "--out", str(out)]) == 0, capsys.readouterr().err
    assert f"# Precision report: {name}" in (out / "report.md").read_text()
    for png in ("precision_tradeoff.png", "verdict.png"):
        with Image.open(out / png) as image:
            image.verify()


@pytest.mark.parametrize("plot", ["precision_tradeoff.png", "verdict.png"])
def test_a_plot_that_cannot_be_written_is_one_line_and_no_report(tmp_path: Path, plot: str, capsys: pytest.CaptureFixture[str]) -> None:
    """fig.savefig's OSError (here a directory in the plot's place) was a traceback, exit 1, with report.md already written."""
    url = f"sqlite:///{tmp_path / 'd.db'}"
    _study_with_verdict(url, "s")
    out = tmp_path / "out"
    (out / plot).mkdir(parents=True)
    assert main(["--storage", url, "--study-name", "s", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: cannot write the {'plot' if plot.startswith('precision') else 'verdict' + chr(39) + 's plot'} " \
        f"{out / plot}: Is a directory; pick a writable path with room for it" in err, err
    written = {p.name for p in out.iterdir()}
    assert "report.md" not in written and not any(".partial" in n for n in written) and not any((out / plot).iterdir())


def test_a_verdict_whose_plot_cannot_be_written_leaves_no_verdict_md(tmp_path: Path) -> None:
    from hpo._attrs import stored_verdict
    from hpo._errors import UserError
    from hpo.reporting._verdict import Verdict, write_verdict

    study = _study_with_verdict(f"sqlite:///{tmp_path / 'd.db'}", "s")
    (tmp_path / "out" / "verdict.png").mkdir(parents=True)
    with pytest.raises(UserError, match=r"cannot write the verdict's plot .*verdict.png: Is a directory"):
        write_verdict(Verdict.from_dict(stored_verdict(study)), tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["verdict.png"]


def test_placeholders_that_never_trained_are_in_no_precision_row(tmp_path: Path) -> None:
    """over_budget and duplicate placeholders were counted in their precision's trials and under 'not completed', while
    the summary line called them 'not run' (README: they never trained and do not count)."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}", direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    for precision, state, reason in (("fp32", TrialState.COMPLETE, None), ("bf16", TrialState.COMPLETE, None),
                                     ("bf16", TrialState.PRUNED, "over_budget"), ("fp32", TrialState.PRUNED, "duplicate"),
                                     ("bf16", TrialState.PRUNED, "oom")):
        study.add_trial(optuna.trial.create_trial(
            state=state, value=0.8 if state == TrialState.COMPLETE else None, params={"fp_precision": precision},
            distributions={"fp_precision": choice}, user_attrs={"throughput_samples_per_s": 100.0, **({"skip_reason": reason} if reason else {})}))
    report = build_report(study, "sqlite:///p.db")
    rows = {r.precision: (r.trials, r.completed, r.outcomes) for r in report.rows}
    assert rows == {"fp32": (1, 1, {}), "bf16": (2, 1, {"oom": 1})}
    assert report.states == {"COMPLETE": 2, "NOT_RUN": 2, "PRUNED": 1}
    assert "Trials: 2 complete, 1 pruned, 2 not run" in summary_lines(report)


def test_the_baseline_is_its_latest_attempt_and_a_contended_one_is_said_so(tmp_path: Path) -> None:
    """The report said 'against none: ... (the fp32 baseline trial 0 ended failed worker_died)' while its retry, trial 1,
    had completed: CPU-contended, so its speed was left out, which the line never said."""
    from hpo._attrs import BASELINE_ATTR

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'b.db'}", direction="maximize")
    choice = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])

    def add(state: TrialState, **attrs: object) -> None:
        study.add_trial(optuna.trial.create_trial(
            state=state, value=0.8 if state == TrialState.COMPLETE else None, params={"fp_precision": "fp32"},
            distributions={"fp_precision": choice}, user_attrs={BASELINE_ATTR: True, **attrs}))

    add(TrialState.FAIL, fail_reason="worker_died: exit code -9")
    add(TrialState.COMPLETE, throughput_samples_per_s=50.0, cpu_contended=True)
    assert build_report(study, "sqlite:///b.db").baseline == (
        "none: no fp32 trial was measured (the fp32 baseline trial 1 (the retry of trial 0) completed while other processes "
        "held the CPUs (CPU-contended): its speed is partly theirs)")
    add(TrialState.PRUNED, skip_reason="duplicate")  # a copy withdrawn unrun is no attempt of it
    assert "the fp32 baseline trial 1 (the retry of trial 0) completed while" in build_report(study, "sqlite:///b.db").baseline
    add(TrialState.COMPLETE, throughput_samples_per_s=100.0)  # measured: the speed reference
    assert build_report(study, "sqlite:///b.db").baseline == "trial 3, the enqueued fp32 baseline (100.0 samples/s)"


def test_a_regression_study_with_speed_objectives_only_is_judged_on_its_own_metric() -> None:
    """A regression study optimising throughput recorded no accuracy, yet the report judged its precisions on accuracy:
    every 'best accuracy' cell empty. Its quality is the task's first metric, rmse, lower being better."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "throughput_tokens_per_s", "direction": "maximize"}})
    choice = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    for precision, rmse in (("fp32", 2.0), ("bf16", 1.5), ("bf16", 3.0)):
        study.add_trial(optuna.trial.create_trial(
            value=1000.0, params={"fp_precision": precision}, distributions={"fp_precision": choice},
            user_attrs={"metrics": {"rmse": rmse, "pearson": 0.9, "spearman": 0.9, "loss": rmse**2}},
        ))
    report = build_report(study, "sqlite:///x.db")
    assert (report.metric, report.maximize_metric) == ("rmse", False)
    rows = {row.precision: row for row in report.rows}
    assert (rows["fp32"].best, rows["bf16"].best, rows["bf16"].median) == (2.0, 1.5, 2.25)
    assert precision_table(report)[0].startswith("| precision | trials | completed | best rmse | median rmse |")
    # A classification study with speed objectives only keeps accuracy.
    classified = optuna.create_study(directions=["maximize", "minimize"])
    classified.set_user_attr("search_space", {"objectives": [{"name": "throughput_samples_per_s", "direction": "maximize"},
                                                             {"name": "peak_memory_mb", "direction": "minimize"}]})
    classified.add_trial(optuna.trial.create_trial(values=[100.0, 50.0], user_attrs={"metrics": {"accuracy": 0.8, "macro_f1": 0.7}}))
    assert build_report(classified, "sqlite:///x.db").metric == "accuracy"


def test_a_study_made_elsewhere_is_reported_under_the_names_every_command_gives_its_values() -> None:
    """A search_space attr naming one objective on a two-objective study: the report was a ValueError traceback
    (status, best and export read it), and a study without one had 'value 0' where the others say value_0."""
    from hpo.reporting._export import export_rows
    from hpo.reporting._status import study_status

    for stored in ({"objective": {"metric": "accuracy", "direction": "maximize"}, "params": {}}, None):
        study = optuna.create_study(directions=["maximize", "minimize"])
        if stored is not None:
            study.set_user_attr("search_space", stored)
        study.add_trial(optuna.trial.create_trial(values=[0.5, 10.0]))
        report = build_report(study, "sqlite:///x.db")
        assert report.objectives == [("value_0", "maximize"), ("value_1", "minimize")]
        assert study_status(study._storage, study).objectives == report.objectives
        assert "values.value_0" in export_rows(study)[0]
        assert "Objectives: value_0 (maximize), value_1 (minimize)" in summary_lines(report)


def test_a_precisions_best_is_one_that_meets_the_constraints_and_they_are_printed_as_written() -> None:
    """The bf16 row's best was a trial breaking the space's memory cap, a trial no command would ever call the best; and
    the constraints were printed as a Python dict."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"},
                                         "constraints": {"min_accuracy": 0.5, "max_peak_memory_mb": 20000}})
    choice = optuna.distributions.CategoricalDistribution(["fp32", "bf16"])
    for precision, accuracy, feasible in (("fp32", 0.7, True), ("bf16", 0.9, False), ("bf16", 0.8, True)):
        study.add_trial(optuna.trial.create_trial(
            value=accuracy, params={"fp_precision": precision}, distributions={"fp_precision": choice},
            user_attrs={"metrics": {"accuracy": accuracy}, "feasible": feasible, "throughput_samples_per_s": 12345.6},
        ))
    report = build_report(study, "sqlite:///x.db")
    rows = {row.precision: row for row in report.rows}
    assert (rows["fp32"].best, rows["bf16"].best, rows["bf16"].median) == (0.7, 0.8, pytest.approx(0.85))
    table = precision_table(report)
    assert table[0].startswith("| precision | trials | completed | best feasible accuracy | median accuracy | median samples/s |")
    assert table[3].startswith("| bf16 | 2 | 2 | 0.8 | 0.85 | 12346 |")  # in full: 1.235e+04 hid the speed's size
    assert "Objectives: accuracy (maximize); constraints: min_accuracy: 0.5, max_peak_memory_mb: 20000" in summary_lines(report)
