"""``python -m hpo.proxy`` as a real subprocess on a throwaway PostgreSQL database, real Optuna through gRPC."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import optuna
import pytest
from _proxy_process import PROXY, free_port, serve, start_proxy, stop
from conftest import ROOT
from optuna.trial import TrialState

from hpo import StorageError, create_storage

SECRET = "Sup3rSecretPw"


@pytest.fixture
def proxy(pg_database: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A proxy serving ``pg_database`` (URL given with a password, which must never be shown)."""
    port = free_port()
    proc = serve(pg_database.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@"), port)
    try:
        yield proc, port
    finally:
        stop(proc)


@pytest.mark.postgres
def test_study_through_the_proxy_lands_in_the_database(proxy: tuple[subprocess.Popen[str], int], pg_database: str) -> None:
    proc, port = proxy
    storage = create_storage(f"grpc://127.0.0.1:{port}")
    assert isinstance(storage, optuna.storages.GrpcStorageProxy)
    study = optuna.create_study(study_name="via-proxy", storage=storage, direction="minimize", sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(lambda trial: (trial.suggest_float("x", -10, 10) - 3) ** 2, n_trials=6)

    direct = optuna.load_study(study_name="via-proxy", storage=create_storage(pg_database))
    trials = direct.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    assert [t.params["x"] for t in trials] == [t.params["x"] for t in study.trials]
    assert direct.best_value == min((t.params["x"] - 3) ** 2 for t in trials)

    # A second proxy on the same port is refused in one line (gRPC alone would share the port).
    busy = subprocess.run([*PROXY, "--storage", pg_database, "--port", str(port)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert busy.returncode == 2 and "Address already in use" in busy.stderr and "Traceback" not in busy.stderr

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"on 127.0.0.1:{port}; start workers with --storage grpc://127.0.0.1:{port}" in out
    assert "postgres:***@" in out and SECRET not in out + err


def test_bad_storage_is_one_line_exit_2() -> None:
    cases = {
        f"postgresql://postgres:{SECRET}@127.0.0.1:1/hpo": "cannot reach PostgreSQL at 127.0.0.1:1",
        "grpc://127.0.0.1:13000": "not another proxy",
    }
    procs = {url: start_proxy("--storage", url, "--port", str(free_port())) for url in cases}  # in parallel
    for url, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (url, out, err)
        assert err.startswith("python -m hpo.proxy: error: ") and err.strip().count("\n") == 0, err
        assert cases[url] in err and "Traceback" not in err and SECRET not in out + err


@pytest.mark.parametrize("url", ["grpc://127.0.0.1", "grpc://:13000", "grpc://host:port", "grpc://host:70000", "grpc://host:13000/db"])
def test_malformed_grpc_url_names_the_form(url: str) -> None:
    with pytest.raises(StorageError, match=r"is malformed; use grpc://host:port"):
        create_storage(url)


def test_unreachable_proxy_is_a_storage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wait for a proxy that never answers, shortened from 10 s: the outcome is the same, sooner.
    monkeypatch.setattr("hpo.storage._storage._GRPC_CONNECT_TIMEOUT", 1.0)
    port = free_port()
    with pytest.raises(StorageError, match=rf"cannot reach the storage proxy at 127.0.0.1:{port} .*hpo.proxy"):
        create_storage(f"grpc://127.0.0.1:{port}")
