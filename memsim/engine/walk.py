"""Accelerator ``"walk"``: per-query feedback at about per-tick cost.

The reference replays a per-query arm's tick query by query, each scored on
the state it has then. Here the tick is scored once, on the state at its
start, and every query is corrected for the notes used before it (rescored
on what-if copies of their state and merged into its top C; a prefilter
touch before scoring is a use before the query itself); a query whose
merge cannot be proven exact is scored again in full. The per-query arms
of a batch walk it together (:func:`_walk_together`): one scoring (the
arms that stack as one array), and each round of their corrections packed
as one array, a row per (arm, query). Without this accelerator the loop
replays the tick query by query, as the reference.

**Contract.** For every query of every arm it answers, the same top C
(the same notes in the same order, ties to the lower ``note_id``) and the
same score values, bit for bit, as :mod:`memsim.engine.reference`, which
scores every live note; hence the same packing, metrics and feedback.
``tests/test_accelerators.py`` checks it for every registered component,
with this accelerator alone and with the others.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.core import jit
from memsim.policies import Policy
from .arms import _outputs, _outputs_all, _pack_all, _Packed, _stacked
from .context import BatchContext, _GatheredContext
from .pruning import _prune_plan
from .cells import _cell_scores
from .scoring import _answer_all, _scoring_context, _top
from .stacking import _stacked_tops
from .topc import _columns, _within, nonzero2
from .uses import _answer_uses, _chosen, _reads_packing

if TYPE_CHECKING:
    from .arms import _ArmJob
    from .batch import Batch
    from .inputs import _Inputs
    from .state import NoteArrays, PolicyState


#: queries corrected at once, at least, after a wrong guess; a batch's tail
#: shorter than this joins the window before it
MIN_WINDOW = 16


def _walkable(policy: Policy, accelerators: tuple[str, ...]) -> bool:
    """Whether a query's scores change only at the notes used before it: an
    elementwise ranker and candidates chosen by similarity alone, or a
    ranker whose sets and own candidates read no use
    (``Ranker.sets_read_uses`` False) and that scores chosen cells as on
    the whole batch (``Ranker.scores_cells``; LangChain's). (A prefilter
    touch before scoring is a use before the query itself: its notes are
    known before any answer, :func:`_walk_uses`.)"""
    r = policy.ranker
    if "walk" not in accelerators or r.needs_logged:
        return False
    if r.set_dependent or r.chooses_candidates():
        return not r.sets_read_uses and r.scores_cells
    return True


def _walk_arms(jobs: list[_ArmJob], inp: _Inputs, acc_done: list[int]
               ) -> tuple[list[dict[str, Any]], list[int]]:
    """Per-query feedback over one batch, for several arms: each query sees
    every use made before it (its predecessors' answers and the organic
    uses before its time). Returns each arm's outputs and the organic uses
    it has now applied.

    The arms the ``"walk"`` accelerator can correct (:func:`_walkable`) are
    walked together (:func:`_walk_together`); the others replay the batch
    query by query, as the reference, their answers to each query found
    together (:func:`_answer_all`: the ones that stack scored as one array,
    all packed as one)."""
    cut = np.searchsorted(inp.acc_t, jobs[0].batch.t, side="left") if jobs else None
    outs: list[dict[str, Any] | None] = [None] * len(jobs)
    done = list(acc_done)
    fast = [i for i, job in enumerate(jobs) if _walkable(job.arm.policy, job.accelerators)]
    slow = [i for i in range(len(jobs)) if i not in fast]
    # uses that read no packing: the queries' candidates are packed
    # together after the last (each row packs as it does alone)
    late = {i: not _reads_packing(jobs[i].arm.policy.feedback) for i in slow}
    parts: dict[int, list] = {i: [] for i in slow}
    for k in range(len(jobs[0].batch.t) if slow else 0):
        # the reference: each query on its own, on the state every use
        # before it left; the arms' answers to it found together (each arm
        # answers as alone: its own state, its rows packed as alone)
        for i in slow:
            if cut[k] > done[i]:
                sl = slice(done[i], int(cut[k]))
                jobs[i].st.touch(inp.acc_rows[sl], inp.acc_actor[sl], inp.acc_t[sl],
                                 jobs[i].arm.policy.feedback)
                done[i] = int(cut[k])
        for pack in (True, False):
            group = [i for i in slow if late[i] != pack]
            rows = [jobs[i].row(k) for i in group]
            for i, row, answer in zip(group, rows, _answer_all(rows, pack=pack) if rows else ()):
                parts[i].append((row, *answer))
    for i in slow:
        outs[i] = _outputs(jobs[i], jobs[i].batch, _packed_parts(jobs[i], parts[i]) if late[i]
                           else _stacked([pk for *_, pk in parts[i]]))
    if fast:
        walked, ends = _walk_together([jobs[i] for i in fast], inp, cut,
                                      [done[i] for i in fast])
        for i, out, end in zip(fast, walked, ends):
            outs[i], done[i] = out, end
    return outs, done  # type: ignore[return-value]


def _packed_parts(job: _ArmJob, parts: list[tuple[_ArmJob, Batch, _Packed]]) -> _Packed:
    """The batch's packing from its queries' candidates, each query answered
    alone (``(its job, the batch it scored, its candidates)``, from
    :func:`_answer_all` without packing): one :func:`_pack_all` of the
    batch's rows when every query scored the batch's columns, else of one
    item per query."""
    if all(b.idx is job.batch.idx for _, b, _ in parts) \
            and len({pk.pos.shape[1] for *_, pk in parts}) == 1:
        pos = np.concatenate([pk.pos for *_, pk in parts])
        vals = np.concatenate([pk.vals for *_, pk in parts])
        return _pack_all([(job, job.batch, pos, vals, slice(None))])[0]
    return _stacked(_pack_all([(row, b, pk.pos, pk.vals, slice(None))
                               for row, b, pk in parts]))


def _walk_together(jobs: list[_ArmJob], inp: _Inputs, cut: np.ndarray, acc_done: list[int]
                   ) -> tuple[list[dict[str, Any]], list[int]]:
    """Per-query feedback at about per-tick cost, for several arms at once.

    The batch is scored and packed once per arm, on the state at its start
    (the arms that stack scored as one array, :func:`_stacked_tops`; all
    packed together, :func:`_pack_all`). The uses its queries make with
    those answers, and the organic uses before each query's time, are a
    guess at the order of uses: every query that sees a note used before it
    is corrected at once, its used notes rescored on the state they have
    then (:meth:`_Walk.merge`). A query whose own uses change makes the
    guess wrong for the later queries that see the notes concerned: the
    queries before the first of them are final, and the guess is made again
    from it, with their new uses (:meth:`_Walk.settle`). A query whose
    correction cannot be proven exact is scored again in full on the state
    at its time. A policy whose scores read no use (:meth:`Policy.reads_uses`)
    has nothing to correct. Every use is then recorded, in time order.

    Each arm keeps its own window and state; the arms advance in rounds,
    and each round's re-packing of every arm's corrected queries is one
    :func:`_pack_all` (a row per (arm, query)): each row packs as alone, so
    each arm gets what it gets walked alone.
    """
    # on the state at the batch's start: a query's own uses before scoring
    # are corrected for as any use before it
    scored = [_scoring_context(job.arm.policy, job.st, job.rng, job.batch, job.accelerators,
                               touch_before=False) for job in jobs]
    stacked = _stacked_tops([(i, job.arm.policy, ctx, job.c, job.st)
                             for i, (job, (ctx, _)) in enumerate(zip(jobs, scored))
                             if "stack" in job.accelerators])
    tops, chosen = [], []
    for i, (job, (ctx, _)) in enumerate(zip(jobs, scored)):
        mask = None
        if i in stacked:
            pos, vals = stacked[i]
            job.st.accelerated["stack"] += len(pos)
        else:
            pos, vals, mask = _top(job.arm.policy, ctx, job.c, job.st, job.accelerators)
        job.st.accelerated["walk"] += len(job.batch.t)
        tops.append((pos, vals))
        # a ranker's own candidates (they read no use): the only cells a use
        # can change, for every query of the batch
        chosen.append(np.flatnonzero(mask) if job.arm.policy.ranker.chooses_candidates()
                      else None)
    packs = _pack_all([(job, batch, pos, vals, slice(None))
                       for job, (_, batch), (pos, vals) in zip(jobs, scored, tops)])
    walks = [_Walk(job, inp, cut, done, ctx, batch, pk, cand)
             for job, done, (ctx, batch), pk, cand in zip(jobs, acc_done, scored, packs,
                                                          chosen)]
    active = [w for w in walks if w.start < w.q]
    while active:
        _repack_all([(w, w.merge()) for w in active])
        _repack_all([(w, w.settle()) for w in active])
        active = [w for w in active if w.start < w.q]
    for w in walks:
        w.finish()
    return (_outputs_all([(w.job, w.batch, w.pk) for w in walks]),
            [w.acc_end for w in walks])


class _Walk:
    """One arm's walk of a batch (:func:`_walk_together`): its packing, its
    uses not yet recorded and its correction window, advanced a round at a
    time: :meth:`merge` corrects a window (the queries to pack again), then
    :meth:`settle` decides what is final (and the query scored again in
    full to pack, if any)."""

    def __init__(self, job: _ArmJob, inp: _Inputs, cut: np.ndarray, acc_done: int,
                 ctx: BatchContext, batch: Batch, pk: _Packed, chosen: np.ndarray | None):
        self.job, self.ctx, self.batch, self.pk = job, ctx, batch, pk
        self.seen = _Seen(ctx, chosen)
        self.fb = job.arm.policy.feedback
        self.first = dataclasses.replace(pk, **{f.name: getattr(pk, f.name).copy()
                                                for f in dataclasses.fields(pk)})
        self.q = len(batch.t)
        # the organic uses in the batch's time, each seen from the first query after it
        self.acc_end = max(acc_done, int(cut[-1]))
        org = np.arange(acc_done, self.acc_end)
        org_seen = np.searchsorted(cut, org, side="right")
        self.organic = (inp.acc_rows[org], inp.acc_actor[org], inp.acc_t[org], org_seen)
        self.applied = 0  # uses at order keys below it are recorded in the state
        # else a use changes no score
        self.start = 0 if job.arm.policy.reads_uses() else self.q
        # queries corrected at once, to start with: the work past the first
        # query corrected on a wrong guess is redone, so the window then
        # follows how far apart those are (twice the distance to the last
        # one, at least MIN_WINDOW; doubled after a window with none)
        self.window = job.walk_window
        self._round: tuple | None = None

    def uses(self) -> _Uses:
        return _walk_uses(self.job.arm.policy, self.batch, self.pk, self.ctx, self.organic)

    def merge(self) -> np.ndarray:
        """Correct the queries of the window from ``start``
        (:func:`_merged`); return those to pack again."""
        stop = min(self.q, self.start + self.window)
        if self.q - stop < MIN_WINDOW:  # a short tail: in this window, not a round of its own
            stop = self.q
        self._round = (stop, *_merged(self.job, self.ctx, self.seen, self.batch, self.pk,
                                      self.first, self.uses(), self.start, stop,
                                      self.applied))
        return self._round[-1]

    def settle(self) -> np.ndarray:
        """After the window's queries are packed again: move the window on
        (:func:`_first_wrong`); a query whose correction is not proven is
        scored again in full on the state at its time: return it, to pack
        again."""
        stop, redo, old_uses, _ = self._round
        final = _first_wrong(self.job, self.seen, self.batch, self.pk, old_uses, self.start,
                             stop, redo)
        if final < redo:  # a query saw a changed use: the guess is made again from it
            self.window = max(MIN_WINDOW, 2 * (final - self.start))
            self.start = final
            return _NONE
        if redo == stop:
            self.window *= 2
            self.start = stop
            return _NONE
        # the first query whose correction is not proven: record the uses
        # before it (the queries before it are final; its own, when they come
        # before its scoring) and score it in full on the state as it is then
        job, pk = self.job, self.pk
        self.applied = _record(job.st, self.fb, self.uses(), self.applied,
                               2 * redo + 1 + self.fb.touches_before_scoring)
        pk.pos[redo], pk.vals[redo] = _rescored_row(job, self.ctx, self.batch, redo)
        job.st.work["rescored"] += 1
        _set_candidates(pk, self.batch, np.array([redo]))
        self.start = redo + 1
        return np.array([redo])

    def finish(self) -> None:
        """Record every use not yet recorded, in time order."""
        _record(self.job.st, self.fb, self.uses(), self.applied)


_NONE = np.zeros(0, dtype=np.int64)


class _Seen:
    """Which cells of a batch its queries see: the live ones, and among
    them the ranker's own candidates when it chooses them (``chosen``: their
    flat indices in the batch's (Q, L) matrices, ascending; they read no
    use, so they hold for the whole walk). A use changes a query's scores
    only at a note it sees."""

    def __init__(self, ctx: BatchContext, chosen: np.ndarray | None):
        self.ctx, self.chosen = ctx, chosen

    def __call__(self, flat: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Whether the cells at ``flat`` (their columns ``cols``) are seen."""
        sees = self.ctx.live_cells(flat, cols)
        if self.chosen is not None:
            at = np.minimum(np.searchsorted(self.chosen, flat), len(self.chosen) - 1)
            sees &= (self.chosen[at] == flat) if len(self.chosen) else False
        return sees


