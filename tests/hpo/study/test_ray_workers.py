"""What a Ray driver reads back of its workers' trials: each ended trial with where the study stood when it ended."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from hpo.reporting._progress import best_so_far
from hpo.study._ray_workers import TrialWatcher


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
