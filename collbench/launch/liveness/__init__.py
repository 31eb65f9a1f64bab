"""A rank that dies, hangs or is cut off is named, and its job ended on every host: each rank's
``guardian``, the job's ``coordinator``, a guardian's ``link`` to it, the ``wire`` they speak
(and the exit codes and timings they agree on), what a rank asks of its guardian
(``supervise``), ``--timeout`` (``watchdog``), ``signals`` on a rank, and the kernel's
out-of-memory killer (``oom``). The whole picture: ``supervise``'s docstring."""
