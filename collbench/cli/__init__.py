"""The command line: ``app`` (the click group, the collective commands and ``main``),
``options`` (each measuring command's options, and why one does not apply), ``results``
(compare, report, plot, merge), ``export`` (result files for CI trackers), ``env`` (what
collbench detects here), ``params`` (option types that refuse non-finite numbers), ``streams``
(stdout and stderr that cannot change the exit code: closed, unencodable, or a broken pipe).

Thin: options are parsed here and handed to ``collbench.run`` and ``collbench.analysis``.

May import: every package of collbench, click; the heavy ones (rich, the run, the analysis)
inside the commands, so that ``--help`` stays fast.
"""
