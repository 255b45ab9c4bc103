"""Rankings and qrels out to the IR tools (RunResult.to_trec_run / to_trec_qrels /
to_ranx): ir-measures, reading the exported files, computes the same nDCG@10
and MRR as memsim's own ``ndcg@10`` and ``mrr`` columns.

Both measure the candidate ranking (top-C in score order), linear gains with
a log2(rank + 1) discount, and an ideal over the notes relevant to the query
and existing when it is asked; MRR is 1 / rank of the first such note.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.runs.runner import load_stream_for
from memsim.data.stream import write_stream

POLICIES = ("similarity-only", "hivemind", "recency-only")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "trec", "replicates": 1, "seed": 3, "save_rankings": True,
                       "candidates": 40},
        "workload": {"horizon_days": 20, "backfill_days": 20},
        "policies": {p: {"preset": p} for p in POLICIES}})
    out = tmp_path_factory.mktemp("runs")
    return memsim.run_experiment(exp, out=out, report=False)


def _by_query(results, measure) -> pd.Series:
    return pd.Series({int(r.query_id): r.value for r in results if str(r.measure) == measure},
                     dtype=float).sort_index()


@pytest.mark.parametrize("policy", POLICIES)
def test_ir_measures_computes_memsim_ndcg_and_mrr(run, policy, tmp_path):
    ir_measures = pytest.importorskip("ir_measures")
    # gains are 1 and 0.5 (and negative ones): grades 2 and 1, the same nDCG
    qrels = run.to_trec_qrels(tmp_path / "qrels.txt", gain_scale=2)
    ranked = run.to_trec_run(tmp_path / "run.txt", policy=policy)
    measures = [ir_measures.parse_measure("nDCG@10"), ir_measures.parse_measure("RR")]
    got = list(ir_measures.iter_calc(measures, ir_measures.read_trec_qrels(str(qrels)),
                                     ir_measures.read_trec_run(str(ranked))))
    q = run.queries[run.queries["policy"] == policy].set_index("query_id").sort_index()
    has_rel = q[q["n_relevant"] > 0]
    assert len(has_rel) > 300
    for measure, column in (("nDCG@10", "ndcg@10"), ("RR", "mrr")):
        theirs = _by_query(got, measure)
        # the same queries: those with a relevant note (memsim's others are NaN)
        assert theirs.index.tolist() == has_rel.index.tolist()
        ours = has_rel[column]
        assert np.allclose(theirs.to_numpy(), ours.to_numpy(), rtol=0, atol=1e-12), column
        assert 0 < ours.mean() < 1                       # not trivially all hits
    # ordering by the policy's own scores gives the same files' measures when
    # the scores do not tie
    ranked2 = run.to_trec_run(tmp_path / "run2.txt", policy=policy, scores="policy")
    got2 = list(ir_measures.iter_calc(measures, ir_measures.read_trec_qrels(str(qrels)),
                                      ir_measures.read_trec_run(str(ranked2))))
    r = run.rankings[run.rankings["policy"] == policy]
    if not r.duplicated(["query_id", "score"]).any():
        assert np.allclose(_by_query(got2, "nDCG@10"), _by_query(got, "nDCG@10"))


def test_qrels_hold_only_what_exists_when_asked(run, tmp_path):
    stream = load_stream_for(run.experiment, 0)
    path = run.to_trec_qrels(tmp_path / "q.txt", gain_scale=2)
    rows = [line.split() for line in path.read_text().splitlines()]
    assert all(len(r) == 4 and r[1] == "0" and r[3] in ("1", "2") for r in rows)
    qr = stream.qrels.merge(stream.queries[["query_id", "t"]], on="query_id") \
        .merge(stream.notes[["note_id", "created_at"]], on="note_id")
    want = qr[(qr["gain"] > 0) & (qr["created_at"] <= qr["t"])]
    assert len(rows) == len(want) < (stream.qrels["gain"] > 0).sum() + 1
    assert (stream.qrels["gain"] < 0).any()                # negative gains left out
    # a run read back from its folder needs the stream: the same file from it
    folder = tmp_path / "stream"
    write_stream(stream, folder)
    back = memsim.load_run(run.path)
    with pytest.raises(ValueError, match="give the stream"):
        back.to_trec_qrels(tmp_path / "x.txt")
    again = back.to_trec_qrels(tmp_path / "q2.txt", folder, gain_scale=2)
    assert again.read_bytes() == path.read_bytes()
    with pytest.raises(ValueError, match="gain_scale"):
        run.to_trec_qrels(tmp_path / "q3.txt")             # 0.5 is not a TREC grade


def test_trec_run_file_is_memsim_order(run, tmp_path):
    path = run.to_trec_run(tmp_path / "r.txt", policy="hivemind", tag="my run")
    frame = pd.read_csv(path, sep=" ", header=None,
                        names=["qid", "q0", "docno", "rank", "score", "tag"])
    assert (frame["q0"] == "Q0").all() and (frame["tag"] == "my_run").all()
    want = run.rankings[run.rankings["policy"] == "hivemind"].sort_values(["query_id", "rank"])
    assert frame["qid"].tolist() == want["query_id"].tolist()
    assert frame["docno"].tolist() == want["note_id"].tolist()
    # scores strictly decrease within each query: no tool can reorder them
    assert (frame.groupby("qid")["score"].diff().dropna() < 0).all()
    with pytest.raises(ValueError, match=r"3 values of policy .*give policy="):
        run.to_trec_run(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="policy 'nope' is not in the run"):
        run.to_trec_run(tmp_path / "x.txt", policy="nope")
    with pytest.raises(ValueError, match="save_rankings = true"):
        memsim.RunResult(queries=run.queries).to_trec_run(tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists()


def test_a_note_added_after_its_query_is_not_in_its_qrels(run, tmp_path):
    """memsim's R+ holds only notes existing when the query is asked; the
    exported qrels do too, so ir-measures still agrees when a trace's ``used``
    events name notes added later."""
    ir_measures = pytest.importorskip("ir_measures")
    from memsim.data.stream import make_stream

    s = load_stream_for(run.experiment, 0)
    q = s.queries.sort_values("t").iloc[: len(s.queries) // 2]
    late = s.notes.sort_values("created_at").iloc[-1]
    assert (q["t"] < late["created_at"]).all()
    extra = pd.DataFrame({"query_id": q["query_id"].to_numpy(), "note_id": late["note_id"],
                          "gain": 1.0})
    extra = extra.merge(s.qrels[["query_id", "note_id"]], how="left", indicator=True)
    extra = extra[extra["_merge"] == "left_only"].drop(columns="_merge")
    s2 = make_stream(s.notes, s.queries, pd.concat([s.qrels, extra], ignore_index=True),
                     s.accesses, s.note_embeddings, s.query_embeddings, dict(s.meta))
    write_stream(s2, tmp_path / "s2")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "late", "replicates": 1, "seed": 3, "save_rankings": True,
                       "candidates": 40},
        "workload": {"source": str(tmp_path / "s2")},
        "policies": {"similarity-only": {"preset": "similarity-only"}}})
    res = memsim.run_experiment(exp, out=None)
    qrels = res.to_trec_qrels(tmp_path / "q.txt", gain_scale=2)
    assert len(qrels.read_text().splitlines()) == len(
        run.to_trec_qrels(tmp_path / "q0.txt", gain_scale=2).read_text().splitlines())
    got = list(ir_measures.iter_calc([ir_measures.parse_measure("nDCG@10")],
                                     ir_measures.read_trec_qrels(str(qrels)),
                                     ir_measures.read_trec_run(str(res.to_trec_run(
                                         tmp_path / "r.txt")))))
    mine = res.queries.set_index("query_id").sort_index()
    mine = mine.loc[mine["n_relevant"] > 0, "ndcg@10"]
    assert np.allclose(_by_query(got, "nDCG@10").to_numpy(), mine.to_numpy(), atol=1e-12)


@pytest.mark.slow  # ranx compiles its measures with numba on first use (minutes)
def test_to_ranx_gives_the_same_means(run):
    ranx = pytest.importorskip("ranx")
    qrels, ranked = run.to_ranx(policy="similarity-only", gain_scale=2)
    assert isinstance(qrels, ranx.Qrels) and isinstance(ranked, ranx.Run)
    scores = ranx.evaluate(qrels, ranked, ["ndcg@10", "mrr"])
    q = run.queries[(run.queries["policy"] == "similarity-only") & (run.queries["n_relevant"] > 0)]
    assert scores["ndcg@10"] == pytest.approx(q["ndcg@10"].mean(), abs=1e-9)
    assert scores["mrr"] == pytest.approx(q["mrr"].mean(), abs=1e-9)


@pytest.mark.slow  # ranx compiles its measures with numba on first use
def test_the_readmes_ranx_example_scores_a_run_with_unjudged_queries(monkeypatch):
    """README.md's to_ranx example runs as shown on a trace where some queries
    have no relevant note (the qrels lack them, the run has them: ranx refuses
    such a pair without make_comparable) and gives memsim's means."""
    pytest.importorskip("ranx")
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
              if ".to_ranx(" in b]
    assert len(blocks) == 1, "README.md shows no runnable to_ranx example"
    monkeypatch.chdir(root)  # the example names the trace from the repository root
    scope: dict = {}
    exec(blocks[0], scope)
    q = scope["result"].queries
    assert (q["n_relevant"] == 0).any()  # queries the qrels lack
    judged = q[q["n_relevant"] > 0]
    assert scope["scores"]["ndcg@10"] == pytest.approx(judged["ndcg@10"].mean(), abs=1e-9)
    assert scope["scores"]["mrr"] == pytest.approx(judged["mrr"].mean(), abs=1e-9)