#: a batch's uses in the order they happen: note rows, actors, times, the
#: first query that sees each, and an order key (2i for the organic uses
#: before query i, 2i + 1 for query i's own)
_Uses = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _walk_uses(policy: Policy, batch: Batch, pk: _Packed, ctx: BatchContext, organic) -> _Uses:
    """The organic uses and those the answers in ``pk`` make (the
    feedback's ``touch``), in the order they happen. A query's own uses are
    seen by the next query, or, made before its scoring (a prefilter touch
    before scoring), by itself; that touch needs a prefilter, as the
    reference's does."""
    fb = policy.feedback
    own_first = int(fb.touches_before_scoring)  # a query's own uses are seen by itself
    o_rows, o_actors, o_t, o_seen = organic
    if own_first and not policy.retriever.prefilter:
        qi = rows = np.zeros(0, dtype=np.int64)
    else:
        qi, rows = _answer_uses(fb, batch, pk, ctx.live if fb.touch == "prefilter" else None)
    key = np.concatenate([2 * o_seen, 2 * qi + 1])
    order = np.argsort(key, kind="stable")
    return (np.concatenate([o_rows, rows])[order],
            np.concatenate([o_actors, batch.actors[qi]])[order],
            np.concatenate([o_t, batch.t[qi]])[order],
            np.concatenate([o_seen, qi + 1 - own_first])[order], key[order])


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


