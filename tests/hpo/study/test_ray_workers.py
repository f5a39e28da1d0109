"""What a Ray driver reads back of its workers' trials: each ended trial with where the study stood when it ended."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo._errors import UserError
from hpo.reporting._progress import best_so_far
from hpo.study._ray_workers import TrialWatcher, check_reachable


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
