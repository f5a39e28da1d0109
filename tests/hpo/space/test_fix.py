"""``--fix NAME=VALUE`` and ``--mixed-precision``: parameters pinned for one run, through real Optuna."""

from __future__ import annotations

import warnings
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import SMALL_SPACE

from hpo import SearchSpaceError, parse_search_space
from hpo.cli._run import main
from hpo.space._pruning import RetryChainPruner


def _space(**changes: object) -> object:
    return parse_search_space({**SMALL_SPACE, **changes})


def test_values_take_the_params_type_and_bounds() -> None:
    space = _space()
    fixes = space.parse_fixes(["batch_size=16", "learning_rate=1e-3", "model=tiny-distilbert", "fp_precision=none"])
    assert fixes == {"batch_size": 16, "learning_rate": 1e-3, "model": "tiny-distilbert", "fp_precision": "fp32"}
    assert type(fixes["batch_size"]) is int and type(fixes["learning_rate"]) is float


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("batch_size=17", "--fix batch_size=17: not one of the choices [16, 32]"),
        ("batchsize=16", "--fix batchsize: not a searched parameter of the space (did you mean 'batch_size'?)"),
        ("epochs=2", "--fix epochs: it is already fixed in the space (fixed.epochs: 1); to change it, copy the space's YAML"),
        ("warmup_ratio=0.2", "--fix warmup_ratio: not searched by the space, which leaves it at its default (warmup_ratio: 0.1); "
                             "to set it, copy the space's YAML, add fixed.warmup_ratio and pass the copy with --space"),
        ("seed=3", "--fix seed: set per run: pass --seed instead"),
        ("learning_rate=0.1", "--fix learning_rate=0.1: outside the searched range [0.0005, 0.002]"),
        ("learning_rate=fast", "--fix learning_rate=fast: expected a number"),
        ("batch_size", "--fix 'batch_size': expected NAME=VALUE"),
        ("fp_precision=fp8", "--fix fp_precision=fp8 (or --mixed-precision): not one of the choices"),
    ],
)
def test_bad_fixes_are_one_line(item: str, message: str) -> None:
    with pytest.raises(SearchSpaceError) as caught:
        _space().parse_fixes([item])
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_int_ranges_check_the_step_grid() -> None:
    space = _space(params={**SMALL_SPACE["params"], "grad_accum_steps": {"type": "int", "low": 1, "high": 7, "step": 2}})
    assert space.parse_fixes(["grad_accum_steps=5"]) == {"grad_accum_steps": 5}
    with pytest.raises(SearchSpaceError, match="not on the step grid"):
        space.parse_fixes(["grad_accum_steps=4"])


def test_none_is_an_alias_of_fp32_in_the_space() -> None:
    params = {**SMALL_SPACE["params"], "fp_precision": {"type": "categorical", "choices": ["none", "bf16"]}}
    space = _space(params=params)
    assert space.baseline_params()["fp_precision"] == "none"  # the fp32 baseline, under its alias
    assert space.parse_fixes(["fp_precision=fp32"]) == {"fp_precision": "none"}  # the choice as written
    with pytest.raises(SearchSpaceError, match="unknown precision 'fp64'"):
        _space(params={**params, "fp_precision": {"type": "categorical", "choices": ["fp64"]}})


def test_a_model_directory_is_one_choice_however_its_path_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my-bert").mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    space = _space(params={**SMALL_SPACE["params"], "model": {"type": "categorical", "choices": ["my-bert", "tiny-bert"]}})
    for written in ("./my-bert", str(tmp_path / "my-bert"), "sub/../my-bert"):
        assert space.parse_fixes([f"model={written}"]) == {"model": "my-bert"}  # the choice as the space lists it
    with pytest.raises(SearchSpaceError, match="not one of the choices"):
        space.parse_fixes(["model=./other"])  # no such directory: no choice


