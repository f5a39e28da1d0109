"""What a Ray driver reads back of its workers' trials: each ended trial with where the study stood when it ended."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo._errors import UserError
from hpo.reporting._progress import best_so_far
from hpo.study._ray_workers import LOCAL_CLUSTER, RayCluster, TrialWatcher, check_reachable, plan


def test_trials_that_ended_between_two_polls_each_show_the_study_as_it_stood_when_they_ended(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'ray.db'}", direction="maximize")
    before = study.ask()
    study.tell(before, 0.6)  # ended before the driver started: counted, never shown again
    watcher = TrialWatcher(study)
    first, second, third, fourth = (study.ask() for _ in range(4))
    # Two workers end their trials out of number order, all before the driver's next poll.
    study.tell(second, 0.9)
    study.tell(first, 0.5)
    study.tell(third, state=TrialState.FAIL)  # not counted toward the budget
    study.tell(fourth, state=TrialState.PRUNED)

    seen = watcher.new()

    assert [(t.number, finished) for t, finished in seen] == [(2, 2), (1, 3), (3, 3), (4, 4)]
    assert watcher.new() == []
    lines = [best_so_far(study, ["accuracy"], ended_by=t) for t, _ in seen]
    assert lines == ["best accuracy=0.9 (trial 2)"] * 4
    earlier = study.ask()
    study.tell(earlier, 0.95)
    ((trial, finished),) = watcher.new()
    assert (trial.number, finished) == (5, 5)
    assert best_so_far(study, ["accuracy"], ended_by=study.trials[0]) == "best accuracy=0.6 (trial 0)"
    assert best_so_far(study, ["accuracy"], ended_by=trial) == best_so_far(study, ["accuracy"]) == "best accuracy=0.95 (trial 5)"


def _cluster(cpus: float, gpus: float) -> RayCluster:
    """A cluster as :func:`connect` describes it (``plan`` reads its resources, never Ray)."""
    return RayCluster(ray=pytest.importorskip("ray"), address=LOCAL_CLUSTER, nodes=1, cpus=cpus, gpus=gpus, started_here=False)


def test_more_workers_than_the_cluster_can_place_at_once_is_one_line_not_a_run_that_never_ends() -> None:
    # A worker Ray cannot place waits for the resources the others hold until they are killed: the driver waited on it
    # after the budget was met (--ray --workers 3 on 2 CPUs: every trial done, then no end).
    with pytest.raises(UserError, match=r"^--workers 3: a local Ray cluster has 2 CPUs, and each worker needs 1; "
                                        r"pass --workers 2 or fewer"):
        plan(_cluster(cpus=2, gpus=0), 3, None)
    with pytest.raises(UserError, match=r"^--workers 5: a local Ray cluster has 4 GPUs, and each worker needs 1; "
                                        r"pass --workers 4 or fewer"):
        plan(_cluster(cpus=16, gpus=4), 5, None)
    with pytest.raises(UserError, match=r"has 4 CPUs, and each worker needs 1; pass --workers 4 or fewer"):
        plan(_cluster(cpus=4, gpus=2), 8, 0.25)  # room on the GPUs for 8, not on the CPUs
    assert (plan(_cluster(cpus=2, gpus=0), 2, None).workers, plan(_cluster(cpus=2, gpus=0), 1, None).cpus_per_trial) == (2, 2)
    assert plan(_cluster(cpus=8, gpus=2), 8, 0.25).workers == 8
    assert plan(_cluster(cpus=2, gpus=0), None, None).workers == 2
    remote = RayCluster(ray=pytest.importorskip("ray"), address="10.0.0.5:6379", nodes=2, cpus=0, gpus=2, started_here=False)
    with pytest.raises(UserError, match=r"^--workers 2: the Ray cluster at 10.0.0.5:6379 has 0 CPUs, and each worker needs 1; add nodes with CPUs$"):
        plan(remote, None, 1)


def test_a_fraction_of_a_gpu_packs_within_one_gpu_so_the_default_workers_all_fit() -> None:
    # Ray places a 0.4 share within one GPU: two a GPU, four on two GPUs. One worker per 0.4 of the 2 GPUs in all made 5,
    # and the fifth, never placed, kept the run from ending (measured on a local cluster with num_gpus=2: 4 of 5 placed).
    assert plan(_cluster(cpus=8, gpus=2), None, 0.4).workers == 4
    assert plan(_cluster(cpus=8, gpus=2), None, 0.25).workers == 8
    assert plan(_cluster(cpus=8, gpus=4), None, 2).workers == 2
    with pytest.raises(UserError, match=r"^--workers 5: a local Ray cluster has 2 GPUs, and each worker needs 0.4 \(2 share a GPU\); "
                                        r"pass --workers 4 or fewer"):
        plan(_cluster(cpus=8, gpus=2), 5, 0.4)


@pytest.mark.parametrize(("address", "said"), [
    # The dashboard's URL: its host "http://127.0.0.1" was looked up, "Name or service not known".
    ("http://127.0.0.1:1", "--ray http://127.0.0.1:1: not an address; give host:port"),
    # An impossible port: "Connection refused", as if no cluster listened there.
    ("127.0.0.1:99999", "--ray 127.0.0.1:99999: port 99999 is out of range (1-65535); give the head's GCS port"),
    ("ray://127.0.0.1:0", "--ray ray://127.0.0.1:0: port 0 is out of range (1-65535)"),
])
def test_an_address_ray_cannot_take_is_said_as_such_not_as_an_unreachable_host(address: str, said: str) -> None:
    with pytest.raises(UserError) as refused:
        check_reachable(address)
    assert str(refused.value).startswith(said)
