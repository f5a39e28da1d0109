"""A run's options, read once: ``python -m hpo run``'s flags and :func:`hpo.optimize`'s keyword arguments alike.

:class:`RunOptions` is what both entry points build and what the study's steps take whole
(opening the study, the objective, the workers, Ray actors, the verdict). Building one checks
it: each bad value is one :class:`UserError` naming the fix, before storage is touched.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from hpo._attrs import SEED_ATTR
from hpo._errors import UserError
from hpo._process import usable_cpus
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR
from hpo.storage._storage import Heartbeat, resolve_storage_url
from hpo.study._run_checks import check_device, check_heartbeat, check_seed, check_study_name, check_writable_directory
from hpo.study._verdict import MAX_VERDICT_SEEDS
from hpo.study._warm_start import DEFAULT_WARM_START_TRIALS
from trial_executor import DEVICES, HOLDOUTS, StepProgress

DEFAULT_STUDY_NAME = "precision-demo"
DEFAULT_N_TRIALS = 8
CACHE_ENV = "HPO_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/precision-hpo/tokenized"

Track = str | tuple[str, ...]  # a tracker kind, or a kind and its arguments (make_trackers)


def resolve_cache_dir(cache_dir: str | None) -> str:
    """The tokenized-data cache: ``cache_dir``, else ``$HPO_CACHE_DIR``, else the user's cache folder."""
    return str(Path(cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR).expanduser())


def _track_entry(entry: Any) -> Track:
    """A ``track`` entry as ``make_trackers`` reads it: a kind, or a kind and its argument (a ``Path`` as its text)."""
    words = [entry] if isinstance(entry, str) else list(entry) if isinstance(entry, (list, tuple)) else None
    if words is None or not words or not all(isinstance(w, (str, os.PathLike)) for w in words):
        raise UserError(f"track entries are a tracker or a tracker and its argument, e.g. ['mlflow', ('tensorboard', 'runs')] "
                        f"(got {entry!r}); pass entries of that form")
    return words[0] if isinstance(entry, str) else tuple(os.fspath(w) for w in words)


