"""Every user error of the command line, in a real process: one line naming the fix, exit != 0, nothing written.

One row per error of docs_snippets/errors.md, run as subprocesses four at a time. (Errors of
``best``/``export`` on an existing study and of unknown commands are in test_cli.py, in-process.)
"""

from __future__ import annotations

import copy
import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import optuna
import psycopg2
import pytest
import sqlalchemy
import yaml
from _private_postgres import PrivatePostgres
from conftest import ROOT, SMALL_SPACE

# One test process for this module: its module-scoped fixture (real runs) is then made once, not once per process.
pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("test_errors")]

SECRET = "s3cretPw"
UNREACHABLE = f"postgresql://u:{SECRET}@127.0.0.1:1/db"


@dataclass(frozen=True)
class Case:
    argv: Callable[[Path, dict[str, str]], list[str]]  # (case directory, shared inputs) -> python -m hpo ARGS
    expected: str | Callable[[dict[str, str]], str]


def _run_flags(case: Path, *flags: str) -> list[str]:
    # A storage inside the case directory: the test checks the directory gains no file.
    return ["run", "--storage", f"sqlite:///{case / 'studies.db'}", "--device", "cpu", *flags]


CASES: dict[str, Case] = {
    "unreachable database (run)": Case(
        lambda c, i: ["run", "--storage", UNREACHABLE], "cannot reach PostgreSQL at 127.0.0.1:1 (is the server running?)"),
    "study not found (status)": Case(
        lambda c, i: ["status", "--storage", i["db"], "--study-name", "absent"], "no study 'absent' in sqlite:///"),
    "study not found (best)": Case(
        lambda c, i: ["best", "--storage", i["db"], "--study-name", "absent"], "studies found: empty, present (pass one with --study-name)"),
    "study not found (export)": Case(
        lambda c, i: ["export", "--storage", i["db"], "--study-name", "absent", "--format", "csv"], "studies found: empty, present"),
    "no SQLite file (status)": Case(
        lambda c, i: ["status", "--storage", f"sqlite:///{c / 'missing.db'}"], "no SQLite database at "),
    "malformed YAML": Case(lambda c, i: _run_flags(c, "--space", i["broken"]), "line 3, column 8: expected ',' or '}'"),
    "unknown key in the space": Case(lambda c, i: _run_flags(c, "--space", i["typo"]), "prunner: unknown key (did you mean 'pruner'?)"),
    "model not found": Case(lambda c, i: _run_flags(c, "--space", i["model"]), "model 'tiny-bret' could not be loaded (HF_HUB_OFFLINE is set); did you mean 'tiny-bert'?"),
    "data file missing": Case(lambda c, i: _run_flags(c, "--data", str(c / "train.tsv")), "train.tsv not found; pass an existing"),
    "--workers 0": Case(lambda c, i: _run_flags(c, "--workers", "0"), "argument --workers: must be at least 1, got 0"),
    "negative --n-trials": Case(lambda c, i: _run_flags(c, "--n-trials", "-3"), "argument --n-trials: must be at least 1, got -3"),
    "--timeout not a number": Case(
        lambda c, i: _run_flags(c, "--timeout", "soon"), "argument --timeout: expected a positive number of seconds, got 'soon'"),
    "dashboard port in use": Case(
        lambda c, i: ["dashboard", "--storage", i["db"], "--port", i["busy_port"]],
        lambda i: f"cannot listen on 127.0.0.1:{i['busy_port']} (Address already in use); pick another --port or --host"),
    "dashboard artifact store a file": Case(  # it served on, warning "no artifact store at" the file
        lambda c, i: ["dashboard", "--storage", i["db"], "--artifact-store", i["broken"]],
        lambda i: f"--artifact-store {i['broken']} is a file, not a directory; pass the directory the study ran with"),
    "proxy port in use": Case(  # checked before the database is opened: no new SQLite file in the case directory
        lambda c, i: ["proxy", "--storage", f"sqlite:///{c / 'new.db'}", "--port", i["busy_port"]],
        lambda i: f"cannot listen on 127.0.0.1:{i['busy_port']} (Address already in use); pick another --port or --host"),
}


