"""``memsim engine-check``: the LangChain preset against LangChain's real
retriever, and the shared comparison. Tests that need the optional extras
(``memsim[langchain]``, ``memsim[feather]``) skip without them."""

from __future__ import annotations

import importlib.util
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.cli import main as cli_main
from memsim.core import jit
from memsim.engine import Arm, SimSettings, simulate
from memsim.checks.engine_check import compare_rankings, load_check_config, quantise_stream, summarise
from memsim.core.errors import ConfigError, MemsimError
from memsim.policies import ArrayContext, PRESETS, resolve_policy
from memsim.policies.rank import LangChainTimeWeighted
from memsim.data.stream import write_stream
from memsim.checks.testing import check_component
from memsim.data.workload import SyntheticWorkload

from .helpers import numba_kernels

HAS_LANGCHAIN = all(importlib.util.find_spec(m) is not None
                    for m in ("langchain_classic", "langchain_community", "faiss"))
needs_langchain = pytest.mark.skipif(
    not HAS_LANGCHAIN, reason="langchain-classic / faiss-cpu not installed "
                              "(pip install -e '.[langchain]')")
HAS_FEATHER = importlib.util.find_spec("feather_db") is not None
needs_feather = pytest.mark.skipif(
    not HAS_FEATHER, reason="feather-db is not installed (pip install -e '.[feather]')")

WORKLOAD = dict(horizon_days=25, backfill_days=5, notes_per_day=20.0, queries_per_day=8.0)


@pytest.fixture(scope="module")
def stream():
    return SyntheticWorkload(**WORKLOAD).generate(np.random.SeedSequence(8128))


# --------------------------------------------------------------------------
# The ranker, by hand
# --------------------------------------------------------------------------


def _hand_ctx():
    # 6 notes, created at days 0..5 (note 5 newest); one query at day 10.
    # query along x; note vectors at decreasing cosines 1, .8, .6, .4, .2, 0
    cos = np.array([1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    emb = np.stack([cos, np.sqrt(1 - cos ** 2)], axis=1)
    return ArrayContext(t=10.0, created_at=np.arange(6.0), note_emb=emb,
                        query_emb=np.array([[1.0, 0.0]])), cos


def test_candidates_are_the_nearest_and_the_newest():
    ctx, _ = _hand_ctx()
    r = LangChainTimeWeighted(search_k=2, k=2)
    # nearest 2: notes 0, 1; newest 2: notes 5, 4
    assert r.candidate_mask(ctx)[0].tolist() == [True, True, False, False, True, True]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), q=st.integers(1, 4), n=st.integers(1, 60),
       m=st.integers(0, 70), levels=st.sampled_from([3, 1000]), share=st.floats(0.0, 1.0),
       nan=st.booleans())
