"""The study's budget through a ``grpc://`` proxy, where no lock reaches: workers racing for its last slots keep it exact."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import optuna
import pytest
from _proxy_process import free_port, serve, stop
from optuna.trial import TrialState

from hpo import create_storage
from hpo.study import counts_toward_budget, run_to_budget
from hpo.study._budget import take_slot
from hpo.study._lock import study_lock

pytestmark = pytest.mark.postgres
WORKERS = 8
T = TypeVar("T")


@pytest.fixture
def proxy_url(pg_database: str) -> Iterator[str]:
    port = free_port()
    proxy = serve(pg_database, port)
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        stop(proxy)


def _each_worker(url: str, name: str, work: Callable[[optuna.Study], T]) -> list[T]:
    """``work`` in ``WORKERS`` threads, each a worker with its own connection to the proxy, started together."""
    start = threading.Barrier(WORKERS)

    def worker(_: int) -> T:
        study = optuna.load_study(study_name=name, storage=create_storage(url))
        start.wait()
        return work(study)

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(worker, range(WORKERS)))


def test_workers_claiming_the_last_slots_at_once_through_a_proxy_never_start_more_than_the_budget(proxy_url: str) -> None:
    storage = create_storage(proxy_url)
    study = optuna.create_study(study_name="race", storage=storage)
    with study_lock(storage, "race") as locked:
        assert not locked  # no lock through the proxy: the claims alone keep the budget
    for _ in range(5):  # five rounds: each time every worker claims a new trial at once, for 3 slots
        started = _each_worker(proxy_url, "race", lambda s: (trial := s.ask(), take_slot(s, trial, n_trials=3)))
        assert sum(taken for _, taken in started) <= 3
        for trial, _ in started:  # give every slot back for the next round
            study.tell(trial, state=TrialState.FAIL)


def test_workers_sharing_a_study_through_a_proxy_finish_exactly_its_budget(proxy_url: str) -> None:
    optuna.create_study(study_name="exact", storage=create_storage(proxy_url))
    _each_worker(proxy_url, "exact", lambda s: run_to_budget(s, lambda trial: trial.suggest_float("x", 0, 1), n_trials=12))
    trials = optuna.load_study(study_name="exact", storage=create_storage(proxy_url)).get_trials()
    assert sum(counts_toward_budget(t) for t in trials) == 12
    assert not [t for t in trials if t.state == TrialState.RUNNING]
