"""Search defaults and known configurations: the sampler section, the space's enqueue list, --warm-start."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import cli_args, write_tsv
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

import hpo
from hpo import RunOptions, SearchSpaceError, create_storage, open_study, parse_search_space
from hpo._api import prepare_study
from hpo.run import main
from hpo.study._known_good import space_origin
from trial_executor import demo_dataset, make_synthetic_reviews

LR = {"type": "float", "low": 5e-4, "high": 2e-3, "log": True}
# No fp_precision searched: no fp32 baseline is enqueued, so every waiting trial here is ours.
SPACE = {
    "params": {"learning_rate": LR, "batch_size": {"type": "categorical", "choices": [8, 16]}},
    "fixed": {"model": "tiny-bert", "max_steps": 2, "eval_every": 0, "max_length": 32},
}
DATA = demo_dataset(n_train=50, n_valid=10)
# SPACE as releases before the sampler and enqueue sections stored it on the study.
OLD_FORM = {
    "objective": {"metric": "accuracy", "direction": "maximize"},
    "pruner": {"type": "none"},
    "params": {
        "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "log": True, "step": None},
        "batch_size": {"type": "categorical", "choices": [8, 16]},
    },
    "fixed": SPACE["fixed"],
}


def _waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


# --- the sampler section -------------------------------------------------------------------


def test_default_sampler_is_multivariate_tpe_with_a_constant_liar_and_leaves_the_stored_form_alone() -> None:
    space = parse_search_space(SPACE)
    trial = optuna.trial.create_trial(value=0.0)
    sampler = space.build_sampler(0).sampler_of(trial)  # each trial's own, seeded with its number
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._multivariate and sampler._group and sampler._constant_liar
    assert sampler._n_startup_trials == 4
    # Spaces stored before the section existed still compare equal (their studies resume).
    assert "sampler" not in space.stored_form() and "enqueue" not in space.stored_form()
    random = parse_search_space({**SPACE, "sampler": {"type": "random"}})
    assert isinstance(random.build_sampler(0).sampler_of(trial), optuna.samplers.RandomSampler)
    assert random.stored_form()["sampler"] == {"type": "random"}


@pytest.mark.parametrize(
    ("sampler", "message"),
    [
        ({"type": "tpe", "multivariate": False}, "sampler: group: true needs multivariate: true"),
        ({"type": "tpe", "n_startup": 2}, "sampler.n_startup: unknown key (did you mean 'n_startup_trials'?)"),
        ({"type": "grid"}, "sampler: unknown type 'grid'"),
        ({"type": "tpe", "n_startup_trials": -1}, "sampler.n_startup_trials:"),
    ],
)
def test_bad_sampler_section_is_one_line(sampler: dict[str, object], message: str) -> None:
    with pytest.raises(SearchSpaceError, match="^search space: " + re.escape(message)):
        parse_search_space({**SPACE, "sampler": sampler})


def test_a_stored_study_from_before_the_sampler_section_resumes(tmp_path: Path) -> None:
    storage = create_storage(f"sqlite:///{tmp_path / 'old.db'}")
    space = parse_search_space(SPACE)
    old = optuna.create_study(storage=storage, study_name="old", direction="maximize")
    old.set_user_attr("search_space", OLD_FORM)
    assert open_study(storage, "old", space, DATA, 0).user_attrs["search_space"] == OLD_FORM


# --- the space's enqueue list --------------------------------------------------------------


def test_enqueue_list_runs_first_once_per_study(tmp_path: Path) -> None:
    space = parse_search_space({**SPACE, "enqueue": [{"learning_rate": 1e-3, "batch_size": 8}, {"learning_rate": 2e-3}]})
    storage = create_storage(f"sqlite:///{tmp_path / 'e.db'}")
    study = open_study(storage, "e", space, DATA, 0)
    open_study(storage, "e", space, DATA, 0)  # a rerun, or a second worker
    waiting = _waiting(study)
    assert [t.system_attrs["fixed_params"] for t in waiting] == [{"learning_rate": 1e-3, "batch_size": 8}, {"learning_rate": 2e-3}]
    assert [t.user_attrs["enqueued_from"] for t in waiting] == [space_origin({"batch_size": 8, "learning_rate": 1e-3}),
                                                                  'space:{"learning_rate": 0.002}']
    for _ in waiting:  # each runs, with its values; the missing batch size is sampled
        trial = study.ask()
        assert trial.user_attrs["enqueued_from"].startswith("space:")
        assert space.suggest(trial)["learning_rate"] in (1e-3, 2e-3)
        study.tell(trial, 0.5)
    open_study(storage, "e", space, DATA, 0)
    assert not _waiting(study) and len(study.get_trials()) == 2


def test_a_fix_never_rewrites_an_enqueued_configuration_it_contradicts(tmp_path: Path) -> None:
    """A study first opened with --fix batch_size=16 enqueued the entry {learning_rate: 1e-3, batch_size: 8} as batch 16,
    recorded as space:0: the known-good configuration as written never ran, while a study first opened without the fix kept
    it waiting for a run without it. Now the entry waits whichever run opened the study; one that leaves the param to the
    sampler runs in the pinned run, with the pinned value."""
    space = {**SPACE, "enqueue": [{"learning_rate": 1e-3, "batch_size": 8}, {"learning_rate": 2e-3}]}
    common = {"storage": f"sqlite:///{tmp_path / 'f.db'}", "study_name": "f", "device": "cpu", "artifact_store": None}
    data = demo_dataset(n_train=40, n_valid=10)
    study = hpo.optimize(space, data, n_trials=1, fix=["batch_size=16"], **common)
    (ran,) = study.get_trials(states=(TrialState.COMPLETE,))
    assert ran.user_attrs["enqueued_from"] == space_origin({"learning_rate": 2e-3}) and ran.params == {"learning_rate": 2e-3, "batch_size": 16}
    assert [t.system_attrs["fixed_params"] for t in _waiting(study)] == [{"learning_rate": 1e-3, "batch_size": 8}]
    study = hpo.optimize(space, data, n_trials=2, **common)  # a run without the fix trains the entry as written
    ran = {t.user_attrs["enqueued_from"]: t.params for t in study.get_trials(states=(TrialState.COMPLETE,))}
    assert ran == {space_origin({"learning_rate": 1e-3, "batch_size": 8}): {"learning_rate": 1e-3, "batch_size": 8},
                   space_origin({"learning_rate": 2e-3}): {"learning_rate": 2e-3, "batch_size": 16}}


def test_an_enqueued_fp32_under_another_name_runs_as_the_spaces_fp32(tmp_path: Path) -> None:
    """--fix fp_precision=none matched the space's fp32; an enqueue entry saying none was refused as no choice."""
    precisions = {"type": "categorical", "choices": ["fp32", "bf16"]}
    space = parse_search_space({**SPACE, "params": {**SPACE["params"], "fp_precision": precisions},
                                "enqueue": [{"fp_precision": "none", "learning_rate": 1e-3}]})
    study = open_study(create_storage(f"sqlite:///{tmp_path / 'n.db'}"), "n", space, DATA, 0)
    assert _waiting(study)[0].system_attrs["fixed_params"] == {"fp_precision": "fp32", "learning_rate": 1e-3}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"learning_rat": 1e-3}, r"enqueue\[0\]\.learning_rat: not a searched parameter \(did you mean 'learning_rate'\?\)"),
        ({"learning_rate": 0.5}, r"enqueue\[0\]\.learning_rate: 0\.5 is not a value of the searched range \[0\.0005, 0\.002\]"),
        ({"batch_size": 12}, r"enqueue\[0\]\.batch_size: 12 is not a value of the searched choices \[8, 16\]"),
        ({"model": "tiny-bert"}, r"enqueue\[0\]\.model: not a searched parameter"),
    ],
)
def test_bad_enqueue_entry_is_one_line(entry: dict[str, object], message: str) -> None:
    with pytest.raises(SearchSpaceError, match=message):
        parse_search_space({**SPACE, "enqueue": [entry]})


