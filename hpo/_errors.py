"""Errors a user can fix: the CLI prints the message as one line and exits non-zero."""

import difflib

from trial_executor.data import bounded_list

__all__ = ["UserError", "bounded_list", "did_you_mean", "suggest_key"]


class UserError(Exception):
    """Bad input (flags, search space, data, model, storage); the message names the fix."""


def did_you_mean(name: str, choices: list[str]) -> str:
    """``did you mean 'x'? `` for the nearest of ``choices``, else ``""``."""
    match = difflib.get_close_matches(name, choices, n=1)
    return f"did you mean {match[0]!r}? " if match else ""


def suggest_key(key: str, valid: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the nearest of ``valid``, else `` (valid keys: ...)``."""
    hint = did_you_mean(key, valid)
    return f" ({hint.strip()})" if hint else f" (valid keys: {bounded_list(valid)})"
