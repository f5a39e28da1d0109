"""benchmarks/attr_writes.py at its smallest: a trial's attrs written per key and together, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import PG_ADMIN_URL, ROOT


@pytest.mark.postgres
def test_both_ways_are_timed_on_both_storages() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.attr_writes", "--attrs", "3", "--repeats", "1", "--pg-admin", PG_ADMIN_URL],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in proc.stdout.splitlines() if line.startswith("| ") and "ms" not in line}
    assert set(rows) == {"SQLite", "PostgreSQL"}, proc.stdout
    for anchor, ours, ratio in rows.values():
        assert float(anchor) > 0 and float(ours) > 0 and ratio.strip().endswith("x")
