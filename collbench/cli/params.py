"""Option types that refuse what ``float()`` lets through: ``nan``, ``inf``, ``1e300``.

click's ``FloatRange`` compares with the bounds, and a NaN compares false with everything, so
``--precision nan`` would pass it and reach the stop rule. Every number an option takes here is
finite and inside stated bounds, or the command stops with one line naming the option.
"""

from __future__ import annotations

import math
from typing import Optional

import click

from collbench.measure.sizes import DECIMAL_NUMBER, WHOLE_NUMBER



def spelled_apart(text: str, *, whole: bool = False) -> bool:
    """Whether ``text`` is a number Python reads but collbench does not: digits other than
    ASCII's, or "_" between them (``inf`` and ``nan`` are refused elsewhere, as not finite)."""
    text = text.strip()
    if (WHOLE_NUMBER if whole else DECIMAL_NUMBER).fullmatch(text):
        return False
    try:
        int(text) if whole else float(text)
    except ValueError:
        return False
    return whole or text.lower().lstrip("+-") not in ("inf", "infinity", "nan")


class Whole(click.IntRange):
    """click's IntRange, in ASCII digits only."""

    def convert(self, value, param: Optional[click.Parameter], ctx: Optional[click.Context]):
        if isinstance(value, str) and spelled_apart(value, whole=True):
            self.fail(f"{value!r}: write it in the digits 0-9, without '_'", param, ctx)
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        """click's "[1<=x<=1000]" in the help; nothing for a whole number with no bound of its own
        (click said "[x<=None]")."""
        return "" if self.min is None and self.max is None else super()._describe_range()


class Bounded(click.ParamType):
    """A finite float in [low, high] (``low_open``: low itself excluded)."""

    name = "number"

    def __init__(self, low: float, high: float, *, low_open: bool = False, high_open: bool = False,
                 unit: str = "") -> None:
        self.low, self.high, self.low_open, self.high_open, self.unit = (low, high, low_open,
                                                                         high_open, unit)

    def convert(self, value, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            if spelled_apart(str(value)):
                self.fail(f"{value!r}: write it in the digits 0-9, without '_'", param, ctx)
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        too_low = number <= self.low if self.low_open else number < self.low
        too_high = number >= self.high if self.high_open else number > self.high
        if not math.isfinite(number) or too_low or too_high:
            self.fail(f"{value!r} is not {self.describe()}", param, ctx)
        return number

    def describe(self) -> str:
        low = f"{'more than' if self.low_open else 'at least'} {self.low:g}"
        high = f"{'less than' if self.high_open else 'at most'} {self.high:g}"
        return f"a finite number {low} and {high}{' ' + self.unit if self.unit else ''}"

    def get_metavar(self, param, ctx=None) -> str:      # click 8.1 and 8.2 call it differently
        return "SECONDS" if self.unit == "seconds" else "FLOAT"


#: --timeout: a week is longer than any one size should take; 0 turns the watchdog off.
TIMEOUT = Bounded(0, 7 * 24 * 3600, unit="seconds")
#: --max-time: per size, shared among the rounds.
MAX_TIME = Bounded(0, 24 * 3600, low_open=True, unit="seconds")
#: --precision: below 0.01% no machine's timer or noise lets the stop rule end.
PRECISION = Bounded(1e-4, 1, high_open=True)
#: compare --alpha.
ALPHA = Bounded(0, 1, low_open=True, high_open=True)


class Share(click.ParamType):
    """A share from 0 to 1, written as a percentage (80%) or a fraction (0.8)."""

    name = "share"

    def convert(self, value, param: Optional[click.Parameter],
                ctx: Optional[click.Context]) -> float:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        if spelled_apart(text[:-1] if text.endswith("%") else text):
            self.fail(f"{value!r}: write it in the digits 0-9, without '_'", param, ctx)
        try:
            number = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a share like 80% or 0.8", param, ctx)
        if not (math.isfinite(number) and 0.0 <= number <= 1.0):
            self.fail(f"{value!r} is not a share from 0% to 100%", param, ctx)
        return number

    def get_metavar(self, param, ctx=None) -> str:
        return "SHARE"


#: compare --min-decided.
SHARE = Share()


class Pair(click.ParamType):
    """Two distinct ranks, ``A,B``."""

    name = "pair"

    def get_metavar(self, param, ctx=None) -> str:
        return "A,B"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        parts = [part.strip() for part in str(value).split(",")]
        if len(parts) != 2 or not all(part.isdigit() and len(part) < 10 for part in parts):
            self.fail(f"{value!r} is not two ranks A,B (e.g. 0,1)", param, ctx)
        a, b = int(parts[0]), int(parts[1])
        if a == b:
            self.fail(f"{value!r} names rank {a} twice; a pair is two different ranks", param, ctx)
        return a, b


#: --pair: the two ranks of a point-to-point benchmark.
PAIR = Pair()


class SplitMode(click.ParamType):
    """--split: intra, inter, or a number of groups N (at least 2)."""

    name = "split"

    def get_metavar(self, param, ctx=None) -> str:
        return "intra|inter|N"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if text in ("intra", "inter"):
            return text
        if text.isdigit() and text.isascii() and len(text) < 10 and int(text) >= 2:
            return str(int(text))
        self.fail(f"{value!r} is not intra, inter or a number of groups of at least 2", param, ctx)


class Mask(click.ParamType):
    """--split-mask: a non-negative integer, decimal or 0x hexadecimal (as
    NCCL_TESTS_SPLIT_MASK)."""

    name = "mask"

    def get_metavar(self, param, ctx=None) -> str:
        return "MASK"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        try:
            mask = int(text, 16) if text.startswith("0x") else int(text, 10)
        except ValueError:
            mask = -1
        if not 0 < mask < 1 << 31 or len(text) > 12:
            self.fail(f"{value!r} is not a mask: a number from 1 to 2^31 - 1, decimal or 0x "
                      "hexadecimal",
                      param, ctx)
        return mask


class Choices(click.ParamType):
    """A comma list of ``choices``, each once, in the order given (``numpy,mpi``): a tuple."""

    name = "choices"

    def __init__(self, choices: tuple, every=None) -> None:
        self._choices = tuple(choices)
        #: every choice, plugins' included, asked only where ``choices`` lacks an item (a plugin
        #: is found and imported only when named) and for the help
        self._every = every

    @property
    def choices(self) -> tuple:
        return tuple(self._every()) if self._every is not None else self._choices

    def get_metavar(self, param, ctx=None) -> str:
        return "[" + "|".join(self.choices) + "],..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [item.strip().lower() for item in str(value).split(",")]
        wrong = [item for item in items if item not in self._choices]
        if wrong and self._every is not None:
            wrong = [item for item in wrong if item not in self.choices]
        if wrong:
            self.fail(f"{str(value)[:60]!r}: {wrong[0][:20]!r} is not one of "
                      f"{', '.join(self.choices)} (a comma list measures each side by side)", param,
                      ctx)
        return tuple(dict.fromkeys(items))


SPLIT = SplitMode()
MASK = Mask()