def test_nearest_and_newest_sets_equal_a_full_sort_of_each_row(seed, q, n, m, levels, share,
                                                               nan):
    """The store's ``search_k`` nearest and the ``k`` newest, found without
    sorting a row, are the first columns of the sorts that define them
    (stable by score; by allowed, then age, then the higher note row), with
    many ties (3 distinct values), rows short of allowed notes, NaN scores
    and non-finite ages."""
    from memsim.policies.rank import _first_by_row, _top_by_row

    rng = np.random.default_rng(seed)
    score = rng.integers(0, levels, size=(q, n)).astype(np.float64)
    age = rng.integers(0, levels, size=(q, n)).astype(np.float64)
    if nan:
        score[rng.random((q, n)) < 0.1] = np.nan
        age[rng.random((q, n)) < 0.05] = np.inf
        age[rng.random((q, n)) < 0.05] = np.nan
    allowed = rng.random((q, n)) < share
    idx = np.broadcast_to(np.sort(rng.choice(10 * n + 10, size=n, replace=False)), (q, n))

    want = np.zeros((q, n), dtype=bool)
    if m > 0:
        s = np.where(allowed, score, -np.inf)
        np.put_along_axis(want, np.argsort(-s, axis=1, kind="stable")[:, :m], True, axis=1)
    newest = np.zeros((q, n), dtype=bool)
    if m > 0:
        np.put_along_axis(newest, np.lexsort((-idx, age, ~allowed), axis=1)[:, :m], True, axis=1)
    for compiled in (False, True) if jit.available() else (False,):
        with numba_kernels(compiled):  # the m-th value by a heap (numba) or a partition
            np.testing.assert_array_equal(_top_by_row(score, allowed, m), want & allowed)
            got = _first_by_row(np.where(allowed, age, np.inf), m,
                                lambda r, c: (-idx[r, c], age[r, c], ~allowed[r, c]))
            np.testing.assert_array_equal(got & allowed, newest & allowed)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_mth_smallest_of_each_row_is_the_partitions(data):
    """The compiled m-th smallest value of each row equals the one
    ``np.partition`` puts at m - 1: ties, -0.0 and 0.0, infinities, rows
    in any order, m from 1 to the row's length."""
    from memsim.policies.rank import _mth_smallest

    q, n = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 80))
    values = st.one_of(st.sampled_from([0.0, -0.0, np.inf, -np.inf]),
                       st.integers(-5, 5).map(float), st.floats(-1e6, 1e6))
    x = np.array(data.draw(st.lists(values, min_size=q * n, max_size=q * n))).reshape(q, n)
    m = data.draw(st.integers(1, n))
    want = np.partition(x, m - 1, axis=1)[:, m - 1:m]
    for compiled in (False, True) if jit.available() else (False,):
        with numba_kernels(compiled):
            got = _mth_smallest(x, m)
            assert got.shape == (q, 1)
            assert np.all(got == want)


def test_newest_keeps_an_allowed_note_of_unknown_age_before_those_not_allowed():
    """A NaN age sorts after every known one but, allowed, before every note
    that is not: the sort's order, where comparing ages alone would not."""
    from memsim.policies.rank import _first_by_row

    age = np.array([[1.0, np.nan, 2.0]])
    allowed = np.array([[True, True, False]])
    idx = np.arange(3)[None, :]
    got = _first_by_row(np.where(allowed, age, np.inf), 2,
                        lambda r, c: (-idx[r, c], age[r, c], ~allowed[r, c]))
    assert (got & allowed).tolist() == [[True, True, False]]


def test_candidates_follow_a_new_live_mask_on_the_same_context():
    """The sets are those of the context's live mask now, and of the ranker
    asking (a new mask, another search_k: new sets)."""
    ctx, _ = _hand_ctx()
    r = LangChainTimeWeighted(search_k=2, k=2)
    assert r.candidate_mask(ctx)[0].tolist() == [True, True, False, False, True, True]
    ctx.live = np.array([[False, True, True, True, True, False]])
    assert r.candidate_mask(ctx)[0].tolist() == [False, True, True, True, True, False]
    assert LangChainTimeWeighted(search_k=1, k=1).candidate_mask(ctx)[0].tolist() == [
        False, True, False, False, True, False]


def test_chosen_cells_read_the_sets_of_the_whole_context():
    """A context of chosen cells (``ctx.whole``) scores each cell and marks
    each candidate as the whole context does: the sets are the whole's (on
    the cells alone, the nearest of six notes would be others)."""
    ctx, _ = _hand_ctx()
    ctx.live = np.array([[True, True, True, False, True, True]])
    r = LangChainTimeWeighted(search_k=2, k=1, default_salience=0.25)
    rec = np.linspace(0.1, 0.6, 6)[None, :]
    keep = np.array([1, 2, 5])
    cells = ArrayContext(t=ctx.t, created_at=ctx.created_at[keep],
                         note_emb=ctx.note_emb[keep], query_emb=ctx.query_emb)
    cells.live = ctx.live[:, keep]
    cells.whole = (ctx, keep[None, :])
    assert r.combine(None, rec[:, keep], cells).tolist() == \
        r.combine(None, rec, ctx)[:, keep].tolist()
    assert r.candidate_mask(cells).tolist() == r.candidate_mask(ctx)[:, keep].tolist()
    cells.whole = None  # the same cells as a context of their own: other sets
    assert r.candidate_mask(cells).tolist() != r.candidate_mask(ctx)[:, keep].tolist()


