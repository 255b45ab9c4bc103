"""Engine invariants and metric definitions on hand-built streams."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import memsim
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.runs.config import resolve_policy
from memsim.engine import ACCELERATORS, Arm, SimSettings, simulate, top_candidates
from memsim.evaluation.metrics import gini
from memsim.core.rng import seed_sequence

from .helpers import random_stream, tiny_stream


def run(stream, policies, accelerators=ACCELERATORS, **settings):
    arms = [Arm(name, resolve_policy(table, name), None) for name, table in policies.items()]
    return simulate(stream, arms, SimSettings(**settings), seed_sequence(0),
                    accelerators=accelerators)


# -- top-C selection ---------------------------------------------------------


def test_top_candidates_breaks_ties_by_lower_column():
    scores = np.array([[0.5, 0.9, 0.5, 0.5, 0.1, 0.5]])
    pos, vals = top_candidates(scores, 3)
    assert pos.tolist() == [[1, 0, 2]]
    assert vals.tolist() == [[0.9, 0.5, 0.5]]


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40), st.integers(0, 4), st.integers(0, 10**6),
       st.sampled_from([0.0, 0.1, 0.9]))
def test_top_candidates_matches_a_full_stable_sort(q, n, levels, seed, odd):
    rng = np.random.default_rng(seed)
    # few distinct levels -> many ties; -inf for invalid notes; NaN (sorted
    # after every number: chosen only when too few are numbers) and +inf
    scores = rng.integers(0, levels + 1, size=(q, n)).astype(float)
    scores[rng.random((q, n)) < 0.2] = -np.inf
    scores[rng.random((q, n)) < odd] = np.nan
    scores[rng.random((q, n)) < odd / 4] = np.inf
    c = int(rng.integers(1, n + 2))
    pos, vals = top_candidates(scores, c)
    ref = np.argsort(-scores, axis=1, kind="stable")[:, :c]
    assert np.array_equal(pos, ref)
    assert np.array_equal(vals, np.take_along_axis(scores, ref, axis=1), equal_nan=True)


# -- metrics on a case computed by hand ----------------------------------------


def hand_case():
    # Three notes along one axis; the query points at note 0.
    # note 0: gain 1.0, 100 tokens, age 100 d; note 1: gain -0.5 (stale), 100
    # tokens, age 10 d; note 2: irrelevant, 100 tokens, age 1 d.
    return tiny_stream(
        created=[0.0, 90.0, 99.0], tokens=[100, 100, 100],
        note_vecs=[[1.0, 0.0], [0.9, 0.1], [0.5, 0.5]],
        queries=[(100.0, [1.0, 0.0])],
        qrels=[(0, 0, 1.0), (0, 1, -0.5)],
    )


def test_metrics_by_hand_similarity_only():
    res = run(hand_case(), {"sim": {"preset": "similarity-only"}}, budget_tokens=200)
    row = res.queries.iloc[0]
    # ranking by cosine: note 0 (1.0), note 1 (0.99), note 2 (0.71); budget fits two
    assert row["n_packed"] == 2 and row["tokens_used"] == 200
    assert row["utility"] == pytest.approx(0.5)            # 1.0 - 0.5
    assert row["utility_ratio"] == pytest.approx(0.5)      # oracle packs note 0 only: 1.0
    assert row["oracle_utility"] == pytest.approx(1.0)
    assert row["harm"] == pytest.approx(0.5)               # |-0.5| of the stale note 1
    assert row["recall_age_90_inf"] == 1.0                 # note 0 (100 d) is old and packed
    assert row["recall"] == 1.0
    assert row["precision"] == pytest.approx(0.5)          # 100 relevant of 200 tokens
    assert row["stale_rate"] == pytest.approx(0.5)
    assert row["mrr"] == 1.0
    assert row["ndcg@10"] == pytest.approx(1.0)
    assert row["recall_age_90_180"] == 1.0                 # note 0 is 100 days old
    assert np.isnan(row["recall_age_0_7"])                 # no R+ note that young
    assert row["max_relevant_age"] == pytest.approx(100.0)
    assert row["n_relevant"] == 1


def test_metrics_by_hand_fast_decay_loses_the_old_note():
    res = run(hand_case(), {"bug": {"preset": "hivemind-2025-bug"}}, budget_tokens=100)
    row = res.queries.iloc[0]
    # 0.95**100 = 0.006 buries note 0; note 2 (1 day old) wins the only slot
    assert row["n_packed"] == 1
    assert row["utility"] == 0.0 and row["recall"] == 0.0
    assert row["harm"] == 0.0                              # nothing stale packed: 0, not NaN
    assert row["recall_age_90_inf"] == 0.0
    assert row["mrr"] == pytest.approx(1 / 3)
    assert row["ndcg@10"] == pytest.approx(1 / np.log2(4))
    assert np.isnan(row["max_relevant_age"])


def test_utility_ratio_is_nan_when_no_relevant_note_fits_the_budget():
    # the only relevant note (300 tokens) never fits 200 tokens: oracle 0
    s = tiny_stream(created=[0.0, 0.0], tokens=[300, 100], note_vecs=[[1.0, 0.0], [0.9, 0.1]],
                    queries=[(1.0, [1.0, 0.0])], qrels=[(0, 0, 1.0), (0, 1, -0.5)])
    row = run(s, {"sim": {"preset": "similarity-only"}}, budget_tokens=200).queries.iloc[0]
    assert row["n_relevant"] == 1 and row["oracle_utility"] == 0.0
    assert np.isnan(row["utility_ratio"])
    assert row["utility"] == pytest.approx(-0.5) and row["harm"] == pytest.approx(0.5)


def test_notes_created_after_a_query_are_invisible_to_it():
    s = tiny_stream(created=[0.0, 5.5], tokens=[10, 10], note_vecs=[[0.0, 1.0], [1.0, 0.0]],
                    queries=[(5.2, [1.0, 0.0]), (5.8, [1.0, 0.0])],
                    qrels=[(0, 1, 1.0), (1, 1, 1.0)])
    res = run(s, {"sim": {"preset": "similarity-only"}}, budget_tokens=100)
    q = res.queries.set_index("query_id")
    # same tick, but note 1 only exists for the second query
    assert q.loc[0, "n_relevant"] == 0 and np.isnan(q.loc[0, "recall"])
    assert q.loc[0, "n_packed"] == 1
    assert q.loc[1, "recall"] == 1.0


def test_expired_notes_are_not_live():
    s = tiny_stream(created=[0.0, 0.0], tokens=[10, 10], note_vecs=[[1.0, 0.0], [0.9, 0.1]],
                    queries=[(1.0, [1.0, 0.0]), (3.0, [1.0, 0.0])], qrels=[(0, 0, 1.0), (1, 0, 1.0)],
                    extra_notes={"expires_at": [2.0, np.nan]})
    res = run(s, {"sim": {"preset": "similarity-only"}}, budget_tokens=10)
    q = res.queries.set_index("query_id")
    assert q.loc[0, "recall"] == 1.0
    assert q.loc[1, "recall"] == 0.0 and q.loc[1, "n_packed"] == 1


def test_namespaces_partition_the_store():
    s = tiny_stream(created=[0.0, 0.0], tokens=[10, 10], note_vecs=[[1.0, 0.0], [1.0, 0.0]],
                    queries=[(1.0, [1.0, 0.0])], qrels=[(0, 1, 1.0)],
                    extra_notes={"namespace": ["x", "y"]})
    s.queries["namespace"] = ["y"]
    res = run(s, {"sim": {"preset": "similarity-only"}}, budget_tokens=100)
    assert res.queries.iloc[0]["n_packed"] == 1 and res.queries.iloc[0]["recall"] == 1.0


# -- invariants on random streams ------------------------------------------------


POLICIES = {
    "bug": {"preset": "hivemind-2025-bug"},
    "sim": {"preset": "similarity-only"},
    "floor": {"decay": {"kind": "half-life-floor"}, "packer": "skip-fill"},
}


def test_budget_never_exceeded_and_metrics_in_range():
    s = random_stream(1)
    res = run(s, POLICIES, budget_tokens=700)
    q = res.queries
    assert (q["tokens_used"] <= 700).all()
    for col in ["recall", "precision", "ndcg@10", "mrr", "stale_rate", "utility_ratio"]:
        v = q[col].dropna()
        assert ((v >= -1e-12) & (v <= 1 + 1e-9)).all() if col != "utility_ratio" else \
            (v <= 1 + 1e-9).all(), col
    assert len(q) == 3 * s.n_queries


def test_per_query_feedback_differs_from_per_tick_only_through_feedback():
    s = random_stream(2)
    a = run(s, {"sim": {"preset": "similarity-only"}}, feedback_mode="per-tick")
    b = run(s, {"sim": {"preset": "similarity-only"}}, feedback_mode="per-query")
    # similarity-only ignores use, so batching cannot change anything
    cols = ["query_id", "utility", "recall", "ndcg@10", "tokens_used"]
    assert a.queries[cols].equals(b.queries[cols])


def test_promotion_counts_uses():
    s = random_stream(3)
    res = run(s, {"bug": {"preset": "hivemind-2025-bug"}}, budget_tokens=2000)
    assert res.arms.loc[0, "promoted_notes"] > 0


def test_simulation_is_deterministic():
    s = random_stream(4)
    pol = {"rand": {"preset": "similarity-only"}, "floor": POLICIES["floor"]}
    a = run(s, pol)
    b = run(s, pol)
    assert a.queries.equals(b.queries)
    assert a.store.equals(b.store)


def test_store_size_is_recorded_over_time():
    s = random_stream(5)
    res = run(s, {"sim": {"preset": "similarity-only"}})
    st_ = res.store
    assert st_["store_notes"].is_monotonic_increasing  # nothing is evicted or expires
    assert st_["t"].is_monotonic_increasing


def test_gini():
    assert gini(np.array([1, 1, 1, 1])) == pytest.approx(0.0)
    assert gini(np.array([0, 0, 0, 4])) == pytest.approx(0.75)
    assert np.isnan(gini(np.zeros(3)))


@pytest.mark.parametrize("decay", [
    {"kind": "per-day", "rate": 0.05},
    {"kind": "half-life", "half_life_days": 7.0},
    {"kind": "half-life-floor", "half_life_days": 180.0, "floor": 0.35},
    {"kind": "per-tier"},
    {"kind": "half-life", "half_life_days": 3.0, "clock": "last_access"},
])
def test_separable_recency_equals_the_per_cell_formula(decay):
    from memsim.engine import Batch, BatchContext, NoteArrays, PolicyState
    from memsim.evaluation.metrics import RelevanceIndex

    s = random_stream(6, n_notes=400, n_queries=30)
    s.notes.loc[::7, "tier"] = "scratch"
    s.notes.loc[::11, "tier"] = "longterm"
    codes = {a: i for i, a in enumerate(sorted(set(s.notes["actor"]) | set(s.queries["actor"])))}
    notes = NoteArrays.from_stream(s, codes)
    state = PolicyState(notes, len(codes))
    state.last_access[::5] = -3.0  # some notes were used before the batch
    state.last_access[3::9] = 15.0  # and some inside it (per-query feedback)
    rows = np.arange(10, 20)
    qe = s.query_embeddings
    batch = Batch(qrows=rows, t=s.queries["t"].to_numpy()[rows], actors=np.zeros(10, int),
                  notes=notes, qemb=qe[rows], qnorm2=(qe[rows] ** 2).sum(1),
                  relevance=RelevanceIndex(s, notes.created_at))
    policy = resolve_policy({"decay": decay}, "p")
    ctx = BatchContext(batch, state, np.random.default_rng(0))
    form = policy.decay.exponential_form(ctx)
    fast = ctx.exponential_recency(policy.decay.clock, *form)
    assert fast is not None
    slow = policy.decay.recency(ctx.age(policy.decay.clock), ctx)
    live = batch.valid
    np.testing.assert_allclose(fast[live], slow[live], rtol=1e-12, atol=1e-300)
    # the cells of notes used after a query count an age of 0
    if policy.decay.clock == "last_access":
        after = live & (state.last_access[batch.idx][None, :] > batch.t[:, None])
        assert after.any()
        np.testing.assert_allclose(fast[after], slow[after], rtol=1e-12)


def test_exponential_recency_takes_clamped_and_overflowing_cells_directly():
    from memsim.engine.context import separable_recency

    t = np.array([1.0, 2.0, 2.9])
    t0 = 3.0
    origin = np.array([0.0, 0.5, 2.5, 2.0])  # notes 2 and 3 are newer than some queries
    rate = np.array([0.1, 400.0, 0.1, 0.3])  # 400 * (t0 - t) would overflow a query factor
    rec = separable_recency(t, t0, origin, 0.2, rate)
    want = 0.2 + 0.8 * np.exp(-rate * np.maximum(t[:, None] - origin, 0.0))
    np.testing.assert_allclose(rec, want, rtol=1e-12, atol=0)
    assert (rec[t[:, None] < origin] == 1.0).all()  # a negative age counts as 0
    # a cell's value does not depend on the cells computed with it: a row
    # alone, a few columns, or gathered cells give the same floats
    for q in range(len(t)):
        np.testing.assert_array_equal(
            separable_recency(t[q:q + 1], t0, origin, 0.2, rate)[0], rec[q])
        for n in range(len(origin)):
            cell = separable_recency(t[q:q + 1], t0, origin[None, n:n + 1], 0.2,
                                        rate[None, n:n + 1])
            assert cell[0, 0] == rec[q, n]
    cols = np.array([0, 2])
    np.testing.assert_array_equal(
        separable_recency(t, t0, origin[cols], 0.2, rate[cols]), rec[:, cols])


# -- exact pruning ---------------------------------------------------------------


def test_pruning_is_on_by_default_and_keeps_rankings():
    stream = random_stream(4, n_notes=1500, n_queries=30)
    pol = {"h": {"preset": "hivemind"}, "f": {"preset": "feather"}}
    on = run(stream, pol, candidates=8, save_rankings=True)
    off = run(stream, pol, candidates=8, save_rankings=True, accelerators=())
    assert set(ACCELERATORS) == {"prefilter", "prune", "filter", "stack", "walk",
                                 "minmax"}
    assert on.accelerated[0]["prune"] > 0 and all(on.accelerated)
    assert not any(off.accelerated)
    assert on.rankings.equals(off.rankings)
    assert on.queries.equals(off.queries)


def test_components_declare_bounds_conservatively():
    from memsim.policies import build_component

    assert build_component("decay", "per-tier", "d").upper_bound() == 1.0
    assert build_component("decay", "ai-memory", "d").upper_bound() is None
    assert build_component("stickiness", "none", "s").access_term_bound(None) == 0.0
    assert build_component("stickiness", "access-term", "s").access_term_bound(None) is None
    weighted = build_component("ranker", "weighted-sum", "r")
    assert weighted.score_bound(np.zeros(1), 0.0, 1.0, None) is None
    product = build_component("ranker", "product", "r")
    b = product.score_bound(np.array([0.5, -0.5]), 0.35, 1.0, None)
    assert b[0] >= 0.5 and b[1] >= -0.5 * 0.35


def test_similarity_needed_is_a_lower_bound_of_the_similarity_of_any_note_that_reaches_a_score():
    """``Product.similarity_needed``: a note whose score (as computed) is at
    least ``score`` never has a similarity below the value, whatever its
    recency in ``[lo, hi]``; and the value is tight (a note at it with the
    highest recency reaches the score, up to the slack)."""
    from memsim.policies import build_component

    product = build_component("ranker", "product", "r")
    rng = np.random.default_rng(4)
    rel = rng.uniform(-1, 1, 200_000).astype(np.float32).astype(np.float64)
    lo, hi = 0.2, rng.uniform(0.2, 1.0, 200_000)
    rec = rng.uniform(lo, hi)
    score = product.combine(rel, rec, None)
    target = rng.uniform(-0.5, 0.9, 200_000)
    need = product.similarity_needed(target, lo, hi, None)
    reach = score >= target
    assert reach.any() and (~reach).any()
    assert (rel[reach] >= need[reach]).all()
    at = (target > 0) & (need <= 1)
    assert np.allclose(need[at] * hi[at], target[at], rtol=1e-4)
    assert product.similarity_needed(np.array([0.3]), -0.1, 1.0, None) is None
    assert build_component("ranker", "weighted-sum", "r").similarity_needed(
        np.array([0.3]), 0.0, 1.0, None) is None


def test_abstention_is_measured_on_unanswerable_queries_only():
    from memsim.evaluation.metrics import query_metrics  # noqa: F401  (the column's definition)
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "abst", "replicates": 1},
        "workload": {"horizon_days": 10.0, "backfill_days": 10.0},
        "policies": {"a": {"preset": "similarity-only"}}})
    q = memsim.run_experiment(exp, out=None, report=False).queries
    none = q["n_relevant"] == 0
    assert q.loc[~none, "abstained"].isna().all()
    assert set(q.loc[none, "abstained"]) <= {0.0, 1.0}
    assert (q.loc[none, "abstained"] == (q.loc[none, "n_packed"] == 0)).all()



def test_per_query_budgets_are_reported_as_they_were():
    """A stream whose queries carry their own budget_tokens: each query's real
    budget is in queries.parquet, and the budget label of an arm without a
    budget of its own is 0 (per query), never the experiment's default."""
    base = random_stream(seed=4)
    queries = base.queries.copy()
    queries["budget_tokens"] = np.where(np.arange(len(queries)) % 2 == 0, 300, 2000)
    stream = dataclasses.replace(base, queries=queries)
    policy = resolve_policy({"preset": "similarity-only"}, "p")
    res = simulate(stream, [Arm("own", policy), Arm("fixed", policy, 800)],
                   SimSettings(budget_tokens=1500, save_rankings=True), seed_sequence(1))
    q = res.queries.set_index(["policy", "query_id"])
    own, fixed = q.loc["own"], q.loc["fixed"]
    assert (own["budget_tokens"].to_numpy() == queries["budget_tokens"].to_numpy()).all()
    assert (own["tokens_used"] <= own["budget_tokens"]).all()
    assert set(own["budget"]) == {0} and set(fixed["budget"]) == {800}
    assert (fixed["budget_tokens"] == 800).all()
    assert set(res.arms["budget"]) == {0, 800} and set(res.store["budget"]) == {0, 800}


