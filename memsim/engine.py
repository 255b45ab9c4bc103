"""The simulation engine: replays a stream through policies, tick by tick.

The engine owns the loop; policies only answer narrow questions (see
:mod:`memsim.policies.base`). For one stream and several *arms* (a policy at a
budget), time advances over batches of queries:

1. organic accesses that happened before the batch are applied as uses;
2. a retention sweep runs for every arm when one is due;
3. the similarity of the batch's queries to every existing note is one
   matrix product in fixed blocks of columns (:data:`PRODUCT_BLOCK`), shared
   by all arms; a block of notes every arm has evicted is not multiplied;
4. for each arm: score -> top-C candidates (ties by lower ``note_id``) ->
   pack into the budget -> order -> per-query metrics;
5. feedback: the notes each query used gain a recall (after the batch by
   default: ``feedback_mode = "per-tick"``; after each query with
   ``"per-query"``, which is exact and slower).

Everything is vectorised over notes; the only Python loops run over batches,
arms and (inside packers) candidate ranks.

**Pruning.** A policy whose components declare bounds (``Ranker.score_bound``,
``Decay.upper_bound``, ``Stickiness.access_term_bound``,
``Breadth.access_factor_bound``, ``Breadth.score_factor_bound``; see
:mod:`memsim.policies.base`) is not scored on every live note. Per query, the
notes whose similarity is above a threshold ``tau`` are scored (the
thresholds and the notes above them are computed once per batch and shared by
every arm), and the query is done when its C-th best score is strictly above
the ranker's bound at ``tau``: no note left out can then enter, or tie into,
the top C. Otherwise ``tau`` is lowered (about 4x more notes) until it holds
or every note is scored. When the ranker declares ``similarity_needed``, the
recency is one exponential of a clock and the levels the batch's first scan
holds do not prove the top C, a level's C-th best score is a score the top
C reaches, so only the notes whose similarity reaches the ranker's
``similarity_needed`` at it and at the highest recency of their block of
columns can be in it (or tie); those alone are scored
(:func:`_filtered_top`), whatever the half-life and floor. Arms that differ
only by their decay's floor and rate (a sweep's trials) go through these
two steps as one array, a row per (arm, query) (:func:`_stacked_tops`).
The levels hold only the notes some arm can see: a
note every arm has evicted is in none (retention sweeps run between
batches), and an arm whose retention evicted most of a level scores only
its own live cells of it. Scores of the notes scored are the same floats as
full scoring gives (the notes' columns are kept in ``note_id`` order, so ties
still go to the lower ``note_id``), so rankings, packing, metrics and
feedback are identical bit for bit; :data:`PRUNE` = False turns it off. A
retriever's prefilter (its M nearest notes per query, an exact search
through the same levels) hands its cells on, and an arm scores those alone.
Everything that reads more than the top C (set-dependent rankers, rankers
that choose their candidates, the oracle) is scored in full.

**Arms together.** The per-tick arms of a batch are scored one by one, then
packed (those with the same packer, orderer and C) and measured as one
array, a row per (arm, query): packers, orderers and metrics treat rows
independently, so every value is the one the arm gets alone, for the cost
of one call instead of one per arm.

**Replays of one stream.** A sweep replays the same replicate streams once
per batch of trials. A :class:`ReplayCache` passed to :func:`simulate` keeps
what does not depend on the arms (the stream's arrays, each batch with its
similarity and levels) for the next replay of the same stream object, up to
a budget of bytes; values built on the notes every arm evicted are rebuilt
when those differ, so the results are those of a replay without it.

**Per-query feedback.** An arm whose uses take effect before the next query
(:func:`feedback_timing`) still shares its tick's similarity product and is
scored once on the state at the tick's start. The uses its queries make with
those answers (and the organic uses before each query's time) are a guess at
what each query sees: every query is corrected at once, the notes used
before it rescored on the state they have at its time (what-if copies of
their state, not the arm's) and merged into its top C, and packed again. A
query whose own uses change makes the guess wrong only for the later queries
that see the notes concerned; it is made again from the first of them, so a
tick costs a few array passes, not a loop over its queries. The merge is
exact when the query's C-th candidate ranks at or above the C-th of the
tick's scoring (no note left alone can then enter); otherwise the query is
scored again in full on the state at its time. A policy whose scores read no
use (``Policy.reads_uses()``) has nothing to rescore; a set-dependent
ranker, one that chooses its own candidates, or a use before scoring is
scored query by query. A recency cell's value depends on its own query time,
note and the tick's end alone (:func:`_exponential_recency`), so the
corrected tick gives the same floats as scoring each query alone
(:data:`WALK_FAST` = False, the reference), and retention sweeps and store
rows stay at tick starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import ThreadpoolController

from .errors import ConfigError
from .metrics import (HIDDEN_REASONS, RelevanceIndex, gini, hidden_counts, oracle_packing,
                      query_metrics, stale_reinforced, superseded_use_curve, supersession_times)
from .params import Interval, Options, Validated
from .planted import PlantedModel
from .policies import ArrayContext, Policy
from .policies.base import Breadth, Ranker, Stickiness
from .policies.context import AGE_CLOCKS, MEMORY_TYPE_CODES, TIER_CODES
from .rng import child
from .stream import LoggedRankings, Stream
from .workload import CLASS_NAMES

__all__ = ["SimSettings", "Arm", "simulate", "SimResult", "NoteArrays", "PolicyState",
           "Batch", "BatchContext", "top_candidates", "resolve_budget", "feedback_timing",
           "with_timing", "PRUNE", "WALK_FAST"]

#: Exact pruning of the scoring (module docstring); False scores every live
#: note of every query, as a reference.
PRUNE = True


@dataclass(frozen=True, kw_only=True)
class SimSettings(Validated):
    """Engine settings shared by every arm of an experiment.

    Parameters
    ----------
    budget_tokens : int
        Token budget of each context (Hivemind's default: 1,500). A stream's
        per-query ``budget_tokens`` column overrides it.
    candidates : int
        Default top-C: packers work on the C best-scored notes.
    tick_days : float
        Length of a tick; all queries of a tick are scored with one matrix
        product and (in per-tick mode) see the same state.
    feedback_mode : {"per-tick", "per-query"}
        When uses are applied, for policies whose ``feedback.timing`` is
        "experiment": after each tick, or before the next query (exact; the
        presets of real systems set it themselves).
    retention_period_days : float
        Period of the retention sweeps.
    save_rankings : {False, True, "hidden"}
        Keep every query's top-C ranking (``rankings.parquet``), with the
        columns ``oracle`` (the oracle packs the note) and ``hidden`` (why an
        oracle note was not packed: ``"budget"`` within the top C, else
        ``""``). ``"hidden"`` also adds a row (``rank`` -1, ``score`` NaN) for
        each note the oracle packs that is not among the top C, with its
        reason (``"age"``, ``"cut"``, ``"evicted"``, ``"invalid"``;
        :mod:`memsim.metrics`).
    """

    budget_tokens: int = 1500
    candidates: int = 50
    tick_days: float = 1.0
    feedback_mode: str = "per-tick"
    retention_period_days: float = 1.0
    save_rankings: bool = False

    _constraints = {
        "budget_tokens": Interval(1, None, integer=True),
        "candidates": Interval(1, None, integer=True),
        "tick_days": Interval(0, None, closed="neither"),
        "feedback_mode": Options(("per-tick", "per-query")),
        "retention_period_days": Interval(0, None, closed="neither"),
        "save_rankings": Options((True, False, "hidden")),
    }


@dataclass(frozen=True)
class Arm:
    """One simulated arm: a named policy at a budget (``None`` = the default).

    ``stream_name`` names the arm's random stream (default: ``policy_name``):
    a sweep that simulates several trials of one policy as arms of one replay
    gives each the stream the policy would have alone, so its values are
    those of a replay of its own.
    """

    policy_name: str
    policy: Policy
    budget: int | None = None
    stream_name: str | None = None


def resolve_budget(arm: Arm, settings: SimSettings, stream_budget: np.ndarray | None = None,
                   *, per_query: bool = False):
    """The token budget of an arm: the one place that resolves it.

    Parameters
    ----------
    arm : Arm
    settings : SimSettings
    stream_budget : ndarray of float, shape (Q,), optional
        The stream's per-query ``budget_tokens`` column (NaN where unset).

    Returns
    -------
    int or ndarray of int64
        Without ``stream_budget``: the arm's budget label in the result
        frames, ``arm.budget`` or else ``settings.budget_tokens``; 0 when the
        arm sets none and the stream gives queries budgets of their own
        (``per_query``): each query's budget is then in the ``budget_tokens``
        column, and no single label would be true. With it: the
        budget (Q,) of each query: ``arm.budget`` when the arm sets one (it
        overrides the stream), else the stream's value, else
        ``settings.budget_tokens``.
    """
    if stream_budget is None:
        if arm.budget is None and per_query:
            return 0
        return arm.budget or settings.budget_tokens
    if arm.budget is not None:
        return np.full(len(stream_budget), arm.budget, dtype=np.int64)
    return np.where(np.isnan(stream_budget), settings.budget_tokens,
                    stream_budget).astype(np.int64)


# --------------------------------------------------------------------------
# Static note arrays and per-arm state
# --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NoteArrays:
    """Column arrays of the stream's notes, in ``note_id`` order (row i = note i)."""

    note_id: np.ndarray
    created_at: np.ndarray
    updated_at: np.ndarray
    tokens: np.ndarray
    importance: np.ndarray
    salience: np.ndarray
    pinned: np.ndarray
    memory_type: np.ndarray
    tier0: np.ndarray
    expires_at: np.ndarray
    actor: np.ndarray
    emb: np.ndarray
    norm2: np.ndarray
    #: optional store partition: a query only sees notes of its own namespace
    namespace: np.ndarray | None = None
    #: planted note class (index into memsim.workload.CLASS_NAMES, -1 unknown)
    #: and the workload that generated the stream, for the planted model
    note_class: np.ndarray | None = None
    workload_config: dict | None = None
    #: when a newer note superseded each note (NaN = never): ground truth
    #: for the invalidation retention and the superseded-use curve
    superseded_at: np.ndarray | None = None

    @cached_property
    def planted(self) -> PlantedModel | None:
        """The stream's planted model (:mod:`memsim.planted`), built on first
        use; None when the stream was not generated by memsim."""
        if self.workload_config is None:
            return None
        return PlantedModel.from_config(self.workload_config)

    @classmethod
    def from_stream(cls, stream: Stream, actor_codes: dict[str, int],
                    namespace_codes: dict[str, int] | None = None) -> NoteArrays:
        n = stream.notes
        if stream.note_embeddings is None or stream.query_embeddings is None:
            raise ConfigError(
                f"stream {stream.name!r} has no embeddings: the engine needs note and "
                "query vectors (import real traces with a retriever that caches them)"
            )
        emb = np.ascontiguousarray(stream.note_embeddings, dtype=np.float32)
        updated = n["updated_at"].to_numpy(np.float64) if "updated_at" in n else n[
            "created_at"].to_numpy(np.float64)
        expires = n["expires_at"].to_numpy(np.float64)
        return cls(
            note_id=n["note_id"].to_numpy(np.int64),
            created_at=n["created_at"].to_numpy(np.float64),
            updated_at=updated,
            tokens=n["tokens"].to_numpy(np.int64),
            importance=n["importance"].to_numpy(np.float64),
            salience=n["salience"].to_numpy(np.float64),
            pinned=n["pinned"].to_numpy(bool),
            memory_type=_codes(n["memory_type"], MEMORY_TYPE_CODES,
                               MEMORY_TYPE_CODES["other"]).astype(np.int8),
            tier0=_codes(n["tier"], TIER_CODES, TIER_CODES["task"]).astype(np.int8),
            # NaN = never expires; inf keeps the comparisons simple
            expires_at=np.where(np.isnan(expires), np.inf, expires),
            actor=_codes(n["actor"], actor_codes),
            emb=emb,
            norm2=np.einsum("ij,ij->i", emb, emb, dtype=np.float64),
            namespace=None if namespace_codes is None else _codes(n["namespace"], namespace_codes),
            note_class=(_codes(n["note_class"], {c: i for i, c in enumerate(CLASS_NAMES)})
                        if "note_class" in n else None),
            workload_config=(stream.meta.get("config")
                             if stream.meta.get("source") == "memsim.workload" else None),
            superseded_at=supersession_times(n),
        )

    def take(self, rows: np.ndarray) -> NoteArrays:
        """The notes ``rows`` as arrays of their own (row k is note
        ``rows[k]``)."""
        n = len(self.note_id)
        return dataclasses.replace(self, **{
            f.name: v[rows] for f in dataclasses.fields(self)
            if isinstance(v := getattr(self, f.name), np.ndarray) and len(v) == n})


def _codes(values: pd.Series, codes: dict[str, int], default: int = -1) -> np.ndarray:
    """Integer code of each value as text (``str``; a missing value reads
    ``"nan"``), ``default`` for a text not in ``codes``: one lookup per
    distinct value."""
    rows, distinct = pd.factorize(values, use_na_sentinel=False)
    return np.array([codes.get(_text(v), default) for v in distinct], dtype=np.int64)[rows]


def _texts(values: pd.Series) -> set[str]:
    """The distinct values as :func:`_codes` reads them."""
    return {_text(v) for v in pd.factorize(values, use_na_sentinel=False)[1]}


def _text(value: Any) -> str:
    """A value as text, ``"nan"`` for a missing one (None, NaN, NA)."""
    return "nan" if pd.isna(value) else str(value)


class PolicyState:
    """Mutable per-arm state of every note: uses, last access, actors, tier,
    eviction. Arrays are indexed by note row."""

    def __init__(self, notes: NoteArrays, n_actors: int):
        n = len(notes.note_id)
        self.recalls = np.zeros(n, dtype=np.int64)
        self.last_access = np.full(n, np.nan)
        self.tier = notes.tier0.copy()
        self.evicted = np.zeros(n, dtype=bool)
        self.evicted_at = np.full(n, np.nan)
        #: when an invalidating retention invalidated the note (NaN = never):
        #: it is evicted too, and kept for audit
        self.invalid_at = np.full(n, np.nan)
        self._words = max(1, (n_actors + 63) // 64)
        self.actor_bits = np.zeros((n, self._words), dtype=np.uint64)
        self._last_bump: dict[tuple[int, int], float] = {}
        #: pruning: notes per query to score first (learnt from the last
        #: batch), and whether this arm's components turned out to read what
        #: gathered cells lack (then neither pruning nor the per-query
        #: rescoring of used notes scores cells: both score whole rows)
        self.prune_level = 0
        #: the last batch had a query whose top C only the similarity filter
        #: proved cheaply: the next one filters after its first level
        self.prune_filter = False
        self.prune_off = False

    def gather(self, rows: np.ndarray, bumps: tuple[np.ndarray, np.ndarray] | None = None
               ) -> PolicyState:
        """The state of the notes ``rows`` as a state of its own (row k is
        note ``rows[k]``), to record what-if uses without touching this one.
        ``bumps``: (row k, actor) pairs whose last counted use (the feedback's
        cooldown) is carried over."""
        own = PolicyState.__new__(PolicyState)
        own.__dict__.update(self.__dict__)
        for name in ("recalls", "last_access", "tier", "evicted", "evicted_at", "invalid_at",
                     "actor_bits"):
            setattr(own, name, getattr(self, name)[rows])
        own._last_bump = {}
        if bumps is not None:
            for k, a in set(zip(*(x.tolist() for x in bumps))):
                prev = self._last_bump.get((int(rows[k]), a))
                if prev is not None:
                    own._last_bump[(k, a)] = prev
        return own

    def distinct_actors(self, idx: np.ndarray) -> np.ndarray:
        """Number of distinct actors that used each note of ``idx``."""
        return np.bitwise_count(self.actor_bits[idx]).sum(axis=1).astype(np.int64)

    def touch(self, rows: np.ndarray, actors: np.ndarray, t: np.ndarray, feedback) -> None:
        """Record uses: ``rows[i]`` used by ``actors[i]`` at time ``t[i]``."""
        if len(rows) == 0:
            return
        if feedback.cooldown_s > 0:
            rows, actors, t = self._apply_cooldown(rows, actors, t, feedback.cooldown_s / 86400.0)
            if len(rows) == 0:
                return
        np.add.at(self.recalls, rows, 1)
        # each used note's latest use (work in the uses, not the store)
        seen, which = np.unique(rows, return_inverse=True)
        last = np.full(len(seen), -np.inf)
        np.maximum.at(last, which, t)
        self.last_access[seen] = np.fmax(self.last_access[seen], last)
        word, bit = np.divmod(actors, 64)
        np.bitwise_or.at(self.actor_bits, (rows, word), np.left_shift(np.uint64(1),
                                                                     bit.astype(np.uint64)))
        if feedback.promote_after > 0:
            promote = seen[self.recalls[seen] >= feedback.promote_after]
            self.tier[promote] = TIER_CODES["longterm"]

    def _apply_cooldown(self, rows, actors, t, cooldown_days):
        # At most one use per (note, actor) per cooldown: a Python loop over
        # the uses of one batch (not over the store), in time order.
        order = np.argsort(t, kind="stable")
        keep = np.zeros(len(rows), dtype=bool)
        last = self._last_bump
        for i in order:
            key = (int(rows[i]), int(actors[i]))
            prev = last.get(key)
            if prev is None or t[i] - prev >= cooldown_days:
                last[key] = float(t[i])
                keep[i] = True
        return rows[keep], actors[keep], t[keep]


# --------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------


class Batch:
    """Queries scored together, over the notes that exist by the batch's last
    query. Shared by every arm."""

    def __init__(self, *, qrows: np.ndarray, t: np.ndarray, actors: np.ndarray, notes: NoteArrays,
                 qemb: np.ndarray, qnorm2: np.ndarray, relevance: RelevanceIndex,
                 namespaces: np.ndarray | None = None, t0: float | None = None):
        self.qrows = qrows
        self.t = t
        #: the anchor of separable recencies (the end of the batch's tick;
        #: default its last query): the same for every subset of its queries
        self.t0 = float(t.max()) if t0 is None else float(t0)
        self.actors = actors
        self.notes = notes
        self.relevance = relevance
        tmax, tmin = t.max(), t.min()
        self.idx = np.flatnonzero((notes.created_at <= tmax) & (notes.expires_at > tmin))
        created = notes.created_at[self.idx]
        expires = notes.expires_at[self.idx]
        # only the notes created or expiring inside the batch's window are
        # valid for some of its queries and not others
        self.valid = np.ones((len(t), len(self.idx)), dtype=bool)
        part = np.flatnonzero((created > tmin) | (expires <= tmax))
        if len(part):
            self.valid[:, part] = ((created[part][None, :] <= t[:, None])
                                   & (expires[part][None, :] > t[:, None]))
        if notes.namespace is not None:
            # separate stores (one per user or conversation) in one stream
            self.valid &= notes.namespace[self.idx][None, :] == namespaces[:, None]
        self.qnorm2 = qnorm2
        #: the queries' embeddings (Q, D), for a retriever that searches an index
        self.qemb = qemb
        self._dots: np.ndarray | None = None
        #: (B,) bool: the blocks of :data:`PRODUCT_BLOCK` columns whose dot
        #: products the batch's values are built on (zeros stand for the
        #: others); fixed at the first read of :attr:`dots` (None before)
        self._real: np.ndarray | None = None
        #: values shared by every arm of the batch (see BatchContext.shared)
        self.cache: dict = {}
        #: (L,) bool, the notes every arm of the replay has evicted (no arm
        #: can see them this batch: the shared levels leave them out); None
        #: when unknown (set with :meth:`set_dead`)
        self.dead: np.ndarray | None = None

    def _open_blocks(self) -> np.ndarray:
        """(B,) bool: the product blocks holding a note some arm can see."""
        n = len(self.idx)
        nb = -(-n // PRODUCT_BLOCK)
        if self.dead is None:
            return np.ones(nb, dtype=bool)
        dead = np.ones(nb * PRODUCT_BLOCK, dtype=bool)
        dead[:n] = self.dead
        return ~dead.reshape(nb, PRODUCT_BLOCK).all(axis=1)

    def _product(self) -> np.ndarray:
        """The (Q, L) dot products of the queries and the notes, one matrix
        product per block of :data:`PRODUCT_BLOCK` columns of :attr:`_real`
        (zeros in the other blocks).

        A column's floats depend on the columns multiplied with it (BLAS
        tiles them), so the blocks are fixed: a block gives the same floats
        whichever others are multiplied, and a note's similarity does not
        depend on what the other arms evicted."""
        if self._real is None:
            self._real = self._open_blocks()
        q, n = len(self.qemb), len(self.idx)
        emb = self.notes.emb
        out = np.empty((q, n), dtype=np.result_type(self.qemb, emb))
        lo, hi = (int(self.idx[0]), int(self.idx[-1])) if n else (0, -1)
        run = hi - lo + 1 == n  # the notes are consecutive rows: views, no copies
        for b in np.flatnonzero(self._real).tolist():
            s = slice(b * PRODUCT_BLOCK, min(n, (b + 1) * PRODUCT_BLOCK))
            e = emb[lo + s.start:lo + s.stop] if run else emb[self.idx[s]]
            np.matmul(self.qemb, e.T, out=out[:, s])
        # the runs of skipped blocks, each in one write
        edges = np.flatnonzero(np.diff(np.r_[True, self._real, True].astype(np.int8)))
        for a, z in zip(edges[::2].tolist(), edges[1::2].tolist()):
            out[:, a * PRODUCT_BLOCK:z * PRODUCT_BLOCK] = 0
        return out

    @property
    def dots(self) -> np.ndarray:
        """(Q, L) dot products of the queries and the notes (zeros in the
        blocks of notes every arm had evicted when first read): computed
        again (the same calls, the same floats) when a kept batch released
        them (:meth:`ReplayCache.keep`)."""
        if self._dots is None:
            self._dots = self._product()
        return self._dots

    def set_dead(self, dead: np.ndarray | None) -> None:
        """Set :attr:`dead` for this replay; the values built on other dead
        notes (the similarity levels, the per-query batches) are dropped, and
        so are the similarities when a block some arm can now see was not
        multiplied (its products are then computed)."""
        same = (dead is None and self.dead is None) or (
            dead is not None and self.dead is not None and np.array_equal(dead, self.dead))
        self.dead = dead
        if same:
            return
        drop = set(_DEAD_KEYS)
        if self._real is not None:
            more = self._open_blocks() & ~self._real
            if more.any():
                self._real = self._real | more
                self._dots = None  # the products again, with those blocks
                drop.add("similarity")
        for key in [k for k in self.cache if isinstance(k, tuple) and k[0] in drop]:
            del self.cache[key]

    def gains_for(self, idx: np.ndarray) -> np.ndarray:
        """Dense true gains (Q, len(idx)); 0 where no qrel."""
        return self.relevance.dense_gains(self.qrows, idx)

    def subset(self, cols: np.ndarray) -> Batch:
        """The same queries over the note columns ``cols`` only (a policy's
        prefilter candidates), with a cache of its own."""
        sub = Batch.__new__(Batch)
        sub.__dict__.update(self.__dict__)
        sub.idx = self.idx[cols]
        sub.valid = self.valid[:, cols]
        sub._dots = self.dots[:, cols]
        sub.dead = None if self.dead is None else self.dead[cols]
        # the similarities already computed, at those columns (elementwise:
        # the same floats as computing them on the subset)
        sub.cache = {k: v[:, cols] for k, v in self.cache.items()
                     if isinstance(k, tuple) and k[0] == "similarity"}
        return sub

    def row(self, i: int) -> Batch:
        """Query ``i`` alone over the same note columns (the same similarity
        cells and anchor), kept in the cache so that every arm shares it."""
        key = ("row", i)
        if key not in self.cache:
            sub = Batch.__new__(Batch)
            sub.__dict__.update(self.__dict__)
            r = slice(i, i + 1)
            sub.qrows, sub.t, sub.actors = self.qrows[r], self.t[r], self.actors[r]
            sub.valid, sub._dots = self.valid[r], self.dots[r]
            sub.qnorm2, sub.qemb = self.qnorm2[r], self.qemb[r]
            sub.cache = {}
            self.cache[key] = sub
        return self.cache[key]


#: columns of a batch's similarity product computed in one call (:meth:`Batch._product`)
PRODUCT_BLOCK = 2048

#: the keys of a batch's cache whose values depend on its ``dead`` notes
_DEAD_KEYS = ("similarity-order", "row")


class ReplayCache:
    """The work replays of the same stream share from one :func:`simulate`
    call to the next: the stream's arrays and each batch's similarity, levels
    and other values shared by its arms (:class:`Batch`), kept up to
    ``max_bytes`` of arrays in all.

    A sweep replays the same replicate streams once per batch of trials;
    only the arms change, so the similarity products and the levels built on
    them are the same every time. The results are those of a replay without
    the cache, bit for bit: a kept batch's values are what it would compute
    again, and those that depend on the arms (the notes every arm evicted)
    are rebuilt when those differ (:meth:`Batch.set_dead`).

    Batches are kept in the order they are first met until the budget is
    spent (the earliest are the smallest); nothing is dropped to make room.
    A batch's dot products are released when its similarities are kept (a
    retriever that needs them again computes them, the same floats), and
    values that are not arrays (an approximate index) are not kept, so that
    :attr:`nbytes` counts everything the batches hold. Entries are keyed by
    the stream object (``is``) and the tick length; the
    :attr:`MAX_STREAMS` used last are kept (a sweep of workload keys
    replays a new stream for every trial).

    Parameters
    ----------
    max_bytes : int
        Bytes of arrays kept, at most, over every stream (0 keeps nothing).
    """

    #: streams (at a tick length) kept, the ones used last
    MAX_STREAMS = 16

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        #: bytes of the arrays kept
        self.nbytes = 0
        self._work: dict[tuple, _StreamWork] = {}

    def work(self, stream: Stream, tick_days: float) -> _StreamWork:
        """What is kept of ``stream`` at ``tick_days``: its arrays (computed
        on first use) and its batches."""
        key = (id(stream), float(tick_days))
        got = self._work.pop(key, None)
        if got is None or got.stream is not stream:
            # the entry holds the stream, so that its id is not reused
            got = _StreamWork(stream, _inputs(stream))
        self._work[key] = got  # the last used, last
        while len(self._work) > self.MAX_STREAMS:
            self.nbytes -= sum(self._work.pop(next(iter(self._work))).sizes.values())
        return got

    def keep(self, work: _StreamWork, bi: int, batch: Batch) -> None:
        """Keep (or measure again) batch ``bi`` of ``work`` once its arms are
        done, while the budget allows; a kept batch that outgrows it (the
        values its later arms added) is dropped."""
        # one walk: each cache entry's arrays (an entry that is not only
        # arrays is dropped, its walk undone), then the batch's own
        seen = {id(batch.notes), id(batch.relevance), id(batch.logged)}  # not the batch's
        size = 0
        for key, value in list(batch.cache.items()):
            walked = set(seen)
            got = _array_bytes(value, walked)
            if got is None:
                del batch.cache[key]
            else:
                seen, size = walked, size + got
        keys = [k[0] for k in batch.cache if isinstance(k, tuple)]
        if "similarity" in keys and "row" not in keys:
            batch._dots = None  # the similarities are kept and no row holds a view of them
        size += _array_bytes(batch, seen)  # the kept entries count 0 there: seen
        total = self.nbytes - work.sizes.pop(bi, 0)
        work.batches.pop(bi, None)
        if total + size <= self.max_bytes:
            work.batches[bi], work.sizes[bi] = batch, size
            total += size
        self.nbytes = total


@dataclass(eq=False)
class _StreamWork:
    """What a :class:`ReplayCache` keeps of one stream: its arrays
    (:class:`_Inputs`) and its batches by index, with their bytes."""

    stream: Stream
    inputs: _Inputs
    batches: dict[int, Batch] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)


def _array_bytes(x: Any, seen: set[int]) -> int | None:
    """Bytes of the numpy arrays ``x`` holds that own their data (in dicts,
    lists, tuples and object attributes, each counted once; ids in ``seen``
    are left out); None when it holds an object of another kind."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, np.generic)):
        return 0
    if id(x) in seen:
        return 0
    seen.add(id(x))
    if isinstance(x, np.ndarray):
        # a view's data is its base's, counted where the base is held (a
        # batch's views are of its own arrays or of the stream's)
        return x.nbytes if x.base is None else 0
    if isinstance(x, dict):
        parts = [_array_bytes(v, seen) for v in x.values()]
    elif isinstance(x, (list, tuple)):
        parts = [_array_bytes(v, seen) for v in x]
    elif hasattr(x, "__dict__") and type(x).__module__ == __name__:
        parts = [_array_bytes(v, seen) for v in vars(x).values()]
    else:
        return None
    return None if None in parts else sum(parts)


class _NoteColumns:
    """The note columns and per-arm state a context reads at its ``idx``
    (a vector of rows, or a matrix of gathered cells): shared by the batch's
    context and the pruned scoring's gathered one."""

    notes: NoteArrays
    state: PolicyState
    idx: np.ndarray

    @property
    def tokens(self) -> np.ndarray:
        return self.notes.tokens[self.idx]

    @property
    def importance(self) -> np.ndarray:
        return self.notes.importance[self.idx]

    @property
    def salience(self) -> np.ndarray:
        return self.notes.salience[self.idx]

    @property
    def pinned(self) -> np.ndarray:
        return self.notes.pinned[self.idx]

    @property
    def memory_type(self) -> np.ndarray:
        return self.notes.memory_type[self.idx]

    @property
    def recalls(self) -> np.ndarray:
        return self.state.recalls[self.idx]

    @property
    def superseded_at(self) -> np.ndarray:
        return _superseded(self.notes)[self.idx]

    @property
    def tier(self) -> np.ndarray:
        return self.state.tier[self.idx]


class BatchContext(_NoteColumns):
    """A :class:`Batch` seen by one arm: the engine's
    :class:`~memsim.policies.context.ScoringContext`.

    Matrices are (Q, L) with L = ``len(idx)``; note vectors are (L,). Values
    that do not depend on the arm (the similarity, the ages since creation
    and update) are computed once per batch and shared by every arm through
    the batch's cache; the arm's own state (uses, tiers, actors) is read
    lazily. Components read attributes; nothing here is mutated by them.
    """

    def __init__(self, batch: Batch, state: PolicyState, rng: np.random.Generator):
        self.batch = batch
        self.state = state
        self.rng = rng
        self.t = batch.t
        self.idx = batch.idx
        self.notes = batch.notes
        #: (Q, L) bool: the notes each query may see (existing, not expired,
        #: not evicted, inside the prefilter); set by the engine before scoring
        self.live: np.ndarray | None = None
        #: the prefilter's cells, (Q, M) columns ascending and which are
        #: real, when they are the live ones and the arm scores them alone
        self.prefilter_cells: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def live(self) -> np.ndarray | None:
        if self._live is None and self._live_parts is not None:
            valid, evicted = self._live_parts
            self._live = valid & ~evicted[None, :]
            self._live_parts = None
        return self._live

    @live.setter
    def live(self, value: np.ndarray | None) -> None:
        self._live = value
        self._live_parts = None

    def set_live_lazily(self, valid: np.ndarray, evicted: np.ndarray) -> None:
        """``live = valid & ~evicted`` ((Q, L) and (L,)), computed on first
        read only: a pruned arm reads only the cells it scores."""
        self._live = None
        self._live_parts = (valid, evicted)

    def live_cells(self, flat: np.ndarray, cols: np.ndarray,
                   valid_cells: np.ndarray | None = None) -> np.ndarray:
        """``live`` at the flat (row-major) cell indices ``flat``, whose note
        columns are ``cols`` (``valid_cells``: the batch's ``valid`` there,
        when known)."""
        if self._live_parts is None:
            return np.take(self.live, flat)
        valid, evicted = self._live_parts
        if valid_cells is None:
            valid_cells = np.take(valid, flat)
        return valid_cells & ~evicted[cols]

    # -- shared, from the batch -------------------------------------------
    @property
    def dots(self) -> np.ndarray:
        return self.batch.dots

    @property
    def qnorm2(self) -> np.ndarray:
        return self.batch.qnorm2

    @property
    def nnorm2(self) -> np.ndarray:
        return self.notes.norm2[self.idx]

    @property
    def note_vectors(self) -> np.ndarray:
        return self.notes.emb[self.idx]

    @property
    def query_vectors(self) -> np.ndarray:
        return self.batch.qemb

    def shared(self, key, compute):
        """A value computed once per batch and shared by every arm (the
        similarity matrix, the age matrix): ``compute()`` runs on first use."""
        cache = self.batch.cache
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def similarity(self, retriever) -> np.ndarray:
        """The retriever's similarity (Q, L), shared across arms."""
        return self.shared(("similarity", retriever.name),
                           lambda: retriever.similarity(self))

    @property
    def age_created(self) -> np.ndarray:
        return self.shared("age_created",
                           lambda: self.t[:, None] - self.notes.created_at[self.idx][None, :])

    @property
    def age_updated(self) -> np.ndarray:
        return self.shared("age_updated",
                           lambda: self.t[:, None] - self.notes.updated_at[self.idx][None, :])

    @cached_property
    def since_access(self) -> np.ndarray:
        """Days since last access; NaN where never accessed."""
        return self.t[:, None] - self.state.last_access[self.idx][None, :]

    @cached_property
    def age_last_access(self) -> np.ndarray:
        """Days since last access, counting creation as the first access."""
        s = self.since_access
        return np.where(np.isnan(s), self.age_created, s)

    def age(self, clock: str) -> np.ndarray:
        return getattr(self, AGE_CLOCKS[clock])

    def exponential_recency(self, clock: str, floor, rate) -> np.ndarray | None:
        """``floor + (1 - floor) * exp(-rate * age)`` (Q, L) for the ages of
        ``clock`` (negative ages count as 0), or None for a clock without an
        origin.

        Every clock's age is ``t_q - origin_n``; with ``t0`` the batch's anchor
        (the end of its tick), ``exp(-r (t_q - o)) = exp(-r (t_q - t0)) *
        exp(-r (t0 - o))``: one exponential per note and one per (query,
        distinct rate) instead of one per cell (see :func:`_exponential_recency`).
        """
        origin = self.clock_origin(clock)
        if origin is None:
            return None
        return _exponential_recency(self.t, self.batch.t0, origin, floor,
                                    np.asarray(rate, dtype=np.float64))

    def clock_origin(self, clock: str) -> np.ndarray | None:
        """The origin (L,) of ``clock``'s ages, read from the state when first
        asked (None for an unknown clock)."""
        cache = self.__dict__.setdefault("_origins", {})
        if clock not in cache:
            cache[clock] = _clock_origin(clock, self.notes, self.state, self.idx)
        return cache[clock]

    # -- per arm, from the state ---------------------------------------------

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx)

    @cached_property
    def gains(self) -> np.ndarray:
        """True gains (Q, L), 0 where no qrel: only a ranker that declares
        ``needs_truth`` may read this."""
        return self.batch.gains_for(self.idx)

    # -- the planted model (for rankers that declare needs_planted) ---------
    @property
    def planted(self) -> PlantedModel | None:
        return self.notes.planted

    @property
    def note_class(self) -> np.ndarray:
        nc = self.notes.note_class
        return np.full(len(self.idx), -1, dtype=np.int64) if nc is None else nc[self.idx]

    @property
    def note_actor(self) -> np.ndarray:
        return self.notes.actor[self.idx]

    # -- the logged rankings (for rankers that declare needs_logged) ---------
    @cached_property
    def _logged(self) -> tuple[np.ndarray, np.ndarray] | None:
        logged = getattr(self.batch, "logged", None)
        return None if logged is None else logged.dense(self.batch.qrows, self.idx)

    @property
    def logged_rank(self) -> np.ndarray | None:
        """(Q, L) rank (from 1) the production system gave each note, ``inf``
        where it did not return it; None when the stream has no logged
        rankings."""
        return None if self._logged is None else self._logged[0]

    @property
    def logged_score(self) -> np.ndarray | None:
        """(Q, L) score the production system logged, NaN where none; None
        when the stream has no logged rankings."""
        return None if self._logged is None else self._logged[1]

    @property
    def query_actor(self) -> np.ndarray:
        return self.batch.actors


def _clock_origin(clock: str, notes: NoteArrays, state: PolicyState, idx: np.ndarray
                  ) -> np.ndarray | None:
    """The time each note of ``idx`` (any shape) counts ``clock``'s age from:
    creation, last update, or last use (creation when never used)."""
    if clock == "created":
        return notes.created_at[idx]
    if clock == "updated":
        return notes.updated_at[idx]
    if clock == "last_access":
        last = state.last_access[idx]
        return np.where(np.isnan(last), notes.created_at[idx], last)
    return None


#: largest exponent ``rate * (t0 - t)`` of a query factor: beyond it the
#: factor could overflow, and the cell is computed directly
_MAX_EXPONENT = 300.0


def _exponential_recency(t: np.ndarray, t0: float, origin: np.ndarray, floor,
                         rate: np.ndarray) -> np.ndarray:
    """``floor + (1 - floor) * exp(-rate * max(t - origin, 0))`` for queries
    ``t`` (Q,) and notes ``origin`` (L,), or cells ``origin`` (Q, W).

    A cell is computed as ``exp(-rate (t - t0)) * exp(-rate (t0 - origin))``
    (one exponential per note and per (query, rate)) when its age is >= 0 and
    its query factor cannot overflow, else directly. A cell's value therefore
    depends on its own query time, note and rate and on ``t0`` only, never
    on which other cells are computed with it: a full batch, a few gathered
    cells (pruning) and one query's row (per-query feedback) give the same
    floats.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        note_factor = np.exp(-rate * (t0 - origin))  # (L,) or scalar rate broadcast
        if origin.ndim == 1:
            rates, inverse = np.unique(np.broadcast_to(rate, origin.shape),
                                       return_inverse=True)
            query_factor = np.exp(-(t - t0)[:, None] * rates[None, :])  # (Q, K), >= 1
            rec = np.take(query_factor, inverse, axis=1) if len(rates) > 1 else (
                np.repeat(query_factor, len(origin), axis=1))
        elif rate.ndim:
            # cells: the same exponential of the same product, cell by cell
            # (or row by row: a rate per row, arms scored as one array)
            rec = np.exp(-(t - t0)[:, None] * rate)
            if rec.shape != origin.shape:
                rec = np.repeat(rec, origin.shape[1], axis=1)
        else:
            rec = np.repeat(np.exp(-(t - t0)[:, None] * rate[None]), origin.shape[1], axis=1)
        rec *= note_factor
    _direct_cells(rec, t, t0, origin, rate)
    floor = np.asarray(floor, dtype=np.float64)
    if floor.ndim or float(floor) != 0.0:
        rec *= 1.0 - floor
        rec += floor
    return rec


def _direct_cells(rec: np.ndarray, t: np.ndarray, t0: float, origin: np.ndarray,
                  rate: np.ndarray) -> None:
    """Overwrite, in ``rec``, the cells the separable form cannot take (a
    negative age, or a query factor past :data:`_MAX_EXPONENT`) with
    ``exp(-rate * max(age, 0))``. Usually none: the check is on the batch's
    extremes first, and on the few late notes' columns next."""
    tmin = float(t.min())
    risky = float(rate.max(initial=0.0)) * (t0 - tmin) > _MAX_EXPONENT
    if origin.ndim == 1 and not risky:
        cols = np.flatnonzero(origin > tmin)  # notes created or used inside the batch
        if len(cols) == 0:
            return
        o = origin[cols]
        r = rate[cols] if rate.ndim else rate
        bad = o[None, :] > t[:, None]
        if bad.any():
            direct = np.exp(-r * np.maximum(t[:, None] - o[None, :], 0.0))
            sub = rec[:, cols]
            sub[bad] = direct[bad]
            rec[:, cols] = sub
        return
    if not risky and float(origin.max(initial=-np.inf)) <= tmin:
        return
    o = origin if origin.ndim == 2 else origin[None, :]
    r = rate if rate.ndim != 1 or origin.ndim == 2 else rate[None, :]
    if not risky and origin.ndim == 2:
        # gathered cells: only those of notes created or used inside the batch
        at = np.flatnonzero(origin > tmin)
        qt = t[at // origin.shape[1]]
        late = np.take(origin, at)
        bad = late > qt
        if bad.any():
            at, qt, late = at[bad], qt[bad], late[bad]
            rr = np.take(np.broadcast_to(r, origin.shape), at)
            np.put(rec, at, np.exp(-rr * np.maximum(qt - late, 0.0)))
        return
    bad = (o > t[:, None]) | (r * (t0 - t)[:, None] > _MAX_EXPONENT)
    if bad.any():
        direct = np.exp(-np.broadcast_to(r, bad.shape)[bad]
                        * np.maximum(np.broadcast_to(t[:, None] - o, bad.shape)[bad], 0.0))
        rec[bad] = direct


class _GatheredContext(_NoteColumns):
    """Chosen cells of a :class:`BatchContext`: for the queries ``rows`` (R,),
    the note columns ``cols`` (R, W) of each. Matrices are (R, W) and so are
    note vectors (each cell's note); every value is the full context's for
    that cell, computed by the same float operations, so an elementwise
    component scores each cell exactly as on the full context."""

    def __init__(self, full: BatchContext, rows: np.ndarray, cols: np.ndarray,
                 live: np.ndarray | None, cells: _LevelCells | None = None):
        self.full = full
        self.rows = rows
        self.cols = cols
        self.idx = full.idx[cols]
        self.t = full.t[rows]
        self.rng = full.rng
        self.live = live
        self.notes = full.notes
        self.state = full.state
        self._cache: dict = {}
        if cells is None:
            self.flat = rows[:, None] * len(full.idx) + cols
        else:  # a level's cells, shared by every arm: their similarity too
            self.flat = cells.flat
            self._cache[("similarity", cells.retriever)] = cells.sim

    def _cells(self, mat: np.ndarray) -> np.ndarray:
        return np.take(mat, self.flat)

    @property
    def dots(self) -> np.ndarray:
        return self._cells(self.full.dots)

    @property
    def qnorm2(self) -> np.ndarray:
        return self.full.qnorm2[self.rows]

    @property
    def nnorm2(self) -> np.ndarray:
        return self.notes.norm2[self.idx]

    def shared(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def similarity(self, retriever) -> np.ndarray:
        return self.shared(("similarity", retriever.name),
                           lambda: self._cells(self.full.similarity(retriever)))

    @property
    def age_created(self) -> np.ndarray:
        return self.shared("age_created",
                           lambda: self.t[:, None] - self.notes.created_at[self.idx])

    @property
    def age_updated(self) -> np.ndarray:
        return self.shared("age_updated",
                           lambda: self.t[:, None] - self.notes.updated_at[self.idx])

    @cached_property
    def since_access(self) -> np.ndarray:
        return self.t[:, None] - self.state.last_access[self.idx]

    @cached_property
    def age_last_access(self) -> np.ndarray:
        s = self.since_access
        return np.where(np.isnan(s), self.age_created, s)

    def age(self, clock: str) -> np.ndarray:
        return getattr(self, AGE_CLOCKS[clock])

    def exponential_recency(self, clock: str, floor, rate) -> np.ndarray | None:
        # the cells' own origins, from the state as it is now (per-query
        # feedback rescores used notes on a context built before the use)
        origin = _clock_origin(clock, self.notes, self.state, self.idx)
        if origin is None:
            return None
        return _exponential_recency(self.t, self.full.batch.t0, origin, floor,
                                    np.asarray(rate, dtype=np.float64))

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx.ravel()).reshape(self.idx.shape)

    @property
    def note_actor(self) -> np.ndarray:
        return self.notes.actor[self.idx]

    @property
    def query_actor(self) -> np.ndarray:
        return self.full.query_actor[self.rows]


@dataclass(frozen=True, eq=False)
class _LevelCells:
    """The padded cells (R, W) of one pruning level: note columns, which are
    real, the level's thresholds (R,), flat indices into the batch's (Q, L)
    matrices, and the similarity and ``real & valid`` there."""

    cols: np.ndarray
    real: np.ndarray
    tau: np.ndarray
    flat: np.ndarray
    sim: np.ndarray
    valid: np.ndarray
    retriever: str


class _SimOrder:
    """The notes of each query of a batch by decreasing similarity, in levels
    shared by every arm: level ``m`` holds, per query, the valid notes whose
    similarity is above a threshold ``tau`` chosen (from a fixed sample of
    the columns) so that about ``m`` notes are above it. Every note left out
    of a level has a similarity <= its ``tau``, or is one no arm can see (the
    batch's ``dead`` notes: every arm evicted it), which no level holds. A
    row is scanned once, at a level above the one first asked, and lower
    levels are filtered from it."""

    SAMPLE = 4096

    def __init__(self, sim: np.ndarray, valid: np.ndarray, dead: np.ndarray | None = None):
        self.sim = sim
        self.n_all = sim.shape[1]
        #: the columns some arm can see, ascending
        self.open = (np.arange(self.n_all) if dead is None or not dead.any()
                     else np.flatnonzero(~dead))
        self.valid = valid
        self.dead = dead if len(self.open) < self.n_all else None
        n = len(self.open)
        # about n / 8 columns, 512 to SAMPLE: thresholds from a sample that
        # costs a fraction of one pass over the row
        step = max(1, n // min(self.SAMPLE, max(512, n // 8)))
        # negated: the j-th smallest is the j-th largest similarity (an order
        # statistic per level asked, not a sort of the whole sample)
        self.neg_sample = -np.asarray(sim[:, self.open[::step]] if n < self.n_all
                                      else sim[:, ::step], dtype=np.float64)
        #: how many notes the levels are counted in
        self.n = n
        self._tau: dict[int, np.ndarray] = {}
        self._sorted: np.ndarray | None = None
        self._cols: dict[int, dict[int, np.ndarray]] = {}
        self._cells: dict[tuple, _LevelCells] = {}
        self._block_max: np.ndarray | None = None
        self._group_max: np.ndarray | None = None

    def cells(self, level: int, todo: np.ndarray, full: bool, retriever: str) -> _LevelCells:
        """The cells the queries ``todo`` score at ``level`` (every note when
        ``full``), built once per batch and shared by every arm that asks."""
        key = (level, full, todo.tobytes())
        got = self._cells.get(key)
        if got is None:
            cols, real, tau = _level_cells(self, level, todo, full)
            flat = todo[:, None] * self.n_all + cols
            got = _LevelCells(cols=cols, real=real, tau=tau, flat=flat,
                              sim=np.take(self.sim, flat), valid=real & np.take(self.valid, flat),
                              retriever=retriever)
            self._cells[key] = got
        return got

    def block_max(self) -> np.ndarray:
        """(Q, B): the largest similarity of each block of :data:`_BLOCK`
        consecutive columns (the similarity filter's, :func:`_kept_cells`);
        +inf for a block with a NaN similarity (its cells are then compared
        one by one), -inf for one whose notes no arm can see (not read)."""
        if self._block_max is None:
            q, n = self.sim.shape
            if self.dead is None:
                bm = np.maximum.reduceat(self.sim, np.arange(0, n, _BLOCK), axis=1)
            else:  # the blocks some arm can see: often a small part of the store
                bm = np.full((q, -(-n // _BLOCK)), -np.inf, dtype=self.sim.dtype)
                seen = np.unique(self.open // _BLOCK)
                cols = np.minimum((seen[:, None] * _BLOCK + np.arange(_BLOCK)).ravel(), n - 1)
                bm[:, seen] = np.maximum.reduceat(self.sim[:, cols],
                                                  np.arange(0, len(cols), _BLOCK), axis=1)
            bm[np.isnan(bm)] = np.inf
            self._block_max = bm
        return self._block_max

    def group_max(self) -> np.ndarray:
        """(Q, G): the largest similarity of each group of :data:`_GROUP`
        blocks (+inf where a block's is)."""
        if self._group_max is None:
            bm = self.block_max()
            self._group_max = np.maximum.reduceat(bm, np.arange(0, bm.shape[1], _GROUP), axis=1)
        return self._group_max

    def full_blocks(self) -> np.ndarray:
        """The similarity's whole blocks as (Q, B', :data:`_BLOCK`), a view."""
        q, n = self.sim.shape
        full = n // _BLOCK
        return self.sim[:, :full * _BLOCK].reshape(q, full, _BLOCK)

    def _rank(self, m: int) -> int:
        """The sample rank whose value is level ``m``'s threshold."""
        return -(-m * self.neg_sample.shape[1] // self.n)

    def _set_tau(self, m: int, tau: np.ndarray) -> None:
        self._tau[m] = tau
        self._cols[m] = {}

    def tau(self, m: int) -> np.ndarray:
        if m in self._tau:
            return self._tau[m]
        q, k = self.neg_sample.shape
        j = self._rank(m)
        if j >= k:
            self._set_tau(m, np.full(q, -np.inf))
        elif not self._tau:
            # the batch's first level: its scan (cols) reads the level four
            # times as deep, so both thresholds are found here, by two
            # partitions (the second over the jh smallest only: numpy's
            # partition at several ranks at once is several times slower)
            hi = _level(4 * m)
            jh = self._rank(hi)
            if jh < k:
                part = np.partition(self.neg_sample, jh, axis=1)
                self._set_tau(hi, -part[:, jh])
                if j < jh:
                    part = np.partition(part[:, :jh], j, axis=1)
            else:
                part = np.partition(self.neg_sample, j, axis=1)
            self._set_tau(m, -part[:, j])
        else:
            # a further level: the sample sorted once, and every level
            # after it is a read
            if self._sorted is None:
                self._sorted = np.sort(self.neg_sample, axis=1)
            self._set_tau(m, -self._sorted[:, j])
        return self._tau[m]

    def cols(self, m: int, rows: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """For each query of ``rows``: the valid columns above level ``m``'s
        threshold (ascending), and the thresholds (R,)."""
        tau = self.tau(m)
        got = self._cols[m]
        scan = []
        for r in rows.tolist():
            if r not in got:
                c = self._from_higher(m, r)
                if c is None:
                    scan.append(r)
                else:
                    got[r] = c
        if scan:
            self._scan(m, np.array(scan))
        return [got[r] for r in rows.tolist()], tau[rows]

    def _scan(self, m: int, rows: np.ndarray) -> None:
        """Scan the rows ``rows`` (none of them at a level above ``m`` yet)
        at the level four times as deep, kept for the lower thresholds to
        come, and filter level ``m`` from it: one pass over the rows."""
        hi = _level(4 * m)
        # the thresholds are sample values: exact in the similarity's own
        # dtype, where the comparison is cheaper
        thi = self.tau(hi)[rows]
        tau = self.tau(m)
        deep, at_m = self._cols[hi], self._cols[m]
        every = ~np.isfinite(thi)  # a level as deep as the whole store
        for r in rows[every].tolist():
            deep[r] = c = self.open[self.valid[r, self.open]]
            at_m[r] = c[self.sim[r, c] > tau[r]]
        thi = thi[~every].astype(self.sim.dtype)
        rows = rows[~every]
        if not np.array_equal(rows, np.arange(len(self.sim))):
            # some rows (an arm's unproven ones): each on its own, no copies
            for r, th in zip(rows.tolist(), thi):
                hit = (self.sim[r] > th) & self.valid[r]
                if self.dead is not None:
                    hit &= ~self.dead
                deep[r] = c = np.flatnonzero(hit)
                at_m[r] = c[self.sim[r, c] > tau[r]]
            return
        # every row (a batch's first level): one comparison over the matrix,
        # or over the open columns alone when some are dead (retention often
        # leaves a small part of the store)
        dead = self.dead is not None
        hit = (self.sim[:, self.open] if dead else self.sim) > thi[:, None]
        hit &= self.valid[:, self.open] if dead else self.valid
        r_i, c = np.divmod(np.flatnonzero(hit), hit.shape[1])  # row-major: columns ascending
        if dead:
            c = self.open[c]
        above = self.sim[r_i, c] > tau[r_i]
        ends = np.searchsorted(r_i, np.arange(1, len(rows) + 1)).tolist()
        start = 0
        for r, end in zip(rows.tolist(), ends):
            deep[r] = c[start:end]
            at_m[r] = c[start:end][above[start:end]]
            start = end

    def _from_higher(self, m: int, r: int) -> np.ndarray | None:
        """Row ``r``'s columns at level ``m``, filtered from the smallest
        higher level already scanned (None when there is none)."""
        best = None
        for lv, got in self._cols.items():
            if lv > m and r in got and (best is None or lv < best):
                best = lv
        if best is None:
            return None
        c = self._cols[best][r]
        return c[self.sim[r, c] > self._tau[m][r]]


def _prune_plan(policy: Policy, ctx: BatchContext) -> tuple[float | None, float | None] | None:
    """(lowest, highest recency) the ranker's bound needs when the policy can
    be pruned (module docstring), else None."""
    r = policy.ranker
    if (not PRUNE or r.set_dependent or r.needs_truth or r.needs_planted
            or getattr(r, "needs_logged", False) or hasattr(r, "candidate_mask")
            or type(r).score_bound is Ranker.score_bound):
        return None
    if policy.breadth.score_factor_bound(ctx) != 1.0:
        return None
    lo = hi = None
    if r.uses_recency:
        hi = policy.decay.upper_bound()
        if hi is None:
            return None
        acc = policy.stickiness.access_term_bound(ctx)
        if acc is None:
            return None
        if acc > 0:
            f = policy.breadth.access_factor_bound(ctx)
            if f is None:
                return None
            hi = hi + acc * f
        hi = hi * (1.0 + 1e-9)  # rounding of the computed recency
        lo = policy.decay.lower_bound()
        if lo is not None:
            lo = lo * (1.0 - 1e-9)
    if r.score_bound(np.zeros(1), lo, hi, ctx) is None:
        return None
    return lo, hi


def _sim_order(ctx: BatchContext, retriever) -> _SimOrder:
    """The batch's similarity levels of ``retriever``, shared by every arm."""
    return ctx.shared(("similarity-order", retriever.name),
                      lambda: _SimOrder(ctx.similarity(retriever), ctx.batch.valid,
                                        ctx.batch.dead))


def _level(x: float) -> int:
    """The smallest level >= x of the ladder 64 * sqrt(2) ** k."""
    k = max(0, int(np.ceil(2.0 * np.log2(max(x, 64.0) / 64.0) - 0.05)))
    return int(round(64 * 2.0 ** (k / 2.0)))


def _level_cells(order: _SimOrder, level: int, todo: np.ndarray, full: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells the queries ``todo`` score at this level: columns (padded),
    which of them are real, and the similarity threshold below which no note
    was taken (-inf when every open note is)."""
    if full:
        n = len(order.open)
        return (np.broadcast_to(order.open, (len(todo), n)),
                np.ones((len(todo), n), dtype=bool), np.full(len(todo), -np.inf))
    lists, tau = order.cols(level, todo)
    width = max(1, max(len(x) for x in lists))
    cols = np.zeros((len(todo), width), dtype=np.int64)
    real = np.zeros((len(todo), width), dtype=bool)
    for i, x in enumerate(lists):  # a loop over the batch's queries, not notes
        cols[i, :len(x)] = x
        real[i, :len(x)] = True
    return cols, real, tau


def _proven(vals: np.ndarray, k: int, full: bool, left_out: np.ndarray) -> np.ndarray:
    """Which queries' top ``k`` found on a similarity level (``vals``, best
    first) is their exact top ``k``: every note was looked at (``full``), or
    the k-th value found is strictly above ``left_out``, what any note the
    level left out could reach (so no such note enters, or ties in)."""
    if full:
        return np.ones(len(vals), dtype=bool)
    if vals.shape[1] < k:
        return np.zeros(len(vals), dtype=bool)
    kth = vals[:, k - 1]
    return np.isfinite(kth) & (kth > left_out)


def _cell_scores(policy: Policy, g: _GatheredContext, st: PolicyState) -> np.ndarray | None:
    """The policy's scores of the gathered cells, -inf where not live (or
    NaN); None when a component reads what gathered cells lack: the arm is
    then scored by whole rows (``st.prune_off``)."""
    try:
        scores = np.asarray(policy.score(g), dtype=np.float64)
    except AttributeError:
        scores = None
    if scores is None or scores.shape != g.cols.shape:
        st.prune_off = True
        return None
    return np.where(g.live & ~np.isnan(scores), scores, -np.inf)


def _pruned_top(policy: Policy, ctx: BatchContext, c: int,
                st: PolicyState) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the policy's masked scores without scoring
    every live note (module docstring), or None when the policy cannot be
    pruned (then the caller scores in full)."""
    q, n = len(ctx.t), len(ctx.idx)
    if st.prune_off or n == 0:
        return None
    plan = _prune_plan(policy, ctx)
    if plan is None:
        return None
    lo, hi = plan
    ranker, retriever = policy.ranker, policy.retriever
    cc = min(c, n)
    order = _sim_order(ctx, retriever)
    pos = np.zeros((q, cc), dtype=np.int64)
    vals = np.full((q, cc), -np.inf)
    todo = np.arange(q)
    base = _level(2 * c)
    level = max(base, st.prune_level)
    need = 0
    highs: np.ndarray | bool | None = None  # per-block recency bounds, when first needed
    scanned = _level(4 * level)  # the first scan's depth: levels down to it cost no pass
    far = 0  # notes the deepest filtered query would have scored on a level
    while len(todo):
        full = 2 * level >= order.n
        level_cells = order.cells(level, todo, full, retriever.name)
        cells, live = _live_cells(level_cells, ctx, c)
        cols, tau = cells.cols, cells.tau
        scores = _cell_scores(policy, _GatheredContext(ctx, todo, cols, live, cells), st)
        if scores is None:
            return None
        p, v = top_candidates(scores, c)  # columns ascending: ties to the lower
        with np.errstate(invalid="ignore", over="ignore"):
            bound = np.asarray(ranker.score_bound(tau, lo, hi, ctx), dtype=np.float64)
        done = _proven(v, cc, full, np.where(np.isneginf(tau), -np.inf, bound))
        if done.any():
            d = np.flatnonzero(done)
            every = len(d) == len(todo)  # the rows' own arrays, no copies
            rows = todo[d]
            w = min(cc, p.shape[1])  # fewer only when every open note was scored
            pos[rows, :w] = np.take_along_axis(cols if every else cols[d], p[d, :w], axis=1)
            vals[rows, :w] = v[d, :w]
            # notes a query had to score: those whose bound reaches its C-th score
            kth = v[d, cc - 1] if w == cc else np.full(len(d), -np.inf)
            if np.isfinite(kth).all():
                sim, real = ((level_cells.sim, level_cells.real) if every else
                             (level_cells.sim[d], level_cells.real[d]))
                with np.errstate(invalid="ignore", over="ignore"):
                    b = np.asarray(ranker.score_bound(sim, lo, hi, ctx), dtype=np.float64)
                need = max(need, int(((b >= kth[:, None]) & real).sum(axis=1).max()))
        if not full and not done.all() and (level >= scanned or st.prune_filter):
            if highs is None:
                highs = _recency_blocks(policy, ctx, hi)
                highs = False if highs is None else highs
            # the level's C-th best score is one each query's top C reaches
            kth = v[:, cc - 1] if v.shape[1] >= cc else np.full(len(todo), -np.inf)
            filt = ~done & np.isfinite(kth)
            if highs is not False and filt.any():
                rows = todo[filt]
                got = _filtered_top(policy, ctx, c, st, order, highs, lo, rows, kth[filt])
                if got is None:
                    return None
                pos[rows], vals[rows] = got
                done |= filt
                far = max(far, _level_needed(ranker, ctx, order, rows, got[1][:, cc - 1], lo, hi))
        todo = todo[~done]
        level = _level(4 * level)
    # the next batch starts at the level its queries needed, unless that is
    # deeper than the first scan holds: then it filters after its first level
    st.prune_filter = far > _level(4 * base)
    st.prune_level = max(base, _level(1.1 * max(need, 0 if st.prune_filter else far) + c))
    return pos, vals


def _level_needed(ranker: Ranker, ctx: BatchContext, order: _SimOrder, rows: np.ndarray,
                  kth: np.ndarray, lo: float | None, hi: float | None) -> int:
    """About how many notes the deepest of the queries ``rows`` would have
    had to score on a level to prove its top C (C-th score ``kth``): those
    of the sample whose similarity reaches ``similarity_needed`` at the
    highest recency, scaled to the store."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        need = np.asarray(ranker.similarity_needed(kth, lo, hi, ctx), dtype=np.float64)
    above = (order.neg_sample[rows] <= -need[:, None]).sum(axis=1)
    return int(above.max(initial=0)) * order.n // order.neg_sample.shape[1]


def _kth_best(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's k-th largest value (-inf when it has fewer than k)."""
    if scores.shape[1] < k:
        return np.full(len(scores), -np.inf)
    return -np.partition(-scores, k - 1, axis=1)[:, k - 1]


#: columns per block of :func:`_recency_blocks`
_BLOCK = 32


def _exponential_form(policy: Policy, ctx: BatchContext):
    """``policy.decay.exponential_form(ctx)``, computed once per arm and
    batch (the stack and the arm's own pruning both ask; a per-tier form is
    a pass over the batch's notes)."""
    got = ctx.__dict__.get("_exponential_form")
    if got is None or got[0] is not policy.decay:
        got = ctx.__dict__["_exponential_form"] = (policy.decay,
                                                   policy.decay.exponential_form(ctx))
    return got[1]


def _filterable(policy: Policy) -> bool:
    """What :func:`_recency_blocks` asks of the components alone (no batch
    work): a ranker that declares ``similarity_needed`` and the plain clock
    as the age."""
    return (type(policy.ranker).similarity_needed is not Ranker.similarity_needed
            and type(policy.stickiness).effective_age is Stickiness.effective_age)


def _recency_blocks(policy: Policy, ctx: BatchContext, hi: float | None) -> np.ndarray | None:
    """Per block of :data:`_BLOCK` consecutive columns (B,), the highest
    recency term any of its notes has at any query of the batch, at most
    the policy's ``hi``; None when the ranker declares no
    ``similarity_needed`` or the recency is not an exponential of a clock
    (``Decay.exponential_form`` of the plain age), whose highest value per
    note is known."""
    if hi is None or not _filterable(policy):
        return None
    form = _exponential_form(policy, ctx)
    clock = policy.decay.clock
    if form is None or clock not in AGE_CLOCKS:
        return None
    floor, rate = (np.asarray(x, dtype=np.float64) for x in form)
    starts = np.arange(0, len(ctx.idx), _BLOCK)
    if floor.ndim == 0 and rate.ndim == 0:
        # one curve: a block's extremes are at its newest and oldest origin
        # (the same for every arm on the creation and update clocks)
        def extremes():
            origin = ctx.clock_origin(clock)
            return np.maximum.reduceat(origin, starts), np.minimum.reduceat(origin, starts)

        newest, oldest = (extremes() if clock == "last_access"
                          else ctx.shared(("origin-blocks", clock), extremes))
    else:
        newest = oldest = ctx.clock_origin(clock)
    with np.errstate(over="ignore", invalid="ignore"):
        # the curve is monotone in the age: its highest value over the
        # batch's queries is at the youngest age or at the oldest
        rec = np.maximum(
            floor + (1.0 - floor) * np.exp(-rate * np.maximum(float(ctx.t.min()) - newest, 0.0)),
            floor + (1.0 - floor) * np.exp(-rate * np.maximum(float(ctx.t.max()) - oldest, 0.0)))
        if rec.shape != starts.shape:
            rec = np.maximum.reduceat(rec, starts)
        acc = policy.stickiness.access_term_bound(ctx)
        if acc:
            rec = rec + acc * policy.breadth.access_factor_bound(ctx)
        # the rounding of the computed recency; never above hi (NaN -> hi)
        return np.fmin(rec * (1.0 + 1e-9), hi)


def _filtered_top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState, order: _SimOrder,
                  highs: np.ndarray, lo: float | None, rows: np.ndarray, kth: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the queries ``rows``, given ``kth`` (R,),
    a score each of them has C notes at or above. A note can score ``kth``
    or more only when its similarity reaches the ranker's
    ``similarity_needed`` at ``kth`` and its block's highest recency, so
    every note of the top C, and every note tied with its C-th, is among
    those; they alone are scored (in column order: ties to the lower)."""
    r, col = _kept_cells(order, rows, [(np.arange(len(rows)), policy, ctx, kth, lo, highs)])
    cells = _padded_cells(order, r, col, rows, policy.retriever.name)
    cells, live = _live_cells(cells, ctx, c)
    scores = _cell_scores(policy, _GatheredContext(ctx, rows, cells.cols, live, cells), st)
    if scores is None:
        return None
    return _top_of_cells(scores, cells.cols, c, len(ctx.idx))


@dataclass(eq=False)
class _Member:
    """An arm of :func:`_stacked_tops`: its context, state, the bounds of its
    pruning and its decay's one exponential (floor, rate)."""

    key: Any
    policy: Policy
    ctx: BatchContext
    st: PolicyState
    lo: float | None
    highs: np.ndarray
    floor: float
    rate: float


def _stack_member(key: Any, policy: Policy, ctx: BatchContext, st: PolicyState
                  ) -> _Member | None:
    """The arm (one :func:`_stackable`) as a member of a stack, or None
    when its score of a cell is not ``ranker.combine(similarity, floor + (1
    - floor) exp(-rate age))`` alone with one floor and rate
    (:meth:`Policy.score` with a neutral stickiness and breadth, and a
    ranker that reads no use, so no state of its own) or it cannot be
    filtered (:func:`_recency_blocks`)."""
    if policy.decay.per_note_form or not _filterable(policy):
        return None  # before the form: a per-tier form is a pass over the notes
    form = _exponential_form(policy, ctx)
    if form is None or np.ndim(form[0]) or np.ndim(form[1]):
        return None
    plan = _prune_plan(policy, ctx)
    highs = None if plan is None else _recency_blocks(policy, ctx, plan[1])
    if highs is None:
        return None
    return _Member(key, policy, ctx, st, plan[0], highs, float(form[0]), float(form[1]))


def _stackable(policy: Policy, st: PolicyState) -> bool:
    """What :func:`_stack_member` asks of the components alone (no batch
    work): a neutral stickiness and breadth, a ranker that reads no use and
    scores gathered cells, no prefilter."""
    s, b, r = policy.stickiness, policy.breadth, policy.ranker
    return not (st.prune_off or policy.retriever.prefilter or not _cells_scorable(policy)
                or not r.uses_recency or r.reads_uses()
                or type(s).access_term is not Stickiness.access_term
                or type(b).on_score is not Breadth.on_score)


def _stacked_tops(items: list[tuple[Any, Policy, BatchContext, int, PolicyState]]
                  ) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """The top C of several arms at once, ``(key, policy, ctx, c, st)`` each:
    key -> (positions, scores) for the arms scored here; the others are
    scored one by one (:func:`_top`).

    Arms with the same retriever, ranker, clock and C whose scores differ
    only by their decay's floor and rate (:func:`_stack_member`) are scored
    as one array, a row per (arm, query), through the two steps of
    :func:`_pruned_top`: the base level's cells, then the cells its C-th best
    score keeps (:func:`_filtered_top`). A cell's recency is computed by the
    same float operations as the arm's own (:func:`_exponential_recency`
    with a floor and rate per row), so every arm gets its own scores bit
    for bit.
    """
    groups: dict[tuple, list[tuple]] = {}
    for key, policy, ctx, c, st in items:
        if _stackable(policy, st):
            groups.setdefault((repr(policy.retriever), repr(policy.ranker),
                               policy.decay.clock, c), []).append((key, policy, ctx, st))
    out: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    for (_, _, _, c), group in groups.items():
        # an arm alone is scored on its own: no member's bounds to compute
        members = [m for m in (_stack_member(*g) for g in group) if m is not None] \
            if len(group) > 1 else []
        if len(members) > 1:
            out.update(_stack_top(members, c))
    return out


def _stack_top(members: list[_Member], c: int) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """:func:`_stacked_tops` of one group (empty when its store is too small
    for levels; an arm with a query short of C live notes on the base level
    is left to be scored on its own)."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    q, n = len(ctx0.t), len(ctx0.idx)
    order = _sim_order(ctx0, policy0.retriever)
    level = _level(2 * c)
    cc = min(c, n)
    if n == 0 or 2 * level >= order.n:
        return {}
    rows = np.arange(q)
    arm = np.repeat(np.arange(len(members)), q)  # the member of each (arm, query) row
    qrow = np.tile(rows, len(members))
    lv = order.cells(level, rows, False, policy0.retriever.name)
    cols = np.tile(lv.cols, (len(members), 1))
    live = np.concatenate([lv.real & m.ctx.live_cells(lv.flat, lv.cols, lv.valid)
                           for m in members])
    kth = _kth_best(_stack_scores(members, arm, qrow, cols, np.tile(lv.sim, (len(members), 1)),
                                  live), cc).reshape(len(members), q)
    # an arm with a query that has fewer than C live notes on the level
    # (one that evicted most of the store) is scored on its own
    ok = np.isfinite(kth).all(axis=1)
    if not ok.all():
        members = [m for m, k in zip(members, ok) if k]
        if len(members) < 2:
            return {}
        kth = kth[ok]
        arm = np.repeat(np.arange(len(members)), q)
        qrow = np.tile(rows, len(members))
    kth = kth.ravel()
    r, col = _kept_cells(order, qrow, [(np.arange(k * q, (k + 1) * q), m.policy, m.ctx,
                                        kth[k * q:(k + 1) * q], m.lo, m.highs)
                                       for k, m in enumerate(members)])
    pos = np.zeros((len(arm), cc), dtype=np.int64)
    vals = np.full(pos.shape, -np.inf)
    where = np.full(len(arm), -1)
    for chunk in _chunks(np.bincount(r, minlength=len(arm))):
        where[chunk] = np.arange(len(chunk))
        pick = where[r] >= 0
        cells = _padded_cells(order, where[r[pick]], col[pick], qrow[chunk],
                              policy0.retriever.name)
        where[chunk] = -1
        live = cells.real.copy()
        for k in np.unique(arm[chunk]).tolist():
            at = np.flatnonzero(arm[chunk] == k)
            live[at] &= members[k].ctx.live_cells(cells.flat[at], cells.cols[at],
                                                  cells.valid[at])
        pos[chunk], vals[chunk] = _top_of_cells(
            _stack_scores(members, arm[chunk], qrow[chunk], cells.cols, cells.sim, live),
            cells.cols, c, n)
    return {m.key: (pos[k * q:(k + 1) * q], vals[k * q:(k + 1) * q])
            for k, m in enumerate(members)}


def _chunks(counts: np.ndarray) -> list[np.ndarray]:
    """The rows (ascending) of one or two padded arrays for rows of
    ``counts`` cells: split where the padded area is least (a few rows that
    keep many more cells than the rest are padded apart)."""
    by = np.argsort(counts, kind="stable")
    c = counts[by]
    n = len(c)
    area = np.arange(1, n + 1) * c + (n - np.arange(1, n + 1)) * c[-1]  # split after k
    k = int(np.argmin(area)) + 1
    return [np.sort(by[:k]), np.sort(by[k:])] if k < n else [np.arange(n)]


def _stack_scores(members: list[_Member], arm: np.ndarray, qrow: np.ndarray, cols: np.ndarray,
                  sim: np.ndarray, live: np.ndarray) -> np.ndarray:
    """The scores of the cells ``cols`` of the rows ``qrow`` of the batch,
    each row scored by its member ``arm``, -inf where not live:
    :meth:`Policy.score` of each member, as one array."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    clock = policy0.decay.clock
    idx = ctx0.idx[cols]
    if clock == "last_access":  # each arm's own uses
        origin = np.empty(idx.shape)
        for k in np.unique(arm).tolist():
            at = np.flatnonzero(arm == k)
            origin[at] = _clock_origin(clock, ctx0.notes, members[k].st, idx[at])
    else:
        origin = _clock_origin(clock, ctx0.notes, members[0].st, idx)
    floor = np.array([m.floor for m in members])[arm][:, None]
    rate = np.array([m.rate for m in members])[arm][:, None]
    rec = _exponential_recency(ctx0.t[qrow], ctx0.batch.t0, origin, floor, rate)
    # the ranker reads no use: any member's cells give it the same columns
    g = _GatheredContext(ctx0, qrow, cols, live)
    scores = np.asarray(policy0.ranker.combine(sim, rec, g), dtype=np.float64)
    return np.where(live & ~np.isnan(scores), scores, -np.inf)


def _needed(policy: Policy, ctx: BatchContext, kth: np.ndarray, lo: float | None,
            highs: np.ndarray, dtype) -> np.ndarray:
    """The ranker's ``similarity_needed`` at ``kth`` and the highest
    recencies ``highs`` (arrays that broadcast), rounded down into the
    similarity's ``dtype`` (NaN: every note), so that comparing the
    similarity keeps a superset."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        need = np.asarray(policy.ranker.similarity_needed(kth, lo, highs, ctx), dtype=np.float64)
        need = np.where(np.isnan(need), -np.inf, need).astype(dtype)
    return np.nextafter(need, need.dtype.type(-np.inf))


#: blocks per group of the similarity filter's first comparison
_GROUP = 16


def _kept_cells(order: _SimOrder, qrow: np.ndarray, parts: list[tuple]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The cells of rows ``qrow`` (queries of the batch; several arms' rows
    may stack) whose similarity reaches the ranker's ``similarity_needed``
    at their row's C-th score ``kth`` and their block's highest recency:
    (row, column), row by row, columns ascending. ``parts``: ``(rows,
    policy, ctx, kth, lo, highs)``, each for its rows (ascending, and after
    the previous part's), ``highs`` per block (:func:`_recency_blocks`).

    The blocks are compared in groups of :data:`_GROUP` first: a group's
    need at its highest recency is one for every note of it (the ranker's
    contract holds for any recency up to it), so a group whose largest
    similarity is below it is left out whole; the blocks of the others are
    compared one by one, then the cells of the blocks that remain."""
    dtype = order.sim.dtype
    bmax, gmax = order.block_max(), order.group_max()
    nb, ng = bmax.shape[1], gmax.shape[1]
    within = np.arange(_GROUP)
    rs, bs, needs = [], [], []
    for rows, policy, ctx, kth, lo, highs in parts:
        q = qrow[rows]
        need = _needed(policy, ctx, kth[:, None], lo,
                       np.maximum.reduceat(highs, np.arange(0, nb, _GROUP))[None, :], dtype)
        r, g = np.divmod(np.flatnonzero(gmax[q] >= need), ng)  # row-major: groups ascending
        b = (g[:, None] * _GROUP + within).ravel()
        r = np.repeat(r, _GROUP)
        inside = b < nb  # the last group may be short
        r, b = r[inside], b[inside]
        need = _needed(policy, ctx, kth[r], lo, highs[b], dtype)
        hit = bmax[q[r], b] >= need
        rs.append(rows[r[hit]])
        bs.append(b[hit])
        needs.append(need[hit])
    r, b, need = (np.concatenate(x) for x in (rs, bs, needs))
    n_all = order.n_all
    sims = np.full((len(r), _BLOCK), -np.inf, dtype=dtype)
    whole = b < n_all // _BLOCK
    sims[whole] = order.full_blocks()[qrow[r[whole]], b[whole]]
    if not whole.all():  # the last block, shorter
        tail = order.sim[:, b[~whole][0] * _BLOCK:]
        sims[~whole, :tail.shape[1]] = tail[qrow[r[~whole]]]
    k, j = np.divmod(np.flatnonzero(sims >= need[:, None]), _BLOCK)
    col = b[k] * _BLOCK + j
    inside = col < n_all  # the last block's padding meets a need of -inf
    return r[k][inside], col[inside]


def _padded_cells(order: _SimOrder, r: np.ndarray, col: np.ndarray, qrow: np.ndarray,
                  retriever: str) -> _LevelCells:
    """Cells given as (row, column) pairs, row by row in column order, as a
    padded (R, W) array of the rows ``qrow`` of the batch (W their most)."""
    cols, real, _ = _packed_left(r, col, np.bincount(r, minlength=len(qrow)))
    flat = qrow[:, None] * order.n_all + cols
    return _LevelCells(cols=cols, real=real, tau=np.full(len(qrow), -np.inf), flat=flat,
                       sim=np.take(order.sim, flat), valid=real & np.take(order.valid, flat),
                       retriever=retriever)


def _top_of_cells(scores: np.ndarray, cols: np.ndarray, c: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_candidates` of gathered cells, as note columns: (R, min(c, n))."""
    p, v = top_candidates(scores, c)
    pos = np.zeros((len(scores), min(c, n)), dtype=np.int64)
    vals = np.full(pos.shape, -np.inf)
    w = min(pos.shape[1], p.shape[1])
    pos[:, :w] = np.take_along_axis(cols, p[:, :w], axis=1)
    vals[:, :w] = v[:, :w]
    return pos, vals


def _cells_scorable(policy: Policy) -> bool:
    """Whether the policy's score of a note can be computed on gathered
    cells: an elementwise ranker that reads no truth, plan or log and does
    not choose its own candidates."""
    r = policy.ranker
    return (PRUNE and not r.set_dependent and not r.needs_truth and not r.needs_planted
            and not getattr(r, "needs_logged", False) and not hasattr(r, "candidate_mask"))


def _within(counts: np.ndarray) -> np.ndarray:
    """Each item's position within its group, for groups of ``counts``
    items one after the other."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def _packed_left(r: np.ndarray, col: np.ndarray, counts: np.ndarray, width: int = 1
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items ``col`` of rows ``r`` (row by row, ``counts`` per row) packed
    to the left of a (rows, W) array, W their most per row (at least
    ``width``): (values, which are real, each item's position in its row)."""
    j = _within(counts)
    shape = (len(counts), max(width, int(counts.max(initial=0))))
    cols = np.zeros(shape, dtype=np.int64)
    real = np.zeros(shape, dtype=bool)
    cols[r, j] = col
    real[r, j] = True
    return cols, real, j


def _prefilter_top(policy: Policy, ctx: BatchContext, c: int,
                   st: PolicyState) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the policy's masked scores when a prefilter
    leaves each query a few live notes (its M nearest): only those cells are
    scored, in column order (so ties still go to the lower note). None when
    the policy has no prefilter or must be scored in full."""
    if st.prune_off or not policy.retriever.prefilter or not _cells_scorable(policy):
        return None
    live = ctx.live
    q, n = live.shape
    if ctx.prefilter_cells is not None:
        cols, real = ctx.prefilter_cells
    else:
        rows, j0 = np.nonzero(live)  # row-major: each row's columns ascending
        cols, real, _ = _packed_left(rows, j0, np.count_nonzero(live, axis=1))
    scores = _cell_scores(policy, _GatheredContext(ctx, np.arange(q), cols, real), st)
    if scores is None:
        return None
    return _top_of_cells(scores, cols, c, n)


#: a level's cells are packed to an arm's live ones when at most this share
#: of them is live (packing costs a few passes over the cells)
_PACK_BELOW = 0.6


def _live_cells(cells: _LevelCells, ctx: BatchContext, c: int
                ) -> tuple[_LevelCells, np.ndarray]:
    """The cells of a level an arm scores, and which of them are live.

    A level holds every valid note above its similarity threshold; the notes
    an arm evicted (or its prefilter left out) are not live for it. When few
    cells are live (a retention that evicts most of the store), they are
    packed to the left, in column order so that ties still go to the lower
    note, and at least ``c`` wide when the level is.
    """
    live = cells.real & ctx.live_cells(cells.flat, cells.cols, cells.valid)
    k = live.sum(axis=1)
    if k.sum() > _PACK_BELOW * live.size:
        return cells, live
    r, j0 = np.nonzero(live)
    cols, real, j = _packed_left(r, cells.cols[r, j0], k,
                                 width=max(1, min(c, cells.cols.shape[1])))
    shape = cols.shape
    # padding: column 0 of the row, as the level's own padding
    flat = np.repeat(cells.flat[:, :1] - cells.cols[:, :1], shape[1], axis=1)
    sim = np.zeros(shape, dtype=cells.sim.dtype)
    flat[r, j] = cells.flat[r, j0]
    sim[r, j] = cells.sim[r, j0]
    return dataclasses.replace(cells, cols=cols, real=real, flat=flat, sim=sim, valid=real), real


def _make_batches(t: np.ndarray, tick_days: float) -> list[tuple[np.ndarray, float]]:
    """Query row groups of each tick, in time order, with the tick's end."""
    if len(t) == 0:
        return []
    tick = np.floor(t / tick_days).astype(np.int64)
    cuts = np.flatnonzero(np.diff(tick)) + 1
    return [(rows, float((tick[rows[0]] + 1) * tick_days))
            for rows in np.split(np.arange(len(t)), cuts)]


def top_candidates(scores: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``c`` best columns of each row, best first; ties broken by the lower
    column (the engine's columns are in ``note_id`` order, so ties go to the
    lower ``note_id``). Returns (positions (Q, c'), scores (Q, c')), c' = min(c, L).
    """
    q, n = scores.shape
    if n <= c:
        order = np.argsort(-scores, axis=1, kind="stable")
        return order, np.take_along_axis(scores, order, axis=1)
    part = np.argpartition(-scores, c - 1, axis=1)[:, :c]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    n_ge = np.count_nonzero(scores >= kth[:, None], axis=1)
    over = np.flatnonzero(n_ge > c)
    pos = part
    if len(over):
        # Ties at the boundary: argpartition picked among equal scores
        # arbitrarily. Keep every score above the c-th, then the lowest
        # columns among those equal to it.
        s = scores[over]
        v = kth[over, None]
        need = c - (s > v).sum(axis=1)
        eq = s == v
        sel = (s > v) | (eq & (np.cumsum(eq, axis=1) <= need[:, None]))
        pos = part.copy()
        pos[over] = np.nonzero(sel)[1].reshape(len(over), c)
    # score descending, then the lower column: columns ascending, then a
    # stable sort by score (faster than one lexsort of both keys)
    pos = np.sort(pos, axis=1)
    vals = np.take_along_axis(scores, pos, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(pos, order, axis=1), np.take_along_axis(vals, order, axis=1)


def _prefilter_mask(ctx: BatchContext, retriever, evicted: np.ndarray
                    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The ``retriever.prefilter`` most similar valid, unevicted notes of
    each query (ties to the lower ``note_id``), as (Q, L) bool: an exact
    nearest-M search. Like the pruned scoring, it looks only at the notes
    above a similarity threshold (the batch's shared levels) and lowers it
    until the M-th found is strictly above it. Also returns the same cells
    as (Q, M) note columns, ascending in each row, and which are real."""
    m = retriever.prefilter
    order = _sim_order(ctx, retriever)
    keep = np.zeros(order.sim.shape, dtype=bool)
    none = order.n_all  # sorts after every column
    chosen = np.full((len(keep), m), none, dtype=np.int64)
    todo = np.arange(len(keep))
    level = _level(2 * m)
    while len(todo):
        full = 2 * level >= order.n
        cells = order.cells(level, todo, full, retriever.name)
        live = cells.valid & ~evicted[cells.cols]
        pos, vals = top_candidates(np.where(live, cells.sim, -np.inf), m)
        done = _proven(vals, m, full, cells.tau)  # a note left out is at or below tau
        d = np.flatnonzero(done)
        cols = np.take_along_axis(cells.cols[d], pos[d], axis=1)
        rows = np.broadcast_to(todo[d][:, None], cols.shape)
        ok = np.isfinite(vals[d])
        keep[rows[ok], cols[ok]] = True
        chosen[todo[d], :cols.shape[1]] = np.where(ok, cols, none)
        todo = todo[~done]
        level = _level(4 * level)
    chosen.sort(axis=1)
    real = chosen < none
    chosen[~real] = 0
    return keep, (chosen, real)


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


@dataclass
class SimResult:
    """Frames of one simulated replicate."""

    queries: pd.DataFrame
    store: pd.DataFrame
    arms: pd.DataFrame
    rankings: pd.DataFrame | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def simulate(stream: Stream, arms: list[Arm], settings: SimSettings,
             seed: np.random.SeedSequence, reader=None, progress=None,
             cache: ReplayCache | None = None) -> SimResult:
    """Replay ``stream`` through every arm; return tidy per-query frames.

    Parameters
    ----------
    stream : Stream
        The workload (with embeddings).
    arms : list of Arm
        Policies (and budgets) to simulate; each keeps its own state.
    settings : SimSettings
        Engine settings.
    seed : numpy.random.SeedSequence
        Root of the random streams of randomised policies (one named child
        stream per arm).
    reader : object, optional
        A reader model with ``answer_prob(position, gains, n_packed)``; when
        None, ``answer_prob`` is NaN.
    progress : callable, optional
        Called with the fraction done after each batch.
    cache : ReplayCache, optional
        Keeps the work that does not depend on the arms (the stream's arrays,
        each batch's similarity and levels) for the next replay of the same
        stream object; the results do not depend on it.
    """
    # The batch products are small (tens of queries x thousands of notes): a
    # multi-threaded BLAS spends more on synchronisation than it saves, and
    # is several times slower still when cores are shared (sweep workers,
    # --jobs). Parallelism comes from processes instead.
    with _threadpools().limit(limits=1, user_api="blas"):
        return _simulate(stream, arms, settings, seed, reader, progress, cache)


@lru_cache(maxsize=1)
def _threadpools() -> ThreadpoolController:
    """The process's thread pools (BLAS, OpenMP), found once: finding them
    reads the loaded libraries, a few milliseconds per call of simulate."""
    return ThreadpoolController()


@dataclass(frozen=True, eq=False)
class _Inputs:
    """The stream as arrays, shared by every arm (rows in stream order)."""

    notes: NoteArrays
    actor_names: list[str]
    relevance: RelevanceIndex
    qt: np.ndarray
    qactor: np.ndarray
    qemb: np.ndarray
    qnorm2: np.ndarray
    qns: np.ndarray | None
    qbudget: np.ndarray
    acc_t: np.ndarray
    acc_rows: np.ndarray
    acc_actor: np.ndarray
    #: the stream's logged rankings (its optional ``retrieved`` table), or None
    logged: LoggedRankings | None = None
    #: each query's category (as text; by row), or None: the queries'
    #: ``category`` column, else the synthetic class asked (``note_class``)
    qcategory: np.ndarray | None = None


def _inputs(stream: Stream) -> _Inputs:
    """Encode the stream: actor and namespace codes, note arrays, query
    vectors, the per-query budget column (NaN where unset), the organic uses."""
    queries = stream.queries
    actor_names = sorted(_texts(stream.notes["actor"]) | _texts(queries["actor"])
                         | _texts(stream.accesses["actor"]))
    actor_codes = {a: i for i, a in enumerate(actor_names)}
    ns_codes = None
    if "namespace" in stream.notes and "namespace" in queries:
        ns_names = sorted(_texts(stream.notes["namespace"]) | _texts(queries["namespace"]))
        ns_codes = {x: i for i, x in enumerate(ns_names)}
    notes = NoteArrays.from_stream(stream, actor_codes, ns_codes)
    qemb = np.ascontiguousarray(stream.query_embeddings, dtype=np.float32)
    note_row = {int(nid): i for i, nid in enumerate(notes.note_id)} if len(
        stream.accesses) else {}
    return _Inputs(
        notes=notes,
        actor_names=actor_names,
        relevance=RelevanceIndex(stream, notes.created_at),
        qt=queries["t"].to_numpy(np.float64),
        qactor=_codes(queries["actor"], actor_codes),
        qemb=qemb,
        qnorm2=np.einsum("ij,ij->i", qemb, qemb, dtype=np.float64),
        qns=None if ns_codes is None else _codes(queries["namespace"], ns_codes),
        qbudget=(queries["budget_tokens"].to_numpy(np.float64)
                 if "budget_tokens" in queries else np.full(len(queries), np.nan)),
        acc_t=stream.accesses["t"].to_numpy(np.float64),
        acc_rows=np.array([note_row[int(x)] for x in stream.accesses["note_id"]],
                          dtype=np.int64),
        acc_actor=_codes(stream.accesses["actor"], actor_codes),
        logged=(LoggedRankings(stream) if getattr(stream, "retrieved", None) is not None
                else None),
        qcategory=next((queries[c].astype(str).to_numpy(dtype=object)
                        for c in ("category", "note_class") if c in queries), None),
    )


@dataclass(eq=False)
class _Collected:
    """What the loop gathers for the result frames."""

    metrics: list[list[dict[str, np.ndarray]]]
    rankings: list[list[dict[str, np.ndarray]]]
    store: list[tuple] = field(default_factory=list)


def _simulate(stream, arms, settings, seed, reader, progress, cache) -> SimResult:
    work = None if cache is None else cache.work(stream, settings.tick_days)
    inp = _inputs(stream) if work is None else work.inputs
    notes = inp.notes
    states = [PolicyState(notes, len(inp.actor_names)) for _ in arms]
    rngs = [child(seed, "policy", arm.stream_name or arm.policy_name, "budget", arm.budget or 0)
            for arm in arms]
    per_query = [feedback_timing(arm.policy, settings) == "per-query" for arm in arms]
    batches = _make_batches(inp.qt, settings.tick_days)
    got = _Collected(metrics=[[] for _ in arms], rankings=[[] for _ in arms])
    next_sweep = -np.inf
    last_store_day = None
    acc_done = np.zeros(len(arms), dtype=np.int64)  # organic uses applied, per arm
    oracle_cache: dict[bytes, np.ndarray] = {}

    for bi, (rows, t0) in enumerate(batches):
        t = inp.qt[rows]
        t_start = t.min()
        # 1. organic uses strictly before this batch
        _organic_uses(inp, arms, states, acc_done, t_start)
        # 2. retention sweeps
        if t_start >= next_sweep:
            _sweep(arms, states, rngs, notes, t_start)
            next_sweep = (np.floor(t_start / settings.retention_period_days) + 1) * \
                settings.retention_period_days
        day = np.floor(t_start)
        if day != last_store_day:
            got.store.extend(_store_rows(notes, states, t_start))
            last_store_day = day
        # 3. shared similarity
        batch = None if work is None else work.batches.get(bi)
        if batch is None:
            batch = Batch(qrows=rows, t=t, actors=inp.qactor[rows], notes=notes,
                          qemb=inp.qemb[rows], qnorm2=inp.qnorm2[rows], relevance=inp.relevance,
                          namespaces=None if inp.qns is None else inp.qns[rows], t0=t0)
            batch.logged = inp.logged  # for rankers that declare needs_logged
        batch.set_dead(_dead(states, batch.idx))
        # 4. each arm (the per-tick ones pack and measure together: _run_arms)
        outs: dict[int, dict] = {}
        tick_jobs: dict[int, _ArmJob] = {}
        for ai, (arm, st) in enumerate(zip(arms, states)):
            budget = resolve_budget(arm, settings, inp.qbudget[rows])
            key = budget.tobytes() + rows.tobytes()
            if key not in oracle_cache:  # arms at the same budgets share the oracle
                oracle_cache.clear()
                oracle_cache[key] = oracle_packing(inp.relevance, rows, t, budget, notes.tokens)
            job = _ArmJob(arm, st, rngs[ai], batch, budget, settings, reader,
                          oracle_cache[key][0], inp.relevance, oracle_cache[key][1])
            if per_query[ai]:
                out, acc_done[ai] = _walk_arm(job, inp, int(acc_done[ai]))
                outs[ai] = out
            else:
                tick_jobs[ai] = job
        outs.update(zip(tick_jobs, _run_arms(list(tick_jobs.values()))))
        for ai, out in outs.items():
            got.metrics[ai].append(out["metrics"])
            if settings.save_rankings:
                got.rankings[ai].append(out["rankings"])
        if work is not None:
            cache.keep(work, bi, batch)
        if progress is not None:
            progress((bi + 1) / len(batches))
    return _result(inp, arms, states, settings, got)


def _dead(states: list[PolicyState], idx: np.ndarray) -> np.ndarray | None:
    """The notes of ``idx`` every arm has evicted (None when no arm evicted
    any): no arm can see them until the next retention sweep, which comes
    only between batches."""
    dead = None
    for st in states:
        ev = st.evicted[idx]
        dead = ev if dead is None else dead & ev
        if not dead.any():
            return None
    return dead


def feedback_timing(policy: Policy, settings: SimSettings) -> str:
    """When a policy's uses take effect: its feedback's ``timing``, or the
    experiment's ``feedback_mode`` when the policy leaves it to the experiment."""
    timing = policy.feedback.timing
    return settings.feedback_mode if timing == "experiment" else timing


def with_timing(policy: Policy, timing: str) -> Policy:
    """``policy`` with its uses taking effect ``timing`` (its feedback's
    ``timing``): the engine checks compare both modes of one preset."""
    return dataclasses.replace(policy, feedback=dataclasses.replace(policy.feedback,
                                                                    timing=timing))


def _organic_uses(inp: _Inputs, arms, states, acc_done: np.ndarray, t_start: float) -> None:
    """Apply the stream's organic uses before ``t_start`` to every arm (those
    each has not applied yet, ``acc_done``, updated in place)."""
    acc_end = int(np.searchsorted(inp.acc_t, t_start, side="left"))
    for ai, (arm, st) in enumerate(zip(arms, states)):
        if acc_end > acc_done[ai]:
            sl = slice(int(acc_done[ai]), acc_end)
            st.touch(inp.acc_rows[sl], inp.acc_actor[sl], inp.acc_t[sl], arm.policy.feedback)
            acc_done[ai] = acc_end


def _store_rows(notes: NoteArrays, states, t: float) -> list[tuple]:
    """(arm, t, live notes, live tokens, invalidated notes kept for audit,
    live notes already superseded) of every arm at time ``t``."""
    live = (notes.created_at <= t) & (notes.expires_at > t)
    stale = live & (_superseded(notes) <= t)
    out = []
    for ai, st in enumerate(states):
        keep = live & ~st.evicted
        out.append((ai, float(t), int(keep.sum()), int(notes.tokens[keep].sum()),
                    int((live & (st.invalid_at <= t)).sum()), int((stale & ~st.evicted).sum())))
    return out


def _arms_frame(arms: list[Arm], per_arm: list[list[dict[str, np.ndarray]]],
                settings: SimSettings, per_query: bool,
                empty: dict[str, np.ndarray] | None = None) -> pd.DataFrame | None:
    """One frame of every arm's batches (column arrays, arm by arm), each
    row labelled with its arm's policy and budget; ``empty``'s columns when
    no arm has a row (None without it). One frame, not one per arm or per
    batch: building frames costs more than scoring in per-query mode."""
    parts = [b for batches in per_arm for b in batches]
    if not parts and empty is None:
        return None
    counts = [sum(len(next(iter(b.values()))) for b in batches) for batches in per_arm]
    budgets = [resolve_budget(a, settings, per_query=per_query) for a in arms]
    return pd.DataFrame({
        # text, not objects: an empty column then has the type a label would give it
        "policy": np.repeat(np.array([a.policy_name for a in arms], dtype=str), counts),
        "budget": np.repeat(np.array(budgets, dtype=np.int64), counts),
        **({k: np.concatenate([b[k] for b in parts]) for k in parts[0]} if parts else empty)})


def _result(inp: _Inputs, arms, states, settings: SimSettings, got: _Collected) -> SimResult:
    """The tidy frames of the run."""
    notes = inp.notes
    pq = bool(np.isfinite(inp.qbudget).any())  # queries with budgets of their own
    qframe = _arms_frame(arms, got.metrics, settings, pq, {"query_id": np.zeros(0, np.int64)})
    qframe["actor"] = np.asarray(inp.actor_names, dtype=object)[
        qframe.pop("actor_code").to_numpy()] if len(qframe) else pd.Series(dtype=object)
    if inp.qcategory is not None:
        # per-category results: the query's category tag, as text
        qframe["category"] = (pd.Series(inp.qcategory, index=inp.relevance.query_ids)
                              .reindex(qframe["query_id"].to_numpy()).to_numpy(dtype=object))

    store = pd.DataFrame(got.store, columns=["arm", "t", "store_notes", "store_tokens",
                                             "store_invalid", "store_stale"])
    store.insert(0, "policy", [arms[i].policy_name for i in store["arm"]])
    store.insert(1, "budget", [resolve_budget(arms[i], settings, per_query=pq)
                               for i in store["arm"]])
    store = store.drop(columns="arm")

    t_end = inp.qt.max() if len(inp.qt) else 0.0
    exist = notes.created_at <= t_end
    longterm = TIER_CODES["longterm"]
    arm_rows = [{
        "policy": arm.policy_name,
        "budget": resolve_budget(arm, settings, per_query=pq),
        "recall_gini": gini(st.recalls[exist]),
        "evicted_notes": int(st.evicted.sum()),
        "promoted_notes": int(((st.tier == longterm) & (notes.tier0 != longterm)).sum()),
        **_supersession_measures(notes, st, t_end),
    } for arm, st in zip(arms, states)]
    rankings = _arms_frame(arms, got.rankings, settings, pq) if settings.save_rankings else None
    return SimResult(queries=qframe, store=store, arms=pd.DataFrame(arm_rows), rankings=rankings)


def _supersession_measures(notes: NoteArrays, st: PolicyState, t_end: float) -> dict:
    """``arms.csv``'s invalidation audit and superseded-use curve of one arm
    (:mod:`memsim.metrics`, "Superseded notes")."""
    sup = _superseded(notes)
    inv = ~np.isnan(st.invalid_at)
    return {"invalidated_notes": int(inv.sum()),
            "invalidated_superseded": int((inv & (sup <= st.invalid_at)).sum()),
            **superseded_use_curve(sup, notes.created_at, st.last_access, float(t_end))}


def _sweep_context(notes: NoteArrays, st: PolicyState, idx: np.ndarray, t: float,
                   rng: np.random.Generator) -> ArrayContext:
    """The notes ``idx`` of one arm at a sweep time ``t``: one pseudo-query,
    no similarity and no ground truth (retention reads neither)."""
    return ArrayContext(
        t=np.array([t]), idx=idx, created_at=notes.created_at[idx],
        updated_at=notes.updated_at[idx], last_access=st.last_access[idx],
        recalls=st.recalls[idx], tier=st.tier[idx], memory_type=notes.memory_type[idx],
        importance=notes.importance[idx], salience=notes.salience[idx],
        pinned=notes.pinned[idx], distinct_actors=st.distinct_actors(idx),
        tokens=notes.tokens[idx], rng=rng, superseded_at=_superseded(notes)[idx],
    )


class _SweepView(_NoteColumns, ArrayContext):
    """:func:`_sweep_context`, its columns gathered only when read: a
    retention reads a few (ai-memory's seven of thirteen), each the same
    values; anything else comes from the full context, built then."""

    def __init__(self, notes: NoteArrays, st: PolicyState, idx: np.ndarray, t: float,
                 rng: np.random.Generator):
        self.notes, self.state, self.idx, self.rng = notes, st, idx, rng
        self.t = np.array([t])
        self.live = None

    @cached_property
    def _full(self) -> ArrayContext:
        return _sweep_context(self.notes, self.state, self.idx, float(self.t[0]), self.rng)

    def __getattr__(self, name: str) -> Any:
        # only for what neither class defines: the full context's
        return getattr(self._full, name)

    @property
    def created_at(self) -> np.ndarray:
        return self.notes.created_at[self.idx]

    @property
    def updated_at(self) -> np.ndarray:
        return self.notes.updated_at[self.idx]

    @property
    def last_access(self) -> np.ndarray:
        return self.state.last_access[self.idx]

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx)


def _superseded(notes: NoteArrays) -> np.ndarray:
    """Each note's supersession time (NaN = never; all NaN when unknown)."""
    if notes.superseded_at is None:
        return np.full(len(notes.note_id), np.nan)
    return notes.superseded_at


def _sweep(arms, states, rngs, notes: NoteArrays, t: float) -> None:
    """Run every arm's retention sweep at time ``t``."""
    exist = np.flatnonzero((notes.created_at <= t) & (notes.expires_at > t))
    for arm, st, rng in zip(arms, states, rngs):
        if not arm.policy.retention.evicts:
            continue
        idx = exist[~st.evicted[exist]]
        if len(idx) == 0:
            continue
        evict = np.asarray(arm.policy.retention.evict(_SweepView(notes, st, idx, t, rng)),
                           dtype=bool)
        st.evicted[idx[evict]] = True
        st.evicted_at[idx[evict]] = t
        if arm.policy.retention.invalidates:
            st.invalid_at[idx[evict]] = t


def _scoring_context(policy: Policy, st: PolicyState, rng, batch: Batch
                     ) -> tuple[BatchContext, Batch]:
    """The context an arm scores, with ``live`` set: the batch's valid,
    unevicted notes, cut to the retriever's prefilter (and, when the ranker
    allows it, to the union of the prefilter's columns). Applies a
    prefilter touch that comes before scoring (Feather DB v0.16)."""
    fb = policy.feedback
    if not policy.retriever.prefilter and not getattr(policy.ranker, "needs_logged", False):
        ctx = BatchContext(batch, st, rng)
        ctx.set_live_lazily(batch.valid, st.evicted[batch.idx])
        return ctx, batch
    mask = cells = None
    ctx = BatchContext(batch, st, rng)
    if policy.retriever.prefilter:
        choose = getattr(policy.retriever, "prefilter_mask", None)
        if choose is not None:  # a retriever that chooses its own candidates (an ANN index)
            mask = batch.valid & ~st.evicted[batch.idx][None, :]
            mask = mask & np.asarray(choose(ctx, mask), dtype=bool)
        else:
            mask, cells = _prefilter_mask(ctx, policy.retriever, st.evicted[batch.idx])
        if fb.touch == "prefilter" and fb.before_scoring:
            qi, li = np.nonzero(mask)
            st.touch(batch.idx[li], batch.actors[qi], batch.t[qi], fb)
            ctx = BatchContext(batch, st, rng)
        if cells is not None and not st.prune_off and _cells_scorable(policy):
            # the prefilter's cells are what the arm scores (_prefilter_top)
            ctx.prefilter_cells = cells
        elif not policy.ranker.set_dependent:
            # only the prefilter's notes can be ranked: score those columns
            # alone (their union over the batch's queries)
            cols = np.flatnonzero(mask.any(axis=0))
            batch, mask = batch.subset(cols), mask[:, cols]
            ctx = BatchContext(batch, st, rng)
    if mask is None:
        mask = batch.valid & ~st.evicted[batch.idx][None, :]
    if policy.ranker.needs_logged:
        # replaying a production system: only the notes it returned
        if ctx.logged_rank is None:
            raise ConfigError(f"ranker {policy.ranker.name!r} needs a stream with logged "
                              "rankings (retrieved.parquet, from a trace's 'retrieved' events)")
        mask = mask & np.isfinite(ctx.logged_rank)
    ctx.live = mask
    return ctx, batch


@dataclass(eq=False)
class _ArmJob:
    """One arm's work on one batch."""

    arm: Arm
    st: PolicyState
    rng: np.random.Generator
    batch: Batch
    budget: np.ndarray
    settings: SimSettings
    reader: Any
    oracle: np.ndarray
    relevance: RelevanceIndex
    #: the oracle's packed set (:func:`memsim.metrics.oracle_packing` keys)
    oracle_keys: np.ndarray | None = None

    @property
    def c(self) -> int:
        p = self.arm.policy
        return self.settings.candidates if p.candidates is None else p.candidates

    def row(self, i: int) -> _ArmJob:
        """The same work for query ``i`` of the batch alone."""
        r = slice(i, i + 1)
        return dataclasses.replace(self, batch=self.batch.row(i), budget=self.budget[r],
                                   oracle=self.oracle[r])


@dataclass(eq=False)
class _Packed:
    """An arm's candidates (Q, C') and what it packs of them."""

    pos: np.ndarray
    vals: np.ndarray
    cand_ok: np.ndarray
    cand_rows: np.ndarray
    tokens: np.ndarray
    gains: np.ndarray
    packed: np.ndarray
    position: np.ndarray


def _top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The arm's top C (positions, scores) and, when every note was scored,
    the mask of the notes that could be candidates (None when pruned)."""
    top = _prefilter_top(policy, ctx, c, st)
    if top is None:
        top = _pruned_top(policy, ctx, c, st)
    if top is not None:
        return top[0], top[1], None
    mask = ctx.live
    scores = np.asarray(policy.score(ctx), dtype=np.float64)
    pick = getattr(policy.ranker, "candidate_mask", None)
    if pick is not None:  # a ranker that chooses its own candidates (LangChain's)
        mask = mask & np.asarray(pick(ctx), dtype=bool)
    scores = np.where(mask & ~np.isnan(scores), scores, -np.inf)
    pos, vals = top_candidates(scores, c)
    return pos, vals, mask


def _pack(job: _ArmJob, batch: Batch, pos: np.ndarray, vals: np.ndarray,
          rows: slice | np.ndarray = slice(None)) -> _Packed:
    """Pack the candidates ``pos``/``vals`` of the queries ``rows`` of ``batch``."""
    return _pack_all([(job, batch, pos, vals, rows)])[0]


def _pack_all(items: list[tuple]) -> list[_Packed]:
    """:func:`_pack` of several arms' candidates, ``(job, batch, pos, vals,
    rows)`` each. Arms that pack alike (the same packer, orderer and C) pack
    as one array, a row per (arm, query): packers and orderers treat rows
    independently, so each row gets what it gets alone."""
    cand = []
    groups: dict[tuple, list[int]] = {}
    for i, (job, batch, pos, vals, rows) in enumerate(items):
        policy = job.arm.policy
        cand_ok = np.isfinite(vals)
        cand_rows = batch.idx[pos]
        gains = job.relevance.lookup(batch.qrows[rows], cand_rows)
        cand.append({"cand_ok": cand_ok, "cand_rows": cand_rows,
                     "tokens": batch.notes.tokens[cand_rows], "gains": gains,
                     "values": gains if policy.ranker.needs_truth else vals,
                     "budget": job.budget[rows]})
        if getattr(policy.packer, "needs_similarity", False):
            cand[-1]["similarity"] = _candidate_similarity(job, batch, pos, rows)
        groups.setdefault((repr(policy.packer), repr(policy.orderer), pos.shape[1]), []).append(i)
    out: list[_Packed] = [None] * len(items)  # type: ignore[list-item]
    for members in groups.values():
        policy = items[members[0]][0].arm.policy
        sim = getattr(policy.packer, "needs_similarity", False)
        got = _rows_of_all([cand[i] for i in members], ("cand_ok", "tokens", "values", "budget")
                           + (("similarity",) if sim else ()))
        ok, values = got["cand_ok"], got["values"]
        extra = {"similarity": np.where(ok, got["similarity"], 0.0)} if sim else {}
        packed = np.asarray(policy.packer.pack(np.where(ok, values, 0.0), got["tokens"], ok,
                                               got["budget"], **extra), dtype=bool)
        packed &= ok
        position = policy.orderer.order(np.where(ok, values, -np.inf), packed)
        for i, sl in zip(members, _row_blocks([cand[i]["cand_ok"] for i in members])):
            c = cand[i]
            out[i] = _Packed(items[i][2], items[i][3], c["cand_ok"], c["cand_rows"], c["tokens"],
                             c["gains"], packed[sl], position[sl])
    return out


def _candidate_similarity(job: _ArmJob, batch: Batch, pos: np.ndarray,
                          rows: slice | np.ndarray) -> np.ndarray:
    """The retriever's similarity (Q', C) of the candidates ``pos`` of the
    queries ``rows``, for a packer that cuts on similarity
    (``Packer.needs_similarity``): the batch's shared similarity matrix, the
    same floats the scores were computed from."""
    sim = BatchContext(batch, job.st, job.rng).similarity(job.arm.policy.retriever)[rows]
    return np.take_along_axis(np.asarray(sim, dtype=np.float64),
                              np.clip(pos, 0, sim.shape[1] - 1), axis=1)


def _rows_of_all(parts: list[dict], names) -> dict[str, np.ndarray]:
    """The arrays ``names`` of several arms' rows, one below the other."""
    if len(parts) == 1:
        return {k: parts[0][k] for k in names}
    return {k: np.concatenate([p[k] for p in parts]) for k in names}


def _row_blocks(arrays: list[np.ndarray]) -> list[slice]:
    """The row slices of ``arrays`` stacked one below the other."""
    ends = np.cumsum([len(a) for a in arrays]).tolist()
    return [slice(e - len(a), e) for e, a in zip(ends, arrays)]


#: the arrays query_metrics reads of each arm's packed batch (the rest:
#: the batch's ``t`` and ``qrows``, the arm's ``budget`` and ``oracle``)
_PACKED_METRIC_INPUTS = ("cand_rows", "cand_ok", "packed", "position", "gains", "tokens")


def _outputs(job: _ArmJob, batch: Batch, pk: _Packed) -> dict[str, Any]:
    """The per-query metrics (and rankings) of a packed batch."""
    return _outputs_all([(job, batch, pk)])[0]


def _outputs_all(items: list[tuple]) -> list[dict[str, Any]]:
    """:func:`_outputs` of several arms' packed batches, ``(job, batch, pk)``
    each: the metrics of arms with the same C are computed as one array, a
    row per (arm, query) (every metric is per query)."""
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item[2].pos.shape[1], []).append(i)
    metrics: list[dict] = [None] * len(items)  # type: ignore[list-item]
    for members in groups.values():
        parts = []
        for i in members:
            job, batch, pk = items[i]
            part = {name: getattr(pk, name) for name in _PACKED_METRIC_INPUTS}
            part.update(t=batch.t, qrows=batch.qrows, budget=job.budget, oracle=job.oracle)
            parts.append(part)
        blocks = _row_blocks([p["t"] for p in parts])
        job = items[members[0]][0]
        m = query_metrics(**_rows_of_all(parts, list(parts[0])), relevance=job.relevance,
                          evicted=[(sl, items[i][0].st.evicted) for i, sl in zip(members, blocks)],
                          reader=job.reader)
        for i, sl in zip(members, blocks):
            metrics[i] = {k: v[sl] for k, v in m.items()} if len(members) > 1 else m
    out = []
    for (job, batch, pk), m in zip(items, metrics):
        m["actor_code"] = batch.actors
        hidden = _reinforced_and_hidden(job, batch, pk, m)
        one: dict[str, Any] = {"metrics": m}
        if job.settings.save_rankings:
            q, cc = pk.pos.shape
            keep = pk.cand_ok.ravel()
            one["rankings"] = {
                "query_id": np.repeat(job.relevance.query_ids[batch.qrows], cc)[keep],
                "rank": np.tile(np.arange(1, cc + 1), q)[keep],
                "note_id": batch.notes.note_id[pk.cand_rows].ravel()[keep],
                "score": pk.vals.ravel()[keep],
                "packed": pk.packed.ravel()[keep],
                "position": pk.position.ravel()[keep],
            }
            _hidden_rankings(one["rankings"], job, batch, pk, keep, hidden,
                             rows=job.settings.save_rankings == "hidden")
        out.append(one)
    return out


def _used_candidates(fb, pk: _Packed) -> np.ndarray:
    """(Q, C) bool: the candidates the answers use (the feedback's touch;
    ``"prefilter"``: every candidate, ``"none"``: none)."""
    chosen = _chosen(fb, pk)
    if chosen is not None:
        return chosen
    return pk.cand_ok if fb.touch == "prefilter" else np.zeros_like(pk.cand_ok)


class _RowsContext:
    """K queries against the notes of K rows of W columns each, laid out as
    one (K, K * W) context (query i's notes are columns i * W ... i * W + W
    - 1): what a retriever computes its similarity from (products and
    norms), and an :class:`ArrayContext` for anything else, built then."""

    def __init__(self, batch: Batch, q: np.ndarray, rows: np.ndarray):
        self.batch, self.q, self.cols = batch, q, rows.reshape(-1)
        self.t = batch.t[q]
        self.idx = self.cols
        self.live = None

    @cached_property
    def dots(self) -> np.ndarray:
        return self.query_vectors @ self.note_vectors.T

    @cached_property
    def qnorm2(self) -> np.ndarray:
        return self.batch.qnorm2[self.q]

    @cached_property
    def nnorm2(self) -> np.ndarray:
        return self.batch.notes.norm2[self.cols]

    @cached_property
    def note_vectors(self) -> np.ndarray:
        return self.batch.notes.emb[self.cols]

    @cached_property
    def query_vectors(self) -> np.ndarray:
        return self.batch.qemb[self.q]

    @cached_property
    def _full(self) -> ArrayContext:
        return ArrayContext(t=self.t, created_at=self.batch.notes.created_at[self.cols],
                            note_emb=self.note_vectors, query_emb=self.query_vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._full, name)


def _cell_similarity(policy: Policy, batch: Batch):
    """``similarity(q, rows)``: the policy's retriever's similarity of the
    batch's queries ``q`` (K,) to the note rows ``rows`` (K, W)."""
    def block(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        k, w = rows.shape
        sim = np.asarray(policy.retriever.similarity(_RowsContext(batch, q, rows)),
                         dtype=np.float64)
        return sim.reshape(k, k, w)[np.arange(k), np.arange(k)]

    def similarity(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # blocks of at most 128 rows: the context is (K, K * W)
        return np.concatenate([block(q[i:i + 128], rows[i:i + 128])
                               for i in range(0, len(q), 128)]) if len(q) else \
            np.zeros(rows.shape)
    return similarity


def _reinforced_and_hidden(job: _ArmJob, batch: Batch, pk: _Packed, m: dict) -> tuple:
    """Add ``stale_reinforced``, ``oracle_notes`` and the ``hidden_*``
    columns (:mod:`memsim.metrics`) to the metrics ``m`` of one arm's packed
    batch; return the hidden notes ``(q, note row, reason)``."""
    policy, st = job.arm.policy, job.st
    m["stale_reinforced"] = stale_reinforced(_used_candidates(policy.feedback, pk), pk.gains)
    keys = job.oracle_keys if job.oracle_keys is not None else np.zeros(0, np.int64)
    counts, hidden = hidden_counts(
        qrows=batch.qrows, t=batch.t, cand_rows=pk.cand_rows, cand_ok=pk.cand_ok,
        packed=pk.packed, relevance=job.relevance, oracle_keys=keys,
        invalid=~np.isnan(st.invalid_at), evicted=st.evicted,
        expires_at=batch.notes.expires_at, similarity=_cell_similarity(policy, batch))
    m.update(counts)
    return hidden


def _hidden_rankings(r: dict, job: _ArmJob, batch: Batch, pk: _Packed, keep: np.ndarray,
                     hidden: tuple, rows: bool) -> None:
    """Add the rankings' ``oracle`` and ``hidden`` columns and, with
    ``rows``, a row (rank -1, score NaN) for each note the oracle packed
    that is not among the policy's top C, with the reason it is hidden."""
    q, cc = pk.pos.shape
    n = max(job.relevance.n_notes, 1)
    keys = job.oracle_keys if job.oracle_keys is not None else np.zeros(0, np.int64)
    qrow = np.repeat(batch.qrows, cc)[keep].astype(np.int64)
    oracle = np.isin(qrow * n + pk.cand_rows.ravel()[keep], keys, kind="sort")
    r["oracle"] = oracle
    r["hidden"] = np.where(oracle & ~r["packed"], "budget", "").astype(object)
    if not rows:
        return
    hq, hrow, reason = hidden
    out = reason != HIDDEN_REASONS.index("budget")
    hq, hrow, reason = hq[out], hrow[out], reason[out]
    k = len(hq)
    extra = {"query_id": job.relevance.query_ids[batch.qrows[hq]],
             "rank": np.full(k, -1, dtype=r["rank"].dtype),
             "note_id": batch.notes.note_id[hrow], "score": np.full(k, np.nan),
             "packed": np.zeros(k, dtype=bool), "position": np.full(k, -1, r["position"].dtype),
             "oracle": np.ones(k, dtype=bool),
             "hidden": np.asarray(HIDDEN_REASONS, dtype=object)[reason]}
    for col, v in extra.items():
        r[col] = np.concatenate([r[col], v])


def _run_arms(jobs: list[_ArmJob]) -> list[dict[str, Any]]:
    """Score, pack and measure every query of the batch on each arm's state
    at the batch's start; then apply the batch's uses (per-tick feedback).
    The arms' packing and metrics run together (:func:`_pack_all`,
    :func:`_outputs_all`)."""
    packs = _answer_all(jobs)
    return _outputs_all([(job, batch, pk) for job, (batch, pk) in zip(jobs, packs)])


def _answer(job: _ArmJob) -> _Packed:
    """The batch's candidates and packing on the arm's state at its start,
    then its uses applied."""
    return _answer_all([job])[0][1]


def _answer_all(jobs: list[_ArmJob]) -> list[tuple[Batch, _Packed]]:
    """:func:`_answer` of several arms: (the batch each scored, its packing)."""
    scored = []
    contexts = [_scoring_context(job.arm.policy, job.st, job.rng, job.batch) for job in jobs]
    stacked = _stacked_tops([(i, job.arm.policy, ctx, job.c, job.st)
                             for i, (job, (ctx, _)) in enumerate(zip(jobs, contexts))])
    for i, (job, (ctx, batch)) in enumerate(zip(jobs, contexts)):
        policy, st = job.arm.policy, job.st
        if i in stacked:
            pos, vals, mask = *stacked[i], None
        else:
            pos, vals, mask = _top(policy, ctx, job.c, st)
        # keep only what the feedback reads (the prefilter touch: the
        # candidates' mask), not the context: (Q, L) matrices per arm
        if policy.feedback.touch != "prefilter":
            mask = None
        elif mask is None:
            mask = ctx.live
        scored.append((batch, pos, vals, mask))
    packs = _pack_all([(job, batch, pos, vals, slice(None))
                       for job, (batch, pos, vals, _) in zip(jobs, scored)])
    # 5. feedback
    for job, (batch, *_, mask), pk in zip(jobs, scored, packs):
        _feedback(job.arm.policy.feedback, job.st, batch, mask, pk)
    return [(batch, pk) for (batch, *_), pk in zip(scored, packs)]


def _feedback(fb, st: PolicyState, batch: Batch, mask: np.ndarray | None,
              pk: _Packed) -> None:
    """Record the uses the batch's answers make (the feedback's ``touch``;
    ``mask``: the prefilter)."""
    if fb.touch == "prefilter" and fb.before_scoring:
        return
    qi, used = _answer_uses(fb, batch, pk, mask)
    st.touch(used, batch.actors[qi], batch.t[qi], fb)


def _chosen(fb, pk: _Packed, rows: slice | np.ndarray = slice(None)) -> np.ndarray | None:
    """(R, C) bool: the candidates the answers of the queries ``rows`` use
    (``touch = "packed"``: those packed; ``"returned"``: the top k, as a
    search API returns them); None when the answers choose none
    (``"prefilter"``, ``"none"``)."""
    if fb.touch == "packed":
        return pk.packed[rows]
    if fb.touch == "returned":
        return pk.cand_ok[rows] & (np.arange(pk.cand_ok.shape[1]) < fb.k)
    return None


def _answer_uses(fb, batch: Batch, pk: _Packed, mask: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(query, note row) of every use the answers in ``pk`` make, by query
    (``mask``: the prefilter, what a ``"prefilter"`` touch uses)."""
    if fb.touch == "prefilter":
        qi, li = np.nonzero(mask)
        return qi, batch.idx[li]
    target = _chosen(fb, pk)
    if target is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    qi, ci = np.nonzero(target)
    return qi, pk.cand_rows[qi, ci]


# --------------------------------------------------------------------------
# Per-query feedback
# --------------------------------------------------------------------------

#: Per-query feedback corrects the batch's scores for the notes used since
#: its start (module docstring); False replays each query on its own, as a
#: reference.
WALK_FAST = True


#: queries of a tick corrected at once, to start with: the work past the
#: first query corrected on a wrong guess is redone, so the window then
#: follows how far apart those are (twice the distance to the last one, at
#: least 16; doubled after a window with none)
WALK_WINDOW = 64


def _walkable(policy: Policy) -> bool:
    """Whether a query's scores change only at the notes used before it: an
    elementwise ranker, candidates chosen by similarity alone, and no use
    before scoring."""
    r, fb = policy.ranker, policy.feedback
    return (WALK_FAST and not r.set_dependent and not getattr(r, "needs_logged", False)
            and not hasattr(r, "candidate_mask")
            and not (fb.touch == "prefilter" and fb.before_scoring))


def _walk_arm(job: _ArmJob, inp: _Inputs, acc_done: int) -> tuple[dict[str, Any], int]:
    """Per-query feedback over one batch: each query sees every use made
    before it (its predecessors' answers and the organic uses before its
    time). Returns the outputs and the organic uses now applied."""
    cut = np.searchsorted(inp.acc_t, job.batch.t, side="left")
    if _walkable(job.arm.policy):
        return _walk_fast(job, inp, cut, acc_done)
    fb = job.arm.policy.feedback
    parts = []
    for i in range(len(job.batch.t)):  # the reference: each query on its own
        if cut[i] > acc_done:
            sl = slice(acc_done, int(cut[i]))
            job.st.touch(inp.acc_rows[sl], inp.acc_actor[sl], inp.acc_t[sl], fb)
            acc_done = int(cut[i])
        parts.append(_answer(job.row(i)))
    return _outputs(job, job.batch, _stacked(parts)), acc_done


def _stacked(parts: list[_Packed]) -> _Packed:
    """One batch's packing from its queries' (widths padded with
    non-candidates)."""
    w = max(p.pos.shape[1] for p in parts)
    fills = {"pos": 0, "vals": -np.inf, "cand_ok": False, "cand_rows": 0, "tokens": 0,
             "gains": 0.0, "packed": False, "position": -1}

    def stack(name: str) -> np.ndarray:
        arrays = [getattr(p, name) for p in parts]
        out = np.full((len(arrays), w), fills[name], dtype=arrays[0].dtype)
        for i, a in enumerate(arrays):  # a loop over the batch's queries
            out[i, :a.shape[1]] = a[0]
        return out

    return _Packed(**{name: stack(name) for name in fills})


def _walk_fast(job: _ArmJob, inp: _Inputs, cut: np.ndarray, acc_done: int
               ) -> tuple[dict[str, Any], int]:
    """Per-query feedback at about per-tick cost.

    The batch is scored and packed once, on the state at its start. The uses
    its queries make with those answers, and the organic uses before each
    query's time, are a guess at the order of uses: every query that sees a
    note used before it is corrected at once, its used notes rescored on the
    state they have then (:func:`_corrected`). A query whose own uses change
    makes the guess wrong for the later queries that see the notes
    concerned: the queries before the first of them are final, and the
    guess is made again from it, with their new uses. A query whose
    correction cannot be proven exact is scored again in full on the state
    at its time. A policy whose scores read no use
    (:meth:`Policy.reads_uses`) has nothing to correct. Every use is then
    recorded, in time order."""
    policy, st = job.arm.policy, job.st
    ctx, batch = _scoring_context(policy, st, job.rng, job.batch)
    pos, vals, _ = _top(policy, ctx, job.c, st)
    pk = _pack(job, batch, pos, vals)
    first = dataclasses.replace(pk, **{f.name: getattr(pk, f.name).copy()
                                       for f in dataclasses.fields(pk)})
    q = len(batch.t)
    # the organic uses in the batch's time, each seen from the first query after it
    acc_end = max(acc_done, int(cut[-1]))
    org = np.arange(acc_done, acc_end)
    org_seen = np.searchsorted(cut, org, side="right")
    organic = (inp.acc_rows[org], inp.acc_actor[org], inp.acc_t[org], org_seen)
    applied = 0  # uses at order keys below it are recorded in the state
    start = 0 if policy.reads_uses() else q  # else a use changes no score
    window = WALK_WINDOW
    while start < q:
        stop = min(q, start + window)
        uses = _walk_uses(policy.feedback, batch, pk, ctx, organic)
        final, redo = _corrected(job, ctx, batch, pk, first, uses, start, stop, applied)
        if final < redo:  # a query saw a changed use: the guess is made again from it
            window = max(16, 2 * (final - start))
            start = final
            continue
        if redo == stop:
            window *= 2
            start = stop
            continue
        # the first query whose correction is not proven: record the uses
        # before it (the queries before it are final) and score it in full
        # on the state as it is then
        uses = _walk_uses(policy.feedback, batch, pk, ctx, organic)
        applied = _record(st, policy.feedback, uses, applied, 2 * redo + 1)
        pk.pos[redo], pk.vals[redo] = _rescored_row(job, ctx, batch, redo)
        _set_candidates(pk, batch, np.array([redo]))
        _repack(job, batch, pk, np.array([redo]))
        start = redo + 1
    _record(st, policy.feedback, _walk_uses(policy.feedback, batch, pk, ctx, organic), applied)
    return _outputs(job, batch, pk), acc_end


#: a batch's uses in the order they happen: note rows, actors, times, the
#: first query that sees each, and an order key (2i for the organic uses
#: before query i, 2i + 1 for query i's own)
_Uses = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _walk_uses(fb, batch: Batch, pk: _Packed, ctx: BatchContext, organic) -> _Uses:
    """The organic uses and those the answers in ``pk`` make (the
    feedback's ``touch``), in the order they happen."""
    o_rows, o_actors, o_t, o_seen = organic
    qi, rows = _answer_uses(fb, batch, pk, ctx.live if fb.touch == "prefilter" else None)
    key = np.concatenate([2 * o_seen, 2 * qi + 1])
    order = np.argsort(key, kind="stable")
    return (np.concatenate([o_rows, rows])[order],
            np.concatenate([o_actors, batch.actors[qi]])[order],
            np.concatenate([o_t, batch.t[qi]])[order],
            np.concatenate([o_seen, qi + 1])[order], key[order])


def _record(st: PolicyState, fb, uses: _Uses, lo: int, hi: float = np.inf) -> int:
    """Record the uses whose order key is in [lo, hi); return hi."""
    rows, actors, t, _, key = uses
    sel = (key >= lo) & (key < hi)
    st.touch(rows[sel], actors[sel], t[sel], fb)
    return hi


def _set_candidates(pk: _Packed, batch: Batch, rows: np.ndarray) -> None:
    pk.cand_ok[rows] = np.isfinite(pk.vals[rows])
    pk.cand_rows[rows] = batch.idx[pk.pos[rows]]


def _used_rows(fb, pk: _Packed, rows: np.ndarray) -> np.ndarray:
    """Each query's used note rows, sorted (-1 for none), to compare uses."""
    target = _chosen(fb, pk, rows)
    if target is None:  # the answers do not choose them
        return np.zeros((len(rows), 0), dtype=np.int64)
    return np.sort(np.where(target, pk.cand_rows[rows], -1), axis=1)


def _corrected(job: _ArmJob, ctx: BatchContext, batch: Batch, pk: _Packed, first: _Packed,
               uses: _Uses, start: int, stop: int, applied: int) -> tuple[int, int]:
    """Correct the queries ``start`` to ``stop`` for the ``uses`` before each:
    the notes a query sees that were used before it are rescored on the
    state they have then (the state, plus the uses not yet recorded in it,
    ``applied`` on, before the query) and merged into its first top C
    (``first``); the rest keep their first answers. Returns the first
    query corrected on a wrong guess (one that sees a note whose use an
    earlier query changed) and the first whose merge is not proven exact,
    which is left as it was (``stop`` when none)."""
    fb = job.arm.policy.feedback
    q, n = len(batch.t), len(batch.idx)
    rows_u, seen_u = uses[0], uses[3]
    # the first query that sees a use of each column of the batch
    at, hit = _columns(batch.idx, rows_u)
    seen = np.full(n, q, dtype=np.int64)
    np.minimum.at(seen, at[hit], seen_u[hit])
    used = np.flatnonzero(seen < stop)
    qs = np.arange(start, stop)
    live = ctx.live_cells((qs[:, None] * n + used).ravel(), np.tile(used, len(qs)))
    cell = live.reshape(len(qs), len(used)) & (seen[used][None, :] <= qs[:, None])
    ri, ui = np.nonzero(cell)
    ci, cq = used[ui], qs[ri]  # a cell per (query, used note it sees)
    redo = stop
    new = _used_note_scores(job, ctx, batch, ci, cq, uses, applied) if len(ci) else None
    if new is None and len(ci):
        redo = int(cq[0])  # cells cannot be scored: every such query in full
    old_uses = _used_rows(fb, pk, qs)
    # every query from start: its first answer, corrected where it sees a use
    back = qs[np.any(pk.pos[qs] != first.pos[qs], axis=1)
              | np.any(pk.vals[qs] != first.vals[qs], axis=1)]
    for f in dataclasses.fields(pk):
        getattr(pk, f.name)[back] = getattr(first, f.name)[back]
    if new is not None and len(ci):
        aq, k = np.unique(cq, return_counts=True)
        cc = first.pos.shape[1]
        w = int(k.max())
        j = _within(k)
        r = np.repeat(np.arange(len(aq)), k)
        cv = np.full((len(aq), w), -np.inf)
        cp = np.zeros((len(aq), w), dtype=np.int64)
        cv[r, j], cp[r, j] = new, ci
        kv = first.vals[aq].copy()
        kp = first.pos[aq]
        kv[seen[kp] <= aq[:, None]] = -np.inf  # used before: among the cells when seen
        mv = np.concatenate([kv, cv], axis=1)
        mp = np.concatenate([kp, cp], axis=1)
        order = np.lexsort((mp, -mv), axis=1)[:, :cc]  # score desc, then the lower column
        mv = np.take_along_axis(mv, order, axis=1)
        mp = np.where(np.isfinite(mv), np.take_along_axis(mp, order, axis=1), 0)
        # the first scoring's C-th candidate bounds every note not rescored
        bv, bp = first.vals[aq, cc - 1], first.pos[aq, cc - 1]
        ok = ~np.isfinite(bv) | (mv[:, -1] > bv) | ((mv[:, -1] == bv) & (mp[:, -1] <= bp))
        if not ok.all():
            redo = int(aq[np.argmin(ok)])
        pk.pos[aq], pk.vals[aq] = mp, mv
        _set_candidates(pk, batch, aq)
        _repack(job, batch, pk, aq)
    new_uses = _used_rows(fb, pk, qs)
    final = stop
    for i in np.flatnonzero(np.any(new_uses != old_uses, axis=1)).tolist():
        if qs[i] >= min(final, redo):
            break
        # the queries after it that see a note whose use it changed were
        # corrected on a wrong guess; the others saw what they would have
        notes = np.setxor1d(old_uses[i], new_uses[i])
        at, hit = _columns(batch.idx, notes[notes >= 0])
        cols = at[hit]
        later = qs[i + 1:]
        sees = ctx.live_cells((later[:, None] * n + cols).ravel(), np.tile(cols, len(later)))
        hit = np.flatnonzero(sees.reshape(len(later), len(cols)).any(axis=1))
        if len(hit):
            final = min(final, int(later[hit[0]]))
    return final, redo


def _columns(idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the note rows ``rows`` are among the batch's columns ``idx``
    (ascending), and which of them are there at all."""
    if len(idx) == 0:
        return np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=bool)
    at = np.minimum(np.searchsorted(idx, rows), len(idx) - 1)
    return at, idx[at] == rows


def _used_note_scores(job: _ArmJob, ctx: BatchContext, batch: Batch, cols: np.ndarray,
                      qs: np.ndarray, uses: _Uses, applied: int) -> np.ndarray | None:
    """Scores of the cells (``qs[k]``, ``cols[k]``), each on the state its
    note has at its query: the state plus the uses not yet recorded
    (``applied`` on) seen by then. None when cells cannot be scored."""
    policy, st, fb = job.arm.policy, job.st, job.arm.policy.feedback
    if st.prune_off:
        return None
    rows_u, actors_u, t_u, seen_u, key_u = uses
    note = batch.idx[cols]
    # each cell's pending uses: those of its note seen by its query, a
    # prefix of the note's uses in time order
    pend = np.flatnonzero(key_u >= applied)
    span = len(ctx.t) + 1
    by_note = rows_u[pend] * span + seen_u[pend]
    order = np.argsort(by_note, kind="stable")
    pend, by_note = pend[order], by_note[order]
    lo = np.searchsorted(by_note, note * span, side="left")
    count = np.searchsorted(by_note, note * span + qs, side="right") - lo
    # one what-if state per (note, uses seen), shared by the cells that have it
    _, first, which = np.unique(note * (len(pend) + 1) + count, return_index=True,
                                return_inverse=True)
    note, lo, count = note[first], lo[first], count[first]
    k = np.repeat(np.arange(len(note)), count)
    e = pend[np.repeat(lo, count) + _within(count)]
    own = st.gather(note, (k, actors_u[e]) if fb.cooldown_s > 0 else None)
    own.touch(k, actors_u[e], t_u[e], fb)
    g = _GatheredContext(ctx, qs, cols[:, None], np.ones((len(cols), 1), dtype=bool))
    g.notes, g.state, g.idx = batch.notes.take(note), own, which.reshape(-1, 1)
    new = _cell_scores(policy, g, st)
    return None if new is None else new[:, 0]


def _repack(job: _ArmJob, batch: Batch, pk: _Packed, rows: np.ndarray) -> None:
    """Pack the queries ``rows`` of ``pk`` again, from their candidates."""
    one = _pack(job, batch, pk.pos[rows], pk.vals[rows], rows)
    for name in ("cand_ok", "cand_rows", "tokens", "gains", "packed", "position"):
        getattr(pk, name)[rows] = getattr(one, name)


def _rescored_row(job: _ArmJob, ctx: BatchContext, batch: Batch, i: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Query ``i``'s top C scored in full on the state as it is now."""
    rctx = BatchContext(batch.row(i), job.st, job.rng)
    rctx.live = ctx.live[i:i + 1]
    pos, vals, _ = _top(job.arm.policy, rctx, job.c, job.st)
    return pos[0], vals[0]