def _merged(job: _ArmJob, ctx: BatchContext, sees: _Seen, batch: Batch, pk: _Packed,
            first: _Packed, uses: _Uses, start: int, stop: int, applied: int
            ) -> tuple[int, np.ndarray, np.ndarray]:
    """Correct the queries ``start`` to ``stop`` for the ``uses`` before each:
    the notes a query sees that were used before it are rescored on the
    state they have then (the state, plus the uses not yet recorded in it,
    ``applied`` on, before the query) and merged into its first top C
    (``first``); the rest keep their first answers. Returns the first query
    whose merge is not proven exact (``stop`` when none; it is corrected as
    the others, and scored again in full after), the queries' used notes
    before (:func:`_used_rows`), and the queries whose candidates changed,
    to pack again (:func:`_repack_all`): not those the merge left with their
    first candidates (they take the first packing back), nor those with the
    candidates they were last packed with (an earlier round's)."""
    fb = job.arm.policy.feedback
    n = len(batch.idx)
    rows_u, seen_u = uses[0], uses[3]
    # the first query that sees a use of each column used (columns
    # ascending; not an array over the batch's columns: millions at scale)
    at, hit = _columns(batch.idx, rows_u)
    # the uses come in the order of their keys, in which the first query
    # that sees each never decreases (:func:`_walk_uses`): a column's first
    # use is the one seen first
    ucols, first_use = np.unique(at[hit], return_index=True)
    useen = seen_u[hit][first_use]
    early = useen < stop
    used = ucols[early]
    qs = np.arange(start, stop)
    cell = useen[early][None, :] <= qs[:, None]
    near = _may_enter(job, ctx, first, qs, used)
    if near is not None:
        cell &= near
    ri, ui = nonzero2(cell)
    live = sees(qs[ri] * n + used[ui], used[ui])
    ci, cq = used[ui[live]], qs[ri[live]]  # a cell per (query, used note it sees)
    redo = stop
    new = _used_note_scores(job, ctx, batch, ci, cq, uses, applied) if len(ci) else None
    if new is None and len(ci):
        redo = int(cq[0])  # cells cannot be scored: every such query in full
    old_uses = _used_rows(fb, pk, qs)
    # every query from start: its first answer, corrected where it sees a use
    tpos, tvals = first.pos[qs], first.vals[qs]  # (fancy indexing: copies)
    if new is not None and len(ci):
        cc = first.pos.shape[1]
        aq, mv, mp = _merge_cells(first.vals, first.pos, cq, new, ci, ucols, useen)
        # the first scoring's C-th candidate bounds every note not rescored
        bv, bp = first.vals[aq, cc - 1], first.pos[aq, cc - 1]
        ok = ~np.isfinite(bv) | (mv[:, -1] > bv) | ((mv[:, -1] == bv) & (mp[:, -1] <= bp))
        if not ok.all():
            redo = int(aq[np.argmin(ok)])
        tpos[aq - start], tvals[aq - start] = mp, mv
    # a query whose answer is the one it has packed (a round before gave it
    # the same) keeps its packing; one whose answer is its first takes the
    # first packing back; the others are packed again
    moved = np.any(tpos != pk.pos[qs], axis=1) | np.any(tvals != pk.vals[qs], axis=1)
    firsts = np.all(tpos == first.pos[qs], axis=1) & np.all(tvals == first.vals[qs], axis=1)
    back = qs[moved & firsts]
    for f in dataclasses.fields(pk):
        getattr(pk, f.name)[back] = getattr(first, f.name)[back]
    again = moved & ~firsts
    rows = qs[again]
    pk.pos[rows], pk.vals[rows] = tpos[again], tvals[again]
    _set_candidates(pk, batch, rows)
    return redo, old_uses, rows


