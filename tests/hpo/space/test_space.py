"""Search-space validation: one clear line, non-zero exit, nothing created in storage."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import SMALL_SPACE, assert_one_line_flag_error, run_cli

from hpo import DEFAULT_SPACE, SearchSpaceError, load_search_space
from hpo.cli._run import main


def _bad(**changes: object) -> dict[str, object]:
    space = copy.deepcopy(SMALL_SPACE)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = space
        for key in parents:
            node = node[key]
        node[leaf] = value
    return space


BAD_SPACES = {
    "unknown param type": (_bad(params__batch_size={"type": "choice", "choices": [16]}), "unknown type 'choice'"),
    "int step off the grid": (_bad(params__batch_size={"type": "int", "low": 8, "high": 16, "step": 32}),
                              "params.batch_size: high 16 is not on the step grid from low 8 (step 32); set high to 8 or 40"),
    "float step off the grid": (_bad(params__warmup_ratio={"type": "float", "low": 0.0, "high": 0.25, "step": 0.1}),
                                "params.warmup_ratio: high 0.25 is not on the step grid from low 0.0 (step 0.1); set high to 0.2 or 0.3"),
    "infinite bound": (_bad(params__learning_rate={"type": "float", "low": 1e-5, "high": float("inf"), "log": True}),
                       "params.learning_rate.high: must be a finite number, got inf"),
    "infinite fixed value": (_bad(fixed__max_grad_norm=float("inf")), "fixed: max_grad_norm must be a finite number, got inf"),
    "low above high": (_bad(params__learning_rate={"type": "float", "low": 1e-2, "high": 1e-3}), "low (0.01) must be <= high (0.001)"),
    "empty choices": (_bad(params__model={"type": "categorical", "choices": []}), "params.model.choices: must not be empty"),
    "nothing searched": (_bad(params={}), "params: must not be empty; a study searches at least one parameter: name one, even a "
                                          "categorical of one choice (hpo best --format space writes such a space)"),
    "unknown precision": (_bad(params__fp_precision={"type": "categorical", "choices": ["fp32", "fp8"]}), "unknown precision 'fp8'"),
    "unknown pruner": (_bad(pruner={"type": "asha"}), "pruner: unknown type 'asha'"),
    "no resource to halve": (_bad(pruner={"type": "successive_halving", "min_resource": 0}),  # Optuna's traceback, at the first trial
                             "pruner.min_resource: must be at least 1 or auto, got 0"),
    "unknown key": (_bad(params__learning_rat={"type": "float", "low": 1e-3, "high": 1e-2}), "did you mean 'learning_rate'"),
    # pydantic's lax mode took YAML's true as the bound 1 (learning rates up to 2 were then sampled).
    "boolean bound": (_bad(params__learning_rate={"type": "float", "low": True, "high": 2}), "params.learning_rate.low: must be a number, got True"),
    # A float's step 1 was let through as an int's default step: every trial failed in Optuna with a traceback.
    "float step 1 on a log scale": (_bad(params__max_grad_norm={"type": "float", "low": 1.0, "high": 4.0, "log": True, "step": 1}),
                                    "params.max_grad_norm: step cannot be combined with log: true; drop step, or log"),
    # Was "params.max_grad_norm.choices.0.str: must be a valid string, got None": a location of pydantic's, no fix.
    "null as a choice": (_bad(params__max_grad_norm={"type": "categorical", "choices": [None, 1.0]}),
                         "params.max_grad_norm.choices[0]: null cannot be a choice (a string, a number, true or false); "
                         "leave max_grad_norm at null by setting it in fixed: instead"),
    "list as a choice": (_bad(params__batch_size={"type": "categorical", "choices": [16, [32]]}),
                         "params.batch_size.choices[1]: [32] cannot be a choice (a string, a number, true or false); write one value"),
    "quoted bound": (_bad(params__batch_size={"type": "int", "low": "8", "high": 32}), "params.batch_size.low: must be a number, got '8'"),
    # Was "sampler: missing 'type'", the typo unnamed; and a bare "unknown key" for a type that takes no other.
    "type misspelt": (_bad(sampler={"typ": "tpe"}), "sampler.typ: unknown key (did you mean 'type'?)"),
    "key of a type that takes none": (_bad(sampler={"type": "random", "n_startup_trials": 3}),
                                      "sampler.n_startup_trials: unknown key (sampler type 'random' takes no key but type)"),
}


def test_default_space_has_the_documented_parameters() -> None:
    space = load_search_space()
    assert list(space.params) == ["fp_precision", "batch_size", "learning_rate", "model"]
    assert space.params["fp_precision"].choices == ["fp32", "tf32", "fp16", "bf16"]


@pytest.mark.parametrize("case", list(BAD_SPACES))
def test_bad_space_is_one_line_and_writes_nothing(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw, expected = BAD_SPACES[case]
    space_file = tmp_path / "bad.yaml"
    space_file.write_text(yaml.safe_dump(raw))
    db = tmp_path / "studies.db"
    code = main(["--space", str(space_file), "--storage", f"sqlite:///{db}"])
    err = capsys.readouterr().err
    assert code != 0
    assert expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not db.exists()


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space_file = tmp_path / "broken.yaml"
    space_file.write_text("params:\n  batch_size: {type: int, low: 1\n  model: x\n")
    assert main(["--space", str(space_file), "--storage", f"sqlite:///{tmp_path / 's.db'}"]) == 2
    err = capsys.readouterr().err
    assert "line 3, column" in err and "fix the YAML syntax" in err


def test_yaml_as_ml_configs_write_it_exponents_without_a_dot_and_merge_keys(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads 1e-5 as a string: fixed.weight_decay: 1e-2 was refused as "must be float,
    got '1e-2'". A merge key (<<: *anchor) was refused as a syntax error."""
    space_file = tmp_path / "space.yaml"
    space_file.write_text(
        "params:\n"
        "  learning_rate: &rate {type: float, low: 1e-5, high: 3.0e-4, log: true}\n"
        "  weight_decay: {<<: *rate, low: 1E-6, log: false}\n"
        "  batch_size: {type: categorical, choices: [16, 32]}\n"
        "fixed: {max_grad_norm: 1e0, warmup_ratio: .5e-1}\n"
    )
    space = load_search_space(space_file)
    rate, decay = space.params["learning_rate"], space.params["weight_decay"]
    assert (rate.low, rate.high, rate.log) == (1e-5, 3e-4, True)
    assert (decay.low, decay.high, decay.log) == (1e-6, 3e-4, False)
    assert space.fixed == {"max_grad_norm": 1.0, "warmup_ratio": 0.05}
    # A key given twice beside a merge is still refused: merging overrides, repeating is a slip.
    space_file.write_text("params:\n  lr: &r {type: float, low: 1e-5, high: 1e-3}\n  wd: {<<: *r, low: 0.0, low: 0.1}\n")
    with pytest.raises(Exception, match="duplicate key 'low'"):
        load_search_space(space_file)