def test_exported_rankings_come_back_in_through_a_trace(run, tmp_path):
    """TREC qrels written by memsim are read by the trace importer (ids as logged)."""
    from memsim.data.importers.trace import import_trace, write_trace

    stream = load_stream_for(run.experiment, 0)
    write_trace(stream, tmp_path / "t.jsonl", embeddings=True, relevance="used")
    path = run.to_trec_qrels(tmp_path / "q.txt", gain_scale=2)
    back = import_trace(tmp_path / "t.jsonl", qrels=path)
    assert back.meta["qrels_from"] == "judgement"
    got = back.qrels.sort_values(["query_id", "note_id"]).reset_index(drop=True)
    want = run.trec_qrels_frame(gain_scale=2)
    assert got["gain"].to_numpy().tolist() == want.sort_values(
        ["qid", "docno"], key=lambda c: c.astype(int))["grade"].astype(float).tolist()
    assert Path(path).exists()


def test_trec_export_mistakes_are_memsim_errors_and_value_errors(run, tmp_path):
    from memsim.core.errors import ConfigError
    cases = [
        (lambda: run.to_trec_run(tmp_path / "x.txt"), r"3 values of policy .*give policy="),
        (lambda: run.to_trec_run(tmp_path / "x.txt", policy="zz"),
         "policy 'zz' is not in the run"),
        (lambda: run.to_trec_run(tmp_path / "x.txt", policy="hivemind", scores="x"),
         "scores must be 'rank' or 'policy', got 'x'"),
        (lambda: run.trec_run_frame(policy="hivemind", scores="x"), "scores must be"),
        (lambda: memsim.RunResult(queries=run.queries).to_trec_run(tmp_path / "x.txt"),
         "save_rankings = true"),
        (lambda: run.to_trec_qrels(tmp_path / "x.txt"), "TREC grades are integers"),
        (lambda: memsim.load_run(run.path).to_trec_qrels(tmp_path / "x.txt"),
         "give the stream"),
        # a raw IsADirectoryError, FileNotFoundError or TypeError before
        (lambda: run.to_trec_run(tmp_path, policy="hivemind"), "is a folder; give the file"),
        (lambda: run.to_trec_qrels(tmp_path, gain_scale=2),
         "to_trec_qrels: .* is a folder; give the file"),
        (lambda: run.to_trec_run(tmp_path / "no" / "x.txt", policy="hivemind"),
         "the folder .*no does not exist"),
        (lambda: run.to_trec_run(tmp_path / "x.txt", policy="hivemind", tag=5),
         r"to_trec_run\(tag=\): expected a name \(str\), got int 5"),
        (lambda: run.to_trec_run(None, policy="hivemind"),
         r"to_trec_run\(path\): expected a path"),
    ]
    for call, match in cases:
        with pytest.raises(ConfigError, match=match) as info:
            call()
        assert isinstance(info.value, ValueError)          # what it raised before
    assert not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("scale", [0, 0.0, -2, float("nan"), float("inf"), True, "2"])
