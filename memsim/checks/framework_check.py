"""Cross-check memsim's framework presets against the frameworks' own code.

``memsim engine-check NAME EXP.toml`` with NAME one of :data:`ENGINES`
replays one stream twice, query by query:

* through the memsim preset in per-query feedback mode, keeping the
  rankings;
* through the framework's real scoring function, imported from the installed
  package, with a clock that is the stream's (each framework's own way of
  reading "now" is fed the query's time) and the stream's vectors in place of
  its embedder (no model, no LLM is called). The candidate pool each function
  is given is the framework's vector search: LlamaIndex's own
  ``get_top_k_embeddings`` (cosine); for the others, the exact nearest by the
  store's metric in numpy (LanceDB's squared L2 for CrewAI, cosine for Redis
  and Qdrant), since their stores are servers.

Engines and the code they run:

==================== =============================================================
``llamaindex``       llama-index-core: ``TimeWeightedPostprocessor`` (the node
                     metadata it refreshes is kept between queries); ``mode =
                     "now"`` leaves nodes unstamped (its default), ``"created"``
                     stamps each at insertion; ``refresh = false`` turns its
                     ``time_access_refresh`` off (and the preset's feedback)
``crewai``           crewai: ``crewai/memory/types.py`` ``compute_composite_score``,
                     loaded from the installed package's file alone (the
                     package's ``__init__`` imports its whole agent stack)
``redis``            agent-memory-server: ``utils/recency.py``
                     ``rerank_with_recency``, loaded from the file alone (its
                     ``models`` import is only for annotations), and
                     ``long_term_memory.py`` ``update_last_accessed`` (its
                     900-s rate limit), compiled alone and run on a
                     stand-in for Redis that stores values as redis-py does
``mem0``             mem0ai: ``mem0/utils/scoring.py`` ``score_and_rank``
``openmemory``       openmemory-python: ``scoring.py`` ``compute_hybrid_score``,
                     ``decay.py`` ``calc_recency_score`` and ``embeddings.py``
                     ``cosine_similarity`` (loaded without the package's
                     ``__init__``, which needs sentence-transformers), on the
                     ``min(8, 3 k)`` most similar (``MemorySystem.query``),
                     refreshing ``last_seen_at`` of the returned; no waypoint
                     graph
``autogen``          autogen-core: ``TokenLimitedChatCompletionContext.get_messages``
                     over every message so far (one per note, in creation order),
                     its ``token_limit`` the query's budget, its model client's
                     ``count_tokens`` the notes' tokens; compared with the notes
                     the preset packs, in context order
``langgraph``        langgraph-checkpoint-sqlite: ``SqliteStore`` with a TTL
                     (``default_ttl`` the preset's, ``refresh_on_read``): its
                     ``put``, the read refresh (``GetOp(refresh_ttl=True)``) of the
                     notes a query returns and of each organic use, and its
                     ``sweep_ttl`` at memsim's retention sweeps; Python's clock
                     and the database's ``CURRENT_TIMESTAMP`` (a function of the
                     connection) read the stream's time. The ranking is the exact
                     cosine in numpy over the notes the store still holds
                     (``search`` without a query lists them)
``memoripy``         memoripy: ``memory_store.py`` ``MemoryStore.retrieve`` (loaded
                     without the package's ``__init__``, which imports its LLM
                     clients), its ``time.time()`` the stream's clock; no concepts
                     (its LLM's), no clusters (the store starts empty); an
                     organic use adds an access and sets the timestamp
==================== =============================================================

Both replays run on the stream with times quantised to whole seconds
(:func:`memsim.checks.engine_check.quantise_stream`), without expiry and in one
store (no namespaces). A note's organic accesses before a query set its
last access on both sides.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import importlib
import importlib.util
import os
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.runs.config import resolve_policy
from memsim.checks.engine_check import (compare_rankings, csv_saver, format_summary, likely_causes,
                           load_check_config, prepare_stream, replay_memsim, run_check_command, starting,
                           summarise)
from memsim.core.errors import ConfigError, MemsimError
from memsim.data.stream import Stream

__all__ = ["ENGINES", "FrameworkCheckResult", "framework_cross_check", "framework_policy",
           "format_framework_check", "run_framework_check", "main"]

#: Simulated day 0 on the frameworks' clocks.
EPOCH = dt.datetime(2024, 1, 1)
EPOCH_TS = EPOCH.replace(tzinfo=dt.timezone.utc).timestamp()


@dataclass(frozen=True)
class _Engine:
    preset: str
    package: str          # the distribution whose version is reported
    module: str           # the top-level import name
    what: str
    install: str          # how to install what the check reads


#: engine name -> what it checks.
ENGINES: dict[str, _Engine] = {
    "llamaindex": _Engine("llamaindex-time-weighted", "llama-index-core", "llama_index.core",
                          "TimeWeightedPostprocessor", 'pip install -e ".[frameworks]"'),
    "crewai": _Engine("crewai-memory", "crewai", "crewai", "compute_composite_score",
                      "pip install --no-deps crewai==1.15.30"),
    "redis": _Engine("redis-agent-memory", "agent-memory-server", "agent_memory_server",
                     "rerank_with_recency", "pip install --no-deps --ignore-requires-python "
                     "agent-memory-server==0.15.2"),
    "mem0": _Engine("mem0-oss", "mem0ai", "mem0", "score_and_rank",
                    'pip install -e ".[frameworks]"'),
    "openmemory": _Engine("openmemory", "openmemory-python", "openmemory",
                          "compute_hybrid_score", "pip install --no-deps openmemory-python==1.0.0"),
    "memoripy": _Engine("memoripy", "memoripy", "memoripy", "MemoryStore.retrieve",
                        "pip install --no-deps memoripy==0.1.2 (its pinned dependencies "
                        "would downgrade numpy, scipy and scikit-learn; its store needs none "
                        "of them)"),
    "langgraph": _Engine("langgraph-store-ttl", "langgraph-checkpoint-sqlite",
                         "langgraph.store.sqlite", "SqliteStore TTL (refresh on read, sweep_ttl)",
                         'pip install -e ".[frameworks]"'),
    "autogen": _Engine("autogen-token-limited", "autogen-core", "autogen_core",
                       "TokenLimitedChatCompletionContext.get_messages",
                       "pip install autogen-core==0.7.5 in a virtual environment made with "
                       "--system-site-packages (it pins protobuf 5.29, below the 6.x memsim's "
                       "environment may hold)"),
}


def _package_dir(module: str, package: str) -> Path:
    """The installed package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        how = next((e.install for e in ENGINES.values() if e.package == package),
                   f"pip install {package}")
        raise MemsimError(f"the {package} cross-check needs the {package} package, which is "
                          f"not installed: {how} (README, \"Framework presets\")")
    return Path(list(spec.submodule_search_locations)[0])