@pytest.mark.parametrize(("value", "expected"), [
    ("010", "line 2: 010 is 8 in YAML 1.1 (the reader's), 10 in YAML 1.2; write the number you mean"),
    ("-010", "line 2: -010 is -8 in YAML 1.1"),
    ("1:30", "line 2: 1:30 is 90 in YAML 1.1 (the reader's), text in YAML 1.2"),
    ("1:30.5", "line 2: 1:30.5 is 90.5 in YAML 1.1"),
])
def test_a_number_yaml_1_1_reads_otherwise_is_refused_not_guessed(value: str, expected: str, tmp_path: Path) -> None:
    """PyYAML read `low: 010` as octal 8 and `1:30` as base 60 (90): a study searched a range nobody wrote."""
    space_file = tmp_path / "space.yaml"
    space_file.write_text(f"params:\n  batch_size: {{type: categorical, choices: [16, {value}]}}\n")
    with pytest.raises(Exception, match="quote it for text") as err:
        load_search_space(space_file)
    assert expected in str(err.value)
    # Quoted, it is the text it reads as; 0x10, 1_000 and 0 are numbers in both YAML versions.
    space_file.write_text(f"params:\n  model: {{type: categorical, choices: ['{value}']}}\n")
    assert load_search_space(space_file).params["model"].choices == [value]
    space_file.write_text("params:\n  batch_size: {type: categorical, choices: [0x10, 1_000, 07]}\nfixed: {eval_every: 0}\n")
    assert load_search_space(space_file).params["batch_size"].choices == [16, 1000, 7]  # 07: 7 in both


