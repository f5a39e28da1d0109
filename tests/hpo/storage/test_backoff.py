"""A worker told to stop (SIGINT, SIGTERM) during a storage outage gives up at once, not after the bound.

A real outage: a ``grpc://`` proxy address where nothing listens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from _proxy_process import free_port

from hpo.storage._backoff import waiting_ends_on
from hpo.storage._db_errors import StorageFailedError
from hpo.storage._proxy_client import ProxyStorage


def _stopped_after(seconds: float) -> Callable[[], bool]:
    """A stop request that comes ``seconds`` from now, as a signal handler records one."""
    stopped = threading.Event()
    threading.Timer(seconds, stopped.set).start()
    return stopped.is_set


def test_a_proxy_outage_is_given_up_as_soon_as_the_worker_is_told_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 60.0)
    storage = ProxyStorage(host="127.0.0.1", port=free_port())  # nothing listens there
    started = time.monotonic()
    with waiting_ends_on(_stopped_after(1.0)), pytest.raises(StorageFailedError) as raised:
        storage.get_all_studies()
    assert 1.0 <= time.monotonic() - started < 3.0  # waited until the stop, then not for the bound's 60 s
    assert "unreachable and not waited for: this worker was told to stop (storage call GetAllStudies" in str(raised.value)


def test_outside_the_block_an_outage_is_waited_out_to_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 3.0)
    with waiting_ends_on(lambda: True):
        pass  # the stop belonged to that block alone
    started = time.monotonic()
    with pytest.raises(StorageFailedError, match=r"unreachable for 3 s"):
        ProxyStorage(host="127.0.0.1", port=free_port()).get_all_studies()
    assert time.monotonic() - started >= 0.7  # two retries at least (0.25..0.75 s, then 0.5..1.5 s)


def test_a_worker_waiting_for_its_proxy_to_restart_gives_up_when_told_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpo.storage._storage import check_storage_url

    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 60.0)
    port = free_port()
    started = time.monotonic()
    with waiting_ends_on(_stopped_after(1.0)), pytest.raises(StorageFailedError) as raised:
        check_storage_url(f"grpc://127.0.0.1:{port}", wait_for_server=True)  # a --workers worker: its parent reached it
    assert time.monotonic() - started < 6.0  # one 2 s poll of the proxy, then no wait
    assert str(raised.value).startswith(f"storage proxy 127.0.0.1:{port} unreachable and not waited for: this worker was told to stop")


@pytest.mark.postgres
def test_a_worker_opening_its_database_during_an_outage_gives_up_with_one_line_when_told_to_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening the storage (and taking a budget slot) retry outside a storage's calls: told to stop, they end at once
    with the outage's line, not PostgreSQL's "connection refused" nor a "fix --storage" that would blame the URL."""
    from hpo.storage._storage import check_storage_url

    monkeypatch.setattr("hpo.storage._backoff.RETRY_SECONDS", 60.0)
    url = f"postgresql://postgres:s3cret@127.0.0.1:{free_port()}/hpo"  # a database server down: nothing listens there
    started = time.monotonic()
    with waiting_ends_on(_stopped_after(1.0)), pytest.raises(StorageFailedError) as raised:
        check_storage_url(url, wait_for_server=True)  # a --workers worker: its parent reached the database
    assert 1.0 <= time.monotonic() - started < 3.0
    assert str(raised.value) == ("storage unreachable and not waited for: this worker was told to stop (opening the storage); "
                                 "rerun the same command to resume")
