"""The measured runs of ``benchmarks.gpu``: one tool, one precision, one batch size, in this process.

Every tool is timed by the same rule, the executor's own (:class:`SteadyClock` wraps
:class:`~trial_executor.device._throughput.TrainClock`): samples per second of the training loop in
steady state, after ``WARMUP_STEPS`` steps and ``WARMUP_SECONDS``, with the first steps of each
new batch shape (compilation, CUDA-graph capture, kernel selection) timed apart for every tool,
not only ours. Ours reports the same figure itself (``throughput_samples_per_s``).
"""

from __future__ import annotations

import contextlib
import csv
import random
from pathlib import Path
from typing import Any

LEARNING_RATE = 5e-5
MAX_LENGTH = 128
JOINED = 8  # SST-2 sentences per 128-token row


def read_rows(data_dir: Path, rows: int, kind: str, seed: int = 0) -> tuple[list[str], list[int]]:
    """``rows`` SST-2 training rows as they are (``sst2``), or ``JOINED`` sentences per row (``long``)."""
    with open(data_dir / "train.tsv", encoding="utf-8", newline="") as handle:
        table = [(r["sentence"], int(r["label"])) for r in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]
    rng = random.Random(seed)
    if kind == "sst2":
        picked = rng.sample(table, min(rows, len(table)))
        return [t for t, _ in picked], [y for _, y in picked]
    texts, labels = [], []
    for _ in range(rows):
        parts = rng.sample(table, JOINED)
        texts.append(" ".join(t for t, _ in parts))
        labels.append(parts[0][1])
    return texts, labels


class SteadyClock:
    """The executor's own steady-state rule (:class:`~trial_executor.device._throughput.TrainClock`) for any loop.

    The same for every tool: steps of each new batch shape timed apart (synced) as start-up while
    their first ``SETUP_OCCURRENCES`` last (CUDA, or a compiled loop), and steady state from the first
    sync after ``WARMUP_STEPS`` steps and ``WARMUP_SECONDS``; syncs as often as the executor reads
    its loss on the device (``host_read_every``: 8 steps on CUDA, every step on the CPU). Call :meth:`begin` before a step and :meth:`end` after it.
    """

    def __init__(self, device: str, *, compiled: bool = False) -> None:
        import torch

        from trial_executor.device import TrainClock, defaults_for

        self.device = torch.device(device)
        self.sync_every = defaults_for(self.device).host_read_every
        self.clock = TrainClock(self.device, track_setup=device == "cuda" or compiled)
        self.clock.start()
        self._setup, self._began = False, 0.0

    def begin(self, shape: Any) -> None:
        self._setup = self.clock.is_setup(shape)
        if self._setup:
            self._began = self.clock.setup_begin()

    def end(self, samples: int) -> None:
        if self._setup:
            self.clock.setup_end(self._began)
        self.clock.stepped(samples, self._setup)
        if self.clock.steps % self.sync_every == 0:
            self._sync()
            self.clock.synced()

    def _sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def samples_per_s(self) -> float | None:
        self._sync()
        self.clock.stop()
        return self.clock.steady_samples_per_s()


def _precision_state(precision: str) -> None:
    from trial_executor.precision import set_tf32

    set_tf32(precision == "tf32")


# Our knobs on/off (issue 23): "ours" runs the device's defaults, where all of them are off.
OURS_VARIANTS: dict[str, dict[str, bool]] = {
    "ours": {}, "ours-compile-step": {"compile_step": True}, "ours-capture-step": {"capture_step": True},
    "ours-torch-compile": {"torch_compile": True},
    "ours-varlen": {"varlen_attention": True}, "ours-master-weights": {"master_weights": True},
}


