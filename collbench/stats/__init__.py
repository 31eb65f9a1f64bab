"""The statistics: every number collbench prints about a row, and every verdict of compare.

``calibration`` (the constants that move a verdict, an interval or a p50, with the measurements
that set them, and ``TERMS``), ``distributions`` (normal, t, F and chi² in plain Python),
``samples`` (one round's median and CI), ``noise`` (which rounds count; the file's noise
model), ``rounds`` (a row across rounds), ``runs`` (whole runs of one side), ``change`` (the
change between two sides), ``holds`` (rules that keep a row from a verdict), ``family``
(max-T over a comparison's rows), ``verdict`` (each row's verdict).

Pure functions on numbers: nothing here reads a result file, prints or measures.

May import: ``collbench.errors``, numpy.
"""
