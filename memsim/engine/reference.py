"""The reference engine: the executable specification of a replay.

Every live note of every query is scored by :meth:`Policy.score`, the top C
taken (ties to the lower ``note_id``), packed, ordered and measured, one arm
and one batch at a time; per-query feedback replays each query on its own.
No accelerator runs here (no similarity levels, pruning, similarity filter,
stacking of arms, corrected ticks, skipped product blocks or cached
replays), so this loop says what a replay is, and
:func:`memsim.engine.simulate` must give the same frames, bit for bit, with
any of its accelerators on (its ``accelerators`` argument;
``tests/test_accelerators.py`` checks it for every registered component).

It shares with the fast loop only what defines the values: the stream's
encoding, the per-arm state, a batch's similarity product (fixed blocks of
columns, so that a note's similarity does not depend on which others are
multiplied) and anchor, the scoring context, the packing and the metrics.
"""

from __future__ import annotations

import numpy as np

from memsim.core.errors import ConfigError
from memsim.evaluation.metrics import oracle_packing
from memsim.policies import ArrayContext
from memsim.core.rng import child
from memsim.data.stream import Stream

from .ann import chosen_prefilter
from .arms import _ArmJob, _outputs, _pack, _Packed, _stacked
from .batch import Batch, arm_batches
from .context import BatchContext
from .frames import SimResult, _add_rankings, _Collected, _result
from .inputs import _inputs
from .settings import Arm, SimSettings, feedback_timing, resolve_budget
from .state import NoteArrays, PolicyState, superseded
from .topc import top_candidates
from .uses import _answer_uses, _record_uses

__all__ = ["simulate"]


def simulate(stream: Stream, arms: list[Arm], settings: SimSettings,
             seed: np.random.SeedSequence, reader=None) -> SimResult:
    """Replay ``stream`` through every arm, plainly (module docstring).

    The parameters and the frames are those of :func:`memsim.engine.simulate`
    (which also takes the accelerators on; nothing is accelerated here).
    """
    inp = _inputs(stream)
    notes = inp.notes
    states = [PolicyState(notes, len(inp.actor_names)) for _ in arms]
    rngs = [child(seed, "policy", arm.stream_name or arm.policy_name, "budget", arm.budget or 0)
            for arm in arms]
    got = _Collected(metrics=[[] for _ in arms], rankings=[[] for _ in arms])
    organic_done = [0] * len(arms)  # the stream's organic uses each arm has recorded
    next_sweep = -np.inf
    last_store_day = None
    per_query = [feedback_timing(arm.policy, settings) == "per-query" for arm in arms]
    batches = arm_batches(inp.qt, notes.created_at, arms, settings)
    # each per-tick arm's uses in its tick's batches, recorded after the last
    pending: list[list] = [[] for _ in arms]
    for rows, t_end, tick_first, tick_last in batches:
        t = inp.qt[rows]
        t_start = float(t.min())
        # 1. the organic uses before the batch (a per-tick arm: before its tick)
        for ai, arm in enumerate(arms):
            if tick_first or per_query[ai]:
                organic_done[ai] = _organic_uses(inp, states[ai], arm, organic_done[ai],
                                                 t_start)
        # 2. a retention sweep of every arm, once per period, at a tick's
        # start (a tick taken in parts: its first)
        if tick_first and t_start >= next_sweep:
            for arm, st, rng in zip(arms, states, rngs):
                _sweep(arm, st, rng, notes, t_start)
            period = settings.retention_period_days
            next_sweep = (np.floor(t_start / period) + 1) * period
        if tick_first and np.floor(t_start) != last_store_day:
            last_store_day = np.floor(t_start)
            got.store.extend(_store_rows(notes, states, t_start))
        # 3. the batch: its queries, anchored at the tick's end
        batch = Batch(qrows=rows, t=t, actors=inp.qactor[rows], notes=notes,
                      qemb=inp.qemb[rows], qnorm2=inp.qnorm2[rows], relevance=inp.relevance,
                      namespaces=None if inp.qns is None else inp.qns[rows], t0=t_end)
        batch.logged = inp.logged
        # 4. each arm: score, pack, measure; 5. its uses
        for ai, (arm, st) in enumerate(zip(arms, states)):
            budget = resolve_budget(arm, settings, inp.qbudget[rows])
            oracle, oracle_keys = oracle_packing(inp.relevance, rows, t, budget, notes.tokens)
            job = _ArmJob(arm, st, rngs[ai], batch, budget, settings, reader, oracle,
                          inp.relevance, oracle_keys=oracle_keys)
            if per_query[ai]:
                packs = []
                for i in range(len(t)):  # each query sees every use before it
                    organic_done[ai] = _organic_uses(inp, st, arm, organic_done[ai], t[i])
                    packs.append(_answer(job.row(i)))
                pk = _stacked(packs)
            else:  # on the state at the tick's start
                pk = _answer(job, pending[ai])
            out = _outputs(job, batch, pk)
            got.metrics[ai].append(out["metrics"])
            if settings.save_rankings:
                _add_rankings(got.rankings[ai], out["rankings"], tick_first)
        if tick_last:
            for ai, arm in enumerate(arms):  # the per-tick arms' uses of the tick
                _record_uses(states[ai], arm.policy.feedback, pending[ai])
                pending[ai] = []
    return _result(inp, arms, states, settings, got)


