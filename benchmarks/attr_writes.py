"""Writing a trial's result attrs: ``hpo.storage.set_user_attrs`` (one transaction) against Optuna's ``set_user_attr`` per key.

The anchor is Optuna's own write, one commit per attr, as every trial paid it before session 40.
On a fresh SQLite file and a throwaway PostgreSQL database (``--pg-admin``'s server), ``--attrs``
(34, a trial's result) attrs are written on a running trial each way, alternating, ``--repeats``
(7) times; reported: each way's median milliseconds and anchor / ours (above 1: ours is faster).

Run from the repository root (seconds)::

    python -m benchmarks.attr_writes [--attrs 34] [--repeats 7] [--pg-admin postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from benchmarks._postgres import throwaway_database
from hpo.storage import create_storage, set_user_attrs


def _one_by_one(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def _milliseconds(url: str, attrs: dict[str, Any], repeats: int) -> dict[str, list[float]]:
    study = optuna.create_study(storage=create_storage(url), study_name="attr-writes")
    times: dict[str, list[float]] = {"anchor": [], "ours": []}
    for _ in range(repeats):
        for name, write in (("anchor", _one_by_one), ("ours", set_user_attrs)):
            trial = study.ask()
            started = time.perf_counter()
            write(trial, attrs)
            times[name].append((time.perf_counter() - started) * 1000)
            study.tell(trial, 0.0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--attrs", type=int, default=34, help="attrs per write (default: %(default)s, a trial's result)")
    parser.add_argument("--repeats", type=int, default=7, help="writes each way, alternating (default: %(default)s)")
    parser.add_argument("--pg-admin", default=os.environ.get("HPO_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Shaped like a result: numbers, a nested dict of metrics, text, None.
    attrs = {f"attr_{i}": [i * 0.5, {"metrics": {"accuracy": 0.9, "loss": 0.3}}, f"text {i}", None][i % 4] for i in range(args.attrs)}
    print(f"{args.attrs} user attrs on a running trial, median of {args.repeats} writes each way, alternating")
    print("| storage | Optuna per key, ms | set_user_attrs, ms | anchor / ours |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="attr-writes-") as tmp, throwaway_database(args.pg_admin, "hpo_attr_writes") as pg_url:
        for name, url in (("SQLite", f"sqlite:///{Path(tmp) / 'attrs.db'}"), ("PostgreSQL", pg_url)):
            times = _milliseconds(url, attrs, args.repeats)
            anchor, ours = statistics.median(times["anchor"]), statistics.median(times["ours"])
            print(f"| {name} | {anchor:.1f} | {ours:.1f} | {anchor / ours:.1f}x |")


if __name__ == "__main__":
    main()
