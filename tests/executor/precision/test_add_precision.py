"""Adding a precision is one row in ``trial_executor/_precisions.py`` and, at most, one policy class
(see ARCHITECTURE.md): a toy one, added that way to a copy of the package, trains a tiny model.

The toy is fp16 with a static loss scale (the scale fixed, not adapted as GradScaler's is): a
policy class that scales the loss before backward and unscales the gradients before clipping.
The test edits a copy of the source, not this checkout, and runs it in a fresh process, so that
everything derived from the registry at import (the config's choices, the support check) is
derived from the edited row, as it would be in a real change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

ROW = 'Precision("fp16-static", autocast_dtype="float16", policy="toy_policy:StaticLossScalePolicy"),'

POLICY = '''
from collections.abc import Callable

import torch

from trial_executor.precision import PrecisionPolicy

SCALE = 1024.0


class StaticLossScalePolicy(PrecisionPolicy):
    backwards = 0

    def backward(self, loss: torch.Tensor) -> None:
        type(self).backwards += 1
        (loss * SCALE).backward()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None]) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(SCALE)
        clip()
        optimizer.step()
'''

RUN = '''
import json
import toy_policy
from trial_executor import PRECISIONS, TrainConfig, demo_dataset, precision_support, run_trial
import torch

data = demo_dataset(n_train=800, n_valid=96, seed=2)
config = TrainConfig(model="tiny-bert", fp_precision="fp16-static", epochs=3, batch_size=32, learning_rate=2e-3, eval_every=25, device="cpu")
result = run_trial(config, data)
print(json.dumps({
    "precisions": PRECISIONS, "supported": precision_support(torch.device("cpu"))["fp16-static"],
    "effective": result.precision_effective, "scaler": result.used_grad_scaler, "steps": result.steps,
    "backwards": toy_policy.StaticLossScalePolicy.backwards, "losses": [m["loss"] for _, m in result.history],
    "accuracy": result.metrics["accuracy"],
}))
'''


def test_a_toy_precision_is_one_row_and_one_policy_class(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "trial_executor", tmp_path / "trial_executor", ignore=shutil.ignore_patterns("__pycache__"))
    registry = tmp_path / "trial_executor" / "_precisions.py"
    anchor = "REGISTRY: tuple[Precision, ...] = (\n"
    source = registry.read_text()
    assert source.count(anchor) == 1
    registry.write_text(source.replace(anchor, anchor + "    " + ROW + "\n"))  # the one row
    (tmp_path / "toy_policy.py").write_text(POLICY)  # the one class
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "fp16-static" in found["precisions"] and found["supported"] is None
    assert found["effective"] == "fp16-static" and found["scaler"] is False
    assert found["backwards"] == found["steps"] > 0  # every backward went through the toy policy
    assert found["losses"][-1] < found["losses"][0] - 0.05, found["losses"]  # it trains
    assert found["accuracy"] > 0.6
