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

from hpo._attrs import INTERRUPTED, config_or_params, fail_reason_of, hardware_of, skip_reason_of
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


# The counts every command sorts a search trial into (the run's summary, ``status``, ``report``: see counted_state), each
# with the words ``report`` names it by, in the order it lists them (the summary and status word theirs in context).
COUNTED_STATES: dict[str, str] = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running",
                                  "WAITING": "waiting", "SKIPPED": "skipped as unsupported", "NOT_RUN": "not run"}


def counted_state(trial: FrozenTrial) -> str:
    """One of :data:`COUNTED_STATES`: the trial's state, but ``SKIPPED`` for a precision its device cannot run and
    ``NOT_RUN`` for a placeholder that never trained (:func:`never_ran`); neither is pruned, nor counts toward the budget.

    A diverged or out-of-memory trial stays ``PRUNED``: it trained, and its reason is told beside the count."""
    if never_ran(trial):
        return "NOT_RUN"
    return "SKIPPED" if skip_reason_of(trial) == SKIP_UNSUPPORTED else trial.state.name


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


class _ThisMachine:
    """What a worker's ``device`` runs and holds, judged once on first use: a study without skips never imports torch."""

    def __init__(self, device: str) -> None:
        self._device = device
        self._runnable: set[str] = set()
        self._kind: str | None = None
        self._memory_mb = 0

    def _judge(self) -> None:
        if self._kind is not None:
            return
        from trial_executor import precision_support, resolve_device, total_memory_mb

        try:
            device = resolve_device(self._device)
        except RuntimeError:  # --device cuda without CUDA: the run is refused before it samples
            self._kind = ""
            return
        self._runnable = {name for name, reason in precision_support(device).items() if reason is None}
        self._kind, self._memory_mb = device.type, total_memory_mb(device)

    def runs(self, precision: Any) -> bool:
        self._judge()
        return canonical_precision(precision) in self._runnable

    def holds_more_than(self, hardware: dict[str, Any]) -> bool:
        """Whether a trial that ran out of memory on ``hardware`` (its recorded metadata) might fit here: a device of
        another kind, or of this kind with less memory. Without a record, it is taken as this machine's."""
        self._judge()
        kind, memory_mb = hardware.get("device_type"), hardware.get("total_memory_mb")
        if not self._kind or kind is None or memory_mb is None:
            return False
        return kind != self._kind or float(memory_mb) < self._memory_mb


def says_nothing_here(device: str) -> Callable[[FrozenTrial], bool]:
    """Which trials tell a sampler on this machine's ``device`` nothing of a draw here: placeholders that never trained,
    skips of a precision that ``device`` runs (another machine could not: bf16 skipped on a T4, read on an A100), and
    out-of-memory skips on a device of another kind or with less memory (a 16 GB card's OOM, read on an 80 GB one).

    A skip of a precision ``device`` cannot run, or an OOM on a device as large as this one or larger, says something
    here (draw it less) and stays.
    """
    here = _ThisMachine(device)

    def hidden(trial: FrozenTrial) -> bool:
        reason = skip_reason_of(trial)
        if reason == SKIP_UNSUPPORTED:
            return here.runs(config_or_params(trial).get("fp_precision"))
        if reason == SKIP_OOM:
            return here.holds_more_than(hardware_of(trial))
        return reason in (SKIP_OVER_BUDGET, SKIP_DUPLICATE)

    return hidden
