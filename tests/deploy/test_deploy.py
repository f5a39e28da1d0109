"""The cluster recipes in deploy/ (issue 26): parsed, and checked for what a study needs to run from them."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT

from hpo.cli._run import build_parser

DEPLOY = ROOT / "deploy"


def _documents(path: Path) -> dict[str, dict[str, Any]]:
    """``kind/name`` -> manifest, for every document of a YAML file."""
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(path.read_text()) if d}


def _pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    if manifest["kind"] == "RayCluster":
        groups = [manifest["spec"]["headGroupSpec"], *manifest["spec"]["workerGroupSpecs"]]
        return [group["template"]["spec"] for group in groups]
    return [manifest["spec"]["template"]["spec"]]


def _run_args(command: list[str]) -> list[str]:
    assert command[:3] == ["python", "-m", "hpo.run"], command
    return command[3:]


def test_the_kuberay_recipe_has_postgres_a_gpu_ray_cluster_a_shared_store_and_the_dashboard() -> None:
    manifests = _documents(DEPLOY / "kuberay" / "raycluster.yaml")
    secret = manifests["Secret/hpo-postgres"]["stringData"]
    # HPO_STORAGE is the database the StatefulSet creates, through its Service.
    storage = f"postgresql://{secret['POSTGRES_USER']}:{secret['POSTGRES_PASSWORD']}@hpo-postgres:5432/{secret['POSTGRES_DB']}"
    assert secret["HPO_STORAGE"] == storage
    assert manifests["Service/hpo-postgres"]["spec"]["ports"][0]["port"] == 5432
    postgres = manifests["StatefulSet/hpo-postgres"]["spec"]["template"]["spec"]["containers"][0]
    assert postgres["envFrom"] == [{"secretRef": {"name": "hpo-postgres"}}]

    cluster = manifests["RayCluster/hpo"]
    assert cluster["apiVersion"] == "ray.io/v1"
    # The image's Ray is the version of the extra's floor: the cluster and the driver must agree.
    extra = re.search(r'^ray = \["ray>=([\d.]+)"\]$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra and extra.group(1) == cluster["spec"]["rayVersion"].rsplit(".", 1)[0]
    workers = cluster["spec"]["workerGroupSpecs"]
    assert all(g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] >= 1 for g in workers)
    assert manifests["PersistentVolumeClaim/hpo-artifacts"]["spec"]["accessModes"] == ["ReadWriteMany"]
    for spec in _pod_specs(cluster) + _pod_specs(manifests["Deployment/hpo-dashboard"]):
        container = spec["containers"][0]
        assert {"secretRef": {"name": "hpo-postgres"}} in container["envFrom"]  # HPO_STORAGE on every pod
        assert container["volumeMounts"] == [{"name": "artifacts", "mountPath": "/work/hpo-artifacts"}]
        assert spec["volumes"] == [{"name": "artifacts", "persistentVolumeClaim": {"claimName": "hpo-artifacts"}}]
    dashboard = manifests["Deployment/hpo-dashboard"]["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert "python -m hpo dashboard --storage \"$HPO_STORAGE\" --artifact-store /work/hpo-artifacts" in dashboard
    assert manifests["Service/hpo-dashboard"]["spec"]["ports"][0]["port"] == 8080


def _documented_run_commands(text: str) -> list[list[str]]:
    """Every ``python -m hpo.run ...`` command in ``text`` (comments and continuation lines joined)."""
    joined = re.sub(r"\\\n[#\s]*", " ", text)
    return [shlex.split(m.group(0))[3:] for m in re.finditer(r"python -m hpo\.run [^\n]*", joined)]


def test_the_commands_the_recipes_document_are_valid_run_flags() -> None:
    texts = [(DEPLOY / path).read_text() for path in ("kuberay/raycluster.yaml", "slurm/hpo-ray.sbatch")]
    commands = [c for text in texts for c in _documented_run_commands(text)]
    assert len(commands) >= 2
    for args in commands:
        parsed = build_parser().parse_args([a.replace('"$@"', "") for a in args if a != "$@"])
        assert parsed.ray is not None


def test_the_slurm_script_starts_a_ray_cluster_across_nodes_then_the_study() -> None:
    script = DEPLOY / "slurm" / "hpo-ray.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert re.search(r"^#SBATCH --nodes=\d+$", text, re.M) and re.search(r"^#SBATCH --gpus-per-node=\d+$", text, re.M)
    head, worker = text.index("ray start --head"), text.index('ray start --address="$address"')
    study = text.index('python -m hpo.run --ray "$address" --storage "$HPO_STORAGE"')
    assert head < worker < study
    assert '"${HPO_STORAGE:?' in text  # no study on a SQLite file across nodes


def test_the_indexed_job_runs_plain_workers_on_the_shared_study() -> None:
    (job,) = _documents(DEPLOY / "kubernetes" / "hpo-workers-job.yaml").values()
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] >= 2
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    args = build_parser().parse_args(_run_args(container["command"]))
    assert args.ray is None and args.storage is None  # plain workers; the storage from HPO_STORAGE
    assert {"secretRef": {"name": "hpo-postgres"}} in container["envFrom"]
    assert args.artifact_store == container["volumeMounts"][0]["mountPath"]
    # The Secret and the volume it uses are those of the KubeRay recipe.
    kuberay = _documents(DEPLOY / "kuberay" / "raycluster.yaml")
    assert "Secret/hpo-postgres" in kuberay
    assert f"PersistentVolumeClaim/{pod['volumes'][0]['persistentVolumeClaim']['claimName']}" in kuberay
