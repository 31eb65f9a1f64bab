"""Exceptions that end a run with a one-line message instead of a traceback."""


class CollbenchError(Exception):
    """A failure explained in one line; ``exit_code`` is what the process returns."""

    exit_code = 1


class UsageError(CollbenchError):
    """Bad input: a value, an option combination or an environment we cannot use."""

    exit_code = 2


class BackendUnavailable(UsageError):
    """A backend that cannot run here (missing package, missing device)."""
