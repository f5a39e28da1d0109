"""Classification metrics from predicted and true label ids."""

from __future__ import annotations

import torch


def classification_metrics(predictions: torch.Tensor, labels: torch.Tensor, num_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 (F1 averaged over classes, classes absent from both count as 0)."""
    accuracy = (predictions == labels).float().mean().item()
    f1s = []
    for c in range(num_labels):
        tp = ((predictions == c) & (labels == c)).sum().item()
        fp = ((predictions == c) & (labels != c)).sum().item()
        fn = ((predictions != c) & (labels == c)).sum().item()
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"accuracy": accuracy, "macro_f1": sum(f1s) / num_labels}
