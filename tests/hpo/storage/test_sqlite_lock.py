"""SQLite: workers that take WAITING trials at the same moment never take the same one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import optuna

from hpo import create_storage
from hpo.storage._sqlite_lock import sqlite_file_lock

# Waits for a shared start time, then takes five WAITING trials and prints their numbers.
_TAKE_FIVE = textwrap.dedent("""
    import sys, time, optuna
    from hpo import create_storage
    study = optuna.load_study(study_name="s", storage=create_storage(sys.argv[1]))
    study.get_trials()
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
    print(*(study.ask().number for _ in range(5)))
""")


def test_two_processes_taking_waiting_trials_at_once_take_different_ones(tmp_path: Path) -> None:
    # Python's sqlite3 reads outside a transaction: without the file's lock, both read the first
    # WAITING trial and both run it (every time, on this machine, before the lock).
    url = f"sqlite:///{tmp_path / 'race.db'}"
    study = optuna.create_study(study_name="s", storage=create_storage(url))
    for x in range(10):
        study.enqueue_trial({"x": x})
    start = time.time() + 6  # after both have imported optuna and opened the storage
    workers = [subprocess.Popen([sys.executable, "-c", _TAKE_FIVE, url, str(start)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    taken = [int(n) for worker in workers for n in worker.communicate(timeout=120)[0].split()]
    assert all(worker.returncode == 0 for worker in workers)
    assert sorted(taken) == list(range(10))  # each trial once
    assert all(t.state == optuna.trial.TrialState.RUNNING for t in study.get_trials())


def test_the_lock_is_reentrant_in_a_thread(tmp_path: Path) -> None:
    database = str(tmp_path / "s.db")
    done = threading.Event()

    def nested() -> None:
        with sqlite_file_lock(database), sqlite_file_lock(database):
            done.set()

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    assert done.wait(10)  # a second flock of the same file in this process would wait for ever
