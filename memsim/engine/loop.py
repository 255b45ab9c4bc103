"""The simulation loop: :func:`simulate`.

For one stream and several *arms* (a policy at a budget), time advances over
batches of queries (a tick each):

1. the organic uses before the batch are recorded for every arm;
2. a retention sweep runs for every arm when one is due;
3. the similarity of the batch's queries to every existing note is one
   matrix product in fixed blocks of columns, shared by all arms
   (:class:`~memsim.engine.batch.Batch`);
4. each arm: score -> top C (ties to the lower ``note_id``) -> pack into
   the budget -> order -> per-query metrics; the per-tick arms pack and
   measure together, the per-query ones go query by query (or,
   through the ``"walk"`` accelerator, together);
5. feedback: the notes the answers used gain a recall.

:mod:`memsim.engine.reference` is the same loop without any accelerator.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from threadpoolctl import ThreadpoolController

from memsim.evaluation.metrics import oracle_packing
from memsim.core import interrupt
from memsim.core.rng import child
from memsim.data.stream import Stream
from .arms import _ArmJob, _outputs_all
from .batch import Batch, arm_batches
from .context import SweepView
from .frames import _add_rankings, _Collected, _result
from .inputs import _inputs
from .scoring import _answer_all
from .settings import (ACCELERATORS, check_accelerators, feedback_timing, resolve_budget,
                       usable_accelerators)
from .state import PolicyState
from .uses import _record_uses
from .walk import _walk_arms

if TYPE_CHECKING:
    from .cache import ReplayCache
    from .frames import SimResult
    from .inputs import _Inputs
    from .settings import Arm, SimSettings
    from .state import NoteArrays


def simulate(stream: Stream, arms: list[Arm], settings: SimSettings,
             seed: np.random.SeedSequence, reader=None, progress=None,
             cache: ReplayCache | None = None, *,
             accelerators: tuple[str, ...] = ACCELERATORS, walk_window: int = 64) -> SimResult:
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
    accelerators : tuple of str, optional
        The exact fast paths the engine may take (:data:`ACCELERATORS`, all
        by default). Each gives the same top C and values as the reference
        (:func:`memsim.engine.reference.simulate`), hence the same frames,
        bit for bit; ``()`` scores every live note of every query and
        replays per-query feedback query by query. ``SimResult.accelerated``
        counts the answers each gave.
    walk_window : int, optional
        Queries of a tick the ``"walk"`` accelerator corrects at once, to
        start with (its speed only).
    """
    check_accelerators(accelerators, walk_window)
    # The batch products are small (tens of queries x thousands of notes): a
    # multi-threaded BLAS spends more on synchronisation than it saves, and
    # is several times slower still when cores are shared (sweep workers,
    # --jobs). Parallelism comes from processes instead.
    with _threadpools().limit(limits=1, user_api="blas"):
        return _simulate(stream, arms, settings, seed, reader, progress, cache,
                         accelerators, walk_window)


@lru_cache(maxsize=1)
def _threadpools() -> ThreadpoolController:
    """The process's thread pools (BLAS, OpenMP), found once: finding them
    reads the loaded libraries, a few milliseconds per call of simulate."""
    return ThreadpoolController()


def _simulate(stream, arms, settings, seed, reader, progress, cache, accelerators,
              walk_window) -> SimResult:
    work = None if cache is None else cache.work(stream, settings.tick_days)
    inp = _inputs(stream) if work is None else work.inputs
    notes = inp.notes
    states = [PolicyState(notes, len(inp.actor_names)) for _ in arms]
    rngs = [child(seed, "policy", arm.stream_name or arm.policy_name, "budget", arm.budget or 0)
            for arm in arms]
    per_query = [feedback_timing(arm.policy, settings) == "per-query" for arm in arms]
    batches = arm_batches(inp.qt, notes.created_at, arms, settings)
    got = _Collected(metrics=[[] for _ in arms], rankings=[[] for _ in arms])
    next_sweep = -np.inf
    last_store_day = None
    acc_done = np.zeros(len(arms), dtype=np.int64)  # organic uses applied, per arm
    oracle_cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    #: the uses of each per-tick arm in its tick's batches, recorded after it
    pending: dict[int, list] = {}
    for bi, (rows, t0, tick_first, tick_last) in enumerate(batches):
        t = inp.qt[rows]
        t_start = t.min()
        # 1. organic uses strictly before this batch (a per-tick arm: before
        # its tick)
        _organic_uses(inp, arms, states, acc_done, t_start,
                      None if tick_first else per_query)
        # 2. retention sweeps, at a tick's start (its later parts are the
        # same tick)
        if tick_first and t_start >= next_sweep:
            _sweep(arms, states, rngs, notes, t_start)
            next_sweep = (np.floor(t_start / settings.retention_period_days) + 1) * \
                settings.retention_period_days
        day = np.floor(t_start)
        if tick_first and day != last_store_day:
            got.store.extend(_store_rows(notes, states, t_start))
            last_store_day = day
        # 3. shared similarity
        # (kept by its queries: a replay in parts and one of whole ticks differ)
        batch_key = (int(rows[0]), len(rows))
        batch = None if work is None else work.batches.get(batch_key)
        if batch is None:
            batch = Batch(qrows=rows, t=t, actors=inp.qactor[rows], notes=notes,
                          qemb=inp.qemb[rows], qnorm2=inp.qnorm2[rows], relevance=inp.relevance,
                          namespaces=None if inp.qns is None else inp.qns[rows], t0=t0)
            batch.logged = inp.logged  # for rankers that declare needs_logged
        batch.set_dead(_dead(states, batch.rows))
        # 4. each arm (the per-tick ones pack and measure together: _run_arms)
        outs: dict[int, dict] = {}
        tick_jobs: dict[int, _ArmJob] = {}
        query_jobs: dict[int, _ArmJob] = {}
        for ai, (arm, st) in enumerate(zip(arms, states)):
            budget = resolve_budget(arm, settings, inp.qbudget[rows])
            key = budget.tobytes() + rows.tobytes()
            if key not in oracle_cache:  # arms at the same budgets share the oracle
                oracle_cache.clear()
                oracle_cache[key] = oracle_packing(inp.relevance, rows, t, budget, notes.tokens)
            job = _ArmJob(arm, st, rngs[ai], batch, budget, settings, reader,
                          oracle_cache[key][0], inp.relevance,
                          usable_accelerators(arm.policy, accelerators), walk_window,
                          oracle_keys=oracle_cache[key][1])
            (query_jobs if per_query[ai] else tick_jobs)[ai] = job
        if query_jobs:  # the per-query arms walk the batch together
            walked, done = _walk_arms(list(query_jobs.values()), inp,
                                      [int(acc_done[ai]) for ai in query_jobs])
            outs.update(zip(query_jobs, walked))
            acc_done[list(query_jobs)] = done
        if tick_jobs:  # per-tick arms: their uses wait for the tick's last part
            parts = [pending.setdefault(ai, []) for ai in tick_jobs]
            outs.update(zip(tick_jobs, _run_arms(list(tick_jobs.values()), parts)))
        if tick_last:
            for ai, uses in pending.items():
                _record_uses(states[ai], arms[ai].policy.feedback, uses)
            pending.clear()
        for ai, out in outs.items():
            got.metrics[ai].append(out["metrics"])
            if settings.save_rankings:
                _add_rankings(got.rankings[ai], out["rankings"], tick_first)
        if work is not None:
            cache.keep(work, batch_key, batch)
        interrupt.raise_if_asked()  # a stop lost in a callback from C (numba compiling)
        if progress is not None:
            progress((bi + 1) / len(batches))
    return _result(inp, arms, states, settings, got)


