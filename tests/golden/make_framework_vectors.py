"""Write ``framework_vectors.json``: input -> output cases from the frameworks' own code.

Run with the frameworks installed (llama-index-core, crewai, agent-memory-server,
mem0ai, openmemory-python, autogen-core; see the README, "Framework presets")::

    python tests/golden/make_framework_vectors.py

Each case calls the real function (the package's file, imported as
``memsim.checks.framework_check`` does) on fixed inputs; ``tests/test_frameworks.py``
reproduces every output with memsim's components on a fresh clone.
"""

from __future__ import annotations

import datetime as dt
import json
import types
from importlib.metadata import version
from pathlib import Path

from memsim.checks.framework_check import EPOCH, _load_file, _package_dir

OUT = Path(__file__).resolve().parent / "framework_vectors.json"
NOW = EPOCH + dt.timedelta(days=100)
NOW_TS = NOW.replace(tzinfo=dt.timezone.utc).timestamp()


def llamaindex() -> dict:
    from llama_index.core.postprocessor import TimeWeightedPostprocessor
    from llama_index.core.schema import NodeWithScore, TextNode

    # (similarity, hours since __last_accessed__, None = no key)
    nodes = [(0.8, None), (0.7, 0.0), (0.9, 0.05), (0.6, 0.15), (0.95, 1.0), (0.0, 2.0),
             (0.5, None), (0.85, 0.5)]
    pool = [NodeWithScore(node=TextNode(id_=f"n{i}", text="x", metadata={} if h is None else
                                        {"__last_accessed__": NOW_TS - h * 3600}), score=s)
            for i, (s, h) in enumerate(nodes)]
    out = TimeWeightedPostprocessor(top_k=len(nodes), now=NOW_TS).postprocess_nodes(pool)
    return {"version": version("llama-index-core"), "time_decay": 0.99,
            "cases": [{"similarity": s, "hours_since_access": h} for s, h in nodes],
            "order": [int(n.node.id_[1:]) for n in out], "scores": [n.score for n in out]}


def crewai() -> dict:
    mod = _load_file(_package_dir("crewai", "crewai") / "memory" / "types.py", "_g_crewai")

    class _Clock(dt.datetime):
        @classmethod
        def utcnow(cls):
            return NOW.replace(tzinfo=None)

    mod.datetime = _Clock
    cfg = mod.MemoryConfig()
    cases = []
    for sem, age, imp in [(0.9, 0.0, 0.5), (0.5, 30.0, 1.0), (0.2, 90.0, 0.0), (0.7, 7.5, 0.3),
                          (0.33, 365.0, 0.9), (1.0, -1.0, 0.5)]:
        rec = mod.MemoryRecord(content="x", importance=imp,
                               created_at=NOW.replace(tzinfo=None) - dt.timedelta(days=age))
        score, _ = mod.compute_composite_score(rec, sem, cfg)
        cases.append({"semantic": sem, "age_days": age, "importance": imp, "score": score})
    return {"version": version("crewai"), "cases": cases}


def redis() -> dict:
    root = _package_dir("agent_memory_server", "agent-memory-server")
    stub = types.ModuleType("agent_memory_server.models")
    stub.MemoryRecord = stub.MemoryRecordResult = object
    pkg = types.ModuleType("agent_memory_server")
    pkg.__path__ = []
    mod = _load_file(root / "utils" / "recency.py", "_g_ams",
                     {"agent_memory_server": pkg, "agent_memory_server.models": stub})
    now = NOW.replace(tzinfo=dt.timezone.utc)
    rows = [(0.1, 0.0, 0.0), (0.3, 7.0, 30.0), (0.2, 30.0, 30.0), (0.05, 100.0, 200.0),
            (0.4, 1.0, 60.0), (0.25, 3.5, 3.5)]
    mems = [types.SimpleNamespace(id=i, dist=d, last_accessed=now - dt.timedelta(days=a),
                                  created_at=now - dt.timedelta(days=c))
            for i, (d, a, c) in enumerate(rows)]
    ranked = mod.rerank_with_recency(mems, now=now, params={})
    return {"version": version("agent-memory-server"),
            "cases": [{"dist": d, "days_since_access": a, "days_since_created": c,
                       "recency": mod.score_recency(m, now=now, params={})}
                      for (d, a, c), m in zip(rows, mems)],
            "order": [m.id for m in ranked]}


def mem0() -> dict:
    from mem0.utils.scoring import score_and_rank

    sems = [0.05, 0.5, 0.1, 0.99, 0.09, 0.7, 1.2]
    out = score_and_rank([{"id": i, "score": s, "payload": {}} for i, s in enumerate(sems)],
                         {}, {}, 0.1, 5)
    return {"version": version("mem0ai"), "threshold": 0.1, "top_k": 5, "semantic": sems,
            "order": [int(o["id"]) for o in out], "scores": [o["score"] for o in out]}


def openmemory() -> dict:
    import importlib
    import sys

    pkg = types.ModuleType("_g_openmemory")
    pkg.__path__ = [str(_package_dir("openmemory", "openmemory-python"))]
    sys.modules["_g_openmemory"] = pkg
    scoring = importlib.import_module("_g_openmemory.scoring")
    decay = importlib.import_module("_g_openmemory.decay")
    now_ms = int(NOW_TS * 1000)
    decay.time = types.SimpleNamespace(time=lambda: now_ms / 1000.0)
    cases = []
    for sim, days in [(0.9, 0.0), (0.5, 1.0), (0.2, 7.0), (0.7, 30.0), (0.4, 59.0), (0.8, 90.0),
                      (0.0, 3.0)]:
        rec = decay.calc_recency_score(now_ms - int(days * 86400 * 1000))
        cases.append({"similarity": sim, "days_since_seen": days, "recency": rec,
                      "score": scoring.compute_hybrid_score(sim, 0.0, 0.0, rec)})
    return {"version": version("openmemory-python"), "cases": cases}


def autogen() -> dict:
    import asyncio

    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from autogen_core.models import UserMessage

    class _Counter:  # the model client's count_tokens: a size per message
        def __init__(self, sizes):
            self.sizes = sizes

        def count_tokens(self, messages, tools=()):
            return sum(self.sizes[m.content] for m in messages)

    cases = []
    for sizes, limit in [([10, 20, 30, 40, 50], 100), ([5] * 9, 23), ([100, 1, 1, 1, 100], 150),
                         ([7, 3, 9, 4, 8, 2, 6], 20), ([50, 60], 40), ([1, 2, 3], 10)]:
        msgs = [UserMessage(content=f"m{i}", source="user") for i in range(len(sizes))]
        ctx = TokenLimitedChatCompletionContext(
            model_client=_Counter({f"m{i}": s for i, s in enumerate(sizes)}), token_limit=limit,
            initial_messages=msgs)
        kept = asyncio.run(ctx.get_messages())
        cases.append({"tokens": sizes, "token_limit": limit,
                      "kept": [int(m.content[1:]) for m in kept]})
    return {"version": version("autogen-core"), "cases": cases}


if __name__ == "__main__":
    data = {"llamaindex": llamaindex(), "crewai": crewai(), "redis": redis(), "mem0": mem0(),
            "openmemory": openmemory(), "autogen": autogen()}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(OUT)
