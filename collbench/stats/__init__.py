"""The statistics: every number collbench prints about a row, and every verdict of compare.

``calibration`` (every constant that moves a verdict, an interval or a row's p50, with the
measurement that set it, and ``TERMS``: each term of a verdict by name), ``distributions``
(normal, t, F and chi² in plain Python), ``samples`` (one round's samples: median and its
order-statistic CI), ``noise`` (which of a row's rounds count, by its own rounds; the file's
noise model, a trend per backend setup and timing, that shapes a row's interval and ‡),
``rounds`` (a row across rounds: centre, interval, spread), ``runs`` (whole runs of one side:
their drift, the slow ones of a merged file, a run's floor), ``change`` (the change between two
sides' rounds, paired or not: its CI and p-value; what a spread can detect, the rounds it
needs), ``holds`` (rules that keep a row from a verdict: starved ranks, the machine's states),
``family`` (max-T over the rows of a comparison), ``verdict`` (each row's verdict from all of
these).

Pure functions on numbers: nothing here reads a result file, prints or measures.

May import: ``collbench.errors``, numpy.
"""
