"""Memory-layer traces (memsim.data.importers.trace) and the as-logged baseline.

The LoCoMo round trip reads ``../shared/data/locomo/locomo10.zip`` (never
copied into the repository) and is skipped when it is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError, StreamError
from memsim.data.importers.trace import import_trace, write_trace
from memsim.policies.rank import AsLogged
from memsim.data.stream import LoggedRankings, make_stream, read_stream, write_stream
from memsim.checks.testing import check_component
from memsim.data.workload import SyntheticWorkload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "experiments" / "traces" / "example.jsonl"
ZIP = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip"


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _metrics(stream_dir: Path, presets, **experiment) -> pd.DataFrame:
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "trace", "replicates": 1, "seed": 5, **experiment},
        "workload": {"source": str(stream_dir)},
        "policies": {p: {"preset": p} for p in presets}})
    return memsim.run_experiment(exp, out=None).queries


def _same_metrics(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert len(a) == len(b) > 0
    for col in a.columns:
        if a[col].dtype.kind in "fiub":
            assert np.array_equal(a[col].to_numpy(), b[col].to_numpy(), equal_nan=True), col
        else:
            assert (a[col].astype(str).to_numpy() == b[col].astype(str).to_numpy()).all(), col


TINY = [
    {"event": "header", "format": "memsim-trace", "version": 1, "time_unit": "hour"},
    {"event": "note_added", "id": "n1", "t": 0, "actor": "ann", "text": "the cat sat on the mat"},
    {"event": "note_added", "id": "n2", "t": 1, "actor": "bob", "text": "dogs chase cats",
     "tokens": 7, "tier": "longterm", "importance": 2.0},
    {"event": "note_added", "id": "n3", "t": 2, "actor": "ann", "text": "a note about mats"},
    {"event": "query", "id": "q1", "t": 3, "actor": "ann", "text": "where did the cat sit",
     "category": "single-hop", "budget": 100},
    {"event": "retrieved", "query": "q1", "notes": ["n1", "n3"], "scores": [0.9, 0.4]},
    {"event": "used", "query": "q1", "notes": ["n1"]},
    {"event": "note_updated", "id": "n1", "t": 4, "text": "the cat moved to the sofa"},
    {"event": "query", "id": "q2", "t": 5, "actor": "bob", "text": "where is the cat now",
     "budget": 100},
    {"event": "used", "query": "q2", "notes": ["n1", "n2", "n1"]},
    {"event": "accessed", "note": "n2", "t": 5.5, "actor": "bob"},
    {"event": "note_deleted", "id": "n3", "t": 6},
]


def test_tiny_trace_versions_ids_times_and_qrels(tmp_path):
    s = import_trace(_write(tmp_path / "tiny.jsonl", TINY))
    n, q = s.notes, s.queries
    # n1 was updated: two versions, numbered in file order, logged id kept
    assert n["trace_id"].tolist() == ["n1", "n2", "n3", "n1"]
    assert n["version"].tolist() == [0, 0, 0, 1]
    assert np.allclose(n["created_at"], np.array([0, 1, 2, 4]) / 24)
    assert np.allclose(n["first_created_at"].iloc[3], 0.0)
    assert n["expires_at"].iloc[0] == pytest.approx(4 / 24)     # superseded
    assert n["expires_at"].iloc[2] == pytest.approx(6 / 24)     # deleted
    assert np.isnan(n["expires_at"].iloc[1])
    assert n["tokens"].tolist()[:2] == [6, 7]                   # ceil(22 / 4); given
    assert n["tier"].iloc[1] == "longterm" and n["importance"].iloc[1] == 2.0
    assert n["text"].iloc[3] == "the cat moved to the sofa"
    assert q["category"].tolist() == ["single-hop", ""]
    assert q["budget_tokens"].tolist() == [100, 100]
    # qrels from used: q1 -> n1 version 0, q2 -> n1 version 1 (live at t = 5 h) and n2
    assert s.meta["qrels_from"] == "used"
    pairs = set(zip(s.qrels["query_id"], s.qrels["note_id"]))
    assert pairs == {(0, 0), (1, 3), (1, 1)}
    assert s.retrieved[["query_id", "rank", "note_id"]].values.tolist() == [[0, 1, 0], [0, 2, 2]]
    assert s.retrieved["score"].tolist() == [0.9, 0.4]
    assert s.accesses["note_id"].tolist() == [1]
    assert s.note_embeddings.shape[0] == 4 and s.meta["embedding"]["retriever"] == "bm25"


def test_judgements_take_precedence_and_iso_times(tmp_path):
    events = [
        {"event": "header", "origin": "2025-01-01T00:00:00Z"},
        {"event": "note_added", "id": 7, "t": "2025-01-02T00:00:00Z", "actor": "a", "tokens": 3,
         "embedding": [1, 0]},
        {"event": "note_added", "id": 9, "t": "2025-01-02T12:00:00", "actor": "a", "tokens": 3,
         "embedding": [0, 1]},
        {"event": "query", "id": 1, "t": 2.5, "actor": "a", "embedding": [1, 1]},
        {"event": "used", "query": 1, "notes": [7]},
        {"event": "judgement", "query": 1, "note": 9, "gain": -0.5},
    ]
    s = import_trace(_write(tmp_path / "j.jsonl", events))
    assert s.notes["note_id"].tolist() == [7, 9]                 # integer ids kept
    assert s.notes["created_at"].tolist() == [1.0, 1.5]
    assert s.meta["qrels_from"] == "judgement"
    assert s.qrels.values.tolist() == [[1, 9, -0.5]]
    assert s.retrieved is None and s.meta["logged_rankings"] is False


@pytest.mark.parametrize("line, field, fragment", [
    ("not json", None, "not valid JSON"),
    ({"event": "note_added", "id": 1, "t": 0, "actor": "a", "tokens": 0}, "tokens",
     "positive integer"),
    ({"event": "note_added", "id": 1, "t": "yesterday", "actor": "a", "tokens": 3}, "t",
     "ISO 8601"),
    ({"event": "note_added", "id": 1, "t": 0, "tokens": 3}, "actor", "missing"),
    ({"event": "note_added", "id": 1, "t": 0, "actor": "a"}, "tokens", "'tokens' or 'text'"),
    ({"event": "note_added", "id": 0, "t": 0, "actor": "a", "tokens": 3}, "id", "already added"),
    ({"event": "query", "id": 5, "t": 0, "actor": "a", "text": "x", "embedding": [1]},
     "embedding", "everywhere or nowhere"),
    ({"event": "retrieved", "query": 99, "notes": [0]}, "query", "not been logged"),
    ({"event": "used", "query": 0, "notes": [0, "zz"]}, "notes[1]", "not been added"),
    ({"event": "retrieved", "query": 0, "notes": [0], "scores": [1, 2]}, "scores", "1 numbers"),
    ({"event": "judgement", "query": 0, "note": 0, "gain": 0}, "gain", "non-zero"),
    ({"event": "note_updated", "id": 0, "t": -1}, "t", "before the note's previous event"),
    ({"event": "banana"}, "event", "unknown event"),
    ({"event": "header", "version": 2}, "event", "first line"),
])
def test_bad_line_names_file_line_and_field(tmp_path, line, field, fragment):
    good = [{"event": "note_added", "id": 0, "t": 0, "actor": "a", "text": "hello world"},
            {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "hello"}]
    path = tmp_path / "bad.jsonl"
    text = "".join(json.dumps(e) + "\n" for e in good)
    text += (line if isinstance(line, str) else json.dumps(line)) + "\n"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(StreamError) as err:
        import_trace(path)
    msg = str(err.value)
    assert msg.startswith("bad.jsonl: line 3")
    if field is not None:
        assert f"field {field!r}" in msg
    assert fragment in msg
    assert "\n" not in msg


def test_newer_version_and_missing_file(tmp_path):
    with pytest.raises(StreamError, match=r"line 1: field 'version': .*newer"):
        import_trace(_write(tmp_path / "v.jsonl", [{"event": "header", "version": 2}]))
    with pytest.raises(StreamError, match="trace not found"):
        import_trace(tmp_path / "nope.jsonl")


def test_synthetic_round_trip_gives_identical_metrics(tmp_path):
    stream = SyntheticWorkload(horizon_days=12, backfill_days=12, notes_per_day=8,
                               queries_per_day=4).generate(3)
    write_trace(stream, tmp_path / "t.jsonl", embeddings=True)
    back = import_trace(tmp_path / "t.jsonl")
    assert np.array_equal(back.note_embeddings, stream.note_embeddings)
    # the synthetic class asked becomes the query's category
    assert (back.queries["category"] == stream.queries["note_class"].astype(str)).all()
    write_stream(stream, tmp_path / "direct")
    write_stream(back, tmp_path / "traced")
    presets = ("hivemind", "feather", "ai-memory", "similarity-only")
    direct = _metrics(tmp_path / "direct", presets)
    _same_metrics(direct, _metrics(tmp_path / "traced", presets))
    # queries.parquet keeps each query's category (here the class asked) and actor
    want = stream.queries.set_index("query_id")["note_class"].astype(str)
    assert (direct["category"].to_numpy() == want.reindex(direct["query_id"]).to_numpy()).all()
    assert direct["actor"].notna().all()


@pytest.mark.skipif(not ZIP.exists(), reason=f"LoCoMo data not found at {ZIP} (shared data)")
def test_locomo_round_trip_gives_identical_metrics(tmp_path):
    from memsim.data.importers import import_locomo

    direct = import_locomo(ZIP)
    write_trace(direct, tmp_path / "locomo.jsonl")      # text only: BM25 again on import
    back = import_trace(tmp_path / "locomo.jsonl")
    assert np.array_equal(back.note_embeddings, direct.note_embeddings)
    assert back.qrels.equals(direct.qrels)
    assert (back.queries["category"] == direct.queries["category"].astype(str)).all()
    write_stream(direct, tmp_path / "direct")
    write_stream(back, tmp_path / "traced")
    presets = ("hivemind", "similarity-only")
    _same_metrics(_metrics(tmp_path / "direct", presets, candidates=50),
                  _metrics(tmp_path / "traced", presets, candidates=50))


def test_cli_import_writes_stream_with_retrieved(tmp_path):
    out = tmp_path / "example"
    assert main(["stream", "import", "trace", str(EXAMPLE), "--out", str(out)]) == 0
    header = json.loads((out / "stream.json").read_text())
    assert header["qrels_from"] == "used" and header["logged_rankings"] is True
    assert (out / "retrieved.parquet").exists()
    s = read_stream(out)
    assert len(s.retrieved) > 0 and s.retrieved["rank"].min() == 1
    assert main(["stream", "import", "trace", str(tmp_path / "x.jsonl"), "--out",
                 str(tmp_path / "y")]) == 2


def test_retrieved_table_is_validated(tmp_path):
    s = import_trace(_write(tmp_path / "tiny.jsonl", TINY))
    bad = s.retrieved.copy()
    bad.loc[1, "rank"] = 1
    with pytest.raises(StreamError, match=r"retrieved: column 'rank': row 1 .*duplicate"):
        make_stream(s.notes, s.queries, s.qrels, None, s.note_embeddings, s.query_embeddings,
                    retrieved=bad)
    bad = s.retrieved.assign(note_id=[0, 42])
    with pytest.raises(StreamError, match="note_id 42 is not in notes"):
        make_stream(s.notes, s.queries, s.qrels, None, s.note_embeddings, s.query_embeddings,
                    retrieved=bad)
    rank, score = LoggedRankings(s).dense(np.array([0, 1]), np.array([2, 0, 1]))
    assert rank.tolist() == [[2, 1, np.inf], [np.inf] * 3]
    assert score[0].tolist()[:2] == [0.4, 0.9]


def test_as_logged_replays_the_logged_ranking(tmp_path):
    check_component(AsLogged)
    stream = import_trace(EXAMPLE)
    write_stream(stream, tmp_path / "s")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "asl", "replicates": 1, "seed": 1, "save_rankings": True,
                       "budget_tokens": 100000},
        "workload": {"source": str(tmp_path / "s")},
        "policies": {"today": {"preset": "as-logged"},
                     "hivemind": {"preset": "hivemind"}}})
    res = memsim.run_experiment(exp, out=None)
    got = res.rankings[res.rankings["policy"] == "today"]
    got = got.sort_values(["query_id", "rank"])[["query_id", "rank", "note_id", "score"]]
    want = stream.retrieved.sort_values(["query_id", "rank"])
    # every returned note existed at its query in the example: the same lists
    assert got[["query_id", "rank", "note_id"]].values.tolist() == \
        want[["query_id", "rank", "note_id"]].values.tolist()
    assert np.allclose(got["score"], want["score"])
    # with a budget for all of them, everything returned is packed
    q = res.queries[res.queries["policy"] == "today"]
    assert (q["n_packed"].to_numpy() == want.groupby("query_id").size()
            .reindex(q["query_id"]).fillna(0).to_numpy()).all()


def test_as_logged_needs_logged_rankings(tmp_path):
    stream = SyntheticWorkload(horizon_days=3, backfill_days=3).generate(0)
    write_stream(stream, tmp_path / "s")
    # refused before any replay, naming the policy's ranker
    with pytest.raises(ConfigError, match=r"^policies\.as-logged\.ranker: 'as-logged' replays "
                       "the rankings a production system logged, and this workload has none"):
        _metrics(tmp_path / "s", ("as-logged",))


# ---------------------------------------------------------------------------
# The importer's refusals, the published schema and `memsim stream check`
# ---------------------------------------------------------------------------

GOOD = [{"event": "note_added", "id": 0, "t": 0, "actor": "a", "text": "hello world"},
        {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "hello"}]


def _refusal(tmp_path, events, name="bad.jsonl") -> str:
    with pytest.raises(StreamError) as err:
        import_trace(_write(tmp_path / name, events))
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_an_empty_trace_is_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(StreamError, match=r"^empty.jsonl: an empty trace"):
        import_trace(tmp_path / "empty.jsonl")
    msg = _refusal(tmp_path, [{"event": "header", "version": 1}], "header.jsonl")
    assert msg.startswith("header.jsonl: an empty trace")


def test_times_must_not_go_backwards(tmp_path):
    events = GOOD + [{"event": "note_added", "id": 1, "t": 0.5, "actor": "a", "text": "late"}]
    msg = _refusal(tmp_path, events)
    assert msg.startswith("bad.jsonl: line 3: field 't': 0.5 days is before the previous "
                          "event's time (1 days, line 2)")
    assert '"ordered": false' in msg


def test_an_unordered_trace_is_sorted_stably_by_time(tmp_path):
    ordered = import_trace(_write(tmp_path / "tiny.jsonl", TINY))
    header, rest = TINY[0], TINY[1:]
    # the same events shuffled: each query's retrieved / used events follow
    # their query's time, events of one time keep their file order
    shuffled = [rest[i] for i in (10, 7, 6, 3, 4, 0, 1, 9, 5, 8, 2)]
    assert sorted(map(json.dumps, shuffled)) == sorted(map(json.dumps, rest))
    with pytest.raises(StreamError, match=r"^s.jsonl: line 2: "):   # as an ordered trace
        import_trace(_write(tmp_path / "s.jsonl", [header, *shuffled]))
    back = import_trace(_write(tmp_path / "u.jsonl", [{**header, "ordered": False}, *shuffled]))
    for name in ("notes", "queries", "qrels", "retrieved", "accesses"):
        a, b = getattr(ordered, name), getattr(back, name)
        assert a.equals(b), name
    assert np.array_equal(ordered.note_embeddings, back.note_embeddings)
    assert "ordered" not in back.meta
    # an error of an unordered trace still names its own line, and a check
    # lists them by line
    bad = [{**header, "ordered": False}, *shuffled[:3], {**rest[3], "actor": 5}, *shuffled[3:]]
    with pytest.raises(StreamError, match=r"u2.jsonl: line 5: field 'actor'"):
        import_trace(_write(tmp_path / "u2.jsonl", bad))
    from memsim.data.importers.trace import check_trace
    bad[2] = {**bad[2], "t": "soon"}           # a time that cannot be sorted: handled last
    errors, _ = check_trace(_write(tmp_path / "u3.jsonl", bad))
    assert [e.split(": ")[1] for e in errors][:2] == ["line 3", "line 5"]


@pytest.mark.parametrize("header, t", [
    ({"event": "header"}, 1e300),
    ({"event": "header"}, 1_733_000_000),              # epoch seconds read as days
    ({"event": "header", "time_unit": "second"}, 1_733_000_000_000),   # epoch ms as seconds
    ({"event": "header", "origin": "0001-01-01T00:00:00Z"}, "9999-12-31T00:00:00Z"),
])
def test_absurd_times_are_one_line_errors(tmp_path, header, t):
    msg = _refusal(tmp_path, [header, {**GOOD[0], "t": t}])
    assert msg.startswith("bad.jsonl: line 2: field 't': ")
    assert "days from the origin, more than 1,000,000" in msg and "time_unit" in msg


@pytest.mark.parametrize("field, value", [
    ("id", 2 ** 64), ("tokens", 2 ** 63), ("t", 10 ** 400), ("importance", -(2 ** 70)),
    ("budget", 2 ** 64), ("category", 2 ** 64), ("gain", 2 ** 65), ("embedding", [1, 2 ** 64]),
])
def test_integers_beyond_64_bits_are_one_line_errors(tmp_path, field, value):
    note = {"event": "note_added", "id": 0, "t": 0, "actor": "a", "tokens": 3}
    query = {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "x"}
    judgement = {"event": "judgement", "query": 0, "note": 0, "gain": 1}
    if field in ("budget", "category"):
        query[field] = value
    elif field == "gain":
        judgement[field] = value
    elif field == "embedding":
        note = {**note, "embedding": value}
    else:
        note[field] = value
    line = 3 if field == "gain" else 2 if field in ("budget", "category") else 1
    events = [note, query, judgement]
    msg = _refusal(tmp_path, events)
    want = "embedding[1]" if field == "embedding" else field
    assert msg.startswith(f"bad.jsonl: line {line}: field {want!r}: ")
    assert "beyond 64 bits" in msg


def test_time_unit_takes_plurals(tmp_path):
    one = import_trace(_write(tmp_path / "a.jsonl", TINY))
    plural = import_trace(_write(tmp_path / "b.jsonl", [{**TINY[0], "time_unit": "hours"},
                                                         *TINY[1:]]))
    assert np.array_equal(one.notes["created_at"], plural.notes["created_at"])
    from memsim.data.importers.trace import TIME_UNITS
    for unit in ("day", "hour", "minute", "second", "millisecond"):
        assert TIME_UNITS[unit + "s"] == TIME_UNITS[unit]
    msg = _refusal(tmp_path, [{"event": "header", "time_unit": "fortnights"}, *GOOD])
    assert "field 'time_unit': must be one of day, hour" in msg and "hours" in msg


MULTI = [
    {"event": "header", "time_unit": "hours"},
    {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "hello world"},
    {"event": "note_added", "id": 2, "t": 1, "actor": 7, "tokens": 0},
    {"event": "note_added", "id": 2 ** 64, "t": 2, "actor": "a", "text": "x"},
    {"event": "query", "id": 1, "t": 3, "actor": "a", "text": "hello"},
    {"event": "used", "query": 9, "notes": [1]},
    "not json",
    {"event": "judgement", "query": 1, "note": 1, "gain": 0},
    {"event": "note_added", "id": 3, "t": 1, "actor": "a", "text": "late"},
    {"event": "banana"},
]


def _write_lines(path: Path, items: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items),
                    encoding="utf-8")
    return path


def test_stream_check_lists_every_error_and_writes_nothing(tmp_path, capsys):
    path = _write_lines(tmp_path / "multi.jsonl", MULTI)
    before = sorted(tmp_path.iterdir())
    assert main(["stream", "check", "trace", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert sorted(tmp_path.iterdir()) == before
    where = [(line.split(": ")[1], line.split(": ")[2]) for line in lines]
    assert where == [("line 3", "field 'actor'"), ("line 3", "field 'tokens'"),
                     ("line 4", "field 'id'"), ("line 6", "field 'query'"),
                     ("line 7", "not valid JSON"), ("line 8", "field 'gain'"),
                     ("line 9", "field 't'"), ("line 10", "field 'event'")]
    assert all(line.startswith("multi.jsonl: line ") for line in lines)
    assert err.strip() == f"memsim: error: {path}: 8 errors"
    # a limit, then a count of the rest
    assert main(["stream", "check", "trace", str(path), "--limit", "3"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[-1] == "... and 5 more"
    # the importer stops at the first of them
    with pytest.raises(StreamError, match=r"^multi.jsonl: line 3: field 'actor'"):
        import_trace(path)


def test_stream_check_without_jsonschema_reports_each_bad_line(tmp_path, monkeypatch):
    """Without jsonschema the importer's own rules check each line: the same
    lines are refused, with its first error of each."""
    import memsim.data.importers.trace as trace

    monkeypatch.setattr(trace, "_schema_validator", lambda: None)
    errors, more = trace.check_trace(_write_lines(tmp_path / "multi.jsonl", MULTI))
    assert more == 0
    assert [e.split(": ")[1] for e in errors] == [f"line {n}" for n in (3, 4, 6, 7, 8, 9, 10)]
    assert "field 'actor': must be a string, got 7" in errors[0]


def test_stream_check_passes_a_good_trace_and_checks_the_whole_stream(tmp_path, capsys):
    assert main(["stream", "check", "trace", str(EXAMPLE)]) == 0
    assert "a valid trace" in capsys.readouterr().out
    # every line fine, but the stream is not: a budget on one query only
    events = GOOD + [{"event": "query", "id": 1, "t": 2, "actor": "a", "text": "x",
                      "budget": 10}]
    assert main(["stream", "check", "trace", str(_write(tmp_path / "b.jsonl", events))]) == 2
    assert ("b.jsonl: line 2: field 'budget': query 0 has none while other queries have one"
            in capsys.readouterr().out)


@pytest.mark.parametrize("which, line", [("query", 3), ("note", 2)])
def test_text_an_embedder_needs_is_asked_for_at_its_line(tmp_path, which, line):
    """Without logged vectors, BM25 embeds the text: a note or query without
    it is refused naming its line and field (it named the id only)."""
    events = [{"event": "note_added", "id": 0, "t": 0, "actor": "a", "text": "hello world"},
              {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "more"},
              {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "hello"}]
    del events[line - 1]["text"]
    if which == "note":
        events[line - 1]["tokens"] = 5  # a note needs tokens or text
    msg = _refusal(tmp_path, events)
    assert msg.startswith(f"bad.jsonl: line {line}: field 'text': {which} "), msg
    assert "required when the trace has no embeddings (bm25 needs text)" in msg


def _schema():
    jsonschema = pytest.importorskip("jsonschema")
    from memsim.data.importers.trace import SCHEMA_PATH
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_ships_in_the_package():
    from memsim.data.importers.trace import SCHEMA_PATH
    assert SCHEMA_PATH.parent.parent == Path(memsim.__file__).parent
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$id"] == "urn:memsim:schema:trace:1"
    units = schema["$defs"]["header"]["properties"]["time_unit"]["enum"]
    from memsim.data.importers.trace import EVENTS, TIME_UNITS
    assert sorted(units) == sorted(TIME_UNITS)
    assert schema["properties"]["event"]["enum"] == list(EVENTS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`{u}`" in readme for u in TIME_UNITS)


# lines after GOOD (note 0 at t = 0, query 0 at t = 1): (line, valid?)
AGREE = [
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "text": "x"}, True),
    ({"event": "note_added", "id": "n", "t": 2, "actor": "a", "tokens": 3.0, "text": "x"}, True),
    ({"event": "note_added", "id": 1, "t": "2025-01-01T00:00:00Z", "actor": "a", "text": "x",
      "tier": "core", "type": "semantic", "importance": 0, "salience": 2.5, "pinned": True,
      "expires_at": "2026-01-01T00:00:00", "namespace": "u1", "extra": {"any": 1}}, True),
    ({"event": "query", "id": 1, "t": 2, "actor": "a", "text": "x", "category": 4}, True),
    ({"event": "query", "id": "q", "t": 2, "actor": "a", "text": "x", "category": "c"}, True),
    ({"event": "retrieved", "query": 0, "notes": [0], "scores": [0.5]}, True),
    ({"event": "used", "query": 0, "notes": [0, 0]}, True),
    ({"event": "judgement", "query": 0, "note": 0, "gain": -1.5}, True),
    ({"event": "accessed", "note": 0, "t": 2, "actor": "b"}, True),
    ({"event": "note_updated", "id": 0, "t": 2, "text": "new"}, True),
    ({"event": "note_deleted", "id": 0, "t": 2}, True),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": 0}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": "3"}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": 2 ** 64}, False),
    ({"event": "note_added", "id": 2 ** 64, "t": 2, "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": "", "t": 2, "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": True, "t": 2, "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": 1.5, "t": 2, "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": 1, "t": "yesterday", "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": 1, "t": 10 ** 400, "actor": "a", "tokens": 3}, False),
    ({"event": "note_added", "id": 1, "t": 2, "tokens": 3}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": 5, "tokens": 3}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "text": 5}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a"}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": 3, "pinned": "yes"}, False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": 3, "importance": -1},
     False),
    ({"event": "note_added", "id": 1, "t": 2, "actor": "a", "tokens": 3, "importance": True},
     False),
    ({"event": "query", "id": 1, "t": 2, "actor": "a", "text": "x", "budget": 0}, False),
    ({"event": "query", "id": 1, "t": 2, "actor": "a", "text": "x", "category": 1.5}, False),
    ({"event": "query", "id": 1, "t": 2, "actor": "a", "text": "x", "category": True}, False),
    ({"event": "retrieved", "query": 0, "notes": "x"}, False),
    ({"event": "retrieved", "query": 0, "notes": [0], "scores": ["high"]}, False),
    ({"event": "judgement", "query": 0, "note": 0, "gain": 0}, False),
    ({"event": "judgement", "query": 0, "note": 0, "gain": "1"}, False),
    ({"event": "judgement", "query": 0, "note": 0}, False),
    ({"event": "accessed", "note": 0, "t": 2}, False),
    ({"event": "banana"}, False),
    ({"id": 1}, False),
]


@pytest.mark.parametrize("line, valid", AGREE, ids=range(len(AGREE)))
def test_schema_and_importer_agree(tmp_path, line, valid):
    validator = _schema()
    errors = list(validator.iter_errors(line))
    assert (not errors) == valid, [e.message for e in errors]
    path = _write(tmp_path / "t.jsonl", GOOD + [line])
    if valid:
        import_trace(path)
        return
    with pytest.raises(StreamError) as err:
        import_trace(path)
    # the importer's field is one the schema names
    from memsim.data.importers.trace import _schema_errors
    fields = {f for f, _ in _schema_errors(validator, line)}
    msg = str(err.value)
    assert msg.startswith("t.jsonl: line 3: field ")
    assert msg.split("field ")[1].split(":")[0].strip("'") in fields


def test_trec_qrels_beside_judgement_events(tmp_path, capsys):
    events = [*TINY[:5], {"event": "judgement", "query": "q1", "note": "n3", "gain": 1}]
    trace = _write(tmp_path / "t.jsonl", events)
    qrels = tmp_path / "q.txt"
    qrels.write_text("q1 0 n2 2\nq1 0 n1 0\n\nq1 Q0 n1 -1\n", encoding="utf-8")
    s = import_trace(trace, qrels=qrels)
    got = {(int(q), int(n)): g for q, n, g in s.qrels.itertuples(index=False)}
    assert got == {(0, 2): 1.0, (0, 1): 2.0, (0, 0): -1.0}
    assert s.meta["qrels_from"] == "judgement" and s.meta["qrels_file"] == "q.txt"
    for text, fragment in (("q1 0 n9 1\n", "field 'note': 'n9' is not a note id"),
                           ("q1 0 n3 2\n", "field 'note': a second judgement of note 'n3'"),
                           ("q1 0 n2\n", "expected 4 fields"),
                           ("q1 0 n2 high\n", "field 'grade': must be a number")):
        qrels.write_text("q1 0 n2 1\n" + text, encoding="utf-8")
        with pytest.raises(StreamError, match=rf"^q.txt: line 2: .*{fragment}"):
            import_trace(trace, qrels=qrels)
    # stream check lists the qrels file's errors with the trace's
    qrels.write_text("q1 0 n9 1\nq1 0 n2\nq1 0 n2 1\n", encoding="utf-8")
    from memsim.data.importers.trace import check_trace
    errors, _ = check_trace(trace, qrels=qrels)
    assert [e.split(": ")[:2] for e in errors] == [["q.txt", "line 1"], ["q.txt", "line 2"]]
    assert main(["stream", "check", "trace", str(trace), "--qrels", str(qrels)]) == 2
    # its count names both files (before: the trace's alone)
    assert capsys.readouterr().err.strip() == \
        f"memsim: error: {trace} with --qrels {qrels}: 2 errors"
    out = tmp_path / "s"
    qrels.write_text("q1 0 n2 2\n", encoding="utf-8")
    assert main(["stream", "import", "trace", str(trace), "--out", str(out), "--qrels",
                 str(qrels)]) == 0
    assert json.loads((out / "stream.json").read_text())["qrels_file"] == "q.txt"
    # a folder given for the qrels file is named as one, not as missing
    with pytest.raises(StreamError, match=r"qrels: .* is a folder, not a qrels file"):
        import_trace(trace, qrels=tmp_path)
    with pytest.raises(StreamError, match=r"qrels not found: "):
        import_trace(trace, qrels=tmp_path / "none.txt")


def test_no_malformed_trace_raises_anything_but_a_stream_error(tmp_path):
    """Every field of every event of a good trace replaced in turn by odd
    values (huge integers, NaN, wrong types, absurd times): the importer and
    the check refuse them with one-line StreamErrors, never another exception
    (an OverflowError traceback before integers were bounded)."""
    from memsim.data.importers.trace import check_trace

    odd = [2 ** 64, -(2 ** 70), 10 ** 400, [2 ** 64], 1e308, float("nan"), True, None, "",
           "99999-01-01", {}]
    refused = 0
    for i in range(1, len(TINY)):
        for key in [k for k in TINY[i] if k != "event"]:
            for value in odd:
                events = [dict(e) for e in TINY]
                events[i][key] = value
                path = _write(tmp_path / "odd.jsonl", events)
                try:
                    import_trace(path)
                except StreamError as exc:
                    refused += 1
                    assert "\n" not in str(exc) and str(exc).startswith("odd.jsonl: ")
                errors, _ = check_trace(path)
                assert all("\n" not in e for e in errors)
    assert refused > 300


# ---------------------------------------------------------------------------
# Deleted, expired and updated notes, ids, nulls, ISO times, unordered traces
# ---------------------------------------------------------------------------

def _check(tmp_path, events, name="c.jsonl") -> list[str]:
    from memsim.data.importers.trace import check_trace
    return check_trace(_write(tmp_path / name, events))[0]


DELETED = [
    {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x y"},
    {"event": "note_added", "id": 2, "t": 0, "actor": "a", "text": "y z"},
    {"event": "query", "id": 0, "t": 0.5, "actor": "a", "text": "y"},
    {"event": "note_deleted", "id": 1, "t": 1},
    # a query logged before the delete may still name the note
    {"event": "retrieved", "query": 0, "notes": [2, 1]},
    {"event": "used", "query": 0, "notes": [1]},
    {"event": "judgement", "query": 0, "note": 1, "gain": 1},
    {"event": "query", "id": 1, "t": 3, "actor": "a", "text": "y"},
]


@pytest.mark.parametrize("line, field", [
    ({"event": "accessed", "note": 1, "t": 3, "actor": "a"}, "note"),
    ({"event": "retrieved", "query": 1, "notes": [2, 1]}, "notes[1]"),
    ({"event": "used", "query": 1, "notes": [1]}, "notes[0]"),
    ({"event": "judgement", "query": 1, "note": 1, "gain": 1}, "note"),
])
def test_a_deleted_note_is_named_only_by_earlier_queries(tmp_path, line, field):
    good = import_trace(_write(tmp_path / "good.jsonl", DELETED))
    assert good.retrieved["note_id"].tolist() == [2, 1]
    assert set(good.qrels["note_id"]) == {1}
    for events, n in ((DELETED + [line], 9), (DELETED[:4] + [line, *DELETED[4:]], 5)):
        if line["event"] != "accessed" and n == 5:
            continue  # names query 1, logged on the last line
        msg = _refusal(tmp_path, events)
        assert msg.startswith(f"bad.jsonl: line {n}: field {field!r}: note 1 was deleted at "
                              "line 4 of the trace")
        assert [e.split(": ")[1] for e in _check(tmp_path, events)] == [f"line {n}"]


def test_a_trec_judgement_of_a_deleted_note_for_a_later_query_is_refused(tmp_path):
    trace = _write(tmp_path / "t.jsonl", DELETED)
    qrels = tmp_path / "q.txt"
    qrels.write_text("0 0 2 2\n1 0 2 1\n1 0 1 1\n", encoding="utf-8")
    with pytest.raises(StreamError, match=r"^q.txt: line 3: field 'note': note 1 was deleted"):
        import_trace(trace, qrels=qrels)


def test_null_optional_fields_are_absent_for_the_schema_check_and_the_import(tmp_path):
    validator = _schema()
    nulls = [
        {"event": "note_added", "id": 0, "t": 0, "actor": "a", "text": "hello world",
         "tier": None, "type": None, "importance": None, "salience": None, "pinned": None,
         "expires_at": None, "namespace": None, "supersedes": None, "tokens": None,
         "embedding": None},
        {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "hello", "budget": None,
         "category": None, "namespace": None, "embedding": None},
        {"event": "retrieved", "query": 0, "notes": [0], "scores": None},
        {"event": "note_updated", "id": 0, "t": 2, "text": None, "actor": None, "tier": None,
         "supersedes": None, "namespace": None},
    ]
    plain = [{k: v for k, v in e.items() if v is not None} for e in nulls]
    for e in nulls:
        assert not list(validator.iter_errors(e)), e
    assert _check(tmp_path, nulls) == []
    a = import_trace(_write(tmp_path / "nulls.jsonl", nulls))
    b = import_trace(_write(tmp_path / "plain.jsonl", plain))
    for name in ("notes", "queries", "qrels", "retrieved"):
        assert getattr(a, name).equals(getattr(b, name)), name
    # a required field may not be null, for either
    for e, field in (({**plain[0], "actor": None}, "actor"), ({**plain[0], "t": None}, "t"),
                     ({**plain[1], "id": None}, "id"),
                     ({"event": "note_added", "id": 1, "t": 0, "actor": "a", "tokens": None,
                       "text": None}, "tokens")):
        assert field in _fields_refused(validator, e), e
        assert f"line 1: field {field!r}" in _refusal(tmp_path, [e])


def _fields_refused(validator, line) -> set:
    from memsim.data.importers.trace import _schema_errors
    return {field for field, _ in _schema_errors(validator, line)}


ISO_TIMES = [
    ("2025-03-01", True), ("2025-03-01T12", True), ("2025-03-01 12:30", True),
    ("2025-03-01T12:00:00.25Z", True), ("2025-03-01T12:00:00+05", True),
    ("2025-03-01T12:00:00-0530", True), (" 2025-03-01T12:00:00+05:30 ", True),
    ("20250302T000000Z", False), ("2025-W09-6", False), ("2025-060", False),
    ("2025-03-01+05:00", False), ("2025-03-01T12:00:00,5", False), ("2025-03-01T25:00", False),
    ("2025-13-01", False), ("2025-03-01T12:00:00z", False), ("٢٠٢٥-03-01", False),
]


def test_iso_times_one_pattern_for_the_schema_and_the_importer(tmp_path):
    validator = _schema()
    for when, valid in ISO_TIMES:
        note = {"event": "note_added", "id": 0, "t": when, "actor": "a", "text": "x"}
        assert (not list(validator.iter_errors(note))) == valid, when
        assert (_check(tmp_path, [note]) == []) == valid, when
        if valid:
            import_trace(_write(tmp_path / "ok.jsonl", [note]))
        else:
            assert "line 1: field 't': must be a number or an ISO 8601 time" in \
                _refusal(tmp_path, [note]), when
    # a date that does not exist passes the pattern: the check refuses it with
    # the importer, as the import does
    note = {"event": "note_added", "id": 0, "t": "2025-02-30", "actor": "a", "text": "x"}
    assert "day is out of range" in _refusal(tmp_path, [note])
    assert len(_check(tmp_path, [note])) == 1
    s = import_trace(_write(tmp_path / "tz.jsonl", [
        {"event": "note_added", "id": 0, "t": "1970-01-02T06:00:00+06", "actor": "a",
         "text": "x"}]))
    assert s.notes["created_at"].tolist() == [1.0]
    # one pattern: the schema's is the importer's
    from memsim.data.importers.trace import ISO_TIME_PATTERN, SCHEMA_PATH
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$defs"]["iso_time"]["pattern"] == ISO_TIME_PATTERN
    assert schema["$defs"]["header"]["properties"]["origin"] == {"$ref": "#/$defs/iso_time"}


def test_an_unordered_trace_ignores_t_on_events_without_a_time(tmp_path):
    events = [{"event": "header", "ordered": False},
              {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x y"},
              {"event": "query", "id": 1, "t": 5, "actor": "a", "text": "y"},
              {"event": "retrieved", "query": 1, "notes": [1], "t": 1},
              {"event": "used", "query": 1, "notes": [1], "t": 1},
              {"event": "judgement", "query": 1, "note": 1, "gain": 2, "t": 1}]
    s = import_trace(_write(tmp_path / "u.jsonl", events))
    assert s.qrels.values.tolist() == [[1, 1, 2.0]] and s.retrieved["note_id"].tolist() == [1]
    assert _check(tmp_path, events) == []


def test_note_updated_applies_namespace_and_supersedes(tmp_path):
    events = [{"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x y",
               "namespace": "u1"},
              {"event": "note_added", "id": 2, "t": 0, "actor": "a", "text": "x z",
               "namespace": "u2"},
              {"event": "note_updated", "id": 1, "t": 1, "namespace": "u2", "supersedes": [2]},
              {"event": "note_updated", "id": 1, "t": 2, "text": "x w"},
              {"event": "query", "id": 1, "t": 3, "actor": "a", "text": "x", "namespace": "u2"}]
    n = import_trace(_write(tmp_path / "u.jsonl", events)).notes
    assert n["namespace"].tolist() == ["u1", "u2", "u2", "u2"]   # kept by the next update
    assert n["superseded_at"].tolist()[1] == 1.0
    assert np.isnan(n["superseded_at"].to_numpy()[[0, 2, 3]]).all()
    assert _check(tmp_path, events) == []
    msg = _refusal(tmp_path, [*events[:3], {**events[3], "supersedes": 1}])
    assert msg.startswith("bad.jsonl: line 4: field 'supersedes': note 1 cannot supersede itself")
    msg = _refusal(tmp_path, [*events[:2], {"event": "note_deleted", "id": 2, "t": 0.5},
                              {"event": "note_updated", "id": 1, "t": 1, "supersedes": 2}])
    assert msg.startswith("bad.jsonl: line 4: field 'supersedes': note 2 cannot be superseded")


def test_updating_an_expired_note_is_refused_at_its_line(tmp_path):
    added = {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x y",
             "expires_at": 1}
    query = {"event": "query", "id": 1, "t": 3, "actor": "a", "text": "y"}
    for t in (2, 1):   # live while t < expires_at: gone at 1
        events = [added, {"event": "note_updated", "id": 1, "t": t, "text": "new"}, query]
        msg = _refusal(tmp_path, events)
        assert msg.startswith("bad.jsonl: line 2: field 't': note 1 expired at 1 days")
        assert _check(tmp_path, events, "bad.jsonl") == [msg]
    # before it expires, the new version keeps the expiry; deleting an expired
    # note (a clean-up after its expiry) stays allowed
    s = import_trace(_write(tmp_path / "ok.jsonl", [
        added, {"event": "note_updated", "id": 1, "t": 0.5, "text": "new"},
        {"event": "note_deleted", "id": 1, "t": 2}, query]))
    assert s.notes["expires_at"].tolist() == [0.5, 1.0]


@pytest.mark.parametrize("first, second", [(7, "7"), ("7", 7), (-3, "-3")])
def test_ids_that_print_the_same_must_have_one_type(tmp_path, first, second):
    notes = [{"event": "note_added", "id": first, "t": 0, "actor": "a", "text": "x y"},
             {"event": "note_added", "id": second, "t": 0, "actor": "a", "text": "x z"}]
    msg = _refusal(tmp_path, notes)
    assert msg.startswith(f"bad.jsonl: line 2: field 'id': note {second!r} prints as the "
                          f"earlier note {first!r}")
    queries = [notes[0], {"event": "query", "id": first, "t": 1, "actor": "a", "text": "x"},
               {"event": "query", "id": second, "t": 1, "actor": "a", "text": "y"}]
    assert _refusal(tmp_path, queries).startswith("bad.jsonl: line 3: field 'id': query ")
    assert len(_check(tmp_path, queries)) == 1
    # ids that merely look alike are different ids
    s = import_trace(_write(tmp_path / "ok.jsonl", [
        notes[0], {**notes[1], "id": f"0{first}" if first != -3 else "-03"},
        {"event": "query", "id": second, "t": 1, "actor": "a", "text": "x"}]))
    assert s.notes["trace_id"].nunique() == 2


def test_empty_lines_before_the_header_are_skipped(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n" + json.dumps({"event": "header", "name": "mine"}) + "\n"
                    + "".join(json.dumps(e) + "\n" for e in GOOD), encoding="utf-8")
    assert import_trace(path).meta["name"] == "mine"
    from memsim.data.importers.trace import check_trace
    assert check_trace(path) == ([], 0)
    path.write_text("\n" + "".join(json.dumps(e) + "\n" for e in GOOD)
                    + json.dumps({"event": "header"}) + "\n", encoding="utf-8")
    with pytest.raises(StreamError, match=r"line 4: field 'event': a header is only allowed "
                                          r"as the first line .*line 2"):
        import_trace(path)


def test_trec_qrels_with_a_byte_order_mark(tmp_path):
    trace = _write(tmp_path / "t.jsonl", TINY[:5])
    qrels = tmp_path / "q.txt"
    qrels.write_bytes("q1 0 n2 2\n".encode("utf-8-sig"))
    s = import_trace(trace, qrels=qrels)
    assert s.qrels.values.tolist() == [[0, 1, 2.0]]


def test_stream_check_counts_one_error_in_the_singular(tmp_path, capsys):
    path = _write_lines(tmp_path / "one.jsonl", MULTI[:2] + [
        {"event": "note_added", "id": 2, "t": 1, "actor": "a", "tokens": 0}])
    assert main(["stream", "check", "trace", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"memsim: error: {path}: 1 error"
