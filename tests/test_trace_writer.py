"""Recording traces from a running app (memsim.data.trace, memsim.adapters).

The LangChain and LlamaIndex apps run offline (sockets refuse to connect)
with a deterministic hashing embedding; the traces they record are imported
and replayed with the ``as-logged`` preset, which must give back exactly the
rankings the app's store returned. They skip when the framework is absent.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.data.importers.trace import import_trace
from memsim.data.stream import write_stream
from memsim.data.trace import TraceWriter, join_segments, segments


class Clock:
    """A deterministic clock: one second a call, from 2025-01-01 UTC."""

    def __init__(self, start: float = 1_735_689_600.0, step: float = 1.0):
        self.t, self.step = start, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.fixture
def offline(monkeypatch):
    calls = []

    def refuse(self, *args, **kwargs):
        calls.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    # a download fails at the name lookup before any connect: refuse that too
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: refuse(None, *a))
    return calls


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def hashed_vector(text: str, dim: int = 64) -> list[float]:
    """A deterministic bag-of-words embedding: word counts hashed (CRC-32)
    into ``dim`` buckets plus a small per-text component (so no two texts
    tie), L2-normalised. Texts sharing words are near."""
    v = np.zeros(dim)
    for w in text.lower().replace("?", " ").replace(".", " ").split():
        v[zlib.crc32(w.encode()) % dim] += 1.0
    v[zlib.crc32(text.encode()) % dim] += 0.01 * (1 + zlib.crc32(text.encode()) % 97)
    return (v / np.linalg.norm(v)).tolist()


NOTES = [
    "Ann moved to Lisbon in March", "Ann works as a nurse at the city hospital",
    "Bob adopted a dog called Rex", "Bob's dog Rex likes the beach",
    "The team meeting moved to Thursday", "Ann's sister lives in Porto",
    "Bob is learning to play the guitar", "The hospital opened a new wing",
]
QUESTIONS = ["where does Ann live?", "what is the name of Bob's dog?",
             "when is the team meeting?", "what does Ann do at the hospital?"]


# ---------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------

def test_writer_records_a_trace_that_imports(tmp_path):
    path = tmp_path / "app.jsonl"
    clock = Clock()
    with TraceWriter(path, header={"name": "app"}, clock=clock) as w:
        w.note_added("a", "Ann moved to Lisbon", actor="ann")
        w.note_added("b", "Bob has a dog", tokens=12)
        w.note_updated("a", text="Ann moved to Porto")
        q = w.query("where does Ann live?", budget=100)
        w.retrieved(q, ["a", "b"], scores=np.array([0.9, 0.2]))
        w.used(q, ["a"])
        w.accessed("b")
        w.note_deleted("b")
    assert w.closed
    ev = _lines(path)
    # the origin is the first clock reading's second: times start near 0
    assert ev[0] == {"event": "header", "format": "memsim-trace", "version": 1,
                     "time_unit": "second", "origin": "2025-01-01T00:00:01Z", "name": "app"}
    assert [e["t"] for e in ev[1:5]] == [1.0, 2.0, 3.0, 4.0]
    assert [e["event"] for e in ev[1:]] == ["note_added", "note_added", "note_updated", "query",
                                           "retrieved", "used", "accessed", "note_deleted"]
    assert ev[5]["scores"] == [0.9, 0.2] and "t" not in ev[5]
    s = import_trace(path)
    assert s.meta["name"] == "app" and s.meta["logged_rankings"]
    # seconds since the origin, in days; the update is a second version of "a"
    assert s.notes["created_at"].iloc[0] == pytest.approx(1 / 86400)
    assert s.notes["trace_id"].tolist() == ["a", "b", "a"]
    assert s.qrels["note_id"].tolist() == [2]  # the version live at the query
    with pytest.raises(ValueError, match="closed"):
        w.note_added("c", "late")


def test_times_never_go_backwards_and_bad_calls_raise(tmp_path):
    ticks = iter([0.0, 100.0, 50.0, 200.0])  # the first reading sets the origin
    with TraceWriter(tmp_path / "t.jsonl", clock=lambda: next(ticks)) as w:
        w.note_added(1, "x")
        w.note_added(2, "y")   # the clock stepped back: written at 100, not 50
        w.note_added(3, "z")
        with pytest.raises(ValueError, match="unknown trace event 'note_moved'"):
            w.write({"event": "note_moved", "id": 1})
        with pytest.raises(ValueError, match="give text or tokens"):
            w.note_added(4)
        with pytest.raises(ValueError, match=r"retrieved: notes\[1\]"):
            w.retrieved("q", [1, None])
        with pytest.raises(ValueError, match="2 scores for 1 notes"):
            w.retrieved("q", [1], scores=[0.1, 0.2])
    assert [e["t"] for e in _lines(tmp_path / "t.jsonl")[1:]] == [100.0, 100.0, 200.0]
    with pytest.raises(ValueError, match="max_bytes"):
        TraceWriter(tmp_path / "u.jsonl", max_bytes=0)


def test_reopening_appends_without_a_second_header(tmp_path):
    path = tmp_path / "app.jsonl"
    clock = Clock()
    with TraceWriter(path, clock=clock) as w:
        w.note_added(1, "first")
    with TraceWriter(path, clock=clock) as w:
        w.note_added(2, "second")
    ev = _lines(path)
    assert [e["event"] for e in ev] == ["header", "note_added", "note_added"]
    # the second writer counts from the file's origin, not its own first reading
    assert [e["t"] for e in ev[1:]] == [1.0, 3.0]
    other = tmp_path / "other.jsonl"
    other.write_text('{"event": "header", "format": "memsim-trace", "time_unit": "day"}\n')
    with pytest.raises(ValueError, match="not a trace this writer started"):
        TraceWriter(other)


def test_close_fsyncs(tmp_path, monkeypatch):
    import os

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    w = TraceWriter(tmp_path / "t.jsonl", clock=Clock())
    w.note_added(1, "x")
    assert synced == []
    w.close()
    assert len(synced) == 1
    w.close()  # idempotent
    assert len(synced) == 1


def test_threads_write_whole_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    per, n_threads = 200, 8
    with TraceWriter(path, clock=Clock(step=0.001)) as w:
        def work(k: int) -> None:
            for i in range(per):
                w.note_added(f"{k}-{i}", f"thread {k} note {i} " + "x" * (i % 50))
        threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ev = _lines(path)  # every line parses: no interleaved writes
    assert len(ev) == 1 + per * n_threads
    times = [e["t"] for e in ev[1:]]
    assert times == sorted(times)
    assert import_trace(path).n_notes == per * n_threads


def test_rotation_by_size_and_join(tmp_path):
    path = tmp_path / "app.jsonl"
    with TraceWriter(path, max_bytes=600, clock=Clock()) as w:
        for i in range(40):
            w.note_added(i, f"note number {i}")
        q = w.query("note number 3")
        w.retrieved(q, [3, 13, 30])
        w.used(q, [3])
    files = segments(path)
    assert len(files) >= 4 and files[-1] == path
    assert [f.name for f in files[:2]] == ["app.1.jsonl", "app.2.jsonl"]
    for prev, f in zip(files, files[1:]):
        head = _lines(f)[0]
        assert head["event"] == "header" and head["continues"] == prev.name
    assert all(f.stat().st_size <= 600 for f in files)
    # a segment alone names notes of earlier ones: import them joined
    joined = join_segments(path, tmp_path / "all.jsonl")
    s = import_trace(joined)
    assert s.n_notes == 40 and s.retrieved["note_id"].tolist() == [3, 13, 30]
    assert sum(e["event"] == "header" for e in _lines(joined)) == 1
    assert "continues" not in _lines(joined)[0]


def test_segments_of_a_name_holding_glob_characters(tmp_path):
    """A trace named ``app[1].jsonl`` finds its segments (the name is not
    read as a pattern)."""
    path = tmp_path / "app[1]*.jsonl"
    with TraceWriter(path, max_bytes=600, clock=Clock()) as w:
        for i in range(20):
            w.note_added(i, f"note number {i}")
    files = segments(path)
    assert len(files) >= 2 and files[-1] == path
    assert files[0].name == "app[1]*.1.jsonl"


# ---------------------------------------------------------------------------
# Replaying a recorded trace as-logged
# ---------------------------------------------------------------------------

def _recorded(path: Path) -> dict[str, list[str]]:
    return {str(e["query"]): [str(n) for n in e["notes"]]
            for e in _lines(path) if e["event"] == "retrieved"}


def _replayed(path: Path, tmp_path: Path) -> tuple[dict[str, list[str]], dict]:
    """Import the trace, replay it with as-logged, return the rankings by
    logged query id as logged note ids."""
    stream = import_trace(path)
    write_stream(stream, tmp_path / "stream")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "app", "replicates": 1, "seed": 1, "save_rankings": True,
                       "budget_tokens": 100000},
        "workload": {"source": str(tmp_path / "stream")},
        "policies": {"today": {"preset": "as-logged"}}})
    res = memsim.run_experiment(exp, out=None)
    r = res.rankings.sort_values(["query_id", "rank"])
    note_tid = dict(zip(stream.notes["note_id"], stream.notes["trace_id"]))
    query_tid = dict(zip(stream.queries["query_id"], stream.queries["trace_id"]))
    got = {query_tid[q]: [note_tid[n] for n in g["note_id"]] for q, g in r.groupby("query_id")}
    return got, {"stream": stream, "result": res}


def _distinct_scores(path: Path) -> None:
    """Precondition of an exact replay: no two returned notes of a query
    share a logged score (as-logged breaks ties by note id, a store may not)."""
    for e in _lines(path):
        if e["event"] == "retrieved":
            assert len(set(e["scores"])) == len(e["scores"]), e


def test_langchain_app_records_a_trace_that_replays_as_logged(tmp_path, offline):
    pytest.importorskip("langchain_core", reason="langchain-core is not installed "
                        "(the [langchain] extra)")
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    from memsim.adapters.langchain import TracingRetriever

    class HashEmbeddings(Embeddings):
        def embed_documents(self, texts):
            return [hashed_vector(t) for t in texts]

        def embed_query(self, text):
            return hashed_vector(text)

    path = tmp_path / "langchain.jsonl"
    with TraceWriter(path, header={"name": "langchain-app"}, clock=Clock()) as w:
        retriever = TracingRetriever(vectorstore=InMemoryVectorStore(HashEmbeddings()),
                                     writer=w, k=3, actor="user")
        ids = retriever.add_documents(
            [Document(page_content=t, metadata={"actor": "ann" if "Ann" in t else "bob"})
             for t in NOTES[:6]])
        answers = []
        for question in QUESTIONS[:2]:
            docs = retriever.invoke(question)          # the app's retrieval
            answers.append(docs)
            retriever.mark_used(docs[:1])              # the answer cited the first
        retriever.delete([ids[4]])                     # "the team meeting" is gone
        retriever.add_documents([Document(page_content=t) for t in NOTES[6:]])
        for question in QUESTIONS[2:]:
            docs = retriever.invoke(question)
            retriever.mark_used(docs[:2])
    assert offline == []
    recorded = _recorded(path)
    assert len(recorded) == 4 and all(len(v) == 3 for v in recorded.values())
    # the documents the app got back are the recorded ones, in order
    assert [d.id for d in answers[0]] == recorded[answers[0][0].metadata["memsim_query"]]
    assert ids[4] not in recorded[_lines(path)[-2]["query"]]
    _distinct_scores(path)
    got, info = _replayed(path, tmp_path)
    assert got == recorded
    s = info["stream"]
    assert s.meta["qrels_from"] == "used" and len(s.qrels) == 2 * 1 + 2 * 2
    assert set(s.notes["actor"]) == {"ann", "bob", "app"}


def test_llamaindex_app_records_a_trace_that_replays_as_logged(tmp_path, offline):
    pytest.importorskip("llama_index.core", reason="llama-index-core is not installed "
                        "(the [llamaindex] extra)")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode

    from memsim.adapters.llamaindex import TraceNodePostprocessor, insert_nodes

    class HashEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query):
            return hashed_vector(query)

        def _get_text_embedding(self, text):
            return hashed_vector(text)

        async def _aget_query_embedding(self, query):
            return hashed_vector(query)

    path = tmp_path / "llamaindex.jsonl"
    with TraceWriter(path, header={"name": "llamaindex-app"}, clock=Clock()) as w:
        index = VectorStoreIndex(nodes=[], embed_model=HashEmbedding())
        insert_nodes(index, [TextNode(text=t, id_=f"node-{i}") for i, t in enumerate(NOTES[:5])],
                     w)
        tracer = TraceNodePostprocessor(writer=w, actor="user")
        retriever = index.as_retriever(similarity_top_k=3)
        for i, question in enumerate(QUESTIONS):
            if i == 2:
                insert_nodes(index, [TextNode(text=t, id_=f"node-{5 + j}")
                                     for j, t in enumerate(NOTES[5:])], w)
            nodes = tracer.postprocess_nodes(retriever.retrieve(question), query_str=question)
            tracer.mark_used(nodes[:1])
    assert offline == []
    recorded = _recorded(path)
    assert len(recorded) == 4 and all(len(v) == 3 for v in recorded.values())
    _distinct_scores(path)
    got, info = _replayed(path, tmp_path)
    assert got == recorded
    # the replay keeps the store's scores, as logged
    r = info["result"].rankings.sort_values(["query_id", "rank"])
    logged = [s for e in _lines(path) if e["event"] == "retrieved" for s in e["scores"]]
    assert np.allclose(r["score"].to_numpy(), logged)
    assert not any(math.isnan(x) for x in logged)


def test_token_counts_the_importer_refuses_are_refused_before_writing(tmp_path):
    """``tokens`` and ``budget`` must be positive integers (the importer
    refuses others): such an event raises and writes nothing; a numpy
    integer is written as the int it holds."""
    path = tmp_path / "app.jsonl"
    with TraceWriter(path, clock=Clock()) as w:
        for bad in (0, -3, 2.5, True, 10**13, "7"):
            with pytest.raises(ValueError, match="note_added: tokens"):
                w.note_added(1, tokens=bad)
            with pytest.raises(ValueError, match="query: budget"):
                w.query("q", budget=bad)
            with pytest.raises(ValueError, match="note_updated: tokens"):
                w.note_updated(1, tokens=bad)
        w.note_added(1, "a note", tokens=np.int64(12))
        w.query("a question", id="q1", budget=np.int32(500))
    ev = _lines(path)
    assert [e["event"] for e in ev] == ["header", "note_added", "query"]
    assert ev[1]["tokens"] == 12 and ev[2]["budget"] == 500
    s = import_trace(path)
    assert s.n_notes == 1


def test_embeddings_the_importer_refuses_are_refused_before_writing(tmp_path):
    """The first note or query decides whether a trace has embeddings and
    how many dimensions (the importer's rule): a later event that breaks it,
    or an embedding that is not a list of finite float32 numbers, raises
    and writes nothing. What is written imports."""
    path = tmp_path / "app.jsonl"
    with TraceWriter(path, clock=Clock()) as w:
        w.note_added("n1", "Ann moved to Lisbon", embedding=np.array([0.6, 0.8, 0.0]))
        size = path.stat().st_size
        with pytest.raises(ValueError, match="query: embedding: missing"):
            w.query("where does Ann live?")
        with pytest.raises(ValueError, match="note_added: embedding: has 2 dimensions"):
            w.note_added("n2", "Bob adopted a dog", embedding=[1.0, 0.0])
        with pytest.raises(ValueError, match="note_updated: embedding: missing"):
            w.note_updated("n1", text="Ann moved to Porto")
        for bad in ([], [[1.0, 0.0, 0.0]], ["0.1", "0.2", "0.3"], [True, False, True],
                    [1.0, math.inf, 0.0], [1.0, 1e39, 0.0], [1.0, None, 0.0], "abc",
                    [[1.0], [2.0, 3.0]]):
            with pytest.raises(ValueError, match="note_added: embedding"):
                w.note_added("n3", "a note", embedding=bad)
        with pytest.raises(ValueError, match=r"retrieved: notes\[2\]: note 'n1' is listed twice"):
            w.retrieved("q", ["n1", "n0", "n1"])
        assert path.stat().st_size == size  # nothing written
        w.note_updated("n1", tier="long")  # no new text: no new embedding needed
        q = w.query("where does Ann live?", embedding=[0.6, 0.8, 0.0], id="q1")
        w.retrieved(q, ["n1"], scores=[1.0])
    s = import_trace(path)
    assert s.meta["embedding"]["dim"] == 3 and len(s.retrieved) == 1
    # reopened, the writer reads the trace's first note: still 3 dimensions
    with TraceWriter(path, clock=Clock(start=1_735_700_000.0)) as w:
        with pytest.raises(ValueError, match="note_added: embedding: missing"):
            w.note_added("n2", "Bob adopted a dog")
        w.note_added("n2", "Bob adopted a dog", embedding=[0, 1, 0])  # ints: written as floats
    assert _lines(path)[-1]["embedding"] == [0.0, 1.0, 0.0]
    import_trace(path)

    # a trace without embeddings refuses one; so does its reopened, rotated self
    plain = tmp_path / "plain.jsonl"
    with TraceWriter(plain, clock=Clock(), max_bytes=400) as w:
        w.note_added("n1", "Ann moved to Lisbon")
        with pytest.raises(ValueError, match="first note or query had none"):
            w.query("where?", embedding=[1.0, 0.0])
        for i in range(8):  # past max_bytes: rotated
            w.note_added(f"m{i}", "another note about the weather today")
    assert len(segments(plain)) > 1
    with TraceWriter(plain, clock=Clock(start=1_735_700_000.0)) as w:
        with pytest.raises(ValueError, match="note_updated: embedding: the trace's first"):
            w.note_updated("n1", embedding=[1.0, 0.0])
