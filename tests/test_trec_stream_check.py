"""The TREC exports (to_trec_run, to_trec_qrels, to_ranx and their frames)
refuse a stream that is not the one the run replayed, rather than writing
its ids and qrels in silence, and accept the one it replayed however it is
given: a Stream, its folder or a copy of it, or the run's source as the
run's config.toml names it (a trace file, ``data:locomo``).

What a run records of its stream: ``workload.source_hash`` (the content of
a replayed source), ``stream_fingerprint`` in its manifest (a replayed
stream's ids, times and gains), the notes it ranked, and the queries it
asked with their ``t`` and ``n_relevant``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.core.errors import ConfigError
from memsim.data.importers.trace import import_trace
from memsim.data.stream import make_stream, read_stream, write_stream
from memsim.runs.runner import load_stream_for

REFUSED = r": give the stream the run replayed$"


def _trace(path: Path, shift: float = 0.0) -> Path:
    """A small trace with string ids (``n0``.., ``query-0``..), which the
    importer renumbers, keeping the logged ids in ``trace_id``."""
    rng = np.random.default_rng(0)

    def emb():
        return [round(float(x), 3) for x in rng.normal(size=4)]

    lines = [{"event": "header", "format": "memsim-trace", "version": 1}]
    for i in range(12):
        lines.append({"event": "note_added", "id": f"n{i}", "t": float(i) + shift, "actor": "a",
                      "tokens": 10, "embedding": emb()})
    for k in range(6):
        lines.append({"event": "query", "id": f"query-{k}", "t": 20.0 + k + shift, "actor": "a",
                      "embedding": emb()})
        lines.append({"event": "used", "query": f"query-{k}", "notes": [f"n{2 + k}", f"n{5 + k}"]})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def _run(tmp: Path, workload: dict, name: str, replicates: int = 1) -> memsim.RunResult:
    exp = memsim.experiment_from_dict({
        "experiment": {"name": name, "replicates": replicates, "seed": 3, "save_rankings": True,
                       "candidates": 10, "budget_tokens": 1000},
        "workload": workload,
        "policies": {"sim": {"preset": "similarity-only"}}})
    return memsim.run_experiment(exp, out=tmp / "runs", report=False)


SYNTHETIC = {"horizon_days": 8, "backfill_days": 10}


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory):
    """A run that imported a string-id trace on load, read back from its folder."""
    tmp = tmp_path_factory.mktemp("trace")
    trace = _trace(tmp / "t.jsonl")
    res = _run(tmp, {"source": str(trace), "importer": "trace"}, "trace")
    return memsim.load_run(res.path), trace


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A generated run of two replicates (in memory, and its folder)."""
    tmp = tmp_path_factory.mktemp("synthetic")
    return _run(tmp, SYNTHETIC, "synthetic", replicates=2)


def _other_stream(seed: int = 99):
    exp = memsim.experiment_from_dict({"experiment": {"name": "other", "seed": seed},
                                       "workload": SYNTHETIC,
                                       "policies": {"a": {"preset": "similarity-only"}}})
    return load_stream_for(exp, 0)


def _exports(run, stream, tmp: Path, **kw):
    """Every export that takes a stream, with its file (None: a frame)."""
    return [
        (lambda: run.to_trec_run(tmp / "r.txt", stream=stream, **kw), tmp / "r.txt"),
        (lambda: run.to_trec_qrels(tmp / "q.txt", stream, gain_scale=2, **kw), tmp / "q.txt"),
        (lambda: run.trec_run_frame(stream=stream, **kw), None),
        (lambda: run.trec_qrels_frame(stream, gain_scale=2, **kw), None),
    ]


def _refused(run, stream, tmp: Path, match: str, **kw) -> None:
    for call, path in _exports(run, stream, tmp, **kw):
        with pytest.raises(ConfigError, match=match):
            call()
        assert path is None or not path.exists()        # nothing written


# ---------------------------------------------------------------------------
# Another stream is refused, by every export
# ---------------------------------------------------------------------------


