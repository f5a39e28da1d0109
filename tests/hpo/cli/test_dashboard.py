"""``python -m hpo.dashboard`` in a real headless Chromium, on a real study in PostgreSQL.

Needs Debian's ``chromium`` and ``chromium-driver``; the session installs them with apt-get
when they are missing (a minute or so) and fails, with the command to run, when it cannot.
The screenshot of the trial page is kept in tests/artifacts/.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
import yaml
from _private_postgres import free_port
from conftest import ROOT, SMALL_SPACE, cli_args, run_cli
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import hpo

pytestmark = pytest.mark.postgres

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
BROWSER_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--window-size=1400,1700",
)
APT_INSTALL = ("apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver")
SCREENSHOTS = ROOT / "tests" / "artifacts"
SECRET = "DashSecret9"
# A few optimizer steps per trial, evaluated every 2: a short learning curve per trial.
SPACE = {**SMALL_SPACE, "fixed": {**SMALL_SPACE["fixed"], "max_steps": 6, "eval_every": 2}}


def _apt(*command: str) -> subprocess.CompletedProcess[str]:
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run([*prefix, *command], env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """Paths of Chromium and its driver, installed from Debian's packages if missing."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        result = _apt(*APT_INSTALL)
        if result.returncode != 0:  # stale package lists: refresh them once
            _apt("apt-get", "-o", "DPkg::Lock::Timeout=600", "update")
            result = _apt(*APT_INSTALL)
        if result.returncode != 0 or not CHROMEDRIVER.is_file():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.fail(f"could not install Chromium for the dashboard test ({last}); run: {' '.join(APT_INSTALL)}", pytrace=False)
    return str(CHROMIUM), str(CHROMEDRIVER)


@pytest.fixture
def browser(chromium: tuple[str, str], tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = chromium[0]
    for flag in (*BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(chromium[1]))
    try:
        yield driver
    finally:
        driver.quit()


class Dashboard:
    """``python -m hpo dashboard`` as a subprocess; ``banner`` is its first stdout line."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "hpo", "dashboard", *args], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.banner = self._first_line(timeout=180)

    def _first_line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if not line:
            self.stop()
            pytest.fail(f"the dashboard did not start: {self.proc.stderr.read()[-2000:]}", pytrace=False)  # type: ignore[union-attr]
        return line.strip()

    def get(self, url: str) -> int:
        with urllib.request.urlopen(url, timeout=30) as response:
            return int(response.status)

    def stop(self) -> str:
        """SIGTERM, as `docker stop` would; returns what it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def _wait_for_text(driver: webdriver.Chrome, *texts: str, timeout: float = 60) -> str:
    """The page's text once every one of ``texts`` is on it (a React page renders after it loads)."""
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.5).until(
            lambda d: all(text in d.find_element(By.TAG_NAME, "body").text for text in texts)
        )
        found = True
    except TimeoutException:
        found = False
    body = driver.find_element(By.TAG_NAME, "body").text
    if not found:
        missing = [text for text in texts if text not in body]
        pytest.fail(f"{missing} not on {driver.current_url} after {timeout:.0f} s; the page shows: {body[:1500]!r}", pytrace=False)
    return body


