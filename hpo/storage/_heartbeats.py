"""The heartbeats Optuna's RDB storage records for running trials, read straight from its table."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import optuna
import sqlalchemy

from hpo.storage._backoff import retry_lost_connection

# Optuna's RDB storage keeps one row per running trial here while heartbeats are on.
_HEARTBEATS = sqlalchemy.table(
    "trial_heartbeats", sqlalchemy.column("trial_id", sqlalchemy.Integer), sqlalchemy.column("heartbeat", sqlalchemy.DateTime)
)


def heartbeat_ages(storage: optuna.storages.BaseStorage, trial_ids: list[int]) -> dict[int, datetime.timedelta]:
    """Time since each trial's last heartbeat, by the database's clock; a trial that never beat has none; empty when
    the storage keeps no heartbeats of its own (the gRPC proxy)."""
    engine = getattr(storage, "engine", None)
    if not trial_ids or not isinstance(engine, sqlalchemy.Engine):
        return {}

    def read() -> tuple[Any, Sequence[Any]]:
        with engine.connect() as connection:
            # Optuna stamps heartbeats with the database's now(), so ages are taken against the same clock.
            now = connection.execute(sqlalchemy.select(sqlalchemy.func.now())).scalar_one()
            return now, connection.execute(
                sqlalchemy.select(_HEARTBEATS.c.trial_id, _HEARTBEATS.c.heartbeat).where(_HEARTBEATS.c.trial_id.in_(trial_ids))
            ).all()

    # Outside the storage's calls, so retried here as they are: a sweep must not stop a worker on a lost connection.
    now, rows = retry_lost_connection("reading heartbeats", read)
    if isinstance(now, str):  # SQLite's CURRENT_TIMESTAMP without a declared type
        now = datetime.datetime.fromisoformat(now)
    now = now.replace(tzinfo=None)
    return {trial_id: max(now - beat.replace(tzinfo=None), datetime.timedelta(0)) for trial_id, beat in rows}
