"""``python -m hpo <command>``: one entry point for every command of the package.

Each command is also a module of its own (``python -m hpo run`` is ``python -m hpo.run``) and
takes the same flags; ``python -m hpo <command> --help`` describes them, with examples.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from hpo._errors import did_you_mean
from hpo.cli._parsing import exit_code_of

PROG = "python -m hpo"
# command -> what it does; each is the module hpo.cli._<command> with a main(argv) -> exit code
# (hpo/<command>.py, behind `python -m hpo.<command>`, only runs it).
COMMANDS = {
    "run": "run, resume or extend a study to its budget of finished trials",
    "status": "studies in a storage: trials by state, best so far, running trials and their heartbeats",
    "best": "the best trial (or Pareto front) of a study as a reusable config (YAML or JSON)",
    "export": "every trial of a study as flat CSV or JSON rows",
    "report": "per-precision tables and the trade-off plot of a study",
    "verdict": "the best configuration re-trained per precision with paired seeds: speed, memory, accuracy with 95% intervals",
    "check": "what this machine can run, and how fast, in each precision",
    "dashboard": "browse the studies in optuna-dashboard (127.0.0.1 by default)",
    "proxy": "share the database among many workers through Optuna's gRPC storage proxy",
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        f"usage: {PROG} <command> [flags]",
        "",
        "One entry point for every command; `python -m hpo <command>` is `python -m hpo.<command>`.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary}" for name, summary in COMMANDS.items()),
        "",
        "examples:",
        f"  {PROG} run --n-trials 20                  # the demo study, extended to 20 finished trials",
        f"  {PROG} status                             # where every study in the storage stands",
        f"  {PROG} best --study-name precision-demo   # the best config, as YAML",
        f"  {PROG} <command> --help                   # the flags of one command",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to ``hpo.cli._<command>.main``; return the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        hint = did_you_mean(command, list(COMMANDS))
        print(f"{PROG}: error: unknown command {command!r}; {hint}choose one of {', '.join(COMMANDS)} (see --help)", file=sys.stderr)
        return 2
    # The command's own module, not the entry module hpo.<command>: hpo.verdict is also a function.
    module = importlib.import_module(f"hpo.cli._{command}")
    return int(exit_code_of(module.main, rest))


if __name__ == "__main__":
    sys.exit(main())
