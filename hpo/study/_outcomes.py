"""What a finished trial's state and attrs mean: the vocabulary every command reads.

How a trial ends:

- COMPLETE: trained; its objective values are finite.
- PRUNED with ``skip_reason``: ``unsupported_precision`` (the device cannot run the precision;
  not counted toward the budget), ``non_finite_loss`` (the run diverged: NaN/inf loss, or a
  non-finite final metric) or ``oom`` (out of memory, after the optional half-batch retry).
  NaN never reaches the sampler as a value.
- PRUNED with ``skip_reason`` ``over_budget``: started by a worker when running trials of other
  workers already held the rest of the budget (a rare race between workers); never trained, not counted.
- PRUNED without ``skip_reason``: stopped by the study's pruner.
- FAIL with ``fail_reason`` ("Type: message"): anything else, a bug or a broken environment;
  the traceback goes to the worker's log, never into the study.
- FAIL with ``fail_reason`` ``interrupted``: the worker got SIGINT/SIGTERM; the trial saved a
  checkpoint (after a second signal, none: its last one is kept) and is re-queued, so the next run
  resumes it (see :mod:`hpo.storage._checkpoints`).
- FAIL with ``fail_reason`` ``InvalidTrialError: ...``: an enqueued value the space cannot
  sample, or a config the executor refuses; bad input, not counted as a failure in a row.
- FAIL with ``fail_reason`` ``worker_died: ...``: its worker process on this machine exited
  mid-trial; re-queued like a stale heartbeat's trial (see :mod:`hpo.study._liveness`).
"""

import logging
import re
from collections.abc import Callable
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import INTERRUPTED, config_or_params, fail_reason_of, skip_reason_of
from hpo.space._fixes import canonical_precision

SKIP_UNSUPPORTED = "unsupported_precision"
SKIP_NON_FINITE = "non_finite_loss"
SKIP_OOM = "oom"
SKIP_OVER_BUDGET = "over_budget"
SKIP_DUPLICATE = "duplicate"  # queued twice by workers with no lock between them (a grpc:// proxy's): the later copy
# The skip detail of an over_budget placeholder (those written before it was recorded say it too: reporting's default).
OVER_BUDGET_DETAIL = "other workers' running trials held the rest of the budget"
SKIP_REASONS: tuple[str, ...] = (SKIP_UNSUPPORTED, SKIP_NON_FINITE, SKIP_OOM)


def never_ran(trial: FrozenTrial) -> bool:
    """Whether ``trial`` is a placeholder that never trained: ``over_budget`` (started when the budget was already held) or
    ``duplicate`` (a second copy of a queued trial, withdrawn when claimed)."""
    return skip_reason_of(trial) in (SKIP_OVER_BUDGET, SKIP_DUPLICATE)


def was_interrupted(trial: FrozenTrial) -> bool:
    """Whether ``trial`` ended FAIL because its worker got SIGINT/SIGTERM (checkpointed, and re-queued by the run)."""
    return trial.state == TrialState.FAIL and fail_reason_of(trial) == INTERRUPTED


class TrialFailedError(RuntimeError):
    """Raised to Optuna for a FAILed trial; its ``fail_reason`` says why (and an unexpected error's traceback is in the log)."""


class QuietTrialFailures(logging.Filter):
    """Drops Optuna's per-trial failure warnings (with a traceback) that repeat a recorded outcome.

    A trial ending in :class:`TrialFailedError` has its ``fail_reason`` printed on its own line,
    and one interrupted by a second Ctrl-C (``KeyboardInterrupt``) ends the run with one line.
    """

    _VALUE_NONE = re.compile(r"Trial \d+ failed with value None\.$")

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (TrialFailedError, KeyboardInterrupt)):
            return False
        return not self._VALUE_NONE.match(record.getMessage())


def quiet_trial_failures() -> None:
    """Install :class:`QuietTrialFailures` on the logger Optuna reports trial failures with (once)."""
    logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, QuietTrialFailures) for f in logger.filters):
        logger.addFilter(QuietTrialFailures())


def says_nothing_here(device: str) -> Callable[[FrozenTrial], bool]:
    """Which trials tell a sampler on this machine's ``device`` nothing of a draw here: placeholders that never trained,
    and skips of a precision that ``device`` runs (another machine could not: bf16 skipped on a T4, read on an A100).

    A skip of a precision ``device`` cannot run says something here (draw it less) and stays. The device is judged once,
    when the first such skip is met: a study without skips never imports torch for it.
    """
    runnable: set[str] | None = None

    def runs_here(precision: Any) -> bool:
        nonlocal runnable
        if runnable is None:
            from trial_executor import precision_support, resolve_device

            try:
                runnable = {name for name, reason in precision_support(resolve_device(device)).items() if reason is None}
            except RuntimeError:  # --device cuda without CUDA: the run is refused before it samples
                runnable = set()
        return canonical_precision(precision) in runnable

    def hidden(trial: FrozenTrial) -> bool:
        reason = skip_reason_of(trial)
        if reason == SKIP_UNSUPPORTED:
            return runs_here(config_or_params(trial).get("fp_precision"))
        return reason in (SKIP_OVER_BUDGET, SKIP_DUPLICATE)

    return hidden
