"""The commands (``python -m hpo <command>``) and their shared parsing.

Each command is a module ``hpo.cli._<command>`` with ``main(argv) -> exit code``, run as
``python -m hpo.<command>`` through a thin entry module. Nothing is imported here: a command
pays only for what it uses (``check`` imports torch once its flags are read, ``status`` never).
"""

__all__: list[str] = []
