"""Adding a pruner type is a spec class in ``PrunerSpec`` and its builder in ``PRUNER_BUILDERS``
(both in ``hpo/space/_space.py``, see ARCHITECTURE.md): a toy one, added that way, prunes a real study.

The test cannot edit the source, so its space is a ``SearchSpace`` whose ``pruner`` union has the
toy spec too: what the one-line edit of ``PrunerSpec`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union, get_args

import optuna
import pytest
from pydantic import Field

from hpo import create_storage, make_objective, open_study, parse_search_space, run_to_budget
from hpo.space import SearchSpace, SearchSpaceError, _space
from hpo.space._space import PrunerSpecBase
from trial_executor import demo_dataset


class ToyPrunerSpec(PrunerSpecBase):
    type: Literal["toy"]
    prune_below: float = Field(ge=0)


ToyPrunerUnion = Annotated[Union[(*get_args(get_args(_space.PrunerSpec)[0]), ToyPrunerSpec)], Field(discriminator="type")]


class SpaceWithToyPruner(SearchSpace):
    pruner: ToyPrunerUnion = _space.NoPruner(type="none")


def test_a_toy_pruner_type_prunes_a_two_trial_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_space.PRUNER_BUILDERS, ToyPrunerSpec, lambda spec: optuna.pruners.ThresholdPruner(lower=spec.prune_below))
    space = SpaceWithToyPruner.model_validate({
        "params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}},
        "fixed": {"model": "tiny-bert", "batch_size": 16, "max_steps": 2, "eval_every": 1, "max_length": 16},
        # Accuracy never reaches 2: the toy pruner stops every trial at its first evaluation.
        "pruner": {"type": "toy", "prune_below": 2.0},
    })
    assert isinstance(space.build_pruner().pruner, optuna.pruners.ThresholdPruner)
    assert space.stored_form()["pruner"] == {"type": "toy", "prune_below": 2.0}
    data = demo_dataset(n_train=32, n_valid=16, seed=0)
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'toy.db'}"), "toy", space, data, seed=0)
    assert isinstance(study.pruner.pruner, optuna.pruners.ThresholdPruner)
    run_to_budget(study, make_objective(space, data, base_seed=0, device="cpu"), 2)
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.PRUNED] * 2
    assert all(t.last_step == 1 and "skip_reason" not in t.user_attrs for t in trials)


def test_the_shipped_space_refuses_the_toy_type() -> None:
    with pytest.raises(SearchSpaceError, match="unknown type 'toy'"):
        parse_search_space({"params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}, "pruner": {"type": "toy"}})
