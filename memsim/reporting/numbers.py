"""Printed numbers: means and intervals rounded to the precision the
interval supports, one number of decimals per table column.

Every table memsim prints (the report, the terminal headline, a notebook's
view of a run) formats its numbers here, so that one metric reads the
same everywhere: shares with 3 decimals, other metrics at the decimal
place their intervals support, never scientific notation and never
``nan`` (``n/a``)."""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal
from typing import Iterable

from memsim.evaluation.metrics import AGE_BUCKET_COLUMNS, OLD_RECALL_COLUMN

__all__ = ["SHARE_METRICS", "round_to_ci", "format_ci", "column_decimals", "format_fixed",
           "format_p", "p_phrase"]

#: Shares and ratios: shown with a fixed 3 decimals in every table.
SHARE_METRICS = frozenset({
    "utility_share", "utility_ratio", "recall", "precision", "ndcg@10", "mrr", "stale_rate",
    "evicted_relevant", "answer_prob", "recall_gini", *AGE_BUCKET_COLUMNS, OLD_RECALL_COLUMN})


def round_to_ci(mean: float, lo: float, hi: float, digits: int = 2
                ) -> tuple[float, float, float, int]:
    """Round a mean and its interval to the precision the interval supports.

    The half-width ``h = (hi - lo) / 2`` is kept to ``digits`` significant
    digits and the mean and bounds are rounded to the same decimal place::

        decimals = digits - 1 - floor(log10(h))

    so 0.53412 [0.52113, 0.54721] (h = 0.013) becomes 0.534 [0.521, 0.547],
    and 1234.5 [1112.0, 1357.0] (h = 122) becomes 1230 [1110, 1360]
    (decimals = -1). Without a usable interval (NaN bounds, or ``lo == hi``)
    the mean keeps three significant digits.

    Parameters
    ----------
    mean, lo, hi : float
    digits : int
        Significant digits of the half-width.

    Returns
    -------
    (mean, lo, hi, decimals) : tuple
        Rounded values (NaN stays NaN) and the decimal place used
        (negative: tens, hundreds ...).
    """
    vals = [float(x) if x is not None else float("nan") for x in (mean, lo, hi)]
    m, a, b = vals
    h = (b - a) / 2.0 if math.isfinite(a) and math.isfinite(b) else float("nan")
    if math.isfinite(h) and h > 0:
        dec = digits - 1 - math.floor(math.log10(h))
    elif math.isfinite(m) and m != 0:
        dec = 2 - math.floor(math.log10(abs(m)))
    else:
        dec = 0
    dec = int(min(dec, 12))
    out = [round(x, dec) if math.isfinite(x) else x for x in vals]
    # round() may return -0.0; show it as 0
    out = [0.0 if x == 0 else x for x in out]
    return out[0], out[1], out[2], dec


def _fmt(x: float, dec: int, signed: bool = False) -> str:
    if not math.isfinite(x):
        return "n/a"
    if x == 0:
        x = 0.0  # no "-0.00"
    return f"{x:+.{max(dec, 0)}f}" if signed else f"{x:.{max(dec, 0)}f}"


def format_ci(mean: float, lo: float, hi: float, *, signed: bool = False,
              digits: int = 2) -> str:
    """``"mean [lo, hi]"`` rounded by :func:`round_to_ci`; ``"n/a"`` for NaN.

    ``signed`` prefixes a sign (for differences).
    """
    m, a, b, dec = round_to_ci(mean, lo, hi, digits)
    if not math.isfinite(m):
        return "n/a"
    if not (math.isfinite(a) and math.isfinite(b)):
        return _fmt(m, dec, signed)
    return f"{_fmt(m, dec, signed)} [{_fmt(a, dec, signed)}, {_fmt(b, dec, signed)}]"


def column_decimals(metric: str, means: Iterable[float], lows: Iterable[float] | None = None,
                    highs: Iterable[float] | None = None, *, max_decimals: int = 4,
                    default: int = 0) -> int:
    """One number of decimals for a whole table column of ``metric``.

    Shares and ratios (:data:`SHARE_METRICS`) always get 3. Other metrics get
    the coarsest decimal place that :func:`round_to_ci` gives a row of the
    column: the precision every row's interval supports (a row with a much
    narrower interval is shown with fewer digits than it could have, never
    with digits another row's interval makes meaningless), between 0 and
    ``max_decimals``. Rows without an interval (NaN bounds, or ``lo == hi``)
    count with three significant digits of their mean; a row that is exactly
    0 without an interval (a metric that never moved, such as ``harm`` when
    nothing stale is packed) says nothing about the scale and does not count.
    Whether the values happen to be whole numbers never matters: a mean of
    0/1 gains, 0.3333 [0.0667, 0.6], keeps its decimals (``0.33 [0.07, 0.60]``).
    A column of nothing but such zeros gets ``default`` decimals (0 unless
    the caller knows the metric's scale from elsewhere).
    """
    if metric in SHARE_METRICS:
        return 3
    means = list(means)
    lows = list(lows) if lows is not None else [math.nan] * len(means)
    highs = list(highs) if highs is not None else [math.nan] * len(means)
    decs = [round_to_ci(m, a, b)[3] for m, a, b in zip(means, lows, highs)
            if m is not None and math.isfinite(float(m)) and not _uninformative(m, a, b)]
    if not decs:
        return int(default)
    return int(min(max(min(decs), 0), max_decimals))


def _uninformative(mean: float, lo: float | None, hi: float | None) -> bool:
    """A row that is exactly 0 with no interval width: it fixes no decimal place."""
    if float(mean) != 0.0:
        return False
    lo = float("nan") if lo is None else float(lo)
    hi = float("nan") if hi is None else float(hi)
    return not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo <= 0


def format_fixed(mean: float, lo: float = float("nan"), hi: float = float("nan"), dec: int = 3,
                 *, signed: bool = False) -> str:
    """``"mean [lo, hi]"`` with exactly ``dec`` decimals (see :func:`column_decimals`).

    ``"n/a"`` for a NaN mean; the interval is left out when a bound is NaN.
    """
    if mean is None or not math.isfinite(float(mean)):
        return "n/a"
    m = _fmt(round(float(mean), dec), dec, signed)
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return m
    return (f"{m} [{_fmt(round(float(lo), dec), dec, signed)}, "
            f"{_fmt(round(float(hi), dec), dec, signed)}]")


def format_p(p: float) -> str:
    """A p-value for a table: two significant digits below 0.1, two decimals
    above, ``<0.001`` below 0.001.

    Rounded down, never up: 0.0496 prints 0.049, not 0.05, so that a
    p-value below a threshold of two digits (0.05, 0.01, 0.1) never prints
    at or above it beside a verdict of "significant"."""
    if p is None or not math.isfinite(p):
        return "n/a"
    if p < 0.001:
        return "<0.001"
    d = Decimal(repr(float(p)))  # the shortest decimal that reads back as p
    if p >= 0.1:
        return format(d.quantize(Decimal("0.01"), rounding=ROUND_FLOOR), "f")
    # as the "g" format writes it: no trailing zero (0.07, not 0.070)
    two = d.quantize(Decimal(1).scaleb(d.adjusted() - 1), rounding=ROUND_FLOOR)
    return format(two.normalize(), "f")


def p_phrase(p: float | None) -> str:
    """A p-value in a sentence: ``p = 0.25``, ``p < 0.001``, ``p n/a``."""
    fp = format_p(p)
    if fp.startswith("<"):
        return "p " + fp.replace("<", "< ")
    return f"p {fp}" if fp == "n/a" else f"p = {fp}"