def test_a_switch_yaml_1_1_reads_otherwise_is_refused_not_guessed(tmp_path: Path) -> None:
    """`length_grouping: on` was read as true (YAML 1.2: the text 'on'), and a bare `no` among fp_precision's choices as false."""
    space_file = tmp_path / "space.yaml"
    space_file.write_text("params:\n  batch_size: {type: categorical, choices: [16]}\nfixed: {length_grouping: on}\n")
    with pytest.raises(Exception, match=r"line 3: on is true in YAML 1.1 \(the reader's\), text in YAML 1.2; write true or false, "
                                        r"or quote it for text \('on'\)"):
        load_search_space(space_file)
    space_file.write_text("params:\n  fp_precision: {type: categorical, choices: [bf16, No]}\n")
    with pytest.raises(Exception, match=r"line 2: No is false in YAML 1.1"):
        load_search_space(space_file)
    space_file.write_text("params:\n  fp_precision: {type: categorical, choices: [bf16, 'no']}\nfixed: {length_grouping: True}\n")
    assert load_search_space(space_file).fixed == {"length_grouping": True}


def test_params_written_as_a_list_of_named_entries_is_one_short_line_with_the_fix(tmp_path: Path) -> None:
    """It was "params: must be a valid dictionary, got [...]" with the whole list in the line, and no fix."""
    space_file = tmp_path / "space.yaml"
    entries = "".join(f"  - {{name: p{i}, type: categorical, choices: [fp32, bf16, fp16, tf32]}}\n" for i in range(20))
    space_file.write_text("params:\n" + entries)
    with pytest.raises(Exception) as err:
        load_search_space(space_file)
    message = str(err.value).removeprefix(f"search space {space_file}: ")
    assert message.startswith("params: is a list; write it as a mapping of each parameter's name to its spec "
                              "(learning_rate: {type: float, low: 1e-5, high: 1e-3}), got [{'name': 'p0'")
    assert message.endswith("...") and len(message) < 250


def test_a_space_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    """A space file without read permission was a PermissionError traceback. /proc/self/mem is a regular file whose
    read fails (EIO) for root too, who reads through permissions."""
    with pytest.raises(Exception, match=r"^search space /proc/self/mem cannot be read \(Input/output error\); check the path"):
        load_search_space("/proc/self/mem")


def test_a_key_that_is_a_list_is_a_yaml_error_not_a_traceback(tmp_path: Path) -> None:
    """`? [a, b]` as a key crashed the duplicate-key check with TypeError: unhashable type: 'list'."""
    space_file = tmp_path / "space.yaml"
    space_file.write_text("params:\n  ? [a, b]\n  : {type: float, low: 0.1, high: 0.2}\n")
    with pytest.raises(Exception, match=r"line 2, column 5: found unhashable key; fix the YAML syntax"):
        load_search_space(space_file)


