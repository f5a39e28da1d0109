"""benchmarks/collate_host.py on small data: ours and the anchor revision's collation timed side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, write_tsv

from trial_executor import make_synthetic_reviews


def test_collation_is_timed_against_the_anchor_revision_for_both_collations(tmp_path: Path) -> None:
    texts, labels = make_synthetic_reviews(120, seed=1)
    rows = list(zip(texts, labels, strict=True))
    write_tsv(tmp_path / "train.tsv", rows[:100])
    write_tsv(tmp_path / "dev.tsv", rows[100:])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.collate_host", "--data-dir", str(tmp_path), "--rows", "100", "--batches", "8,32",
         "--repeats", "1", "--anchor", "HEAD"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    assert [(r[0], r[1]) for r in table] == [("dynamic", "8"), ("static", "8"), ("dynamic", "32"), ("static", "32")]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 and r[4].endswith("x") for r in table)