def test_qrels_refuse_a_gain_scale_that_is_not_a_finite_positive_number(run, tmp_path, scale):
    from memsim.core.errors import ConfigError
    # 0 would write every grade 0 (nothing relevant), -2 negative grades
    with pytest.raises(ConfigError, match=r"gain_scale must be a finite number > 0, got ") \
            as info:
        run.to_trec_qrels(tmp_path / "q.txt", gain_scale=scale)
    assert isinstance(info.value, ValueError)
    assert not (tmp_path / "q.txt").exists()
    with pytest.raises(ConfigError, match="gain_scale must be"):
        run.trec_qrels_frame(gain_scale=scale)


# ---------------------------------------------------------------------------
# What the exports keep, refuse and name
# ---------------------------------------------------------------------------


def test_hidden_rows_are_not_part_of_any_ranking_export(tmp_path):
    """``save_rankings = "hidden"`` adds rank -1 rows (notes the oracle packed
    outside the policy's top C): they are not the ranking memsim measured,
    so the exports leave them out and ir-measures still agrees."""
    ir_measures = pytest.importorskip("ir_measures")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "hidden", "replicates": 1, "seed": 3,
                       "save_rankings": "hidden", "candidates": 4},
        "workload": {"horizon_days": 8, "backfill_days": 10},
        "policies": {"recency-only": {"preset": "recency-only"}}})
    res = memsim.run_experiment(exp, out=None)
    assert (res.rankings["rank"] == -1).sum() > 0           # the case at hand
    frame = res.trec_run_frame()
    assert (frame["rank"] >= 1).all()
    assert len(frame) == (res.rankings["rank"] >= 1).sum()
    assert frame["score"].max() == frame["rank"].max()      # C + 1 - rank, C the top rank
    assert res.trec_run_frame(scores="policy")["score"].notna().all()
    path = res.to_trec_run(tmp_path / "r.txt")
    assert all(line.split()[3] != "-1" for line in path.read_text().splitlines())
    qrels = res.to_trec_qrels(tmp_path / "q.txt", gain_scale=2)
    got = _by_query(ir_measures.iter_calc([ir_measures.parse_measure("nDCG@10")],
                                          ir_measures.read_trec_qrels(str(qrels)),
                                          ir_measures.read_trec_run(str(path))), "nDCG@10")
    mine = res.queries.set_index("query_id").sort_index()
    mine = mine.loc[mine["n_relevant"] > 0, "ndcg@10"].loc[got.index]
    assert np.allclose(got.to_numpy(), mine.to_numpy(), rtol=0, atol=1e-12)


