"""The hardware record on a trial says what that trial ran with, not what the process holds afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hpo import create_storage, make_objective, open_study, parse_search_space
from trial_executor import demo_dataset, tf32_enabled
from trial_executor.precision import runs_in_tf32, set_tf32

DATA = demo_dataset(n_train=64, n_valid=16, seed=2)
FIXED = {"model": "tiny-bert", "batch_size": 16, "eval_batch_size": 8, "max_steps": 2, "eval_every": 0, "max_length": 32}


def test_a_trials_tf32_state_is_its_own_not_the_callers(tmp_path: Path) -> None:
    # The caller's TF32 flags are on (a notebook, an earlier trial's leftovers): the fp32 trial
    # ran without TF32, and its record must say so although the caller's flags are back on when it ends.
    space = parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32"]}}, "fixed": FIXED})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'h.db'}"), "h", space, DATA, seed=0)
    set_tf32(True)
    try:
        study.optimize(make_objective(space, DATA, base_seed=0, device="cpu"), n_trials=1)
        assert tf32_enabled()  # the caller's setting came back
    finally:
        set_tf32(False)
    (trial,) = study.trials
    assert trial.user_attrs["hardware"]["tf32_enabled"] is False


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_no_precision_runs_in_tf32_on_the_cpu(precision: str) -> None:
    # TF32 is a mode of NVIDIA tensor cores: a CPU trial never ran in it, whatever the flags said.
    assert runs_in_tf32(precision, torch.device("cpu")) is False
