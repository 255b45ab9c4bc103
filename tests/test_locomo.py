"""LoCoMo importer (memsim.data.importers.locomo) and the BM25 retriever (memsim.data.lexical).

The real data are read from ``../shared/data/locomo/locomo10.zip`` (never
copied into the repository); those tests are skipped when it is absent.
LoCoMo: Maharana et al., ACL 2024, CC BY-NC 4.0.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memsim.core.errors import ConfigError, StreamError
from memsim.data.importers import cli_import_locomo, import_locomo, load_locomo_records
from memsim.data.importers.locomo import evidence_in_top, parse_evidence, parse_session_datetime
from memsim.data.lexical import bm25_embeddings, bm25_scores, s_stem, tokenize

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ZIP = DATA / "locomo" / "locomo10.zip"

needs_data = pytest.mark.skipif(not ZIP.exists(),
                                reason=f"LoCoMo data not found at {ZIP} (shared data folder)")


@pytest.fixture(scope="module")
def turns():
    if not ZIP.exists():
        pytest.skip(f"LoCoMo data not found at {ZIP} (shared data folder)")
    return import_locomo(ZIP)


# ---------------------------------------------------------------------------
# Parsing helpers
# ---------------------------------------------------------------------------


def test_parse_session_datetime_forms():
    assert parse_session_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_session_datetime("12:09 am on 13 September, 2023") == datetime(2023, 9, 13, 0, 9)
    assert parse_session_datetime("10:37 AM on 27 June 2023") == datetime(2023, 6, 27, 10, 37)
    assert parse_session_datetime("7:55 pm on 9 Jun, 2023") == datetime(2023, 6, 9, 19, 55)
    with pytest.raises(ValueError, match="unrecognised session date"):
        parse_session_datetime("yesterday")


@pytest.mark.parametrize("raw, expected", [
    (["D3:11"], [("D3:11", 3, 11)]),
    (["D:11:26"], [("D:11:26", 11, 26)]),
    (["D30:05"], [("D30:05", 30, 5)]),
    (["D8:6; D9:17"], [("D8:6", 8, 6), ("D9:17", 9, 17)]),
    (["D9:1 D4:4 D4:6"], [("D9:1", 9, 1), ("D4:4", 4, 4), ("D4:6", 4, 6)]),
    (["D"], [("D", None, None)]),
    ("D1:2, D1:3", [("D1:2", 1, 2), ("D1:3", 1, 3)]),
    ([], []),
    (None, []),
])
def test_parse_evidence_normalises_known_typos(raw, expected):
    assert parse_evidence(raw) == expected


# ---------------------------------------------------------------------------
# A tiny hand-made conversation: every rule checked exactly
# ---------------------------------------------------------------------------


def tiny_record(sample_id="conv-7"):
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "11:50 pm on 1 March, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Rex."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Congrats!",
                 "blip_caption": "a photo of a puppy"},
            ],
            "session_2_date_time": "9:00 am on 3 March, 2023",
            "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "How is Rex doing?"},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "Rex loves the park."},
                {"speaker": "Ann", "dia_id": "D2:3", "text": "We go every morning."},
            ],
        },
        "qa": [
            {"question": "What is Ann's puppy called?", "answer": "Rex",
             "evidence": ["D1:1"], "category": 4},
            {"question": "Where does Rex like to go?", "answer": "the park",
             "evidence": ["D:2:2; D02:03", "D9:9"], "category": 1},
            {"question": "What is Bob's cat called?", "adversarial_answer": "Tom",
             "evidence": ["D1:1"], "category": 5},
        ],
        "observation": {"session_2_observation": {
            "Ann": [["Ann takes Rex to the park every morning.", "D2:2, D2:3"]],
            "Bob": [["Bob asked about Rex.", ["D2:1"]]]}},
        "session_summary": {"session_1_summary": "Ann adopted a puppy named Rex.",
                            "session_2_summary": "Ann and Rex go to the park."},
        "event_summary": {},
    }


def test_tiny_record_times_tokens_and_qrels(tmp_path):
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([tiny_record()]))
    s = import_locomo(path)
    n = s.notes
    assert n["dia_id"].tolist() == ["D1:1", "D1:2", "D2:1", "D2:2", "D2:3"]
    # day 0 = start of the first session; turn i of a session at +i minutes
    start2 = (datetime(2023, 3, 3, 9, 0) - datetime(2023, 3, 1, 23, 50)).total_seconds() / 86400
    assert n["created_at"].tolist() == pytest.approx(
        [0.0, 1 / 1440, start2, start2 + 1 / 1440, start2 + 2 / 1440])
    assert n["text"].iloc[0] == "Ann: I adopted a puppy named Rex."
    assert n["text"].iloc[1] == "Bob: Congrats!"  # captions are off by default
    assert n["tokens"].tolist() == [math.ceil(len(x) / 4) for x in n["text"]]
    assert (n["namespace"] == "conv-7").all() and (s.queries["namespace"] == "conv-7").all()
    # questions at 00:00 of the day after the last session (4 March)
    t = (datetime(2023, 3, 4) - datetime(2023, 3, 1, 23, 50)).total_seconds() / 86400
    assert s.queries["t"].tolist() == pytest.approx([t] * 3)
    rel = s.qrels.merge(n[["note_id", "dia_id"]]).groupby("query_id")["dia_id"].agg(list)
    assert rel.to_dict() == {0: ["D1:1"], 1: ["D2:2", "D2:3"]}  # no qrels for category 5
    assert s.queries["evidence"].tolist() == ["D1:1", "D2:2;D2:3;D9:9", "D1:1"]
    ev = s.meta["evidence"]
    assert (ev["references"], ev["resolved"], ev["split_strings"], ev["rewritten"]) == (5, 4, 1, 2)
    assert ev["unresolved"] == ["conv-7 query 1: 'D9:9'"]
    assert s.queries["adversarial_answer"].tolist() == ["", "", "Tom"]


def test_tiny_record_observations_and_summaries(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(tiny_record()))  # a single record as an object
    obs = import_locomo(path, notes="observations")
    assert obs.notes["text"].tolist() == ["Ann takes Rex to the park every morning.",
                                          "Bob asked about Rex."]
    assert obs.notes["dia_id"].tolist() == ["D2:2,D2:3", "D2:1"]
    turns = import_locomo(path)
    when = dict(zip(turns.notes["dia_id"], turns.notes["created_at"]))
    # an observation exists from its latest source turn on
    assert obs.notes["created_at"].tolist() == pytest.approx([when["D2:3"], when["D2:1"]])
    assert obs.qrels[["query_id", "note_id"]].values.tolist() == [[1, 0]]
    summ = import_locomo(path, notes="summaries", tokenizer="words")
    assert summ.notes["actor"].tolist() == ["summary", "summary"]
    assert summ.notes["created_at"].tolist() == pytest.approx(
        [when["D1:2"] + 1 / 1440, when["D2:3"] + 1 / 1440])
    assert summ.notes["tokens"].tolist() == [math.ceil(4 * len(x.split()) / 3)
                                            for x in summ.notes["text"]]
    assert summ.qrels[["query_id", "note_id"]].values.tolist() == [[0, 0], [1, 1]]


def test_captions_option(tmp_path):
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([tiny_record()]))
    s = import_locomo(path, captions=True, tokenizer=len)
    assert s.notes["text"].iloc[1] == "Bob: Congrats! [shares: a photo of a puppy]"
    assert s.notes["tokens"].iloc[1] == len(s.notes["text"].iloc[1])


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(StreamError, match="not found"):
        import_locomo(tmp_path / "missing.zip")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(StreamError, match=r"bad\.json: not valid JSON"):
        import_locomo(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"hello": 1}]))
    with pytest.raises(StreamError, match=r"other\.json: item 0: not a LoCoMo record"):
        import_locomo(other)
    rec = tiny_record()
    rec["conversation"]["session_2_date_time"] = "someday"
    dated = tmp_path / "dated.json"
    dated.write_text(json.dumps([rec]))
    with pytest.raises(StreamError, match=r"dated\.json: conv-7: session_2_date_time"):
        import_locomo(dated)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([tiny_record(), tiny_record()]))
    with pytest.raises(StreamError, match="conv-7' appears twice"):
        import_locomo(twice)
    good = tmp_path / "good.json"
    good.write_text(json.dumps([tiny_record()]))
    with pytest.raises(ConfigError, match="'notes' parameter"):
        import_locomo(good, notes="events")
    with pytest.raises(ConfigError, match="'tokenizer' parameter"):
        import_locomo(good, tokenizer="bpe")


# ---------------------------------------------------------------------------
# BM25 as dot products
# ---------------------------------------------------------------------------


def brute_bm25(docs, query, k1=1.2, b=0.75):
    """Okapi BM25 written term by term, as in Robertson and Zaragoza (2009)."""
    toks = [tokenize(d) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in toks) / n
    out = []
    for t in toks:
        score = 0.0
        for w in tokenize(query):
            nw = sum(w in u for u in toks)
            if nw == 0:
                continue
            idf = math.log(1 + (n - nw + 0.5) / (nw + 0.5))
            f = t.count(w)
            score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(t) / avgdl))
        out.append(score)
    return np.array(out)


def test_tokenize_and_stem():
    assert tokenize("Melanie's kids LOVE the beaches!") == ["melanie", "kid", "love", "beache"]
    assert [s_stem(w) for w in ("puppies", "glasses", "bus", "cats", "does", "ties")] == \
        ["puppy", "glasse", "bus", "cat", "doe", "ty"]


def test_bm25_vectors_are_exact_bm25_for_every_similarity():
    docs = ["Caroline went to a support group", "Melanie painted a sunrise by the lake",
            "The lake was calm and the sunrise red, a sunrise to remember", "Hi!",
            "Caroline paints too", "support support support group meeting"]
    groups = ["a", "a", "a", "a", "b", "b"]
    queries = ["When did Melanie paint the sunrise?", "support group", "zebra", "Caroline paints"]
    qgroups = ["a", "a", "a", "b"]
    emb = bm25_embeddings(docs, queries, groups, qgroups)
    ref = bm25_scores(docs, queries, groups, qgroups)
    assert np.allclose(np.linalg.norm(emb.notes, axis=1), 1.0, atol=1e-6)
    dots = emb.queries.astype(np.float64) @ emb.notes.T.astype(np.float64)
    for i, g in enumerate(qgroups):
        same = np.array(groups) == g
        brute = brute_bm25([d for d, s in zip(docs, same) if s], queries[i])
        assert ref[i, same] == pytest.approx(brute)
        assert dots[i, same] * emb.scale[i] == pytest.approx(brute, abs=1e-5)
        if emb.scale[i] > 0:
            # unit vectors: cosine = dot, squared L2 = 2 - 2 dot; all decrease with BM25
            q = emb.queries[i].astype(np.float64)
            assert np.linalg.norm(q) == pytest.approx(1.0)
            d2 = ((q - emb.notes[same].astype(np.float64)) ** 2).sum(axis=1)
            assert d2 == pytest.approx(2.0 - 2.0 * brute / emb.scale[i], abs=1e-5)
    assert emb.scale[2] == 0 and not emb.queries[2].any()  # no known term: a zero vector
    assert np.isneginf(ref[0, 4:]).all()  # other group


def test_bm25_rejects_bad_parameters():
    with pytest.raises(ConfigError, match="'k1' parameter"):
        bm25_embeddings(["a b"], ["a"], k1=-1.0)
    with pytest.raises(ConfigError, match="'b' parameter"):
        bm25_embeddings(["a b"], ["a"], b=1.5)


# ---------------------------------------------------------------------------
# The real data
# ---------------------------------------------------------------------------


@needs_data
def test_locomo_counts_and_evidence_resolution(turns):
    assert turns.n_notes == 5882
    assert turns.n_queries == 1986
    ev = turns.meta["evidence"]
    # measured: 2,821 of 2,824 references resolve (99.89%)
    assert ev["references"] == 2824
    assert ev["resolved"] / ev["references"] >= 0.99
    assert ev["resolved"] == 2821
    assert turns.notes["namespace"].nunique() == 10
    assert turns.meta["licence"] == "CC BY-NC 4.0"


@needs_data
def test_locomo_adversarial_questions_have_no_qrels(turns):
    q = turns.queries
    assert sorted(q["category"].unique()) == [1, 2, 3, 4, 5]
    adv = set(q.loc[q["category"] == 5, "query_id"])
    assert len(adv) == 446
    assert adv.isdisjoint(turns.qrels["query_id"])
    assert (turns.qrels["gain"] == 1.0).all()
    # every other question has qrels, but four whose evidence list is empty
    answerable = q.loc[q["category"] != 5]
    bare = answerable.loc[~answerable["query_id"].isin(turns.qrels["query_id"])]
    assert len(bare) == 4 and (bare["evidence"] == "").all()


@needs_data
def test_locomo_times_and_namespaces(turns):
    n, q = turns.notes, turns.queries
    ordered = n.sort_values(["namespace", "session", "turn"])
    steps = ordered.groupby("namespace")["created_at"].diff().dropna()
    assert (steps > 0).all()  # strictly increasing within a conversation
    assert (n.groupby("namespace")["created_at"].min() == 0.0).all()
    last = n.groupby("namespace")["created_at"].max()
    qt = q.groupby("namespace")["t"].agg(["min", "max"])
    assert (qt["min"] == qt["max"]).all() and (qt["min"] > last).all()
    assert (qt["min"] - last < 1.0).all()  # the day after the last session
    spans = last.round()
    assert spans.min() >= 166 and spans.max() <= 294
    both = turns.qrels.merge(q[["query_id", "namespace"]]).merge(
        n[["note_id", "namespace"]], on="note_id", suffixes=("_q", "_n"))
    assert (both["namespace_q"] == both["namespace_n"]).all()
    assert all(t.startswith(f"{a}: ") for t, a in zip(n["text"], n["actor"]))
    assert (n["tokens"] == np.ceil(n["text"].str.len() / 4)).all()


def nested_records_from_zip(path: Path) -> list[dict]:
    """The zip's flat records rewritten in the locomo10.json layout, written
    here independently of the importer, in the zip's member order."""
    out = []
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not name.endswith(".json"):
                continue
            flat = json.loads(z.read(name))
            out.append({
                "qa": flat["qa"],
                "conversation": {k: v for k, v in flat.items()
                                 if k in ("speaker_a", "speaker_b")
                                 or re.fullmatch(r"session_\d+(_date_time)?", k)},
                "event_summary": {k: v for k, v in flat.items() if k.startswith("events_")},
                "observation": {k: v for k, v in flat.items() if k.endswith("_observation")},
                "session_summary": {k: v for k, v in flat.items()
                                    if re.fullmatch(r"session_\d+_summary", k)},
                "sample_id": f"conv-{Path(name).stem}",
            })
    return out