@pytest.mark.parametrize("values", [
    ["a0", "a1", "a0", "zz", "a2"],
    ["x", None, "a1", None],
    [1.0, np.nan, 2.5, 1.0],
    [3, 1, 3, 7],
    [],
], ids=["text", "none", "float-nan", "int", "empty"])
@pytest.mark.parametrize("dtype", [None, "string[pyarrow]", "category"])
def test_codes_read_each_value_as_its_text(values, dtype):
    """A column's codes (actors, namespaces, tiers) are those of each value
    as text (``str``, ``"nan"`` when missing), the default for a text not
    in the table, whatever the column's dtype."""
    import pandas as pd

    from memsim.engine.state import distinct_texts, text_codes

    col = pd.Series(values, dtype=object)
    if dtype == "string[pyarrow]":
        if any(isinstance(v, float) for v in values):
            pytest.skip("string[pyarrow] holds text only: float values cannot be stored in it")
        col = col.astype(dtype)
    elif dtype is not None:
        col = col.astype(dtype)
    table = {t: i for i, t in enumerate(sorted(distinct_texts(col) - {"zz", "7"}))}
    texts = [str(v) if pd.notna(v) else "nan" for v in col]
    want = np.array([table.get(t, -5) for t in texts], dtype=np.int64)
    got = text_codes(col, table, -5)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    assert distinct_texts(col) == set(texts)


