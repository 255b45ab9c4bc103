"""Exact 0/1 knapsack over integer token sizes.

One solver serves two users: the ``exact`` packer
(:class:`memsim.policies.packing.Exact`) and the metrics' oracle (the
denominator of ``utility_ratio``, :func:`knapsack_value`). It sits below both
layers and imports nothing of memsim but params and errors.

Problem, for one query: maximise ``sum(v[S])`` subject to ``sum(t[S]) <= B``
over subsets ``S`` (Kellerer, Pferschy & Pisinger, *Knapsack Problems*, 2004,
ch. 2). :func:`solve` takes notes that are all candidates (``v > 0``,
``0 <= t <= B``) and:

1. takes every note when they all fit, and every free (0-token) note always;
2. divides the sizes and the budget by the gcd of the sizes (exact);
3. runs the dynamic programme (:func:`dp_select`, O(n B) time and memory) or,
   above ``milp_budget``, HiGHS (:func:`milp_select`, branch and bound,
   ``mip_rel_gap = 0``); a HiGHS run that does not prove optimality in time
   falls back to the DP;
4. when the DP table would exceed ``max_cells``, runs the DP on sizes rounded
   up to buckets of width :func:`bucket_width` (always feasible, no longer
   exactly optimal), unless ``never_bucket``; the caller may pass a
   ``heuristic`` whose answer is kept when it beats the bucketed one.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

__all__ = ["dp_select", "milp_select", "bucket_width", "solve", "knapsack_value",
           "ORACLE_MAX_CELLS"]

#: Largest DP table of the oracle's solver (booleans): larger than the
#: packer's default, because the oracle must be exact and runs only on the
#: queries whose R+ overflows the budget.
ORACLE_MAX_CELLS = 2**27


def dp_select(v: np.ndarray, t: np.ndarray, cap: int) -> np.ndarray:
    """Exact 0/1 knapsack for one query by dynamic programming.

    ``dp[b]`` = best value with capacity ``b`` after the items seen so far;
    item ``j`` updates ``dp[b] = max(dp[b], dp[b - t_j] + v_j)`` for all
    ``b >= t_j`` at once (one numpy max over shifted arrays), and records where
    taking ``j`` was strictly better in a boolean table for the backtrack.

    Parameters
    ----------
    v : ndarray, shape (n,)
        Values.
    t : ndarray of int, shape (n,)
        Sizes, integers in ``[0, cap]``.
    cap : int
        Capacity.

    Returns
    -------
    ndarray of bool, shape (n,)
        One optimal set. O(n * cap) time and memory.
    """
    n = len(v)
    dp = np.zeros(cap + 1)
    take = np.zeros((n, cap + 1), dtype=bool)
    for j in range(n):
        w = int(t[j])
        # the right-hand side is a new array, so the update reads the old dp
        # (each item is used at most once).
        cand = dp[: cap + 1 - w] + v[j]
        better = cand > dp[w:]
        take[j, w:] = better
        np.maximum(dp[w:], cand, out=dp[w:])
    chosen = np.zeros(n, dtype=bool)
    b = cap
    for j in range(n - 1, -1, -1):
        if take[j, b]:
            chosen[j] = True
            b -= int(t[j])
    return chosen


_STDOUT_LOCK = threading.Lock()


@contextmanager
def _quiet_c_stdout() -> Iterator[None]:
    """Silence C-level stdout for the duration (HiGHS 1.x prints a stray debug
    line, "HighsMipSolverData::transformNewIntegerFeasibleSolution", on some
    knapsacks even with ``disp=False``; the CLI's stdout is a contract)."""
    with _STDOUT_LOCK:
        try:
            fd = os.dup(1)
        except OSError:  # no stdout at all
            yield
            return
        # Python's own buffered output must reach the real stdout first, and
        # C's buffer must be emptied into /dev/null before fd 1 is restored.
        if sys.stdout is not None:
            sys.stdout.flush()
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                yield
        finally:
            _c_fflush()
            os.dup2(fd, 1)
            os.close(fd)


def _c_fflush() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # pragma: no cover (no libc)
        pass


def milp_select(v: np.ndarray, t: np.ndarray, cap: int,
                time_limit: float) -> np.ndarray | None:
    """Exact 0/1 knapsack for one query with HiGHS (``scipy.optimize.milp``).

    Returns
    -------
    ndarray of bool or None
        The chosen set, or None when HiGHS does not prove optimality within
        ``time_limit`` seconds (the caller then falls back to the DP).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    # Scale the objective to max 1e3: HiGHS stops at an absolute gap of 1e-6,
    # which on the scaled problem is a relative gap of 1e-9 at most.
    scale = 1e3 / float(v.max())
    with _quiet_c_stdout():
        res = milp(
            c=-v * scale,
            constraints=LinearConstraint(t.astype(np.float64)[None, :], -np.inf, float(cap)),
            integrality=np.ones(len(v)),
            bounds=Bounds(0.0, 1.0),
            options={"mip_rel_gap": 0.0, "time_limit": float(time_limit), "presolve": True},
        )
    if res.status != 0 or res.x is None:
        return None
    chosen = res.x > 0.5
    if int(t[chosen].sum()) > cap:  # defensive: rounding never lets a row overflow
        return None
    return chosen


def bucket_width(n: int, cap: int, max_cells: int) -> int:
    """Smallest bucket width ``w`` such that ``n * (cap // w + 1) <= max_cells``
    (``w = 1`` when the exact table fits)."""
    if n * (cap + 1) <= max_cells:
        return 1
    k = max(max_cells // max(n, 1) - 1, 1)  # largest allowed cap // w
    return cap // (k + 1) + 1


def solve(v: np.ndarray, t: np.ndarray, budget: int, *, method: str = "auto",
          max_cells: int = 2**25, milp_budget: int = 300_000, milp_time_limit: float = 10.0,
          never_bucket: bool = False,
          heuristic: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None
          ) -> np.ndarray:
    """Chosen set for one query whose notes all have ``v > 0`` and
    ``0 <= t <= budget`` (see the module docstring for the steps).

    Parameters
    ----------
    v : array_like, shape (n,)
        Values, all > 0.
    t : array_like of int, shape (n,)
        Sizes, all in ``[0, budget]``.
    budget : int
        Token budget.
    method : {"auto", "dp", "milp"}
        ``"auto"``: HiGHS when the gcd-reduced budget exceeds ``milp_budget``
        (or when ``never_bucket`` and the DP table would exceed
        ``max_cells``), else the DP.
    max_cells : int
        Largest DP table ``n * (B + 1)`` before bucketing.
    milp_budget : int
        Reduced budget above which ``"auto"`` uses HiGHS.
    milp_time_limit : float
        Seconds HiGHS may spend.
    never_bucket : bool
        Trade the memory guard for exactness: a table over ``max_cells`` goes
        to HiGHS, and if HiGHS fails, to the full DP.
    heuristic : callable, optional
        ``heuristic(v, t, budget) -> mask``, consulted only when the answer
        is bucketed: its set is kept when it is worth more.

    Returns
    -------
    ndarray of bool, shape (n,)
    """
    v = np.asarray(v, dtype=np.float64)
    t = np.asarray(t, dtype=np.int64)
    chosen = t == 0  # free notes of positive value are always in an optimum
    rest = np.flatnonzero(~chosen)
    if len(rest) == 0 or int(t[rest].sum()) <= budget:
        chosen[rest] = True
        return chosen
    vr, tr = v[rest], t[rest]
    g = int(np.gcd.reduce(tr))
    tr_g, cap = tr // g, budget // g
    n = len(rest)
    w = bucket_width(n, cap, max_cells)
    if method == "auto":
        method = "milp" if cap > milp_budget or (never_bucket and w > 1) else "dp"
    sub = None
    if method == "milp":
        sub = milp_select(vr, tr_g, cap, milp_time_limit)
    if sub is None:
        if w == 1 or never_bucket:
            sub = dp_select(vr, tr_g, cap)
        else:
            sub = dp_select(vr, -(-tr_g // w), cap // w)
            if heuristic is not None:
                alt = np.asarray(heuristic(vr, tr, budget), dtype=bool)
                if vr[alt].sum() > vr[sub].sum():
                    sub = alt
    chosen[rest[sub]] = True
    return chosen


def knapsack_value(values, tokens, budget: int) -> tuple[float, np.ndarray]:
    """Exact 0/1 knapsack optimum for one query.

    Parameters
    ----------
    values : array_like, shape (n,)
        Value of each note (e.g. its gain); only ``values > 0`` are candidates.
    tokens : array_like of int, shape (n,)
        Size of each note in tokens (``>= 0``).
    budget : int
        Token budget.

    Returns
    -------
    best_value : float
        ``max sum(values[S])`` over subsets ``S`` with ``sum(tokens[S]) <= budget``
        (0.0 when nothing fits).
    chosen : ndarray of bool, shape (n,)
        One optimal set.

    Notes
    -----
    Fast path when every candidate fits (O(n)); otherwise :func:`solve`: the
    DP (O(n * B)), or HiGHS when the gcd-reduced budget exceeds 300,000 or
    the DP table would exceed :data:`ORACLE_MAX_CELLS` cells. Never bucketed:
    this is the oracle's denominator and must be exact.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    budget = int(budget)
    elig = (values > 0) & (tokens >= 0) & (tokens <= budget)
    chosen = np.zeros(len(values), dtype=bool)
    if not elig.any():
        return 0.0, chosen
    if int(tokens[elig].sum()) <= budget:
        return float(values[elig].sum()), elig
    cols = np.flatnonzero(elig)
    sub = solve(values[cols], tokens[cols], budget, max_cells=ORACLE_MAX_CELLS,
                never_bucket=True)
    chosen[cols[sub]] = True
    return float(values[chosen].sum()), chosen
