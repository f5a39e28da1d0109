"""Early stopping: a run stops once its evaluation metric has not improved for ``patience`` evaluations."""

from __future__ import annotations

from dataclasses import dataclass

from trial_executor._config import MINIMIZED_METRICS, TrainConfig


@dataclass
class EarlyStopping:
    """The best score so far and evaluations since it; ``patience`` ``None``: never stops.

    Scores are signed so that higher is better (loss and rmse are minimised). The state is part
    of a checkpoint, so a resumed run stops where the uninterrupted one would.
    """

    metric: str
    patience: int | None
    best_score: float | None = None
    evals_since_best: int = 0

    @classmethod
    def for_trial(cls, config: TrainConfig, task: str) -> EarlyStopping:
        return cls(config.stop_metric(task), config.early_stopping_patience)

    def should_stop(self, metrics: dict[str, float], *, last: bool) -> bool:
        """Count this evaluation; True when the run should stop here (never at its last step)."""
        if self.patience is None:
            return False
        score = (-1.0 if self.metric in MINIMIZED_METRICS else 1.0) * metrics[self.metric]
        if self.best_score is None or score > self.best_score:
            self.best_score, self.evals_since_best = score, 0
        else:
            self.evals_since_best += 1
        return self.evals_since_best >= self.patience and not last