def _two_policies_one_never_ranks() -> memsim.RunResult:
    """A run of two policies whose second ranked nothing (no rankings rows)."""
    queries = pd.DataFrame({"replicate": 0, "policy": ["a", "a", "empty", "empty"],
                            "budget": 500, "query_id": [0, 1, 0, 1]})
    rankings = pd.DataFrame({"replicate": 0, "policy": "a", "budget": 500,
                             "query_id": [0, 0, 1], "rank": [1, 2, 1],
                             "note_id": [5, 6, 5], "score": [0.9, 0.5, 0.7]})
    return memsim.RunResult(queries=queries, rankings=rankings)


def test_an_arm_whose_rankings_are_all_empty_exports_an_empty_run(tmp_path):
    res = _two_policies_one_never_ranks()
    path = res.to_trec_run(tmp_path / "empty.txt", policy="empty")
    assert path.read_text() == ""
    assert res.trec_run_frame(policy="empty").empty
    assert res.to_trec_run(tmp_path / "a.txt", policy="a").read_text().splitlines() == [
        "0 Q0 5 1 2.0 a", "0 Q0 6 2 1.0 a", "1 Q0 5 1 2.0 a"]
    # no policy= with two policies, one of them without rankings: refused,
    # not the other one exported in silence
    from memsim.core.errors import ConfigError
    with pytest.raises(ConfigError, match=r"^the run has 2 values of policy \(a, empty\): "
                                          r"give policy=$"):
        res.to_trec_run(tmp_path / "x.txt")
    with pytest.raises(ConfigError, match="policy 'nope' is not in the run; it has a, empty"):
        res.trec_run_frame(policy="nope")
    assert not (tmp_path / "x.txt").exists()


