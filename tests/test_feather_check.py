"""Cross-check of memsim's ``feather`` preset against the feather-db engine
(issue #7, item 4).

The engine tests need the optional extra ``memsim[feather]`` (feather-db
0.21.0) and are skipped without it; the others always run.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from memsim.core.errors import ConfigError, MemsimError
from memsim.checks.engine_check import kendall as _kendall
from memsim.checks.feather_check import (
    feather_cross_check,
    feather_policy,
    format_cross_check,
    quantise_stream,
    run_feather_check,
)
from memsim.data.workload import SyntheticWorkload

HAS_FEATHER = importlib.util.find_spec("feather_db") is not None
needs_feather = pytest.mark.skipif(
    not HAS_FEATHER, reason="feather-db is not installed (pip install -e '.[feather]')")


@pytest.fixture(scope="module")
def stream():
    # >= 2,000 notes over 90 days of queries (10 days of backfill so that ages
    # vary from the first query), 12 queries a day: ~1,100 scored searches,
    # each returning 10 notes that gain a recall (the feedback loop is on).
    w = SyntheticWorkload(horizon_days=90, backfill_days=10, notes_per_day=22.0,
                          queries_per_day=12.0)
    s = w.generate(np.random.SeedSequence(7))
    assert s.n_notes >= 2000
    return s


@pytest.fixture(scope="module")
def exact_result(stream):
    return feather_cross_check(stream, exact=True)


# --------------------------------------------------------------------------
# Without the engine
# --------------------------------------------------------------------------


def test_missing_engine_is_a_clear_error(stream, monkeypatch):
    monkeypatch.setitem(sys.modules, "feather_db", None)  # import now fails
    with pytest.raises(MemsimError, match=r"pip install -e \"\.\[feather\]\""):
        feather_cross_check(stream)


def test_quantise_stream_whole_seconds(stream):
    q = quantise_stream(stream)
    for x in (q.notes["created_at"], q.queries["t"]):
        s = x.to_numpy() * 86400
        assert np.allclose(s, np.round(s), rtol=0, atol=1e-6)
    # at most half a second moved, nothing reordered beyond ties
    assert np.abs(q.notes["created_at"] - stream.notes["created_at"]).max() <= 0.5 / 86400 + 1e-12
    assert q.n_notes == stream.n_notes and q.n_queries == stream.n_queries


def test_feather_policy_parameters():
    pol = feather_policy(k=5, half_life=7.0, time_weight=0.5, min_weight=0.1)
    assert pol.retriever.prefilter == 15
    assert pol.candidates == 5 and pol.feedback.k == 5
    assert pol.feedback.touch == "returned" and not pol.feedback.before_scoring
    assert pol.ranker.time_weight == 0.5 and pol.ranker.min_weight == 0.1
    assert pol.decay.half_life_days == 7.0


def test_kendall():
    assert _kendall(np.arange(5.0), np.arange(5.0)) == 1.0
    assert _kendall(np.arange(5.0), -np.arange(5.0)) == -1.0
    assert np.isnan(_kendall(np.zeros(1), np.zeros(1)))


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown key"):
        run_feather_check({"feather_check": {"kk": 3}}, verbose=False)


#: a stream of a few notes (the config mistakes are found before it is replayed)
TINY = ("[workload]\nhorizon_days = 3\nbackfill_days = 3\nnotes_per_day = 5\n"
        "queries_per_day = 2\n")


@pytest.mark.parametrize("text, key", [
    ('[feather_check]\nseed = "abc"\n' + TINY, "feather_check.seed: must be an int"),
    ("[feather_check]\nseed = -1\n" + TINY, "feather_check.seed: must be an int"),
    ("[feather_check]\nseed = 1.7\n" + TINY, "feather_check.seed: must be an int"),
    ("[engine_check]\nseed = 2.5\n" + TINY, "engine_check.seed: must be an int"),
    ("[feather_check]\nk = 2.5\n" + TINY, "feather_check.k: must be an int"),
    ("[feather_check]\nk = 0\n" + TINY, "feather_check.k: must be an int"),
    ('[feather_check]\nhalf_life = "x"\n' + TINY, "feather_check.half_life: must be a float"),
    ("[feather_check]\ntime_weight = 1.5\n" + TINY, "feather_check.time_weight: must be"),
    ("[feather_check]\nsearches = []\n" + TINY, "feather_check.searches: an empty list"),
    ("[feather_check]\nsearches = [0]\n" + TINY, "feather_check.searches: must be"),
    ("[feather_check]\nsearches = [7.5]\n" + TINY, "feather_check.searches: must be"),
    ("[feather_check]\nfeedback = []\n" + TINY, "feather_check.feedback: an empty list"),
    ("feather_check = 3\n" + TINY, "feather_check: expected a table, got 3"),
    ("workload = 5\n", "workload: expected a table, got 5"),
    ("[workload]\nsource = 5\n", "workload.source: expected a stream folder"),
    ("[feather_check]\nseed = 3\n[workload]\nsource = \"s\"\n",
     "feather_check.seed: a workload with 'source' replays a stream"),
    ("[workload]\nhorizon_dys = 3\n", "workload.horizon_dys: unknown key (did you mean"),
    ("[feather_chek]\nk = 3\n" + TINY,
     "feather_chek: unknown table (did you mean 'feather_check'?); allowed: feather_check, "
     "engine_check, workload"),
    ("[engine_check]\nk = 3\n[feather_check]\nk = 4\n" + TINY,
     "engine_check: a check config holds one of the tables feather_check, engine_check"),
])
def test_config_mistakes_name_the_file_and_the_key(tmp_path, text, key):
    """Each mistake is a ConfigError naming the file and the key: no
    traceback, no truncation (2.5 is not 2), nothing ignored (an empty list, a
    misspelt table, a second table)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        run_feather_check(cfg, verbose=False)
    assert str(info.value).startswith(f"{cfg}: {key}"), str(info.value)