def _notes_and_state(seed: int):
    from memsim.engine import NoteArrays, PolicyState

    s = random_stream(seed, n_notes=200)
    s.notes["updated_at"] = s.notes["created_at"] + np.random.default_rng(seed).uniform(0, 3, 200)
    codes = {a: i for i, a in enumerate(sorted(set(s.notes["actor"]) | set(s.queries["actor"])))}
    notes = NoteArrays.from_stream(s, codes)
    return notes, PolicyState(notes, len(codes)), len(codes)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 60))
def test_touch_records_each_notes_latest_use_and_promotes(seed, n_uses):
    """Uses (repeated notes, times out of order) give every used note its
    count, its latest use (never earlier than one recorded before), its
    actors, and the longterm tier from the fifth use; other notes keep
    theirs."""
    from memsim.policies import Feedback
    from memsim.policies.context import TIER_CODES

    notes, state, n_actors = _notes_and_state(seed % 50)
    rng = np.random.default_rng(seed)
    n = len(notes.note_id)
    state.last_access[:] = np.where(rng.random(n) < 0.3, rng.uniform(0, 20, n), np.nan)
    state.recalls[:] = rng.integers(0, 6, n)
    before = (state.last_access.copy(), state.recalls.copy(), state.tier.copy())
    rows = rng.integers(0, 12, n_uses)  # few notes: repeats
    actors = rng.integers(0, n_actors, n_uses)
    t = rng.uniform(0, 40, n_uses)
    state.touch(rows, actors, t, Feedback(promote_after=5))
    for i in range(n):
        mine = rows == i
        last, recalls, tier = (x[i] for x in before)
        assert state.recalls[i] == recalls + mine.sum()
        want = np.fmax(last, t[mine].max()) if mine.any() else last
        np.testing.assert_equal(state.last_access[i], want)
        assert state.distinct_actors(np.array([i]))[0] == len(set(actors[mine].tolist()))
        promoted = mine.any() and recalls + mine.sum() >= 5
        assert state.tier[i] == (TIER_CODES["longterm"] if promoted else tier)


