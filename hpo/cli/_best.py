"""``python -m hpo.best``: the best trial of a study (its Pareto front, with several objectives) as a reusable config.

Each trial comes with its objective values, its sampled params and ``fixed``: the trial's
resolved training config (the ``config`` user attribute, run flags such as the seed left out),
which pasted into a search space's ``fixed:`` section trains that configuration again.

examples:
  %(prog)s --study-name precision-demo                  # YAML, fixed: block ready to paste
  %(prog)s --study-name precision-demo --format space > best.yaml   # then: python -m hpo run --space best.yaml
  %(prog)s --study-name sst2 --format json --storage postgresql://user:pass@db:5432/hpo
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import optuna

from hpo._errors import UserError
from hpo._files import write_whole
from hpo.cli._parsing import Parser, add_storage_argument, command_prog, exit_code_of, run_storage_command
from hpo.reporting._export import (
    best_document,
    best_json,
    best_space,
    best_space_yaml,
    best_yaml,
    learned_nothing_note,
    trial_entry,
)
from hpo.storage._best_model import export_best_model
from hpo.storage._checkpoints import DEFAULT_ARTIFACT_DIR
from hpo.storage._inspect import load_existing_study, objective_names, open_existing_storage

PROG = command_prog("best")
# Beside the saved model: the trial's values, params and fixed config, as `best` prints them.
BEST_CONFIG_FILE = "hpo-best.yaml"


def build_parser() -> Parser:
    parser = Parser(PROG, __doc__)
    parser.add_argument("--study-name", default=None, help="the study to read (default: the storage's only study)")
    add_storage_argument(parser)
    parser.add_argument(
        "--format", choices=("yaml", "json", "space"), default="yaml",
        help="output format; space: a search space that retrains the best trial (python -m hpo run --space) (default: %(default)s)",
    )
    parser.add_argument(
        "--save-model", default=None, metavar="DIR",
        help="write the best trial's kept model and tokenizer (save_pretrained format; LoRA merged) and its config to DIR",
    )
    parser.add_argument(
        "--artifact-store", default=None,
        help=f"the artifact directory the study ran with, for --save-model (default: {DEFAULT_ARTIFACT_DIR})",
    )
    return parser


def _save_model(study: optuna.Study, args: argparse.Namespace) -> None:
    if args.format != "yaml":  # the model's directory gets its config as YAML; a --format would be silently ignored
        raise UserError(f"--format {args.format} prints the best trial; --save-model writes its model: pass one of them")
    directory = Path(args.save_model)
    kept = export_best_model(study, args.artifact_store or DEFAULT_ARTIFACT_DIR, directory)
    trial = study.trials[kept["trial"]]
    document = {"study": study.study_name, **trial_entry(trial, objective_names(study))}
    write_whole(directory / BEST_CONFIG_FILE, best_yaml(document), "the best trial's config")
    print(f"Wrote the model of trial {kept['trial']} ({kept['model']}) and {BEST_CONFIG_FILE} to {directory}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the best trial(s); return the process exit code."""

    def body(args: argparse.Namespace, url: str) -> int:
        if args.artifact_store is not None and args.save_model is None:  # else ignored without a word
            raise UserError("--artifact-store is where --save-model finds the model; add --save-model DIR, or drop it")
        study = load_existing_study(open_existing_storage(url), url, args.study_name)
        if args.save_model is not None:
            _save_model(study, args)
        elif args.format == "space":
            print(best_space_yaml(study, best_space(study)), end="")
        else:
            document = best_document(study)
            print(best_yaml(document) if args.format == "yaml" else best_json(document), end="")
        if (note := learned_nothing_note(study)) is not None:  # on stderr, once all went well: stdout stays the config
            print(f"{PROG}: note: {note}", file=sys.stderr)
        return 0

    return run_storage_command(PROG, build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(exit_code_of(main))
