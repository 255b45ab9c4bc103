"""Invalidation, stale uses, the oracle's hidden notes and the superseded-use curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, SimSettings, simulate
from memsim.core.errors import ConfigError, StreamError
from memsim.data.importers.trace import import_trace
from memsim.evaluation.metrics import (HIDDEN_COLUMNS, HIDDEN_REASONS, RelevanceIndex,
                                       hidden_counts, oracle_packing, oracle_values,
                                       stale_reinforced, superseded_use_curve,
                                       supersession_times)
from memsim.policies import ArrayContext, build_component
from memsim.policies.retention import Invalidation
from memsim.core.rng import child, seed_sequence

from .helpers import random_stream, tiny_stream

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip"


def run(stream, policies, **settings):
    arms = [Arm(name, resolve_policy(table, name), None) for name, table in policies.items()]
    return simulate(stream, arms, SimSettings(**settings), seed_sequence(0))


# -- the invalidation component -------------------------------------------------


def test_perfect_detector_invalidates_exactly_the_superseded_notes():
    ctx = ArrayContext(t=10.0, created_at=[0, 1, 2, 3, 4],
                       superseded_at=[5, np.nan, 20, 10, 9.5])
    inv = Invalidation(recall=1.0, false_positive_rate=0.0)
    assert inv.evict(ctx).tolist() == [True, False, False, True, True]
    assert inv.invalid_since(ctx).tolist() == [5, math.inf, 20, 10, 9.5]
    assert not Invalidation(recall=0.0).evict(ctx).any()


def test_detector_rates_match_their_parameters_and_draws_are_fixed_per_note():
    n = 20000
    created = np.zeros(n)
    sup = np.where(np.arange(n) % 2 == 0, 1.0, np.nan)  # half the notes superseded at day 1
    ctx = ArrayContext(t=1e6, created_at=created, superseded_at=sup, rng=child(seed_sequence(3),
                                                                               "arm"))
    inv = Invalidation(recall=0.7, false_positive_rate=0.1, false_positive_delay_days=30.0)
    out = inv.evict(ctx)
    hit = out[::2].mean()
    # superseded notes: caught with p 0.7, or a false positive before day 1
    # (p 0.1 * (1 - exp(-1/30))) among the missed ones
    fp_early = 0.1 * (1 - math.exp(-1 / 30))
    assert hit == pytest.approx(0.7 + 0.3 * fp_early, abs=0.015)
    assert out[1::2].mean() == pytest.approx(0.1, abs=0.01)  # never superseded: FPR
    # false positives come at created + Exponential(30 d): about 1 - e^-1 by day 30
    at = inv.invalid_since(ctx)[1::2]
    fp = np.isfinite(at)
    assert (at[fp] <= 30).mean() == pytest.approx(1 - math.exp(-1), abs=0.04)
    # the same note gets the same decision at every sweep, whatever else is in it
    sub = ArrayContext(t=1e6, created_at=created[:50], superseded_at=sup[:50],
                       idx=np.arange(50), rng=child(seed_sequence(3), "arm"))
    assert np.array_equal(inv.evict(sub), out[:50])
    # another arm's stream gives other draws; the arm's own generator is not consumed
    other = ArrayContext(t=1e6, created_at=created, superseded_at=sup,
                         rng=child(seed_sequence(4), "arm"))
    assert not np.array_equal(inv.evict(other), out)
    before = ctx.rng.bit_generator.state
    inv.evict(ctx)
    assert ctx.rng.bit_generator.state == before


@pytest.mark.parametrize("key,value", [("recall", 1.5), ("false_positive_rate", -0.1),
                                       ("false_positive_delay_days", 0.0),
                                       ("recall", float("nan"))])
def test_invalid_detector_parameters_are_refused(key, value):
    with pytest.raises(ConfigError, match=key):
        build_component("retention", {"kind": "invalidation", key: value}, "policies.p.retention")


# -- hand-computed metric cases -------------------------------------------------


def test_stale_reinforced_counts_used_notes_with_negative_gain():
    used = np.array([[True, True, False], [False, False, False], [True, True, True]])
    gains = np.array([[-0.5, 1.0, -0.5], [-0.5, 0.0, 0.0], [-1.0, -0.5, 0.5]])
    assert stale_reinforced(used, gains).tolist() == [1, 0, 2]


def test_superseded_use_curve_by_hand():
    sup = np.array([0.0, 10.0, np.nan, 95.0])
    created = np.array([-5.0, 0.0, 0.0, 90.0])
    last_use = np.array([20.0, 5.0, 50.0, np.nan])
    out = superseded_use_curve(sup, created, last_use, t_end=100.0)
    # superseded by day 100: notes 0, 1 and 3; their last use came 20, -5 and
    # never (NaN) days after; D = d counts the notes superseded by 100 - d
    assert out["superseded_notes"] == 3
    assert out["superseded_used_0d"] == pytest.approx(1 / 3)
    assert out["superseded_used_1d"] == pytest.approx(1 / 3)   # note 3: 5 days to see
    assert out["superseded_used_7d"] == pytest.approx(1 / 2)   # note 3 not yet 7 days old
    assert out["superseded_used_30d"] == 0.0                     # 20 < 30
    assert out["superseded_used_90d"] == 0.0
    assert math.isnan(out["superseded_used_180d"])              # none superseded by -80


def test_supersession_times_from_a_column_or_the_synthetic_truth():
    synth = pd.DataFrame({"created_at": [0.0, 5.0, 1.0], "note_class": ["superseding"] * 2
                          + ["project"], "valid_until": [5.0, np.inf, 7.0]})
    # version 0 is superseded when version 1 is written; project expiry is not supersession
    assert np.array_equal(supersession_times(synth), [5.0, np.nan, np.nan], equal_nan=True)
    col = synth.assign(superseded_at=[np.nan, 9.0, 2.0])
    assert np.array_equal(supersession_times(col), [np.nan, 9.0, 2.0], equal_nan=True)
    plain = pd.DataFrame({"created_at": [0.0, 1.0]})
    assert np.isnan(supersession_times(plain)).all()
    with pytest.raises(StreamError, match="superseded_at"):
        supersession_times(plain.assign(superseded_at=["soon", "never"]))
    with pytest.raises(StreamError, match="row 1 is before"):
        supersession_times(plain.assign(superseded_at=[3.0, 0.5]))


def test_oracle_packing_returns_the_knapsack_set():
    # one query; R+ = notes 0, 1, 2 with tokens 100, 100, 150 and gains 1, 0.5,
    # 1.2; budget 250: the best subset is {0, 2} (2.2; {0, 1} gives 1.5, {1, 2} 1.7)
    s = tiny_stream(created=[0, 0, 0, 0], tokens=[100, 100, 150, 10],
                    note_vecs=[[1, 0]] * 4, queries=[(1.0, [1, 0])],
                    qrels=[(0, 0, 1.0), (0, 1, 0.5), (0, 2, 1.2), (0, 3, -0.5)])
    rel = RelevanceIndex(s, s.notes["created_at"].to_numpy())
    tokens = s.notes["tokens"].to_numpy()
    vals, keys = oracle_packing(rel, np.array([0]), np.array([1.0]), np.array([250]), tokens)
    assert vals.tolist() == pytest.approx([2.2])
    assert keys.tolist() == [0, 2]
    assert oracle_values(rel, np.array([0]), np.array([1.0]), np.array([250]),
                         tokens).tolist() == vals.tolist()
    # when R+ fits, O is the whole of R+
    _, keys = oracle_packing(rel, np.array([0]), np.array([1.0]), np.array([400]), tokens)
    assert keys.tolist() == [0, 1, 2]


def hidden_case(superseded_at=None):
    """A query at day 100 pointing at [1, 0]. Relevant: note 0 (cosine 1.0,
    100 days old) and note 1 (cosine 0.8, 2 days old); note 2 (cosine 0.9, 1 day
    old) is irrelevant; note 3 (gain -0.5) is stale and far older. 100 tokens
    each; the oracle packs notes 0 and 1 within 300 tokens."""
    extra = {} if superseded_at is None else {"superseded_at": superseded_at}
    return tiny_stream(created=[0.0, 98.0, 99.0, 1.0], tokens=[100, 100, 100, 100],
                       note_vecs=[[1.0, 0.0], [0.8, 0.6], [0.9, math.sqrt(1 - 0.81)],
                                  [0.95, math.sqrt(1 - 0.9025)]],
                       queries=[(100.0, [1.0, 0.0])],
                       qrels=[(0, 0, 1.0), (0, 1, 1.0), (0, 3, -0.5)], extra_notes=extra)


FAST = {"ranker": "product", "decay": {"kind": "half-life-floor", "half_life_days": 10,
                                       "floor": 0.0}}


def hidden_row(stream, table, budget=300):
    res = run(stream, {"p": table}, budget_tokens=budget, save_rankings="hidden")
    return res.queries.iloc[0], res.rankings


def test_hidden_by_age_and_by_cut():
    # scores: note 0 1.0 * 0.5**10 = 0.001, note 1 0.8 * 0.5**0.2 = 0.70, note 2
    # 0.9 * 0.5**0.1 = 0.84, note 3 0.95 * 0.5**9.9: top 1 = note 2, packed.
    # Note 0 (cosine 1.0 > 0.9) was outranked by the decay: age. Note 1 (0.8 <
    # 0.9) is less similar than every candidate: cut.
    row, rk = hidden_row(hidden_case(), {**FAST, "candidates": 1})
    assert row["oracle_notes"] == 2
    assert {c: row[c] for c in HIDDEN_COLUMNS} == {
        "hidden_invalid": 0, "hidden_evicted": 0, "hidden_budget": 0, "hidden_age": 1,
        "hidden_cut": 1}
    extra = rk[rk["rank"] == -1].set_index("note_id")["hidden"].to_dict()
    assert extra == {0: "age", 1: "cut"}
    top = rk[rk["rank"] == 1].iloc[0]
    assert top["note_id"] == 2 and not top["oracle"] and top["hidden"] == ""


def test_rankings_rows_for_hidden_notes_only_on_request():
    res = run(hidden_case(), {"p": {**FAST, "candidates": 1}}, budget_tokens=300,
              save_rankings=True)
    # the top C alone (one row), with the oracle / hidden columns
    assert res.rankings["rank"].tolist() == [1]
    assert res.rankings[["oracle", "hidden"]].values.tolist() == [[False, ""]]


def test_hidden_by_budget_and_rankings_flag_the_oracle_notes():
    # top 2 = notes 2 and 1; 100 tokens: skip-fill packs note 2 only
    row, rk = hidden_row(hidden_case(), {**FAST, "candidates": 2}, budget=100)
    # within 100 tokens the oracle packs one note of gain 1: note 0 (the
    # knapsack's choice between two equal notes)
    assert row["oracle_notes"] == 1
    assert row["hidden_age"] == 1 and row["hidden_budget"] == 0
    row, rk = hidden_row(hidden_case(), {**FAST, "candidates": 2}, budget=200)
    # the oracle packs 0 and 1 (200 tokens); the policy packs 2 and 1: note 0 by age
    assert (row["oracle_notes"], row["hidden_age"], row["hidden_budget"]) == (2, 1, 0)
    top = rk[rk["rank"] > 0].set_index("note_id")
    assert bool(top.loc[1, "oracle"]) and bool(top.loc[1, "packed"])
    row, rk = hidden_row(hidden_case(), {**FAST, "candidates": 2, "packer": "top-k-cutoff"},
                         budget=150)
    # 150 tokens: the oracle packs one note; the cutoff packer packs note 2 and
    # stops; whichever note the oracle took, note 1 is a candidate and note 0 is not
    assert row["oracle_notes"] == 1
    assert row["hidden_budget"] + row["hidden_age"] == 1


def test_hidden_by_eviction_and_by_invalidation():
    # capacity 3 by creation time evicts note 0 (the oldest) before the query
    row, _ = hidden_row(hidden_case(), {"ranker": "similarity", "retention": {
        "kind": "capacity", "max_notes": 3, "by": "created"}})
    assert (row["hidden_evicted"], row["hidden_invalid"]) == (1, 0)
    # a perfect detector invalidates note 0 (superseded at day 50): by invalidation
    row, rk = hidden_row(hidden_case([50.0, np.nan, np.nan, np.nan]),
                         {"ranker": "similarity", "retention": {"kind": "invalidation"}})
    assert (row["hidden_evicted"], row["hidden_invalid"]) == (0, 1)
    assert rk[rk["rank"] == -1]["hidden"].tolist() == ["invalid"]


def test_stale_reinforced_follows_the_feedback_touch():
    # similarity only, 400 tokens: every note packed, note 3 (gain -0.5) among them
    row, _ = hidden_row(hidden_case(), {"ranker": "similarity"}, budget=400)
    assert row["stale_reinforced"] == 1 and row["harm"] == pytest.approx(0.5)
    row, _ = hidden_row(hidden_case(), {"ranker": "similarity", "feedback": {"touch": "none"}},
                        budget=400)
    assert row["stale_reinforced"] == 0 and row["harm"] == pytest.approx(0.5)
    # returned top 1 = note 0 (cosine 1.0), not stale; top 2 adds note 3 (0.95)
    row, _ = hidden_row(hidden_case(), {"ranker": "similarity", "feedback": {
        "touch": "returned", "k": 2}}, budget=100)
    assert row["stale_reinforced"] == 1 and row["harm"] == 0.0


# -- the engine: audit state, store and arms columns -----------------------------


def test_invalidated_notes_are_kept_for_audit_in_store_and_arms():
    s = hidden_case([50.0, np.nan, np.nan, 60.0])
    res = run(s, {"inv": {"ranker": "similarity", "retention": {"kind": "invalidation"}},
                  "keep": {"ranker": "similarity"}}, budget_tokens=400)
    st = res.store.set_index("policy")
    assert st.loc["inv", "store_invalid"] == 2 and st.loc["inv", "store_notes"] == 2
    assert st.loc["keep", "store_invalid"] == 0 and st.loc["keep", "store_notes"] == 4
    # superseded notes still retrievable: none for the detector, both for the other
    assert (st.loc["inv", "store_stale"], st.loc["keep", "store_stale"]) == (0, 2)
    arms = res.arms.set_index("policy")
    assert arms.loc["inv", "invalidated_notes"] == 2
    assert arms.loc["inv", "invalidated_superseded"] == 2
    assert arms.loc["inv", "superseded_notes"] == 2
    q = res.queries.set_index("policy")
    assert q.loc["inv", "utility"] < q.loc["keep", "utility"]  # note 0 was relevant


def test_a_false_positive_is_not_counted_as_a_hit():
    s = hidden_case([np.nan, np.nan, np.nan, np.nan])
    res = run(s, {"inv": {"ranker": "similarity", "retention": {
        "kind": "invalidation", "false_positive_rate": 1.0,
        "false_positive_delay_days": 1e-9}}}, budget_tokens=400)
    arms = res.arms.iloc[0]
    assert arms["invalidated_notes"] == 4 and arms["invalidated_superseded"] == 0
    assert arms["superseded_notes"] == 0 and math.isnan(arms["superseded_used_0d"])


# -- traces and experiments -------------------------------------------------------


def write_lines(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def test_trace_supersedes_sets_superseded_at_and_keeps_the_old_note(tmp_path):
    events = [{"event": "note_added", "id": "a", "t": 0, "actor": "u", "text": "runner is nose"},
              {"event": "note_added", "id": "b", "t": 2, "actor": "u", "text": "runner is pytest",
               "supersedes": "a"},
              {"event": "note_added", "id": "c", "t": 3, "actor": "u", "text": "unrelated"},
              {"event": "query", "id": 1, "t": 5, "actor": "u", "text": "which runner"}]
    s = import_trace(write_lines(tmp_path / "t.jsonl", events))
    n = s.notes.set_index("trace_id")
    assert n.loc["a", "superseded_at"] == 2.0
    assert np.isnan(n.loc[["b", "c"], "superseded_at"]).all()
    assert np.isnan(n.loc["a", "expires_at"])  # still in the store, unlike note_updated
    bad = events[:1] + [{**events[1], "supersedes": "zz"}]
    with pytest.raises(StreamError, match="line 2: field 'supersedes'"):
        import_trace(write_lines(tmp_path / "bad.jsonl", bad))


def test_example_trace_has_superseded_notes():
    s = import_trace(ROOT / "experiments" / "traces" / "superseded.jsonl")
    sup = supersession_times(s.notes)
    assert np.isfinite(sup).sum() > 100
    assert (s.qrels["gain"] < 0).any()


def test_invalidation_experiment_on_the_trace(tmp_path):
    from memsim.reporting.report import build_report
    from memsim.runs.runner import run_experiment
    res = run_experiment(ROOT / "experiments" / "invalidation.toml", out=tmp_path, report=False,
                         overrides=["workload.source=traces/superseded.jsonl",
                                    "workload.importer=trace", "experiment.replicates=1"])
    q = res.queries.groupby("policy")
    harm, reinforced = q["harm"].mean(), q["stale_reinforced"].mean()
    # a perfect detector packs fewer stale notes, and reinforces fewer, than no decay
    assert harm["invalidation-perfect"] < harm["no-decay"]
    assert reinforced["invalidation-perfect"] < reinforced["no-decay"]
    arms = res.arms.set_index("policy")
    assert (arms.loc["invalidation-perfect", "superseded_used_7d"]
            < arms.loc["no-decay", "superseded_used_7d"])
    assert arms.loc["no-decay", "invalidated_notes"] == 0
    page = build_report(res.path).with_suffix(".md").read_text(encoding="utf-8")
    assert "## What your decay hid" in page and "superseded_use.png" in page


def test_report_says_when_the_stream_marks_nothing_as_superseded(tmp_path):
    from memsim.reporting.report import build_report
    from memsim.runs.runner import run_experiment
    # the example trace has no "supersedes": the detector can only over-fire
    res = run_experiment(ROOT / "experiments" / "invalidation.toml", out=tmp_path, report=False,
                         overrides=["workload.source=traces/example.jsonl",
                                    "workload.importer=trace", "experiment.replicates=1",
                                    "policies.invalidation.retention.false_positive_rate=0.5"])
    arms = res.arms.set_index("policy")
    assert (arms["superseded_notes"] == 0).all()
    assert arms.loc["invalidation", "invalidated_superseded"] == 0
    assert arms.loc["invalidation", "invalidated_notes"] > 0
    assert arms.loc["invalidation-perfect", "invalidated_notes"] == 0
    page = build_report(res.path).with_suffix(".md").read_text(encoding="utf-8")
    assert "No note of this stream is marked as superseded" in page
    assert "superseded_use.png" not in page  # no curve without superseded notes


@pytest.mark.skipif(not LOCOMO.exists(), reason=f"LoCoMo data not found at {LOCOMO}")
def test_locomo_has_no_supersession_signal():
    from memsim.data.importers import import_locomo
    s = import_locomo(LOCOMO)
    # no note is marked superseded and no qrel is negative: on LoCoMo an
    # invalidation detector can only over-fire
    assert np.isnan(supersession_times(s.notes)).all()
    assert not (s.qrels["gain"] < 0).any()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 8))
def test_hidden_notes_and_their_reasons_match_the_rules_query_by_query(seed, q, c):
    """``hidden_counts`` against the rules read one query and one note at a
    time with sets: the oracle's packed notes a policy did not pack, each
    'invalid' (invalidated), else 'evicted' (evicted or expired), else
    'budget' (a candidate), else 'age' (live, and a less similar candidate
    made the top C), else 'cut'; notes repeated across queries and
    candidates, invalid candidate slots."""
    rng = np.random.default_rng(seed)
    s = random_stream(seed % 1000, n_notes=40, n_queries=30)
    rel = RelevanceIndex(s, s.notes["created_at"].to_numpy())
    n = s.n_notes
    qrows = np.sort(rng.choice(s.n_queries, size=min(q, s.n_queries), replace=False))
    t = s.queries["t"].to_numpy()[qrows]
    budget = rng.integers(0, 1500, len(qrows))
    _, okeys = oracle_packing(rel, qrows, t, budget, s.notes["tokens"].to_numpy())
    cand_rows = rng.integers(0, n, (len(qrows), c))
    cand_ok = rng.random((len(qrows), c)) < 0.8
    packed = cand_ok & (rng.random((len(qrows), c)) < 0.5)
    invalid_at = np.where(rng.random(n) < 0.15, 1.0, np.nan)
    evicted = rng.random(n) < 0.15
    expires_at = np.where(rng.random(n) < 0.1, rng.uniform(0, 30, n), np.inf)
    sims = rng.random((len(qrows), n))

    def similarity(qi, rows):
        return sims[qi[:, None], rows]

    counts, (hq, hrow, hreason) = hidden_counts(
        qrows=qrows, t=t, cand_rows=cand_rows, cand_ok=cand_ok, packed=packed, relevance=rel,
        oracle_keys=okeys, invalid_at=invalid_at, evicted=evicted, expires_at=expires_at,
        similarity=similarity)
    oracle = set(okeys.tolist())
    want = []
    for i, qr in enumerate(qrows.tolist()):
        cands = {int(r) for r, ok in zip(cand_rows[i], cand_ok[i]) if ok}
        packs = {int(r) for r, p in zip(cand_rows[i], packed[i]) if p}
        in_o = [r for r in range(n) if qr * n + r in oracle]
        assert counts["oracle_notes"][i] == len(in_o)
        for r in in_o:
            if r in packs:
                continue
            if not np.isnan(invalid_at[r]):
                why = "invalid"
            elif evicted[r] or expires_at[r] <= t[i]:
                why = "evicted"
            elif r in cands:
                why = "budget"
            elif any(sims[i, int(x)] < sims[i, r] for x, ok in zip(cand_rows[i], cand_ok[i])
                     if ok):
                why = "age"
            else:
                why = "cut"
            want.append((i, r, why))
    got = sorted(zip(hq.tolist(), hrow.tolist(), [HIDDEN_REASONS[k] for k in hreason]))
    assert got == sorted(want)
    for col in HIDDEN_COLUMNS:
        why = col.removeprefix("hidden_")
        assert counts[col].tolist() == [sum(1 for w in want if w[0] == i and w[2] == why)
                                        for i in range(len(qrows))]