def test_the_sweep_view_reads_what_the_full_sweep_context_holds():
    """A retention sweep's lazily gathered view gives every column of the
    context it replaces, the same values, and anything else from it."""
    from memsim.engine.context import SweepView, sweep_context

    notes, state, _ = _notes_and_state(7)
    rng = np.random.default_rng(7)
    n = len(notes.note_id)
    state.last_access[:] = np.where(rng.random(n) < 0.5, rng.uniform(0, 20, n), np.nan)
    state.recalls[:] = rng.integers(0, 9, n)
    state.tier[::3] = 2
    state.actor_bits[::4, 0] = 5
    idx = np.flatnonzero(rng.random(n) < 0.6)
    view = SweepView(notes, state, idx, 25.0, rng)
    full = sweep_context(notes, state, idx, 25.0, rng)
    for name in ("t", "idx", "tokens", "importance", "salience", "pinned", "memory_type",
                 "recalls", "tier", "distinct_actors", "age_created", "age_updated",
                 "since_access", "age_last_access", "created_at", "last_access", "gains",
                 "note_class", "note_actor", "query_actor", "live"):
        got, want = getattr(view, name), getattr(full, name)
        if want is None:
            assert got is None, name
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    for clock in ("created", "updated", "last_access"):
        np.testing.assert_array_equal(view.age(clock), full.age(clock))
    assert view.rng is rng