def test_recent_only_documents_get_default_salience():
    ctx, cos = _hand_ctx()
    rec = np.full((1, 6), 0.5)
    score = LangChainTimeWeighted(search_k=2, k=2).combine(np.zeros((1, 6)), rec, ctx)[0]
    np.testing.assert_allclose(score[:2], 0.5 + cos[:2], atol=1e-6)  # store relevance
    np.testing.assert_allclose(score[4:], [0.5, 0.5])                # None -> 0
    s2 = LangChainTimeWeighted(search_k=2, k=2, default_salience=0.25).combine(
        np.zeros((1, 6)), rec, ctx)[0]
    np.testing.assert_allclose(s2[4:], [0.75, 0.75])
    # a document both recent and near keeps the store's relevance
    s3 = LangChainTimeWeighted(search_k=6, k=2, default_salience=5.0).combine(
        np.zeros((1, 6)), rec, ctx)[0]
    np.testing.assert_allclose(s3, 0.5 + cos, atol=1e-6)


def test_store_relevance_options():
    ctx, cos = _hand_ctx()
    rec = np.zeros((1, 6))
    l2 = LangChainTimeWeighted(relevance="l2", k=0).combine(None, rec, ctx)[0]
    np.testing.assert_allclose(l2, 1 - (2 - 2 * cos) / np.sqrt(2), atol=1e-6)
    ip = LangChainTimeWeighted(relevance="inner-product", k=0).combine(None, rec, ctx)[0]
    np.testing.assert_allclose(ip, np.where(cos > 0, 1 - cos, -cos), atol=1e-6)


def test_contract_and_preset():
    for rel in ("cosine", "l2", "inner-product"):
        check_component(LangChainTimeWeighted(relevance=rel, search_k=7, k=3))
    with pytest.raises(ConfigError, match="relevance"):
        LangChainTimeWeighted(relevance="dot")
    pol = resolve_policy({"preset": "langchain-time-weighted"}, "p")
    assert pol.ranker.search_k == 100 and pol.ranker.k == 4 and pol.candidates == 4
    assert pol.feedback.touch == "returned" and pol.feedback.k == 4
    doc = PRESETS["langchain-time-weighted"].doc
    assert "langchain_classic/retrievers/time_weighted_retriever.py" in doc
    assert "per-query" in doc


def test_engine_keeps_only_the_rankers_candidates(stream):
    pol = resolve_policy({"preset": "langchain-time-weighted",
                          "ranker": {"search_k": 3, "k": 1}, "candidates": 10}, "p")
    res = simulate(stream, [Arm("lc", pol)], SimSettings(feedback_mode="per-query",
                                                         save_rankings=True),
                   np.random.SeedSequence(0))
    # at most 3 nearest + 1 newest are ever ranked, whatever top-C
    assert res.rankings.groupby("query_id")["rank"].max().max() <= 4


# --------------------------------------------------------------------------
# Shared comparison
# --------------------------------------------------------------------------


def test_compare_rankings_and_summary(stream):
    qs = quantise_stream(stream)
    n = qs.n_queries
    a = [np.array([1, 2, 3]) for _ in range(n)]
    b = [np.array([1, 2, 3]) for _ in range(n)]
    b[2] = np.array([1, 3, 4])
    s = [np.array([3.0, 2.0, 1.0]) for _ in range(n)]
    pq = compare_rankings(qs, a, s, b, s, 3)
    summ = summarise(pq, 3)
    assert summ["first_difference"] == 2
    assert pq["overlap"].iat[2] == pytest.approx(2 / 3)
    assert summ["identical_share"] == pytest.approx((n - 1) / n)