def test_a_trace_run_refuses_another_stream_and_writes_nothing(trace_run, tmp_path):
    """Before: the example trace's stream gave ``0 Q0 2 ...`` for
    ``query-0 Q0 n2 ...``, and its qrels, without complaint."""
    run, _ = trace_run
    other = tmp_path / "other"
    write_stream(_other_stream(), other)
    _refused(run, other, tmp_path,
             rf"^stream {other}: it has \d+ queries, the run asked 6 \(query \d+ is not the "
             rf"run's\){REFUSED}")
    _refused(run, read_stream(other), tmp_path, r"^stream: it has \d+ queries, the run asked 6")


def test_a_stream_lacking_a_note_the_run_ranked_is_refused(synthetic, tmp_path):
    """The same queries, asked at the same times with the same relevant
    notes, over fewer notes (LoCoMo's observations for its turns): a ranked
    note the stream lacks refuses the run file and the qrels alike."""
    s = load_stream_for(synthetic.experiment, 0)
    ranked = synthetic.rankings[synthetic.rankings["replicate"] == 0]["note_id"]
    gone = int(ranked[~ranked.isin(s.qrels["note_id"])].max())
    keep = (s.notes["note_id"] != gone).to_numpy()
    fewer = make_stream(s.notes[keep], s.queries, s.qrels, s.accesses,
                        s.note_embeddings[keep], s.query_embeddings, dict(s.meta))
    folder = write_stream(fewer, tmp_path / "fewer")
    for stream, where in ((fewer, "stream"), (folder, f"stream {folder}")):
        _refused(synthetic, stream, tmp_path,
                 rf"^{where}: note {gone} is not in it \(the run ranked it\){REFUSED}",
                 replicate=0)


def test_qrels_of_a_stream_judged_otherwise_are_refused(synthetic, tmp_path):
    """The same notes and queries with a relevant note fewer: its qrels
    would measure the run against another truth (before: written)."""
    s = load_stream_for(synthetic.experiment, 0)
    asked = s.queries.set_index("query_id")["t"]
    born = s.notes.set_index("note_id")["created_at"]
    rel = (s.qrels["gain"] > 0) & (born.reindex(s.qrels["note_id"]).to_numpy()
                                   <= asked.reindex(s.qrels["query_id"]).to_numpy())
    drop = int(np.flatnonzero(rel.to_numpy())[0])
    qid = int(s.qrels["query_id"].iloc[drop])
    n = int(rel[s.qrels["query_id"] == qid].sum())
    judged = make_stream(s.notes, s.queries, s.qrels.drop(index=s.qrels.index[drop]),
                         s.accesses, s.note_embeddings, s.query_embeddings, dict(s.meta))
    with pytest.raises(ConfigError, match=rf"^stream: query {qid} has other relevant notes "
                                          rf"when asked: {n - 1} in it, {n} in the run "
                                          rf"\(n_relevant\){REFUSED}"):
        synthetic.to_trec_qrels(tmp_path / "q.txt", judged, replicate=0, gain_scale=2)
    assert not (tmp_path / "q.txt").exists()


def test_a_synthetic_run_checks_the_stream_it_is_given(synthetic, tmp_path):
    """A generated run's stream is regenerated from its seed when none is
    given; one given is compared with the replicate's (any replicate's
    when ``replicate`` is not given)."""
    one = load_stream_for(synthetic.experiment, 1)
    back = memsim.load_run(synthetic.path)
    want = synthetic.trec_qrels_frame(replicate=1, gain_scale=2)
    for run in (synthetic, back):
        assert run.trec_qrels_frame(one, gain_scale=2).equals(want)
        assert run.trec_qrels_frame(one, replicate=1, gain_scale=2).equals(want)
        with pytest.raises(ConfigError, match=r"^stream: (query|it has|note) .*" + REFUSED):
            run.trec_qrels_frame(one, replicate=0, gain_scale=2)
        with pytest.raises(ConfigError, match=REFUSED):
            run.trec_qrels_frame(_other_stream(), gain_scale=2)
        with pytest.raises(ConfigError, match=REFUSED):
            run.to_trec_run(tmp_path / "r.txt", replicate=0, stream=one)
        assert run.to_trec_run(tmp_path / "r1.txt", replicate=1, stream=one).exists()
    assert not (tmp_path / "r.txt").exists()


