"""Progress while a study runs: a study bar and a per-trial bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm.auto import tqdm


class StudyProgress:
    """Shows finished / budget with the best value so far, and the running trial's steps and loss.

    With ``bars=False`` (stdout is not a terminal, or ``--quiet``) it prints only one plain line
    per finished trial, which suits logs and CI.
    """

    def __init__(self, budget: int, finished: int, *, bars: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.bars = bars
        self.study_bar = (
            tqdm(total=budget, initial=min(finished, budget), desc="study", unit="trial", file=self.stream, position=0, dynamic_ncols=True)
            if bars else None
        )
        self.trial_bar: tqdm | None = None

    def trial_started(self, number: int, total_steps: int | None = None) -> None:
        if self.bars:
            self._close_trial_bar()
            self.trial_bar = tqdm(
                total=total_steps, desc=f"trial {number}", unit="step", file=self.stream, position=1, leave=False, dynamic_ncols=True
            )

    def evaluated(self, step: int, metrics: dict[str, float], samples_per_s: float | None = None) -> None:
        if self.trial_bar is None:
            return
        self.trial_bar.update(step - self.trial_bar.n)
        shown = {"loss": f"{metrics.get('train_loss', float('nan')):.3f}"}
        if samples_per_s:
            shown["samples/s"] = f"{samples_per_s:.0f}"
        self.trial_bar.set_postfix(shown, refresh=True)

    def trial_finished(self, line: str, finished: int, best: str | None) -> None:
        self._close_trial_bar()
        if self.study_bar is None:
            print(line, file=self.stream, flush=True)
            return
        self.study_bar.write(line, file=self.stream)
        self.study_bar.update(max(0, min(finished, self.study_bar.total) - self.study_bar.n))
        if best is not None:
            self.study_bar.set_postfix_str(f"best {best}", refresh=True)

    def _close_trial_bar(self) -> None:
        if self.trial_bar is not None:
            self.trial_bar.close()
            self.trial_bar = None

    def close(self) -> None:
        self._close_trial_bar()
        if self.study_bar is not None:
            self.study_bar.close()
