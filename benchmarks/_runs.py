"""The measured runs of executor_vs_hf: SST-2 sampling and one training run per tool."""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from trial_executor import TextClassificationData
    from trial_executor.batches import TokenizedSplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "sst2"
MODEL = "minilm-l6"
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


def load_sst2(data_dir: Path, rows: int, seed: int, dev_rows: int = 0, valid_file: str = "dev.tsv") -> TextClassificationData:
    """``rows`` training rows sampled with ``seed``, and the dev split (all of it unless ``dev_rows``).

    Read in place through the executor's own loader; never copied. TREC's directory reads the
    same way with ``valid_file="test.tsv"`` (its coarse ``label``).
    """
    from trial_executor import DataError, TextClassificationData, load_text_classification

    try:
        full = load_text_classification(
            data_dir / "train.tsv", text_column="sentence", label_column="label", valid_path=data_dir / valid_file
        )
    except DataError as err:
        raise SystemExit(f"{err} (pass a directory holding train.tsv and {valid_file})") from None
    picked = random.Random(seed).sample(range(len(full.train_texts)), min(rows, len(full.train_texts)))
    dev = dev_rows or len(full.valid_texts)
    return TextClassificationData(
        train_texts=[full.train_texts[i] for i in picked],
        train_labels=[full.train_labels[i] for i in picked],
        valid_texts=full.valid_texts[:dev],
        valid_labels=full.valid_labels[:dev],
        label_names=full.label_names,
    )


# --------------------------------------------------------------------------- executor pieces shared by the runs


def tokenize_split(tokenizer: Any, texts: Sequence[str], labels: Sequence[int]) -> TokenizedSplit:
    """Our tokenization, without the disk cache."""
    from trial_executor.batches import tokenize

    split, _cache_hit = tokenize(tokenizer, texts, labels, MAX_LENGTH)
    return split


def our_train_batches(
    split: TokenizedSplit, pad_id: int, generator: torch.Generator, grouping: bool
) -> Iterator[list[dict[str, torch.Tensor]]]:
    """One epoch of our training batches (each a one-chunk list), as ``run_trial`` draws them."""
    from trial_executor.batches import Collation, train_batches

    # minilm-l6 runs the packed forward, so run_trial does not chunk its batches (auto), and
    # collate computes the packed forward's index tensors, as run_trial's does.
    collation = Collation(pad_id, packed=True)
    return train_batches(split, BATCH_SIZE, collation, generator, length_grouping=grouping, chunk_by_length=False)


def train_config(precision: str, grouping: bool, seed: int) -> Any:
    """The executor's config for one setting (equivalent to the Trainer arguments below)."""
    from trial_executor import TrainConfig

    return TrainConfig(
        model=MODEL, fp_precision=precision, batch_size=BATCH_SIZE, max_length=MAX_LENGTH,
        learning_rate=LEARNING_RATE, epochs=1, eval_every=0, eval_batch_size=EVAL_BATCH_SIZE,
        warmup_ratio=0.0, weight_decay=0.0, max_grad_norm=MAX_GRAD_NORM, lr_schedule="linear",
        device="cpu", seed=seed, length_grouping=grouping,  # packed_forward, chunk_by_length: defaults
    )


def seed_like_run_trial(seed: int) -> None:
    from trial_executor.train import seed_everything

    seed_everything(seed)


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
        # Over the whole training loop, warm-up included, as the other tools are timed.
        "samples_per_s": result.throughput_all_samples_per_s,
        "accuracy": result.metrics["accuracy"],
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "padding_efficiency": getattr(result, "padding_efficiency", None),
        "peak_memory_mb": result.peak_memory_mb,
        "call_seconds": time.perf_counter() - tick,
    }


def run_hand(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """The minimal loop ``run_trial`` should cost no more than: same model, forward, batches, optimizer, autocast.

    Mirrors ``run_trial``'s setup order (seed, load, tokenize, generator) so that it sees the very
    same initial weights and batch order; everything ``run_trial`` adds (token counting, loss
    tracking, accumulation windows, the precision policy, reporting) is left out.
    """
    import torch

    from trial_executor.model import PackedBertClassifier, load_model

    precision, grouping = SETTINGS[spec["setting"]]
    seed = spec["seed"]
    autocast = autocast_factory(precision)
    seed_like_run_trial(seed)
    model, tokenizer = load_model(MODEL, data.label_names, data.train_texts)
    model.train()
    forward = PackedBertClassifier(model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    train_split = tokenize_split(tokenizer, data.train_texts, data.train_labels)
    valid_split = tokenize_split(tokenizer, data.valid_texts, data.valid_labels)
    total_steps = math.ceil(len(train_split) / BATCH_SIZE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1.0 - step / total_steps))
    generator = torch.Generator().manual_seed(seed)

    samples = steps = 0
    tick = time.perf_counter()
    for chunks in our_train_batches(train_split, pad_id, generator, grouping):
        rows = sum(chunk.rows for chunk in chunks)
        for chunk in chunks:
            with autocast():
                loss = forward(**chunk.inputs).loss
            (loss * (chunk.rows / rows)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        samples += rows
        steps += 1
    train_seconds = time.perf_counter() - tick
    model.eval()
    return {
        "samples_per_s": samples / train_seconds,
        "accuracy": _hand_accuracy(forward, valid_split, pad_id, autocast),
        "train_seconds": train_seconds,
        "steps": steps,
        # Outside the timed loop: the same batches, replayed with the same seed.
        "padding_efficiency": _padding_efficiency(train_split, pad_id, seed, grouping),
    }


def _padding_efficiency(split: TokenizedSplit, pad_id: int, seed: int, grouping: bool) -> float:
    """Real over padded tokens in one epoch of our training batches drawn with ``seed``."""
    import torch

    real_tokens = padded_tokens = 0
    for chunks in our_train_batches(split, pad_id, torch.Generator().manual_seed(seed), grouping):
        for chunk in chunks:
            real_tokens += chunk.real_tokens
            padded_tokens += chunk.padded_tokens
    return real_tokens / padded_tokens


def _hand_accuracy(
    forward: Any, split: TokenizedSplit, pad_id: int, autocast: Callable[[], contextlib.AbstractContextManager[Any]],
) -> float:
    """Accuracy of the hand-written loop's ``forward`` (its model in eval mode) on ``split``, under ``autocast``."""
    import torch

    from trial_executor.batches import Collation, eval_batches

    correct = 0
    with torch.inference_mode():
        for _indices, batch in eval_batches(split, EVAL_BATCH_SIZE, Collation(pad_id, packed=True)):
            inputs = batch.inputs
            with autocast():
                logits = forward(**{k: v for k, v in inputs.items() if k != "labels"}).logits
            correct += int((logits.argmax(dim=-1) == inputs["labels"]).sum())
    return correct / len(split)


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
