"""Experiment tracking: one MLflow run, or one TensorBoard run directory, per trial.

``--track mlflow`` logs to ``$MLFLOW_TRACKING_URI``, else MLflow's own default (a SQLite file
``mlflow.db`` in the working directory; MLflow 3 refuses new ``./mlruns`` file stores), in the
experiment named after the study. ``--track tensorboard DIR`` writes event files under
``DIR/<study>/trial-<n>``. Both optional: ``pip install 'precision-hpo[tracking]'``.

Each run gets the trial's config as params, every evaluation's metrics at its optimizer step
(``eval/<name>``; ``train_loss`` among them), the running training loss by step
(``train/loss``), the final measurements, the hardware metadata as tags, and the trial's final
state; the trial's user attr ``mlflow_run_id`` / ``tensorboard_run`` names its run.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import HARDWARE_ATTR, MLFLOW_RUN_ID_ATTR, STEPS_ATTR, TENSORBOARD_RUN_ATTR, config_or_params
from hpo._errors import UserError
from hpo._files import path_component
from hpo.reporting._export import flatten
from hpo.storage._storage import check_password_is_encoded, mask_secrets, mask_url
from hpo.storage._url_secrets import mask_urls_in
from trial_executor import StepProgress

INSTALL_HINT = "install it with pip install 'precision-hpo[tracking]'"
TRACK_KINDS = ("mlflow", "tensorboard")
# Measurements logged once, when the trial ends.
FINAL_MEASURES = ("throughput_samples_per_s", "throughput_tokens_per_s", "peak_memory_mb", "train_seconds")
_MLFLOW_STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED", TrialState.FAIL: "FAILED"}


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _final_metrics(trial: FrozenTrial) -> dict[str, float]:
    attrs = trial.user_attrs
    return _finite({name: attrs[name] for name in FINAL_MEASURES if name in attrs})


def _tags(trial: FrozenTrial) -> dict[str, str]:
    attrs = trial.user_attrs
    tags = {f"hardware.{k}": str(v) for k, v in flatten(attrs.get(HARDWARE_ATTR) or {}).items()}
    tags["state"] = trial.state.name
    for key in ("skip_reason", "skip_detail", "fail_reason", "precision_effective", "stopped_reason"):
        if attrs.get(key) is not None:
            tags[key] = str(attrs[key])[:5000]
    return tags


# Every call to MLflow: its own HTTP defaults (7 retries, exponential backoff, 120 s timeouts) kept a
# command silent for minutes on an unreachable server, and a server failing mid-study held a
# 2-second trial (and a SIGTERM) for minutes per logged step. Values the user set win.
_BOUNDED_HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# Always: MLflow writes each ended run's link to stdout, tearing the progress bars, a tracking URI's password in clear.
_QUIET_ENV = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}


@contextlib.contextmanager
def _bounded_mlflow_requests() -> Iterator[None]:
    added = {**{k: v for k, v in _BOUNDED_HTTP_ENV.items() if k not in os.environ}, **_QUIET_ENV}
    before = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# What requests' long retry message means, in a few words.
_HTTP_REASONS = (
    ("NameResolutionError", "its host name does not resolve"),
    ("NewConnectionError", "nothing answers at that address (connection refused)"),
    ("timed out", "the server did not answer within 10 s"),
)


def _reason(err: Exception) -> str:
    """What went wrong, in a few words on one line: MLflow's errors run long, and a server's answer quotes its HTML page."""
    text = str(err).strip()
    reason = next((said for marker, said in _HTTP_REASONS if marker in text), None)
    if reason is None:
        first = text.splitlines()[0] if text else type(err).__name__
        reason = first.split(". ")[0].rstrip(".")[:200]  # the first sentence
    return reason


def _refused(uri: str, err: Exception) -> UserError:
    return UserError(
        f"--track mlflow: tracking store {mask_url(uri)} cannot be used: {mask_secrets(_reason(err), uri)}; set $MLFLOW_TRACKING_URI (or --track mlflow URI) "
        "to a database such as sqlite:///mlflow.db or a running server such as http://host:5000"
    )


_DATABASE_BACKENDS = ("sqlite", "postgresql", "mysql", "mssql")


def _open_database_once(uri: str) -> None:
    """A database store opened once, as MLflow opens it (a SQLite file's directories made first), without MLflow's own
    15 tries over two minutes, each a 4-line warning; raises what opening raised."""
    try:
        url = sqlalchemy.engine.make_url(uri)
    except sqlalchemy.exc.ArgumentError:
        return  # not a database URI (http, databricks, ...): MLflow's client checks it
    if url.get_backend_name() not in _DATABASE_BACKENDS:
        return
    sqlite = url.get_backend_name() == "sqlite"
    if sqlite and url.database not in (None, "", ":memory:"):
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, connect_args={} if sqlite else {"connect_timeout": 10})
    try:
        sqlalchemy.inspect(engine)
    finally:
        engine.dispose()


class MlflowTracker:
    """One MLflow run per trial, in the experiment named after the study.

    Made before the first trial, it opens the store and finds or creates the experiment: a
    URI MLflow refuses (a ``file:`` store in MLflow 3) or a server it cannot reach is one
    :class:`UserError`, within seconds.
    """

    def __init__(self, study_name: str, tracking_uri: str | None = None) -> None:
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError(f"--track mlflow needs the optional package mlflow; {INSTALL_HINT}") from None
        logging.getLogger("mlflow").setLevel(logging.WARNING)  # table creation notices would tear the bars
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "MLflow's default (sqlite:///mlflow.db)"
        check_password_is_encoded(uri, "--track mlflow: tracking URI")
        with _bounded_mlflow_requests():
            try:
                _open_database_once(tracking_uri or mlflow.get_tracking_uri())
                self.client = MlflowClient(tracking_uri=tracking_uri)
                self.experiment_id = self._experiment(study_name)
            except Exception as err:
                raise _refused(uri, err) from None
        self.runs: dict[int, str] = {}
        self.uri = uri

    def masked(self, text: str) -> str:
        """``text`` (an error of this tracker's) with the tracking URI's password masked."""
        return mask_secrets(text, self.uri)

    @property
    def destination(self) -> str:
        """Where this tracker logs, safe to print: the tracking URI with its password masked."""
        return mask_url(self.uri)

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # another worker created it first
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def start(self, trial: optuna.Trial) -> None:
        with _bounded_mlflow_requests():
            self._start(trial)

    def _start(self, trial: optuna.Trial) -> None:
        run = self.client.create_run(
            self.experiment_id, run_name=f"trial-{trial.number}",
            tags={"optuna.study": trial.study.study_name, "optuna.trial": str(trial.number)},
        )
        self.runs[trial.number] = run.info.run_id
        trial.set_user_attr(MLFLOW_RUN_ID_ATTR, run.info.run_id)

    def _log(self, run_id: str | None, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        if run_id is not None and metrics:
            now = int(time.time() * 1000)
            with _bounded_mlflow_requests():
                self.client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def evaluation(self, number: int, step: int, metrics: dict[str, float]) -> None:
        self._log(self.runs.get(number), {f"eval/{k}": v for k, v in _finite(metrics).items()}, step)

    def step(self, number: int, update: StepProgress) -> None:
        self._log(self.runs.get(number), _finite({"train/loss": update.train_loss, "train/samples_per_s": update.samples_per_s}), update.step)

    def finish(self, trial: FrozenTrial) -> None:
        from mlflow.entities import Param, RunTag

        run_id = self.runs.pop(trial.number, None)
        if run_id is None:
            return
        config = config_or_params(trial)
        params = [Param(k, str(v)[:6000]) for k, v in flatten(config).items()]
        tags = [RunTag(k, v) for k, v in _tags(trial).items()]
        with _bounded_mlflow_requests():
            self.client.log_batch(run_id, params=params, tags=tags)
            self._log(run_id, {f"final/{k}": v for k, v in _final_metrics(trial).items()}, int(trial.user_attrs.get(STEPS_ATTR) or 0))
            self.client.set_terminated(run_id, status=_MLFLOW_STATUS.get(trial.state, "FAILED"))


class TensorBoardTracker:
    """One event-file directory per trial: ``DIR/<study>/trial-<n>``."""

    def __init__(self, study_name: str, directory: str | Path, objective_names: Sequence[str] = ()) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError(f"--track tensorboard needs the optional package tensorboard; {INSTALL_HINT}") from None
        self.writer_class = SummaryWriter
        self.root = Path(directory) / path_component(study_name)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"--track tensorboard: cannot create {self.root}: {err.strerror}; pass a writable DIR") from None
        if not os.access(self.root, os.W_OK):
            raise UserError(f"--track tensorboard: {self.root} is not writable; pass a writable DIR")
        self.writers: dict[int, Any] = {}
        # The HParams table's metric columns: objective/<name> (value/<i> where no name is given).
        self.objective_names = list(objective_names)

    def masked(self, text: str) -> str:
        """``text`` (an error of this tracker's) as it is: a directory holds no secret."""
        return text

    @property
    def destination(self) -> str:
        """Where this tracker logs: the study's directory of trial runs."""
        return str(self.root)

    def start(self, trial: optuna.Trial) -> None:
        path = self.root / f"trial-{trial.number}"
        self.writers[trial.number] = self.writer_class(log_dir=str(path))
        trial.set_user_attr(TENSORBOARD_RUN_ATTR, str(path))

    def _scalars(self, number: int, metrics: dict[str, float], step: int) -> None:
        writer = self.writers.get(number)
        if writer is not None:
            for name, value in metrics.items():
                writer.add_scalar(name, value, step)

    def evaluation(self, number: int, step: int, metrics: dict[str, float]) -> None:
        self._scalars(number, {f"eval/{k}": v for k, v in _finite(metrics).items()}, step)

    def step(self, number: int, update: StepProgress) -> None:
        self._scalars(number, _finite({"train/loss": update.train_loss, "train/samples_per_s": update.samples_per_s}), update.step)

    def finish(self, trial: FrozenTrial) -> None:
        steps = int(trial.user_attrs.get(STEPS_ATTR) or 0)
        self._scalars(trial.number, {f"final/{k}": v for k, v in _final_metrics(trial).items()}, steps)
        writer = self.writers.pop(trial.number, None)
        if writer is None:
            return
        tags = _tags(trial)
        writer.add_text("state", tags.pop("state"), steps)
        writer.add_text("tags", "\n".join(f"    {k}: {v}" for k, v in tags.items()), steps)
        config = config_or_params(trial)
        hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flatten(config).items()}
        names = [f"objective/{name}" for name in self.objective_names] or [f"value/{i}" for i in range(max(1, len(trial.values or [])))]
        values = dict(zip(names, trial.values or [], strict=False))  # a trial that failed has none
        writer.add_hparams(hparams, _finite(values) or {names[0]: float("nan")}, run_name=".")
        writer.close()


Tracker = MlflowTracker | TensorBoardTracker
_logger = logging.getLogger(__name__)


class Tracking:
    """The trackers of a run, called from the objective's hooks; a tracker's failure is a warning, never a failed trial.

    A tracker that fails during a trial is not called again for that trial (a server gone bad would cost each logged
    step its timeout); the next trial tries it afresh.
    """

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)
        self._failed: set[tuple[int, int]] = set()  # (tracker index, trial number)

    def _each(self, what: str, number: int, *args: Any) -> None:
        for index, tracker in enumerate(self.trackers):
            if (index, number) in self._failed:
                continue
            try:
                getattr(tracker, what)(*args)
            except Exception as err:
                self._failed.add((index, number))
                _logger.warning("%s tracking to %s failed (%s): %s; trial %d is tracked no further", type(tracker).__name__,
                                tracker.destination, what, mask_urls_in(tracker.masked(_reason(err))), number)

    def start(self, trial: optuna.Trial) -> None:
        self._each("start", trial.number, trial)

    def evaluation(self, trial: optuna.Trial, step: int, metrics: dict[str, float]) -> None:
        self._each("evaluation", trial.number, trial.number, step, metrics)

    def step(self, number: int, update: StepProgress) -> None:
        self._each("step", number, number, update)

    def finish(self, trial: FrozenTrial) -> None:
        self._each("finish", trial.number, trial)
        self._failed = {(index, number) for index, number in self._failed if number != trial.number}


def parse_track(items: Iterable[str | Sequence[str]]) -> list[tuple[str, str | None]]:
    """``--track`` values (``mlflow``, ``mlflow URI``, ``tensorboard DIR``) -> ``(kind, argument)``; one-line errors."""
    parsed: list[tuple[str, str | None]] = []
    for item in items:
        words = [item] if isinstance(item, str) else list(item)
        kind, rest = (words[0] if words else ""), words[1:]
        if kind not in TRACK_KINDS:
            raise UserError(f"--track: unknown tracker {mask_urls_in(repr(kind))}; use --track mlflow or --track tensorboard DIR")
        if any(not isinstance(word, str) or not word.strip() for word in rest):  # '' was ./mlflow.db, '   ' a directory of spaces
            raise UserError(f"--track {kind} is given an empty argument; give it a value or leave it out")
        if kind == "tensorboard" and len(rest) != 1:
            raise UserError("--track tensorboard needs a directory: --track tensorboard DIR (in Python: track=[('tensorboard', DIR)])")
        if kind == "mlflow" and len(rest) > 1:
            raise UserError("--track mlflow takes at most a tracking URI (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
        if any(kind == earlier for earlier, _ in parsed):  # a trial records one run of each (mlflow_run_id, tensorboard_run)
            raise UserError(f"--track {kind} is given twice; a trial records one run of each tracker: keep one")
        parsed.append((kind, rest[0] if rest else None))
    return parsed


def make_trackers(items: Iterable[str | Sequence[str]], study_name: str, objective_names: Sequence[str] = ()) -> list[Tracker]:
    """The trackers ``items`` name (see :func:`parse_track`), each checked to work before any trial runs; ``objective_names``
    name the trials' values where a tracker shows them."""
    trackers: list[Tracker] = []
    for kind, argument in parse_track(items):
        if kind == "mlflow":
            trackers.append(MlflowTracker(study_name, argument))
        else:
            trackers.append(TensorBoardTracker(study_name, argument or "runs", objective_names))
    return trackers
