"""What can be checked of the Docker setup without a Docker engine.

- Debian's docker-compose (1.29, installed by the test when missing) parses and resolves
  docker-compose.yml: the shared artifact volume, the host's data and spaces, the GPU profile.
- The worker's shell command expands to the right hpo.run flags, with and without data.
- The image's directories, made by the script the Dockerfile runs, are writable by a non-root
  user (the image's own, and an arbitrary ``docker run --user UID``), and hpo runs there.
Not run here: ``docker build`` and ``docker compose up`` (no engine), and the GPU profile (no GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from _tiny_study import TINY
from conftest import ROOT

COMPOSE_FILE = ROOT / "docker-compose.yml"
DIRS = ("work", "artifacts", "cache", "data", "spaces")


@pytest.fixture(scope="module")
def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        # The lock timeout: the dashboard test may be installing Chromium in the other test process.
        apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
        command = [*apt, "install", "-y", "--no-install-recommends", "docker-compose"]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:  # a new machine's package lists are stale or empty: refresh them once
            subprocess.run([*apt, "update"], env=env, capture_output=True, text=True, timeout=900)
            result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        found = shutil.which("docker-compose")
        if found is None:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.fail(f"could not install Debian's docker-compose ({last}); run: {' '.join(command)}", pytrace=False)
    return found


def _config(docker_compose: str, *flags: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [docker_compose, "-f", str(COMPOSE_FILE), *flags, "config"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "POSTGRES_PASSWORD": "s3cret", **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def test_compose_config_shares_artifacts_and_mounts_data_and_spaces(docker_compose: str) -> None:
    config = _config(docker_compose)
    services = config["services"]
    assert services["worker-gpu"]["profiles"] == ["gpu"]  # `up` starts it only with --profile gpu

    def mounts(name: str) -> dict[str, dict]:
        # docker-compose 1.29 prints the short syntax, SOURCE:TARGET[:MODE]; Compose v2 the long one.
        found = {}
        for volume in services[name]["volumes"]:
            if isinstance(volume, str):
                source, target, *mode = volume.split(":")
                kind = "bind" if source.startswith("/") else "volume"
                volume = {"type": kind, "source": source, "target": target, "read_only": mode == ["ro"]}
            found[volume["target"]] = volume
        return found

    worker, dashboard = mounts("worker"), mounts("dashboard")
    assert worker["/artifacts"]["source"] == dashboard["/artifacts"]["source"]
    assert worker["/artifacts"]["source"].endswith("artifacts")  # the project-prefixed named volume
    assert worker["/artifacts"]["type"] == "volume" and "artifacts" in config["volumes"]
    for target, host in (("/data", ROOT / "data"), ("/spaces", ROOT / "search_spaces")):
        assert worker[target]["type"] == "bind" and Path(worker[target]["source"]) == host and worker[target]["read_only"]
    assert "--artifact-store /artifacts" in " ".join(services["dashboard"]["command"])
    assert "--artifact-store /artifacts" in " ".join(services["worker"]["command"])
    assert (ROOT / "search_spaces" / "default.yaml").is_file() and (ROOT / "data").is_dir()
    # The GPU profile resolves too, with its device reservation.
    gpu = _config(docker_compose, "--profile", "gpu")["services"]["worker-gpu"]
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert gpu["build"]["args"]["TORCH_INDEX_URL"] == "https://pypi.org/simple"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ["--space", "/spaces/default.yaml", "--artifact-store", "/artifacts"]),
        ({"HPO_DATA": "/data/my reviews.tsv", "HPO_TEXT_COLUMN": "sentence"},
         ["--data", "/data/my reviews.tsv", "--text-column", "sentence", "--label-column", "label"]),
    ],
)
def test_worker_command_passes_data_only_when_set(docker_compose: str, env: dict[str, str], expected: list[str]) -> None:
    worker = _config(docker_compose, env=env)["services"]["worker"]
    # `config` prints the file's $$ escapes as they are; the container's shell gets a single $.
    script = worker["command"][2].replace("$$", "$").replace("exec python -m hpo.run", "printf '%s\\n'", 1)
    container_env = {k: "" if v is None else str(v) for k, v in worker["environment"].items()}
    argv = subprocess.run(["sh", "-c", script], env={"PATH": os.environ["PATH"], **container_env},
                          capture_output=True, text=True, check=True).stdout.splitlines()
    joined = "\n".join(argv)
    assert "\n".join(expected) in joined, argv
    assert ("--data" in argv) == ("HPO_DATA" in env)


@pytest.fixture
def image_root() -> Iterator[Path]:
    """The image's directories, made by docker/make-dirs.sh for user ``nobody`` under a scratch prefix."""
    if os.geteuid() != 0:
        pytest.skip("making directories owned by another user needs root (the image build runs as root)")
    prefix = Path(tempfile.mkdtemp(prefix="hpo-image-"))
    prefix.chmod(0o755)
    try:
        subprocess.run(["sh", str(ROOT / "docker" / "make-dirs.sh"), "nobody", str(prefix)], check=True)
        yield prefix
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def _as(uid: str, gid: str, command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_image_user_and_any_uid_can_write_where_hpo_runs(image_root: Path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(image_root / "work"), "PYTHONPATH": str(ROOT),
           "HPO_CACHE_DIR": str(image_root / "cache" / "tokenized"), "MPLCONFIGDIR": str(image_root / "cache" / "matplotlib")}
    for uid, gid in (("nobody", "nogroup"), ("4242", "0")):  # the image's user; docker run --user 4242 (group 0)
        for name in ("work", "artifacts", "cache"):
            touched = _as(uid, gid, ["touch", str(image_root / name / f"written-by-{uid}")], image_root, env)
            assert touched.returncode == 0, (uid, name, touched.stderr)
    space = image_root / "spaces" / "tiny.yaml"
    space.write_text(yaml.safe_dump({**TINY, "fixed": {**TINY["fixed"], "max_steps": 1, "eval_every": 0}}))
    ran = _as("nobody", "nogroup", [sys.executable, "-m", "hpo", "run", "--n-trials", "1", "--space", str(space), "--device", "cpu",
                                    "--artifact-store", str(image_root / "artifacts"), "--quiet"], image_root / "work", env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert (image_root / "work" / "hpo-studies.db").is_file()
    assert any((image_root / "cache" / "tokenized").iterdir())