def _dead(states: list[PolicyState], rows: slice | np.ndarray) -> np.ndarray | None:
    """The notes ``rows`` (a batch's) every arm has evicted (None when no
    arm evicted any): no arm can see them until the next retention sweep,
    which comes only between batches."""
    dead = None
    for st in states:
        ev = st.evicted[rows]  # a view when rows is a slice
        dead = ev if dead is None else dead & ev
        if not dead.any():
            return None
    # the batch keeps it (a cached batch, for the next replay): not a view
    # of an arm's state
    return dead.copy() if dead.base is not None else dead


def _organic_uses(inp: _Inputs, arms, states, acc_done: np.ndarray, t_start: float,
                  only: list[bool] | None = None) -> None:
    """Apply the stream's organic uses before ``t_start`` to every arm (or
    the arms ``only`` marks; those uses each has not applied yet,
    ``acc_done``, updated in place)."""
    acc_end = int(np.searchsorted(inp.acc_t, t_start, side="left"))
    for ai, (arm, st) in enumerate(zip(arms, states)):
        if acc_end > acc_done[ai] and (only is None or only[ai]):
            sl = slice(int(acc_done[ai]), acc_end)
            st.touch(inp.acc_rows[sl], inp.acc_actor[sl], inp.acc_t[sl], arm.policy.feedback)
            acc_done[ai] = acc_end


def _store_rows(notes: NoteArrays, states, t: float) -> list[tuple]:
    """(arm, t, live notes, live tokens, invalidated notes kept for audit,
    live notes already superseded) of every arm at time ``t``."""
    _, live = notes.existing(t, t)  # (a slice when they are consecutive rows)
    tokens = notes.tokens[live]
    stale = (None if notes.superseded_at is None
             else notes.superseded_at[live] <= t)
    out = []
    for ai, st in enumerate(states):
        keep = ~st.evicted[live]
        out.append((ai, float(t), int(np.count_nonzero(keep)), int(tokens.sum(where=keep)),
                    int(np.count_nonzero(st.invalid_at[live] <= t)),
                    0 if stale is None else int(np.count_nonzero(stale & keep))))
    return out


def _sweep(arms, states, rngs, notes: NoteArrays, t: float) -> None:
    """Run every arm's retention sweep at time ``t``."""
    exist, rows = notes.existing(t, t)
    for arm, st, rng in zip(arms, states, rngs):
        if not arm.policy.retention.evicts:
            continue
        idx = exist[~st.evicted[rows]]
        if len(idx) == 0:
            continue
        evict = np.asarray(arm.policy.retention.evict(SweepView(notes, st, idx, t, rng)),
                           dtype=bool)
        st.evicted[idx[evict]] = True
        st.evicted_at[idx[evict]] = t
        if arm.policy.retention.invalidates:
            st.invalid_at[idx[evict]] = t


def _run_arms(jobs: list[_ArmJob], pending: list[list]) -> list[dict[str, Any]]:
    """Score, pack and measure every query of the batch on each arm's state
    at its tick's start, and append the batch's uses to each arm's list in
    ``pending`` (per-tick feedback: recorded after the tick). The arms'
    packing and metrics run together (:func:`_pack_all`, :func:`_outputs_all`)."""
    packs = _answer_all(jobs, pending)
    return _outputs_all([(job, batch, pk) for job, (batch, pk) in zip(jobs, packs)])
