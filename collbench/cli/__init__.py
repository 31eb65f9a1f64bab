"""The command line: ``app`` (the click group, the collective commands and ``main``),
``results`` (compare, report, plot, merge), ``export`` (result files for CI trackers), ``env`` (what collbench detects here), ``params``
(option types that refuse non-finite numbers), ``streams`` (stdout and stderr that cannot
change the exit code: closed, unencodable, or a broken pipe).

Thin: options are parsed here and handed to ``collbench.run`` and ``collbench.analysis``.
"""
