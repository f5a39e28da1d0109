"""What a finished trial says to a sampler on this machine: the rule alone, on real frozen Optuna trials."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

import trial_executor
from hpo.study import says_nothing_here


def test_an_out_of_memory_skip_is_judged_by_the_device_it_ran_out_on() -> None:
    """The rule alone, on real frozen trials: a GPU's OOM says nothing of a CPU worker's memory; an OOM with no hardware
    recorded (a trial written before it was) is taken as this machine's, as is one of this very machine."""
    hidden = says_nothing_here("cpu")
    here = trial_executor.hardware_metadata(trial_executor.resolve_device("cpu"))

    def oom(**attrs) -> optuna.trial.FrozenTrial:
        return optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={"skip_reason": "oom", **attrs})

    gpu = {"device_type": "cuda", "total_memory_mb": 81559}
    assert hidden(oom(hardware=gpu)) and hidden(oom(hardware={**here, "total_memory_mb": 1024}))
    assert not hidden(oom()) and not hidden(oom(hardware=here)) and not hidden(oom(hardware={"device_type": "cpu"}))
    assert not hidden(optuna.trial.create_trial(state=TrialState.PRUNED, user_attrs={"skip_reason": "non_finite_loss"}))