def test_a_config_that_is_not_utf8_is_one_line(tmp_path, capsys):
    from memsim.cli import main as cli_main

    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"[feather_check]\nk = 3\n\xff\xfe\n")
    assert cli_main(["feather-check", str(cfg)]) == 2
    assert capsys.readouterr().err == f"memsim: error: {cfg}: not a UTF-8 text file\n"


# --------------------------------------------------------------------------
# Against the engine
# --------------------------------------------------------------------------


@needs_feather
@pytest.mark.feather
@pytest.mark.slow
def test_exact_search_matches(exact_result):
    """With the engine searching exactly (ef >= min(n_notes, 2000)): identical
    top-10 on >= 99.5% of queries, scores within 1e-6 (float32 rounding of
    two different evaluation orders), equal recall counts on >= 99.9% of notes."""
    s = exact_result.summary
    print("\n" + format_cross_check(exact_result))
    assert s["exact"] and s["ef"] >= min(s["n_notes"], 2000)
    assert s["identical_share"] >= 0.995
    assert s["max_score_diff"] <= 1e-6
    assert s["equal_recall_share"] >= 0.999
    # the re-stamping covered every returned note (see the module docstring)
    assert s["unstamped_returns"] == 0
    pq = exact_result.per_query
    assert len(pq) == s["n_queries"] and (pq["n_engine"] == 10).mean() > 0.99
    assert set(pq.columns) >= {"query_id", "identical", "overlap", "rank_corr",
                               "max_score_diff", "clock_tick"}


@needs_feather
@pytest.mark.feather
@pytest.mark.slow
def test_default_ef_overlap(stream, exact_result):
    """At the engine's default ef (50, approximate HNSW) the top-10 overlap
    stays >= 0.97; differences come from notes the index missed, and the
    recall counts they change."""
    res = feather_cross_check(stream, exact=False, reuse=exact_result)
    print("\n" + format_cross_check(res))
    assert res.summary["ef"] == 50 and not res.summary["exact"]
    assert res.summary["overlap_mean"] >= 0.97
    assert res.summary["unstamped_returns"] == 0


@needs_feather
@pytest.mark.feather
def test_reuse_must_match(stream, exact_result):
    with pytest.raises(ConfigError, match="reuse"):
        feather_cross_check(stream, half_life=7.0, reuse=exact_result)


@needs_feather
@pytest.mark.feather
def test_without_feedback_small():
    """``feedback=False``: no recalls on either side; exact search agrees."""
    w = SyntheticWorkload(horizon_days=20, backfill_days=10, notes_per_day=15.0,
                          queries_per_day=10.0)
    s = w.generate(np.random.SeedSequence(3))
    res = feather_cross_check(s, feedback=False)
    assert res.summary["identical_share"] == 1.0
    assert res.summary["recalls_engine_total"] == res.summary["recalls_memsim_total"] == 0
    assert res.summary["max_score_diff"] <= 1e-6


@needs_feather
@pytest.mark.feather
def test_run_feather_check_config(capsys):
    cfg = {"feather_check": {"seed": 2, "searches": ["exact"], "feedback": True},
           "workload": {"horizon_days": 10, "backfill_days": 5, "notes_per_day": 10.0,
                        "queries_per_day": 5.0}}
    (res,) = run_feather_check(cfg)
    assert res.summary["identical_share"] == 1.0
    assert "identical top-10" in capsys.readouterr().out


@needs_feather
@pytest.mark.feather
def test_expiry_and_organic_accesses():
    """TTL expiry (``forget``) and organic reads (``touch``) replay alike."""
    from memsim.data.stream import make_stream

    w = SyntheticWorkload(horizon_days=20, backfill_days=10, notes_per_day=15.0,
                          queries_per_day=10.0, accesses_per_day=8.0)
    s = w.generate(np.random.SeedSequence(5))
    notes = s.notes.copy()
    rng = np.random.default_rng(0)
    ttl = rng.random(len(notes)) < 0.2
    notes["expires_at"] = np.where(ttl, notes["created_at"] + 4.0, np.nan)
    s = make_stream(notes, s.queries, s.qrels, s.accesses, s.note_embeddings,
                    s.query_embeddings, s.meta)
    assert len(s.accesses) > 0
    res = feather_cross_check(s)
    assert res.summary["identical_share"] == 1.0
    assert res.summary["equal_recall_share"] == 1.0
    assert res.summary["recalls_engine_total"] > 0  # feedback on
