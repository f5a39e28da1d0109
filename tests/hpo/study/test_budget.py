"""The study's budget through a ``grpc://`` proxy, where no lock reaches: workers racing for its last slots keep it exact."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import optuna
import pytest
from _proxy_process import free_port, serve, stop
from optuna.trial import FrozenTrial, TrialState

from hpo import create_storage, parse_search_space
from hpo._attrs import is_baseline, skip_reason_of
from hpo.reporting._run_lines import trial_line
from hpo.reporting._status import status_lines, study_status
from hpo.storage._retry_policy import RetryByTrialPolicy
from hpo.study import counts_toward_budget, open_study, run_to_budget
from hpo.study._budget import take_slot
from hpo.study._known_good import space_origin
from hpo.study._lock import study_lock
from trial_executor import demo_dataset

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


SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
               "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
    "enqueue": [{"learning_rate": 1e-3}, {"learning_rate": 3e-3}],
}


def test_workers_opening_a_new_study_at_once_through_a_proxy_run_each_queued_trial_once(proxy_url: str) -> None:
    """Each worker checks that the baseline and the space's enqueue list are not queued yet, then queues them: through a
    proxy, with no lock, several did, and each copy ran and counted. The later copies are now withdrawn when claimed."""
    space, data = parse_search_space(SPACE), demo_dataset(n_train=16, n_valid=8, seed=0)

    def worker(study: optuna.Study) -> None:
        opened = open_study(study._storage, "queued", space, data, seed=0)
        run_to_budget(opened, lambda trial: (space.suggest(trial), 0.5)[1], n_trials=10)

    storage = create_storage(proxy_url)
    optuna.create_study(study_name="queued", storage=storage, direction="maximize")  # exists; none of its queue does yet
    _each_worker(proxy_url, "queued", worker)
    trials = optuna.load_study(study_name="queued", storage=storage).get_trials()
    ran = [t for t in trials if counts_toward_budget(t)]
    assert len(ran) == 10 and not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    queued = [t.user_attrs.get("enqueued_from") or "baseline" for t in ran if is_baseline(t) or "enqueued_from" in t.user_attrs]
    assert sorted(queued) == sorted(["baseline", space_origin({"learning_rate": 1e-3}), space_origin({"learning_rate": 3e-3})])
    for duplicate in (t for t in trials if skip_reason_of(t) == "duplicate"):
        line = trial_line(duplicate, ["accuracy"])
        assert "NOT RUN   (queued twice by workers with no lock between them: trial " in line and line.endswith("is the first copy; not counted)")


def test_a_trial_queued_twice_runs_once_and_its_copy_is_withdrawn_when_claimed(tmp_path: Path) -> None:
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'q.db'}"), study_name="q")
    for _ in range(2):  # as two workers with no lock between them queue the baseline and an enqueued configuration
        study.enqueue_trial({"x": 0.5}, user_attrs={"fp32_baseline": True})
        study.enqueue_trial({"x": 0.25}, user_attrs={"enqueued_from": "space:0"})
    run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=3)
    trials = study.get_trials()
    assert [(t.state, skip_reason_of(t)) for t in trials] == [
        (TrialState.COMPLETE, None), (TrialState.COMPLETE, None), (TrialState.PRUNED, "duplicate"),
        (TrialState.PRUNED, "duplicate"), (TrialState.COMPLETE, None),  # the third of the budget: sampled
    ]
    assert trials[3].user_attrs["skip_detail"] == "queued twice by workers with no lock between them: trial 1 is the first copy"
    assert sum(counts_toward_budget(t) for t in trials) == 3
    # status says why they did not run: copies in the queue, not a budget held by running trials.
    lines = status_lines(study_status(study._storage, study))
    assert "pruned 2 (of them, 2 not run: duplicates in the queue)" in lines[1]


def test_a_second_retry_of_a_trial_runs_and_is_no_copy_of_the_first(tmp_path: Path) -> None:
    # Trial 0 failed (stopped, its worker killed), its retry 1 failed too; retry 2 must run. Optuna's failed_trial is
    # 0 for both retries: keyed by it, retry 2 was withdrawn as a copy of 1, and the chain's checkpoint lost.
    study = optuna.create_study(storage=create_storage(f"sqlite:///{tmp_path / 'r.db'}"), study_name="r")
    distribution = {"x": optuna.distributions.FloatDistribution(0, 1)}
    retry = RetryByTrialPolicy(3)
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, params={"x": 0.5}, distributions=distribution))
    retry(study, study.get_trials()[0])  # trial 1, waiting
    first_retry = study.get_trials()[1]
    study._storage.set_trial_state_values(first_retry._trial_id, TrialState.RUNNING)
    study._storage.set_trial_state_values(first_retry._trial_id, TrialState.FAIL)
    retry(study, study.get_trials()[1])  # trial 2, waiting: it retries trial 1
    assert study.get_trials()[2].system_attrs["retry_history"] == [0, 1]
    run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=1)
    second_retry = study.get_trials()[2]
    assert (second_retry.state, skip_reason_of(second_retry), second_retry.params) == (TrialState.COMPLETE, None, {"x": 0.5})
    assert len(study.get_trials()) == 3  # nothing sampled in its place


def test_a_trial_is_reported_at_the_studys_position_when_it_ended_not_when_its_worker_read_it(tmp_path: Path) -> None:
    # Another worker's trial that ends after ours but before our worker reads the study must not raise our trial's
    # count: with --workers, its line would show [2/3] while the other worker's, printed first or later, also says [2/3].
    url = f"sqlite:///{tmp_path / 'p.db'}"
    study = optuna.create_study(storage=create_storage(url), study_name="p")
    other_worker = optuna.load_study(study_name="p", storage=create_storage(url))
    seen: list[tuple[int, int]] = []

    def another_worker_ends_a_trial(_: FrozenTrial) -> None:
        if len(other_worker.trials) < 2:
            other_worker.tell(other_worker.ask(), 0.0)

    run_to_budget(study, lambda trial: trial.suggest_float("x", 0, 1), n_trials=3, on_told=another_worker_ends_a_trial,
                  on_trial_finished=lambda trial, finished: seen.append((trial.number, finished)))
    assert seen == [(0, 1), (2, 3)]  # trial 1 (the other worker's) ended second, after trial 0 and before its line
