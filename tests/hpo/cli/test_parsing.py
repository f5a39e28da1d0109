"""What every command line shares: an empty value is refused, even for a flag that may be given bare."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_flag_error

from hpo.__main__ import main as hpo_main
from hpo.cli._run import build_parser
from hpo.run import main as run_main


def test_ray_given_an_empty_value_is_refused_not_taken_for_a_cluster_started_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--ray "$RAY_ADDRESS"` with the variable unset started a Ray cluster on this machine and ran the whole study
    # there, instead of on the cluster the user meant.
    monkeypatch.chdir(tmp_path)
    for given in (["--ray", ""], ["--ray="], ["--ray", " "], ["--ray", "", "--workers", "1"]):
        with pytest.raises(SystemExit) as exited:
            run_main(["--storage", f"sqlite:///{tmp_path / 'e.db'}", "--n-trials", "1", *given])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.endswith("error: --ray is empty; give it a value or leave it out (see --help)\n"), err
    assert list(tmp_path.iterdir()) == []  # no study file, no cluster's files
    assert build_parser().parse_args(["--ray"]).ray == ""  # bare: a cluster started here
    assert build_parser().parse_args(["--ray", "auto"]).ray == "auto"


@pytest.mark.parametrize("command", ["run", "status", "best", "export", "report", "verdict", "check", "dashboard", "proxy"])
def test_every_flag_s_help_says_what_it_does_not_only_its_default(command: str) -> None:
    # check's --device said only "(default: auto)".
    import importlib
    import re

    parser = importlib.import_module(f"hpo.cli._{command}").build_parser()
    for action in parser._actions:
        said = re.sub(r"\(default: [^)]*\)", "", action.help or "").strip()
        assert len(said) > 10, f"{command} {action.option_strings}: {action.help!r}"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--verdict", "31"], "argument --verdict: must be between 2 and 30, got 31"),
        (["verdict", "--seeds", "31"], "argument --seeds: must be between 2 and 30, got 31"),
        (["verdict", "--precisions", "fp32", "fp8"], "argument --precisions: invalid choice: 'fp8'"),
    ],
)
def test_a_value_outside_a_flag_s_range_is_refused_before_the_storage_is_opened(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # They were checked once the study was open (a missing storage was named first) or its data read (a Data: line first).
    def command(flags: list[str]) -> int:
        return hpo_main([*argv, *flags])

    assert_one_line_flag_error(command, ["--storage", f"sqlite:///{tmp_path / 'missing.db'}"], expected, capsys)
    assert list(tmp_path.iterdir()) == []
