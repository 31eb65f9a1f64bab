"""Taking numbers and summarising them.

``harness`` (the timed loop of one size), ``timings`` (what a sample is: latency, throughput,
graph, device), ``stats`` (one round's samples: median and its CI),
``noise`` (a file's noise model: each row's expected spread of rounds from a trend per backend
and timing), ``runstats`` and ``distributions`` (statistics over rounds: geometric mean, t
interval, drift between runs), ``comparison`` (the change between two sides' rounds: its CI and
p-value, what a spread lets a comparison detect, the rounds it needs),
``sizes`` (parsing and printing sizes), ``memory`` (what fits).

May import: ``collbench.errors``, ``collbench.benchmarks`` and ``collbench.backends.base``
(the harness drives a bound call), numpy. Nothing here imports mpi4py or torch.
"""
