"""Per-query retrieval metrics (names and definitions are a contract: docs/contracts/metrics.md).

For a query at time t with budget B: *existing* notes have ``created_at <= t``;
R+ is the set of the query's qrels with gain > 0 that exist at t (evicted notes
stay in R+: losing them is the cost of eviction). The *ranking* is the policy's
top-C candidates in score order; *packed* is what the packer put in the context.

========================= =====================================================
column                    definition (NaN where the denominator is empty)
========================= =====================================================
utility                   sum of gains of packed notes (negative gains count)
utility_ratio             utility / oracle_utility; NaN when oracle_utility = 0
                          (R+ empty, or nothing in it fits B)
oracle_utility            the oracle: best sum of gains of a subset of R+ with
                          total tokens <= B (exact 0/1 knapsack); 0 if none fits
recall                    share of R+ packed
precision                 tokens of packed R+ notes / tokens packed
ndcg@10                   DCG of the ranking's first 10 (gain max(g, 0),
                          discount log2(rank + 1)) / ideal DCG of R+
mrr                       1 / rank of the first R+ note among the top-C, 0 if none
stale_rate                share of packed notes with gain < 0
harm                      sum of |gain| over packed notes with gain < 0 (0 when
                          none is packed): what ndcg@10, which clips gains at
                          0, cannot see
tokens_used, n_packed     tokens and count of packed notes
budget_tokens             the query's own budget B (the run's, or the stream's
                          per-query one)
recall_age_A_B            recall over R+ notes with age in [A, B) days
recall_age_90_inf         recall over R+ notes at least 90 days old (the three
                          oldest buckets pooled within the query)
max_relevant_age          age of the oldest packed R+ note
evicted_relevant          1 if an R+ note was already evicted, else 0
n_relevant                size of R+
answer_prob               the reader model's probability that the answer is used
abstained                 for a query with an empty R+ (an unanswerable question,
                          e.g. LoCoMo's adversarial category): 1 if nothing was
                          packed, else 0; NaN for queries with a relevant note
stale_reinforced          uses that went to stale notes: the number of notes
                          the answer *uses* (what the policy's feedback counts
                          as a use and reinforces: the packed notes for
                          ``touch = "packed"``, the top k for ``"returned"``,
                          every top-C candidate for ``"prefilter"``, none for
                          ``"none"``) whose gain is < 0; the cooldown is not
                          applied. Each one raises a wrong note's recall count:
                          the feedback loop entrenching it
oracle_notes              size of O, the oracle's packed set (the subset of R+
                          that reaches ``oracle_utility``, the one
                          :func:`memsim.core.knapsack.knapsack_value` returns)
hidden_REASON             notes of O that the policy did not pack, by the first
                          reason that holds, in this order (every note of O
                          not packed has exactly one, so the five sum to
                          ``oracle_notes`` minus the packed notes of O):
                          ``hidden_invalid``: invalidated by the policy's
                          retention (``invalidation``) before the query;
                          ``hidden_evicted``: evicted by the retention, or
                          TTL-expired; ``hidden_budget``: among the top-C
                          candidates but not packed (the packer's budget or
                          cut); ``hidden_age``: live but not among the top C,
                          while a candidate of lower similarity (the
                          retriever's) is: the score's other terms (the decay,
                          for a decaying ranker) pushed it out;
                          ``hidden_cut``: live but not among the top C, and
                          less similar than every candidate (or outside the
                          retriever's prefilter): similarity alone cuts it
========================= =====================================================

*Superseded notes.* A note is *superseded* at the time a newer note makes it
wrong (:func:`supersession_times`: the stream's ``superseded_at`` column, else,
on a synthetic stream, a superseding-class note's ``valid_until``). Per run and
arm (``arms.csv``), :func:`superseded_use_curve` gives ``superseded_notes``
(notes superseded by the last query) and ``superseded_used_Dd``: the share of
them whose last use came at least D days after they were superseded, among
those superseded at least D days before the last query (a note cannot be seen
longer than the run lasts): how long wrong notes keep being used. The same
file counts ``invalidated_notes`` (notes the retention invalidated) and
``invalidated_superseded`` (of those, the ones already superseded when
invalidated: the detector's hits; the rest are its false positives). The store
frame (``store.parquet``) adds, at each day, ``store_invalid`` (existing notes
the retention invalidated: out of retrieval, kept for audit) and
``store_stale`` (live notes already superseded).

A per-query ratio with a possibly negative numerator (stale notes packed) can
fall far below 0, so the mean of ``utility_ratio`` over queries is dominated by
a few queries. Summaries and headlines therefore use the run-level
``utility_share = sum(utility) / sum(oracle_utility)`` over the queries with
``oracle_utility > 0`` (:func:`memsim.reporting.stats.utility_share`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from memsim.core.errors import StreamError
from memsim.core.knapsack import knapsack_value
from memsim.data.stream import Stream
from memsim.data.workload import planted_superseded_at

__all__ = [
    "AGE_BUCKETS",
    "AGE_BUCKET_COLUMNS",
    "OLD_AGE_DAYS",
    "OLD_RECALL_COLUMN",
    "METRIC_COLUMNS",
    "HIGHER_IS_BETTER",
    "UNDIRECTED_METRICS",
    "RelevanceIndex",
    "query_metrics",
    "oracle_values",
    "oracle_packing",
    "gini",
    "HIDDEN_REASONS",
    "HIDDEN_COLUMNS",
    "SUPERSEDED_USE_DAYS",
    "SUPERSEDED_USE_COLUMNS",
    "supersession_times",
    "stale_reinforced",
    "hidden_counts",
    "in_oracle",
    "superseded_use_curve",
]

#: Age buckets of the ``recall_age_*`` columns, in days: [low, high).
AGE_BUCKETS = ((0, 7), (7, 30), (30, 90), (90, 180), (180, 365), (365, np.inf))
AGE_BUCKET_COLUMNS = tuple(
    f"recall_age_{lo}_{'inf' if np.isinf(hi) else hi}" for lo, hi in AGE_BUCKETS
)
#: Notes at least this many days old are "old" (``recall_age_90_inf``).
OLD_AGE_DAYS = 90
OLD_RECALL_COLUMN = f"recall_age_{OLD_AGE_DAYS}_inf"
#: Fewest replicates for a summary's interval over replicates (and its
#: ``n`` counting replicates); below, over queries
#: (:mod:`memsim.reporting.stats`, whose run-folder fallbacks read it too).
MIN_REPLICATES = 5
#: Why a note of the oracle's packed set was not packed, in the order tested.
HIDDEN_REASONS = ("invalid", "evicted", "budget", "age", "cut")
HIDDEN_COLUMNS = tuple(f"hidden_{r}" for r in HIDDEN_REASONS)
#: Days after supersession at which ``superseded_used_Dd`` is read.
SUPERSEDED_USE_DAYS = (0, 1, 7, 30, 90, 180, 365)
SUPERSEDED_USE_COLUMNS = tuple(f"superseded_used_{d}d" for d in SUPERSEDED_USE_DAYS)
METRIC_COLUMNS = (
    "utility", "utility_ratio", "oracle_utility", "recall", "precision", "ndcg@10", "mrr",
    "stale_rate", "harm", "tokens_used", "n_packed", *AGE_BUCKET_COLUMNS, OLD_RECALL_COLUMN,
    "max_relevant_age", "evicted_relevant", "n_relevant", "answer_prob", "abstained",
    "stale_reinforced", "oracle_notes", *HIDDEN_COLUMNS,
)
#: Direction of each metric, for sweeps and reports (``utility_share`` is the
#: run-level ratio of :func:`memsim.reporting.stats.utility_share`, not a column).
HIGHER_IS_BETTER = {m: True for m in METRIC_COLUMNS}
HIGHER_IS_BETTER.update({"stale_rate": False, "harm": False, "evicted_relevant": False,
                         "tokens_used": False, "utility_share": True,
                         "stale_reinforced": False})
HIGHER_IS_BETTER.update({c: False for c in HIDDEN_COLUMNS})
#: Costs and descriptions of the query, which have no better direction in a
#: comparison: more tokens used is neither better nor worse by itself. Reports
#: show them without a significance verdict (no ▲ / ▼); a sweep may still
#: minimise a cost (``HIGHER_IS_BETTER`` gives its default direction).
UNDIRECTED_METRICS = frozenset({"tokens_used", "n_packed", "n_relevant", "oracle_utility",
                                "max_relevant_age", "oracle_notes"})


class RelevanceIndex:
    """Qrels of a stream, indexed for vectorised lookups by (query row, note row).

    Keys are ``query_row * n_notes + note_row``, sorted, so a lookup is one
    ``searchsorted``. R+ (positive gains) is also kept per query row as CSR.
    """

    def __init__(self, stream: Stream, created_at: np.ndarray):
        n_notes = stream.n_notes
        self.n_notes = n_notes
        self.query_ids = stream.queries["query_id"].to_numpy(np.int64)
        note_ids = stream.notes["note_id"].to_numpy(np.int64)
        qr = stream.qrels
        qpos = _rows_of(self.query_ids, qr["query_id"].to_numpy(np.int64))
        npos = np.searchsorted(note_ids, qr["note_id"].to_numpy(np.int64))
        gain = qr["gain"].to_numpy(np.float64)
        keys = qpos * max(n_notes, 1) + npos
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.gain = gain[order]
        self.qpos = qpos[order]
        self.npos = npos[order]
        pos = self.gain > 0
        self.rp_note = self.npos[pos]
        self.rp_gain = self.gain[pos]
        self.rp_ptr = np.searchsorted(self.qpos[pos], np.arange(len(self.query_ids) + 1))
        self.created_at = created_at

    def lookup(self, qrows: np.ndarray, note_rows: np.ndarray) -> np.ndarray:
        """Gains (Q, C) of ``note_rows[q, c]`` for query row ``qrows[q]``; 0 if none."""
        keys = qrows[:, None] * max(self.n_notes, 1) + note_rows
        if len(self.keys) == 0:
            return np.zeros(keys.shape)
        i = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[i] == keys, self.gain[i], 0.0)

    def dense_gains(self, qrows: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Gains (Q, len(idx)) over the sorted note rows ``idx``."""
        out = np.zeros((len(qrows), len(idx)))
        lo = np.searchsorted(self.qpos, qrows, side="left")
        hi = np.searchsorted(self.qpos, qrows, side="right")
        for q, (a, b) in enumerate(zip(lo, hi)):  # loop over queries' few qrels
            j = np.searchsorted(idx, self.npos[a:b])
            ok = (j < len(idx)) & (idx[np.minimum(j, len(idx) - 1)] == self.npos[a:b])
            out[q, j[ok]] = self.gain[a:b][ok]
        return out

    def relevant(self, qrows: np.ndarray, t: np.ndarray):
        """Padded R+ of each query: (note rows, gains, mask), each (Q, R)."""
        start, stop = self.rp_ptr[qrows], self.rp_ptr[qrows + 1]
        count = stop - start
        r = int(count.max()) if len(count) else 0
        col = np.arange(r)
        inrange = col[None, :] < count[:, None]
        src = np.where(inrange, start[:, None] + col[None, :], 0)
        if len(self.rp_note) == 0:
            z = np.zeros((len(qrows), r), dtype=np.int64)
            return z, z.astype(float), np.zeros((len(qrows), r), dtype=bool)
        rows = self.rp_note[src]
        gains = self.rp_gain[src]
        mask = inrange & (self.created_at[rows] <= t[:, None])
        return rows, gains, mask


