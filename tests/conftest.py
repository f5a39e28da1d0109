"""Shared fixtures: a throwaway PostgreSQL database, small data files, a small search space."""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psycopg2
import pytest
import yaml
from _private_postgres import PrivatePostgres

from benchmarks._postgres import throwaway_database
from trial_executor import clear_caches, make_synthetic_reviews

ROOT = Path(__file__).resolve().parent.parent

# Tests reach only this machine. Ray advertises the machine's network address even when told
# 127.0.0.1 (``resolve_ip_for_localhost``) unless clusters of several machines are off, which the
# local test cluster (tests/e2e/test_ray.py) and every process it or a test starts then inherit.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    # The test processes share the machine's cores: training in each on all of them oversubscribes,
    # and so would the runs they start (``python -m hpo.run``), which take their share from the environment
    # (OpenMP threads spinning on cores another process holds: a fifth of these runs' CPU time).
    _THREADS = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    torch.set_num_threads(_THREADS)
    os.environ["OMP_NUM_THREADS"] = str(_THREADS)
PG_ADMIN_URL = os.environ.get("HPO_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")

# Small enough that a trial takes about a second on two cores: 20 steps, evaluated twice (a whole epoch of
# the 800-row data is 21 or 43 steps, which tests that need a trial to run longer restore).
SMALL_SPACE = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "fp_precision": {"type": "categorical", "choices": ["fp32", "tf32", "fp16", "bf16"]},
        "batch_size": {"type": "categorical", "choices": [16, 32]},
        "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True},
        "model": {"type": "categorical", "choices": ["tiny-bert", "tiny-distilbert"]},
    },
    "fixed": {"epochs": 1, "max_steps": 20, "max_length": 48, "eval_every": 10},
}


@contextlib.contextmanager
def _throwaway_database(prefix: str) -> Iterator[str]:
    """Create a database with a unique name, yield its URL, and drop it afterwards."""
    stack = contextlib.ExitStack()
    try:
        url = stack.enter_context(throwaway_database(PG_ADMIN_URL, prefix))
    except psycopg2.OperationalError as err:
        pytest.fail(f"PostgreSQL at {PG_ADMIN_URL} is unreachable ({str(err).strip()}); storage tests need it", pytrace=False)
    with stack:
        yield url


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards; yields its URL.

    Fails (never skips) when the server is unreachable: storage tests must run in CI.
    """
    with _throwaway_database("hpo_test") as url:
        yield url


@pytest.fixture
def pg_database(pg_server: str) -> Iterator[str]:
    """An empty database of its own for one test, dropped afterwards."""
    with _throwaway_database("hpo_case") as url:
        yield url


def write_tsv(path: Path, rows: list[tuple[str, object]], header: tuple[str, str] = ("sentence", "label")) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """800 synthetic reviews as TSV with string labels, no text twice (a repeat across the hold-out is warned about)."""
    texts, labels = make_synthetic_reviews(810, seed=7)
    names = ["negative", "positive"]
    first = {t: i for i, t in reversed(list(enumerate(texts)))}  # each text's first row
    rows = [(t, names[y]) for i, (t, y) in enumerate(zip(texts, labels, strict=True)) if first[t] == i][:800]
    return write_tsv(tmp_path_factory.mktemp("data") / "reviews.tsv", rows)


@pytest.fixture(scope="session")
def small_space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("space") / "small.yaml"
    path.write_text(yaml.safe_dump(SMALL_SPACE))
    return path


def cli_args(storage: str, space: Path, data: Path, *extra: str) -> list[str]:
    return [
        "--storage", storage, "--space", str(space), "--data", str(data),
        "--text-column", "sentence", "--label-column", "label", "--device", "cpu", *extra,
    ]


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m hpo.run`` in a real subprocess."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hpo.run", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_flag_error(
    main: Callable[[Sequence[str]], int], flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main(flags)`` exits with code 2 and prints one line on stderr containing ``expected``."""
    with pytest.raises(SystemExit) as exit_info:
        main(flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse to run when ``--dist loadgroup`` does not group (each test process checks its own collection).

    Tests marked ``xdist_group`` share one process on purpose: one Ray cluster for tests/e2e/test_ray.py,
    one inductor cache for the compiled-step tests. pytest-xdist groups them by appending "@group" to
    each node id, which pytest 9.2 no longer takes (pytest-dev/pytest-xdist#1386): the groups are then
    spread over both processes, every test still passes, and the suite runs over a minute longer.
    """
    if not getattr(config.option, "loadgroup", False):  # set in xdist's test processes under --dist loadgroup
        return
    ungrouped = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if ungrouped:
        message = (
            f"pytest-xdist did not group {ungrouped[0]} (xdist_group): this pytest and pytest-xdist do not "
            "work together under --dist loadgroup; install the versions pyproject.toml's dev extra names"
        )
        sys.__stderr__.write(message + "\n")  # what a test process writes elsewhere never reaches the terminal
        raise pytest.UsageError(message)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how many PostgreSQL tests passed; .ci/run refuses a run where none did."""
    passed = [r for r in terminalreporter.stats.get("passed", []) if "postgres" in r.keywords]
    terminalreporter.write_line(f"postgres tests passed: {len(passed)}")


@pytest.fixture(autouse=True, scope="session")
def _isolated_token_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the tokenized-data cache of every test run (and its subprocesses) out of ~/.cache."""
    previous = os.environ.get("HPO_CACHE_DIR")
    os.environ["HPO_CACHE_DIR"] = str(tmp_path_factory.mktemp("token-cache"))
    yield
    if previous is None:
        os.environ.pop("HPO_CACHE_DIR", None)
    else:
        os.environ["HPO_CACHE_DIR"] = previous


@pytest.fixture(autouse=True, scope="session")
def _working_directory_of_its_own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs in the test processes write what a run writes by default (``hpo-artifacts/``) there, not into the checkout."""
    previous = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)


@pytest.fixture(autouse=True)
def _empty_process_caches() -> None:
    """Each test starts with the process caches empty, so none depends on what an earlier one left in them."""
    clear_caches()


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running PostgreSQL server of this test's own, which the test may stop and restart."""
    # Not under pytest's tmp dir: that is private to this user, and the server runs as postgres.
    directory = Path(tempfile.mkdtemp(prefix="hpo-pg-"))
    server = PrivatePostgres(directory)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(RuntimeError):
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