class RunOptions(BaseModel):
    """Everything a run is told besides its space and data, checked when built; frozen and picklable.

    The fields are ``python -m hpo run``'s flags (``--n-trials`` is ``n_trials``). ``storage``:
    a database URL (``None``: ``$HPO_STORAGE``, else the demo SQLite file; see :attr:`url`);
    ``cache_dir`` is resolved where trials run (:attr:`cache_path`); ``artifact_store=None``:
    no checkpoints and no kept best model. ``model`` and ``fix`` are applied to the space;
    the data flags read a data file. ``ray``: ``False``, ``True`` (a cluster started here) or an
    address; ``verdict``: seeds of the verdict after the budget (``None``: the space's ``verdict:``).
    """

    # Strict: a Python caller's "2" or True is not a trial count, as the command line's parser says of its flags.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    storage: str | None = None
    study_name: str = DEFAULT_STUDY_NAME
    n_trials: int = DEFAULT_N_TRIALS
    timeout: float | None = None
    seed: int | None = None  # None: the study's own (hpo.study._resuming.study_seed), 0 for a new one
    device: str = "auto"
    model: str | None = None
    fix: tuple[str, ...] = ()
    text_column: str = "text"
    label_column: str = "label"
    text_pair_column: str | None = None
    valid_data: str | Path | None = None
    valid_fraction: float = 0.1
    holdout: str | None = None  # None: the study's own (hpo.study._data.its_own_holdout), stratified for a new one
    empty_text: str = "drop"
    cache_dir: str | None = None
    artifact_store: str | None = DEFAULT_ARTIFACT_DIR
    keep_checkpoints: bool = False
    heartbeat_interval: int = Heartbeat.interval
    grace_period: int = Heartbeat.grace_period
    max_retry: int = Heartbeat.max_retry
    track: tuple[Track, ...] = ()
    warm_start: str | None = None
    warm_start_trials: int = DEFAULT_WARM_START_TRIALS
    ray: bool | str = False
    workers: int | None = None
    gpus_per_trial: float | None = None
    verdict: int | None = None

    @field_validator("fix", "track", mode="before")
    @classmethod
    def _a_list(cls, value: Any, info: ValidationInfo) -> Any:
        # A str is a sequence too: fix="batch_size=16" would be read one character at a time.
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            example = "['batch_size=16']" if info.field_name == "fix" else "['mlflow']"
            raise UserError(f"{info.field_name} must be a list, e.g. {example} (got {value!r}); pass one")
        if info.field_name == "track":
            return tuple(_track_entry(t) for t in value)
        return tuple(value)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except pydantic.ValidationError as err:
            # A wrong type from a Python caller: one line, as for every other bad input.
            first = err.errors()[0]
            where = ".".join(map(str, first["loc"]))
            if first["type"] == "extra_forbidden":  # no such option: "pass a value of that type" named no fix
                raise UserError(f"{where} is no option (got {first['input']!r}); check its spelling or drop it") from None
            raise UserError(f"{where}: {first['msg']} (got {first['input']!r}); pass a value of that type") from None

    @model_validator(mode="after")
    def _check(self) -> RunOptions:
        # The cheap checks first; --device cuda imports torch.
        if self.device not in DEVICES:
            raise UserError(f"--device {self.device!r} is not one of {', '.join(DEVICES)}; pass one of them")
        check_study_name(self.study_name)
        if self.seed is not None:
            check_seed(self.seed)
        check_heartbeat(self.heartbeat_interval, self.grace_period)
        if self.holdout not in (None, *HOLDOUTS):
            raise UserError(f"--holdout must be {' or '.join(HOLDOUTS)}, got {self.holdout!r}; pass one of them")
        if self.holdout is not None and self.valid_data is not None:
            raise UserError(f"--holdout {self.holdout} draws the --valid-fraction hold-out, and --valid-data holds out nothing; drop one")
        # The command's flags are checked by its parser; optimize()'s arguments arrive here.
        least = {"n_trials": 1, "warm_start_trials": 1, "max_retry": 0, "workers": 1, "gpus_per_trial": 0}
        for name, low in least.items():
            if getattr(self, name) is not None and getattr(self, name) < low:
                raise UserError(f"{name} must be at least {low}, got {getattr(self, name)}")
        if self.ray is False and self.workers is not None and self.workers > (cpus := usable_cpus()):
            # Each worker is a process with its own torch (hundreds of MB) driving its own trials: past one per CPU they
            # only contend, and a slip of the finger (--workers 1000) started processes until the machine ran out of memory.
            raise UserError(f"--workers {self.workers}: this machine gives the run {cpus} CPUs, and each worker is a process "
                            f"that needs one; pass --workers {cpus} or fewer (for more, start workers on other machines "
                            "with the same --storage, or use --ray)")
        if self.timeout is not None and self.timeout <= 0:
            raise UserError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.verdict is not None and not 2 <= self.verdict <= MAX_VERDICT_SEEDS:
            # Before the study trains, not after: the verdict comes once the budget is reached.
            raise UserError(f"--verdict must be between 2 and {MAX_VERDICT_SEEDS} paired seeds, got {self.verdict}")
        if self.artifact_store is not None:
            check_writable_directory(self.artifact_store, "--artifact-store")
        check_writable_directory(self.cache_path, "--cache-dir")
        check_device(self.device)
        return self

    def check_python_arguments(self) -> None:
        """:func:`hpo.optimize`'s ``workers`` and ``gpus_per_trial`` need Ray (the command's ``--workers`` starts its processes
        itself, and its parser refuses ``--gpus-per-trial`` without ``--ray``); ``keep_checkpoints`` needs an artifact store."""
        if self.workers is not None and self.ray is False:
            raise UserError(f"workers={self.workers} needs ray (ray=True, or a cluster's address); for worker processes on this "
                            f"machine, run python -m hpo run --workers {self.workers}")
        if self.gpus_per_trial is not None and self.ray is False:  # else ignored, without a word
            raise UserError(f"gpus_per_trial={self.gpus_per_trial:g} places trials through Ray: pass ray=True (or a cluster's "
                            "address), or drop gpus_per_trial")
        if self.keep_checkpoints and self.artifact_store is None:  # no store: no checkpoint is written to keep
            raise UserError("keep_checkpoints=True keeps checkpoints in the artifact store, and artifact_store=None writes none; "
                            "pass an artifact_store directory, or drop keep_checkpoints")

    @property
    def url(self) -> str:
        """The storage URL this run opens (:func:`hpo.storage.resolve_storage_url`)."""
        return resolve_storage_url(self.storage)

    @property
    def cache_path(self) -> str:
        """The tokenized-data cache on this machine (:func:`resolve_cache_dir`)."""
        return resolve_cache_dir(self.cache_dir)

    @property
    def heartbeat(self) -> Heartbeat:
        return Heartbeat(self.heartbeat_interval, self.grace_period, self.max_retry)

    def seed_of(self, study: Any) -> int:
        """The seed trial k of ``study`` trains with ``+ k``: this run's, else the one the study stores (``open_study``)."""
        return self.seed if self.seed is not None else int(study.user_attrs.get(SEED_ATTR) or 0)

    def data_options(self) -> dict[str, Any]:
        """:func:`hpo.study._data.resolve_data`'s keyword arguments: the data flags (never the seed: see ``DATA_SEED``)."""
        names = ("text_column", "label_column", "text_pair_column", "valid_data", "valid_fraction", "holdout", "empty_text")
        return {name: getattr(self, name) for name in names}


@dataclass
class RunHooks:
    """What the caller sees of a running study: each finished trial, progress updates, a stop request.

    Building one checks each hook is callable (or ``None``): one :class:`UserError`, before anything runs.
    """

    on_trial_finished: Callable[[FrozenTrial, int], None] | None = None
    progress: Callable[[int, StepProgress], None] | None = None
    stop_requested: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        for name, hook in vars(self).items():
            if hook is not None and not callable(hook):
                raise UserError(f"{name} must be a function or None, got {hook!r}; pass a function, or leave it out")
