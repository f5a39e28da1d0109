"""What a run says before it trains about the precisions its space can sample on this machine."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SMALL_SPACE

from hpo._api import open_run
from hpo.cli._run import _emulation_note, main
from hpo.space import SearchSpace, parse_search_space
from hpo.space._resolving import emulation_note
from hpo.study import RunOptions
from trial_executor import PRECISIONS

AMD_EPYC = {"avx2", "avx512f", "avx512_bf16"}  # bf16 native, fp16 emulated
AVX2_ONLY = {"avx2", "fma"}
SAPPHIRE_RAPIDS = {"avx512f", "avx512_fp16", "avx512_bf16", "amx_bf16"}


def _space(
    precision: dict[str, Any] | None = None, fixed: str | None = None, fixes: tuple[str, ...] = (), verdict: dict[str, Any] | None = None,
) -> SearchSpace:
    space = copy.deepcopy(SMALL_SPACE)
    if verdict is not None:
        space["verdict"] = verdict
    if precision is not None:
        space["params"]["fp_precision"] = precision
    if fixed is not None:
        del space["params"]["fp_precision"]
        space["fixed"] = {**space["fixed"], "fp_precision": fixed}
    parsed = parse_search_space(space)
    return parsed.with_fixes(parsed.parse_fixes(list(fixes)))


def test_a_searched_precision_this_cpu_emulates_is_named_with_how_to_leave_it_out() -> None:
    searched = _space()  # fp32, tf32, fp16, bf16
    note = emulation_note(searched, "cpu", AMD_EPYC)
    assert note is not None and note.startswith("this CPU has no matmul instructions for fp16: those trials run emulated")
    assert note.endswith("to leave fp16 out, drop it from fp_precision's choices in a copy of the space")
    both = emulation_note(searched, "cpu", AVX2_ONLY)
    assert both is not None and "for bf16 and fp16:" in both and "drop them from fp_precision's choices" in both
    assert emulation_note(searched, "cpu", SAPPHIRE_RAPIDS) is None
    assert emulation_note(_space({"type": "categorical", "choices": ["fp32", "bf16"]}), "cpu", AMD_EPYC) is None


def test_a_precision_the_user_chose_is_named_without_advice_to_drop_it() -> None:
    for chosen in (_space(fixed="fp16"), _space(fixes=("fp_precision=fp16",))):
        note = emulation_note(chosen, "cpu", AMD_EPYC)
        assert note is not None and "for fp16:" in note and "drop" not in note
    assert emulation_note(_space(fixes=("fp_precision=fp32",)), "cpu", AVX2_ONLY) is None


def test_a_verdict_after_the_budget_names_what_it_re_trains_emulated_beyond_a_pinned_precision() -> None:
    # --fix fp_precision=fp32 --verdict 3: the trials train fp32, the verdict the space's choices (all four here).
    pinned = _space(fixes=("fp_precision=fp32",))
    note = emulation_note(pinned, "cpu", AVX2_ONLY, verdict=list(PRECISIONS))
    assert note is not None and note.startswith("this CPU has no matmul instructions for bf16 and fp16: those trials run emulated")
    assert note.endswith("; the verdict re-trains the best trial in bf16 and fp16 too: to leave them out, name the precisions "
                         "it compares in the space's verdict: {precisions: [...]}")
    assert "fp_precision's choices" not in note  # the search trains fp32 alone: nothing to drop there
    # A verdict of the searched precisions adds nothing to the search's note; one the user listed gets no advice.
    assert emulation_note(_space(), "cpu", AMD_EPYC, verdict=list(PRECISIONS)) == emulation_note(_space(), "cpu", AMD_EPYC)
    listed = _space(fixes=("fp_precision=fp32",), verdict={"seeds": 2, "precisions": ["fp32", "fp16"]})
    assert emulation_note(listed, "cpu", AMD_EPYC, verdict=["fp32", "fp16"]) == (
        "this CPU has no matmul instructions for fp16: those trials run emulated (fp16 trained all-MiniLM-L6-v2 at 0.07x "
        "fp32's speed on an AMD EPYC without them), and their speed says nothing of fp16 on a GPU")
    assert emulation_note(pinned, "cpu", SAPPHIRE_RAPIDS, verdict=list(PRECISIONS)) is None


def test_the_runs_note_counts_its_verdict(tmp_path: Path) -> None:
    """The run's own wiring, on this machine's CPU (an AMD EPYC emulates fp16, an AVX2-only one bf16 too, a Xeon with AMX
    nothing: no note there)."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SMALL_SPACE))
    options = RunOptions(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s", n_trials=1, device="cpu",
                         fix=("fp_precision=fp32",), verdict=2)
    run = open_run(tmp_path / "space.yaml", None, options, announce=None)
    expected = emulation_note(_space(fixes=("fp_precision=fp32",)), "cpu", verdict=list(PRECISIONS))
    assert _emulation_note(run) == expected and (expected is None or "the verdict re-trains the best trial in" in expected)


def test_the_run_says_it_once_before_training_on_this_machines_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """This machine's CPU decides whether there is a note (an AMD EPYC: fp16; a Xeon with AVX512-FP16 and AMX: none)."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SMALL_SPACE))
    expected = emulation_note(_space(), "cpu")
    assert main(["--space", str(tmp_path / "space.yaml"), "--storage", f"sqlite:///{tmp_path / 's.db'}", "--n-trials", "1",
                 "--device", "cpu", "--quiet", "--artifact-store", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    if expected is None:
        assert "note:" not in err
    else:
        assert err.count(f"python -m hpo.run: note: {expected}\n") == 1 and err.count("note:") == 1
