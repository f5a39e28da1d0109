"""Optuna's own storage checks (``optuna.testing.pytest_storages``, shipped with Optuna) on ``create_storage``'s storages.

The retrying wrapper must keep the storage contract. On SQLite every check but the few that
read back bulk generated data (3 to 8 s each on two cores; ``test_get_trial_user_attrs`` and
``test_get_trial_system_attrs`` still do); on PostgreSQL a selection covering each kind of
write and read.
"""

from __future__ import annotations

import pytest
from _storage_faults import fresh_storage_factory
from optuna.storages import BaseStorage
from optuna.testing.pytest_storages import StorageTestCase

_BULK_READS = [
    "test_get_all_studies",
    "test_get_all_trials",
    "test_get_all_trials_not_modified",
    "test_get_all_trials_deepcopy_option",
    "test_get_n_trials",
    "test_get_trial",
    "test_get_trial_param_and_get_trial_params",
]


class TestCreateStorageOnSqlite(StorageTestCase):
    locals().update(dict.fromkeys(_BULK_READS))  # not collected: see the module docstring

    @pytest.fixture
    def storage(self, tmp_path, request: pytest.FixtureRequest) -> BaseStorage:  # type: ignore[no-untyped-def]
        return fresh_storage_factory("sqlite", tmp_path, request)()[0]


_ON_POSTGRES = [
    "test_create_new_study_with_name",
    "test_delete_study",
    "test_set_and_get_study_user_attrs",
    "test_create_new_trial",
    "test_create_new_trial_with_template_trial",
    "test_set_trial_state_values_for_state",
    "test_set_trial_param",
    "test_set_trial_intermediate_value",
    "test_set_trial_system_attr",
    "test_get_best_trial",
    "test_pickle_storage",
    "test_check_trial_is_updatable",
]


@pytest.mark.postgres
class TestCreateStorageOnPostgres:
    @pytest.fixture
    def storage(self, tmp_path, request: pytest.FixtureRequest) -> BaseStorage:  # type: ignore[no-untyped-def]
        return fresh_storage_factory("postgres", tmp_path, request)()[0]

    locals().update({name: getattr(StorageTestCase, name) for name in _ON_POSTGRES})
