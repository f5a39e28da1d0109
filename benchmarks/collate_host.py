"""What collating a training batch costs the host, against the same code at another revision (issue 23).

A step recorded as a CUDA graph (``capture_step``) leaves the host little to do per step but
collate the next batch, copy it in and replay: at fine-tuning batch sizes on a GPU, collation is
then what can set the pace (session 23's MiniLM study: 6-10 ms a step at batch 32, every trial
host-limited). This times ``Collation`` (dynamic padding) and ``StaticCollation`` (the static
shapes a compiled or captured step takes) on SST-2 training rows tokenized for all-MiniLM-L6-v2
(``--max-length`` 64), per batch, unpinned (pinning costs the same on both sides), side by side
in one process with the same classes loaded from ``--anchor``'s ``trial_executor/batches``
(``git show``), each batch collated by both in turn. Run from the repository root::

    python -m benchmarks.collate_host [--anchor HEAD~1] [--rows 4000] [--batches 32,256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from benchmarks._runs import DEFAULT_DATA_DIR, MODEL, REPO_ROOT, load_sst2

MAX_LENGTH = 64


def _anchor_batches(revision: str, directory: Path) -> SimpleNamespace:
    """``trial_executor.batches``' batching and static shapes as they were at ``revision`` (what collating needs)."""
    package = directory / "anchor_batches"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("_batching.py", "_static.py"):
        source = subprocess.run(["git", "show", f"{revision}:trial_executor/batches/{name}"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout
        (package / name).write_text(source.replace("trial_executor.batches.", "anchor_batches."))
    batching, static = (importlib.import_module(f"anchor_batches.{name}") for name in ("_batching", "_static"))
    return SimpleNamespace(
        Collation=batching.Collation, TokenizedSplit=batching.TokenizedSplit, StaticCollation=static.StaticCollation,
        token_buckets=static.token_buckets, packed_width=static.packed_width,
    )


def _collations(batches: ModuleType | SimpleNamespace, split: Any, batch_size: int) -> dict[str, Callable[..., Any]]:
    """The two collations a trial uses for a packed BERT (dynamic, and static for a whole step), as ``batches`` builds them."""
    sizes = batches.token_buckets(split, batch_size, length_grouping=False, seed=0)
    static = batches.StaticCollation(0, buckets=(batches.packed_width(MAX_LENGTH),), packed=True, rows=batch_size, token_buckets=sizes)
    return {"dynamic": batches.Collation(0, packed=True), "static": static}


def _time_side_by_side(ours: Callable[..., Any], anchor: Callable[..., Any], split: Any, batches: Sequence[list[int]],
                       anchor_split: Any, repeats: int) -> tuple[float, float]:
    """Median ms per batch of each, the two alternating batch by batch (the machine's state shared)."""
    times: dict[str, list[float]] = {"ours": [], "anchor": []}
    for _ in range(repeats):
        for rows in batches:
            for name, collate, source in (("anchor", anchor, anchor_split), ("ours", ours, split)):
                start = time.perf_counter()
                collate(source, rows)
                times[name].append(time.perf_counter() - start)
    return statistics.median(times["ours"]) * 1000, statistics.median(times["anchor"]) * 1000


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.collate_host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--anchor", default="HEAD~1", help="the git revision to compare with (default: HEAD~1)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--batches", default="32,256")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import torch
    import transformers

    from trial_executor import batches as ours
    from trial_executor.batches._batching import epoch_batches
    from trial_executor.model import load_model

    torch.set_num_threads(1)  # collation runs on the loop's thread
    transformers.logging.set_verbosity_error()  # the classifier head a load makes anew: we need its tokenizer only
    data = load_sst2(args.data_dir, args.rows, seed=0)
    _model, tokenizer = load_model(MODEL, data.label_names, data.train_texts)
    split, _ = ours.tokenize(tokenizer, data.train_texts, data.train_labels, MAX_LENGTH)
    with tempfile.TemporaryDirectory() as directory:
        sys.path.insert(0, directory)
        anchor = _anchor_batches(args.anchor, Path(directory))
        anchor_split = anchor.TokenizedSplit(split.input_ids, split.labels, split.token_type_ids)
        print(f"{MODEL} tokens of {len(split)} SST-2 rows (max_length {MAX_LENGTH}), ms per batch on the host, "
              f"ours against {args.anchor}, median of {args.repeats} passes")
        print("| collation | batch | ours ms | anchor ms | anchor / ours |")
        print("|---|---:|---:|---:|---:|")
        for batch_size in (int(b) for b in args.batches.split(",")):
            rows = epoch_batches(split, batch_size, torch.Generator().manual_seed(0), length_grouping=False)
            for kind, collate in _collations(ours, split, batch_size).items():
                anchor_collate = _collations(anchor, anchor_split, batch_size)[kind]
                ms, anchor_ms = _time_side_by_side(collate, anchor_collate, split, rows, anchor_split, args.repeats)
                print(f"| {kind} | {batch_size} | {ms:.3f} | {anchor_ms:.3f} | {anchor_ms / ms:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
