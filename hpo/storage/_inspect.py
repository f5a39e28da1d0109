"""Reading studies that already exist: open the storage without writing, find a study, name its objectives."""

from __future__ import annotations

from pathlib import Path

import optuna
import sqlalchemy
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from hpo._attrs import stored_space
from hpo._errors import UserError, bounded_list
from hpo.storage._storage import GRPC_SCHEME, create_storage, mask_url


def sqlite_file_of(url: str) -> Path | None:
    """The file of an SQLite storage URL; ``None`` for another database, an in-memory one or a malformed URL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None  # create_storage explains a malformed URL
    if parsed.drivername == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(parsed.database).expanduser()
    return None


def _require_sqlite_file(url: str) -> None:
    # Reading must not leave an empty database behind, which opening a missing SQLite file would.
    path = sqlite_file_of(url)
    if path is not None and not path.is_file():
        raise UserError(f"no SQLite database at {path}; pass the --storage the study was run with")


def _require_optuna_tables(url: str) -> None:
    # Opening a database through Optuna's storage creates its tables: a reading command would write
    # the schema into a database no study ran in (a mistyped database name, say).
    try:
        parsed = make_url(url)
        wait = {"connect_timeout": 10} if parsed.drivername.startswith("postgresql") else {}
        engine = sqlalchemy.create_engine(parsed, poolclass=sqlalchemy.pool.NullPool, connect_args=wait)
        with engine.connect() as connection:
            found = sqlalchemy.inspect(connection).has_table("studies")
        engine.dispose()
    except (ArgumentError, ValueError, ImportError, sqlalchemy.exc.SQLAlchemyError):
        return  # create_storage explains what is wrong with the URL or the server
    if not found:
        raise UserError(f"no study in {mask_url(url)}: it holds no Optuna tables; pass the --storage the study was run with")


def open_existing_storage(url: str) -> optuna.storages.BaseStorage:
    """The storage at ``url`` through :func:`hpo.create_storage`; a missing SQLite file or a database without Optuna's
    tables is an error, never created."""
    _require_sqlite_file(url)
    if not url.startswith(GRPC_SCHEME):  # a proxy's database is the proxy's
        _require_optuna_tables(url)
    return create_storage(url)


def load_existing_study(storage: optuna.storages.BaseStorage, url: str, study_name: str | None) -> optuna.Study:
    """The study named ``study_name`` (``None``: the storage's only study); an unknown name, or ``None`` where the
    storage holds none or several, is a :class:`UserError` listing the studies found."""
    names = optuna.get_all_study_names(storage)
    if study_name is None and not names:
        raise UserError(f"no study in {mask_url(url)} yet; run one with python -m hpo run, or pass the --storage it ran with")
    if study_name is None and len(names) > 1:
        raise UserError(f"{mask_url(url)} holds {len(names)} studies: {bounded_list(sorted(names))}; pass one with --study-name")
    study_name = names[0] if study_name is None else study_name
    if study_name not in names:
        raise UserError(f"no study {study_name!r} in {mask_url(url)}; studies found: {bounded_list(sorted(names))} (pass one with --study-name)")
    return optuna.load_study(study_name=study_name, storage=storage)


def objective_names(study: optuna.Study | optuna.study.FrozenStudy) -> list[str]:
    """The objective names of a study run by ``hpo.run`` (from its stored search space), else ``value``/``value_i``."""
    directions = study.directions
    stored = stored_space(study)
    if stored.get("objectives"):
        names = [str(o.get("name")) for o in stored["objectives"]]
    else:
        names = [str((stored.get("objective") or {}).get("metric", "accuracy"))] if stored else []
    if len(names) == len(directions):
        return names
    return ["value"] if len(directions) == 1 else [f"value_{i}" for i in range(len(directions))]