def _rows_of(sorted_or_not_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    order = np.argsort(sorted_or_not_ids, kind="stable")
    pos = np.searchsorted(sorted_or_not_ids[order], wanted)
    return order[np.minimum(pos, len(order) - 1)]


def oracle_values(relevance: RelevanceIndex, qrows: np.ndarray, t: np.ndarray,
                  budget: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Best sum of gains of a subset of R+ within each query's budget (exact)."""
    return oracle_packing(relevance, qrows, t, budget, tokens)[0]


def oracle_packing(relevance: RelevanceIndex, qrows: np.ndarray, t: np.ndarray,
                   budget: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's value and its packed set O for each query.

    Returns
    -------
    values : ndarray, shape (Q,)
        Best sum of gains of a subset of R+ within the budget (exact).
    keys : ndarray of int64, sorted
        ``query_row * n_notes + note_row`` of every note of O (the whole of
        R+ when it fits, else the set :func:`knapsack_value` returns).
    """
    rows, gains, mask = relevance.relevant(qrows, t)
    out = np.zeros(len(qrows))
    if rows.size == 0:
        return out, np.zeros(0, dtype=np.int64)
    tok = tokens[rows]
    fits = (np.where(mask, tok, 0).sum(axis=1) <= budget)
    out[fits] = np.where(mask[fits], gains[fits], 0.0).sum(axis=1)
    chosen = mask & fits[:, None]
    overflow = np.flatnonzero(~fits)
    for q in overflow:  # only queries whose R+ overflows the budget
        m = mask[q]
        out[q], pick = knapsack_value(gains[q][m], tok[q][m], int(budget[q]))
        chosen[q, np.flatnonzero(m)[pick]] = True
    keys = (qrows[:, None].astype(np.int64) * max(relevance.n_notes, 1) + rows)[chosen]
    return out, np.sort(keys)


def gini(x: np.ndarray) -> float:
    """Gini coefficient of non-negative values; NaN when they sum to 0.

    ``G = sum_i (2 i - n - 1) x_(i) / (n sum x)`` over sorted values, i = 1..n.
    """
    x = np.sort(np.asarray(x, dtype=np.float64))
    n = len(x)
    total = x.sum()
    if n == 0 or total <= 0:
        return float("nan")
    i = np.arange(1, n + 1)
    return float(((2 * i - n - 1) * x).sum() / (n * total))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _ranked(cand_ok: np.ndarray, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranking of each row: its real candidates (``cand_ok``) moved to the
    left in their column order, with their gains (0 in the padding).

    A candidate's rank is 1 + the number of real candidates before it, so a
    cell that is not a candidate never pushes the ones after it down (the
    rank ``ndcg@10`` discounts by, ``log2(rank + 1)``, and ``mrr`` inverts).
    """
    cand_ok = np.asarray(cand_ok, dtype=bool)
    gains = np.where(cand_ok, gains, 0.0)
    if cand_ok.shape[1] < 2 or not (cand_ok[:, 1:] > cand_ok[:, :-1]).any():
        return cand_ok, gains  # every row's real candidates already come first
    order = np.argsort(~cand_ok, axis=1, kind="stable")
    return (np.take_along_axis(cand_ok, order, axis=1),
            np.take_along_axis(gains, order, axis=1))


def query_metrics(*, cand_rows, cand_ok, packed, position, gains, tokens, t, qrows, budget,
                  oracle, relevance: RelevanceIndex, evicted, reader=None) -> dict[str, np.ndarray]:
    """Every per-query column of a batch (see the module docstring).

    Candidate arrays are (Q, C), best first; a cell whose ``cand_ok`` is False
    is not a candidate and takes no rank (``ndcg@10`` and ``mrr`` count the
    real candidates before a note, :func:`_ranked`); ``gains`` are the true
    gains of the candidates; ``evicted`` is the arm's eviction flag per note
    row, or, for the rows of several arms one below the other, a list of
    (rows slice, that arm's flags).
    """
    q = len(qrows)
    g_packed = np.where(packed, gains, 0.0)
    utility = g_packed.sum(axis=1)
    n_packed = packed.sum(axis=1)
    tokens_used = np.where(packed, tokens, 0).sum(axis=1)
    rel_packed = packed & (gains > 0)

    rp_rows, rp_gain, rp_mask = relevance.relevant(qrows, t)
    n_rel = rp_mask.sum(axis=1)
    has_rel = n_rel > 0

    # Which R+ notes were packed: each query's R+ against its own packed
    # relevant candidates
    rp_packed = rp_mask & _among_own(rp_rows, np.where(rel_packed, cand_rows, -1))
    recall = _ratio(rp_packed.sum(axis=1), n_rel)

    ages = t[:, None] - relevance.created_at[rp_rows] if rp_rows.size else np.zeros((q, 0))
    oracle = np.asarray(oracle, dtype=np.float64)
    out: dict[str, np.ndarray] = {
        "query_id": relevance.query_ids[qrows],
        "t": t.astype(np.float64),
        "utility": utility,
        # R+ gains are > 0, so oracle = 0 exactly when R+ is empty or none of
        # it fits the budget: the ratio is undefined (NaN), never 0 or inf
        "utility_ratio": _ratio(utility, oracle),
        "oracle_utility": oracle,
        "recall": recall,
        "precision": _ratio(np.where(rel_packed, tokens, 0).sum(axis=1), tokens_used),
    }
    # The ranking is a row's real candidates in column order: a cell that is
    # not a candidate (cand_ok False) takes no rank, wherever it sits, so the
    # real ones are moved to the left first (a no-op when they already are)
    rank_ok, rank_gain = _ranked(cand_ok, gains)
    # nDCG@10 over the ranking's first 10 candidates
    k = min(10, cand_rows.shape[1])
    disc = 1.0 / np.log2(np.arange(2, 12))
    g10 = np.where(rank_ok[:, :k], np.maximum(rank_gain[:, :k], 0.0), 0.0)
    dcg = (g10 * disc[:k]).sum(axis=1)
    ideal = -np.sort(-np.where(rp_mask, rp_gain, 0.0), axis=1)[:, :10]
    idcg = (ideal * disc[: ideal.shape[1]]).sum(axis=1)
    out["ndcg@10"] = _ratio(dcg, idcg)
    hit = rank_ok & (rank_gain > 0)
    first = (np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0) if hit.shape[1]
             else np.zeros(q, dtype=np.int64))
    out["mrr"] = np.where(has_rel, np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0), np.nan)
    stale = packed & (gains < 0)
    out["stale_rate"] = _ratio(stale.sum(axis=1), n_packed)
    # harm = sum |g| over packed notes with g < 0; defined (0) for every query
    out["harm"] = -np.where(stale, gains, 0.0).sum(axis=1) + 0.0  # + 0.0: no -0.0
    out["tokens_used"] = tokens_used.astype(np.int64)
    # the budget this query really had (a stream may give queries their own)
    out["budget_tokens"] = np.broadcast_to(np.asarray(budget, dtype=np.int64), (q,)).copy()
    out["n_packed"] = n_packed.astype(np.int64)
    for col, (lo, hi) in zip(AGE_BUCKET_COLUMNS, AGE_BUCKETS):
        in_b = rp_mask & (ages >= lo) & (ages < hi)
        out[col] = _ratio((rp_packed & in_b).sum(axis=1), in_b.sum(axis=1))
    # the old buckets pooled within the query (counts, not a mean of bucket ratios)
    old = rp_mask & (ages >= OLD_AGE_DAYS)
    out[OLD_RECALL_COLUMN] = _ratio((rp_packed & old).sum(axis=1), old.sum(axis=1))
    packed_ages = np.where(rp_packed, ages, -np.inf)
    mx = packed_ages.max(axis=1) if packed_ages.shape[1] else np.full(q, -np.inf)
    out["max_relevant_age"] = np.where(np.isfinite(mx), mx, np.nan)
    ev = np.zeros(q, dtype=bool)
    if rp_rows.size:
        for rows, flags in ([(slice(None), evicted)] if isinstance(evicted, np.ndarray)
                            else evicted):
            ev[rows] = (rp_mask[rows] & flags[rp_rows[rows]]).any(axis=1)
    out["evicted_relevant"] = np.where(has_rel, ev.astype(np.float64), np.nan)
    out["n_relevant"] = n_rel.astype(np.int64)
    if reader is None:
        out["answer_prob"] = np.full(q, np.nan)
    else:
        ap = np.asarray(reader.answer_prob(position, gains, n_packed), dtype=np.float64)
        out["answer_prob"] = np.where(has_rel, ap, np.nan)
    # a question with no relevant note (LoCoMo's adversarial ones): the right
    # answer is to pack nothing; defined only for those queries
    out["abstained"] = np.where(has_rel, np.nan, (n_packed == 0).astype(np.float64))
    return out


# --------------------------------------------------------------------------
# Stale uses, the oracle's hidden notes, superseded notes
# --------------------------------------------------------------------------


def supersession_times(notes: pd.DataFrame) -> np.ndarray:
    """When each note was superseded (days; NaN = never), in row order.

    The truth a supersession detector is scored against
    (:class:`memsim.policies.retention.Invalidation`) and the start of the
    ``superseded_used_Dd`` curve:

    * the notes' ``superseded_at`` column when the stream has one (any stream:
      a float in days, NaN where the note is never superseded);
    * else, on a stream memsim generated (``note_class`` and ``valid_until``
      columns), the ``valid_until`` of the superseding class, which is the
      creation time of the next version of the slot (expiry of project and
      scratch notes is not supersession: no newer note replaces them;
      :func:`memsim.data.workload.planted_superseded_at`);
    * else NaN everywhere: the stream says nothing about supersession (an
      update logged as a trace's ``note_updated`` already ends the old
      version with ``expires_at``).

    Raises
    ------
    StreamError
        If ``superseded_at`` is not numeric, or is before the note's creation.
    """
    n = len(notes)
    if "superseded_at" in notes:
        try:
            out = pd.to_numeric(notes["superseded_at"], errors="raise").to_numpy(np.float64)
        except (TypeError, ValueError):
            raise StreamError("notes: column 'superseded_at': must be a number of days "
                              "(NaN = never superseded)") from None
        bad = np.flatnonzero(out < notes["created_at"].to_numpy(np.float64))
        if len(bad):
            raise StreamError(f"notes: column 'superseded_at': row {int(bad[0])} is before "
                              "the note's created_at")
        return out
    planted = planted_superseded_at(notes)
    return np.full(n, np.nan) if planted is None else planted


def stale_reinforced(used: np.ndarray, gains: np.ndarray) -> np.ndarray:
    """``stale_reinforced`` (Q,): the used candidates (Q, C) with gain < 0."""
    return (used & (gains < 0)).sum(axis=1).astype(np.int64)


def in_oracle(relevance: RelevanceIndex, qrows: np.ndarray, note_rows: np.ndarray,
              oracle_keys: np.ndarray) -> np.ndarray:
    """Whether the oracle packed each note ``note_rows`` for its query row
    ``qrows`` (broadcast together), ``oracle_keys`` as :func:`oracle_packing`
    gives them (ascending): a binary search per pair (``np.isin`` would
    sort both arrays every call)."""
    keys = np.asarray(qrows).astype(np.int64) * max(relevance.n_notes, 1) + note_rows
    if len(oracle_keys) == 0:
        return np.zeros(np.shape(keys), dtype=bool)
    at = np.minimum(np.searchsorted(oracle_keys, keys), len(oracle_keys) - 1)
    return oracle_keys[at] == keys


def _among_own(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(Q, R) bool: whether each of ``values`` (Q, R) is among the same
    query's ``rows`` (Q, C): R x C comparisons per query, no sort of the
    batch's keys."""
    return (values[:, :, None] == rows[:, None, :]).any(axis=2)


def hidden_counts(*, qrows: np.ndarray, t: np.ndarray, cand_rows: np.ndarray,
                  cand_ok: np.ndarray, packed: np.ndarray, relevance: RelevanceIndex,
                  oracle_keys: np.ndarray, invalid_at: np.ndarray, evicted: np.ndarray,
                  expires_at: np.ndarray,
                  similarity: Callable[[np.ndarray, np.ndarray], np.ndarray]
                  ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The oracle's packed notes a policy did not pack, and why (module doc).

    Parameters
    ----------
    qrows, t : ndarray, shape (Q,)
        Query rows and times.
    cand_rows, cand_ok, packed : ndarray, shape (Q, C)
        The policy's top-C candidates (note rows, best first), which are
        real, which it packed.
    oracle_keys : ndarray of int64
        The oracle's packed set, as :func:`oracle_packing` gives it
        (ascending; a superset of this batch's keys is fine).
    invalid_at : ndarray, shape (N,)
        When the policy invalidated each note row (NaN: never; an
        invalidated note is evicted too); read at the hidden notes only.
    evicted : ndarray of bool, shape (N,)
        The policy's eviction flag per note row.
    expires_at : ndarray, shape (N,)
        TTL expiry per note row (inf = never).
    similarity : callable
        ``similarity(q, rows)`` with q (K,) indices into the batch and rows
        (K, W) note rows: the retriever's similarity of each cell.

    Returns
    -------
    counts : dict
        ``oracle_notes`` and one ``hidden_REASON`` column each, (Q,) int64.
    hidden : tuple of ndarray
        ``(q, note_row, reason)`` of every hidden note, reason an index into
        :data:`HIDDEN_REASONS` (for the rankings' rows).
    """
    q = len(qrows)
    rp_rows, _, rp_mask = relevance.relevant(qrows, t)
    out = {"oracle_notes": np.zeros(q, dtype=np.int64)}
    out.update({c: np.zeros(q, dtype=np.int64) for c in HIDDEN_COLUMNS})
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    if rp_rows.size == 0 or len(oracle_keys) == 0:
        return out, none
    in_o = rp_mask & in_oracle(relevance, qrows[:, None], rp_rows, oracle_keys)
    out["oracle_notes"] = in_o.sum(axis=1).astype(np.int64)
    cands = np.where(cand_ok, cand_rows, -1)
    hide = in_o & ~_among_own(rp_rows, np.where(packed, cands, -1))
    qi, ri = np.nonzero(hide)
    if len(qi) == 0:
        return out, none
    rows = rp_rows[qi, ri]
    reason = np.full(len(qi), HIDDEN_REASONS.index("cut"), dtype=np.int64)
    is_cand = _among_own(rows[:, None], cands[qi])[:, 0]
    gone_invalid = ~np.isnan(invalid_at[rows])
    gone = evicted[rows] | (expires_at[rows] <= t[qi])
    # live, not a candidate: "age" when a less similar candidate made the top C
    test = ~gone & ~gone_invalid & ~is_cand
    if test.any():
        tq = qi[test]
        sim = similarity(tq, np.concatenate([rows[test][:, None], cand_rows[tq]], axis=1))
        csim = np.where(cand_ok[tq], sim[:, 1:], np.inf)
        beaten = csim.min(axis=1) < sim[:, 0]
        reason[np.flatnonzero(test)[beaten]] = HIDDEN_REASONS.index("age")
    reason[is_cand] = HIDDEN_REASONS.index("budget")
    reason[gone] = HIDDEN_REASONS.index("evicted")
    reason[gone_invalid] = HIDDEN_REASONS.index("invalid")
    for k, col in enumerate(HIDDEN_COLUMNS):
        out[col] = np.bincount(qi[reason == k], minlength=q).astype(np.int64)
    return out, (qi, rows, reason)


def superseded_use_curve(superseded_at: np.ndarray, created_at: np.ndarray,
                         last_use: np.ndarray, t_end: float) -> dict[str, float]:
    """``superseded_notes`` and ``superseded_used_Dd`` of one arm (module doc).

    Parameters
    ----------
    superseded_at, created_at, last_use : ndarray, shape (N,)
        Per note: supersession time (NaN = never), creation, and the arm's
        last use at the end of the run (NaN = never used).
    t_end : float
        The last query's time.
    """
    sup = np.asarray(superseded_at, dtype=np.float64)
    seen = np.isfinite(sup) & (sup <= t_end) & (created_at <= t_end)
    after = np.asarray(last_use, dtype=np.float64)[seen] - sup[seen]  # NaN: never used
    out = {"superseded_notes": int(seen.sum())}
    for d, col in zip(SUPERSEDED_USE_DAYS, SUPERSEDED_USE_COLUMNS):
        at_risk = sup[seen] <= t_end - d
        den = int(at_risk.sum())
        out[col] = float((after[at_risk] >= d).sum() / den) if den else float("nan")
    return out
