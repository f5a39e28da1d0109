"""Bad input of issue 13 in a real process: one line naming problem and fix, exit 2, no traceback, nothing written.

CLI flags checked before storage is touched, search-space files, a password with a raw ``@``,
a study name longer than the study table holds (on PostgreSQL, which refuses it); and, in
process, enqueued trials the space cannot sample, which FAIL with a ``fail_reason`` while the
worker goes on.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
import torch
import yaml
from _read_only import read_only_directory
from conftest import ROOT, SMALL_SPACE
from optuna.trial import TrialState
from test_errors import _hpo, assert_one_clean_line

from hpo import StorageError, create_storage, make_objective, mask_url, open_study, optimize, parse_search_space, run_to_budget
from hpo.reporting._run_lines import trial_line
from hpo.storage._storage import mask_secrets
from trial_executor import demo_dataset

# One test process for this module: its module-scoped fixture (real runs) is then made once, not once per process.
pytestmark = pytest.mark.xdist_group("test_bad_input")

SECRET_TAIL = "tail-of-the-pw"
CPUS = len(os.sched_getaffinity(0))


def _space(case: Path, **changes: Any) -> str:
    space = copy.deepcopy(SMALL_SPACE)
    for section, value in changes.items():
        space[section] = {**space.get(section, {}), **value}
    path = case.parent / f"{case.name}-space.yaml"  # beside the case directory, which must stay empty
    path.write_text(yaml.safe_dump(space))
    return str(path)


def _duplicate_key(case: Path) -> str:
    path = case.parent / f"{case.name}-dup.yaml"
    path.write_text("params:\n  learning_rate: {type: float, low: 1.0e-4, high: 1.0e-3}\n  learning_rate: {type: float, low: 1.0e-5, high: 1.0e-2}\n")
    return str(path)


def _a_file(case: Path) -> str:
    path = case.parent / f"{case.name}-a-file"
    path.write_text("not a directory")
    return str(path)


MULTI_OBJECTIVE_SPACE = ROOT / "search_spaces" / "multi_objective.yaml"


# name -> (flags after `run --storage sqlite:///CASE/studies.db`, expected text of the one line)
CASES: dict[str, tuple[Any, str]] = {
    "seed above 2^32-1": (lambda c: ["--seed", str(2**32)], "--seed 4294967296 is outside 0..4294967295 (2^32 - 1); pass a seed in that range"),
    "negative seed": (lambda c: ["--seed", "-1"], "--seed -1 is outside 0..4294967295"),
    "verdict of 31 seeds": (lambda c: ["--verdict", "31"], "argument --verdict: must be between 2 and 30, got 31"),
    "verdict on a space without fp32": (
        lambda c: ["--verdict", "2", "--space", _space(c, params={"fp_precision": {"type": "categorical", "choices": ["bf16", "fp16"]}})],
        "the space's fp_precision choices ['bf16', 'fp16'] lack fp32, which a verdict compares every precision with; add fp32"),
    "verdict of a precision the space does not search": (
        lambda c: ["--space", _space(c, params={"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}},
                                     verdict={"precisions": ["fp32", "fp16"]})],
        "--precisions fp16: not among the space's fp_precision choices ['fp32', 'bf16']; drop them with --precisions, or widen"),
    # tf32 was dropped on the CPU after the 'fp32 and another' check: the study trained, then fp32 alone re-trained.
    "verdict with fp32 alone runnable here": (
        lambda c: ["--verdict", "2", "--space", _space(c, params={"fp_precision": {"type": "categorical", "choices": ["fp32", "tf32"]}})],
        "on this machine (cpu) only fp32 of fp32, tf32 can run: nothing to compare it with (tf32: TF32 is a mode of NVIDIA"),
    "verdict of a space with several objectives": (
        lambda c: ["--verdict", "2", "--space", str(MULTI_OBJECTIVE_SPACE)],
        "a space with several objectives has a Pareto front instead; run the study without --verdict"),
    "artifact store is a file": (lambda c: ["--artifact-store", _a_file(c)], "a-file is a file, not a directory; pass a directory path"),
    "duplicate YAML key": (
        lambda c: ["--space", _duplicate_key(c)], "line 3: duplicate key 'learning_rate' (first on line 2); keep one of them"),
    "hyperband min_resource above max_resource": (
        lambda c: ["--space", _space(c, pruner={"type": "hyperband", "min_resource": 10, "max_resource": 3})],
        "pruner: min_resource (10) must be <= max_resource (3); lower min_resource or raise max_resource"),
    "num_workers above the CPU count": (
        lambda c: ["--space", _space(c, fixed={"num_workers": 10000})],
        f"fixed.num_workers: 10000 DataLoader worker processes per trial exceeds this machine's {CPUS} CPUs; use at most {CPUS}"),
    # Each worker is a process with its own torch: --workers 100000 started them until the machine ran out of memory.
    "--workers above the CPU count": (
        lambda c: ["--workers", str(CPUS + 1)],
        f"--workers {CPUS + 1}: this machine gives the run {CPUS} CPUs, and each worker is a process that needs one; "
        f"pass --workers {CPUS} or fewer (for more, start workers on other machines with the same --storage, or use --ray)"),
    "a bare no as the precision (YAML's false)": (
        lambda c: ["--space", _space(c, params={"fp_precision": {"type": "categorical", "choices": [False, "bf16"]}})],
        "fp_precision: got the YAML boolean false (YAML reads a bare no, yes, off or on as one); quote it ('no' means fp32)"),
    "a choice listed twice": (
        lambda c: ["--space", _space(c, params={"batch_size": {"type": "categorical", "choices": [16, 32, 16]}})],
        "params.batch_size.choices lists 16 twice; list each choice once"),
    "one column for text and label": (
        lambda c: ["--data", _a_file(c), "--text-column", "sentence", "--label-column", "sentence"],
        "--text-column and --label-column both name the column 'sentence'; give each its own column"),
    # Root passes os.access for anything: the check must try, not ask.
    "cache dir under /proc": (lambda c: ["--cache-dir", "/proc/hpo-tokens"],
                              "--cache-dir /proc/hpo-tokens is not writable (nor can it be created in /proc); pass a writable directory"),
    "a data flag without --data": (lambda c: ["--text-column", "sentence"], "--text-column needs --data; pass the training file too"),
    "--mixed-precision against --fix fp_precision": (
        lambda c: ["--mixed-precision", "bf16", "--fix", "fp_precision=fp32"],
        "--fix fp_precision (or --mixed-precision) is given two values, 'fp32' and 'bf16'; keep one"),
    "--fix twice with two values": (
        lambda c: ["--fix", "learning_rate=0.002", "--fix", "learning_rate=0.003"],
        "--fix learning_rate is given two values, 0.002 and 0.003; keep one"),
    "unresolvable PostgreSQL host": (
        lambda c: ["--storage", f"postgresql://u:{SECRET_TAIL}@db.invalid:5432/hpo"],
        "cannot resolve the host 'db.invalid' of the storage URL"),
    # Each of its trials was skipped and counted nothing: the run made skipped trials for ever.
    "only a precision the machine cannot run": (
        lambda c: ["--fix", "fp_precision=tf32"],
        "no precision this run can sample runs on this machine's cpu (tf32: TF32 is a mode of NVIDIA tensor cores; this trial "
        "runs on the CPU); pin one it runs (--fix fp_precision=fp32), or run where they run"),
    "in-memory SQLite": (lambda c: ["--storage", "sqlite:///:memory:"], "is an in-memory SQLite database, lost when the run ends; give a file"),
    "unreachable Ray address": (lambda c: ["--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: nothing answers there (Connection refused); start"),
    "Ray address without a port": (lambda c: ["--ray", "head.invalid"], "--ray head.invalid: not an address; give host:port"),
    # Without its "//" the URL had no credentials to mask: the error printed the password.
    "storage URL without //": (
        lambda c: ["--storage", f"postgresql:/u:{SECRET_TAIL}@127.0.0.1/db"],
        "storage URL '***@127.0.0.1/db' is malformed; use sqlite:///path.db or postgresql://user:password@host:5432/db"),
    "password with a raw @": (
        lambda c: ["--storage", f"postgresql://u:pw@{SECRET_TAIL}@127.0.0.1:1/db"],
        "the password contains a character that URLs reserve (@ / ? #); percent-encode it, and any @ in a query value (@ as %40"),
}
if not torch.cuda.is_available():
    CASES["--device cuda without CUDA"] = (lambda c: ["--device", "cuda"], "--device cuda: torch ")


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    dirs = {name: tmp_path_factory.mktemp("case") for name in CASES}

    def run(name: str) -> subprocess.CompletedProcess[str]:
        flags = CASES[name][0](dirs[name])
        return _hpo(["run", "--storage", f"sqlite:///{dirs[name] / 'studies.db'}", "--device", "cpu", *flags], dirs[name])

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {name: (proc, dirs[name]) for name, proc in zip(CASES, pool.map(run, CASES), strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_writes_nothing(name: str, outcomes: dict[str, tuple[subprocess.CompletedProcess[str], Path]]) -> None:
    proc, case_dir = outcomes[name]
    assert_one_clean_line(proc, CASES[name][1], secret=SECRET_TAIL)
    assert proc.returncode == 2 and proc.stdout == ""  # not even the line saying which space a good run takes
    assert list(case_dir.iterdir()) == [], "the failed command wrote files"


def test_read_only_cache_dir_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    case = tmp_path / "case"
    case.mkdir()
    with read_only_directory(tmp_path / "ro") as read_only:
        proc = _hpo(["run", "--storage", f"sqlite:///{case / 'studies.db'}", "--device", "cpu", "--cache-dir", str(read_only / "tokens")], case)
    assert_one_clean_line(proc, f"--cache-dir {read_only / 'tokens'} is not writable (nor can it be created in {read_only}); pass a writable directory")
    assert list(case.iterdir()) == []


@pytest.mark.postgres
def test_a_study_name_longer_than_the_table_holds_is_refused_on_postgres(pg_database: str, tmp_path: Path) -> None:
    proc = _hpo(["run", "--storage", pg_database, "--device", "cpu", "--study-name", "x" * 10_000], tmp_path)
    assert_one_clean_line(proc, "--study-name is 10000 characters long; the study table holds at most 512: pass a shorter name")
    engine = sqlalchemy.create_engine(pg_database)
    try:
        assert sqlalchemy.inspect(engine).get_table_names() == [], "the storage was touched"
    finally:
        engine.dispose()
    # The longest name the check lets through is one PostgreSQL stores.
    study = optuna.create_study(study_name="x" * 512, storage=pg_database)
    assert optuna.load_study(study_name="x" * 512, storage=pg_database).study_name == study.study_name


def test_enqueued_trials_outside_the_space_fail_with_a_reason_and_the_worker_goes_on(tmp_path: Path) -> None:
    data = demo_dataset(n_train=96, n_valid=24, seed=1)
    space = parse_search_space({
        "params": {
            "batch_size": {"type": "int", "low": 8, "high": 64, "step": 8},
            "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
            "model": {"type": "categorical", "choices": ["tiny-bert"]},
        },
        "fixed": {"eval_batch_size": 8, "max_steps": 2, "eval_every": 0, "max_length": 32},
    })
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'q.db'}"), "q", space, data, seed=0)
    good = {"batch_size": 16, "learning_rate": 1e-3, "fp_precision": "fp32", "model": "tiny-bert"}
    bad = [{"batch_size": 100000}, {"learning_rate": math.nan}, {"fp_precision": "fp8"}, {"model": "/no/such/model"},
           {"warmup_ratio": 0.5}]
    for params in bad:
        study.enqueue_trial({**good, **params})
    objective = make_objective(space, data, base_seed=0, device="cpu")
    # The fp32 baseline, five bad trials (more than the failures-in-a-row limit), then sampled ones.
    run_to_budget(study, objective, 3)

    trials = study.get_trials()
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert [t.number for t in failed] == [1, 2, 3, 4, 5] and sum(t.state == TrialState.COMPLETE for t in trials) == 3
    reasons = [t.user_attrs["fail_reason"] for t in failed]
    assert reasons == [
        "InvalidTrialError: enqueued batch_size=100000 is outside the space's range [8, 64]; enqueue values the space can sample, or widen the space",
        "InvalidTrialError: enqueued learning_rate=nan is not a finite number; enqueue values the space can sample, or widen the space",
        "InvalidTrialError: enqueued fp_precision='fp8' is not one of the choices ['fp32', 'bf16']; enqueue values the space can sample, or widen the space",
        "InvalidTrialError: enqueued model='/no/such/model' is not one of the choices ['tiny-bert']; enqueue values the space can sample, or widen the space",
        "InvalidTrialError: enqueued parameter 'warmup_ratio' is not searched by the space (it searches batch_size, learning_rate, fp_precision, model); "
        "enqueue values the space can sample, or widen the space",
    ]
    assert all(not t.params and t.user_attrs["hardware"]["device_type"] == "cpu" for t in failed)
    assert "(InvalidTrialError: enqueued batch_size=100000" in trial_line(failed[0], ["accuracy"])



@pytest.mark.parametrize(("url", "password"), [
    ("postgresql://u:pw@tail-of-the-pw@db:5432/hpo", "pw@tail-of-the-pw"),  # a raw @: a parser takes "tail-of-the-pw@db" for the host
    ("postgresql://u:pw/tail-of-the-pw@db/hpo", "pw/tail-of-the-pw"),  # a raw /: a parser ends the host there
    ("postgresql://u:pw@tail-of-the-pw@db:notaport/hpo", "pw@tail-of-the-pw"),  # and malformed besides
    ("postgresql+psycopg2://u:pw%40tail-of-the-pw@db/hpo", "pw@tail-of-the-pw"),  # percent-encoded, as it should be
])
def test_passwords_are_masked_however_the_url_splits(url: str, password: str) -> None:
    shown = mask_url(url)
    assert shown == url.split("//")[0] + "//u:***@" + url.rsplit("@", 1)[1], shown
    text = mask_secrets(f"could not connect to {url}: password {password} rejected", url)
    assert "tail-of-the-pw" not in text, text


@pytest.mark.parametrize("url", [
    "postgresql:/u:tail-of-the-pw@db/hpo", "postgresql//u:tail-of-the-pw@db/hpo", "postgresql:u:tail-of-the-pw@db/hpo",
    "u:tail-of-the-pw@db/hpo",
])
def test_a_url_without_its_double_slash_masks_all_before_its_host(url: str) -> None:
    assert mask_url(url) == "***@db/hpo"
    assert "tail-of-the-pw" not in mask_secrets(f"{url} is malformed: password tail-of-the-pw", url)


@pytest.mark.parametrize(("url", "shown"), [
    # SQLAlchemy reads "#" as part of a query value, and decodes a percent-encoded key: both were shown in part or whole.
    ("postgresql://u@db/hpo?password=pw#tail-of-the-pw", "postgresql://u@db/hpo?password=***"),
    ("postgresql://u@db/hpo?pass%77ord=tail-of-the-pw&sslmode=require", "postgresql://u@db/hpo?pass%77ord=***&sslmode=require"),
    ("postgresql://u@db/hpo?SSLPassword=tail-of-the-pw&passwords=x", "postgresql://u@db/hpo?SSLPassword=***&passwords=x"),
])
def test_a_query_password_is_masked_to_its_end_under_any_spelling_sqlalchemy_reads(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    password = url.partition("=")[2].partition("&")[0]
    assert "tail-of-the-pw" not in mask_secrets(f"failed on {url}: password {password}", url)


def test_a_password_in_the_query_is_masked_too() -> None:
    # libpq takes the password as a query parameter as well: ?password=... (and sslpassword=...).
    url = f"postgresql://127.0.0.1:5432/hpo?user=u&password={SECRET_TAIL}&sslmode=prefer&sslpassword=k%40{SECRET_TAIL}"
    assert mask_url(url) == "postgresql://127.0.0.1:5432/hpo?user=u&password=***&sslmode=prefer&sslpassword=***"
    assert SECRET_TAIL not in mask_secrets(f"failed on {url}: password {SECRET_TAIL} or k@{SECRET_TAIL} rejected", url)


def test_a_short_password_is_masked_where_it_stands_alone_not_out_of_other_words() -> None:
    url = "mysql://u:p@h/db"
    message = "storage 'mysql://u:p@h/db' is not supported; use sqlite:///path.db or postgresql://u:p@h/db (password p)"
    assert mask_secrets(message, url) == (
        "storage 'mysql://u:***@h/db' is not supported; use sqlite:///path.db or postgresql://u:***@h/db (password ***)"
    )
    # A password that ends in a non-word character is masked whatever follows it.
    assert mask_secrets("rejected pw!x and (pw!)", "postgresql://u:pw!@h/db") == "rejected ***x and (***)"


def test_the_python_api_never_shows_the_password_of_a_refused_url() -> None:
    with pytest.raises(StorageError) as refused:
        optimize(SMALL_SPACE, demo_dataset(n_train=40, n_valid=10), storage=f"sqlite://u:{SECRET_TAIL}@/")
    assert SECRET_TAIL not in str(refused.value) and "sqlite://u:***@/" in str(refused.value)


@pytest.mark.postgres
def test_status_of_a_database_named_with_a_query_password_never_shows_it(
    pg_database: str, capfd: pytest.CaptureFixture[str],
) -> None:
    from hpo.__main__ import main as hpo_main

    url = f"{pg_database}?password={SECRET_TAIL}"  # trust auth: the server takes any password
    hpo_main(["status", "--storage", url])
    shown = capfd.readouterr()
    assert "password=***" in shown.out + shown.err and SECRET_TAIL not in shown.out + shown.err