def test_qrels_refuse_a_replicate_the_run_did_not_run(run, tmp_path):
    from memsim.core.errors import ConfigError
    for call in (lambda: run.to_trec_qrels(tmp_path / "q.txt", replicate=3, gain_scale=2),
                 lambda: run.trec_qrels_frame(replicate=3, gain_scale=2),
                 lambda: run.trec_qrels_frame(load_stream_for(run.experiment, 0), replicate=3,
                                              gain_scale=2)):
        with pytest.raises(ConfigError, match=r"^replicate 3 is not in the run; it has 0$"):
            call()
    assert not (tmp_path / "q.txt").exists()
    assert len(run.trec_qrels_frame(replicate=0, gain_scale=2)) > 0


@pytest.mark.parametrize("scale, match", [
    (1e-10, r"^gain_scale=1e-10 makes the gain 0\.5 a grade of 0, which TREC reads as not "
            r"relevant: give a larger gain_scale$"),
    (1e19, r"^gain_scale=1e\+19 makes the gain 1\.0 a grade of 1e\+19, beyond a 64-bit "
           r"integer: give a smaller gain_scale$"),
    (1e300, r"^gain_scale=1e\+300 makes the gain 1\.0 a grade of 1e\+300, beyond a 64-bit"),
])
def test_qrels_refuse_a_gain_scale_that_loses_or_overflows_grades(run, tmp_path, scale, match):
    from memsim.core.errors import ConfigError
    with pytest.raises(ConfigError, match=match):
        run.to_trec_qrels(tmp_path / "q.txt", gain_scale=scale)
    assert not (tmp_path / "q.txt").exists()
    # the largest grades that fit are still written
    grades = run.trec_qrels_frame(gain_scale=2.0 ** 62)["grade"]
    assert grades.max() == 2 ** 62 and grades.dtype == np.int64


