"""A trace logged before any feedback (no ``used``, no ``judgement``) has no
relevant note: the exports are empty rather than an error of the IR tool."""

from __future__ import annotations

import json

import pytest

import memsim


@pytest.fixture(scope="module")
def unjudged_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("unjudged")
    events = [{"event": "note_added", "id": f"n{i}", "t": i, "actor": "a",
               "text": f"word{i} apple pie"} for i in range(6)]
    events += [{"event": "query", "id": "q1", "t": 9, "actor": "a", "text": "apple"},
               {"event": "retrieved", "query": "q1", "notes": ["n5", "n4"]}]
    trace = folder / "t.jsonl"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "unjudged", "replicates": 1, "seed": 1, "save_rankings": True,
                       "candidates": 5},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"sim": {"preset": "similarity-only"}}})
    return memsim.run_experiment(exp, out=None, report=False)


def test_to_ranx_of_a_stream_without_relevant_notes_gives_empty_qrels(unjudged_run, tmp_path):
    ranx = pytest.importorskip("ranx")
    assert unjudged_run.to_trec_qrels(tmp_path / "q.txt").read_text() == ""
    qrels, run = unjudged_run.to_ranx()
    assert isinstance(qrels, ranx.Qrels) and qrels.to_dict() == {}
    assert set(run.to_dict()) == {"q1"} and len(run.to_dict()["q1"]) == 5
