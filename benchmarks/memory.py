"""Memory across trials: does one worker's RSS grow trial after trial?

Runs ``--trials`` (20) trials of a real Optuna study in this one process, as a worker does
(``make_objective``: sampling, training, recording), on the real all-MiniLM-L6-v2 weights and
``--rows`` (2,000) SST-2 training rows, on the CPU, with short trials (``--steps`` optimizer
steps each). After each trial it reads the process's RSS; the verdict compares the RSS after
the last trial with the RSS after trial 2 (the first trial loads libraries and fills caches
once, so it is the baseline's warm-up): within 10% passes. It also lists each trial's recorded
``peak_memory_mb``, which is the trial's own increase over its starting RSS.

    HF_HUB_OFFLINE=1 python -m benchmarks.memory [--trials 20] [--rows 2000] [--steps 6]

RSS is not a timing: it is meaningful on a shared, busy machine too.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._runs import DEFAULT_DATA_DIR, RSS_TOLERANCE, load_sst2, proc_status_mb

# Two precisions and two batch sizes: trials differ as a real study's do.
SPACE: dict[str, Any] = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
        "batch_size": {"type": "categorical", "choices": [16, 32]},
        "learning_rate": {"type": "float", "low": 2e-5, "high": 1e-4, "log": True},
    },
    "fixed": {"model": "minilm-l6", "epochs": 1, "max_length": 64, "eval_every": 0, "eval_batch_size": 64},
}


def run(trials: int, rows: int, steps: int, data_dir: Path, seed: int) -> list[dict[str, Any]]:
    import optuna
    import transformers

    from hpo.space._space_loading import parse_search_space
    from hpo.study import RunOptions
    from hpo.study._objective import make_objective

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    transformers.logging.set_verbosity_error()  # the pretrained model's new head is reported per trial
    space = parse_search_space({**SPACE, "fixed": {**SPACE["fixed"], "max_steps": steps}})
    data = load_sst2(data_dir, rows, seed, dev_rows=200)
    measured: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as cache_dir:
        objective = make_objective(space, data, RunOptions(seed=seed, device="cpu", cache_dir=cache_dir, artifact_store=None))
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))

        def after(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            rss = proc_status_mb().get("VmRSS", float("nan"))
            row = {"trial": trial.number + 1, "rss_mb": rss, "peak_memory_mb": trial.user_attrs.get("peak_memory_mb"),
                   "params": trial.params, "state": trial.state.name}
            measured.append(row)
            print(f"trial {row['trial']:2d} {row['state']:8s} RSS after {rss:7.0f} MB  own peak "
                  f"{row['peak_memory_mb'] or float('nan'):6.0f} MB  {trial.params}", flush=True)

        study.optimize(objective, n_trials=trials, callbacks=[after])
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per trial")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    if args.trials < 3:
        parser.error("--trials must be at least 3 (trial 2 is the baseline)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    measured = run(args.trials, args.rows, args.steps, args.data_dir, args.seed)
    base, last = measured[1]["rss_mb"], measured[-1]["rss_mb"]
    ratio = last / base
    verdict = "PASS" if abs(ratio - 1) <= RSS_TOLERANCE else "FAIL"
    peaks = [m["peak_memory_mb"] for m in measured if m["peak_memory_mb"] is not None]
    print(
        f"RSS after trial 2: {base:.0f} MB, after trial {len(measured)}: {last:.0f} MB, ratio {ratio:.3f} "
        f"(target within {RSS_TOLERANCE:.0%}: {verdict}); per-trial own peaks {min(peaks):.0f}-{max(peaks):.0f} MB"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