def test_bad_space_in_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    space_file = tmp_path / "bad.yaml"
    space_file.write_text(yaml.safe_dump(BAD_SPACES["unknown pruner"][0]))
    proc = run_cli(["--space", str(space_file)], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "hpo-studies.db").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--n-trials", "-3"], "--n-trials: must be at least 1"),
        (["--timeout", "soon"], "--timeout: expected a positive number of seconds"),
        (["--valid-fraction", "1.5"], "--valid-fraction: must be a number between 0 and 1"),
    ],
)
def test_bad_flags_are_one_line(flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_flag_error(main, flags, expected, capsys)


@pytest.mark.parametrize(
    ("pruner", "expected"),
    [
        ({"type": "none"}, "NopPruner"),
        ({"type": "median", "n_startup_trials": 2}, "MedianPruner"),
        ({"type": "hyperband", "min_resource": 5}, "HyperbandPruner"),
        ({"type": "successive_halving"}, "SuccessiveHalvingPruner"),
    ],
)
def test_pruner_from_the_space(pruner: dict[str, object], expected: str) -> None:
    from hpo import parse_search_space

    space = parse_search_space({**SMALL_SPACE, "pruner": pruner})
    built = space.build_pruner()
    assert type(getattr(built, "pruner", built)).__name__ == expected  # behind the retry-chain view, but none


# --- defaults, objectives, constraints ------------------------------------------------------

def _space(**changes: object) -> object:
    from hpo import parse_search_space

    return parse_search_space({**copy.deepcopy(SMALL_SPACE), **changes})


@pytest.mark.parametrize(
    ("name", "param", "expected"),
    [
        ("batch_size", {"type": "categorical", "choices": [64, 16, 32]}, 64),
        ("batch_size", {"type": "categorical", "choices": [16, 32], "default": 32}, 32),
        ("learning_rate", {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}, 1e-3),
        ("warmup_ratio", {"type": "float", "low": 0.0, "high": 0.3}, 0.15),
        ("warmup_ratio", {"type": "float", "low": 0.0, "high": 0.4, "step": 0.2}, 0.2),
        ("grad_accum_steps", {"type": "int", "low": 1, "high": 4}, 3),  # 2.5, rounded half up
        ("grad_accum_steps", {"type": "int", "low": 2, "high": 32, "log": True}, 8),
        ("grad_accum_steps", {"type": "int", "low": 1, "high": 7, "step": 3}, 4),
        ("grad_accum_steps", {"type": "int", "low": 1, "high": 9, "step": 4, "default": 5}, 5),
    ],
)
def test_param_defaults(name: str, param: dict[str, object], expected: object) -> None:
    space = _space(params={"fp_precision": {"type": "categorical", "choices": ["bf16", "fp32"]}, name: param})
    assert space.baseline_params() == {"fp_precision": "fp32", name: pytest.approx(expected)}
    assert type(space.baseline_params()[name]) is type(expected)


def test_baseline_only_when_fp32_is_searched() -> None:
    assert _space(params={"fp_precision": {"type": "categorical", "choices": ["bf16", "fp16"]}}).baseline_params() is None
    assert _space(params={"batch_size": {"type": "categorical", "choices": [16, 32]}}).baseline_params() is None


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"params": {"batch_size": {"type": "categorical", "choices": [16, 32], "default": 64}}},
         "params.batch_size.default: 64 is not one of the choices [16, 32]"),
        ({"params": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "default": 0.5}}},
         "params.learning_rate.default: 0.5 is outside [0.0001, 0.001]"),
        ({"params": {"grad_accum_steps": {"type": "int", "low": 1, "high": 9, "step": 4, "default": 2}}},
         "params.grad_accum_steps.default: 2 is not on the step grid"),
        ({"params": {"batch_size": {"type": "categorical", "choices": [16], "defualt": 16}}}, "did you mean 'default'"),
        ({"objectives": [{"name": "accuracy"}]}, "give either objective (one metric) or objectives (a list), not both"),
        ({"objective": {"metric": "acuracy"}}, "objective.metric: unknown measure 'acuracy' (did you mean 'accuracy'?)"),
        ({"objective": None, "objectives": [{"name": "accuracy"}, {"name": "throughput_samples"}]},
         "objectives: unknown measure 'throughput_samples' (did you mean 'throughput_samples_per_s'?)"),
        ({"objective": None, "objectives": [{"name": "accuracy"}, {"name": "accuracy", "direction": "minimize"}]},
         "objectives: 'accuracy' is listed twice"),
        ({"objective": None, "objectives": [{"metric": "accuracy"}]}, "objectives.0.metric: unknown key"),
        ({"objective": None, "objectives": []}, "objectives: must not be empty"),
        ({"objective": None, "objectives": [{"name": "accuracy"}, {"name": "peak_memory_mb"}], "pruner": {"type": "median"}},
         "pruner: 'median' cannot prune a study with several objectives; use pruner: {type: none}"),
        ({"objective": {"metric": "throughput_samples_per_s"}, "pruner": {"type": "median"}},
         "pruner: 'median' needs an evaluation metric"),
        # Patience alone: "use pruner: {type: none}" was the pruner already given.
        ({"objective": None, "objectives": [{"name": "accuracy"}, {"name": "peak_memory_mb"}], "pruner": {"type": "none", "patience": 3}},
         "pruner.patience cannot prune a study with several objectives; remove patience"),
        ({"objective": {"metric": "peak_memory_mb"}, "pruner": {"type": "none", "patience": 3}},
         "pruner.patience needs an evaluation metric (accuracy, macro_f1, loss, rmse, pearson, spearman, micro_f1, subset_accuracy) as the "
         "objective; peak_memory_mb is measured once, at the end; remove patience"),
        ({"constraints": {"max_peak_memory": 4000}}, "constraints.max_peak_memory: unknown constraint (did you mean 'max_peak_memory_mb'?)"),
        ({"constraints": {"min_throughput_samples_per_s": float("nan")}},
         "constraints.min_throughput_samples_per_s: must be a finite number, got nan"),
        # Constraints no trial can meet: every trial infeasible, the study without a best, found out after its budget.
        ({"constraints": {"min_accuracy": 60}},
         "constraints.min_accuracy: 60 can never be met: accuracy is at most 1 (a fraction: 0.6 for 60%); lower it"),
        ({"constraints": {"max_peak_memory_mb": -1}}, "constraints.max_peak_memory_mb: -1 can never be met: peak_memory_mb is never below 0; raise it"),
        ({"constraints": {"max_spearman": -1.5}}, "constraints.max_spearman: -1.5 can never be met: spearman is never below -1; raise it"),
        ({"constraints": {"max_macro_f1": 0.5, "min_macro_f1": 0.9}},
         "constraints: min_macro_f1 (0.9) is above max_macro_f1 (0.5): no trial can meet both; lower min_macro_f1 or raise max_macro_f1"),
        ({"oom_fallback": "sometimes"}, "oom_fallback: must be a valid boolean, got 'sometimes'"),
        # Strict types everywhere, not only in params: lax mode took these as 1, 16000.0, True and 3.
        ({"pruner": {"type": "median", "n_startup_trials": True}}, "pruner.n_startup_trials: must be a valid integer, got True"),
        ({"constraints": {"max_peak_memory_mb": "16000"}}, "constraints.max_peak_memory_mb: must be a valid number, got '16000'"),
        ({"oom_fallback": 1}, "oom_fallback: must be a valid boolean, got 1"),
        ({"verdict": {"seeds": "3"}}, "verdict.seeds: must be a valid integer, got '3'"),
    ],
)
def test_bad_objectives_defaults_and_constraints(changes: dict[str, object], expected: str) -> None:
    from hpo import SearchSpaceError, parse_search_space

    raw = copy.deepcopy(SMALL_SPACE)
    for key, value in changes.items():
        if key == "params":
            raw["params"].update(value)  # type: ignore[attr-defined]
        else:
            raw[key] = value
    with pytest.raises(SearchSpaceError) as info:
        parse_search_space(raw)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_objectives_form_and_natural_directions() -> None:
    space = _space(
        objective=None,
        objectives=[{"name": "accuracy"}, {"name": "throughput_samples_per_s"}, {"name": "peak_memory_mb"}],
        constraints={"max_peak_memory_mb": 4000, "min_throughput_samples_per_s": 50},
        oom_fallback=True,
    )
    assert space.objective_specs == [
        ("accuracy", "maximize"), ("throughput_samples_per_s", "maximize"), ("peak_memory_mb", "minimize"),
    ]
    assert space.is_multi_objective and not space.reports_intermediate_values
    assert space.constraints == {"max_peak_memory_mb": 4000.0, "min_throughput_samples_per_s": 50.0}
    stored = space.stored_form()
    assert "objective" not in stored and stored["oom_fallback"] is True
    single = _space(objective={"metric": "loss", "direction": "minimize"}, pruner={"type": "median"})
    assert single.directions == ["minimize"] and single.reports_intermediate_values