def test_dashboard_shows_the_study_its_objective_name_trials_hardware_and_config_artifact(
    pg_database: str, small_data: Path, tmp_path: Path, browser: webdriver.Chrome
) -> None:
    url = pg_database.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")  # trust auth: any password works
    space, artifacts = tmp_path / "space.yaml", tmp_path / "artifacts"
    space.write_text(yaml.safe_dump(SPACE))
    ran = run_cli([*cli_args(url, space, small_data, "--study-name", "dash-study", "--n-trials", "2"),
                   "--artifact-store", str(artifacts)], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    study = optuna.load_study(study_name="dash-study", storage=pg_database)
    first = study.get_trials()[0]
    # A verdict trial that scored above every trial of the search: the dashboard's best stays the search's best.
    study.add_trial(optuna.trial.create_trial(value=1.0, params=first.params, distributions=first.distributions, user_attrs={
        "verdict_trial": {"of_trial": first.number, "precision": "bf16", "seed": 1, "seed_index": 1}}))
    trials = study.get_trials()
    device_name = first.user_attrs["hardware"]["device_name"]

    port = free_port()
    dashboard = Dashboard(["--storage", url, "--port", str(port), "--artifact-store", str(artifacts)], cwd=tmp_path)
    try:
        assert dashboard.banner.startswith("Serving optuna-dashboard for postgresql://postgres:***@127.0.0.1:5432/")
        assert f"at http://127.0.0.1:{port}/" in dashboard.banner and SECRET not in dashboard.banner
        process = psutil.Process(dashboard.proc.pid)
        connections = process.net_connections("tcp") if hasattr(process, "net_connections") else process.connections("tcp")
        listening = {c.laddr for c in connections if c.status == psutil.CONN_LISTEN}
        assert {(a.ip, a.port) for a in listening} == {("127.0.0.1", port)}  # loopback only by default

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{study._study_id}?after=0", timeout=30) as response:
            shown = json.loads(response.read())
        assert [t["number"] for t in shown["best_trials"]] == [t.number for t in hpo.best_trials(study)] != [trials[-1].number]
        # The study list, then the study's own page, as a user clicks through them.
        browser.get(f"http://127.0.0.1:{port}/dashboard")
        _wait_for_text(browser, "dash-study")
        browser.find_element(By.CSS_SELECTOR, f"a[href$='/dashboard/studies/{study._study_id}']").click()
        WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith(f"/dashboard/studies/{study._study_id}"))
        # The history plot's axis carries the space's objective name (study.set_metric_names), not "Objective 0".
        overview = _wait_for_text(browser, "History", "y Axis\naccuracy")
        assert "Objective 0" not in overview
        # The trial list with the first trial's details: params, value, learning curve, user attrs, artifacts.
        browser.get(f"http://127.0.0.1:{port}/dashboard/studies/{study._study_id}/trials")
        page = _wait_for_text(browser, f"{len(trials)} Trials", device_name, "config.json")
        assert f"Trial {first.number} (trial_id={first._trial_id})" in page
        for name, value in first.params.items():
            assert f"{name} {value}" in page
        assert "Intermediate Values" in page and "throughput_samples_per_s" in page
        # Nested attrs read one leaf per row, not as a JSON line thousands of pixels wide.
        assert f"hardware.device_name {device_name}" in page and '"device_name"' not in page
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 1400
        # The artifact behind the name: the trial's resolved config, served from our artifact store.
        metas = [json.loads(v) for k, v in first.system_attrs.items() if k.startswith("artifacts:")]
        config_id = next(m["artifact_id"] for m in metas if m and m["filename"] == "config.json")
        served = f"http://127.0.0.1:{port}/artifacts/{study._study_id}/{first._trial_id}/{config_id}"
        with urllib.request.urlopen(served, timeout=30) as response:
            assert json.loads(response.read()) == first.user_attrs["config"]
        shot = tmp_path / "dashboard-trials.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        SCREENSHOTS.mkdir(exist_ok=True)
        shutil.copy(shot, SCREENSHOTS / shot.name)
    finally:
        err = dashboard.stop()
    assert "no authentication" not in err and SECRET not in err
    assert dashboard.proc.returncode == 0, err


def test_dashboard_off_loopback_warns_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    optuna.create_study(study_name="s", storage=url)
    port = free_port()
    dashboard = Dashboard(["--storage", url, "--host", "0.0.0.0", "--port", str(port), "--artifact-store", str(tmp_path)], cwd=tmp_path)
    try:
        assert dashboard.get(f"http://127.0.0.1:{port}/api/studies") == 200
    finally:
        err = dashboard.stop()
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[0].startswith(f"python -m hpo dashboard: warning: the dashboard has no authentication and listens on 0.0.0.0:{port}")
    assert lines[1:] == ["python -m hpo dashboard: stopped"]  # named the way it was started


def test_a_storage_gone_while_serving_is_one_line_per_error_not_a_traceback_per_request(tmp_path: Path) -> None:
    """The page polls: each request wrote a whole traceback to stderr, the fix buried inside each."""
    db = tmp_path / "studies.db"
    optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    port = free_port()
    dashboard = Dashboard(["--storage", f"sqlite:///{db}", "--port", str(port), "--artifact-store", str(tmp_path)], cwd=tmp_path)
    try:
        assert dashboard.get(f"http://127.0.0.1:{port}/api/studies") == 200
        db.unlink()
        for _ in range(3):
            with pytest.raises(urllib.error.HTTPError) as failed:
                dashboard.get(f"http://127.0.0.1:{port}/api/studies")
            assert failed.value.code == 500
    finally:
        err = dashboard.stop()
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"python -m hpo dashboard: a request failed: SQLite database {db} was "
        "deleted while in use (not a lost connection, so not retried); restore the file, then rerun to resume",
        "python -m hpo dashboard: stopped",
    ]


def test_an_artifact_store_given_but_missing_is_refused_before_serving(tmp_path: Path) -> None:
    # A mistyped --artifact-store served the study on with a warning, every trial's artifacts missing from its pages.
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    optuna.create_study(study_name="s", storage=url)
    missing = tmp_path / "artifcats"
    done = subprocess.run([sys.executable, "-m", "hpo", "dashboard", "--storage", url, "--port", str(free_port()),
                           "--artifact-store", str(missing)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)  # served on, it would time out
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"python -m hpo dashboard: error: no artifact store at {missing} (--artifact-store); pass the directory "
                           "the study ran with, or leave the flag out\n")
    assert not missing.exists()