@needs_data
def test_json_list_layout_gives_the_same_stream(turns, tmp_path):
    records = nested_records_from_zip(ZIP)
    assert [r["sample_id"] for r in records][:2] == ["conv-50", "conv-49"]  # unsorted on purpose
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps(records))
    assert [r["sample_id"] for r in load_locomo_records(path)] == \
        [r["sample_id"] for r in load_locomo_records(ZIP)]
    other = import_locomo(path)
    pd.testing.assert_frame_equal(other.notes, turns.notes)
    pd.testing.assert_frame_equal(other.queries, turns.queries)
    pd.testing.assert_frame_equal(other.qrels, turns.qrels)
    assert np.array_equal(other.note_embeddings, turns.note_embeddings)
    assert np.array_equal(other.query_embeddings, turns.query_embeddings)
    assert {k: v for k, v in other.meta.items() if k != "source"} == \
        {k: v for k, v in turns.meta.items() if k != "source"}


@needs_data
def test_similarity_only_recall_on_locomo_turns(turns):
    """Similarity-only retrieval by cosine of the BM25 vectors, per conversation.

    Measured on the 1,536 answerable questions with resolved evidence: an
    evidence turn in the top 5 for 0.5645 of them (all of the evidence for
    0.4609; mean share of evidence found 0.5054); the data's README quotes
    about 0.47 for plain BM25. Top 10: 0.6562.
    """
    found, need = evidence_in_top(turns, 5)
    assert len(found) == 1536
    assert (found > 0).mean() >= 0.50
    assert (found == need).mean() >= 0.42
    found10, _ = evidence_in_top(turns, 10)
    assert (found10 > 0).mean() >= (found > 0).mean()