def test_a_replay_without_queries_gives_labels_of_the_usual_types():
    """No queries: the queries frame is empty, its policy and budget labels
    of the types a replay with queries gives them; no rankings."""
    s = random_stream(6)
    empty = dataclasses.replace(s, queries=s.queries.iloc[:0],
                                query_embeddings=s.query_embeddings[:0], qrels=s.qrels.iloc[:0])
    pol = {"sim": {"preset": "similarity-only"}, "floor": POLICIES["floor"]}
    got, full = run(empty, pol, save_rankings=True), run(s, pol, save_rankings=True)
    assert len(got.queries) == 0 and got.rankings is None
    for col in ("policy", "budget", "query_id"):
        assert got.queries[col].dtype == full.queries[col].dtype, col


def test_unknown_accelerators_are_refused():
    from memsim.core.errors import ParameterError

    s = random_stream(1, n_notes=50, n_queries=5)
    with pytest.raises(ParameterError, match="'accelerators' parameter of simulate"):
        simulate(s, [], SimSettings(), seed_sequence(0), accelerators=("warp",))
    with pytest.raises(ParameterError, match="'accelerators' parameter of simulate"):
        simulate(s, [], SimSettings(), seed_sequence(0), accelerators=("prune", "prune"))
    with pytest.raises(ParameterError, match="'walk_window' parameter of simulate"):
        simulate(s, [], SimSettings(), seed_sequence(0), walk_window=0)


