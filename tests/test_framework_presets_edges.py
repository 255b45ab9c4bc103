"""Framework presets at the edges their engine-check streams rarely reach.

OpenMemory (openmemory-python 1.0.0): ``embeddings.cosine_similarity``
clamps the cosine to [0, 1], so a memory with a negative cosine scores by
its recency alone; ``MemorySystem.query`` keeps ``similarities[:k * 3]``
and then their first 8, so with ``k`` below 3 the candidates are the
``3 k`` most similar, not 8. The tests that run the real code skip when
the package is not installed.
"""

from __future__ import annotations

import importlib.util
import math
import types

import numpy as np
import pandas as pd
import pytest

from memsim.data.stream import make_stream
from memsim.policies import ArrayContext, resolve_policy
from memsim.policies.frameworks import OpenMemoryHybrid


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


needs_openmemory = pytest.mark.skipif(
    not _have("openmemory"), reason="openmemory-python is not installed (pip install "
    "--no-deps openmemory-python==1.0.0; README, \"Framework presets\")")


def _unit(cos: float, axis: int, dim: int = 6) -> np.ndarray:
    """A unit vector whose cosine with e0 is ``cos``."""
    v = np.zeros(dim)
    v[0], v[axis] = cos, math.sqrt(1.0 - cos * cos)
    return v


def _openmemory_stream() -> tuple:
    """One query (e0) at day 100 over six notes: three old ones (day 0) with
    cosines 0.51, 0.505, 0.50; a fresh one (day 99.99) with cosine 0.49; a
    fresh one with cosine -0.8 and one 70 days old with cosine -0.1. (A
    second query would find the two last tied at similarity 0, both seen at
    the first: the real order of an exact tie is a set's.)"""
    cos = [0.51, 0.505, 0.50, 0.49, -0.8, -0.1]
    created = [0.0, 0.0, 0.0, 99.99, 99.9, 30.0]
    emb = np.array([_unit(c, 1 + i % 5) for i, c in enumerate(cos)], dtype=np.float32)
    qemb = np.eye(6, dtype=np.float32)[:1]
    notes = pd.DataFrame({"note_id": np.arange(6), "created_at": created, "tokens": 50,
                          "actor": "u"})
    queries = pd.DataFrame({"query_id": [0], "t": [100.0], "actor": "u"})
    qrels = pd.DataFrame({"query_id": [0], "note_id": [0], "gain": 1.0})
    return make_stream(notes, queries, qrels, None, emb, qemb, {"name": "openmemory-edges"}), cos


def test_openmemory_negative_cosine_scores_as_cosine_zero():
    # cosine_similarity clamps to [0, 1]: only the recency tells them apart
    ctx = ArrayContext(t=100.0, created_at=[99.9, 30.0, 99.9], last_access=[99.9, 30.0, 99.9])
    r = OpenMemoryHybrid()
    score = r.combine(np.array([[-0.8, -0.1, 0.0]]), None, ctx)[0]
    assert score[0] == score[2]
    assert score[0] > score[1]  # the fresher first, whatever its (negative) cosine
    assert score[1] == pytest.approx(0.5)  # 70 days: recency 0, sigmoid(0)


@needs_openmemory
def test_openmemory_ranker_is_the_real_score_for_negative_cosines():
    from memsim.checks.framework_check import _load_file, _package_dir

    root = _package_dir("openmemory", "openmemory-python")
    stub = types.ModuleType("sentence_transformers")
    stub.SentenceTransformer = object
    pkg = types.ModuleType("_edges_openmemory")
    pkg.__path__ = [str(root)]
    import sys

    sys.modules["_edges_openmemory"] = pkg
    try:
        emb = _load_file(root / "embeddings.py", "_edges_openmemory.embeddings",
                         {"sentence_transformers": stub})
        scoring = _load_file(root / "scoring.py", "_edges_openmemory.scoring")
    finally:
        sys.modules.pop("_edges_openmemory", None)
    q = np.eye(6)[0]
    cos = np.array([0.9, 0.2, 0.0, -0.05, -0.8])
    days = np.array([3.0, 0.5, 0.0, 1.0, 10.0])
    real = [scoring.compute_hybrid_score(
        max(0.0, emb.cosine_similarity(q, _unit(c, 1))), 0.0, 0.0,
        max(0.0, min(1.0, math.exp(-d / 7) * (1 - d / 60)))) for c, d in zip(cos, days)]
    ctx = ArrayContext(t=100.0, created_at=100.0 - days, last_access=100.0 - days)
    got = OpenMemoryHybrid().combine(cos[None, :], None, ctx)[0]
    np.testing.assert_allclose(got, real, rtol=1e-6)


def test_openmemory_pool_is_three_k_below_k_3():
    from memsim.checks.framework_check import framework_policy

    assert framework_policy("openmemory", k=1).retriever.prefilter == 3
    assert framework_policy("openmemory", k=2).retriever.prefilter == 6
    assert framework_policy("openmemory", k=10).retriever.prefilter == 8
    assert resolve_policy({"preset": "openmemory"}, "o").retriever.prefilter == 8


@needs_openmemory
def test_openmemory_check_clamps_and_pools_as_the_real_query():
    from memsim.checks import framework_check as fc

    stream, cos = _openmemory_stream()
    res = fc.framework_cross_check("openmemory", stream)
    assert res.summary["identical_share"] == 1.0, res.per_query
    first = res.engine_ids[0].tolist()
    # every note is a candidate (6 < 8); the fresh -0.8 note before the old -0.1 one
    assert first.index(4) < first.index(5)
    # k = 1: the candidates are the 3 most similar, so the fresher 0.49 note
    # (which wins among 8) is not one of them
    one = fc.framework_cross_check("openmemory", stream, k=1)
    assert one.summary["identical_share"] == 1.0, one.per_query
    assert one.engine_ids[0].tolist() == [0]
    eight = resolve_policy({"preset": "openmemory", "candidates": 1,
                            "feedback": {"k": 1}}, "o")
    from memsim.checks.engine_check import prepare_stream, replay_memsim

    ids, _, _ = replay_memsim(prepare_stream(stream, "t"), eight, 1, arm="framework")
    assert ids[0].tolist() == [3]


@pytest.mark.parametrize("threshold", [-0.1, 1.5])
def test_mem0_threshold_outside_zero_one_is_refused_as_mem0_does(threshold):
    """mem0's ``Memory.search`` refuses a threshold outside [0, 1]
    (``_validate_search_params``): so does the preset's ranker, naming it."""
    from memsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="threshold"):
        resolve_policy({"preset": "mem0-oss", "ranker": {"kind": "mem0-oss",
                                                        "threshold": threshold}}, "p")
    assert resolve_policy({"preset": "mem0-oss", "ranker": {"kind": "mem0-oss",
                                                           "threshold": 1.0}}, "p")
