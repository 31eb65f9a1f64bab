"""Distribution functions the statistics need, in plain Python (scipy is not a dependency).

* ``normal_cdf`` / ``normal_quantile`` — the standard normal.
* ``t_cdf`` / ``t_quantile`` — Student's t with any positive (also fractional) degrees of
  freedom, through the regularized incomplete beta function; ``math.inf`` degrees of freedom
  is the normal. Accurate to about 1e-9, which the tests check against scipy.
"""

from __future__ import annotations

import math
from functools import lru_cache

_TINY = 1e-300


def normal_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def normal_quantile(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be inside (0, 1), got {p}")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
         1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
         6.680131188771972e01, -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
         -2.549671010114517e00, 4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    if p > 1 - 0.02425:
        return -normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if df <= 0 or math.isnan(df) or math.isnan(t):
        raise ValueError(f"t_cdf needs df > 0 and a number, got t={t}, df={df}")
    if math.isinf(df):
        return normal_cdf(t)
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of a t statistic."""
    if math.isinf(df):
        return min(1.0, math.erfc(abs(t) / math.sqrt(2.0)))
    if math.isinf(t):
        return 0.0
    return min(1.0, incomplete_beta(df / 2.0, 0.5, df / (df + t * t)))


def chi2_quantile(p: float, df: float) -> float:
    """Chi-square quantile, Wilson–Hilferty approximation (within 1% from 2 degrees of freedom
    on in the upper tail, which is what a pretest needs)."""
    if df <= 0 or not 0.0 < p < 1.0:
        raise ValueError(f"chi2_quantile needs df > 0 and p in (0, 1), got df={df}, p={p}")
    z = normal_quantile(p)
    h = 2.0 / (9.0 * df)
    return df * max(1.0 - h + z * math.sqrt(h), 0.0) ** 3


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t value with P(T <= t) = p: bisection on the upper tail, which keeps its relative
    precision far out where ``1 - t_cdf`` would round to nothing."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be inside (0, 1), got {p}")
    if math.isinf(df):
        return normal_quantile(p)
    if p == 0.5:
        return 0.0
    tail = min(p, 1.0 - p)
    sign = 1.0 if p > 0.5 else -1.0

    def upper(t: float) -> float:
        return 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))

    lo, hi = 0.0, max(1.0, normal_quantile(p))
    while upper(hi) > tail:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            return sign * math.inf
    for _ in range(300):
        mid = 0.5 * (lo + hi)
        if upper(mid) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return sign * 0.5 * (lo + hi)


def f_cdf(x: float, d1: float, d2: float) -> float:
    """P(F <= x) for Fisher's F with ``d1`` and ``d2`` degrees of freedom (``d2`` may be
    infinite: chi²(d1)/d1)."""
    if d1 <= 0 or d2 <= 0:
        raise ValueError(f"f_cdf needs positive degrees of freedom, got {d1}, {d2}")
    if x <= 0.0:
        return 0.0
    if math.isinf(x):
        return 1.0
    if math.isinf(d2):
        return _gamma_lower(d1 / 2.0, d1 * x / 2.0)
    return incomplete_beta(d1 / 2.0, d2 / 2.0, d1 * x / (d1 * x + d2))


def _gamma_lower(a: float, x: float) -> float:
    """The regularized lower incomplete gamma function P(a, x) (series, or continued fraction
    beyond a + 1)."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return min(1.0, math.exp(log_front) * total)
    b, c, d = x + 1.0 - a, 1.0 / _TINY, 1.0 / (x + 1.0 - a)
    h = d
    for n in range(1, 1000):
        an = -n * (n - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = b + an / c
        c = c if abs(c) > _TINY else _TINY
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


@lru_cache(maxsize=4096)
def f_quantile(p: float, d1: float, d2: float) -> float:
    """The x with P(F <= x) = p, by bisection on ``f_cdf``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be inside (0, 1), got {p}")
    lo, hi = 0.0, 1.0
    while f_cdf(hi, d1, d2) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            return math.inf
    for _ in range(300):
        mid = 0.5 * (lo + hi)
        if f_cdf(mid, d1, d2) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return 0.5 * (lo + hi)