def _merge_cells(fv: np.ndarray, fp: np.ndarray, cq: np.ndarray, new: np.ndarray,
                 ci: np.ndarray, ucols: np.ndarray, useen: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queries ``aq`` that have cells (rescored scores ``new`` at
    columns ``ci``, query ``cq``, ascending), and each one's top C (score
    descending, then the lower column) of its first candidates ``fv[aq]``
    / ``fp[aq]`` (Q, C) and its cells: (aq, scores, columns), the column 0
    where the score is not finite. A first candidate used before its query
    (a column of ``ucols``, ascending, whose first use ``useen`` that query
    sees) is left out: it is among the query's cells."""
    if jit.enabled():  # the same order, row by row, compiled
        return _merge_rows(fv, fp, cq, new, ci, ucols, useen)
    aq, counts = np.unique(cq, return_counts=True)
    cc = fp.shape[1]
    kv, kp = fv[aq], fp[aq]
    if len(ucols):
        k, found = _columns(ucols, kp)
        drop = found & (useen[k] <= aq[:, None])
    else:
        drop = np.zeros(kp.shape, dtype=bool)
    w = int(counts.max())
    r, j = np.repeat(np.arange(len(counts)), counts), _within(counts)
    cv = np.full((len(counts), w), -np.inf)
    cp = np.zeros((len(counts), w), dtype=np.int64)
    cv[r, j], cp[r, j] = new, ci
    mv = np.concatenate([np.where(drop, -np.inf, kv), cv], axis=1)
    mp = np.concatenate([kp, cp], axis=1)
    order = np.lexsort((mp, -mv), axis=1)[:, :cc]  # score desc, then the lower column
    mv = np.take_along_axis(mv, order, axis=1)
    return aq, mv, np.where(np.isfinite(mv), np.take_along_axis(mp, order, axis=1), 0)


