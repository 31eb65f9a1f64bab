"""collbench launching its own ranks when no launcher did, one launch per round (``spawn``),
through ``mpiexec`` or as local processes; ``relay`` copies mpiexec's output to ours less its
noise, and a stand-in (``janitor``) finishes for the launching process should it be killed."""
