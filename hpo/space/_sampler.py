"""The samplers around TPE: a seed per trial, a random start counted in trials that measured something, and a model of
the trials that say something about this machine.

Optuna's TPE draws at random until ``n_startup_trials`` trials are COMPLETE or PRUNED, and this
project prunes the trials it skips at once: a precision the machine cannot run (tf32 on a CPU,
bf16 and tf32 on a T4), a trial started past the budget. On a CPU, a quarter of the random draws
are tf32: with three of the first four skipped, TPE's model began from one measured trial and
redrew its categorical values (batch size, warmup, weight decay) in a third of the next draws.
In a fleet of machines sharing a study, one machine's skips also read as poor results on the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.trial import FrozenTrial, TrialState

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class _WrappingSampler(BaseSampler):
    """A sampler around ``self._base``: the hooks around each trial and the reseeding go to it unchanged."""

    _base: BaseSampler

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None,
    ) -> None:
        self._base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._base.reseed_rng()


class SeededPerTrialSampler(BaseSampler):
    """The sampler ``build(seed)`` returns, made anew for each trial and seeded with ``seed`` mixed with its number.

    A study's trial numbers are unique across its workers: workers sharing a study never draw alike, and a run
    repeated with the same seed on the same study draws the same trials. (One seed per sampler gave every worker the
    same draws; one per process mixed with its host and pid, no two runs the same.) A trial's sampler lives from its
    ``before_trial`` to its ``after_trial``, so what TPE keeps from one call to the next stays within the trial.
    """

    def __init__(self, build: Callable[[int], BaseSampler], seed: int) -> None:
        self._build, self._seed = build, seed
        self._of_trial: dict[int, BaseSampler] = {}  # keyed by number: Optuna's threads (n_jobs) share one sampler

    def sampler_of(self, trial: FrozenTrial) -> BaseSampler:
        """The sampler drawing ``trial``'s values."""
        if trial.number not in self._of_trial:
            salt = f"{self._seed}/{trial.number}".encode()
            self._of_trial[trial.number] = self._build(int.from_bytes(hashlib.sha256(salt).digest()[:4], "little"))
        return self._of_trial[trial.number]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler_of(trial).before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler_of(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.sampler_of(trial).sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution,
    ) -> Any:
        return self.sampler_of(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None,
    ) -> None:
        self.sampler_of(trial).after_trial(study, trial, state, values)
        del self._of_trial[trial.number]

    def reseed_rng(self) -> None:
        """Nothing to reseed: no two trials share a random stream (Optuna reseeds a sampler its threads would share)."""


class MeasuredStartSampler(_WrappingSampler):
    """``base`` (a model-based sampler), drawing at random until ``n_startup`` finished trials are ``measured``.

    Once that many are, ``base`` decides every draw, from every trial as it sees them (a skip of a precision this
    machine cannot run included: one to draw less often here; :class:`HidingSampler` leaves out the rest). The random
    draws are seeded per trial as ``base``'s are (:class:`SeededPerTrialSampler`, ``seed``): TPE's own random start, with
    the same seed, draws the same values.
    """

    def __init__(self, base: BaseSampler, n_startup: int, measured: Callable[[FrozenTrial], bool], seed: int) -> None:
        self._base, self._n_startup, self._measured = base, n_startup, measured
        self._random = SeededPerTrialSampler(lambda trial_seed: RandomSampler(seed=trial_seed), seed)
        self._started = n_startup == 0  # it stays started: a finished trial stays finished

    def _has_started(self, study: optuna.Study) -> bool:
        if not self._started:  # read until then only: a few trials, not a long study's every trial at every draw
            trials = study.get_trials(deepcopy=False, states=_FINISHED)
            self._started = sum(self._measured(t) for t in trials) >= self._n_startup
        return self._started

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._base.infer_relative_search_space(study, trial)  # always: TPE's group mode keeps state from it

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._base.sample_relative(study, trial, search_space) if self._has_started(study) else {}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution,
    ) -> Any:
        sampler = self._base if self._has_started(study) else self._random
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None,
    ) -> None:
        super().after_trial(study, trial, state, values)
        self._random.after_trial(study, trial, state, values)  # its sampler of the trial goes with it

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self._random.reseed_rng()


class _FilteredStorage:
    """A study's storage read through a filter: trial listings leave out ``hidden`` trials; every other call, writes
    included (TPE records the params it drew on the trial), goes to ``storage`` as it is."""

    def __init__(self, storage: optuna.storages.BaseStorage, hidden: Callable[[FrozenTrial], bool]) -> None:
        self._storage, self._hidden = storage, hidden
        self._study_ids: dict[str, int] = {}
        self._directions: dict[int, list[optuna.study.StudyDirection]] = {}

    def get_study_id_from_name(self, study_name: str) -> int:  # read once: a view is made per trial
        if study_name not in self._study_ids:
            self._study_ids[study_name] = self._storage.get_study_id_from_name(study_name)
        return self._study_ids[study_name]

    def get_study_directions(self, study_id: int) -> list[optuna.study.StudyDirection]:
        if study_id not in self._directions:
            self._directions[study_id] = self._storage.get_study_directions(study_id)
        return self._directions[study_id]

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return [t for t in self._storage.get_all_trials(study_id, deepcopy=deepcopy, states=states) if not self._hidden(t)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


class HidingSampler(_WrappingSampler):
    """``base`` (a model-based sampler) drawing from a study in which the ``hidden`` trials do not appear.

    The samplers of a study's workers each model the trials as they find them. A trial skipped at once because its
    machine could not run its precision (bf16 on a T4) reads, to TPE, as a poor result of that precision: every worker
    then draws it less, an A100 sharing the study with T4s too. With ``hidden``, a worker models the study without
    such trials (see :func:`hpo.study.says_nothing_here`). Each trial's draws read the study once, as Optuna's own
    per-trial cache does; nothing else changes (the trials stay in the study, for the budget, reports and pruners).
    """

    def __init__(self, base: BaseSampler, hidden: Callable[[FrozenTrial], bool]) -> None:
        self._base, self._hidden = base, hidden
        self._storages: dict[int, _FilteredStorage] = {}
        self._view: tuple[tuple[int, int], optuna.Study] | None = None  # ((storage, trial number), the trial's view)

    def _seen(self, study: optuna.Study, trial: FrozenTrial) -> optuna.Study:
        storage = study._storage
        key = (id(storage), trial.number)
        if self._view is None or self._view[0] != key:
            filtered = self._storages.setdefault(id(storage), _FilteredStorage(storage, self._hidden))
            view = optuna.Study(study.study_name, filtered, sampler=study.sampler, pruner=study.pruner)  # type: ignore[arg-type]
            self._view = (key, view)
        return self._view[1]

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._base.infer_relative_search_space(self._seen(study, trial), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self._base.sample_relative(self._seen(study, trial), trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution,
    ) -> Any:
        return self._base.sample_independent(self._seen(study, trial), trial, param_name, param_distribution)