@needs_data
def test_cosine_of_cached_vectors_is_bm25_on_one_conversation(turns):
    n = turns.notes[turns.notes["namespace"] == "conv-26"]
    q = turns.queries[turns.queries["namespace"] == "conv-26"].head(40)
    ref = bm25_scores(n["text"].tolist(), q["text"].tolist())
    nemb = turns.note_embeddings[n.index.to_numpy()].astype(np.float64)
    qemb = turns.query_embeddings[q.index.to_numpy()].astype(np.float64)
    cos = (qemb @ nemb.T) / np.maximum(np.linalg.norm(qemb, axis=1), 1e-300)[:, None]
    # cos = BM25 / (M |c_q|): divide out the per-query factor
    ratio = np.where(ref > 1e-9, cos / np.where(ref > 1e-9, ref, 1.0), np.nan)
    per_query = np.nanmean(ratio, axis=1)
    assert np.allclose(cos, ref * per_query[:, None], atol=1e-5)


@needs_data
def test_observation_and_summary_notes():
    obs = import_locomo(ZIP, notes="observations")
    assert obs.n_notes == 2541 and obs.n_queries == 1986
    assert obs.meta["evidence"]["turns_with_observation"] == 1879
    summ = import_locomo(ZIP, notes="summaries")
    assert summ.n_notes == 272
    for s in (obs, summ):
        q = s.queries
        assert set(q.loc[q["category"] == 5, "query_id"]).isdisjoint(s.qrels["query_id"])
        assert np.isfinite(s.notes["created_at"]).all()
        assert (s.notes.groupby("namespace")["created_at"].max()
                < q.groupby("namespace")["t"].min()).all()


