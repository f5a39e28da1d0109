"""What a verdict will cost, per precision, from what the study has measured, announced before it starts.

One precision's trial time is taken from the best evidence the study holds, in this order:

1. its own finished verdict trials (a rerun after a crash): their median time;
2. the source trial's time when the precision is the source's own;
3. the source trial's time scaled by the precision's speed against the source's precision, from
   the study's trials that differ from an fp32 trial in precision only (the report's matched
   speedup);
4. the source trial's time, said to be a guess: no such pair in the study. A ratio of trials with
   other models or batch sizes would say more about those than about the precision (the demo's
   one fp16 trial, a smaller model, made fp16 look 1.05x fp32 where the verdict measured 0.44x).
   A precision the CPU emulates (no native instructions for it) is said to be far slower: fp16
   ran at 0.07x fp32 on an AMD EPYC without avx512_fp16, where the guess missed by 5x.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from hpo._attrs import TRAIN_SECONDS_ATTR, verdict_trial_of
from hpo.reporting._report import _matched_speedups, precision_of
from hpo.study._outcomes import never_ran
from hpo.study._verdict import VerdictPlan


@dataclass(frozen=True)
class PrecisionCost:
    """One precision's expected seconds per verdict trial, how that was estimated, and its trials still to run."""

    precision: str
    seconds: float | None
    basis: str
    to_go: int


def trial_seconds(trial: FrozenTrial) -> float | None:
    """A trial's training and evaluation time (its whole duration for trials that did not record them)."""
    measured = [trial.user_attrs.get(TRAIN_SECONDS_ATTR), trial.user_attrs.get("eval_seconds")]
    if all(isinstance(s, (int, float)) for s in measured):
        return float(sum(measured))  # type: ignore[arg-type]
    return trial.duration.total_seconds() if trial.duration is not None else None


def _trials(n: int, kind: str) -> str:
    return f"{n} {kind} trial{'' if n == 1 else 's'}"


_Speed = tuple[float, str | None]  # a precision's speed over fp32's, and the trials it is from (None for fp32 itself)


def _speeds_vs_fp32(trials: list[FrozenTrial]) -> dict[str, _Speed]:
    """Each precision's median matched speedup over fp32 (the report's), read once for every precision's estimate."""
    matched = _matched_speedups(trials)
    ratios: dict[str, list[float]] = {}
    for t in trials:
        if t.number in matched:
            ratios.setdefault(precision_of(t), []).append(matched[t.number])
    speeds: dict[str, _Speed] = {p: (statistics.median(r), _trials(len(r), "matched")) for p, r in ratios.items()}
    return {**speeds, "fp32": (1.0, None)}


def _estimate(
    speeds: dict[str, _Speed], plan: VerdictPlan, precision: str, done: list[FrozenTrial], emulated: Collection[str],
) -> tuple[float | None, str]:
    timed = [s for s in (trial_seconds(t) for t in done) if s is not None]
    if timed:
        return statistics.median(timed), f"its {_trials(len(timed), 'finished verdict')}"
    source_seconds, source_precision = trial_seconds(plan.source), precision_of(plan.source)
    name = f"trial {plan.source.number}'s time"
    if source_seconds is None or precision == source_precision:
        return source_seconds, name
    theirs, mine = speeds.get(source_precision), speeds.get(precision)
    if theirs is None or mine is None or mine[0] <= 0:
        unmatched = " or ".join(p for p, speed in ((precision, mine), (source_precision, theirs)) if speed is None or speed[0] <= 0)
        slow = f"; {precision} is emulated on this CPU: expect it many times longer" if precision in emulated else ""
        return source_seconds, f"{name}: a guess, no {unmatched} trial of the study matches an fp32 one{slow}"
    ratio = mine[0] / theirs[0]
    evidence = " and ".join(f"{p} from {e}" for p, e in ((precision, mine[1]), (source_precision, theirs[1])) if e)
    return source_seconds / ratio, f"{name} at {ratio:.2f}x its speed: {evidence}"


def verdict_costs(study: optuna.Study, plan: VerdictPlan, emulated: Collection[str] = ()) -> list[PrecisionCost]:
    """Each precision's expected seconds per trial and its trials still to run (a finished trial never runs again).

    ``emulated``: the precisions this machine's CPU runs without native instructions (said of a guess).
    """
    trials = study.get_trials(deepcopy=False)
    # A placeholder that never trained (a duplicate copy) finished nothing: its seed may still be to go.
    finished = [t for t in trials if plan.includes(t) and t.state in (TrialState.COMPLETE, TrialState.PRUNED) and not never_ran(t)]
    speeds = _speeds_vs_fp32(trials)
    costs = []
    for precision in plan.precisions:
        done = [t for t in finished if verdict_trial_of(t)["precision"] == precision]
        seconds, basis = _estimate(speeds, plan, precision, [t for t in done if t.state == TrialState.COMPLETE], emulated)
        costs.append(PrecisionCost(precision, seconds, basis, len(plan.seeds) - len({verdict_trial_of(t)["seed"] for t in done})))
    return costs


def verdict_cost_line(study: optuna.Study, plan: VerdictPlan, emulated: Collection[str] = ()) -> str:
    """The line a verdict announces before it starts: trials, each precision's time and why, and the total to go."""
    costs = verdict_costs(study, plan, emulated)
    trials = f"{len(plan.seeds)} seeds x {len(plan.precisions)} precisions ({', '.join(plan.precisions)}) = {plan.n_trials} trials"
    finished = plan.n_trials - sum(c.to_go for c in costs)
    if finished:
        trials += f" ({finished} already finished)"
    if any(c.seconds is None for c in costs if c.to_go):
        cost = "; the source trial's time was not measured"
    else:
        # Sub-second trials (tiny models) and totals under half a minute in seconds: "0 s", "about 0.0 min" say nothing.
        each = ", ".join(f"{c.precision} {c.seconds:.{2 if c.seconds < 1 else 0}f} s ({c.basis})" for c in costs)  # type: ignore[operator]
        total = sum(c.to_go * c.seconds for c in costs if c.to_go)  # type: ignore[operator]
        cost = f" x {each} = about " + (f"{total / 60:.1f} min" if total >= 30 else f"{total:.1f} s") + " of training to go"
    skipped = "".join(f"; {p} not run: {why}" for p, why in plan.unsupported.items())
    return f"Verdict of trial {plan.source.number}: {trials}{cost}, not counted against --n-trials{skipped}"