def _organic_uses(inp, st: PolicyState, arm: Arm, done: int, t: float) -> int:
    """Record the stream's organic uses strictly before ``t`` that the arm
    has not recorded (from ``done`` on); return how many it has recorded."""
    end = int(np.searchsorted(inp.acc_t, t, side="left"))
    if end > done:
        sl = slice(done, end)
        st.touch(inp.acc_rows[sl], inp.acc_actor[sl], inp.acc_t[sl], arm.policy.feedback)
        return end
    return done


def _sweep(arm: Arm, st: PolicyState, rng, notes: NoteArrays, t: float) -> None:
    """The arm's retention sweep at ``t``: it evicts among the live notes
    (and an invalidating retention marks them invalid too)."""
    if not arm.policy.retention.evicts:
        return
    idx = np.flatnonzero((notes.created_at <= t) & (notes.expires_at > t) & ~st.evicted)
    if len(idx) == 0:
        return
    ctx = ArrayContext(
        t=np.array([t]), idx=idx, created_at=notes.created_at[idx],
        updated_at=notes.updated_at[idx], last_access=st.last_access[idx],
        recalls=st.recalls[idx], tier=st.tier[idx], memory_type=notes.memory_type[idx],
        importance=notes.importance[idx], salience=notes.salience[idx],
        pinned=notes.pinned[idx], distinct_actors=st.distinct_actors(idx),
        tokens=notes.tokens[idx], rng=rng, superseded_at=superseded(notes)[idx])
    evict = np.asarray(arm.policy.retention.evict(ctx), dtype=bool)
    st.evicted[idx[evict]] = True
    st.evicted_at[idx[evict]] = t
    if arm.policy.retention.invalidates:
        st.invalid_at[idx[evict]] = t


def _store_rows(notes: NoteArrays, states: list[PolicyState], t: float) -> list[tuple]:
    """(arm, t, live notes, live tokens, invalidated notes kept for audit,
    live notes already superseded) of every arm at ``t``."""
    live = (notes.created_at <= t) & (notes.expires_at > t)
    stale = live & (superseded(notes) <= t)
    return [(ai, float(t), int((live & ~st.evicted).sum()),
             int(notes.tokens[live & ~st.evicted].sum()), int((live & (st.invalid_at <= t)).sum()),
             int((stale & ~st.evicted).sum())) for ai, st in enumerate(states)]


def _answer(job: _ArmJob, pending: list | None = None) -> _Packed:
    """The arm's answers to the batch's queries on its state now: every live
    note scored, the top C packed; then the uses they make recorded (or,
    with ``pending``, appended to it: per-tick feedback, recorded after the
    tick)."""
    policy, st, batch = job.arm.policy, job.st, job.batch
    fb = policy.feedback
    ctx = BatchContext(batch, st, job.rng)
    live = batch.valid & ~st.evicted[batch.idx][None, :]
    if policy.retriever.prefilter:  # the retriever's M nearest (or its index's)
        live = live & chosen_prefilter(ctx, policy.retriever, live)
        if fb.touches_before_scoring:  # a use before scoring
            qi, li = np.nonzero(live)
            st.touch(batch.idx[li], batch.actors[qi], batch.t[qi], fb)
            ctx = BatchContext(batch, st, job.rng)
    if policy.ranker.needs_logged:  # a production system's replay: what it returned
        if ctx.logged_rank is None:
            raise ConfigError(f"ranker {policy.ranker.name!r} needs a stream with logged "
                              "rankings (retrieved.parquet, from a trace's 'retrieved' events)")
        live = live & np.isfinite(ctx.logged_rank)
    ctx.live = live
    scores = np.asarray(policy.score(ctx), dtype=np.float64)
    candidates = live
    if policy.ranker.chooses_candidates():
        candidates = candidates & np.asarray(policy.ranker.candidate_mask(ctx), dtype=bool)
    scores = np.where(candidates & ~np.isnan(scores), scores, -np.inf)
    pos, vals = top_candidates(scores, job.c)
    pk = _pack(job, batch, pos, vals)
    st.update_note_state(policy.ranker, ctx)  # the ranker's own per-note state, before the uses
    if not fb.touches_before_scoring:
        qi, used = _answer_uses(fb, batch, pk, candidates if fb.touch == "prefilter" else None)
        if pending is None:
            st.touch(used, batch.actors[qi], batch.t[qi], fb)
        else:
            pending.append((used, batch.actors[qi], batch.t[qi]))
    return pk