# --- --warm-start --------------------------------------------------------------------------


def _earlier_study(url: str, values: dict[float, float]) -> None:
    """A finished study whose trials had these ``{learning_rate: accuracy}``: no training needed."""
    study = optuna.create_study(storage=url, study_name="earlier", direction="maximize")
    for lr, value in values.items():
        study.add_trial(optuna.trial.create_trial(
            params={"learning_rate": lr, "dropout": 0.1}, value=value,
            distributions={"learning_rate": FloatDistribution(1e-6, 1.0, log=True), "dropout": FloatDistribution(0.0, 0.5)},
        ))


def test_warm_start_enqueues_the_best_trials_that_fit_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    # The best (0.9) lies outside this space: skipped with a notice, never moved into the range.
    _earlier_study(url, {0.5: 0.9, 1e-3: 0.8, 2e-3: 0.7, 6e-4: 0.6})
    space = parse_search_space(SPACE)
    for _ in range(2):  # a rerun enqueues nothing again
        prepared = prepare_study(space, DATA, RunOptions(storage=url, study_name="new", warm_start="earlier", warm_start_trials=3))
    waiting = _waiting(prepared.study)
    # dropout is not searched here: left out; batch_size was not in the earlier study: sampled.
    assert [t.system_attrs["fixed_params"] for t in waiting] == [{"learning_rate": 1e-3}, {"learning_rate": 2e-3}]
    assert [t.user_attrs["enqueued_from"] for t in waiting] == ["study:earlier:1", "study:earlier:2"]
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warm start:")]
    assert notices[0] == "warm start: trial 0 of 'earlier' skipped: learning_rate=0.5 is outside the space's range [0.0005, 0.002]"


