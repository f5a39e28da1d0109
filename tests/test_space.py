"""Search-space validation: one clear line, non-zero exit, nothing created in storage."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import SMALL_SPACE, run_cli

from hpo import load_search_space
from hpo.run import main


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
    "low above high": (_bad(params__learning_rate={"type": "float", "low": 1e-2, "high": 1e-3}), "low (0.01) must be <= high (0.001)"),
    "empty choices": (_bad(params__model={"type": "categorical", "choices": []}), "params.model.choices: must not be empty"),
    "unknown precision": (_bad(params__fp_precision={"type": "categorical", "choices": ["fp32", "fp8"]}), "unknown precision 'fp8'"),
    "unknown pruner": (_bad(pruner={"type": "asha"}), "pruner: unknown type 'asha'"),
    "unknown key": (_bad(params__learning_rat={"type": "float", "low": 1e-3, "high": 1e-2}), "did you mean 'learning_rate'"),
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
    with pytest.raises(SystemExit) as exit_info:
        main(flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1


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
    assert type(space.build_pruner()).__name__ == expected