@pytest.mark.parametrize("kind", ["prefix", "window", "scattered"])
def test_a_batch_context_reads_note_columns_at_its_rows(kind):
    """A batch's context reads every note column and the arm's per-note
    state at the batch's rows: read-only views when the rows are
    consecutive (a prefix of the store, or a window of it once the first
    notes expired), gathers when they are not; the same values either way."""
    from .test_ann_index import contexts, shuffled_stream, window_stream

    stream = {"prefix": lambda: random_stream(0, n_notes=600, n_queries=60, dim=8),
              "window": window_stream, "scattered": shuffled_stream}[kind]()
    views = 0
    for ctx in contexts(stream):
        idx = np.asarray(ctx.idx)
        ctx.state.last_access[idx[::3]] = 1.0  # some notes used
        for name, column in [("importance", ctx.notes.importance),
                             ("tokens", ctx.notes.tokens),
                             ("recalls", ctx.state.recalls), ("tier", ctx.state.tier)]:
            got = getattr(ctx, name)
            np.testing.assert_array_equal(got, column[idx], err_msg=name)
            view = np.shares_memory(got, column)
            assert view == (not got.flags.writeable), name
            views += view
        np.testing.assert_array_equal(ctx.age_created,
                                      ctx.t[:, None] - ctx.notes.created_at[idx])
        np.testing.assert_array_equal(ctx.since_access,
                                      ctx.t[:, None] - ctx.state.last_access[idx])
    assert (views > 0) == (kind != "scattered")
