"""How the ranks of a job on several hosts reach each other: joining rank 0's coordinator,
torch's store and gloo's interface (``rendezvous``), and this host's ``addresses``, routes and
free ports."""
