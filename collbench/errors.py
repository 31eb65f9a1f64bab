"""Exceptions that end a run with a one-line message instead of a traceback."""


class CollbenchError(Exception):
    """A failure explained in one line; ``exit_code`` is what the process returns."""

    exit_code = 1
    #: Under a launcher, every rank met this same error (options, a decision rank 0 broadcast):
    #: rank 0 alone says it. Errors of one rank (its rendezvous, its environment) are said by it.
    every_rank = False


class UsageError(CollbenchError):
    """Bad input: a value, an option combination or an environment we cannot use."""

    exit_code = 2


class BackendUnavailable(UsageError):
    """A backend that cannot run here (missing package, missing device)."""


class BackendDeclined(BackendUnavailable):
    """Raised by a backend's ``setup`` when it cannot run as the user set it up here, and every
    rank finds the same (an MPI library that cannot take GPU memory): the run goes on without
    it, with a note."""


class SharedUsageError(UsageError):
    """Bad input that every rank of a job meets alike (its options, or a decision rank 0
    broadcast): under a launcher only rank 0 says it."""

    every_rank = True
