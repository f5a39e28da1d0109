"""docker-compose.yml, Dockerfile, .dockerignore and .env.example, checked statically (no Docker engine here)."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml
from conftest import ROOT
from packaging.specifiers import SpecifierSet

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES: dict[str, Any] = COMPOSE["services"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Compose interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}...; $$ is a literal dollar.
_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?[^}]*\}")


def _literal_passwords(text: str) -> list[str]:
    """Passwords written into the compose text instead of coming from ``${...}``."""
    found = []
    for value in re.findall(r"^\s*-?\s*[\"']?\w*PASSWORD\w*[\"']?\s*[:=]\s*(.*?)\s*$", text, flags=re.MULTILINE):
        if not re.fullmatch(r"[\"']?\$\{\w+:?\?[^}]*\}[\"']?", value):  # required, and no default to fall back on
            found.append(value)
    for userinfo in re.findall(r"://([^@/\s\"']+)@", _VAR.sub("\0", text)):  # each ${...} is one \0 here
        if userinfo.partition(":")[2] not in ("", "\0"):
            found.append(userinfo.replace("\0", "${...}"))
    return found


def _required_vars(text: str) -> set[str]:
    """``${VAR}`` / ``${VAR:?...}`` names: the ones with no default, which ``.env`` must set."""
    return {name for name, op in _VAR.findall(text) if op in ("", "?", ":?")}


def _dotenv_names(text: str) -> set[str]:
    return {line.split("=", 1)[0].strip() for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#")}


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def test_postgres_has_a_healthcheck_and_a_named_volume() -> None:
    assert {"postgres", "dashboard", "worker"} <= SERVICES.keys()
    postgres = SERVICES["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    sources = {volume.split(":")[0] for volume in postgres["volumes"] if volume.split(":")[1] == "/var/lib/postgresql/data"}
    assert len(sources) == 1
    assert sources <= set(COMPOSE["volumes"]), "the data directory must be a named volume declared at top level"


@pytest.mark.parametrize("name", ["dashboard", "worker"])
def test_service_waits_for_a_healthy_database(name: str) -> None:
    assert SERVICES[name]["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_only_the_dashboard_publishes_a_port_and_only_on_localhost() -> None:
    assert SERVICES["dashboard"]["ports"] == ["127.0.0.1:8080:8080"]
    assert [name for name, service in SERVICES.items() if "ports" in service] == ["dashboard"]
    assert "python -m hpo dashboard" in " ".join(_command(SERVICES["dashboard"]))
    worker_storage = SERVICES["worker"]["environment"]["HPO_STORAGE"]
    assert SERVICES["dashboard"]["environment"]["HPO_STORAGE"] == worker_storage, "the dashboard must show the workers' database"


def test_worker_runs_the_study_and_can_be_scaled() -> None:
    worker = SERVICES["worker"]
    command = _command(worker)
    assert command[:2] == ["sh", "-c"] and command[2].startswith("exec python -m hpo.run ")
    storage = worker["environment"]["HPO_STORAGE"]
    assert storage.startswith("postgresql://") and "@postgres:5432/" in storage
    assert "container_name" not in worker and "ports" not in worker
    assert "build" in worker


def test_gpu_workers_are_opt_in_and_reserve_nvidia_devices() -> None:
    gpu = [name for name, service in SERVICES.items() if "deploy" in service]
    assert gpu, "expected a GPU worker variant"
    for name in gpu:
        service = SERVICES[name]
        assert service.get("profiles"), f"{name} must sit behind a profile, so a plain `up` stays on the CPU"
        assert _command(service)[2].startswith("exec python -m hpo.run ")
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert [device["driver"] for device in devices] == ["nvidia"] and "gpu" in devices[0]["capabilities"]


def test_no_password_is_written_in_the_compose_file() -> None:
    assert _literal_passwords(COMPOSE_TEXT) == []
    assert ":${POSTGRES_PASSWORD:?" in COMPOSE_TEXT and "@postgres:5432/" in COMPOSE_TEXT  # the URL check had a URL to check
    assert "POSTGRES_PASSWORD" in SERVICES["postgres"]["environment"]
    # The check itself catches both ways of hard-coding one.
    assert _literal_passwords("POSTGRES_PASSWORD: hunter2\n") == ["hunter2"]
    assert _literal_passwords("POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:-hunter2}\n")
    assert _literal_passwords("url: postgresql://hpo:hunter2@postgres:5432/hpo\n") == ["hpo:hunter2"]
    assert _literal_passwords("- DB_PASSWORD=hunter2\n") == ["hunter2"]
    assert _literal_passwords("url: postgresql://${U:-hpo}:${POSTGRES_PASSWORD:?x}@postgres/hpo\n") == []


def test_env_example_sets_every_variable_without_a_default() -> None:
    required = _required_vars(COMPOSE_TEXT)
    assert "POSTGRES_PASSWORD" in required
    missing = required - _dotenv_names((ROOT / ".env.example").read_text())
    assert not missing, f".env.example lacks {sorted(missing)}"
    assert not re.search(r"(?<!\$)\$[A-Za-z_]", COMPOSE_TEXT), "use ${VAR} (checked here) or $$VAR (the container's variable)"
    assert _required_vars("a: ${A}\nb: ${B:-x}\nc: ${C:?set C}\nd: $${D}\n") == {"A", "C"}


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in (raw.strip() for raw in text.splitlines())
        if line and not line.startswith("#")
    ]


def test_dockerfile_installs_pinned_cpu_torch_then_the_project() -> None:
    steps = _dockerfile()
    base = next(args for op, args in steps if op == "FROM")
    python = re.fullmatch(r"python:(\d+\.\d+)-slim", base)
    assert python and python.group(1) in SpecifierSet(PYPROJECT["project"]["requires-python"])

    runs = [args for op, args in steps if op == "RUN"]
    torch_run = next(i for i, run in enumerate(runs) if "pip install torch==" in run)
    readme_pins = set(re.findall(r"pip install[^\n]*?torch==([\w.+]+)", (ROOT / "README.md").read_text()))
    assert len(readme_pins) == 1
    assert re.findall(r"torch==([\w.+]+)", runs[torch_run]) == list(readme_pins)
    assert "--index-url" in runs[torch_run]
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in (ROOT / "Dockerfile").read_text()

    project_run = next(i for i, run in enumerate(runs) if re.search(r"pip install [\"']?\.(\[|[\"']?(\s|$))", run))
    assert torch_run < project_run, "torch must be installed first, or pip pulls the CUDA build"
    # Extras named in the RUN line, or through a build argument (ARG EXTRAS=a,b): each must exist.
    text = (ROOT / "Dockerfile").read_text()
    for spec in re.findall(r"pip install [\"']?\.\[([^\]]*)\]", runs[project_run]):
        arg = re.fullmatch(r"\$\{(\w+)\}", spec)
        if arg:
            spec = re.search(rf"^ARG {arg.group(1)}=(\S+)$", text, re.M).group(1)
        extras = {extra.strip() for extra in spec.split(",")}
        assert extras <= set(PYPROJECT["project"]["optional-dependencies"]), extras
    for extra in re.findall(r"--build-arg EXTRAS=(\S+)", text):
        assert set(extra.split(",")) <= set(PYPROJECT["project"]["optional-dependencies"]), extra


def test_dockerfile_copies_what_pip_install_needs_and_dockerignore_keeps_secrets_out() -> None:
    copied: set[str] = set()
    for op, args in _dockerfile():
        if op == "COPY":
            sources = [part for part in shlex.split(args) if not part.startswith("--")][:-1]
            copied |= {source.rstrip("/") for source in sources}
    packages = {pattern.rstrip("*.") for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"], *packages}
    assert "." in copied or needed <= copied, f"not copied: {sorted(needed - copied)}"

    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".venv", ".git", ".env", "*.db"} <= ignored
    assert not needed & ignored
