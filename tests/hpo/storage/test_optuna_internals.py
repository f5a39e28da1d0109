"""Each Optuna internal the storage wrapper still relies on, pinned: an Optuna upgrade that moves one fails here.

``hpo/storage/_retrying_storage.py`` and ``hpo/storage/_write_tokens.py`` use, beyond Optuna's public API:
- ``optuna.storages._CachedStorage``, the cache Optuna puts around every RDBStorage, which the
  wrapper holds itself (and which then must not be added a second time);
- ``BaseHeartbeat``'s interface, ``_get_stale_trial_ids`` included (called by fail_stale_trials);
- ``DEFAULT_STUDY_NAME_PREFIX``, to name unnamed studies as RDBStorage would;
- ``RDBStorage.scoped_session`` and ``engine``, and the ORM classes ``StudyModel`` and
  ``TrialModel`` flushed when a study or trial is created or a trial's state changes (the
  write-token hook);
- ``RDBStorage._create_new_trial`` re-running its transaction on StorageInternalError only,
  so that an IntegrityError ends it at once.
``hpo/storage/_trial_attrs.py``: ``_create_scoped_session`` (one transaction, rolled back on an error),
``check_trial_is_updatable``, ``TrialModel.find_or_raise_by_id``, the ``trial_user_attributes`` table's unique
(``trial_id``, ``key``) and its ``value_json`` column (its rows are compared with Optuna's own in
test_trial_attrs.py), and ``Trial._cached_frozen_trial``, the copy ``Trial.user_attrs`` reads.
Elsewhere in ``hpo``: ``FrozenTrial._trial_id`` (status, liveness, the dashboard's notes, the
kept best model address trials by storage id) and the ``trial_heartbeats`` table's
``trial_id``/``heartbeat`` columns (``hpo status`` reads heartbeat ages in one query).
``hpo/storage/_proxy_client.py``: ``GrpcStorageProxy._setup`` building ``_stub`` and ``_cache``
(also when unpickled), ``GrpcClientCache(stub)``, and the stub's method names.
The idempotence of the other writes (Optuna's upserts, its ignored duplicate parameter row)
is pinned by tests/hpo/storage/test_storage_faults.py.
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
from optuna.storages import RDBStorage, _CachedStorage
from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
from optuna.storages._grpc.client import GrpcClientCache
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages._rdb import models
from optuna.study import StudyDirection
from optuna.trial import TrialState

from hpo import create_storage
from hpo.storage._proxy_client import IDEMPOTENT_CALLS, ProxyStorage, _BoundedStub
from hpo.storage._retrying_storage import RetryingStorage
from hpo.storage._storage import Heartbeat
from hpo.storage._write_tokens import TABLE_NAME


@pytest.fixture
def storage(tmp_path: Path) -> RetryingStorage:
    return create_storage(f"sqlite:///{tmp_path / 'i.db'}")  # type: ignore[return-value]


def _token_rows(storage: RetryingStorage) -> list[tuple[str, int]]:
    with storage.engine.connect() as connection:
        return [(row[0], row[1]) for row in connection.execute(sqlalchemy.text(f"SELECT token, row_id FROM {TABLE_NAME}"))]


def test_optuna_caches_an_rdb_storage_in_the_cache_the_wrapper_holds_and_leaves_the_wrapper_alone(storage: RetryingStorage) -> None:
    assert type(optuna.storages.get_storage(storage._rdb)) is _CachedStorage
    assert isinstance(storage._cache, _CachedStorage) and storage._cache._backend is storage._rdb
    assert optuna.storages.get_storage(storage) is storage  # one cache, not two
    assert DEFAULT_STUDY_NAME_PREFIX == "no-name-"


def test_the_heartbeat_interface_is_the_one_the_wrapper_implements() -> None:
    assert BaseHeartbeat.__abstractmethods__ == {
        "record_heartbeat", "_get_stale_trial_ids", "get_heartbeat_interval", "get_heartbeat_stale_trial_callback"
    }


def test_fail_stale_trials_reaches_the_stale_trials_through_the_wrapper(tmp_path: Path) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'h.db'}", heartbeat=Heartbeat(1, 1, 0))
    study = optuna.create_study(storage=storage, study_name="h")
    trial_id = storage.create_new_trial(study._study_id)
    storage.record_heartbeat(trial_id)
    time.sleep(2.1)
    optuna.storages.fail_stale_trials(study)
    assert storage.get_trial(trial_id).state == TrialState.FAIL


def test_rdb_writes_flush_study_and_trial_models_in_its_scoped_session(storage: RetryingStorage) -> None:
    rdb: RDBStorage = storage._rdb
    assert isinstance(rdb.scoped_session, sqlalchemy.orm.scoped_session) and isinstance(rdb.engine, sqlalchemy.Engine)
    assert {models.StudyModel.__tablename__, models.TrialModel.__tablename__} == {"studies", "trials"}
    study_id = storage.create_new_study([StudyDirection.MINIMIZE], "m")
    waiting = storage.create_new_trial(study_id, optuna.trial.create_trial(state=TrialState.WAITING))
    assert storage.set_trial_state_values(waiting, TrialState.RUNNING)
    assert storage.set_trial_state_values(waiting, TrialState.COMPLETE, [1.0])
    # One token for the study, one for the trial's creation, one per state change.
    assert sorted(row_id for _, row_id in _token_rows(storage)) == sorted([study_id, waiting, waiting, waiting])


def test_rdb_create_new_trial_ends_at_once_on_an_integrity_error(storage: RetryingStorage) -> None:
    """Optuna re-runs trial creation on StorageInternalError (for deadlocks), with sleeps of up to 2 s; not on this."""
    study_id = storage.create_new_study([StudyDirection.MINIMIZE], "c")
    with storage._tokens.stamping("same-token"):
        storage._rdb.create_new_trial(study_id)
        started = time.monotonic()
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            storage._rdb.create_new_trial(study_id)
    assert time.monotonic() - started < 1.0
    assert len(storage._rdb.get_all_trials(study_id)) == 1


def test_a_frozen_trial_carries_its_storage_id_and_heartbeats_sit_in_their_table(tmp_path: Path) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'ids.db'}", heartbeat=Heartbeat(60, 120, 0))
    study = optuna.create_study(storage=storage, study_name="ids")
    live = study.ask()
    storage.record_heartbeat(live._trial_id)
    frozen = study.get_trials(deepcopy=False)[0]
    assert frozen._trial_id == live._trial_id == storage.get_trial_id_from_study_id_trial_number(study._study_id, frozen.number)
    columns = {c["name"] for c in sqlalchemy.inspect(storage.engine).get_columns("trial_heartbeats")}
    assert {"trial_id", "heartbeat"} <= columns


def test_the_grpc_client_builds_its_stub_and_trial_cache_in_setup_also_when_unpickled() -> None:
    """hpo/storage/_proxy_client.py wraps the stub ``GrpcStorageProxy._setup`` builds, and gives ``GrpcClientCache`` the wrapped one."""
    storage = ProxyStorage(host="127.0.0.1", port=1)  # gRPC connects lazily: nothing is reached here
    for client in (storage, pickle.loads(pickle.dumps(storage))):  # as Ray ships it to its actors
        assert isinstance(client._stub, _BoundedStub) and isinstance(client._cache, GrpcClientCache)
        assert client._cache.grpc_client is client._stub
        assert set(IDEMPOTENT_CALLS) < set(dir(client._stub._stub))  # the stub's methods, by their names
        client.close()


def test_a_trials_user_attrs_are_read_from_its_cached_frozen_trial(storage: RetryingStorage) -> None:
    """set_user_attrs updates that cache after its write, as Trial.set_user_attr does."""
    trial = optuna.create_study(storage=storage, study_name="cached").ask()
    trial._cached_frozen_trial.user_attrs["seen"] = 1
    assert trial.user_attrs == {"seen": 1} and storage.get_trial(trial._trial_id).user_attrs == {}
    unique = {tuple(c.name for c in constraint.columns) for constraint in models.TrialUserAttributeModel.__table__.constraints
              if isinstance(constraint, sqlalchemy.UniqueConstraint)}
    assert ("trial_id", "key") in unique  # the upsert's conflict target