def test_overlap_of_lists_shorter_than_k_counts_what_they_hold(stream):
    """Both sides rightly return fewer than k notes (a store of 8 memories,
    k = 10): the same notes overlap 1; it used to read 0.8 beside
    '100% identical'."""
    qs = quantise_stream(stream)
    n = qs.n_queries
    a = [np.arange(8) for _ in range(n)]
    b = [np.arange(8) for _ in range(n)]
    b[1] = np.array([0, 1, 2, 3, 4, 5, 6, 9])          # one of 8 differs
    a[2], b[2] = np.arange(10), np.arange(8)            # the engine's longer list
    a[3], b[3] = np.zeros(0, np.int64), np.zeros(0, np.int64)
    s = [np.linspace(1, 0, len(x)) for x in a]
    t = [np.linspace(1, 0, len(x)) for x in b]
    pq = compare_rankings(qs, a, s, b, t, 10)
    assert pq["overlap"].iat[0] == 1.0 and pq["identical"].iat[0]
    assert pq["overlap"].iat[1] == pytest.approx(7 / 8)
    assert pq["overlap"].iat[2] == pytest.approx(8 / 10)
    assert pq["overlap"].iat[3] == 1.0


def test_load_check_config_reads_a_stream_folder(stream, tmp_path):
    write_stream(stream, tmp_path / "s")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[engine_check]\nk = 4\n[workload]\nsource = "s"\n')
    check, got, _ = load_check_config(cfg, ("langchain_check", "engine_check"), {"k"})
    assert check["k"] == 4 and got.n_notes == stream.n_notes
    cfg.write_text('[engine_check]\nbogus = 1\n')
    with pytest.raises(ConfigError, match="bogus"):
        load_check_config(cfg, ("engine_check",), {"k"})


@pytest.mark.parametrize("text, key", [
    ('k = "abc"', "langchain_check.k: must be an int"),
    ("k = 2.5", "langchain_check.k: must be an int"),
    ("k = [4, 2.5]", "langchain_check.k: must be an int"),
    ("k = []", "langchain_check.k: an empty list"),
    ("search_k = 7.9", "langchain_check.search_k: must be an int >= 1"),
    ('decay_rate = "x"', "langchain_check.decay_rate: must be a float in [0, 1)"),
    ("decay_rate = 1.0", "langchain_check.decay_rate: must be a float in [0, 1)"),
    ('relevance = ["cosine", "dot"]', "langchain_check.relevance: must be one of"),
    ("relevance = []", "langchain_check.relevance: an empty list"),
    ('default_salience = "x"', "langchain_check.default_salience: must be a finite float"),
    ('feedback_mode = "daily"', "langchain_check.feedback_mode: must be one of"),
])
def test_langchain_config_mistakes_name_the_file_and_the_key(tmp_path, text, key):
    """Refused before anything runs (with or without LangChain installed),
    naming the file and the key: never truncated (2.5 is not 2), never an
    empty list that checks nothing."""
    from memsim.checks.langchain_check import run_langchain_check

    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[langchain_check]\n{text}\n[workload]\nhorizon_days = 3\n"
                   "backfill_days = 3\nnotes_per_day = 5\nqueries_per_day = 2\n")
    with pytest.raises(ConfigError) as info:
        run_langchain_check(cfg, verbose=False)
    assert str(info.value).startswith(f"{cfg}: {key}"), str(info.value)


