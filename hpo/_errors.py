"""Errors a user can fix: the CLI prints the message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input (flags, search space, data, model, storage); the message names the fix."""
