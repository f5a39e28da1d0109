"""Reading a study's trials as SQLAlchemy Core rows: Optuna's RDB storage with a faster ``_get_trials``.

Optuna's ``RDBStorage._get_trials`` loads trials through the ORM: one mapped instance per trial,
param, value, attribute and intermediate value (~180,000 of them for 5,000 trials of ours, each
with ~35 user attrs), then a ``FrozenTrial`` per trial. At that size the ORM bookkeeping, not the
database, is the whole cost of ``status``, ``report``, ``export``, the dashboard's first load and a
fresh worker's first read. :func:`read_trials` sends the SELECTs Optuna sends (the study, the trials, then each child
table) on Optuna's own tables, takes plain rows, decodes each distribution JSON once per distinct
text, and builds the same ``FrozenTrial`` objects; ``tests/hpo/storage/test_bulk_reads.py`` pins it against
``RDBStorage`` on the same databases.

Nothing here writes: every write still goes through Optuna's storage and its ORM.
"""

from __future__ import annotations

import datetime
import json
from collections import defaultdict
from collections.abc import Container, Iterable
from typing import Any

import sqlalchemy
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage
from optuna.storages._rdb import models
from optuna.trial import FrozenTrial, TrialState

_TRIALS = models.TrialModel.__table__
_PARAMS = models.TrialParamModel.__table__
_VALUES = models.TrialValueModel.__table__
_USER_ATTRS = models.TrialUserAttributeModel.__table__
_SYSTEM_ATTRS = models.TrialSystemAttributeModel.__table__
_INTERMEDIATE = models.TrialIntermediateValueModel.__table__
# Beyond this many ids an IN list can pass SQLite's variable limit; the ids are then filtered here.
_MAX_IN_LIST = 500


class BulkReadingRDBStorage(RDBStorage):
    """Optuna's :class:`~optuna.storages.RDBStorage`, reading trials with :func:`read_trials`.

    ``_get_trials`` is the one read that every trial listing goes through (``get_all_trials``
    and Optuna's cached storage alike); its signature and results are Optuna's.
    """

    def _get_trials(
        self, study_id: int, states: Container[TrialState] | None, included_trial_ids: set[int], trial_id_greater_than: int
    ) -> list[FrozenTrial]:
        try:
            return read_trials(self.engine, study_id, states, included_trial_ids, trial_id_greater_than)
        except sqlalchemy.exc.SQLAlchemyError as err:
            # Optuna's own reads raise this, with the database error as the cause (retries read the chain).
            raise StorageInternalError("An exception is raised while reading trials.") from err


def read_trials(
    engine: sqlalchemy.Engine, study_id: int, states: Container[TrialState] | None = None,
    included_trial_ids: Iterable[int] = (), trial_id_greater_than: int = -1,
) -> list[FrozenTrial]:
    """The study's trials (those in ``states``; the ids in ``included_trial_ids`` or above ``trial_id_greater_than``).

    The selection is ``RDBStorage._get_trials``'s; the rows are read in one transaction (on
    PostgreSQL one snapshot), so a trial and its attributes are read as they stood together.
    Raises ``KeyError`` for a study that does not exist, as Optuna does.
    """
    included = {trial_id for trial_id in included_trial_ids if trial_id <= trial_id_greater_than}
    with _snapshot(engine) as conn:
        if conn.execute(sqlalchemy.select(models.StudyModel.study_id).where(models.StudyModel.study_id == study_id)).first() is None:
            raise KeyError(models.NOT_FOUND_MSG)
        where = _selection(study_id, states, included, trial_id_greater_than)
        trial_rows = [
            row for row in conn.execute(sqlalchemy.select(_TRIALS).where(*where).order_by(_TRIALS.c.trial_id)).all()
            if trial_id_greater_than == -1 or row.trial_id > trial_id_greater_than or row.trial_id in included
        ]
        if not trial_rows:
            return []
        children = _ChildRows.read(conn, where, wanted={row.trial_id for row in trial_rows})
    return [children.frozen_trial(row) for row in trial_rows]


def _snapshot(engine: sqlalchemy.Engine) -> sqlalchemy.Connection:
    # PostgreSQL's default (read committed) gives each SELECT its own snapshot: a trial finishing
    # between them would be read RUNNING with its final values. One repeatable-read transaction
    # reads the trial and its rows as they stood together; SQLite's read transaction already does.
    if engine.dialect.name == "postgresql":
        return engine.connect().execution_options(isolation_level="REPEATABLE READ")
    return engine.connect()