@jit.kernel
def _merge_rows(fv, fp, cq, new, ci, ucols, useen):
    """:func:`_merge_cells` compiled (:func:`memsim.core.jit.kernel`): the
    queries' runs of cells in one pass; each query's first candidates
    looked up among the columns used (a table, or a binary search); its
    entries above -inf sorted by (score descending, column ascending) by
    insertion (the first candidates come sorted; a query's cells are few),
    the first C taken, -inf after them: the order of numpy's lexsort there,
    and the same values."""
    c = fp.shape[1]
    a = 0  # the queries with cells, and the most cells of one
    most = run = 0
    for x in range(len(cq)):
        if x == 0 or cq[x] != cq[x - 1]:
            a += 1
            run = 0
        run += 1
        most = max(most, run)
    aq = np.empty(a, dtype=np.int64)
    mv = np.full((a, c), -np.inf)
    mp = np.zeros((a, c), dtype=np.int64)
    vals = np.empty(c + most)
    cols = np.empty(c + most, dtype=np.int64)
    start = 0
    nu = len(ucols)
    # the first query that sees each column of the span the used ones
    # cover, as a table when it is small beside the lookups (a binary
    # search costs more), else found by binary search
    lo = ucols[0] if nu else 0
    span = ucols[nu - 1] - lo + 1 if nu else 0
    dense = 0 < span <= 8 * (nu + a * c)
    table = np.full(span if dense else 0, np.iinfo(np.int64).max)
    if dense:
        for u in range(nu):
            table[ucols[u] - lo] = useen[u]
    for r in range(a):
        q = cq[start]
        stop = start
        while stop < len(cq) and cq[stop] == q:
            stop += 1
        aq[r] = q
        m = 0
        for j in range(c + stop - start):
            if j < c:
                v, p = fv[q, j], fp[q, j]
                if dense:
                    if lo <= p < lo + span and table[p - lo] <= q:
                        continue  # used before: among the cells
                elif nu:
                    at = np.searchsorted(ucols, p)
                    if at < nu and ucols[at] == p and useen[at] <= q:
                        continue
            else:
                v, p = new[start + j - c], ci[start + j - c]
            if not v > -np.inf:
                continue
            i = m  # insert after every entry that goes before it
            while i > 0 and (vals[i - 1] < v or (vals[i - 1] == v and cols[i - 1] > p)):
                vals[i] = vals[i - 1]
                cols[i] = cols[i - 1]
                i -= 1
            vals[i] = v
            cols[i] = p
            m += 1
        start = stop
        for j in range(min(m, c)):
            mv[r, j] = vals[j]
            if np.isfinite(vals[j]):
                mp[r, j] = cols[j]
    return aq, mv, mp


