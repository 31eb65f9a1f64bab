"""Parsing and formatting of message-size specifications.

Accepted forms (units are 1024-based, as in nccl-tests):

* ``4096``, ``64K``, ``1MiB``  - one size
* ``1K-1G``                    - powers of two from 1K to 1G
* ``8-1M:x4``                  - geometric, factor 4
* ``1K-64K:+8K``               - arithmetic, step 8K
* ``8,1K,1M``                  - a list; each item may itself be a range
"""

from __future__ import annotations

import re

from collbench.errors import UsageError

UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tib": 1 << 40,
}
MAX_SIZE_BYTES = 1 << 40
MAX_SIZE_COUNT = 10_000

#: ASCII digits only: Python's \d and int() also take other scripts' digits and underscores
#: ("٨" is 8, "8_0" is 80), which no size is written with
#: A number as collbench reads one everywhere (options, --threshold, --sizes, CSV cells): ASCII
#: digits, no "_" between them, though Python's int() and float() also take "٢", "５" and "1_0".
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+", re.ASCII)
DECIMAL_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_QUANTITY = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$", re.ASCII)
_ALLOWED = "bytes with an optional unit B, K, M, G, T (or KiB, MiB, GiB, TiB)"


def _short(text: str) -> str:
    """What the user wrote, cut to a length one line can show."""
    text = text.strip()
    return text if len(text) <= 40 else text[:20] + "…" + text[-10:]


def parse_bytes(text: str) -> int:
    """Parse one quantity such as ``64K`` into bytes."""
    m = _QUANTITY.match(text)
    if not m:
        raise UsageError(f"bad size {_short(text)!r}: expected {_ALLOWED}, e.g. 4096, 64K, 1MiB")
    if len(m.group(1)) > 15:          # beyond any limit below, and int() of 5000 digits raises
        raise UsageError(f"bad size {_short(text)!r}: larger than the 1 TiB limit")
    number, unit = int(m.group(1)), m.group(2).lower()
    if unit not in UNITS:
        raise UsageError(f"bad size {_short(text)!r}: unknown unit {m.group(2)!r}; use {_ALLOWED}")
    return number * UNITS[unit]


def _positive(text: str) -> int:
    value = parse_bytes(text)
    if value <= 0:
        raise UsageError(f"bad size {_short(text)!r}: sizes must be positive")
    if value > MAX_SIZE_BYTES:
        raise UsageError(f"bad size {_short(text)!r}: larger than the 1 TiB limit")
    return value


def _parse_range(item: str) -> list[int]:
    body, _, step = item.partition(":")
    lo_text, _, hi_text = body.partition("-")
    if not lo_text.strip() or not hi_text.strip():
        raise UsageError(f"bad size range {_short(item)!r}: expected START-END, e.g. 1K-1M")
    lo, hi = _positive(lo_text), _positive(hi_text)
    if lo > hi:
        raise UsageError(f"bad size range {_short(item)!r}: start is larger than end")
    step = step.strip()
    if not step:
        factor, increment = 2, 0
    elif step[0] in "xX*":
        if len(step) > 12:
            raise UsageError(f"bad size step {_short(step)!r} in {_short(item)!r}: the factor is "
                             "too large")
        digits = step[1:].strip()
        if not (digits.isascii() and digits.isdigit()):
            raise UsageError(f"bad size step {_short(step)!r} in {_short(item)!r}: expected xN, "
                             "e.g. x4")
        factor, increment = int(digits), 0
        if factor < 2:
            raise UsageError(f"bad size step {_short(step)!r} in {_short(item)!r}: the factor must "
                             "be at least 2")
    elif step[0] == "+":
        factor, increment = 1, parse_bytes(step[1:]) if step[1:].strip() else 0
        if increment <= 0:
            raise UsageError(f"bad size step {_short(step)!r} in {_short(item)!r}: the step must "
                             "be a positive size, e.g. +8K")
    else:
        raise UsageError(f"bad size step {_short(step)!r} in {_short(item)!r}: use xN (factor) or "
                         "+SIZE (step)")
    sizes, value = [], lo
    while value <= hi:
        sizes.append(value)
        if len(sizes) > MAX_SIZE_COUNT:
            raise UsageError(f"size range {_short(item)!r} gives more than {MAX_SIZE_COUNT} sizes")
        value = value * factor + increment
    return sizes


def parse_sizes(spec: str) -> list[int]:
    """Parse a ``--sizes`` value into a sorted list of distinct byte counts."""
    items = [part.strip() for part in spec.split(",")]
    if not spec.strip() or any(not part for part in items):
        raise UsageError(f"bad --sizes {_short(spec)!r}: empty item; expected e.g. 1K-1M, 8-1M:x4, "
                         "8,1K,1M")
    sizes: set[int] = set()
    for item in items:
        if "-" in item or ":" in item:
            sizes.update(_parse_range(item))
        else:
            sizes.add(_positive(item))
    if len(sizes) > MAX_SIZE_COUNT:
        raise UsageError(f"--sizes {_short(spec)!r} gives more than {MAX_SIZE_COUNT} sizes")
    return sorted(sizes)


def format_size(n: int) -> str:
    """Short 1024-based label: 8, 1K, 64K, 1M, 3G; exact bytes when not a round unit."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)
