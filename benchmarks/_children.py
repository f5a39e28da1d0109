"""One benchmark cell in a fresh, offline interpreter: ``python -m module --one SPEC --out FILE``.

Each cell starts cold (no warm caches, no state from the cell before), and a crash or a hang
costs that cell only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._runs import REPO_ROOT


def run_module_child(module: str, spec: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """``python -m module --one SPEC --out FILE`` in a fresh, offline interpreter: (result, None) or (None, error tail)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONFAULTHANDLER"] = "1"  # a crash inside torch (session 22: a segfault) shows its stack in the error tail
    with tempfile.TemporaryDirectory(prefix="benchmark-child-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", module, "--one", json.dumps(spec), "--out", str(out)]
        try:
            done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            return None, f"exit {done.returncode}:\n{tail}"
        return json.loads(out.read_text()), None


def error_line(error: str | None) -> str:
    """A child's failure (``run_module_child``'s error) as one table cell: how it ended and its last line."""
    lines = (error or "no output").splitlines()
    return " ".join(dict.fromkeys([lines[0].rstrip(":"), lines[-1][:160]])).replace("|", "/")