def _may_enter(job: _ArmJob, ctx: BatchContext, first: _Packed, qs: np.ndarray,
               cols: np.ndarray) -> np.ndarray | None:
    """(Q', U) bool: which of the notes ``cols`` may score at least the
    first C-th score of each query of ``qs``, by the similarity the ranker
    needs for it (:meth:`Ranker.similarity_needed`, else its bound at their
    similarity: the pruning's, :func:`_prune_plan`, which hold whatever the
    notes' uses); None when the policy declares neither.

    The others need no rescoring: a note below the first C-th score enters
    the merged top C only when that top C falls below it, and then the
    merge is not proven either way (the query is scored again in full)."""
    policy, st = job.arm.policy, job.st
    if st.prune_off or not len(cols) or not len(qs):
        return None
    plan = _prune_plan(policy, ctx)
    if plan is None:
        return None
    lo, hi = plan
    kth = first.vals[qs, -1]
    sim = np.take(ctx.similarity(policy.retriever), qs[:, None] * len(ctx.idx) + cols)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        need = policy.ranker.similarity_needed(kth, lo, hi, ctx)
        if need is not None:
            need = np.where(np.isfinite(kth), np.asarray(need, dtype=np.float64), -np.inf)
            return ~(sim < need[:, None])
        bound = np.asarray(policy.ranker.score_bound(sim, lo, hi, ctx), dtype=np.float64)
    return ~(bound < kth[:, None])


