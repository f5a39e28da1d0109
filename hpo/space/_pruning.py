"""A pruner that sees each retried trial once: Optuna's pruner, given the study as its retry chains.

A retry (Optuna's ``RetryHeartbeatStaleTrialCallback``, which :mod:`hpo.storage._retry_policy` calls) copies its
predecessor's system attrs, so the rung values successive halving and Hyperband store there (``completed_rung_<k>``)
are then held twice: by the failed trial and by its retry. Both pruners read every trial's rung values, so one
interrupted trial counted as two at each rung it had passed, and every later trial competed against it twice.
Hyperband also picks a trial's bracket from its number, so the retry, a new number, continued in another bracket
than the steps it inherited were judged in.

:class:`RetryChainPruner` gives the pruner it wraps a view of the study where each retry chain is one trial: a
trial another one retries (named in its ``retry_history``) is left out, and a retry carries the number of the
chain's first trial (``failed_trial``). Nothing is written differently; only what the pruner reads changes. A trial
never retried reads as it is, so a study without retries prunes as Optuna alone would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Container
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

_RETRY_HISTORY = "retry_history"  # Optuna's: the numbers of a retry's predecessors, oldest first
_CHAIN_FIRST = "failed_trial"  # Optuna's: the number of the chain's first trial


def as_retry_chains(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """``trials`` with each retry chain as one trial: superseded attempts left out, a retry numbered as its first."""
    superseded = {number for t in trials for number in t.system_attrs.get(_RETRY_HISTORY, ())}
    chains = []
    for trial in trials:
        if trial.number in superseded:
            continue
        first = trial.system_attrs.get(_CHAIN_FIRST)
        if first is not None and first != trial.number:
            trial = copy.copy(trial)  # never renumber a trial the storage's cache holds
            trial.number = first
        chains.append(trial)
    return chains


def _forwarded(name: str) -> Callable[..., Any]:
    def call(self: _Forwarding, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.storage, name)(*args, **kwargs)

    call.__name__ = name
    return call


# Every abstract method of a storage, forwarded to the storage it views.
_Forwarding: type = type(
    "_Forwarding", (BaseStorage,), {name: _forwarded(name) for name in BaseStorage.__abstractmethods__}
)


class _RetryChainStorage(_Forwarding):  # type: ignore[misc, valid-type]
    """A study's storage, read as retry chains by :meth:`get_all_trials`; every other call is the storage's own."""

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return as_retry_chains(self.storage.get_all_trials(study_id, deepcopy=deepcopy, states=states))


class RetryChainPruner(optuna.pruners.BasePruner):
    """``pruner``, judging each trial against the study's retry chains (:func:`as_retry_chains`), each once."""

    def __init__(self, pruner: optuna.pruners.BasePruner) -> None:
        self.pruner = pruner
        self._view: tuple[optuna.Study, optuna.Study] | None = None  # (the study, its view), built once per study

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if self._view is None or self._view[0] is not study:
            storage = _RetryChainStorage(study._storage)
            self._view = (study, optuna.Study(study.study_name, storage, sampler=study.sampler, pruner=self.pruner))
        (chained,) = as_retry_chains([trial])
        return self.pruner.prune(self._view[1], chained)
