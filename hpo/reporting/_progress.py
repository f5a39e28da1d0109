"""What a running study shows: progress bars on a terminal, plain lines in a log.

With bars, a study bar (finished trials of the budget, across all workers, and the best so far)
sits above a bar for the running trial (optimizer steps, training loss, samples/s); each
finished trial's line is printed above both. Without bars, the same facts are plain lines: one
per finished trial, ending with the study's position, and, unless quiet, a line for the running
trial every ``step_line_every`` seconds. With ``--workers N`` the parent process shows the
study bar and prints the workers' lines above it.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TextIO

import optuna
from optuna.trial import FrozenTrial
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from hpo._ranking import best_trials
from hpo.reporting._numbers import number_text
from trial_executor import StepProgress

STEP_LINE_EVERY_S = 30.0


def best_so_far(study: optuna.Study, names: Sequence[str], *, ended_by: FrozenTrial | None = None) -> str:
    """``best accuracy=0.8125 (trial 3)``, or the Pareto front's size; ``""`` before any trial completes.

    With ``ended_by``, as it stood when that trial ended: a line printed later than its trial ended (a Ray driver's,
    read from the database) shows no trial that ended after it."""
    front = best_trials(study, ended_by=ended_by)
    if len(names) > 1:
        return f"Pareto front: {len(front)} trial{'s' * (len(front) != 1)}" if front else ""
    return f"best {names[0]}={number_text(front[0].values[0])} (trial {front[0].number})" if front else ""


def _step_text(update: StepProgress) -> str:
    return f"loss {number_text(update.train_loss)}, {update.samples_per_s:.0f} samples/s"


class StudyProgress:
    """Shows a study's progress on ``stream``: bars when ``bars``, plain lines otherwise.

    ``trial_step`` is the executor's progress callback (with the trial's number);
    ``trial_finished`` prints the trial's line and moves the study bar to ``finished``.
    """

    def __init__(
        self, budget: int, finished: int, *, bars: bool, quiet: bool = False, stream: TextIO | None = None,
        step_line_every: float = STEP_LINE_EVERY_S,
    ) -> None:
        self.budget = budget
        self.bars = bars
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stdout
        self.step_line_every = step_line_every
        self._study_bar: tqdm | None = None
        self._trial_bar: tqdm | None = None
        self._trial_number: int | None = None
        self._last_line = -math.inf
        self._lock = threading.Lock()
        if bars:
            self._study_bar = tqdm(
                total=budget, initial=min(finished, budget), desc="study", unit="trial", position=0,
                file=self.stream, dynamic_ncols=True, bar_format="{desc} {n_fmt}/{total_fmt} |{bar}| {elapsed}{postfix}",
            )

    def trial_step(self, number: int, update: StepProgress) -> None:
        if self.bars:
            if self._trial_number != number:
                self._close_trial_bar()
                self._trial_number = number
                self._trial_bar = tqdm(
                    total=update.total_steps, desc=f"trial {number}", unit="step", position=1, leave=False,
                    file=self.stream, dynamic_ncols=True,
                    bar_format="{desc} {n_fmt}/{total_fmt} steps |{bar}| {elapsed}<{remaining}{postfix}",
                )
            bar = self._trial_bar
            assert bar is not None
            bar.total = update.total_steps
            bar.n = update.step
            bar.set_postfix_str(_step_text(update), refresh=False)
            bar.refresh()
            return
        now = time.monotonic()
        if self._trial_number != number:
            self._trial_number, self._last_line = number, now  # the first line comes after step_line_every
            return
        if not self.quiet and now - self._last_line >= self.step_line_every:
            self._last_line = now
            self.line(f"trial {number:>3}  step {update.step}/{update.total_steps}  {_step_text(update)}")

    def trial_finished(self, line: str, finished: int, best: str) -> None:
        """Print a finished trial's ``line``; ``finished`` counts the study's trials toward its budget."""
        self._close_trial_bar()
        self._trial_number = None
        if self._study_bar is not None:
            self.study_position(finished, best)
            self.line(line)
        else:
            self.line(f"{line}  [{finished}/{self.budget} finished{'; ' + best if best else ''}]")

    def study_position(self, finished: int, best: str) -> None:
        """Move the study bar (without bars, trial lines carry the position instead)."""
        if self._study_bar is not None:
            with self._lock:
                self._study_bar.n = min(finished, self.budget)
                self._study_bar.set_postfix_str(best, refresh=False)
                self._study_bar.refresh()

    def line(self, text: str, *, stderr: bool = False) -> None:
        """Print ``text`` whole (on stderr with ``stderr``), above the bars if any; safe from several threads."""
        stream = sys.stderr if stderr else self.stream
        with self._lock:
            if self.bars:
                tqdm.write(text, file=stream)
            else:
                print(text, file=stream, flush=True)

    def close(self) -> None:
        self._close_trial_bar()
        if self._study_bar is not None:
            self._study_bar.close()
            self._study_bar = None

    @contextlib.contextmanager
    def showing(self) -> Iterator[StudyProgress]:
        """Close the bars on the way out; with bars, log records go above them instead of through them."""
        try:
            if self.bars:
                with logging_redirect_tqdm():
                    yield self
            else:
                yield self
        finally:
            self.close()

    def _close_trial_bar(self) -> None:
        if self._trial_bar is not None:
            self._trial_bar.close()
            self._trial_bar = None

    @staticmethod
    def wants_bars(stream: TextIO, quiet: bool) -> bool:
        """Bars only on a terminal, when not quiet."""
        return not quiet and stream.isatty()