def _load_file(path: Path, name: str, stubs: dict[str, types.ModuleType] | None = None):
    """Execute one source file of a package as a module of its own."""
    saved = {k: sys.modules.get(k) for k in (stubs or {})}
    sys.modules.update(stubs or {})
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # pydantic resolves its annotations through sys.modules
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def framework_policy(engine: str, *, k: int | None = None, mode: str = "now",
                     refresh: bool = True):
    """The engine's preset, with ``k`` results (and LlamaIndex's ``mode`` and
    ``refresh``: ``time_access_refresh``, off = no feedback)."""
    name = ENGINES[engine].preset
    table: dict[str, Any] = {"preset": name}
    if engine == "llamaindex":
        table["decay"] = {"unstamped": mode}
        if not refresh:
            table["feedback"] = {"touch": "none"}
    if k is not None:
        table["candidates"] = k
        if engine in ("llamaindex", "crewai", "redis"):
            table.setdefault("feedback", {})["k"] = k
        if engine == "redis":
            table["retriever"] = {"prefilter": k}
        if engine == "crewai":
            table["retriever"] = {"prefilter": 2 * k}
        if engine == "mem0":
            table["retriever"] = {"prefilter": max(4 * k, 60)}
        if engine in ("openmemory", "langgraph"):
            table["feedback"] = {"k": k}
        if engine == "openmemory":  # MemorySystem.query: similarities[:k * 3], then [:8]
            table["retriever"] = {"prefilter": min(8, 3 * k)}
    return resolve_policy(table, f"engine_check.{engine}")


# --------------------------------------------------------------------------
# The real side: one loop over the stream, one scorer per engine
# --------------------------------------------------------------------------


class _Store:
    """The notes that exist at a query, their last access (seconds) and the
    organic accesses applied so far."""

    def __init__(self, stream: Stream):
        notes, acc = stream.notes, stream.accesses
        self.note_ids = notes["note_id"].to_numpy(np.int64)
        self.created = np.round(notes["created_at"].to_numpy(np.float64) * 86400).astype(np.int64)
        self.importance = notes["importance"].to_numpy(np.float64) if "importance" in notes \
            else np.ones(len(notes))
        self.order = np.lexsort((self.note_ids, self.created))
        self.emb = np.asarray(stream.note_embeddings, dtype=np.float64)
        self.acc_t = np.round(acc["t"].to_numpy(np.float64) * 86400).astype(np.int64) \
            if len(acc) else np.zeros(0, np.int64)
        self.acc_rows = pd.Index(self.note_ids).get_indexer(acc["note_id"].to_numpy(np.int64)) \
            if len(acc) else np.zeros(0, np.int64)
        self.alive = np.zeros(len(self.note_ids), dtype=bool)
        self.nxt = self.acc_done = 0

    def advance(self, t: int, on_add: Callable[[int], None], on_access: Callable[[int, int], None]):
        while self.nxt < len(self.order) and self.created[self.order[self.nxt]] <= t:
            i = int(self.order[self.nxt])
            self.nxt += 1
            self.alive[i] = True
            on_add(i)
        while self.acc_done < len(self.acc_t) and self.acc_t[self.acc_done] < t:
            i = int(self.acc_rows[self.acc_done])
            if i >= 0 and self.alive[i]:
                on_access(i, int(self.acc_t[self.acc_done]))
            self.acc_done += 1


