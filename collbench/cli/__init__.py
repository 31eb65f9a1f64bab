"""The command line: ``app`` (the click group, the collective commands and ``main``),
``results`` (compare, report, plot, merge), ``env`` (what collbench detects here).

Thin: options are parsed here and handed to ``collbench.run`` and ``collbench.analysis``.
"""