def _hpo(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "hpo", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[subprocess.CompletedProcess[str], Path, str]]]:
    """Run every case at once (4 processes at a time); yields case -> (process, its directory, its expected text)."""
    shared = tmp_path_factory.mktemp("inputs")
    db = shared / "studies.db"
    study = optuna.create_study(study_name="present", storage=f"sqlite:///{db}")
    study.tell(study.ask(), 1.0)
    optuna.create_study(study_name="empty", storage=f"sqlite:///{db}").ask()
    broken = shared / "broken.yaml"
    broken.write_text("params:\n  batch_size: {type: int, low: 1\n  model: x\n")
    typo, model = shared / "typo.yaml", shared / "model.yaml"
    typo.write_text(yaml.safe_dump({**SMALL_SPACE, "prunner": {"type": "none"}}))
    with_model = copy.deepcopy(SMALL_SPACE)
    with_model["params"]["model"]["choices"] = ["tiny-bert", "tiny-bret"]
    model.write_text(yaml.safe_dump(with_model))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    inputs = {"db": f"sqlite:///{db}", "broken": str(broken), "typo": str(typo), "model": str(model),
              "busy_port": str(busy.getsockname()[1])}
    before = _digest(db)
    dirs = {name: tmp_path_factory.mktemp("case") for name in CASES}
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_hpo, case.argv(dirs[name], inputs), dirs[name]) for name, case in CASES.items()}
        results = {name: future.result() for name, future in futures.items()}
    busy.close()
    assert _digest(db) == before, "a failed command changed the existing storage"
    yield {
        name: (results[name], dirs[name], case.expected(inputs) if callable(case.expected) else case.expected)
        for name, case in CASES.items()
    }


def assert_one_clean_line(proc: subprocess.CompletedProcess[str], expected: str, secret: str = SECRET) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0, proc.stdout
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert expected in lines[0], lines[0]
    assert secret not in proc.stderr + proc.stdout


@pytest.mark.parametrize("name", list(CASES))
def test_error_is_one_line_and_writes_nothing(
    name: str, outcomes: dict[str, tuple[subprocess.CompletedProcess[str], Path, str]]
) -> None:
    proc, case_dir, expected = outcomes[name]
    assert_one_clean_line(proc, expected)
    assert proc.returncode == 2 and proc.stdout == ""  # not even the line saying which space a good run takes
    assert list(case_dir.iterdir()) == [], "the failed command wrote files"


def test_wrong_password_is_one_masked_line(private_postgres: PrivatePostgres, tmp_path: Path) -> None:
    # The shared server trusts every local connection; this one of our own checks passwords (scram-sha-256).
    admin = psycopg2.connect(private_postgres.url.replace("postgresql://", "postgres://"), connect_timeout=10)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("ALTER ROLE postgres PASSWORD 'right-password'")
        cursor.execute("SHOW hba_file")
        hba = Path(cursor.fetchone()[0])
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n")
        cursor.execute("SELECT pg_reload_conf()")
    admin.close()
    wrong = private_postgres.url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    proc = _hpo(["run", "--storage", wrong, "--device", "cpu"], cwd=tmp_path)
    assert_one_clean_line(proc, f"password authentication failed for user 'postgres' on PostgreSQL at 127.0.0.1:{private_postgres.port}")
    assert "check the password in the storage URL" in proc.stderr and proc.returncode == 2
    right = private_postgres.url.replace("postgresql://postgres@", "postgresql://postgres:right-password@")
    engine = sqlalchemy.create_engine(right)
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == [], "tables were created"
    finally:
        engine.dispose()
    assert list(tmp_path.iterdir()) == []
