"""Bring your own model (issue 28): the README's third quick-start step on SST-2, with no ``--space``.

Writes ``--rows`` training rows of ``sst2/train.tsv`` (sampled with ``--seed``, lines copied byte
for byte) to a temporary directory, never into the repository, then runs, as a user would::

    python -m hpo.run --data <rows> --text-column sentence --label-column label \\
        --valid-data <sst2/dev.tsv> --model minilm-l6 --n-trials 8

on a fresh SQLite file, and prints which space the run took, each trial (dev accuracy, whether
it was flagged as stuck at the majority class) and the best dev accuracy.

    python -m benchmarks.byom [--data-dir ../shared/data/sst2] [--rows 2000] [--n-trials 8]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._runs import DEFAULT_DATA_DIR, REPO_ROOT


def sample_rows(source: Path, rows: int, seed: int, target: Path) -> Path:
    """``rows`` data lines of ``source`` (a TSV with a header), chosen with ``seed``, written unchanged to ``target``."""
    with source.open("rb") as handle:
        header, *lines = handle.readlines()
    picked = random.Random(seed).sample(range(len(lines)), min(rows, len(lines)))
    target.write_bytes(header + b"".join(lines[i] for i in picked))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.byom", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="folder with SST-2's train.tsv and dev.tsv")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0, help="row sample and study seed")
    parser.add_argument("--n-trials", type=int, default=8)
    parser.add_argument("--model", default="minilm-l6")
    args = parser.parse_args(argv)
    import optuna

    from hpo._attrs import is_majority_class

    with tempfile.TemporaryDirectory(prefix="byom-") as tmp:
        train = sample_rows(args.data_dir / "train.tsv", args.rows, args.seed, Path(tmp) / "train.tsv")
        storage = f"sqlite:///{Path(tmp) / 'byom.db'}"
        command = [
            sys.executable, "-m", "hpo.run", "--data", str(train), "--text-column", "sentence", "--label-column", "label",
            "--valid-data", str(args.data_dir / "dev.tsv"), "--model", args.model, "--n-trials", str(args.n_trials),
            "--seed", str(args.seed), "--storage", storage, "--artifact-store", str(Path(tmp) / "artifacts"), "--quiet",
        ]
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
        run = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        print(run.stdout.splitlines()[0] if run.stdout else run.stderr)
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return run.returncode
        study = optuna.load_study(study_name="precision-demo", storage=storage)
        print("| trial | state | precision | batch | lr | dev accuracy | majority class |")
        print("|---:|---|---|---:|---:|---:|---|")
        for t in study.get_trials(deepcopy=False):
            accuracy = (t.user_attrs.get("metrics") or {}).get("accuracy")
            shown = "-" if accuracy is None else f"{accuracy:.4f}"
            print(f"| {t.number} | {t.state.name} | {t.params.get('fp_precision')} | {t.params.get('batch_size')} | "
                  f"{t.params.get('learning_rate', 0):.2e} | {shown} | {'yes' if is_majority_class(t) else 'no'} |")
        print(f"best dev accuracy {study.best_value:.4f} (trial {study.best_trial.number}); wall {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