def test_to_ranx_refuses_another_stream(trace_run):
    pytest.importorskip("ranx")
    run, _ = trace_run
    with pytest.raises(ConfigError, match=r"^stream: it has \d+ queries, the run asked 6"):
        run.to_ranx(_other_stream(), gain_scale=2)


# ---------------------------------------------------------------------------
# The stream the run replayed is accepted, however it is given
# ---------------------------------------------------------------------------


def test_the_stream_a_trace_run_replayed_is_accepted_with_its_own_ids(trace_run, tmp_path):
    """The imported trace's stream (a folder, a Stream), the trace file the
    config names, and a copy of it elsewhere give the same files, with the
    trace's string ids."""
    run, trace = trace_run
    folder = tmp_path / "stream"
    write_stream(import_trace(trace), folder)
    copy = tmp_path / "elsewhere" / "copy.jsonl"
    copy.parent.mkdir()
    shutil.copy(trace, copy)
    runs, qrels = set(), set()
    for i, stream in enumerate((folder, read_stream(folder), trace, str(trace), copy)):
        runs.add(run.to_trec_run(tmp_path / f"r{i}.txt", stream=stream).read_text())
        qrels.add(run.to_trec_qrels(tmp_path / f"q{i}.txt", stream).read_text())
    assert len(runs) == len(qrels) == 1
    first = runs.pop().splitlines()[0].split()
    assert first[0] == "query-0" and first[1] == "Q0" and first[2].startswith("n")
    assert all(line.split()[0].startswith("query-") and line.split()[2].startswith("n")
               for line in qrels.pop().splitlines())


def test_an_edited_trace_is_not_the_run_s_source(trace_run, tmp_path):
    run, trace = trace_run
    edited = tmp_path / "edited.jsonl"
    edited.write_text(trace.read_text().replace('"n3"', '"n33"'))
    with pytest.raises(ConfigError, match=rf"^stream {edited}: not the run's source {trace} "
                                          r"\(its content's sha256 is not the "
                                          r"workload.source_hash of the run's config.toml\)"
                                          + REFUSED):
        run.to_trec_qrels(tmp_path / "q.txt", edited)


def test_a_replayed_folder_is_accepted_as_a_copy_and_refused_once_changed(tmp_path):
    """A run that replayed a stream folder recorded its content's hash: a
    copy elsewhere is the same stream, a copy with one gain changed (the
    same notes, queries and counts: nothing else tells) is not."""
    s = _other_stream(seed=5)
    write_stream(s, tmp_path / "s")
    run = memsim.load_run(_run(tmp_path, {"source": str(tmp_path / "s")}, "folder").path)
    shutil.copytree(tmp_path / "s", tmp_path / "copy")
    want = run.to_trec_qrels(tmp_path / "q.txt", tmp_path / "s", gain_scale=2).read_text()
    assert run.to_trec_qrels(tmp_path / "q2.txt", tmp_path / "copy", gain_scale=2) \
        .read_text() == want
    qr = s.qrels.copy()
    qr.loc[qr.index[qr["gain"] == 1.0][0], "gain"] = 0.5
    changed = make_stream(s.notes, s.queries, qr, s.accesses, s.note_embeddings,
                          s.query_embeddings, dict(s.meta))
    write_stream(changed, tmp_path / "changed")
    (tmp_path / "x").mkdir()
    _refused(run, tmp_path / "changed", tmp_path / "x",
             rf"^stream {tmp_path / 'changed'}: not the run's source {tmp_path / 's'} "
             r"\(its content's sha256 is not the workload.source_hash")
    # as a Stream (its files not hashed), its fingerprint tells (before:
    # accepted, since its queries and ranked notes are the run's)
    _refused(run, changed, tmp_path / "x",
             r"^stream: its qrels \(which notes are relevant, or their gains\) are not those "
             r"of the stream the run replayed \(stream_fingerprint in its manifest.json\)"
             + REFUSED)


