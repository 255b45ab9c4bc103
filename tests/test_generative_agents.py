"""Generative Agents as released (``generative-agents-code``) against hand-worked
golden vectors.

Source of the logic: ``joonspk-research/generative_agents``,
``reverie/backend_server/persona/cognitive_modules/retrieve.py``
(``new_retrieve``: nodes sorted by ``last_accessed`` ascending,
``recency_vals = [0.99 ** i for i in range(1, len(nodes) + 1)]``, each term
min-max normalised by ``normalize_dict_floats``, ``gw = [0.5, 3, 2]`` for
recency, relevance, importance; top ``n_count = 30`` returned). The numbers
below were worked out by hand from that logic, not from memsim.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.core import jit
from memsim.engine import Arm, BatchContext, SimSettings, simulate
from memsim.policies import ArrayContext, PRESETS, resolve_policy
from memsim.policies.context import origin_order
from memsim.policies.rank import GenerativeAgentsCode, lexicographic_rank
from memsim.checks.testing import check_component
from memsim.data.workload import SyntheticWorkload

from .helpers import numba_kernels

# Four memories A, B, C, D at query time t = 10 days.
#   created       0    1    2    5
#   last access   -    8    -    -      (never accessed: counts from creation)
#   cosine        .2   .8   .5   .4
#   importance    3    1    9    5
# Ascending last access: A (0), C (2), D (5), B (8) -> ranks 1, 2, 3, 4:
#   recency 0.99, 0.9801, 0.970299, 0.96059601, normalised 1, 0.66331, 0.32999, 0
# relevance normalised A 0, B 1, C 0.5, D 1/3; importance A .25, B 0, C 1, D .5
#   A: 0.5 * 1       + 3 * 0   + 2 * .25 = 1.0
#   B: 0.5 * 0       + 3 * 1   + 2 * 0   = 3.0
#   C: 0.5 * 0.66331 + 3 * 0.5 + 2 * 1   = 3.8316555
#   D: 0.5 * 0.32999 + 3 * 1/3 + 2 * 0.5 = 2.1649944
GOLDEN = np.array([1.0, 3.0, 3.831655499814821, 2.1649944446314953])


def _ctx(**kw):
    base = dict(t=10.0, created_at=[0.0, 1.0, 2.0, 5.0],
                last_access=[np.nan, 8.0, np.nan, np.nan], importance=[3.0, 1.0, 9.0, 5.0])
    base.update(kw)
    return ArrayContext(**base)


def test_golden_scores_and_order():
    ranker = GenerativeAgentsCode()
    rel = np.array([[0.2, 0.8, 0.5, 0.4]])
    score = ranker.combine(rel, None, _ctx())
    np.testing.assert_allclose(score[0], GOLDEN, rtol=0, atol=1e-12)
    assert list(np.argsort(-score[0], kind="stable")) == [2, 1, 3, 0]  # C, B, D, A


def test_rank_recency_as_coded_and_reversed():
    ranker = GenerativeAgentsCode()
    rec = ranker.rank_recency(_ctx())[0]
    np.testing.assert_allclose(rec, [0.99, 0.99 ** 4, 0.99 ** 2, 0.99 ** 3])
    rev = GenerativeAgentsCode(rank_from="most-recent").rank_recency(_ctx())[0]
    np.testing.assert_allclose(rev, [0.99 ** 4, 0.99, 0.99 ** 3, 0.99 ** 2])


def test_ties_keep_the_codes_list_order():
    # equal last access (all retrieved together at day 8): the code's list is
    # seq_event, newest first, and the stable sort keeps it: the note created
    # later gets the lower rank (the larger recency)
    ctx = ArrayContext(t=10.0, created_at=[0.0, 3.0, 6.0], last_access=[8.0, 8.0, 8.0])
    rec = GenerativeAgentsCode().rank_recency(ctx)[0]
    np.testing.assert_allclose(rec, [0.99 ** 3, 0.99 ** 2, 0.99])


def test_not_live_notes_are_not_ranked():
    ctx = _ctx(live=[[True, True, False, True]])
    rec = GenerativeAgentsCode().rank_recency(ctx)[0]
    np.testing.assert_allclose(rec, [0.99, 0.99 ** 3, 0.0, 0.99 ** 2])


def test_all_equal_normalises_to_half():
    ctx = ArrayContext(t=1.0, created_at=[0.0], importance=[2.0])
    score = GenerativeAgentsCode().combine(np.array([[0.3]]), None, ctx)
    assert score[0, 0] == pytest.approx(0.5 * 0.5 + 3 * 0.5 + 2 * 0.5)


def test_contract_and_preset():
    check_component(GenerativeAgentsCode)
    check_component(GenerativeAgentsCode(rank_from="most-recent"))
    pol = resolve_policy({"preset": "generative-agents-code"}, "p")
    assert pol.candidates == 30 and pol.feedback.touch == "returned" and pol.feedback.k == 30
    assert (pol.ranker.w_recency, pol.ranker.w_relevance, pol.ranker.w_importance) == (0.5, 3, 2)
    assert "per-query" in PRESETS["generative-agents-code"].doc


def test_runs_in_the_engine_and_differs_from_the_paper():
    s = SyntheticWorkload(horizon_days=8, backfill_days=2, notes_per_day=15.0,
                          queries_per_day=4.0).generate(np.random.SeedSequence(515))
    arms = [Arm(n, resolve_policy({"preset": n}, n))
            for n in ("generative-agents", "generative-agents-code")]
    res = simulate(s, arms, SimSettings(feedback_mode="per-query", save_rankings=True),
                   np.random.SeedSequence(0))
    r = res.rankings
    assert set(r["policy"]) == {"generative-agents", "generative-agents-code"}
    assert (r[r.policy == "generative-agents-code"].groupby("query_id")["rank"].max() <= 30).all()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_lexicographic_rank_is_lexsorts(data):
    """The ranks, compiled and not, are those of ``np.lexsort`` over the
    same keys: ties (few distinct keys), NaN (sorted last, all equal), -0.0
    and 0.0 (equal), infinities, several rows, a tie-break of its own per
    row or one for every row."""
    q = data.draw(st.integers(1, 3))
    n = data.draw(st.integers(0, 40))
    values = st.one_of(st.sampled_from([0.0, -0.0, 1.5, np.nan, np.inf, -np.inf]),
                       st.integers(-60, 60).map(float))  # all distinct, at times
    key = np.array(data.draw(st.lists(values, min_size=q * n, max_size=q * n))).reshape(q, n)
    first = np.array(data.draw(st.lists(st.booleans(), min_size=q * n,
                                        max_size=q * n))).reshape(q, n)
    second = np.array(data.draw(st.lists(st.integers(0, 2), min_size=q * n,
                                         max_size=q * n))).reshape(q, n)
    idx = np.broadcast_to(np.array(data.draw(st.permutations(range(n)))), (q, n))
    want = np.empty((q, n), dtype=np.int64)
    np.put_along_axis(want, np.lexsort((-idx, second, key, first), axis=1),
                      np.broadcast_to(np.arange(1, n + 1), (q, n)), axis=1)
    then = np.lexsort((-idx, second), axis=1)
    # a tie-break of one row, shared by every row: -idx alone
    shared = np.empty((q, n), dtype=np.int64)
    np.put_along_axis(shared, np.lexsort((-idx, key, first), axis=1),
                      np.broadcast_to(np.arange(1, n + 1), (q, n)), axis=1)
    for compiled in (False, True) if jit.available() else (False,):
        with numba_kernels(compiled):  # the counting pass (numba) and two sorts (numpy)
            np.testing.assert_array_equal(lexicographic_rank(first, key, then), want)
            np.testing.assert_array_equal(
                lexicographic_rank(first, key, np.argsort(-idx[0], kind="stable")), shared)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_an_order_kept_between_calls_sorts_the_new_times(data):
    """``origin_order`` given the last times and their order: a permutation
    that sorts the new times, whether few changed (placed again) or many
    (sorted afresh), with ties, equal values moved, and any length; None
    with a NaN."""
    n = data.draw(st.integers(0, 300))
    times = st.one_of(st.integers(0, 5).map(float), st.floats(-1e3, 1e3))
    before = np.array(data.draw(st.lists(times, min_size=n, max_size=n)), dtype=np.float64)
    order = origin_order(before)
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    assert np.all(np.diff(before[order]) >= 0)
    now = before.copy()
    at = data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n // 8 if data.draw(
        st.booleans()) else n)) if n else []
    now[at] = data.draw(st.lists(times, min_size=len(at), max_size=len(at)))
    got = origin_order(now, (before, order))
    np.testing.assert_array_equal(np.sort(got), np.arange(n))
    assert np.all(np.diff(now[got]) >= 0)
    if n:
        now[data.draw(st.integers(0, n - 1))] = np.nan
        assert origin_order(now, (before, order)) is None


class _Unordered(ArrayContext):
    """An ArrayContext that offers no order of its columns."""

    def access_order(self):
        return None


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_recency_ranks_read_the_access_order_as_a_sort_would(data):
    """The ranks from the context's order of last access are those of
    sorting each row's age (compiled and not): times far from 0 whose ages round to ties
    though the times differ, equal times, never-used notes, several query
    times, live masks, both rank directions."""
    n = data.draw(st.integers(1, 60))
    base = data.draw(st.sampled_from([0.0, 3e6, 1e9]))
    step = np.spacing(base) if base else 0.25  # ages tie after rounding at large t
    created = base + step * np.array(data.draw(st.lists(st.integers(0, 8), min_size=n,
                                                        max_size=n)), dtype=np.float64)
    used = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    last = np.where(used, created + step * np.array(data.draw(st.lists(
        st.integers(0, 8), min_size=n, max_size=n))), np.nan)
    q = data.draw(st.integers(1, 3))
    t = base + 2.5 + np.array(data.draw(st.lists(st.floats(0.0, 9.0), min_size=q, max_size=q)))
    live = np.array(data.draw(st.lists(st.booleans(), min_size=q * n,
                                       max_size=q * n))).reshape(q, n)
    kw = dict(t=t, created_at=created, last_access=last, live=live)
    assert ArrayContext(**kw).access_order() is not None
    for rank_from in ("least-recent", "most-recent"):
        ranker = GenerativeAgentsCode(rank_from=rank_from)
        for compiled in (False, True) if jit.available() else (False,):
            with numba_kernels(compiled):
                np.testing.assert_array_equal(ranker.rank_recency(ArrayContext(**kw)),
                                              ranker.rank_recency(_Unordered(**kw)))


def test_the_engine_keeps_each_arms_access_order_with_the_same_answers(monkeypatch):
    """Per query, each arm's state keeps the order of last access and places
    again only the notes used since: the frames of sorting every query's
    ages (two arms, each with its own uses; both rank directions)."""
    s = SyntheticWorkload(horizon_days=6, backfill_days=4, notes_per_day=60.0,
                          queries_per_day=30.0).generate(np.random.SeedSequence(77))
    arms = [Arm(r, resolve_policy({"preset": "generative-agents-code",
                                   "ranker": {"rank_from": r}}, r))
            for r in ("least-recent", "most-recent")]
    settings_ = SimSettings(feedback_mode="per-query", save_rankings=True)
    kept = simulate(s, arms, settings_, np.random.SeedSequence(0))
    monkeypatch.setattr(BatchContext, "access_order", lambda self: None)
    sorted_ = simulate(s, arms, settings_, np.random.SeedSequence(0))
    for name in ("queries", "rankings", "store"):
        pd.testing.assert_frame_equal(getattr(kept, name), getattr(sorted_, name))
    assert kept.rankings["rank"].max() == 30
