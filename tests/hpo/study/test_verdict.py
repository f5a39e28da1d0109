"""The precision verdict (issue 25): paired seeds, enqueued once across workers, resumed after a SIGKILL, intervals by hand."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from conftest import ROOT, SMALL_SPACE, cli_args
from optuna.trial import FrozenTrial, TrialState

import hpo
from hpo._attrs import VERDICT_TRIAL_ATTR, stored_verdict
from hpo._errors import UserError
from hpo.cli._export import main as export_main
from hpo.cli._report import main as report_main
from hpo.reporting._student_t import central_probability, t_quantile
from hpo.study._budget import take_slot
from trial_executor import TextClassificationData, demo_dataset

# Trials of 12 optimizer steps of 8 rows that checkpoint every 3: killed mid-run after the first, a few seconds each.
# Eval loss as the objective: it differs between seeds and precisions after a few steps (accuracy does not yet),
# so the intervals checked by hand are not all zero.
VERDICT_SPACE = {
    **SMALL_SPACE, "objective": {"metric": "loss", "direction": "minimize"},
    "params": {**SMALL_SPACE["params"], "batch_size": {"type": "categorical", "choices": [8, 16]},
               "learning_rate": {**SMALL_SPACE["params"]["learning_rate"], "high": 5e-3, "default": 4e-3}},
    "fixed": {**SMALL_SPACE["fixed"], "max_length": 32, "max_steps": 12, "eval_every": 3},
}
FAST_HEARTBEAT = ["--heartbeat-interval", "1", "--grace-period", "3"]
# Two-sided 95% quantiles of Student's t (any statistics table).
KNOWN_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 10: 2.228, 19: 2.093, 29: 2.045, 30: 2.042}


def test_t_quantile_matches_the_tables() -> None:
    for df, known in KNOWN_T95.items():
        assert t_quantile(0.95, df) == pytest.approx(known, abs=5e-4), df
    assert t_quantile(0.99, 4) == pytest.approx(4.604, abs=5e-4)
    assert central_probability(0.0, 3) == 0.0 and central_probability(1e6, 7) == pytest.approx(1.0)


def _trials(url: str, name: str) -> list[FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials()
    finally:
        storage.engine.dispose()


def _start_verdict(args: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    # One thread each: two workers on a shared 2-core machine, without OpenMP threads spinning against each other.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "hpo", "verdict", *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _running_verdict_trial_with_checkpoint(url: str, name: str, timeout: float = 240) -> FrozenTrial:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t in _trials(url, name):
            if t.state == TrialState.RUNNING and "verdict_trial" in t.user_attrs and t.user_attrs.get("checkpoint"):
                return t
        time.sleep(0.2)
    raise AssertionError("no verdict trial ran long enough to checkpoint")


def _two_verdict_workers_one_sigkilled(url: str, verdict: list[str], tmp_path: Path) -> tuple[FrozenTrial, int]:
    """Two ``hpo verdict`` workers on study "v"; the one running a checkpointed trial is SIGKILLed.

    The victim trial as seen before the kill, and the survivor's index (its log ``worker{index}.log``,
    its output directory ``out{index}``), once the survivor has finished the verdict.
    """
    verdict = [*verdict, "--artifact-store", str(tmp_path / "artifacts"), *FAST_HEARTBEAT]
    workers = [_start_verdict([*verdict, "--out", str(tmp_path / f"out{i}")], tmp_path, tmp_path / f"worker{i}.log") for i in range(2)]
    try:
        victim = _running_verdict_trial_with_checkpoint(url, "v")
        killed = next(w for w in workers if w.pid == victim.user_attrs["worker"]["pid"])
        killed.send_signal(signal.SIGKILL)
        survivor = next(w for w in workers if w is not killed)
        index = workers.index(survivor)
        assert survivor.wait(timeout=300) == 0, (tmp_path / f"worker{index}.log").read_text()[-3000:]
    finally:
        for worker in workers:
            worker.kill()
    return victim, index


def _interval_by_hand(differences: list[float]) -> list[float]:
    half = KNOWN_T95[len(differences) - 1] * statistics.stdev(differences) / math.sqrt(len(differences))
    mean = statistics.fmean(differences)
    return [mean - half, mean + half]


@pytest.mark.postgres
def test_verdict_pairs_seeds_across_two_workers_survives_a_sigkill_and_its_intervals_are_the_stored_trials(
    pg_database: str, small_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(VERDICT_SPACE))
    # Trial 0, the fp32 baseline, is the finished study's best trial.
    hpo.optimize(space, small_data, storage=pg_database, study_name="v", n_trials=1, device="cpu", text_column="sentence",
                 label_column="label", artifact_store=None)
    flags = [a for a in cli_args(pg_database, space, small_data, "--study-name", "v") if a not in ("--space", str(space))]
    victim, index = _two_verdict_workers_one_sigkilled(pg_database, [*flags, "--seeds", "2"], tmp_path)
    log = (tmp_path / f"worker{index}.log").read_text()
    # The cost comes before any trial: 2 seeds x 3 precisions x trial 0's time; tf32 listed, not run.
    assert log.startswith("Verdict of trial 0: 2 seeds x 3 precisions (fp32, fp16, bf16) = 6 trials x fp32 ")
    assert "tf32 not run" in log

    trials = _trials(pg_database, "v")
    assert not [t.number for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    verdict_trials = [t for t in trials if "verdict_trial" in t.user_attrs]
    assert [t.number for t in trials if t not in verdict_trials] == [0]  # no sampled trial was added
    # Enqueued once across the two workers: one first attempt per (precision, seed), the victim's retry besides.
    first = [t for t in verdict_trials if "failed_trial" not in t.system_attrs]
    origins = sorted(t.user_attrs["enqueued_from"] for t in first)
    assert origins == sorted(f"verdict:0:{p}:{s}" for p in ("fp32", "fp16", "bf16") for s in (0, 1))
    assert next(t for t in trials if t.number == victim.number).state == TrialState.FAIL
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == victim.number)
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["resumed_at_step"] > 0
    # Every checkpoint went once its trial was told (the victim's own once its retry had resumed past it).
    pointers = {t.user_attrs["checkpoint"]["artifact_id"] for t in trials if t.user_attrs.get("checkpoint")}
    assert pointers and not pointers & {p.name for p in (tmp_path / "artifacts").iterdir()}
    done = {(t.user_attrs["verdict_trial"]["precision"], t.user_attrs["verdict_trial"]["seed"]): t
            for t in verdict_trials if t.state == TrialState.COMPLETE}
    assert sorted(done) == sorted((p, s) for p in ("fp32", "fp16", "bf16") for s in (0, 1))
    source = trials[0]
    for (precision, seed), t in done.items():  # paired: the verdict's seed and precision, the source's other values
        assert t.user_attrs["config"]["seed"] == seed and t.user_attrs["config"]["fp_precision"] == precision
        assert {k: v for k, v in t.params.items() if k != "fp_precision"} == {k: v for k, v in source.params.items() if k != "fp_precision"}
    # Seed 0 in fp32 is the source trial again (its own seed): the same loss.
    assert done[("fp32", 0)].value == pytest.approx(source.value)

    stored = optuna.load_study(study_name="v", storage=pg_database).user_attrs["precision_verdict"]
    assert stored["unsupported"].keys() == {"tf32"} and stored["seeds"] == [0, 1]
    rows = {r["precision"]: r for r in stored["rows"]}
    for precision in ("fp16", "bf16"):
        differences = [done[(precision, s)].value - done[("fp32", s)].value for s in (0, 1)]
        assert differences[0] != differences[1]  # a real interval, not a point
        assert rows[precision]["interval"] == pytest.approx(_interval_by_hand(differences), rel=1e-4)  # t to 3 decimals
        assert rows[precision]["difference"] == pytest.approx(statistics.fmean(differences))
        ratios = [done[(precision, s)].user_attrs["throughput_samples_per_s"] / done[("fp32", s)].user_attrs["throughput_samples_per_s"]
                  for s in (0, 1)]
        assert rows[precision]["speed_ratio_range"] == pytest.approx([min(ratios), max(ratios)])
        assert rows[precision]["line"].startswith(f"{precision}: ") and "95% CI" in rows[precision]["line"]
    assert rows["fp16"]["skipped_steps"] is not None and rows["bf16"]["skipped_steps"] is None
    assert (tmp_path / f"out{index}" / "verdict.png").stat().st_size > 0

    # Stored and browsable: report and export show the stored verdict.
    storage_flags = ["--storage", pg_database, "--study-name", "v"]
    capsys.readouterr()
    assert report_main([*storage_flags, "--out", str(tmp_path / "report")]) == 0
    assert rows["bf16"]["line"] in capsys.readouterr().out
    assert "Precision verdict" in (tmp_path / "report" / "report.md").read_text()
    assert export_main([*storage_flags, "--verdict", "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert [r["precision"] for r in exported] == ["fp32", "fp16", "bf16", "tf32"]
    assert all(r["devices"] and "torch" in r["devices"][0] for r in exported)  # where it was measured, on every row


def _verdict_trial(precision: str, seed: int, accuracy: float, speed: float, *, state: TrialState = TrialState.COMPLETE,
                   host_limited: bool = False, majority_class: bool = False, cpu_contended: bool = False,
                   config: dict[str, Any] | None = None) -> optuna.trial.FrozenTrial:
    attrs = {"verdict_trial": {"of_trial": 0, "precision": precision, "seed": seed, "seed_index": seed},
             "throughput_samples_per_s": speed, "peak_memory_mb": 100.0 if precision == "fp32" else 60.0,
             "host_limited": host_limited, "majority_class": majority_class, "cpu_contended": cpu_contended,
             **({"config": config} if config else {})}
    value = accuracy if state == TrialState.COMPLETE else None
    return optuna.trial.create_trial(state=state, value=value, user_attrs=attrs)


def test_verdict_table_from_stored_trials_by_hand() -> None:
    from hpo.reporting._verdict import Verdict, build_verdict, verdict_table

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.80))  # the source trial
    fp32, fp16, bf16 = [0.80, 0.82, 0.78], [0.76, 0.79, 0.73], [0.81, 0.81, 0.78]
    for seed in range(3):
        study.add_trial(_verdict_trial("fp32", seed, fp32[seed], 100.0))
        study.add_trial(_verdict_trial("fp16", seed, fp16[seed], 180.0 + seed * 10, cpu_contended=seed == 0))
        if seed == 2:  # a first attempt that failed, superseded by its retry
            study.add_trial(_verdict_trial("bf16", seed, 0.0, 0.0, state=TrialState.FAIL))
        study.add_trial(_verdict_trial("bf16", seed, bf16[seed], 240.0, host_limited=seed == 1))
    verdict = build_verdict(study, 0, [0, 1, 2], ["fp32", "fp16", "bf16"], {"tf32": "TF32 is a mode of NVIDIA tensor cores"})
    rows = {r.precision: r for r in verdict.rows}
    for precision, values in (("fp16", fp16), ("bf16", bf16)):
        differences = [(v - f) * 100 for v, f in zip(values, fp32, strict=True)]
        half = 4.303 * statistics.stdev(differences) / math.sqrt(3)  # t(0.975, df 2) from the tables
        assert rows[precision].interval == pytest.approx([statistics.fmean(differences) - half, statistics.fmean(differences) + half], abs=2e-3)
        assert rows[precision].paired_seeds == 3 and rows[precision].memory_ratio == pytest.approx(0.6)
    assert rows["fp16"].speed_ratio == pytest.approx(statistics.geometric_mean([1.8, 1.9, 2.0]))  # 1.898
    assert rows["fp16"].speed_ratio_range == pytest.approx([1.8, 2.0])
    # Differences -4, -3, -5 points: mean -4, sd 1, half-width 4.303 / sqrt(3) = 2.48.
    # Seed 0's fp16 trial shared its cores with other processes: said, not dropped (every column is over the paired seeds).
    assert rows["fp16"].line == ("fp16: 1.90x faster, 0.60x memory, accuracy -4.00 points (95% CI -6.48..-1.52): loss "
                                 f"[speed taken while other processes held the CPUs in trial {rows['fp16'].trials['0']}]")
    # bf16: +1, -1, 0 points: mean 0, sd 1, CI -2.48..+2.48.
    assert rows["bf16"].line.endswith("(95% CI -2.48..+2.48): no measurable loss on this model and data (a loss of up to "
                                      f"2.48 points is not ruled out: more seeds narrow it) [speed host-limited in trial {rows['bf16'].trials['1']}]")
    assert rows["bf16"].not_completed == {} and len(rows["bf16"].trials) == 3
    # Stored as one JSON-able dict and read back the same; the table lists tf32 as not run.
    assert Verdict.from_dict(verdict.to_dict()) == verdict
    table = "\n".join(verdict_table(verdict))
    assert "| tf32 | not run |" in table and "- tf32: not run: TF32 is a mode of NVIDIA tensor cores" in table
    assert table.splitlines()[0].endswith("| host-limited | CPU-contended |")
    assert f"| no | {rows['fp16'].trials['0']} |" in table and "| unsupported here: TF32 is a mode" in table


def test_trials_that_learned_nothing_give_no_accuracy_verdict() -> None:
    from hpo.reporting._verdict import build_verdict

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.52))  # the source trial
    for seed, bf16_learned in ((0, False), (1, True)):
        study.add_trial(_verdict_trial("fp32", seed, 0.52, 100.0, majority_class=True))
        study.add_trial(_verdict_trial("bf16", seed, 0.90 if bf16_learned else 0.52, 150.0, majority_class=not bf16_learned))
        study.add_trial(_verdict_trial("fp16", seed, 0.52, 150.0, majority_class=True))
    rows = {r.precision: r for r in build_verdict(study, 0, [0, 1], ["fp32", "fp16", "bf16"], {}).rows}
    assert rows["fp32"].line == f"fp32: the reference [majority class (learned nothing) in trials {rows['fp32'].trials['0']}, {rows['fp32'].trials['1']}]"
    # fp16 and fp32 both at the majority class in every seed: equal scores, and nothing said of accuracy.
    assert rows["fp16"].learned_nothing and rows["fp16"].line.startswith(
        "fp16: 1.50x faster, 0.60x memory; no verdict on accuracy: in every seed both fp16 and fp32 learned nothing (majority class); "
        "the learning rate range may be too high")
    # bf16 learned in seed 1 where fp32 did not: a real difference, with the seed that learned nothing named.
    assert not rows["bf16"].learned_nothing and "accuracy +19.00 points (95% CI" in rows["bf16"].line
    assert rows["bf16"].line.endswith(f"[majority class (learned nothing) in trial {rows['bf16'].trials['0']}]")

    # Re-trained at a fine-tuning rate, the verdict blames the training's length alone.
    retrained = optuna.create_study(direction="maximize")
    retrained.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    retrained.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.52))
    for seed in (0, 1):
        for precision in ("fp32", "fp16"):
            retrained.add_trial(_verdict_trial(precision, seed, 0.52, 100.0, majority_class=True, config={"learning_rate": 2e-5}))
    fp16 = next(r for r in build_verdict(retrained, 0, [0, 1], ["fp32", "fp16"], {}).rows if r.precision == "fp16")
    assert fp16.line.endswith("learned nothing (majority class); the learning rate (2e-05) is no higher than "
                              "fine-tuning's (~1e-5..3e-4): the training was likely too short for it (more max_steps or epochs)")


def test_the_space_verdict_section_is_checked_and_not_part_of_the_stored_space() -> None:
    from hpo.space import SearchSpaceError, parse_search_space

    space = parse_search_space({**SMALL_SPACE, "verdict": {"seeds": 4, "precisions": ["fp32", "bf16"]}})
    assert space.verdict is not None and space.verdict.seeds == 4 and space.verdict.precisions == ["fp32", "bf16"]
    # Adding verdict: to a study's space file still resumes that study.
    assert space.stored_form() == parse_search_space(SMALL_SPACE).stored_form()
    for bad in ({"seeds": 1}, {"precisions": ["bf16", "fp16"]}, {"precisions": ["fp32", "fp64"]}, {"precisions": ["fp32", "fp32"]}, {"seed": 3}):
        with pytest.raises(SearchSpaceError, match="verdict"):
            parse_search_space({**SMALL_SPACE, "verdict": bad})


def test_a_verdict_compares_the_precisions_the_space_searches_unless_told() -> None:
    from hpo.space import parse_search_space
    from hpo.study import RunOptions
    from hpo.study._verdict import verdict_after_budget, verdict_precisions

    narrow = {**SMALL_SPACE, "params": {**SMALL_SPACE["params"], "fp_precision": {"type": "categorical", "choices": ["bf16", "no"]}}}
    options = RunOptions(verdict=2)
    # "no" is fp32 in accelerate's spelling; the registry's order, not the space's.
    assert verdict_after_budget(parse_search_space(narrow), options) == (2, ["fp32", "bf16"])
    assert verdict_after_budget(parse_search_space(SMALL_SPACE), options) == (2, ["fp32", "tf32", "fp16", "bf16"])
    assert verdict_after_budget(parse_search_space(narrow), RunOptions()) is None  # no --verdict, no verdict: section
    fixed = {**SMALL_SPACE, "params": {k: v for k, v in SMALL_SPACE["params"].items() if k != "fp_precision"}}
    assert verdict_precisions(parse_search_space(fixed).stored_form()["params"], None) == ["fp32", "tf32", "fp16", "bf16"]
    assert verdict_precisions(parse_search_space(narrow).stored_form()["params"], ["bf16", "fp32"]) == ["fp32", "bf16"]
    # fp32 alone compares nothing: refused, whether named with --precisions or the space searches nothing else.
    with pytest.raises(UserError, match=r"--precisions names fp32 alone: .* add one \(e.g. --precisions fp32 bf16\)"):
        verdict_precisions(parse_search_space(narrow).stored_form()["params"], ["fp32", "fp32"])
    only_fp32 = {**SMALL_SPACE, "params": {**SMALL_SPACE["params"], "fp_precision": {"type": "categorical", "choices": ["fp32"]}}}
    with pytest.raises(UserError, match=r"choices \['fp32'\] hold fp32 alone: .* widen the space"):
        verdict_precisions(parse_search_space(only_fp32).stored_form()["params"], None)


def test_a_worker_of_the_budget_never_takes_a_waiting_verdict_trial(tmp_path: Path) -> None:
    """Verdict trials wait in the same queue as the budget's: a worker extending the budget (or one still at it
    while another worker enqueued the verdict) must leave them to the verdict's workers, not train them as budget
    trials nor skip them as over the budget (which lost a seed of the verdict under --workers)."""
    from hpo._api import RunOptions, open_run, run_study
    from hpo.study._verdict import enqueue_verdict, plan_verdict

    storage = f"sqlite:///{tmp_path / 'q.db'}"
    tiny = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
            "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    common = {"storage": storage, "study_name": "q", "device": "cpu", "artifact_store": None}
    study = hpo.optimize(tiny, demo_dataset_small(), n_trials=1, **common)
    plan = plan_verdict(study, {"fp32": None, "bf16": None}, seeds=2)
    assert enqueue_verdict(study, study._storage, plan) == 4
    for n_trials in (1, 2):  # at its budget (the over-budget skip), then extended by one
        run = open_run(tiny, demo_dataset_small(), RunOptions(n_trials=n_trials, **common))
        run_study(run.prepared, run.options)
    trials = hpo.load("q", storage=storage).get_trials()
    verdict = [t for t in trials if "verdict_trial" in t.user_attrs]
    assert [t.state for t in verdict] == [TrialState.WAITING] * 4
    assert [t.state for t in trials if "verdict_trial" not in t.user_attrs] == [TrialState.COMPLETE] * 2


def demo_dataset_small() -> TextClassificationData:
    return demo_dataset(n_train=64, n_valid=16, seed=1)


def test_a_verdict_without_data_flags_reads_the_data_the_study_ran_on(
    small_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from hpo.cli._verdict import main as verdict_main

    data = tmp_path / "train.tsv"
    data.write_bytes(small_data.read_bytes())
    tiny = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
            "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    storage = f"sqlite:///{tmp_path / 'd.db'}"
    common = {"storage": storage, "study_name": "d", "device": "cpu", "artifact_store": None}
    monkeypatch.chdir(data.parent)  # a relative --data: stored as its absolute path
    source = hpo.optimize(tiny, "train.tsv", n_trials=1, text_column="sentence", valid_fraction=0.25, **common).trials[0]
    flags = f"--data {data} --text-column sentence --label-column label --valid-fraction 0.25"

    # Elsewhere, no data flags: the verdict reads the file and flags the study stored, and says so.
    # No --study-name either: as report and best, the storage's only study.
    monkeypatch.chdir((tmp_path / "elsewhere").mkdir() or tmp_path / "elsewhere")
    # An --out that cannot be made is refused before a verdict trial is written (it was found after they had all trained).
    (tmp_path / "a-file").write_text("")
    assert verdict_main(["--storage", storage, "--device", "cpu", "--seeds", "2", "--out", str(tmp_path / "a-file" / "v")]) == 2
    assert capsys.readouterr().err.strip() == (f"python -m hpo.verdict: error: cannot create --out directory {tmp_path / 'a-file' / 'v'}: "
                                               "Not a directory; pass a directory that can be made there")
    assert len(hpo.load("d", storage=storage).trials) == 1
    assert verdict_main(["--storage", storage, "--device", "cpu", "--seeds", "2", "--data", "missing.tsv"]) == 2
    assert not (tmp_path / "elsewhere" / "hpo-verdict-d").exists()  # made for the verdict, removed when it was refused
    capsys.readouterr()
    assert verdict_main(["--storage", storage, "--device", "cpu", "--seeds", "2"]) == 0
    assert (tmp_path / "elsewhere" / "hpo-verdict-d" / "verdict.md").is_file()
    out = capsys.readouterr().out
    assert out.startswith(f"Data: {flags} (the study's own; --data reads another copy)\n")
    same_seed = [t for t in hpo.load("d", storage=storage).trials if t.user_attrs.get("verdict_trial", {}).get("seed_index") == 0]
    fp32 = next(t for t in same_seed if t.params["fp_precision"] == "fp32")
    assert fp32.value == source.value and fp32.user_attrs["metrics"]["eval_rows"] == source.user_attrs["metrics"]["eval_rows"]

    # Other data names the data the study ran with; the study's file gone is one line too, nothing run.
    with pytest.raises(hpo.UserError, match=f"different data .*: it ran with {re.escape(flags)}, this run with --data "
                                            f"{re.escape(str(small_data))} --text-column sentence --label-column label; rerun with its original data"):
        hpo.optimize(tiny, small_data, n_trials=2, text_column="sentence", **common)
    data.rename(tmp_path / "moved.tsv")
    assert verdict_main(["--storage", storage, "--study-name", "d", "--device", "cpu", "--seeds", "3"]) == 2
    assert capsys.readouterr().err.strip() == (f"python -m hpo.verdict: error: the study ran with {flags}, but {data} is not on this machine; "
                                               "pass --data (and its flags) with a copy of that data")
    assert len(hpo.load("d", storage=storage).trials) == 1 + 4


def test_a_verdict_enqueues_no_search_trial_not_even_the_baseline_a_fixed_run_went_without(tmp_path: Path) -> None:
    """A run with --fix fp_precision=bf16 enqueues no fp32 baseline; its verdict, opening the study on the stored space
    (without the fix), enqueued one, which then waited for the next run, and the next --fix bf16 run trained it in fp32."""
    tiny = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
            "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    common = {"storage": f"sqlite:///{tmp_path / 'f.db'}", "study_name": "f", "device": "cpu", "artifact_store": None}
    data = demo_dataset(n_train=48, n_valid=16, seed=4)
    hpo.optimize(tiny, data, n_trials=1, fix=["fp_precision=bf16"], **common)
    hpo.verdict("f", data, seeds=2, precisions=["fp32", "bf16"], storage=common["storage"], device="cpu", artifact_store=None)
    trials = hpo.load("f", storage=common["storage"]).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 5, [(t.number, t.state, t.params) for t in trials]
    assert not any(t.user_attrs.get("fp32_baseline") for t in trials)
    assert sorted(t.params["fp_precision"] for t in trials if VERDICT_TRIAL_ATTR in t.user_attrs) == ["bf16", "bf16", "fp32", "fp32"]


def test_a_run_cut_by_its_timeout_makes_no_verdict_until_a_rerun_finishes_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from hpo.cli._run import main as run_main

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
                                     "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}))
    monkeypatch.chdir(tmp_path)
    args = ["--space", str(space), "--device", "cpu", "--n-trials", "3", "--verdict", "2"]
    # A millisecond: the run ends before its budget (at most one trial starts before the deadline is checked).
    assert run_main([*args, "--timeout", "0.001"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\nverdict not started: --timeout ended the run at [01] of 3 budgeted trials; "
                     r"rerun the same command to finish them and make the verdict\n$", out), out
    assert "Verdict of trial" not in out and not [t for t in hpo.load().trials if "verdict_trial" in t.user_attrs]
    # Without a verdict asked for, a run cut short says so too (it ended at "1 of 3 budgeted trials finished", exit 0).
    assert run_main([*args[:-2], "--timeout", "0.001", "--study-name", "no-verdict"]) == 0
    assert re.search(r"\n--timeout ended the run at [01] of 3 budgeted trials; rerun the same command to finish them\n$", capsys.readouterr().out)
    assert run_main(args) == 0  # the same command, without the timeout: the budget, then the verdict
    assert "Verdict of trial " in capsys.readouterr().out
    verdict = [t for t in hpo.load().trials if "verdict_trial" in t.user_attrs]
    assert len(verdict) == 4 and all(t.state == TrialState.COMPLETE for t in verdict)


def test_the_report_says_when_the_best_trial_is_no_longer_the_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hpo.reporting._verdict import build_verdict, store_verdict

    url = f"sqlite:///{tmp_path / 'r.db'}"
    study = optuna.create_study(study_name="r", storage=url, direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(value=0.80))  # the best when the verdict was made
    for seed in range(2):
        study.add_trial(_verdict_trial("fp32", seed, 0.80 + seed / 100, 100.0))
        study.add_trial(_verdict_trial("bf16", seed, 0.81 - seed / 100, 150.0))
    store_verdict(study, build_verdict(study, 0, [0, 1], ["fp32", "bf16"], {}))
    storage_flags = ["--storage", url, "--study-name", "r", "--out", str(tmp_path / "report")]
    assert report_main(storage_flags) == 0
    assert "the study's best is now" not in capsys.readouterr().out
    study.add_trial(optuna.trial.create_trial(value=0.85))  # the study extended: trial 5 is its best now
    assert report_main(storage_flags) == 0
    line = "This verdict is of trial 0; the study's best is now trial 5 (`python -m hpo verdict --study-name r` makes its verdict)."
    assert line in capsys.readouterr().out.splitlines() and line in (tmp_path / "report" / "report.md").read_text()


def test_a_running_verdict_trial_holds_no_slot_of_the_search_budget(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'studies.db'}", study_name="held")
    study.tell(study.ask(), 1.0)
    verdict = study.ask()  # as the verdict's runner starts one: marked, with a slot of its own budget
    verdict.set_user_attr(VERDICT_TRIAL_ATTR, {"of_trial": 0, "precision": "fp32", "seed": 1, "seed_index": 0})
    assert take_slot(study, verdict, n_trials=sys.maxsize)
    # A search worker extending the study to 2 trials has one slot left while the verdict trial runs.
    assert take_slot(study, study.ask(), n_trials=2)
    assert not take_slot(study, study.ask(), n_trials=2)  # that one slot is now held


def test_a_verdict_stopped_part_way_leaves_the_stored_one_as_it_was(tmp_path: Path) -> None:
    from hpo._api import RunHooks, open_existing, run_verdict
    from hpo.study import RunOptions

    space = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
             "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    url, store = f"sqlite:///{tmp_path / 'v.db'}", str(tmp_path / "artifacts")
    study = hpo.optimize(space, storage=url, n_trials=1, device="cpu", verdict=2, artifact_store=store)
    whole = stored_verdict(study)
    assert whole is not None and len(whole["seeds"]) == 2
    # A third seed asked for, then a signal after its first trial: the two seeds' verdict stays the stored one.
    options = RunOptions(storage=url, study_name=study.study_name, device="cpu", artifact_store=store)
    finished: list[int] = []
    hooks = RunHooks(on_trial_finished=lambda trial, _: finished.append(trial.number), stop_requested=lambda: bool(finished))
    partial = run_verdict(open_existing(None, None, options), options, seeds=3, hooks=hooks)
    assert len(finished) == 1 and len(partial.seeds) == 3
    assert stored_verdict(optuna.load_study(study_name=study.study_name, storage=url)) == whole


def test_every_column_of_a_row_is_over_its_paired_seeds_and_ratios_average_geometrically() -> None:
    from hpo.reporting._verdict import build_verdict, verdict_table

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.80))  # the source trial
    for seed, (fp32, bf16, fp16) in enumerate([(0.80, 0.81, 0.79), (0.90, 0.91, None), (None, 0.10, 0.50)]):
        study.add_trial(_verdict_trial("fp32", seed, fp32 or 0.0, 100.0, state=TrialState.COMPLETE if fp32 else TrialState.FAIL))
        study.add_trial(_verdict_trial("bf16", seed, bf16, {0: 200.0, 1: 50.0, 2: 1000.0}[seed]))
        study.add_trial(_verdict_trial("fp16", seed, fp16 or 0.0, 150.0, state=TrialState.COMPLETE if fp16 else TrialState.FAIL))
    verdict = build_verdict(study, 0, [0, 1, 2], ["fp32", "bf16", "fp16"], {})
    rows = {r.precision: r for r in verdict.rows}
    # bf16: 2x on seed 0, 0.5x on seed 1 is no speed-up; seed 2, which fp32 did not complete, is in no column.
    bf16 = rows["bf16"]
    assert bf16.paired_seeds == 2 and bf16.speed_ratio == pytest.approx(1.0) and bf16.speed_ratio_range == [0.5, 2.0]
    assert bf16.samples_per_s == pytest.approx(125.0) and bf16.objective_mean == pytest.approx(0.86)
    assert bf16.line.startswith("bf16: 1.00x faster, 0.60x memory, accuracy +1.00 points (95% CI +1.00..+1.00)")
    # One paired seed: no interval, and still what did not complete.
    assert rows["fp16"].line == "fp16: 1.50x faster, 0.60x memory, accuracy -1.00 points (one paired seed: no interval); not completed: 1 failed"
    assert rows["fp32"].line == "fp32: the reference; not completed: 1 failed"
    table = "\n".join(verdict_table(verdict))
    assert "| bf16 | 2 of 3 (" in table and "| fp16 | 1 of 3 (" in table and "| fp32 | 2 of 3 (" in table


def test_a_several_objective_verdict_compares_the_quality_metric_and_says_when_its_trial_left_the_front() -> None:
    from hpo.reporting._verdict import build_verdict, other_best

    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr("search_space", {"objectives": [{"name": "throughput_samples_per_s", "direction": "maximize"},
                                                        {"name": "accuracy", "direction": "maximize"}]})
    study.add_trial(optuna.trial.create_trial(values=[100.0, 0.80]))  # the verdict's trial, on the front
    study.add_trial(optuna.trial.create_trial(values=[300.0, 0.70]))  # the front's other end
    for seed in range(2):
        for precision, speed, accuracy in (("fp32", 100.0, 0.80), ("bf16", 250.0, 0.75)):
            attrs = _verdict_trial(precision, seed, accuracy, speed).user_attrs
            study.add_trial(optuna.trial.create_trial(values=[speed, accuracy + seed / 100], user_attrs=attrs))
    verdict = build_verdict(study, 0, [0, 1], ["fp32", "bf16"], {})
    bf16 = next(r for r in verdict.rows if r.precision == "bf16")
    assert verdict.metric == "accuracy" and verdict.unit == "points" and bf16.difference == pytest.approx(-5.0)
    assert other_best(study, verdict) is None
    study.add_trial(optuna.trial.create_trial(values=[150.0, 0.85]))  # trial 0 is dominated now
    assert other_best(study, verdict) == (
        "This verdict is of trial 0, no longer on the study's Pareto front (trials 1, 6); "
        "`python -m hpo verdict --study-name " + study.study_name + " --trial N` makes the verdict of one of them.")


def test_a_regression_verdict_with_a_throughput_objective_compares_rmse() -> None:
    """It compared accuracy, which regression trials never record: 'no accuracy recorded to compare' on every row."""
    from hpo.reporting._verdict import build_verdict

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "throughput_samples_per_s", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(value=100.0))  # the source trial
    for seed in range(2):
        for precision, rmse in (("fp32", 2.0), ("bf16", 2.5 + seed)):
            attrs = {**_verdict_trial(precision, seed, 0.0, 100.0).user_attrs, "metrics": {"rmse": rmse, "pearson": 0.5, "loss": rmse**2}}
            study.add_trial(optuna.trial.create_trial(value=100.0, user_attrs=attrs))
    verdict = build_verdict(study, 0, [0, 1], ["fp32", "bf16"], {})
    bf16 = next(r for r in verdict.rows if r.precision == "bf16")
    assert (verdict.metric, verdict.unit) == ("rmse", "") and bf16.difference == pytest.approx(1.0)
    assert "rmse +1 (95% CI" in bf16.line and "no accuracy" not in bf16.line


def test_a_metric_in_its_own_unit_keeps_three_significant_digits() -> None:
    """rmse on targets of 1e-3 printed 'rmse -0.00 (95% CI -0.00..+0.00)' at two decimals."""
    from hpo.reporting._verdict import PrecisionVerdict, verdict_line

    row = PrecisionVerdict("bf16", {"0": 3, "1": 4}, speed_ratio=1.5, difference=-0.000123, interval=[-0.000456, 0.000211], paired_seeds=2)
    line = verdict_line(row, "rmse", "", higher_is_better=False)
    assert line == ("bf16: 1.50x faster, rmse -0.000123 (95% CI -0.000456..+0.000211): no measurable loss on this model and data "
                    "(a loss of up to 0.000211 is not ruled out: more seeds narrow it)")
    points = verdict_line(PrecisionVerdict("bf16", {"0": 3, "1": 4}, speed_ratio=1.5, difference=-0.1, interval=[-0.6, 0.4], paired_seeds=2),
                          "accuracy", "points", higher_is_better=True)
    assert "accuracy -0.10 points (95% CI -0.60..+0.40)" in points


def test_a_verdict_with_fp32_alone_runnable_here_is_refused_before_a_trial_trains(
    small_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """fp32 plus tf32 passed the 'fp32 and another' check before tf32 was dropped on the CPU: fp32 trained alone and the
    stored verdict was replaced by one that compared nothing ('tf32: not run'); `run --verdict` found out after the study."""
    from hpo.cli._verdict import main as verdict_main

    space = {**SMALL_SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "tf32"]}},
             "fixed": {**SMALL_SPACE["fixed"], "max_steps": 2, "eval_every": 0}}
    storage = f"sqlite:///{tmp_path / 'c.db'}"
    common = {"storage": storage, "device": "cpu", "artifact_store": None, "text_column": "sentence"}
    expected = ("on this machine (cpu) only fp32 of fp32, tf32 can run: nothing to compare it with (tf32: TF32 is a mode of "
                "NVIDIA tensor cores; this trial runs on the CPU); add one it runs (")
    with pytest.raises(UserError) as refused:
        hpo.optimize(space, small_data, study_name="c", n_trials=1, verdict=2, **common)
    assert str(refused.value).startswith(expected) and str(refused.value).endswith("make the verdict where tf32 can run")
    assert optuna.study.get_all_study_names(storage) == []  # nothing trained, no study written

    study = hpo.optimize(space, small_data, study_name="c", n_trials=1, **common)
    study.set_user_attr("precision_verdict", {"kept": True})  # the verdict made earlier, elsewhere
    argv = ["--storage", storage, "--precisions", "fp32", "tf32", "--seeds", "2", "--device", "cpu", "--out", str(tmp_path / "v")]
    assert verdict_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"python -m hpo.verdict: error: {expected}" in err
    with pytest.raises(UserError, match=re.escape(expected)):
        hpo.verdict("c", storage=storage, precisions=["fp32", "tf32"], seeds=2, device="cpu", artifact_store=None)
    after = hpo.load("c", storage=storage)
    assert len(after.trials) == 1 and stored_verdict(after) == {"kept": True} and not (tmp_path / "v").exists()


def test_a_placeholder_that_never_trained_is_no_attempt_of_its_verdict_seed(tmp_path: Path) -> None:
    """The highest-numbered trial won each (precision, seed): a PRUNED duplicate (the later copy a proxy race queued, withdrawn
    when claimed) replaced the completed verdict trial, and the verdict lost that seed ('not completed: 1 duplicate')."""
    from hpo.reporting._verdict import build_verdict
    from hpo.reporting._verdict_cost import verdict_costs
    from hpo.study._verdict import VerdictPlan

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'p.db'}", direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.80))  # the source trial
    for seed, (fp32, bf16) in enumerate(((0.80, 0.81), (0.82, 0.80))):
        study.add_trial(_verdict_trial("fp32", seed, fp32, 100.0))
        study.add_trial(_verdict_trial("bf16", seed, bf16, 150.0))
    for reason in ("duplicate", "over_budget"):
        placeholder = _verdict_trial("bf16", 1, 0.0, 0.0, state=TrialState.PRUNED)
        placeholder.user_attrs["skip_reason"] = reason
        study.add_trial(placeholder)
    bf16 = {r.precision: r for r in build_verdict(study, 0, [0, 1], ["fp32", "bf16"], {}).rows}["bf16"]
    assert bf16.paired_seeds == 2 and bf16.not_completed == {} and bf16.trials == {"0": 2, "1": 4}
    assert bf16.difference == pytest.approx(-0.5)
    # Nor does it finish a seed still to go: seed 2's only bf16 trial is such a placeholder.
    study.add_trial(_verdict_trial("fp32", 2, 0.8, 100.0))
    placeholder = _verdict_trial("bf16", 2, 0.0, 0.0, state=TrialState.PRUNED)
    placeholder.user_attrs["skip_reason"] = "duplicate"
    study.add_trial(placeholder)
    plan = VerdictPlan(study.trials[0], [0, 1, 2], ["fp32", "bf16"], {})
    assert {c.precision: c.to_go for c in verdict_costs(study, plan)} == {"fp32": 0, "bf16": 1}


def test_a_precision_whose_fp32_seeds_all_failed_is_not_said_to_have_finished_no_trial() -> None:
    """bf16 completed both seeds, fp32 failed both: the line said bf16 had "no trial finished"."""
    from hpo.reporting._verdict import build_verdict

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("search_space", {"objective": {"metric": "accuracy", "direction": "maximize"}})
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.80))  # the source trial
    for seed in range(2):
        study.add_trial(_verdict_trial("fp32", seed, 0.0, 0.0, state=TrialState.FAIL))
        study.add_trial(_verdict_trial("bf16", seed, 0.8, 200.0))
        study.add_trial(_verdict_trial("fp16", seed, 0.8, 200.0, state=TrialState.PRUNED if seed else TrialState.COMPLETE))
    rows = {r.precision: r for r in build_verdict(study, 0, [0, 1], ["fp32", "bf16", "fp16"], {}).rows}
    assert rows["bf16"].line == "bf16: no seed completed alongside fp32 (2 completed where fp32 did not): no verdict"
    assert rows["fp16"].line == "fp16: no seed completed alongside fp32 (1 completed where fp32 did not, 1 pruned): no verdict"
    assert rows["fp32"].line == "fp32: the reference; not completed: 2 failed"
