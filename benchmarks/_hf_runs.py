"""HF Trainer's side of executor_vs_hf: ``Trainer.train()`` set up like our ``train_config``, measured the same way."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks._runs import BATCH_SIZE, EVAL_BATCH_SIZE, LEARNING_RATE, MAX_GRAD_NORM, MAX_LENGTH, MODEL, SETTINGS

if TYPE_CHECKING:
    from trial_executor import TextClassificationData


def run_hf(spec: dict[str, Any], data: TextClassificationData) -> dict[str, Any]:
    """``Trainer.train()`` with arguments equivalent to ``train_config``; accuracy from ``predict``.

    Throughput is the Trainer's own ``train_samples_per_second``: reading transformers 5's
    ``_inner_training_loop``, its clock starts after the dataloader, optimizer, scheduler and
    ``accelerator.prepare`` are set up and stops right after the last optimizer step, so it
    covers the training loop only (batch collation included), the same span as our
    ``throughput_samples_per_s``. A callback timing ``on_train_begin`` .. ``on_train_end`` and the
    wall time of the whole ``train()`` call are recorded next to it as a cross-check.
    """
    import numpy as np
    from transformers import DataCollatorWithPadding, Trainer, set_seed

    from trial_executor.model import load_model

    precision, grouping = SETTINGS[spec["setting"]]
    # Seeded exactly like run_trial before loading, so the new classifier head starts identical;
    # the model comes from our loader (plain from_pretrained, SDPA attention) so both tools train
    # the very same module and the comparison is about the training loop alone.
    set_seed(spec["seed"])
    model, tokenizer = load_model(MODEL, data.label_names, data.train_texts)
    train_set, valid_set = _hf_sets(tokenizer, data, spec.get("hf_dataset", "datasets"))
    collate = _PaddingTally(DataCollatorWithPadding(tokenizer))
    clock = _train_clock()
    with tempfile.TemporaryDirectory(prefix="hf-bench-") as output_dir:
        trainer = Trainer(
            model=model, args=_hf_arguments(precision, grouping, spec["seed"], output_dir), train_dataset=train_set,
            data_collator=collate, processing_class=tokenizer, callbacks=[clock],
        )
        tick = time.perf_counter()
        output = trainer.train()
        train_call_seconds = time.perf_counter() - tick
        collate.counting = False
        prediction = trainer.predict(valid_set)
    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    samples = len(data.train_texts)
    return {
        "samples_per_s": output.metrics["train_samples_per_second"],
        "accuracy": float((np.argmax(logits, axis=-1) == np.asarray(data.valid_labels)).mean()),
        "train_seconds": output.metrics["train_runtime"],
        "steps": output.global_step,
        "padding_efficiency": collate.real / collate.padded if collate.padded else None,
        "callback_samples_per_s": samples / (clock.end - clock.begin) if clock.end > clock.begin else None,
        "train_call_seconds": train_call_seconds,
        "train_call_samples_per_s": samples / train_call_seconds,
        "mixed_precision": trainer.accelerator.mixed_precision,  # "bf16" with native_amp: autocast on the CPU
        "native_amp": trainer.accelerator.native_amp,
        "sampler": type(trainer._get_train_sampler()).__name__,
    }


def _hf_sets(tokenizer: Any, data: TextClassificationData, kind: str) -> tuple[Any, Any]:
    """The Trainer's training and validation sets: ``datasets.Dataset`` (``kind`` "datasets") or lists of dicts."""

    def encode(texts: list[str], labels: list[int]) -> dict[str, list[Any]]:
        # Same call as our tokenization; token_type_ids are dropped because our batches have none
        # (the model then uses its all-zero buffer, the same values).
        encoded = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"], "labels": labels}

    columns = (encode(data.train_texts, data.train_labels), encode(data.valid_texts, data.valid_labels))
    if kind == "datasets":
        import datasets

        return datasets.Dataset.from_dict(columns[0]), datasets.Dataset.from_dict(columns[1])
    train, valid = ([dict(zip(c, row, strict=True)) for row in zip(*c.values(), strict=True)] for c in columns)
    return train, valid


class _PaddingTally:
    """A collator that pads with ``padding`` and, while ``counting``, tallies real and padded tokens."""

    def __init__(self, padding: Callable[[list[dict[str, Any]]], Any]) -> None:
        self.padding = padding
        self.counting = True
        self.real = self.padded = 0

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        batch = self.padding(features)
        if self.counting:
            mask = batch["attention_mask"]
            self.real += int(mask.sum())
            self.padded += mask.numel()
        return batch


def _train_clock() -> Any:
    """A ``TrainerCallback`` whose ``begin`` and ``end`` are the perf-counter times of ``on_train_begin`` and ``on_train_end``."""
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        begin = end = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.end = time.perf_counter()

    return Clock()


def _hf_arguments(precision: str, grouping: bool, seed: int, output_dir: str) -> Any:
    """``TrainingArguments`` equivalent to ``train_config(precision, grouping, seed)``, on the CPU, logging nothing."""
    import dataclasses

    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "train_sampling_strategy" in fields:  # transformers 5
        sampling: dict[str, Any] = {"train_sampling_strategy": "group_by_length" if grouping else "random"}
    else:  # transformers 4.x
        sampling = {"group_by_length": grouping}
    return TrainingArguments(
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
