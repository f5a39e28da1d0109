"""What optuna-dashboard is given: metric names, one row per nested attribute, a note on skipped trials."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
import optuna_dashboard
import pytest
from _tiny_study import TINY
from optuna.trial import TrialState
from optuna_dashboard._serializer import serialize_attrs

import hpo
from hpo._attrs import SKIP_REASON_ATTR, stored_verdict
from hpo.reporting._dashboard_view import SKIP_HEADINGS, ReadableStorage, note_skipped
from hpo.reporting._verdict import Verdict, store_verdict
from trial_executor import demo_dataset

SPACE = {**TINY, "params": {**TINY["params"], "fp_precision": {"type": "categorical", "choices": ["fp32", "tf32"]}}}


def test_metric_names_note_on_a_skipped_precision_and_readable_attrs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"
    data = demo_dataset(n_train=120, n_valid=32, seed=1)
    # tf32 needs an Ampere GPU: on this CPU the enqueued tf32 trial is skipped at once; the fp32 baseline then runs.
    space = {**SPACE, "enqueue": [{"fp_precision": "tf32"}]}
    study = hpo.optimize(space, data, storage=url, study_name="d", n_trials=1, device="cpu", artifact_store=str(tmp_path / "a"))
    assert study.metric_names == ["accuracy"]
    # Skipped trials never count toward the budget: the fp32 trial after it is the one of the budget.
    skipped = next(t for t in study.get_trials() if t.user_attrs.get("skip_reason") == "unsupported_precision")
    assert skipped.state == TrialState.PRUNED
    note = optuna_dashboard.get_note(optuna.Trial(study, skipped._trial_id))
    assert note.startswith(f"## {SKIP_HEADINGS['unsupported_precision']}") and "tf32" in note

    # The dashboard's view: one row per leaf, each short; the storage itself keeps the nested dicts.
    complete = study.get_trials(states=(TrialState.COMPLETE,))[0]
    assert isinstance(complete.user_attrs["hardware"], dict)
    view = ReadableStorage(study._storage)
    shown = view.get_trial(complete._trial_id).user_attrs
    assert shown["hardware.device_type"] == "cpu" and shown["config.model"] == complete.user_attrs["config"]["model"]
    assert "hardware" not in shown and "metrics.accuracy" in shown
    rows = serialize_attrs(shown)
    assert max(len(row["value"]) for row in rows) < 200, max(rows, key=lambda r: len(r["value"]))
    assert len(json.dumps(complete.user_attrs["config"])) > 500  # what one row used to hold
    studies = view.get_all_studies()
    assert "search_space.params.model.type" in studies[0].user_attrs
    # Everything else goes straight through, writes included.
    assert view.get_study_id_from_name("d") == study._study_id
    assert [t.number for t in view.get_all_trials(study._study_id)] == [t.number for t in study.get_trials()]


def test_the_notes_are_left_out_where_optuna_dashboard_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # An environment with only some of our dependencies (the GPU kit carries optuna, not optuna-dashboard).
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)  # `import optuna_dashboard` now raises ImportError
    study = optuna.create_study(study_name="n", storage="sqlite:///:memory:")
    trial = study.ask()
    trial.set_user_attr(SKIP_REASON_ATTR, "unsupported_precision")
    study.tell(trial, state=TrialState.PRUNED)
    note_skipped(study, study.trials[0])  # the skip stays on the trial; only its dashboard note is missing
    verdict = Verdict(study="n", source_trial=0, metric="accuracy", unit="points", seeds=[0], rows=[], unsupported={"tf32": "CPU"},
                      devices=["cpu"])
    store_verdict(study, verdict)
    assert stored_verdict(study) == verdict.to_dict()


def test_the_dashboards_best_trial_is_the_one_the_commands_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    study = optuna.create_study(study_name="b", storage=url, direction="maximize")
    verdict = {"of_trial": 0, "precision": "bf16", "seed": 1, "seed_index": 1}
    for value, attrs in ((0.70, {}), (0.95, {"feasible": False}), (0.75, {"verdict_trial": verdict})):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    view = ReadableStorage(study._storage)
    assert study._storage.get_best_trial(study._study_id).number == 1  # the storage's highest value: infeasible
    assert view.get_best_trial(study._study_id).number == 0 == hpo.best_trials(study)[0].number