def _cosines(emb: np.ndarray, q: np.ndarray) -> np.ndarray:
    nn = np.linalg.norm(emb, axis=1)
    qn = np.linalg.norm(q)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((nn > 0) & (qn > 0), emb @ q / (nn * qn), 0.0)


def _nearest(score: np.ndarray, rows: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` rows of highest ``score`` (ties by lower note row)."""
    order = np.lexsort((rows, -score))
    return rows[order[:m]]


def _run(stream: Stream, k: int, setup: Callable, query: Callable) -> tuple[list, list]:
    st = _Store(stream)
    qemb = np.asarray(stream.query_embeddings, dtype=np.float64)
    qt = np.round(stream.queries["t"].to_numpy(np.float64) * 86400).astype(np.int64)
    on_add, on_access = setup(st)
    ids_out, scores_out = [], []
    for j, t in enumerate(qt.tolist()):
        st.advance(t, on_add, on_access)
        rows = np.flatnonzero(st.alive)
        if not len(rows):
            ids_out.append(np.zeros(0, np.int64))
            scores_out.append(np.zeros(0))
            continue
        got_rows, got_scores = query(st, rows, qemb[j], int(t), k)
        ids_out.append(st.note_ids[np.asarray(got_rows, dtype=np.int64)])
        scores_out.append(np.asarray(got_scores, dtype=np.float64))
    return ids_out, scores_out


def _llamaindex(stream: Stream, k: int, mode: str, similarity_top_k: int,
                refresh: bool = True):
    _package_dir("llama_index", "llama-index-core")
    from llama_index.core.indices.query.embedding_utils import get_top_k_embeddings
    from llama_index.core.postprocessor import TimeWeightedPostprocessor
    from llama_index.core.schema import NodeWithScore, TextNode

    key = "__last_accessed__"
    nodes: dict[int, Any] = {}

    def setup(st):
        def on_add(i):
            meta = {} if mode == "now" else {key: EPOCH_TS + float(st.created[i])}
            nodes[i] = TextNode(id_=f"n{i}", text=f"n{i}", metadata=meta)

        def on_access(i, t):
            prev = nodes[i].metadata.get(key)
            nodes[i].metadata[key] = EPOCH_TS + t if prev is None else max(prev, EPOCH_TS + t)
        return on_add, on_access

    def query(st, rows, q, t, k):
        sims, got = get_top_k_embeddings(q.tolist(), st.emb[rows].tolist(),
                                         similarity_top_k=similarity_top_k,
                                         embedding_ids=rows.tolist())
        pool = [NodeWithScore(node=nodes[int(i)], score=float(s)) for s, i in zip(sims, got)]
        post = TimeWeightedPostprocessor(top_k=k, now=EPOCH_TS + t, time_access_refresh=refresh)
        out = post.postprocess_nodes(pool)
        return [int(n.node.id_[1:]) for n in out], [float(n.score) for n in out]

    return _run(stream, k, setup, query), _version("llama-index-core")


def _crewai(stream: Stream, k: int):
    root = _package_dir("crewai", "crewai")
    mod = _load_file(root / "memory" / "types.py", "_memsim_crewai_memory_types")
    clock = {"now": EPOCH}

    class _Clock(dt.datetime):
        @classmethod
        def utcnow(cls):  # the function reads datetime.utcnow()
            return clock["now"]

    mod.datetime = _Clock
    config = mod.MemoryConfig()
    records: dict[int, Any] = {}

    def setup(st):
        if len(st.importance) and not ((st.importance >= 0) & (st.importance <= 1)).all():
            raise ConfigError("the CrewAI cross-check needs importance in [0, 1] "
                              "(MemoryRecord.importance)")

        def on_add(i):
            records[i] = mod.MemoryRecord(content=f"n{i}", importance=float(st.importance[i]),
                                          created_at=EPOCH + dt.timedelta(seconds=int(st.created[i])))
        return on_add, lambda i, t: None

    def query(st, rows, q, t, k):
        clock["now"] = EPOCH + dt.timedelta(seconds=t)
        e = st.emb[rows].astype(np.float32)
        qf = q.astype(np.float32)
        d = np.maximum((qf * qf).sum() + (e * e).sum(axis=1) - np.float32(2) * (e @ qf),
                       np.float32(0))
        sim = np.float32(1) / (np.float32(1) + d)
        pool = _nearest(-d.astype(np.float64), rows, 2 * k)
        pos = {int(r): p for p, r in enumerate(rows)}
        scored = [(int(r), mod.compute_composite_score(records[int(r)], float(sim[pos[int(r)]]),
                                                       config)[0]) for r in pool]
        scored.sort(key=lambda x: x[1], reverse=True)
        return [r for r, _ in scored[:k]], [s for _, s in scored[:k]]

    return _run(stream, k, setup, query), _version("crewai")


def _redis(stream: Stream, k: int, min_interval_s: int = 900):
    root = _package_dir("agent_memory_server", "agent-memory-server")
    stub = types.ModuleType("agent_memory_server.models")
    stub.MemoryRecord = stub.MemoryRecordResult = object  # annotations only
    pkg = types.ModuleType("agent_memory_server")
    pkg.__path__ = []
    mod = _load_file(root / "utils" / "recency.py", "_memsim_ams_recency",
                     {"agent_memory_server": pkg, "agent_memory_server.models": stub})
    clock = {"now": 0}
    update = _server_function(root / "long_term_memory.py", "update_last_accessed", {
        "datetime": _Clock(clock), "UTC": dt.timezone.utc, "Redis": object,
        "Keys": types.SimpleNamespace(memory_key=lambda i: f"memory:{i}")})
    redis = _FakeRedis()

    def when(s):
        return EPOCH.replace(tzinfo=dt.timezone.utc) + dt.timedelta(seconds=float(s))

    def refresh(rows, t):
        # long_term_memory.update_last_accessed itself: its rate limit, and
        # its int() of the stored stamp (a float at creation reads as 0)
        clock["now"] = t
        _drive(update([str(r) for r in rows], redis_client=redis,
                      min_interval_seconds=min_interval_s))

    def last_accessed(r):  # seconds after EPOCH, as the server's float() reads them
        return float(redis.hashes[f"memory:{r}"]["last_accessed"]) - EPOCH_TS

    def setup(st):
        def on_add(i):
            # memory_vector_db stores MemoryRecord.last_accessed (now, at
            # creation) as .timestamp(), a float, which redis-py writes as repr()
            redis.hashes[f"memory:{i}"] = {
                "last_accessed": repr(EPOCH_TS + float(st.created[i])).encode()}
        return on_add, lambda i, t: refresh([i], t)

    def query(st, rows, q, t, k):
        cos = _cosines(st.emb[rows], q)
        pool = _nearest(cos, rows, k)
        pos = {int(r): p for p, r in enumerate(rows)}
        now = when(t)
        mems = [types.SimpleNamespace(id=int(r), dist=1.0 - float(cos[pos[int(r)]]),
                                      last_accessed=when(last_accessed(int(r))),
                                      created_at=when(st.created[int(r)])) for r in pool]
        ranked = mod.rerank_with_recency(mems, now=now, params={})
        scores = [0.8 * (1.0 - m.dist) + 0.2 * mod.score_recency(m, now=now, params={})
                  for m in ranked]
        refresh([m.id for m in ranked], t)
        return [m.id for m in ranked], scores

    return _run(stream, k, setup, query), _version("agent-memory-server")


def _server_function(path: Path, name: str, names: dict[str, Any]) -> Callable:
    """Function ``name`` of the source file ``path``, compiled alone with
    ``names`` as its globals: a module whose imports need a running service
    (agent-memory-server's ``long_term_memory`` needs Redis and an LLM
    client) still gives the function its own code."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and n.name == name]
    if not found:
        raise MemsimError(f"{path}: has no function {name!r}: this version of the package "
                          "is not one the cross-check knows")
    scope = dict(names)
    exec(compile(ast.Module(found, type_ignores=[]), str(path), "exec"), scope)
    return scope[name]


class _Clock:
    """``datetime`` for a function that reads ``datetime.now(tz)``: the
    replay's time (``clock["now"]``, seconds after :data:`EPOCH`)."""

    def __init__(self, clock: dict):
        self._clock = clock

    def now(self, tz=None):
        return EPOCH.replace(tzinfo=dt.timezone.utc) + dt.timedelta(seconds=self._clock["now"])


class _FakeRedis:
    """The hashes of a Redis server, with the pipeline calls
    ``update_last_accessed`` makes; values are stored as redis-py encodes
    them (``str``, then UTF-8 bytes)."""

    def __init__(self):
        self.hashes: dict[str, dict[str, bytes]] = {}

    def pipeline(self):
        return _FakePipeline(self.hashes)


class _FakePipeline:
    def __init__(self, hashes: dict):
        self._hashes, self._ops = hashes, []

    def hget(self, key, name):
        self._ops.append(lambda: self._hashes.get(key, {}).get(name))

    def hset(self, key, mapping):
        def run():
            self._hashes.setdefault(key, {}).update(
                {f: (repr(v) if isinstance(v, float) else str(v)).encode()
                 for f, v in mapping.items()})
        self._ops.append(run)

    def hincrby(self, key, name, amount=1):
        def run():
            h = self._hashes.setdefault(key, {})
            h[name] = str(int(h.get(name, b"0")) + amount).encode()
        self._ops.append(run)

    async def execute(self):
        ops, self._ops = self._ops, []
        return [op() for op in ops]


def _drive(coro):
    """Run a coroutine that never waits on anything (a fake server's calls
    complete at once) to its result, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the coroutine waited on something: a fake server cannot serve it")


def _mem0(stream: Stream, k: int, threshold: float = 0.1):
    _package_dir("mem0", "mem0ai")
    from mem0.utils.scoring import score_and_rank

    def setup(st):
        return (lambda i: None), (lambda i, t: None)

    def query(st, rows, q, t, k):
        cos = _cosines(st.emb[rows], q)
        pool = _nearest(cos, rows, max(4 * k, 60))
        pos = {int(r): p for p, r in enumerate(rows)}
        cands = [{"id": int(r), "score": float(cos[pos[int(r)]]), "payload": {}} for r in pool]
        out = score_and_rank(cands, {}, {}, threshold, k)
        return [int(o["id"]) for o in out], [float(o["score"]) for o in out]

    return _run(stream, k, setup, query), _version("mem0ai")


def _openmemory(stream: Stream, k: int):
    root = _package_dir("openmemory", "openmemory-python")
    pkg = types.ModuleType("_memsim_openmemory")
    pkg.__path__ = [str(root)]  # its modules, without the package's __init__
    sys.modules["_memsim_openmemory"] = pkg
    scoring = importlib.import_module("_memsim_openmemory.scoring")
    decay = importlib.import_module("_memsim_openmemory.decay")
    # embeddings.py imports sentence-transformers for its models; its
    # cosine_similarity (float32, clamped to [0, 1]) needs none of it
    st_stub = types.ModuleType("sentence_transformers")
    st_stub.SentenceTransformer = object
    embeddings = _load_file(root / "embeddings.py", "_memsim_openmemory.embeddings",
                            {"sentence_transformers": st_stub})
    clock = {"ms": 0}
    decay.time = types.SimpleNamespace(time=lambda: clock["ms"] / 1000.0)
    last: dict[int, int] = {}
    inserted: list[int] = []  # storage order: get_vectors_by_sector reads rows as inserted

    def ms(s):
        return int((EPOCH_TS + int(s)) * 1000)

    def setup(st):
        def on_add(i):
            last[i] = ms(st.created[i])  # last_seen_at starts at creation
            inserted.append(i)

        def on_access(i, t):
            last[i] = max(last[i], ms(t))
        return on_add, on_access

    def query(st, rows, q, t, k):
        clock["ms"] = ms(t)
        # MemorySystem.query: every vector's similarity in storage order,
        # sorted (stably) descending, the first k * 3 kept, of which the first
        # 8 are the candidates; each scored from its similarity (its best one
        # starts at 0.0, and cosine_similarity clamps to [0, 1])
        sims = [(i, embeddings.cosine_similarity(q, st.emb[i])) for i in inserted]
        sims.sort(key=lambda x: x[1], reverse=True)
        pool = sims[:k * 3][:8]
        scored = []
        for r, sim in pool:
            best = sim if sim > 0.0 else 0.0
            scored.append((r, scoring.compute_hybrid_score(
                best, 0.0, 0.0, decay.calc_recency_score(last[r]))))
        scored.sort(key=lambda x: x[1], reverse=True)
        top = scored[:k]
        for r, _ in top:  # update_memory_seen(now)
            last[r] = ms(t)
        return [r for r, _ in top], [s for _, s in top]

    return _run(stream, k, setup, query), _version("openmemory-python")


def _memoripy(stream: Stream, k: int, threshold: float = 40.0):
    root = _package_dir("memoripy", "memoripy")
    # memory_store.py alone: the package's __init__ imports its LLM clients
    # (langchain-openai, ollama), which retrieve does not use
    mod = _load_file(root / "memory_store.py", "_memsim_memoripy_store")
    clock = {"now": EPOCH_TS}
    mod.time = types.SimpleNamespace(time=lambda: clock["now"])
    store = mod.MemoryStore(dimension=int(np.asarray(stream.note_embeddings).shape[1]))
    slot: dict[int, int] = {}  # note row -> its position in the short-term memory

    def setup(st):
        def on_add(i):
            slot[i] = len(store.short_term_memory)
            store.add_interaction({"id": i, "prompt": f"n{i}", "output": "",
                                   "embedding": st.emb[i].tolist(),
                                   "timestamp": EPOCH_TS + float(st.created[i]),
                                   "access_count": 1, "concepts": [], "decay_factor": 1.0})

        def on_access(i, t):
            # an organic use is an access as the semantic-memory recall records
            # one: access_count + 1 and the timestamp, the factor left alone
            j = slot[i]
            store.access_counts[j] += 1
            store.timestamps[j] = EPOCH_TS + t
            store.short_term_memory[j]["timestamp"] = EPOCH_TS + t
            store.short_term_memory[j]["access_count"] = store.access_counts[j]
        return on_add, on_access

    def query(st, rows, q, t, k):
        clock["now"] = EPOCH_TS + t
        # no concepts (the LLM's) and no clusters: each score is its adjusted similarity
        out = store.retrieve(q.reshape(1, -1), [], similarity_threshold=threshold)
        return [int(x["id"]) for x in out[:k]], [float(x["total_score"]) for x in out[:k]]

    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # it prints per note
        got = _run(stream, k, setup, query)
    return got, _version("memoripy")


def _langgraph(stream: Stream, k: int, ttl_days: float, period_days: float):
    import sqlite3

    try:
        from langgraph.store.base import GetOp
        from langgraph.store.sqlite import SqliteStore
        from langgraph.store.sqlite import base as sqlite_base
    except ImportError:
        raise MemsimError("the langgraph-checkpoint-sqlite cross-check needs the "
                          "langgraph-checkpoint-sqlite package, which is not installed: "
                          f"{ENGINES['langgraph'].install} (README, \"Framework presets\")"
                          ) from None

    clock = {"s": 0}

    def now() -> dt.datetime:
        return EPOCH.replace(tzinfo=dt.timezone.utc) + dt.timedelta(seconds=clock["s"])

    class _Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):  # put stamps expires_at from datetime.now(timezone.utc)
            return now()

    # the database's clock: SQLite lets a connection's function replace the
    # CURRENT_TIMESTAMP the store stamps, refreshes and sweeps with
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.create_function("current_timestamp", 0, lambda: now().strftime("%Y-%m-%d %H:%M:%S"))
    store = SqliteStore(conn, ttl={"default_ttl": ttl_days * 1440, "refresh_on_read": True})
    ns = ("memsim",)
    swept = {"next": -np.inf}

    def refresh(rows):  # a read that returns the notes refreshes their TTL
        store.batch([GetOp(ns, f"n{int(i)}", refresh_ttl=True) for i in rows])

    def setup(st):
        def on_add(i):
            at, clock["s"] = clock["s"], int(st.created[i])
            store.put(ns, f"n{i}", {"row": int(i)})
            clock["s"] = at

        def on_access(i, t):
            at, clock["s"] = clock["s"], t
            refresh([i])
            clock["s"] = at
        return on_add, on_access

    def query(st, rows, q, t, k):
        clock["s"] = t
        day = t / 86400
        if day >= swept["next"]:  # the sweep memsim's retention period runs
            store.sweep_ttl()
            swept["next"] = (np.floor(day / period_days) + 1) * period_days
        kept = np.array(sorted(int(it.value["row"]) for it in store.search(
            ns, limit=len(st.note_ids) + 1, refresh_ttl=False)), dtype=np.int64)
        if not len(kept):
            return [], []
        cos = _cosines(st.emb[kept], q)
        top = _nearest(cos, kept, k)
        refresh(top)
        pos = {int(r): p for p, r in enumerate(kept)}
        return [int(r) for r in top], [float(cos[pos[int(r)]]) for r in top]

    saved = sqlite_base.datetime
    sqlite_base.datetime = types.SimpleNamespace(datetime=_Clock, timedelta=dt.timedelta,
                                                 timezone=dt.timezone)
    try:
        store.setup()
        return _run(stream, k, setup, query), _version("langgraph-checkpoint-sqlite")
    finally:
        sqlite_base.datetime = saved
        conn.close()


def _query_budgets(stream: Stream) -> np.ndarray:
    """Each query's token budget as memsim resolves it for an arm without one
    (:func:`memsim.engine.resolve_budget`): the stream's, else the default."""
    from memsim.engine import Arm, SimSettings, resolve_budget

    col = (stream.queries["budget_tokens"].to_numpy(np.float64)
           if "budget_tokens" in stream.queries else np.full(len(stream.queries), np.nan))
    return resolve_budget(Arm("autogen", None), SimSettings(), col)


def _autogen(stream: Stream):
    _package_dir("autogen_core", "autogen-core")
    import asyncio

    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from autogen_core.models import UserMessage

    tokens = stream.notes["tokens"].to_numpy(np.int64)
    # _run asks only the queries after the first note (the others see an empty store)
    qt = np.round(stream.queries["t"].to_numpy(np.float64) * 86400).astype(np.int64)
    first = np.round(stream.notes["created_at"].to_numpy(np.float64) * 86400).min()
    budgets = iter(_query_budgets(stream)[qt >= first].tolist())

    class _Counter:
        """The model client's token counter (all the context calls): the
        stream's token count of each message's note, in place of a tokenizer."""

        def count_tokens(self, messages, *, tools=()):
            return int(sum(int(tokens[int(m.content[1:])]) for m in messages))

    history: list = []
    loop = asyncio.new_event_loop()

    def setup(st):
        def on_add(i):
            history.append(UserMessage(content=f"n{i}", source="user"))
        return on_add, lambda i, t: None

    def query(st, rows, q, t, k):
        ctx = TokenLimitedChatCompletionContext(_Counter(), token_limit=int(next(budgets)),
                                                initial_messages=history)
        kept = loop.run_until_complete(ctx.get_messages())
        return [int(m.content[1:]) for m in kept], [0.0] * len(kept)

    try:
        return _run(stream, 1, setup, query), _version("autogen-core")
    finally:
        loop.close()


@dataclass
class FrameworkCheckResult:
    """Outcome of :func:`framework_cross_check`: ``per_query`` (one row per
    query, :func:`memsim.checks.engine_check.compare_rankings` plus ``cause``) and
    ``summary``."""

    per_query: pd.DataFrame
    summary: dict
    engine_ids: list = field(repr=False, default_factory=list)


def framework_cross_check(engine: str, stream: Stream, *, k: int | None = None,
                          mode: str = "now", refresh: bool = True,
                          feedback_mode: str = "per-query") -> FrameworkCheckResult:
    """Replay ``stream`` through ``engine``'s real code and its memsim preset
    and compare the returned top ``k`` query by query (``k`` None: the
    preset's number of results; ``mode`` and ``refresh``: LlamaIndex's
    unstamped nodes and ``time_access_refresh``). ``feedback_mode =
    "per-tick"`` replays memsim with the uses of a day applied at its end, to
    measure that approximation (the frameworks apply them query by query)."""
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: unknown; allowed: {', '.join(ENGINES)}")
    if engine == "llamaindex" and mode not in ("now", "created"):
        raise ConfigError(f"mode: expected 'now' or 'created', got {mode!r}")
    if feedback_mode not in ("per-query", "per-tick"):
        raise ConfigError(f"feedback_mode: expected 'per-query' or 'per-tick', got "
                          f"{feedback_mode!r}")
    if not isinstance(refresh, bool):
        raise ConfigError(f"refresh: expected true or false, got {refresh!r}")
    if engine == "autogen" and k is not None:
        raise ConfigError("k: the autogen check compares the whole context (every message "
                          "that fits), not a top k")
    policy = framework_policy(engine, k=k, mode=mode, refresh=refresh)
    k = int(policy.candidates)
    if k < 1:
        raise ConfigError(f"k: expected >= 1, got {k}")
    qs = prepare_stream(stream, "the framework cross-checks need")
    t0 = time.perf_counter()
    if engine == "llamaindex":
        (ids, scores), version = _llamaindex(qs, k, mode, policy.retriever.prefilter, refresh)
    elif engine == "crewai":
        (ids, scores), version = _crewai(qs, k)
    elif engine == "redis":
        (ids, scores), version = _redis(qs, k)
    elif engine == "openmemory":
        (ids, scores), version = _openmemory(qs, k)
    elif engine == "memoripy":
        (ids, scores), version = _memoripy(qs, k, policy.ranker.threshold)
    elif engine == "autogen":
        (ids, scores), version = _autogen(qs)
    elif engine == "langgraph":
        from memsim.engine import SimSettings  # the period replay_memsim sweeps at

        (ids, scores), version = _langgraph(qs, k, policy.retention.ttl_days,
                                            SimSettings().retention_period_days)
    else:
        (ids, scores), version = _mem0(qs, k)
    eng_s = time.perf_counter() - t0
    mem_ids, mem_scores, mem_s = replay_memsim(qs, policy, k, feedback_mode, arm="framework",
                                               packed=engine == "autogen")
    if engine == "autogen":  # a context, not a top k: its messages (no scores), the most kept
        k = max([1] + [len(x) for x in ids])
        mem_scores = [np.zeros(len(x)) for x in mem_ids]
    per_query = compare_rankings(qs, ids, scores, mem_ids, mem_scores, k)
    checks = [(per_query["near_tie"].to_numpy(bool), "near tie (score gap < 1e-6 at the boundary)")]
    if engine == "openmemory":  # the documented parting of a small store, named first
        pool = int(policy.retriever.prefilter)
        checks.insert(0, (_few_positive(qs, pool),
                          f"fewer than {pool} notes with a positive cosine: OpenMemory fills "
                          "its candidates with the earliest stored of the others, the preset "
                          "with the highest cosines"))
    per_query["cause"] = likely_causes(per_query["identical"].to_numpy(), checks,
                                       "last-access refreshes differ since an earlier difference")
    summary = summarise(per_query, k)
    summary.update(engine=engine, engine_version=version, preset=ENGINES[engine].preset,
                   feedback_mode=feedback_mode, mode=mode if engine == "llamaindex" else None,
                   refresh=refresh if engine == "llamaindex" else None, n_notes=int(qs.n_notes),
                   memsim_s=mem_s, engine_s=eng_s)
    return FrameworkCheckResult(per_query=per_query, summary=summary, engine_ids=ids)


def _few_positive(stream: Stream, pool: int) -> np.ndarray:
    """(Q,) bool: the queries with fewer than ``pool`` notes of positive
    cosine among those stored by their time (the sign of the dot product)."""
    dots = (np.asarray(stream.query_embeddings, dtype=np.float64)
            @ np.asarray(stream.note_embeddings, dtype=np.float64).T)
    stored = (stream.notes["created_at"].to_numpy(np.float64)[None, :]
              <= stream.queries["t"].to_numpy(np.float64)[:, None])
    return ((dots > 0) & stored).sum(axis=1) < pool


def format_framework_check(res: FrameworkCheckResult) -> str:
    s = res.summary
    eng = ENGINES[s["engine"]]
    mode = f", mode {s['mode']}" if s.get("mode") else ""
    if s.get("refresh") is False:
        mode += ", no refresh"
    head = (f"{eng.package} {s['engine_version']} {eng.what} vs memsim preset "
            f"'{s['preset']}' ({s['feedback_mode']} feedback{mode})\n"
            f"  stream: {s['n_notes']:,} notes, {s['n_queries']:,} queries; k = {s['k']}")
    return head + "\n" + format_summary(res.per_query, s) + (
        f"\n  time: memsim {s['memsim_s']:.1f} s, {eng.package} {s['engine_s']:.1f} s")


_KEYS = {"seed", "k", "mode", "refresh", "feedback_mode"}


def run_framework_check(engine: str, path: Any, *, verbose: bool = True,
                        on_result: Any = None) -> list[FrameworkCheckResult]:
    """Run the check a TOML file (or its parsed dict) describes: an
    ``[engine_check]`` table (``seed``; ``k`` and, for LlamaIndex, ``mode``,
    each a value or a list: one result per combination) and a ``[workload]``
    table. ``on_result(res)`` is called as each combination finishes."""
    check, stream, where = load_check_config(path, ("engine_check",), _KEYS)
    ks = check.get("k", [None])
    # the mode and the refresh are LlamaIndex's alone; the other engines ignore them
    modes = check.get("mode", ["now", "created"]) if engine == "llamaindex" else ["now"]
    refreshes = check.get("refresh", [True]) if engine == "llamaindex" else [True]
    ks = ks if isinstance(ks, list) else [ks]
    for k in ks:
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ConfigError(f"{where}: engine_check.k: expected an integer >= 1, got {k!r}")
    combos = [(k, mode, refresh) for k in ks
              for mode in (modes if isinstance(modes, list) else [modes])
              for refresh in (refreshes if isinstance(refreshes, list) else [refreshes])]
    results = []
    for i, (k, mode, refresh) in enumerate(combos):
        if verbose:
            starting(f"memsim engine-check {engine}", i, len(combos),
                     f"k = {k if k is not None else 'default'}"
                     + (f", mode {mode}, refresh {refresh}" if engine == "llamaindex" else ""))
        res = framework_cross_check(engine, stream, k=k, mode=mode, refresh=refresh,
                                    feedback_mode=check.get("feedback_mode", "per-query"))
        results.append(res)
        if on_result is not None:
            on_result(res)
        if verbose:
            print(format_framework_check(res), flush=True)
    return results


def main(engine: str, argv: list[str] | None = None) -> int:
    """``memsim engine-check ENGINE CONFIG.toml [--csv PREFIX]`` for a framework."""
    parser = argparse.ArgumentParser(prog=f"memsim engine-check {engine}")
    parser.add_argument("config")
    parser.add_argument("--csv", metavar="PREFIX")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    def name(res) -> str:
        s = res.summary
        return (f"{engine}_k{s['k']}" + (f"_{s['mode']}" if s.get("mode") else "")
                + ("_norefresh" if s.get("refresh") is False else ""))
    return run_check_command(
        lambda: run_framework_check(engine, args.config, on_result=csv_saver(args.csv, name),
                                    verbose=not args.json),
        args.json)