def _selection(
    study_id: int, states: Container[TrialState] | None, included: set[int], greater_than: int
) -> list[sqlalchemy.ColumnElement[bool]]:
    """``RDBStorage._get_trials``'s filter on the trials table (a long id list is filtered in Python instead)."""
    where = [_TRIALS.c.study_id == study_id]
    if states is not None:
        assert isinstance(states, Iterable)  # for type checkers, as in Optuna: Container in the base class
        where.append(_TRIALS.c.state.in_(list(states)))
    if greater_than > -1:
        newer = _TRIALS.c.trial_id > greater_than
        if not included:
            where.append(newer)
        elif len(included) <= _MAX_IN_LIST:
            where.append(sqlalchemy.or_(newer, _TRIALS.c.trial_id.in_(included)))
        else:
            where.append(_TRIALS.c.trial_id >= min(included))
    return where


class _ChildRows:
    """The params, values, attributes and intermediate values of the wanted trials, by trial id."""

    def __init__(self) -> None:
        self.params: dict[int, list[Any]] = defaultdict(list)
        self.values: dict[int, list[Any]] = defaultdict(list)
        self.user_attrs: dict[int, list[Any]] = defaultdict(list)
        self.system_attrs: dict[int, list[Any]] = defaultdict(list)
        self.intermediate: dict[int, list[Any]] = defaultdict(list)
        self._distributions: dict[str, BaseDistribution] = {}

    @classmethod
    def read(cls, conn: sqlalchemy.Connection, where: list[sqlalchemy.ColumnElement[bool]], wanted: set[int]) -> _ChildRows:
        # Each child table joined to the trials under the same filter: one SELECT per table however
        # many trials, with no IN list of every id; rows of trials not wanted are dropped here.
        rows = cls()
        for table, into in ((_PARAMS, rows.params), (_VALUES, rows.values), (_USER_ATTRS, rows.user_attrs),
                            (_SYSTEM_ATTRS, rows.system_attrs), (_INTERMEDIATE, rows.intermediate)):
            query = (
                sqlalchemy.select(table).join(_TRIALS, table.c.trial_id == _TRIALS.c.trial_id)
                .where(*where)
                .order_by(table.primary_key.columns.values()[0])
            )
            for row in conn.execute(query).all():
                if row.trial_id in wanted:
                    into[row.trial_id].append(row)
        return rows

    def _distribution(self, text: str) -> BaseDistribution:
        # Every trial of a study carries the same few distributions: decode each text once.
        if text not in self._distributions:
            self._distributions[text] = json_to_distribution(text)
        return self._distributions[text]

    def frozen_trial(self, row: sqlalchemy.Row[Any]) -> FrozenTrial:
        """The trial of ``row`` as Optuna's ``_build_frozen_trial_from_trial_model`` builds it."""
        trial_id = row.trial_id
        values: list[float] | None = None
        if self.values.get(trial_id):
            values = [0.0] * len(self.values[trial_id])
            for value in self.values[trial_id]:
                values[value.objective] = models.TrialValueModel.stored_repr_to_value(value.value, value.value_type)
        params = self.params.get(trial_id, [])
        distributions = {p.param_name: self._distribution(p.distribution_json) for p in params}
        return FrozenTrial(
            number=row.number, state=row.state, value=None, values=values,
            datetime_start=_local(row.datetime_start), datetime_complete=_local(row.datetime_complete),
            params={p.param_name: distributions[p.param_name].to_external_repr(p.param_value) for p in params},
            distributions=distributions,
            user_attrs={a.key: json.loads(a.value_json) for a in self.user_attrs.get(trial_id, [])},
            system_attrs={a.key: json.loads(a.value_json) for a in self.system_attrs.get(trial_id, [])},
            intermediate_values={
                v.step: models.TrialIntermediateValueModel.stored_repr_to_intermediate_value(v.intermediate_value, v.intermediate_value_type)
                for v in self.intermediate.get(trial_id, [])
            },
            trial_id=trial_id,
        )


def _local(stored: datetime.datetime | None) -> datetime.datetime | None:
    # Optuna stores naive UTC and hands back naive local time (TrialModel.datetime_start).
    if stored is None:
        return None
    return stored.replace(tzinfo=datetime.timezone.utc).astimezone().replace(tzinfo=None)
