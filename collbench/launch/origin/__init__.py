"""Who started this process: the launcher, rank and world size (``launcher``), whether MPI can
start from it (``pmi``), and whether what a rank prints reaches a person's terminal
(``terminal``)."""
