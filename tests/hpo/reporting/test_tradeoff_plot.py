"""The report's plot: which trials it circles as the trade-off front of a single-objective study."""

from __future__ import annotations

import optuna

from hpo.reporting._tradeoff_plot import _tradeoff_front


def test_a_trial_that_breaks_the_constraints_is_never_circled_as_a_trade_off() -> None:
    """Trial 1, the fastest at the best accuracy but over the space's memory limit, was circled; trial 0 was not, being beaten by it."""
    trials = [optuna.trial.create_trial(value=accuracy, user_attrs={"feasible": feasible})
              for accuracy, feasible in ((0.80, True), (0.85, False), (0.70, True))]
    points = [(trials[0], 100.0, 0.80), (trials[1], 300.0, 0.85), (trials[2], 200.0, 0.70)]
    assert [t.value for t in _tradeoff_front(points, maximize=True)] == [0.80, 0.70]
    # Without constraints (no feasible attribute) every trial counts.
    free = [(optuna.trial.create_trial(value=y), x, y) for _, x, y in points]
    assert [t.value for t in _tradeoff_front(free, maximize=True)] == [0.85]