def _first_wrong(job: _ArmJob, sees: _Seen, batch: Batch, pk: _Packed,
                 old_uses: np.ndarray, start: int, stop: int, redo: int) -> int:
    """After :func:`_merged` and the packing again: the first query of
    ``start`` to ``stop`` corrected on a wrong guess (one that sees a note
    whose use an earlier query changed; ``stop`` when none), looked for
    before ``redo`` only."""
    n = len(batch.idx)
    qs = np.arange(start, stop)
    new_uses = _used_rows(job.arm.policy.feedback, pk, qs)
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
        seen = sees((later[:, None] * n + cols).ravel(), np.tile(cols, len(later)))
        hit = np.flatnonzero(seen.reshape(len(later), len(cols)).any(axis=1))
        if len(hit):
            final = min(final, int(later[hit[0]]))
    return final


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
    g.notes, g.state, g.idx = _NotesAt(batch.notes, note), own, which.reshape(-1, 1)
    new = _cell_scores(policy, g, st)
    return None if new is None else new[:, 0]


class _NotesAt:
    """The notes ``rows`` of ``notes`` (row k is note ``rows[k]``), as
    :meth:`NoteArrays.take` gives them, each column taken when first read:
    a policy reads a few of them."""

    def __init__(self, notes: NoteArrays, rows: np.ndarray):
        self._notes, self._rows, self._n = notes, rows, len(notes.note_id)

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._notes, name)
        if isinstance(v, np.ndarray) and v.ndim and len(v) == self._n:
            v = v[self._rows]
        self.__dict__[name] = v
        return v


def _repack_all(items: list[tuple[_Walk, np.ndarray]]) -> None:
    """Pack the queries ``rows`` of each walk's packing again, from their
    candidates, as one :func:`_pack_all`."""
    items = [(w, rows) for w, rows in items if len(rows)]
    packs = _pack_all([(w.job, w.batch, w.pk.pos[rows], w.pk.vals[rows], rows)
                       for w, rows in items])
    for (w, rows), one in zip(items, packs):
        for name in ("cand_ok", "cand_rows", "tokens", "gains", "packed", "position"):
            getattr(w.pk, name)[rows] = getattr(one, name)


def _rescored_row(job: _ArmJob, ctx: BatchContext, batch: Batch, i: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Query ``i``'s top C scored in full on the state as it is now."""
    rctx = BatchContext(batch.row(i), job.st, job.rng)
    rctx.live = ctx.live[i:i + 1]
    pos, vals, _ = _top(job.arm.policy, rctx, job.c, job.st, job.accelerators)
    return pos[0], vals[0]
