"""Subcommands that work on result files (compare, report, plot)."""


def register(group) -> None:
    """Add the result-file subcommands to the ``collbench`` group."""
