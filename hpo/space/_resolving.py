"""Which search space a run takes: a file, a mapping or a space given; else the one that suits the model.

``--model`` and ``--fix`` are applied to the parsed space; :func:`check_models` checks every model
the space can train (its name and the longest ``max_length`` it can get), which the run does
once, after its cheap checks and before anything is written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo._errors import UserError
from hpo.space._fixes import canonical_precision, local_directory
from hpo.space._params import SearchSpaceError
from hpo.space._space import DEFAULT_SPACE, FINETUNE_SPACE, SearchSpace
from hpo.space._space_loading import checked, load_search_space, parse_search_space
from trial_executor import PRESETS

SpaceLike = str | Path | Mapping[str, Any] | SearchSpace


def with_model(space: SearchSpace, model: str) -> SearchSpace:
    """``space`` with ``model`` fixed in place of whatever it searched or fixed (``--model NAME``).

    Changed on the parsed space and checked as a parsed space is (an ``enqueue`` entry that sets
    the model, say, is refused), without writing it out and reading it back.
    """
    params = {name: p for name, p in space.params.items() if name != "model"}
    if not params:
        raise SearchSpaceError("--model: the space searches nothing but model; give a space with other params, or --space")
    swapped = space.model_copy(update={"params": params, "fixed": {**space.fixed, "model": model}})
    fixes = {k: v for k, v in space.fixes.items() if k != "model"}
    return checked(swapped, "search space with --model").with_fixes(fixes)


@dataclass(frozen=True)
class SpaceChoice:
    """The space a run without an explicit one takes, and why (the run's first line)."""

    path: Path
    why: str

    def line(self) -> str:
        shown = f"search_spaces/{self.path.name}" if self.path.parent == DEFAULT_SPACE.parent else str(self.path)
        return f"Search space: {shown} ({self.why})"


def choose_space(model: str | None) -> SpaceChoice:
    """Fine-tuning ranges for a pretrained ``model`` (a directory, a hub id, an alias), the demo's for a preset or none."""
    if model is None:
        return SpaceChoice(DEFAULT_SPACE, "the demo space: no --model or --space given")
    if model in PRESETS:
        return SpaceChoice(DEFAULT_SPACE, f"{model} is a from-config preset, trained from random weights; --space to choose another")
    return SpaceChoice(
        FINETUNE_SPACE, f"{model} is a pretrained model: learning rates for fine-tuning, not for random weights; --space to choose another"
    )


def resolve_space(
    space: SpaceLike | None = None, *, fix: Sequence[str] = (), model: str | None = None,
    announce: Callable[[str], None] | None = print,
) -> SearchSpace:
    """A validated search space from a YAML path, a mapping or a :class:`SearchSpace`; ``model`` and ``fix`` applied.

    Its models are not checked here (see :func:`check_models`).

    ``space=None``: the space follows the model (:func:`choose_space`), and ``announce`` gets the
    line saying which space was taken and why. A space given is always used as it is.
    """
    if space is None:
        choice = choose_space(model)
        if announce is not None:
            announce(choice.line())
        space = choice.path
    if isinstance(space, SearchSpace):  # built in Python: its types were checked, not its rules (objectives, constraints...)
        resolved = checked(space, "search space")
    elif isinstance(space, Mapping):
        resolved = parse_search_space(dict(space))
    elif isinstance(space, (str, Path)):
        resolved = load_search_space(Path(space))
    else:
        raise UserError(f"space must be a YAML file's path, a mapping or an hpo.SearchSpace, got {space!r}"[:200] + "; pass one of them")
    if model is not None:
        if any(item.partition("=")[0].strip() == "model" for item in fix):
            raise SearchSpaceError(f"--model {model} and --fix model both pick the model; pass one of them")
        resolved = with_model(resolved, model)
    if fix:
        resolved = resolved.with_fixes({**resolved.fixes, **resolved.parse_fixes(list(fix))})
    return with_model_directory_absolute(resolved)


def with_model_directory_absolute(space: SearchSpace) -> SearchSpace:
    """``space`` with a fixed model that names a local directory (``--model ./my-bert``) as its absolute path.

    The study stores it so: a resumed run, a worker, ``hpo verdict`` and ``hpo best`` then read the
    same directory from any working directory (a data file is stored absolute for the same reason).
    A searched model's choices stay as the space lists them: they are the study's Optuna choices.
    """
    model = space.fixed.get("model")
    absolute = local_directory(model)
    if absolute is None or absolute == model:
        return space
    return space.model_copy(update={"fixed": {**space.fixed, "model": absolute}}).with_fixes(space.fixes)


def check_models(space: SearchSpace, num_labels: int | None = None) -> None:
    """Every model ``space`` can train exists, takes the longest ``max_length`` a trial can get, holds no trained head for
    other than ``num_labels`` outputs (the data's) and (LoRA) has the modules its adapters target; else :class:`UserError`.

    Seconds (it imports transformers): a run calls it once, after the cheap checks of its
    flags, data and storage URL (:func:`hpo._api.open_run`).
    """
    # Imported here: transformers takes seconds to import, which a mistyped space should not wait for.
    from trial_executor import ModelLimitError, ModelNotFoundError, TrainConfig, check_max_length

    defaults = TrainConfig.defaults()
    names = candidate_values(space, "model")
    # The longest max_length a trial can get: a model must take it (auto adapts by itself).
    length = space.params.get("max_length")
    lengths = getattr(length, "choices", None) or [getattr(length, "high", space.fixed.get("max_length", defaults["max_length"]))]
    longest = max((int(x) for x in lengths if x != "auto"), default="auto")
    for name in names:
        try:
            check_max_length(str(name), longest)  # resolves and checks the name first, once
            if num_labels is not None:
                from trial_executor.model._weight_shapes import check_head_fits

                check_head_fits(str(name), num_labels)
        except (ModelNotFoundError, ModelLimitError) as err:
            raise UserError(str(err)) from None
    if "lora" in candidate_values(space, "finetune"):
        from trial_executor.model import lora_target_problem

        for name, targets in itertools.product(names, candidate_values(space, "lora_target_modules")):
            problem = lora_target_problem(str(name), targets)
            if problem:
                raise UserError(problem)


def candidate_values(space: SearchSpace, field: str) -> list[Any]:
    """The values a trial of ``space`` can get for ``field``: a searched param's choices, else the fixed or default value."""
    from trial_executor import TrainConfig

    return getattr(space.params.get(field), "choices", None) or [space.fixed.get(field, TrainConfig.defaults()[field])]


def sampled_precisions(space: SearchSpace) -> list[Any]:
    """The precisions a trial of this run can get, as written: ``--fix``'s, else the space's choices or fixed value."""
    pinned = space.fixes.get("fp_precision")
    return [pinned] if pinned else candidate_values(space, "fp_precision")


def emulation_note(space: SearchSpace, device: str, flags: set[str] | None = None, verdict: Sequence[str] = ()) -> str | None:
    """What a run on a CPU that can train a precision without native matmul instructions should know first: those trials
    run emulated (fp16 at 0.07x fp32 on an AMD EPYC without avx512_fp16, benchmarks/RESULTS.md; a tiny model loses less),
    and their speed says nothing of the precision elsewhere. ``None`` on a GPU, or where no such precision is trained.
    ``flags``: the CPU's instruction flags (default: this machine's). ``verdict``: the precisions the run's verdict
    re-trains after its budget (:func:`hpo.study.verdict_after_budget`), which a pinned ``fp_precision`` does not narrow."""
    from trial_executor import precision_support, resolve_device
    from trial_executor.precision import emulated_precisions

    resolved = resolve_device(device)
    runs = {name for name, reason in precision_support(resolved).items() if reason is None}  # the rest are skipped, not emulated
    emulated = set(emulated_precisions(resolved, flags)) & runs
    sampled = {canonical_precision(p) for p in sampled_precisions(space)} & emulated
    verdict_only = sorted(set(verdict) & emulated - sampled)
    named = sorted(sampled | set(verdict_only))
    if not named:
        return None
    which = " and ".join(named)
    note = (f"this CPU has no matmul instructions for {which}: those trials run emulated (fp16 trained all-MiniLM-L6-v2 at "
            f"0.07x fp32's speed on an AMD EPYC without them), and their speed says nothing of {which} on a GPU")
    if sampled and "fp_precision" in space.params and "fp_precision" not in space.fixes:  # searched: the user may not have chosen it here
        note += f"; to leave {' and '.join(sorted(sampled))} out, drop {_them(sampled)} from fp_precision's choices in a copy of the space"
    if verdict_only and (space.verdict is None or space.verdict.precisions is None):  # the verdict's default list, not the user's
        note += (f"; the verdict re-trains the best trial in {' and '.join(verdict_only)} too: to leave {_them(verdict_only)} out, "
                 "name the precisions it compares in the space's verdict: {precisions: [...]}")
    return note


def _them(precisions: Collection[str]) -> str:
    return "them" if len(precisions) > 1 else "it"


def check_precisions(space: SearchSpace, device: str | None) -> None:
    """At least one precision the run can sample runs on this machine's ``device``; else :class:`UserError`.

    A trial of a precision the device cannot run is skipped and counts nothing toward the budget:
    with no other precision to sample, the run would skip trial after trial, for ever. ``None``:
    the trials run elsewhere (Ray's workers), on devices this machine cannot judge.
    """
    if device is None:
        return
    from trial_executor import precision_support, resolve_device

    pinned, sampled = space.fixes.get("fp_precision"), sampled_precisions(space)
    resolved = resolve_device(device)
    support = precision_support(resolved)
    reasons = {p: support.get(canonical_precision(p)) for p in sampled}
    if all(reasons.values()):
        why = "; ".join(f"{p}: {reason}" for p, reason in reasons.items())
        fix = "pin one it runs (--fix fp_precision=fp32)" if pinned else "add one it runs (fp32 runs everywhere) to fp_precision"
        raise UserError(f"no precision this run can sample runs on this machine's {resolved.type} ({why}); {fix}, or run where they run")
