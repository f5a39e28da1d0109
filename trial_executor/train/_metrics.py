"""Evaluation metrics from the model's logits and the targets, per task (names: ``TASK_METRICS``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trial_executor._config import MAJORITY_CLASS


def _share(right: torch.Tensor) -> float:
    """The share of rows right, as the exact count over the rows: a float32 mean stored 32/150 as 0.2133333384990692."""
    return int(right.sum()) / len(right) if len(right) else float("nan")


def classification_metrics(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 (F1 averaged over classes, classes absent from both count as 0)."""
    accuracy = _share(predictions == labels)
    f1s = []
    for c in range(num_labels):
        tp = ((predictions == c) & (labels == c)).sum().item()
        fp = ((predictions == c) & (labels != c)).sum().item()
        fn = ((predictions != c) & (labels == c)).sum().item()
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / num_labels}


def stuck_at_majority(predictions: torch.Tensor, labels: torch.Tensor) -> bool:
    """Whether the predictions never left the majority class: one class for every row, or exactly its share right."""
    if not len(labels):
        return False
    constant = bool((predictions == predictions[0]).all())
    return constant or int((predictions == labels).sum()) == int(torch.bincount(labels).max())


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """1-based ranks of ``x``, tied values sharing their average rank (as Spearman's rho takes them)."""
    order = torch.argsort(x, stable=True)
    _, inverse, counts = torch.unique_consecutive(x[order], return_inverse=True, return_counts=True)
    last = counts.cumsum(0).double()
    average = last - (counts.double() - 1) / 2
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = average[inverse]
    return ranks


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson's r in float64; 0.0 when either side is constant (no linear relation to measure)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    scale = (a.square().sum() * b.square().sum()).sqrt()
    return float((a * b).sum() / scale) if scale > 0 else 0.0


def regression_metrics(predictions: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """RMSE, Pearson's r and Spearman's rho of one prediction per row; ``loss`` is the MSE trained on."""
    mse = F.mse_loss(predictions.float(), targets.float()).item()
    return {
        "rmse": mse**0.5, "pearson": pearson(predictions, targets),
        "spearman": pearson(_ranks(predictions), _ranks(targets)), "loss": mse,
    }


def multi_label_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Micro-F1, macro-F1 (over labels; absent from both counts as 0) and subset accuracy at sigmoid >= 0.5."""
    predicted, actual = logits >= 0, targets >= 0.5  # sigmoid(x) >= 0.5 exactly when x >= 0
    tp = (predicted & actual).sum(dim=0).double()
    fp = (predicted & ~actual).sum(dim=0).double()
    fn = (~predicted & actual).sum(dim=0).double()
    per_label = torch.where(tp > 0, 2 * tp / (2 * tp + fp + fn), torch.zeros_like(tp))
    total = 2 * tp.sum() + fp.sum() + fn.sum()
    return {
        "micro_f1": float(2 * tp.sum() / total) if tp.sum() > 0 else 0.0,
        "macro_f1": float(per_label.mean()),
        "subset_accuracy": _share((predicted == actual).all(dim=1)),
        "loss": F.binary_cross_entropy_with_logits(logits.float(), targets.float()).item(),
    }


def evaluation_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """The task's metrics and loss; the targets' form says the task (see :func:`~trial_executor.batches._batching.label_tensor`):

    int64 class ids (classification), one float per row (regression), float multi-hot rows (multi-label).
    Classification adds the ``majority_class`` flag (:func:`stuck_at_majority`) beside its metrics.
    """
    if targets.dtype == torch.long:
        predictions = logits.argmax(dim=-1)
        metrics = classification_metrics(predictions, targets, logits.shape[-1])
        metrics["loss"] = F.cross_entropy(logits, targets).item()
        metrics[MAJORITY_CLASS] = float(stuck_at_majority(predictions, targets))
        return metrics
    if targets.dim() == 1:
        return regression_metrics(logits.squeeze(-1), targets)
    return multi_label_metrics(logits, targets)