def test_stored_form_of_a_space_without_new_keys_is_unchanged() -> None:
    # Studies stored before defaults, objectives and constraints existed must still resume.
    stored = _space().stored_form()
    assert set(stored) == {"objective", "pruner", "params", "fixed"}
    assert stored["objective"] == {"metric": "accuracy", "direction": "maximize"}
    assert stored["params"]["learning_rate"] == {"type": "float", "low": 5e-4, "high": 2e-3, "log": True, "step": None}
    with_default = {**SMALL_SPACE["params"], "model": {"type": "categorical", "choices": ["tiny-bert"], "default": "tiny-bert"}}
    assert _space(params=with_default).stored_form()["params"]["model"]["default"] == "tiny-bert"


@pytest.mark.parametrize("path", sorted((DEFAULT_SPACE.parent).glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_are_valid(path: Path) -> None:
    space = load_search_space(path)
    assert space.baseline_params() is not None and space.baseline_params()["fp_precision"] == "fp32"


_BOOL = {"type": "categorical", "choices": [False, True]}


@pytest.mark.parametrize(
    ("params", "fixed", "expected"),
    [
        # Each value alone is valid beside the others' defaults; the two together are not, and a trial can draw both.
        ({"compile_step": _BOOL, "capture_step": _BOOL}, {},
         "params: compile_step=True with capture_step=True is invalid: compile_step and capture_step are two ways to run the "
         "same whole step: turn one off; a trial can draw both, so search only one of compile_step and capture_step, or drop the choice"),
        ({"compile_step": {**_BOOL, "default": True}, "capture_step": {**_BOOL, "default": True}}, {},
         "params: the searched defaults (what the baseline trial runs) are invalid together: compile_step and capture_step"),
        ({"num_workers": {"type": "int", "low": 0, "high": 2, "default": 2}, "persistent_workers": _BOOL}, {},
         "params: num_workers=0 with persistent_workers=True is invalid: persistent_workers needs num_workers > 0"),
        ({"persistent_workers": _BOOL}, {}, "params.persistent_workers: value True is invalid: persistent_workers needs num_workers > 0"),
        ({"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3}}, {"persistent_workers": True}, "fixed: persistent_workers needs num_workers > 0"),
        # Valid whatever a trial draws: the searched num_workers is never 0 (checked beside TrainConfig's default 0, these were refused).
        ({"num_workers": {"type": "int", "low": 1, "high": 2}, "persistent_workers": _BOOL}, {}, None),
        ({"num_workers": {"type": "categorical", "choices": [1, 2]}}, {"persistent_workers": True, "prefetch_factor": 2}, None),
    ],
)
def test_values_a_trial_can_draw_together_must_make_a_valid_config(
    params: dict[str, object], fixed: dict[str, object], expected: str | None
) -> None:
    from hpo import SearchSpaceError, parse_search_space

    raw = {"params": params, "fixed": fixed}
    if expected is None:
        parse_search_space(raw)
        return
    with pytest.raises(SearchSpaceError) as info:
        parse_search_space(raw)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_an_alias_of_fp32_beside_fp32_is_listed_twice() -> None:
    from hpo import SearchSpaceError, parse_search_space

    with pytest.raises(SearchSpaceError, match=r"params.fp_precision.choices lists fp32 twice \('fp32' and 'none' are both fp32\)"):
        parse_search_space({"params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16", "none"]}}})


def test_a_space_path_that_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    from hpo import SearchSpaceError

    for path, what in ((tmp_path, "a directory"), (Path("/dev/null"), "not a regular file")):
        with pytest.raises(SearchSpaceError, match=f"^search space {path} is {what}; pass a YAML file with --space"):
            load_search_space(path)


def test_load_search_space_given_no_path_names_what_it_takes() -> None:
    """A mapping was a TypeError from inside pathlib ("expected str, bytes or os.PathLike object, not dict")."""
    with pytest.raises(SearchSpaceError, match=r"^search space: expected a YAML file's path, got a dict; for a mapping \(the YAML's "
                                               r"content\) use parse_search_space$"):
        load_search_space({"params": {}})  # type: ignore[arg-type]
    with pytest.raises(SearchSpaceError, match=r"^search space: expected a YAML file's path, got a NoneType$"):
        load_search_space(None)  # type: ignore[arg-type]