def test_warm_start_takes_fp32_under_any_name_and_names_a_value_off_the_step_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trial run as 'no' (accelerate's fp32) was skipped as outside [fp32, bf16]; a rate inside the range but off the grid
    was called outside the range."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    earlier = optuna.create_study(storage=url, study_name="earlier", direction="maximize")
    precision = optuna.distributions.CategoricalDistribution(["no", "bf16"])
    for value, lr in ((0.9, 1.5e-3), (0.8, 1.234e-3)):
        earlier.add_trial(optuna.trial.create_trial(params={"fp_precision": "no", "learning_rate": lr}, value=value, distributions={
            "fp_precision": precision, "learning_rate": FloatDistribution(1e-4, 1e-2)}))
    space = parse_search_space({**SPACE, "params": {"fp_precision": {"type": "categorical", "choices": ["fp32", "bf16"]},
                                                    "learning_rate": {"type": "float", "low": 5e-4, "high": 2e-3, "step": 5e-4}}})
    prepared = prepare_study(space, DATA, RunOptions(storage=url, study_name="new", warm_start="earlier", warm_start_trials=2))
    assert _waiting(prepared.study)[0].system_attrs["fixed_params"] == {"fp_precision": "fp32", "learning_rate": 1.5e-3}
    notices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warm start:")]
    assert notices == ["warm start: trial 1 of 'earlier' skipped: learning_rate=0.001234 is not on the step grid (low 0.0005, step 0.0005)"]


@pytest.mark.postgres
def test_warm_start_on_postgres_once_across_workers(pg_database: str) -> None:
    _earlier_study(pg_database, {1e-3: 0.8, 2e-3: 0.7})
    space = parse_search_space(SPACE)
    for _ in range(3):
        prepared = prepare_study(space, DATA, RunOptions(storage=pg_database, study_name="new", warm_start="earlier", warm_start_trials=1))
    assert [t.system_attrs["fixed_params"] for t in _waiting(prepared.study)] == [{"learning_rate": 1e-3}]


def test_unknown_warm_start_study_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    db = tmp_path / "none.db"
    data = write_tsv(tmp_path / "d.tsv", list(zip(*make_synthetic_reviews(40, seed=1), strict=True)))
    assert main([*cli_args(f"sqlite:///{db}", space, data, "--warm-start", "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"error: --warm-start 'nope' reads the earlier study from this run's --storage, which holds "
                                             f"none (no SQLite database at {db}); run with the --storage that holds it") and not db.exists()
    # --warm-start-trials alone was ignored without a word.
    assert main([*cli_args(f"sqlite:///{db}", space, data, "--warm-start-trials", "2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("error: --warm-start-trials says how many of --warm-start's trials run: add --warm-start STUDY, "
                                             "or drop it") and not db.exists()
    _earlier_study(f"sqlite:///{db}", {1e-3: 0.8})
    assert main([*cli_args(f"sqlite:///{db}", space, data, "--warm-start", "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"error: --warm-start: no study 'nope' in sqlite:///{db}; studies found: earlier")
    assert optuna.get_all_study_names(f"sqlite:///{db}") == ["earlier"]


def test_warm_start_through_the_cli_and_the_api_trains_the_earlier_best_first(tmp_path: Path) -> None:
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    data = write_tsv(tmp_path / "d.tsv", list(zip(*make_synthetic_reviews(60, seed=2), strict=True)))
    args = cli_args(db, space, data, "--quiet", "--artifact-store", str(tmp_path / "art"))
    assert main([*args, "--study-name", "first", "--n-trials", "2"]) == 0
    best = hpo.load("first", storage=db).best_trial
    study = hpo.optimize(
        space, data, text_column="sentence", storage=db, study_name="second", n_trials=1, device="cpu",
        artifact_store=str(tmp_path / "art"), warm_start="first", warm_start_trials=1,
    )
    (trial,) = study.get_trials()
    assert trial.state == TrialState.COMPLETE and trial.params == best.params
    assert trial.user_attrs["enqueued_from"] == f"study:first:{best.number}"


def test_a_fix_never_rewrites_a_warm_start_trial_it_contradicts(tmp_path: Path) -> None:
    """A run with --fix batch_size=16 enqueued the earlier study's best {learning_rate: 1e-3, batch_size: 8} as batch 16,
    recorded as study:earlier:0: a configuration the earlier study never ran, while the one it found good never ran here.
    Now a warm start's trials are enqueued as written, as the space's enqueue entries are: the pinned run leaves it
    waiting, and a run without the fix trains it."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    earlier = optuna.create_study(storage=url, study_name="earlier", direction="maximize")
    distributions = {"learning_rate": FloatDistribution(1e-4, 1e-2, log=True), "batch_size": CategoricalDistribution([8, 16])}
    earlier.add_trial(optuna.trial.create_trial(params={"learning_rate": 1e-3, "batch_size": 8}, value=0.9, distributions=distributions))
    common = {"storage": url, "study_name": "new", "device": "cpu", "artifact_store": None, "warm_start": "earlier", "warm_start_trials": 1}
    study = hpo.optimize(SPACE, DATA, n_trials=1, fix=["batch_size=16"], **common)
    (ran,) = study.get_trials(states=(TrialState.COMPLETE,))
    assert "enqueued_from" not in ran.user_attrs and ran.params["batch_size"] == 16
    assert [t.system_attrs["fixed_params"] for t in _waiting(study)] == [{"learning_rate": 1e-3, "batch_size": 8}]
    study = hpo.optimize(SPACE, DATA, n_trials=2, **common)  # a run without the fix trains it as the earlier study did
    ran = {t.user_attrs.get("enqueued_from"): t.params for t in study.get_trials(states=(TrialState.COMPLETE,))}
    assert ran["study:earlier:0"] == {"learning_rate": 1e-3, "batch_size": 8}


def test_known_good_trials_run_before_the_fp32_baseline_and_one_with_its_params_is_the_baseline(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    _earlier_study(url, {1e-3: 0.8, 2e-3: 0.7})
    precision = {"type": "categorical", "choices": ["fp32", "bf16"]}
    space = parse_search_space({
        **SPACE, "params": {**SPACE["params"], "learning_rate": {**LR, "default": 2e-3}, "fp_precision": precision},
        "enqueue": [{"learning_rate": 1e-3, "batch_size": 16, "fp_precision": "bf16"}],
    })
    for _ in range(2):  # a rerun, or a second worker, enqueues nothing again
        prepared = prepare_study(space, DATA, RunOptions(storage=url, study_name="new", warm_start="earlier", warm_start_trials=2))
    waiting = _waiting(prepared.study)
    entry = space_origin({"learning_rate": 1e-3, "batch_size": 16, "fp_precision": "bf16"})
    assert [t.user_attrs.get("enqueued_from") for t in waiting] == [entry, "study:earlier:0", "study:earlier:1", None]
    assert [bool(t.user_attrs.get(hpo.BASELINE_ATTR)) for t in waiting] == [False, False, False, True]
    assert prepared.study.ask().user_attrs["enqueued_from"] == entry  # the waiting trials run in this order

    # The baseline's params (fp32, learning rate at its default 2e-3, batch size 8) enqueued as known-good: that trial is it.
    same = parse_search_space({**space.stored_form(), "enqueue": [{"learning_rate": 2e-3, "batch_size": 8, "fp_precision": "fp32"}]})
    for _ in range(2):
        study = open_study(create_storage(url), "twin", same, DATA, 0)
    (trial,) = _waiting(study)
    assert trial.user_attrs["enqueued_from"] == space_origin(same.enqueued_params()[0]) and trial.user_attrs[hpo.BASELINE_ATTR] is True
