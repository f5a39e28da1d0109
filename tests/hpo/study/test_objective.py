"""The objective's config of a trial (hpo.study._objective.executor_config): what early stopping watches; where it writes
the config it uploads."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from optuna.artifacts import FileSystemArtifactStore

from hpo import create_storage, executor_config, make_objective, open_study, parse_search_space, run_to_budget
from hpo._process import process_key
from hpo.storage._scratch import OWNER_FILE
from trial_executor import demo_dataset

PARAMS = {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]}}
FIXED = {"model": "tiny-bert", "max_steps": 4, "early_stopping_patience": 2}


@pytest.mark.parametrize(
    ("objectives", "watched"),
    [
        # The study optimises macro-F1 beside throughput: early stopping watched accuracy, which it does not optimise.
        ([{"name": "throughput_samples_per_s"}, {"name": "macro_f1"}], "macro_f1"),
        ([{"name": "peak_memory_mb"}, {"name": "loss"}, {"name": "accuracy"}], "loss"),
        ([{"name": "macro_f1"}], "macro_f1"),
        # No evaluation metric among the objectives: the task's first metric (accuracy for classification data).
        ([{"name": "throughput_samples_per_s"}, {"name": "peak_memory_mb"}], None),
    ],
)
def test_early_stopping_watches_the_first_evaluation_metric_among_the_objectives(objectives: list[dict[str, str]], watched: str | None) -> None:
    space = parse_search_space({"objectives": objectives, "params": PARAMS, "fixed": FIXED})
    config = executor_config({"fp_precision": "fp32"}, space, seed=0, device="cpu", cache_dir=None)
    assert config.early_stopping_metric == watched
    assert config.stop_metric("classification") == (watched or "accuracy")


class _WatchedStore(FileSystemArtifactStore):
    """A real file store that notes, as each artifact is written, the trial scratch directories in the temp directory."""

    def __init__(self, path: Path, temp: Path) -> None:
        super().__init__(str(path))
        self.temp = temp
        self.seen: dict[str, str | None] = {}

    def write(self, artifact_id: str, content_body: Any) -> None:
        for path in self.temp.glob("hpo-trial-*"):
            owner = path / OWNER_FILE
            self.seen[path.name] = owner.read_text().strip() if owner.exists() else None
        super().write(artifact_id, content_body)


def test_the_config_upload_scratch_carries_this_workers_key_and_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed while it uploads a trial's config.json leaves its scratch to the next worker's sweep (which removes
    only directories with a dead worker's key): a keyless one stayed in the temp directory for good."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    data = demo_dataset(n_train=32, n_valid=8)
    space = parse_search_space({"params": PARAMS, "fixed": {"model": "tiny-bert", "max_steps": 1, "eval_every": 0, "max_length": 16}})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'c.db'}"), "c", space, data, seed=0)
    (tmp_path / "store").mkdir()
    store = _WatchedStore(tmp_path / "store", temp)
    run_to_budget(study, make_objective(space, data, base_seed=0, device="cpu", checkpoints=store), 1)
    config_dirs = [name for name in store.seen if name.startswith("hpo-trial-0-config-")]
    assert config_dirs and all(store.seen[name] == process_key(os.getpid()) for name in config_dirs), store.seen
    assert not list(temp.glob("hpo-trial-*"))