def test_fixes_pin_the_baseline_but_not_the_stored_space() -> None:
    space = _space()
    fixed = space.with_fixes(space.parse_fixes(["batch_size=16"]))
    assert fixed.stored_form() == space.stored_form() and fixed.to_json() == space.to_json()
    assert fixed.baseline_params()["batch_size"] == 16
    assert space.with_fixes({"fp_precision": "bf16"}).baseline_params() is None  # no fp32 baseline in a bf16-only run


def test_fixes_pin_the_sampler_quietly() -> None:
    """The sampler pins the fixed params (one place: the space's sampler), without Optuna's ExperimentalWarning in the
    Python API's output (the CLI silenced it; hpo.optimize(fix=...) printed it)."""
    space = _space()
    with warnings.catch_warnings():
        warnings.simplefilter("error", optuna.exceptions.ExperimentalWarning)
        pinned = space.with_fixes(space.parse_fixes(["batch_size=16"])).build_sampler(0)
        free = space.build_sampler(0)
    assert isinstance(pinned, optuna.samplers.PartialFixedSampler) and not isinstance(free, optuna.samplers.PartialFixedSampler)
    study = optuna.create_study(sampler=pinned)
    study.optimize(lambda t: float(t.suggest_categorical("batch_size", [8, 16, 32])), n_trials=3)
    assert [t.params["batch_size"] for t in study.trials] == [16, 16, 16]


def test_patience_wraps_the_pruner_and_stays_out_of_old_stored_spaces() -> None:
    patient = _space(pruner={"type": "median", "patience": 2})
    built = patient.build_pruner()
    assert isinstance(built, RetryChainPruner) and isinstance(built.pruner, optuna.pruners.PatientPruner)
    assert patient.stored_form()["pruner"]["patience"] == 2
    assert "patience" not in _space(pruner={"type": "median"}).stored_form()["pruner"]


def test_fix_reaches_every_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump({**SMALL_SPACE, "fixed": {**SMALL_SPACE["fixed"], "max_steps": 3}}))
    storage = f"sqlite:///{tmp_path / 'fix.db'}"
    # The command's own main, in this process (torch is loaded already).
    base = ["--space", str(space_file), "--storage", storage, "--study-name", "fix", "--device", "cpu", "--cache-dir", str(tmp_path / "cache")]
    assert main([*base, "--n-trials", "3", "--fix", "batch_size=16", "--mixed-precision", "bf16"]) == 0
    trials = optuna.load_study(study_name="fix", storage=storage).get_trials()
    assert len(trials) >= 3
    assert all(t.params["batch_size"] == 16 and t.params["fp_precision"] == "bf16" for t in trials)
    assert all(t.user_attrs["config"]["batch_size"] == 16 for t in trials)
    assert all(t.user_attrs["max_length_effective"] == 48 and t.user_attrs["trainable_fraction"] == 1.0 for t in trials)
    # The stored space is the file's: a run without --fix resumes the same study.
    assert main([*base, "--n-trials", "3"]) == 0
    capsys.readouterr()
    assert main([*base, "--n-trials", "4", "--fix", "batch_size=17"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not one of the choices [16, 32]" in err


def test_the_message_names_the_flags_the_user_typed() -> None:
    """--mixed-precision becomes --fix fp_precision, and --model fixes the model: messages named only --fix, or the file."""
    from hpo.space._resolving import resolve_space

    fixed_precision = _space(params={k: v for k, v in SMALL_SPACE["params"].items() if k != "fp_precision"})
    with pytest.raises(SearchSpaceError, match=r"^--fix fp_precision \(or --mixed-precision\): not searched by the space, which leaves it at its default "
                                              r"\(fp_precision: 'fp32'\); to set it"):
        fixed_precision.parse_fixes(["fp_precision=bf16"])
    with pytest.raises(SearchSpaceError, match=r"^--model tiny-distilbert and --fix model both pick the model; pass one of them$"):
        resolve_space(SMALL_SPACE, model="tiny-distilbert", fix=["model=tiny-bert"])