def test_a_langchain_config_mistake_is_one_line_on_the_command_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[langchain_check]\nk = 2.5\n[langchain_chek]\nk = 3\n')
    assert cli_main(["engine-check", "langchain", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err == (f"memsim: error: {cfg}: langchain_chek: unknown table (did you mean "
                   "'langchain_check'?); allowed: langchain_check, engine_check, workload\n")


# --------------------------------------------------------------------------
# Against the real engines
# --------------------------------------------------------------------------


def test_missing_langchain_is_a_clear_error(stream, monkeypatch):
    from memsim.checks.langchain_check import langchain_cross_check

    monkeypatch.setitem(sys.modules, "langchain_classic.retrievers", None)
    with pytest.raises(MemsimError, match=r"pip install -e \"\.\[langchain\]\""):
        langchain_cross_check(stream)


@needs_langchain
@pytest.mark.parametrize("k,relevance", [(4, "cosine"), (10, "l2"), (4, "inner-product")])
def test_langchain_agrees(stream, k, relevance):
    from memsim.checks.langchain_check import langchain_cross_check

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = langchain_cross_check(stream, k=k, relevance=relevance)
    s = res.summary
    assert s["identical_share"] >= 0.99, res.per_query[~res.per_query.identical].head()
    assert s["max_score_diff"] < 1e-5
    if relevance != "inner-product":  # the recent window is exercised
        assert (res.per_query["recent_only"] > 0).any()


@needs_langchain
def test_engine_check_command_langchain(stream, tmp_path, capsys):
    write_stream(stream, tmp_path / "s")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[langchain_check]\nk = 4\nrelevance = "cosine"\n'
                   '[workload]\nsource = "s"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["engine-check", "langchain", str(cfg)]) == 0
    assert "identical top-4:      100.00%" in capsys.readouterr().out


@needs_feather
def test_engine_check_command_feather(stream, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEATHER_WAL_SYNC", "0")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[engine_check]\nseed = 8128\nk = 4\nsearches = ["exact"]\n'
                   '[workload]\nhorizon_days = 10\nbackfill_days = 3\nnotes_per_day = 15\n'
                   'queries_per_day = 5\n')
    assert cli_main(["engine-check", "feather", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "identical top-4:      100.00%" in out
    assert cli_main(["feather-check", str(cfg)]) == 0  # the alias


@needs_langchain
def test_engine_check_writes_each_csv_as_its_configuration_finishes(stream, tmp_path, capsys,
                                                                    monkeypatch):
    """An interrupted check keeps the per-query tables of the configurations it
    finished; each configuration announces itself on stderr as it starts."""
    from memsim.checks import langchain_check

    write_stream(stream, tmp_path / "s")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[langchain_check]\nk = [2, 4]\nrelevance = "cosine"\n'
                   '[workload]\nsource = "s"\n')
    real = langchain_check.langchain_cross_check
    calls = []

    def second_is_interrupted(*args, **kwargs):
        calls.append(kwargs["k"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second configuration
        return real(*args, **kwargs)

    monkeypatch.setattr(langchain_check, "langchain_cross_check", second_is_interrupted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["engine-check", "langchain", str(cfg), "--csv",
                         str(tmp_path / "out")]) == 130
    err = capsys.readouterr().err
    assert "configuration 1/2 (k = 2, cosine)" in err and "configuration 2/2" in err
    done = pd.read_csv(tmp_path / "out_k2_cosine.csv")
    assert len(done) == stream.n_queries
    assert not (tmp_path / "out_k4_cosine.csv").exists()


@pytest.mark.parametrize("engine", ["langchain", "feather", "llamaindex"])
def test_a_csv_prefix_in_no_folder_is_refused_before_the_check(tmp_path, capsys, monkeypatch,
                                                              engine):
    """``--csv`` in a folder that does not exist (or under a file) is the
    user's mistake, refused before any configuration runs (before: after
    the whole replay, exit code 1 and pandas' message)."""
    from memsim.checks import feather_check, framework_check, langchain_check

    started = []
    for mod, fn in ((langchain_check, "run_langchain_check"),
                    (feather_check, "run_feather_check"),
                    (framework_check, "run_framework_check")):
        monkeypatch.setattr(mod, fn, lambda *a, **k: started.append(1) or [])
    (tmp_path / "afile").write_text("x")
    for prefix, what in ((tmp_path / "no" / "x", "does not exist"),
                         (tmp_path / "afile" / "x", "is a file")):
        capsys.readouterr()
        assert cli_main(["engine-check", engine, str(tmp_path / "c.toml"), "--csv",
                         str(prefix)]) == 2
        assert capsys.readouterr().err == (
            f"memsim: error: --csv {prefix}: its folder {prefix.parent} {what}; the tables "
            f"are written as {prefix}_<configuration>.csv\n")
    assert not started


@needs_langchain
def test_engine_check_json(stream, tmp_path, capsys):
    import json

    write_stream(stream, tmp_path / "s")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[langchain_check]\nk = 4\nrelevance = ["cosine", "l2"]\n'
                   '[workload]\nsource = "s"\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["engine-check", "langchain", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    assert [d["relevance"] for d in doc] == ["cosine", "l2"]
    assert all(d["k"] == 4 and d["n_queries"] == stream.n_queries for d in doc)