@needs_data
def test_cli_import_writes_a_readable_stream(tmp_path):
    from memsim.data.stream import read_stream

    out = tmp_path / "locomo-summaries"
    s = cli_import_locomo(ZIP, out, notes="summaries")
    back = read_stream(out)
    pd.testing.assert_frame_equal(back.notes, s.notes)
    pd.testing.assert_frame_equal(back.queries, s.queries)
    pd.testing.assert_frame_equal(back.qrels, s.qrels)
    assert np.array_equal(back.note_embeddings, s.note_embeddings)
    assert back.meta["evidence"]["resolved"] == 2821
    with pytest.raises(StreamError, match="non-empty"):
        cli_import_locomo(ZIP, out, notes="summaries")


@needs_data
@pytest.mark.slow
def test_locomo_experiment_shows_what_real_ages_do(tmp_path, monkeypatch):
    """experiments/locomo.toml imports data:locomo on load (here the shared zip,
    registered as `memsim data get locomo --from` does); on real ages the
    5%-a-day decay loses the months-old evidence that similarity finds."""
    import dataclasses

    import memsim
    from memsim.data import datasets

    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "data"))
    datasets.register("locomo", ZIP)

    exp = memsim.load_experiment(Path(__file__).resolve().parents[1] / "experiments"
                                 / "locomo.toml")
    keep = ("similarity-only", "hivemind-2025-bug", "hivemind")
    exp = dataclasses.replace(exp, policies={k: exp.policies[k] for k in keep})
    res = memsim.run_experiment(exp, out=None)
    m = res.summary.pivot_table(index="metric", columns="policy", values="mean")
    assert m.loc["recall_age_90_180", "hivemind-2025-bug"] < 0.05
    assert m.loc["recall_age_90_180", "similarity-only"] > 0.4
    # the preset's assumed relevance cut (0.7 of the best score, chosen on
    # cosines) drops some evidence on BM25 scores: 0.33, still far above the bug
    assert m.loc["recall_age_90_180", "hivemind"] > 0.25
    assert (res.queries["tokens_used"] <= 1500).all()
