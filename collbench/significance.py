"""Multiple comparisons: a sweep compares tens of rows at once.

``holm`` gives Holm–Bonferroni adjusted p-values: with m rows tested, the chance that *any*
unchanged row is called slower or faster stays at or below alpha (the family-wise error
rate), whatever the dependence between rows. That is what a CI gate wants: a spurious red
build costs more than a regression caught one run later. Holm is uniformly more powerful
than plain Bonferroni, and valid where Benjamini–Hochberg's assumptions are not (rows of one
launch move together).
"""

from __future__ import annotations


def holm(p_values) -> list:
    """Holm–Bonferroni adjusted p-values, in the order given (compare each with alpha)."""
    p = [float(v) for v in p_values]
    m = len(p)
    adjusted = [0.0] * m
    running = 0.0
    for step, index in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - step) * p[index]))
        adjusted[index] = running
    return adjusted
