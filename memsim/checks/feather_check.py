"""Cross-check memsim's ``feather`` preset against the real Feather DB engine.

The check replays one stream twice, query by query, and compares the rankings:

* through memsim's ``feather`` preset, with ``SimSettings(feedback_mode =
  "per-query")`` so that every query sees the recall counts left by the one
  before it (as in the engine), and ``save_rankings = True`` to keep the
  ranking;
* through the installed ``feather-db`` engine (the optional extra
  ``memsim[feather]``): notes are added in creation order as simulated time
  passes, each query is a scored ``search(q, k, scoring=ScoringConfig(
  half_life, time_weight, min_weight))`` with ``record_salience=True``, so
  the engine keeps the recall counts itself; organic accesses are
  ``touch(id)`` calls and TTL expiry is ``forget(id)``.

Simulated time in a real engine
-------------------------------
The engine reads its clock (C ``time()``, whole seconds) when it scores, and
takes a note's age as ``now - timestamp``. The replay therefore **re-stamps**
the notes a query will score just before the search: a note created at
simulated second ``c``, scored at simulated second ``t``, gets the timestamp
``R - (t - c)``, ``R`` the wall-clock second of the search, so the engine sees
exactly the simulated age. Which notes a search scores is the engine's
business (the ``3k`` nearest its HNSW finds), so the replay re-stamps the
``3k + margin`` nearest by exact squared L2 (a superset unless the index misses
far more than that) and keeps **every other note stamped in the future**: a
negative age clamps to 0 in the engine, which gives the highest recency a note
can have. A note left unstamped can thus only score *higher* than it should;
if none of the ``k`` returned notes is unstamped, the returned list is the one
the correct ages give (every unstamped candidate that was beaten would also
have been beaten at its true, lower score). The replay counts the queries
where an unstamped note was returned (``unstamped`` column; expected 0). The
re-stamped notes go back to the future after the search.

A search could straddle a wall-clock second (then the engine might age every
note by one second more): the replay waits for a fresh second when too little
of the current one is left, and flags the queries where the second still
changed (``clock_tick`` column). Re-stamping once a simulated day instead would
not be exact: ages would be off by up to a day.

Both replays run on the stream with its times **quantised to whole seconds**
(:func:`quantise_stream`): the engine cannot represent a fractional second of
age, memsim can; with the same integer-second times both see the same ages.

What is compared, per query: identical top-k (same notes in the same order),
top-k overlap (shared notes over the longer list, at most k), Kendall's rank
correlation of the shared notes, the largest absolute score difference over
shared notes; at the end, the share of notes whose recall counts are equal.

Run it on a realistic size with ``python -m memsim.checks.feather_check
experiments/feather_check.toml`` (or :func:`run_feather_check`).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, SimSettings, simulate, with_timing
from memsim.checks.engine_check import (DAY_S, csv_saver, first_differences, kendall, likely_causes,
                           read_check_config, run_check_command, quantise_stream, top_k_overlap)
from memsim.core.errors import ConfigError, MemsimError
from memsim.core.params import Interval, Options
from memsim.data.stream import Stream

__all__ = [
    "CrossCheckResult",
    "EngineReplay",
    "MemsimReplay",
    "feather_cross_check",
    "format_cross_check",
    "feather_policy",
    "quantise_stream",
    "replay_feather",
    "replay_memsim",
    "run_feather_check",
    "main",
]

#: Above this many notes, "exact" search uses this ef (``docs/contracts/policies.md``:
#: ``ef >= min(n_notes, 2000)``; exact on a few thousand notes, while on 20,000
#: the HNSW still misses a near note about once in 7,000 queries).
EXACT_EF_CAP = 2000
#: Notes not about to be scored are stamped this far in the future: their age
#: clamps to 0, the highest recency there is (see the module docstring).
_FUTURE_S = 20 * 365 * DAY_S


def _require_feather():
    try:
        import feather_db
    except ImportError:
        raise MemsimError(
            "the Feather DB cross-check needs the feather-db engine, which is not "
            "installed: pip install -e \".[feather]\" (from the repository)"
        ) from None
    return feather_db


# --------------------------------------------------------------------------
# Stream preparation
# --------------------------------------------------------------------------


def _seconds(days: np.ndarray) -> np.ndarray:
    """Whole seconds (int64) of times in days that :func:`quantise_stream` made."""
    return np.round(np.asarray(days, dtype=np.float64) * DAY_S).astype(np.int64)


def _check_stream(stream: Stream) -> None:
    if stream.note_embeddings is None or stream.query_embeddings is None:
        raise ConfigError(f"stream {stream.name!r} has no embeddings: the Feather DB "
                          "cross-check needs note and query vectors")
    if "namespace" in stream.notes and "namespace" in stream.queries:
        raise ConfigError(
            f"stream {stream.name!r} is split into namespaces: the cross-check replays "
            "one store (a namespace filter makes the engine score every matching note, "
            "which memsim's feather preset does not model)")


# --------------------------------------------------------------------------
# memsim's side
# --------------------------------------------------------------------------


def feather_policy(*, k: int = 10, half_life: float = 30.0, time_weight: float = 0.3,
                   min_weight: float = 0.0, feedback: bool = True):
    """memsim's ``feather`` preset with the search's parameters.

    ``retriever.prefilter = 3k`` (the engine scores the 3k nearest),
    ``candidates = feedback.k = k`` (the k returned notes gain a recall;
    none when ``feedback`` is False, as ``record_salience=False``).
    """
    table = {
        "preset": "feather",
        "retriever": {"prefilter": 3 * k},
        "decay": {"half_life_days": half_life},
        "ranker": {"time_weight": time_weight, "min_weight": min_weight},
        "feedback": {"k": k} if feedback else {"k": k, "touch": "none"},
        "candidates": k,
    }
    return resolve_policy(table, "feather_check.policy")


@dataclass
class MemsimReplay:
    """memsim's rankings of a (quantised) stream under the ``feather`` preset.

    Attributes
    ----------
    ids, scores : list of ndarray
        Per query (stream order): the returned note ids, best first, and
        their scores (float32 values, as float64).
    recalls : ndarray
        Final recall count of every note (stream order).
    seconds, cpu_seconds : float
        Wall and CPU time of :func:`memsim.engine.simulate`.
    params : dict
        k, half_life, time_weight, min_weight, feedback_mode.
    """

    ids: list
    scores: list
    recalls: np.ndarray
    seconds: float
    cpu_seconds: float
    params: dict


def replay_memsim(stream: Stream, *, k: int = 10, half_life: float = 30.0,
                  time_weight: float = 0.3, min_weight: float = 0.0,
                  feedback_mode: str = "per-query", feedback: bool = True) -> MemsimReplay:
    """Replay ``stream`` (already quantised, if it is to be compared) through
    memsim's ``feather`` preset.

    ``feedback_mode = "per-query"`` is the exact mode the cross-check uses;
    ``"per-tick"`` (memsim's default, recalls applied after each day's batch)
    is only for timing comparisons. ``feedback = False`` turns recalls off.
    """
    _check_stream(stream)
    policy = with_timing(feather_policy(k=k, half_life=half_life, time_weight=time_weight,
                                        min_weight=min_weight, feedback=feedback), feedback_mode)
    settings = SimSettings(feedback_mode=feedback_mode, save_rankings=True, candidates=k)
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(stream, [Arm("feather", policy)], settings, np.random.SeedSequence(0))
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0

    qids = stream.queries["query_id"].to_numpy(np.int64)
    nq = len(qids)
    r = res.rankings
    if r is None or len(r) == 0:
        ids = [np.zeros(0, np.int64) for _ in range(nq)]
        scores = [np.zeros(0) for _ in range(nq)]
        ranked_ids = np.zeros(0, np.int64)
    else:
        r = r.sort_values(["query_id", "rank"], kind="stable")
        rq = r["query_id"].to_numpy(np.int64)
        rid = r["note_id"].to_numpy(np.int64)
        rs = r["score"].to_numpy(np.float64)
        qpos = {int(q): i for i, q in enumerate(qids)}
        cuts = np.flatnonzero(np.diff(rq)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(rq)]])
        ids = [np.zeros(0, np.int64) for _ in range(nq)]
        scores = [np.zeros(0) for _ in range(nq)]
        for s, e in zip(starts, ends):
            i = qpos[int(rq[s])]
            ids[i], scores[i] = rid[s:e], rs[s:e]
        ranked_ids = rid[r["rank"].to_numpy() <= k] if feedback else np.zeros(0, np.int64)
    # The preset's feedback: each returned note (rank <= k) gains one recall;
    # organic accesses count too (no cooldown in the preset), those the
    # engine applied: strictly before a batch, so before the last query.
    note_ids = stream.notes["note_id"].to_numpy(np.int64)
    row = pd.Index(note_ids)
    recalls = np.bincount(row.get_indexer(ranked_ids), minlength=len(note_ids))
    if len(stream.accesses) and nq:
        acc_t = stream.accesses["t"].to_numpy(np.float64)
        applied = acc_t < stream.queries["t"].to_numpy(np.float64).max()
        acc = row.get_indexer(stream.accesses["note_id"].to_numpy(np.int64)[applied])
        recalls = recalls + np.bincount(acc, minlength=len(note_ids))
    return MemsimReplay(ids=ids, scores=scores, recalls=recalls.astype(np.int64),
                        seconds=seconds, cpu_seconds=cpu_seconds,
                        params={"k": k, "half_life": half_life, "time_weight": time_weight,
                                "min_weight": min_weight, "feedback_mode": feedback_mode,
                                "feedback": feedback})


# --------------------------------------------------------------------------
# The engine's side
# --------------------------------------------------------------------------


@dataclass
class EngineReplay:
    """The engine's answers to a (quantised) stream.

    Attributes
    ----------
    ids, scores : list of ndarray
        Per query (stream order): the ids ``search`` returned and their scores.
    recalls : ndarray
        The engine's final ``recall_count`` of every note (stream order).
    clock_tick : ndarray of bool
        Queries during which the wall-clock second changed.
    unstamped : ndarray of int
        Per query, returned notes that had not been re-stamped (expected 0).
    beyond_exact : ndarray of int
        Per query, returned notes that are not among the exact ``3k`` nearest
        by squared L2 (float64): the approximate index missed nearer notes.
    ef : int
        The HNSW beam the searches used.
    timings : dict
        ``ingest_s`` (``add`` calls), ``search_s`` (``search`` calls), the
        same in CPU time (``ingest_cpu_s``, ``search_cpu_s``),
        ``restamp_s`` (the replay's re-stamping), ``clock_wait_s`` (waits
        for a fresh wall-clock second), ``total_s``.
    version : str
        feather-db's version.
    """

    ids: list
    scores: list
    recalls: np.ndarray
    clock_tick: np.ndarray
    unstamped: np.ndarray
    beyond_exact: np.ndarray
    ef: int
    timings: dict
    version: str


def _default_workdir() -> str:
    # tmpfs: the engine fsyncs its write-ahead log on every add and metadata
    # update (about 4 ms each on a disk, microseconds on tmpfs).
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm)
    return tempfile.gettempdir()


@dataclass(eq=False)
class _ReplayInputs:
    """The stream as the engine replay reads it: times in whole seconds, note
    vectors in ingest order (creation, then id)."""

    note_ids: np.ndarray
    created: np.ndarray        # seconds
    expires: np.ndarray        # seconds, inf = never
    importance: np.ndarray
    emb: np.ndarray            # float32, stream order
    qemb: np.ndarray           # float32
    qt: np.ndarray             # query times, seconds
    acc_t: np.ndarray          # access times, seconds
    acc_rows: np.ndarray       # row of each access' note
    order: np.ndarray          # ingest order
    inv_order: np.ndarray      # position of each note in the ingest order
    emb64_o: np.ndarray        # float64 vectors, ingest order
    norm2_o: np.ndarray        # their squared norms

    @classmethod
    def of(cls, stream: Stream) -> _ReplayInputs:
        notes, acc = stream.notes, stream.accesses
        note_ids = notes["note_id"].to_numpy(np.int64)
        created = _seconds(notes["created_at"].to_numpy())
        expires_days = notes["expires_at"].to_numpy(np.float64)
        emb = np.ascontiguousarray(stream.note_embeddings, dtype=np.float32)
        emb64 = emb.astype(np.float64)
        order = np.lexsort((note_ids, created))
        inv_order = np.empty(len(note_ids), dtype=np.int64)
        inv_order[order] = np.arange(len(note_ids))
        # Note vectors in ingest order: the live notes are then a prefix (minus
        # expired ones), scanned without copying them for every query.
        emb64_o = emb64[order]
        return cls(
            note_ids=note_ids, created=created,
            expires=np.where(np.isfinite(expires_days), np.round(expires_days * DAY_S), np.inf),
            importance=notes["importance"].to_numpy(np.float64), emb=emb,
            qemb=np.ascontiguousarray(stream.query_embeddings, dtype=np.float32),
            qt=_seconds(stream.queries["t"].to_numpy()),
            acc_t=_seconds(acc["t"].to_numpy()) if len(acc) else np.zeros(0, np.int64),
            acc_rows=pd.Index(note_ids).get_indexer(acc["note_id"].to_numpy(np.int64))
            if len(acc) else np.zeros(0, np.int64),
            order=order, inv_order=inv_order, emb64_o=emb64_o,
            norm2_o=np.einsum("ij,ij->i", emb64_o, emb64_o))


class _EngineStore:
    """A feather-db store fed from the stream up to each query's time.

    Notes are added stamped :data:`_FUTURE_S` ahead (age 0); before a search
    the replay re-stamps the few it will score (see :meth:`search`).
    """

    def __init__(self, fdb, db, inp: _ReplayInputs, *, ef: int | None):
        self.fdb, self.db, self.inp, self.ef = fdb, db, inp, ef
        n = len(inp.note_ids)
        self.future = int(time.time()) + _FUTURE_S
        self.added = np.zeros(n, dtype=bool)           # in the store (and not forgotten)
        self.pending = np.zeros(n, dtype=np.int64)     # accesses before the note was added
        self.expired_done = np.zeros(n, dtype=bool)
        self.gone_o = np.zeros(n, dtype=bool)          # expired, by ingest position
        self.exp_order = np.argsort(inp.expires, kind="stable")
        self.next_note = self.exp_next = self.acc_done = 0
        # The engine creates its "text" index on the first add; the beam can
        # only be set (and read) from then on.
        self.used_ef = -1

    def ingest_until(self, t: int) -> None:
        """Add the notes created by ``t``, stamped in the future for now."""
        inp, n = self.inp, len(self.inp.note_ids)
        while self.next_note < n and inp.created[inp.order[self.next_note]] <= t:
            i = int(inp.order[self.next_note])
            self.next_note += 1
            if self.expired_done[i]:
                continue
            meta = self.fdb.Metadata()
            meta.timestamp = self.future
            meta.importance = float(inp.importance[i])
            meta.recall_count = int(self.pending[i])
            self.db.add(id=int(inp.note_ids[i]), vec=inp.emb[i], meta=meta)
            self.added[i] = True

    def set_beam(self) -> None:
        """Set the search beam once the index exists (after the first add)."""
        if self.used_ef < 0 and self.next_note > 0:
            if self.ef is not None:
                self.db.set_ef(int(self.ef))
            self.used_ef = int(self.db.get_ef())

    def expire_until(self, t: int) -> None:
        """Forget the notes expired by ``t`` (memsim: live while expires_at > t)."""
        inp, n = self.inp, len(self.inp.note_ids)
        while self.exp_next < n and inp.expires[self.exp_order[self.exp_next]] <= t:
            i = int(self.exp_order[self.exp_next])
            self.exp_next += 1
            if self.added[i] and not self.expired_done[i]:
                self.db.forget(int(inp.note_ids[i]))
            # a note that expires before it is created is never added
            self.expired_done[i] = True
            self.gone_o[inp.inv_order[i]] = True

    def access_before(self, t: int) -> None:
        """Apply the organic accesses strictly before ``t`` (as memsim does)."""
        inp = self.inp
        while self.acc_done < len(inp.acc_t) and inp.acc_t[self.acc_done] < t:
            i = int(inp.acc_rows[self.acc_done])
            if self.added[i]:  # forgotten notes too, as memsim counts them
                self.db.touch(int(inp.note_ids[i]))
            else:
                self.pending[i] += 1
            self.acc_done += 1

    def restamp(self, note_ids: list[int], stamps: list[int]) -> None:
        for nid, stamp in zip(note_ids, stamps):
            meta = self.db.get_metadata(nid)
            meta.timestamp = stamp
            self.db.update_metadata(nid, meta)

    def recalls(self) -> np.ndarray:
        """Final recall count of every note (stream order)."""
        # Notes created after the last query were never added: their count
        # is the accesses they had (none are searched).
        recalls = self.pending.copy()
        for i in np.flatnonzero(self.added).tolist():
            meta = self.db.get_metadata(int(self.inp.note_ids[i]))
            if meta is not None:
                recalls[i] = int(meta.recall_count)
        return recalls


def _nearest(inp: _ReplayInputs, gone_o: np.ndarray, m: int, j: int, m_scored: int,
             n_stamp: int) -> tuple[np.ndarray, np.ndarray]:
    """The notes query ``j`` will score and the exact ``m_scored`` nearest.

    Among the first ``m`` notes of the ingest order (less expired ones): the
    ``n_stamp`` nearest by squared L2 (float64), to re-stamp, and the exact
    ``m_scored`` nearest, to tell the index's misses apart. Both as note ids.
    """
    q64 = inp.qemb[j].astype(np.float64)
    d2 = inp.norm2_o[:m] + q64 @ q64 - 2.0 * (inp.emb64_o[:m] @ q64)
    live = inp.order[:m]
    if gone_o[:m].any():
        keep = ~gone_o[:m]
        live, d2 = live[keep], d2[keep]
    if len(live) > n_stamp:
        part = np.argpartition(d2, n_stamp - 1)[:n_stamp]
        near = live[part]
        exact_ids = inp.note_ids[part[np.argsort(d2[part], kind="stable")[:m_scored]]] \
            if n_stamp > m_scored else inp.note_ids[near]
    else:
        near = live
        exact_ids = inp.note_ids[live[np.argsort(d2, kind="stable")[:m_scored]]]
    return near, exact_ids


@dataclass
class _Clock:
    """Timings of the replay, and the guard that keeps a search inside one
    wall-clock second."""

    guard_s: float
    ingest: float = 0.0
    search: float = 0.0
    stamp: float = 0.0
    ingest_cpu: float = 0.0   # CPU time: robust to a shared machine
    search_cpu: float = 0.0
    sleep: float = 0.0
    typical: float = 0.0      # typical re-stamp + search

    def wait_for_room(self) -> None:
        """Sleep into the next second when too little of this one is left."""
        # typical (not worst) duration: one stall of a loaded machine must
        # not make every later query wait for a fresh second
        guard = min(max(self.guard_s, 3.0 * self.typical), 0.25)
        now = time.time()
        left = 1.0 - (now - math.floor(now))
        if left < guard:
            time.sleep(left + 1e-4)
            self.sleep += left


def _search(store: _EngineStore, clock: _Clock, inp: _ReplayInputs, j: int, near: np.ndarray,
            cfg, k: int, feedback: bool) -> tuple[Any, list[int], bool]:
    """Re-stamp the ``near`` notes to their true ages, search, stamp them back.

    Returns the engine's results, the re-stamped ids and whether the
    wall-clock second changed during the search.
    """
    near_ids = inp.note_ids[near].tolist()
    age_s = (int(inp.qt[j]) - inp.created[near]).tolist()
    clock.wait_for_room()
    t0 = time.perf_counter()
    r_sec = int(time.time())
    store.restamp(near_ids, [r_sec - a for a in age_s])
    t1, c1 = time.perf_counter(), time.process_time()
    res = store.db.search(inp.qemb[j], k=k, scoring=cfg, record_salience=bool(feedback))
    t2 = time.perf_counter()
    clock.search_cpu += time.process_time() - c1
    ticked = int(time.time()) != r_sec
    store.restamp(near_ids, [store.future] * len(near_ids))
    t3 = time.perf_counter()
    clock.stamp += (t1 - t0) + (t3 - t2)
    clock.search += t2 - t1
    clock.typical = 0.9 * clock.typical + 0.1 * (t2 - t0) if clock.typical else t2 - t0
    return res, near_ids, ticked


def replay_feather(stream: Stream, *, k: int = 10, half_life: float = 30.0,
                   time_weight: float = 0.3, min_weight: float = 0.0, ef: int | None = None,
                   feedback: bool = True, margin: int | None = None,
                   workdir: str | os.PathLike | None = None,
                   guard_s: float = 0.02,
                   progress: Callable[[float], None] | None = None) -> EngineReplay:
    """Replay ``stream`` (already quantised) through a fresh feather-db store.

    Parameters
    ----------
    stream : Stream
        With embeddings and whole-second times (:func:`quantise_stream`).
    k, half_life, time_weight, min_weight
        The search's ``k`` and ``ScoringConfig``.
    ef : int, optional
        HNSW search beam (``set_ef``); None keeps the engine's default (50).
    feedback : bool
        ``record_salience`` of the searches: the returned notes gain a recall.
    margin : int, optional
        Notes re-stamped beyond the ``3k`` nearest (default ``max(20, 3k)``,
        more when ``ef`` is below ``3k + margin``).
    workdir : path, optional
        Where the throwaway database lives (default ``/dev/shm`` when
        writable: see the note on fsync below).
    guard_s : float
        Minimum time left in the current wall-clock second before a search
        starts; grows to three times the typical re-stamp + search (at most
        0.25 s).

    Notes
    -----
    feather-db fsyncs its write-ahead log on every write unless the
    environment has ``FEATHER_WAL_SYNC=0`` (read once per process); on a disk
    that costs milliseconds per re-stamp, so the default work folder is tmpfs.
    """
    fdb = _require_feather()
    _check_stream(stream)
    inp = _ReplayInputs.of(stream)
    folder = tempfile.mkdtemp(prefix="memsim-feather-", dir=workdir or _default_workdir())
    db = fdb.DB.open(os.path.join(folder, "replay.feather"), dim=int(inp.emb.shape[1]))
    try:
        store = _EngineStore(fdb, db, inp, ef=ef)
        cfg = fdb.ScoringConfig(half_life=float(half_life), weight=float(time_weight),
                                min=float(min_weight))
        clock = _Clock(guard_s=guard_s)
        t_all = time.perf_counter()
        out = _replay_queries(store, clock, cfg, k=k, feedback=feedback,
                              n_stamp=3 * k + _margin(k, ef, margin), progress=progress)
        if progress is not None:
            progress(1.0)
        total_s = time.perf_counter() - t_all
        recalls = store.recalls()
    finally:
        db.close()
        shutil.rmtree(folder, ignore_errors=True)
    return EngineReplay(**out, recalls=recalls, ef=store.used_ef,
                        timings={"ingest_s": clock.ingest, "search_s": clock.search,
                                 "ingest_cpu_s": clock.ingest_cpu,
                                 "search_cpu_s": clock.search_cpu,
                                 "restamp_s": clock.stamp, "clock_wait_s": clock.sleep,
                                 "total_s": total_s},
                        version=str(getattr(fdb, "__version__", "unknown")))


def _margin(k: int, ef: int | None, margin: int | None) -> int:
    """Notes re-stamped beyond the ``3k`` nearest (see :func:`replay_feather`)."""
    if margin is not None:
        return margin
    margin = max(20, 3 * k)
    if ef is not None and ef < 3 * k + margin:
        margin = max(margin, ef)
    return margin


def _replay_queries(store: _EngineStore, clock: _Clock, cfg, *, k: int, feedback: bool,
                    n_stamp: int, progress: Callable[[float], None] | None = None
                    ) -> dict[str, Any]:
    """Every query in turn: bring the store up to its time, then search.

    Returns the per-query fields of :class:`EngineReplay` (``ids``,
    ``scores``, ``clock_tick``, ``unstamped``, ``beyond_exact``).
    """
    inp = store.inp
    nq = len(inp.qt)
    ids_out: list = [None] * nq
    scores_out: list = [None] * nq
    tick = np.zeros(nq, dtype=bool)
    unstamped = np.zeros(nq, dtype=np.int64)
    beyond = np.zeros(nq, dtype=np.int64)
    for j in range(nq):
        if progress is not None:
            progress(j / nq)
        t = int(inp.qt[j])
        t0, c0 = time.perf_counter(), time.process_time()
        store.ingest_until(t)
        clock.ingest += time.perf_counter() - t0
        clock.ingest_cpu += time.process_time() - c0
        store.set_beam()
        store.expire_until(t)
        store.access_before(t)
        m = store.next_note
        if m == 0 or store.gone_o[:m].all():
            ids_out[j], scores_out[j] = np.zeros(0, np.int64), np.zeros(0)
            continue
        near, exact_ids = _nearest(inp, store.gone_o, m, j, 3 * k, n_stamp)
        res, near_ids, tick[j] = _search(store, clock, inp, j, near, cfg, k, feedback)
        rid = np.fromiter((x.id for x in res), dtype=np.int64, count=len(res))
        ids_out[j] = rid
        scores_out[j] = np.fromiter((x.score for x in res), dtype=np.float64, count=len(res))
        unstamped[j] = int((~np.isin(rid, near_ids)).sum())
        beyond[j] = int((~np.isin(rid, exact_ids)).sum())
    return {"ids": ids_out, "scores": scores_out, "clock_tick": tick,
            "unstamped": unstamped, "beyond_exact": beyond}


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------


@dataclass
class CrossCheckResult:
    """Outcome of :func:`feather_cross_check`.

    Attributes
    ----------
    per_query : DataFrame
        One row per query: ``query_id``, ``t`` (days), ``n_live`` (notes in the
        store), ``n_engine``, ``n_memsim`` (results returned), ``identical``
        (same notes, same order), ``overlap``
        (:func:`~memsim.checks.engine_check.top_k_overlap`), ``n_shared``,
        ``rank_corr`` (Kendall's tau of the shared notes; NaN below 2),
        ``max_score_diff`` (largest ``|engine - memsim|`` over shared notes),
        ``clock_tick`` (the wall-clock second changed during the search),
        ``unstamped`` (returned notes the replay had not re-stamped),
        ``beyond_exact`` (returned notes outside the exact ``3k`` nearest:
        the index missed nearer ones), ``unscored`` (notes memsim returned
        that score above the engine's k-th result but were not returned: the
        engine did not score them, an index miss, while recall counts agree).
    summary : dict
        ``n_notes``, ``n_queries``, ``k``, ``ef``, ``exact``,
        ``identical_share``, ``overlap_mean``, ``overlap_min``,
        ``rank_corr_mean``, ``max_score_diff``, ``equal_recall_share`` (notes
        with equal final recall counts), ``first_difference`` (position of
        the first query whose top-k differs; None if none),
        ``max_score_diff_before_first`` (the largest score difference up to
        it, while both sides still hold the same recall counts),
        ``index_miss_queries`` (queries with a ``beyond_exact`` or
        ``unscored`` note),
        ``clock_ticks``, ``unstamped_returns``, ``memsim_s``, ``engine_s`` (ingest + search
        calls), ``replay_s`` (the engine replay with its re-stamping),
        ``feather_db``, and the search parameters.
    recalls : DataFrame
        ``note_id``, ``engine``, ``memsim``: final recall counts.
    memsim : MemsimReplay
        memsim's side, reusable for another engine run on the same stream
        (``feather_cross_check(..., reuse=result)``).
    engine : EngineReplay
        The engine's side.
    """

    per_query: pd.DataFrame
    summary: dict
    recalls: pd.DataFrame
    memsim: MemsimReplay = field(repr=False)
    engine: EngineReplay = field(repr=False)


def _compare(stream: Stream, mem: MemsimReplay, eng: EngineReplay, k: int) -> pd.DataFrame:
    queries = stream.queries
    created = stream.notes["created_at"].to_numpy(np.float64)
    qt = queries["t"].to_numpy(np.float64)
    n_live = np.searchsorted(np.sort(created), qt, side="right")
    rows = []
    for j in range(len(qt)):
        a_ids, a_s = eng.ids[j], eng.scores[j]
        b_ids, b_s = mem.ids[j], mem.scores[j]
        shared, ia, ib = np.intersect1d(a_ids, b_ids, assume_unique=True,
                                        return_indices=True)
        # memsim's notes the engine did not return although they score above
        # its k-th result: the engine cannot have scored them (an index miss),
        # as long as both sides hold the same recall counts
        missing = np.ones(len(b_ids), dtype=bool)
        missing[ib] = False
        above = (int((b_s[missing] > a_s.min() + 1e-6).sum())
                 if len(a_ids) == k and missing.any() else 0)
        rows.append((
            len(a_ids), len(b_ids),
            bool(len(a_ids) == len(b_ids) and np.array_equal(a_ids, b_ids)),
            top_k_overlap(len(a_ids), len(b_ids), len(shared), k),
            len(shared),
            kendall(ia.astype(float), ib.astype(float)),
            float(np.abs(a_s[ia] - b_s[ib]).max()) if len(shared) else float("nan"),
            above,
        ))
    df = pd.DataFrame(rows, columns=["n_engine", "n_memsim", "identical", "overlap",
                                     "n_shared", "rank_corr", "max_score_diff", "unscored"])
    df.insert(0, "query_id", queries["query_id"].to_numpy(np.int64))
    df.insert(1, "t", qt)
    df.insert(2, "n_live", n_live)
    df["clock_tick"] = eng.clock_tick
    df["unstamped"] = eng.unstamped
    df["beyond_exact"] = eng.beyond_exact
    df["cause"] = _causes(df, eng, mem)
    return df


def _causes(df: pd.DataFrame, eng: EngineReplay, mem: MemsimReplay) -> np.ndarray:
    """A likely cause for each differing query (empty where identical)."""
    tie = np.array([_near_tie(a) or _near_tie(b) for a, b in zip(eng.scores, mem.scores)],
                   dtype=bool)

    def col(name: str) -> np.ndarray:
        return df[name].to_numpy(bool)
    return likely_causes(
        df["identical"].to_numpy(bool),
        [(col("beyond_exact") | col("unscored"),
          "index miss (the engine's HNSW did not score a nearer note)"),
         (col("clock_tick") | col("unstamped"),
          "clock (the search straddled a second, or an unstamped note)"),
         (tie, "near tie (float32 scores within 1e-6)")],
        "recall counts differ since an earlier difference")


def _near_tie(scores: np.ndarray) -> bool:
    return len(scores) > 1 and bool((np.abs(np.diff(scores)) < 1e-6).any())


def feather_cross_check(stream: Stream, *, k: int = 10, half_life: float = 30.0,
                        time_weight: float = 0.3, min_weight: float = 0.0,
                        ef: int | None = None, exact: bool = True, feedback: bool = True,
                        reuse: CrossCheckResult | None = None,
                        workdir: str | os.PathLike | None = None,
                        progress: Callable[[float], None] | None = None) -> CrossCheckResult:
    """Replay ``stream`` through Feather DB and memsim's ``feather`` preset and
    compare them query by query.

    Parameters
    ----------
    stream : Stream
        A stream with embeddings (one store: no namespaces). Its times are
        quantised to whole seconds first (:func:`quantise_stream`), for both
        replays.
    k : int
        Results per search (the preset scores the ``3k`` nearest).
    half_life, time_weight, min_weight : float
        The engine's ``ScoringConfig`` and memsim's preset parameters.
    ef : int, optional
        The engine's HNSW search beam. None: the engine's default (50), or
        the exact beam when ``exact``.
    exact : bool
        Search exactly: ``ef = max(ef, min(n_notes, 2000))``.
    feedback : bool
        Searches record recalls (``record_salience=True``; the preset's
        feedback). False compares the rankings without the feedback loop,
        which isolates what the approximate index alone changes.
    reuse : CrossCheckResult, optional
        An earlier result on the same stream with the same ``k``,
        ``half_life``, ``time_weight`` and ``min_weight``: its memsim replay
        is reused (to compare several ``ef`` at the cost of one simulation).
    workdir : path, optional
        Folder of the engine's throwaway database (see :func:`replay_feather`).

    Returns
    -------
    CrossCheckResult

    Raises
    ------
    MemsimError
        When feather-db is not installed (``pip install memsim[feather]``).
    ConfigError
        For a stream without embeddings or split into namespaces, or a
        ``reuse`` made with other parameters.
    """
    _require_feather()
    _check_stream(stream)
    if k < 1:
        raise ConfigError(f"The 'k' parameter of feather_cross_check must be >= 1. Got {k!r} "
                          "instead.")
    qs = quantise_stream(stream)
    params = {"k": k, "half_life": half_life, "time_weight": time_weight,
              "min_weight": min_weight, "feedback_mode": "per-query", "feedback": feedback}
    if reuse is not None:
        if reuse.memsim.params != params:
            raise ConfigError(f"reuse: made with {reuse.memsim.params}, not {params}")
        if len(reuse.memsim.ids) != qs.n_queries:
            raise ConfigError("reuse: made on another stream (query count differs)")
        mem = reuse.memsim
    else:
        mem = replay_memsim(qs, k=k, half_life=half_life, time_weight=time_weight,
                            min_weight=min_weight, feedback=feedback)
    if exact:
        ef = max(ef or 0, min(qs.n_notes, EXACT_EF_CAP), 3 * k)
    eng = replay_feather(qs, k=k, half_life=half_life, time_weight=time_weight,
                         min_weight=min_weight, ef=ef, feedback=feedback, workdir=workdir,
                         progress=progress)
    per_query = _compare(qs, mem, eng, k)
    note_ids = qs.notes["note_id"].to_numpy(np.int64)
    recalls = pd.DataFrame({"note_id": note_ids, "engine": eng.recalls, "memsim": mem.recalls})
    summary = _summary(qs, per_query, mem, eng, params, exact=exact)
    return CrossCheckResult(per_query=per_query, summary=summary, recalls=recalls,
                            memsim=mem, engine=eng)


def _summary(qs: Stream, per_query: pd.DataFrame, mem: MemsimReplay, eng: EngineReplay,
             p: dict[str, Any], *, exact: bool) -> dict[str, Any]:
    """The ``summary`` of :class:`CrossCheckResult` (``p``: the search's parameters)."""
    scored = per_query["max_score_diff"].dropna()
    differs = np.flatnonzero(~per_query["identical"].to_numpy())
    first = int(differs[0]) if len(differs) else None
    # until the first difference both sides hold the same recall counts, so
    # score differences there are arithmetic only (float32, evaluation order)
    scored_before = per_query["max_score_diff"].iloc[:first].dropna()
    summary: dict[str, Any] = {
        "n_notes": int(qs.n_notes),
        "n_queries": int(qs.n_queries),
        "k": p["k"], "half_life": p["half_life"], "time_weight": p["time_weight"],
        "min_weight": p["min_weight"],
        "ef": eng.ef,
        "exact": bool(exact),
        "feedback": bool(p["feedback"]),
        "identical_share": float(per_query["identical"].mean()) if len(per_query) else
        float("nan"),
        "overlap_mean": float(per_query["overlap"].mean()) if len(per_query) else float("nan"),
        "overlap_min": float(per_query["overlap"].min()) if len(per_query) else float("nan"),
        "rank_corr_mean": float(per_query["rank_corr"].mean()),
        "max_score_diff": float(scored.max()) if len(scored) else float("nan"),
        "equal_recall_share": float((eng.recalls == mem.recalls).mean()) if qs.n_notes
        else float("nan"),
        "recalls_engine_total": int(eng.recalls.sum()),
        "recalls_memsim_total": int(mem.recalls.sum()),
        "first_difference": first,
        "max_score_diff_before_first": (float(scored_before.max()) if len(scored_before)
                                        else float("nan")),
        "index_miss_queries": int(((per_query["beyond_exact"] > 0)
                                   | (per_query["unscored"] > 0)).sum()),
        "clock_ticks": int(eng.clock_tick.sum()),
        "unstamped_returns": int(eng.unstamped.sum()),
        "memsim_s": mem.seconds,
        "engine_s": eng.timings["ingest_s"] + eng.timings["search_s"],
        "engine_ingest_s": eng.timings["ingest_s"],
        "engine_search_s": eng.timings["search_s"],
        "replay_s": eng.timings["total_s"],
        "restamp_s": eng.timings["restamp_s"],
        "clock_wait_s": eng.timings["clock_wait_s"],
        "feather_db": eng.version,
        "time_quantised_s": 1,
    }
    return summary


def _first_lines(per_query: pd.DataFrame, n: int = 5) -> list[str]:

    return [f"    query {r.query_id} (day {r.t:.3f}): overlap {r.overlap:.2f}; {r.cause}"
            for r in first_differences(per_query, n).itertuples(index=False)]


def format_cross_check(result: CrossCheckResult) -> str:
    """A short plain-text report of a cross-check."""
    s = result.summary
    search = "exact" if s["exact"] else "approximate"
    lines = [
        f"Feather DB cross-check: feather-db {s['feather_db']} vs memsim preset 'feather' "
        "(per-query feedback)",
        f"  stream: {s['n_notes']:,} notes, {s['n_queries']:,} queries, times quantised "
        "to whole seconds",
        f"  search: k = {s['k']}, half_life = {s['half_life']:g} d, time_weight = "
        f"{s['time_weight']:g}, min_weight = {s['min_weight']:g}, ef = {s['ef']} ({search}), "
        f"feedback {'on' if s['feedback'] else 'off'}",
        f"  identical top-{s['k']}:      {s['identical_share']:.2%} of queries",
        f"  top-{s['k']} overlap:        mean {s['overlap_mean']:.4f}, min "
        f"{s['overlap_min']:.2f}",
        f"  rank corr. (shared):  mean Kendall tau {s['rank_corr_mean']:.4f}",
        f"  largest score diff.:  {s['max_score_diff']:.3g}",
        f"  equal recall counts:  {s['equal_recall_share']:.2%} of notes "
        f"(total recalls engine {s['recalls_engine_total']:,}, memsim "
        f"{s['recalls_memsim_total']:,})",
        "  first difference:     "
        + ("none" if s["first_difference"] is None else f"query #{s['first_difference']}")
        + f" (largest score diff. before it: {s['max_score_diff_before_first']:.3g})",
        f"  index misses:         {s['index_miss_queries']} queries (a returned note outside "
        f"the exact {3 * s['k']} nearest, or a better one not scored)",
        f"  clock: {s['clock_ticks']} searches straddled a second; "
        f"{s['unstamped_returns']} unstamped notes returned",
        *_first_lines(result.per_query),
        f"  time: memsim {s['memsim_s']:.1f} s; engine {s['engine_s']:.1f} s (ingest "
        f"{s['engine_ingest_s']:.1f} s, search {s['engine_search_s']:.1f} s); whole replay "
        f"{s['replay_s']:.1f} s (re-stamping {s['restamp_s']:.1f} s, clock waits "
        f"{s['clock_wait_s']:.1f} s)",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Config file and command line
# --------------------------------------------------------------------------


_CHECK_KEYS = {"seed", "k", "half_life", "time_weight", "min_weight", "searches", "feedback"}
#: What the check's parameters may be (the preset's own ranges; ``k`` at most
#: a run's ``candidates``).
_PARAMS = {"k": Interval(1, 1 << 20, integer=True),
           "half_life": Interval(0, None, closed="neither"),
           "time_weight": Interval(0, 1), "min_weight": Interval(0, 1)}


def run_feather_check(path: str | os.PathLike | dict, *, verbose: bool = True,
                      progress: Any = None, on_result: Any = None) -> list[CrossCheckResult]:
    """Run the cross-check a TOML file (or its parsed dict) describes.

    The file has a ``[feather_check]`` (or ``[engine_check]``) table (``seed``, ``k``, ``half_life``,
    ``time_weight``, ``min_weight``, ``searches``: a list of ``"exact"``,
    ``"default"`` or an integer ef; ``feedback``: true, false or a list of
    them) and a ``[workload]`` table of
    :class:`memsim.data.workload.SyntheticWorkload` knobs, or ``source = "DIR"``
    to replay a stream folder (:func:`memsim.checks.engine_check.read_check_config`). One result per
    (feedback, search) pair, all on one stream and one memsim replay per
    feedback setting. ``on_result(res)`` is called as each pair finishes.
    """
    conf = read_check_config(path, ("feather_check", "engine_check"), _CHECK_KEYS)
    params = {key: conf.value(key, constraint, None) for key, constraint in _PARAMS.items()
              if key in conf.check}
    feedbacks = conf.values("feedback", Options((True, False)), [True])
    searches = conf.values("searches", (Options(("exact", "default")),
                                        Interval(1, None, integer=True)), ["exact", "default"])
    kws = [{"exact": True} if search == "exact" else {"exact": False} if search == "default"
           else {"exact": False, "ef": search} for search in searches]
    results: list[CrossCheckResult] = []
    for fb in feedbacks:
        first = None
        for kw in kws:
            # one progress phase per replay through the engine
            phase = progress
            if hasattr(progress, "phase"):
                phase = progress.phase(f"engine replay ({_search_label(kw, fb)})")
            res = feather_cross_check(conf.stream, **params, **kw, feedback=fb, reuse=first,
                                      progress=phase)
            first = first or res
            results.append(res)
            if on_result is not None:
                on_result(res)
            if verbose:
                print(format_cross_check(res), flush=True)
    return results


def _search_label(kw: dict, feedback: bool) -> str:
    search = "exact" if kw.get("exact") else f"ef {kw.get('ef', 'default')}"
    return search + ("" if feedback else ", no feedback")


def main(argv: list[str] | None = None, progress: Any = None) -> int:
    """``python -m memsim.checks.feather_check CONFIG.toml [--csv PREFIX]``; ``progress``
    (the CLI's) gets a phase per replay through the engine."""
    parser = argparse.ArgumentParser(prog="python -m memsim.checks.feather_check",
                                     description="Cross-check memsim's feather preset "
                                                 "against the feather-db engine.")
    parser.add_argument("config", help="TOML file (see experiments/feather_check.toml)")
    parser.add_argument("--csv", metavar="PREFIX",
                        help="write PREFIX_<search>.csv with the per-query table")
    parser.add_argument("--json", action="store_true",
                        help="print each configuration's summary as JSON instead of text")
    args = parser.parse_args(argv)
    # This process owns the throwaway databases: skip the fsync of each
    # write-ahead-log record, whatever the work folder's file system.
    os.environ.setdefault("FEATHER_WAL_SYNC", "0")
    def name(res) -> str:
        return ("exact" if res.summary["exact"] else f"ef{res.summary['ef']}") + (
            "" if res.summary["feedback"] else "_nofeedback")
    return run_check_command(
        lambda: run_feather_check(args.config, progress=progress,
                                  on_result=csv_saver(args.csv, name), verbose=not args.json),
        args.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