def _renumbered_trace(path: Path) -> Path:
    """A trace with string ids and one ``note_updated``: the importer
    renumbers its notes and queries and keeps the logged ids in ``trace_id``."""
    import json

    rng = np.random.default_rng(0)

    def emb():
        return [round(float(x), 3) for x in rng.normal(size=4)]

    lines = [{"event": "header", "format": "memsim-trace", "version": 1}]
    for i in range(12):
        lines.append({"event": "note_added", "id": f"n{i}", "t": float(i), "actor": "a",
                      "tokens": 10, "embedding": emb()})
        if i == 2:
            lines.append({"event": "note_updated", "id": "n2", "t": 2.5, "embedding": emb()})
    for k in range(6):
        lines.append({"event": "query", "id": f"q{k}", "t": 20.0 + k, "actor": "a",
                      "embedding": emb()})
        lines.append({"event": "used", "query": f"q{k}", "notes": [f"n{2 + k}", f"n{5 + k}"]})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_a_renumbered_trace_round_trips_through_its_own_ids(tmp_path):
    """The exports write the trace's own ids (``trace_id``) for notes and
    queries, in the run and the qrels alike: the qrels, read back with the
    trace, give the same judgements; ir-measures on both files agrees."""
    ir_measures = pytest.importorskip("ir_measures")
    from memsim.core.errors import ConfigError
    from memsim.data.importers.trace import import_trace

    trace = _renumbered_trace(tmp_path / "t.jsonl")
    s = import_trace(trace)
    assert "trace_id" in s.notes.columns and "trace_id" in s.queries.columns
    assert s.notes["trace_id"].duplicated().any()           # n2 has two versions
    write_stream(s, tmp_path / "stream")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "renum", "replicates": 1, "seed": 1, "save_rankings": True,
                       "candidates": 5, "budget_tokens": 1000},
        "workload": {"source": str(tmp_path / "stream")},
        "policies": {"sim": {"preset": "similarity-only"}}})
    res = memsim.run_experiment(exp, out=tmp_path / "runs", report=False)
    qrels = res.to_trec_qrels(tmp_path / "q.txt")
    rows = [line.split() for line in qrels.read_text().splitlines()]
    assert {r[0] for r in rows} == set(s.queries["trace_id"])
    assert {r[2] for r in rows} <= set(s.notes["trace_id"])
    back = import_trace(trace, qrels=qrels)
    key = ["query_id", "note_id"]
    assert back.qrels.sort_values(key).reset_index(drop=True).equals(
        s.qrels.sort_values(key).reset_index(drop=True))
    # the run names the same notes and queries
    ranked = res.to_trec_run(tmp_path / "r.txt")
    lines = [line.split() for line in ranked.read_text().splitlines()]
    assert lines and {r[0] for r in lines} <= set(s.queries["trace_id"])
    assert {r[2] for r in lines} <= set(s.notes["trace_id"])
    got = _by_trace_query(ir_measures.iter_calc([ir_measures.parse_measure("nDCG@10")],
                                                ir_measures.read_trec_qrels(str(qrels)),
                                                ir_measures.read_trec_run(str(ranked))))
    mine = res.queries.assign(qid=res.queries["query_id"].map(
        s.queries.set_index("query_id")["trace_id"])).set_index("qid")["ndcg@10"]
    assert len(got) == len(mine) and np.allclose(got.to_numpy(), mine.loc[got.index], atol=1e-12)
    # read back from its folder, the run needs the stream for its ids
    folder_run = memsim.load_run(res.path)
    with pytest.raises(ConfigError, match="give the stream the run replayed"):
        folder_run.to_trec_run(tmp_path / "x.txt")
    assert folder_run.to_trec_run(tmp_path / "r2.txt", stream=tmp_path / "stream") \
        .read_bytes() == ranked.read_bytes()
    assert not (tmp_path / "x.txt").exists()
    # a stream that is not the run's is refused rather than half mapped
    other = import_trace(trace)
    other.notes["note_id"] = other.notes["note_id"] + 100
    with pytest.raises(ConfigError, match=r"^stream: note \d+ is not in it"):
        res.trec_run_frame(stream=other)


def _by_trace_query(results) -> pd.Series:
    return pd.Series({r.query_id: r.value for r in results}, dtype=float).sort_index()