def test_a_trace_runs_stream_folder_edited_is_refused(trace_run, tmp_path):
    """A run that imported a trace hashed the trace, not a folder of its
    stream (``memsim stream import trace``), so a folder is compared by the
    fingerprint the run recorded: a note's or a query's trace id renamed,
    or a gain changed, is refused by every export, which writes nothing (before: the
    renamed id, and grades the run was not measured by, were written)."""
    run, trace = trace_run
    s = import_trace(trace)
    assert set(run.manifest["stream_fingerprint"]) == {"notes", "queries", "qrels"}
    notes = s.notes.copy()
    notes.loc[notes.index[3], "trace_id"] = "WRONG"
    renamed = make_stream(notes, s.queries, s.qrels, s.accesses, s.note_embeddings,
                          s.query_embeddings, dict(s.meta))
    qrels = s.qrels.copy()
    qrels["gain"] = qrels["gain"] * 2.5
    regraded = make_stream(s.notes, s.queries, qrels, s.accesses, s.note_embeddings,
                           s.query_embeddings, dict(s.meta))
    asked = s.queries.copy()
    asked.loc[asked.index[2], "trace_id"] = "query-x"
    other_id = make_stream(s.notes, asked, s.qrels, s.accesses, s.note_embeddings,
                           s.query_embeddings, dict(s.meta))
    for name, stream, what in (
            ("renamed", renamed, r"notes \(their ids or creation times\)"),
            ("regraded", regraded, r"qrels \(which notes are relevant, or their gains\)"),
            ("other-id", other_id, r"queries \(their ids or times\)")):
        folder = write_stream(stream, tmp_path / name)
        (tmp_path / f"out-{name}").mkdir()
        _refused(run, folder, tmp_path / f"out-{name}",
                 rf"^stream {folder}: its {what} are not those of the stream the run "
                 rf"replayed \(stream_fingerprint in its manifest.json\){REFUSED}")
    # the stream unchanged, through a folder, is the run's
    folder = write_stream(s, tmp_path / "same")
    assert run.to_trec_qrels(tmp_path / "q.txt", folder).read_text() \
        == run.to_trec_qrels(tmp_path / "q2.txt", trace).read_text()


def test_a_generated_run_records_no_fingerprint(synthetic):
    """Only a replayed stream is recorded (every replicate replays it); a
    generated run's replicates are regenerated from its seed and compared
    as before."""
    assert "stream_fingerprint" not in memsim.load_run(synthetic.path).manifest


# ---------------------------------------------------------------------------
# LoCoMo: turns against observations, and data:locomo as the config names it
# ---------------------------------------------------------------------------

_ZIP = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo" / "locomo10.zip"


def _locomo_zip() -> Path:
    from memsim.data.datasets import cached_path

    for path in (_ZIP, cached_path("locomo")):
        if path.is_file():
            return path
    pytest.skip(f"LoCoMo data not found at {_ZIP} nor in the data cache (shared data folder; "
                "memsim data get locomo)")


def test_a_locomo_turns_run_refuses_the_observations_stream(tmp_path, monkeypatch):
    from memsim.data.datasets import register
    from memsim.data.importers.locomo import import_locomo

    zip_path = _locomo_zip()
    monkeypatch.setenv("MEMSIM_DATA", str(tmp_path / "cache"))
    register("locomo", zip_path)
    res = _run(tmp_path, {"source": "data:locomo", "importer": "locomo", "notes": "turns"},
               "locomo")
    run = memsim.load_run(res.path)
    obs = import_locomo(zip_path, notes="observations")
    with pytest.raises(ConfigError, match=r"^stream: note \d+ is not in it \(the run ranked "
                                          r"it\)" + REFUSED):
        run.to_trec_qrels(tmp_path / "q.txt", obs)
    assert not (tmp_path / "q.txt").exists()
    # the source as the config names it (before: stream folder not found: data:locomo)
    got = run.to_trec_qrels(tmp_path / "q.txt", "data:locomo").read_text()
    assert got == res.to_trec_qrels(tmp_path / "q2.txt").read_text()