def run_ours(spec: dict[str, Any], texts: list[str], labels: list[int]) -> dict[str, Any]:
    from trial_executor import TextClassificationData, TrainConfig, run_trial

    data = TextClassificationData(texts, labels, texts[:64], labels[:64], ["0", "1"])
    config = TrainConfig(
        model=spec["model_dir"], fp_precision=spec["precision"], batch_size=spec["batch"], max_length=MAX_LENGTH,
        learning_rate=LEARNING_RATE, epochs=1, eval_every=0, warmup_ratio=0.0, weight_decay=0.0, max_grad_norm=1.0,
        device=spec["device"], seed=0, **OURS_VARIANTS[spec["tool"]],
    )
    result = run_trial(config, data)
    return {
        "samples_per_s": result.throughput_samples_per_s if result.steady_state else None,
        "all_samples_per_s": result.throughput_all_samples_per_s, "compile_seconds": result.compile_seconds,
        "device_busy_fraction": result.device_busy_fraction, "host_limited": result.host_limited,
        "accuracy": result.metrics["accuracy"], "packed_forward": result.packed_forward, "buckets": result.buckets,
        "compiled_step": result.compiled_step, "compile_refused": result.compile_refused,
        "varlen_attention": result.varlen_attention,
    }


def run_plain(spec: dict[str, Any], texts: list[str], labels: list[int]) -> dict[str, Any]:
    """The plain PyTorch loop: HF model, dynamic padding, fused AdamW, autocast (eager or compiled)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device, precision, batch = spec["device"], spec["precision"], spec["batch"]
    _precision_state(precision)
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    encoded = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(spec["model_dir"], num_labels=2, attn_implementation="sdpa")
    model.to(device).train()
    forward = torch.compile(model) if spec["tool"] == "plain-compiled" else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=True)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    order = torch.randperm(len(encoded), generator=torch.Generator().manual_seed(0)).tolist()
    clock = SteadyClock(device, compiled=spec["tool"] == "plain-compiled")
    for start in range(0, len(order), batch):
        rows = [encoded[i] for i in order[start : start + batch]]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        y = torch.tensor([labels[i] for i in order[start : start + batch]])
        ids, mask, y = (t.pin_memory().to(device, non_blocking=True) if device == "cuda" else t for t in (ids, mask, y))
        clock.begin(tuple(ids.shape))
        with torch.autocast(device, dtype=dtype) if dtype else contextlib.nullcontext():
            loss = forward(input_ids=ids, attention_mask=mask, labels=y).loss
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        clock.end(len(rows))
    return {"samples_per_s": clock.samples_per_s()}


def run_hf(spec: dict[str, Any], texts: list[str], labels: list[int]) -> dict[str, Any]:
    """``Trainer.train()`` with equivalent arguments; steady-state samples/s from a step callback."""
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    device, precision, batch = spec["device"], spec["precision"], spec["batch"]
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    encoded = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
    train_set = [
        {"input_ids": i, "attention_mask": m, "labels": y}
        for i, m, y in zip(encoded["input_ids"], encoded["attention_mask"], labels, strict=True)
    ]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(spec["model_dir"], num_labels=2, attn_implementation="sdpa")
    clock = SteadyClock(device)
    collator = _ShapeRecorder(DataCollatorWithPadding(tokenizer))

    class Steps(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # Batches are collated in order (one ahead, by accelerate): step n trains the n-th.
            clock.begin(collator.shapes[state.global_step])

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            clock.end(min(batch, len(train_set) - batch * (state.global_step - 1)))

    args = TrainingArguments(
        output_dir=str(Path(spec["scratch"]) / "hf"), per_device_train_batch_size=batch, num_train_epochs=1,
        learning_rate=LEARNING_RATE, warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="linear",
        bf16=precision == "bf16", fp16=precision == "fp16", tf32=precision == "tf32" if device == "cuda" else None,
        eval_strategy="no", save_strategy="no", logging_strategy="no", report_to=[], seed=0, dataloader_num_workers=0,
        disable_tqdm=True, use_cpu=device == "cpu", optim="adamw_torch_fused",
    )
    if precision == "fp32":
        _precision_state("fp32")
    Trainer(
        model=model, args=args, train_dataset=train_set, data_collator=collator, callbacks=[Steps()],
    ).train()
    return {"samples_per_s": clock.samples_per_s()}


class _ShapeRecorder:
    """A data collator that records each batch's shape, so HF Trainer's steps get the same setup rule."""

    def __init__(self, collator: Any) -> None:
        self.collator, self.shapes = collator, []

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        batch = self.collator(features)
        self.shapes.append(tuple(batch["input_ids"].shape))
        return batch


RUNNERS = {**{tool: run_ours for tool in OURS_VARIANTS}, "hf": run_hf, "plain": run_plain, "plain-compiled": run_plain}
