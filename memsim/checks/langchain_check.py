"""Cross-check memsim's ``langchain-time-weighted`` preset against LangChain.

The check replays one stream twice, query by query:

* through memsim's ``langchain-time-weighted`` preset in per-query feedback
  mode (each query sees the last-access resets of the one before), keeping
  the rankings;
* through LangChain's real ``TimeWeightedVectorStoreRetriever``
  (langchain-classic, the optional extra ``memsim[langchain]``) over a FAISS
  store (langchain-community, faiss-cpu). The store's embedding model is a
  stand-in that returns the stream's own vectors (a note's text is its id),
  so both sides see the same vectors. The clock is LangChain's own
  ``langchain_core.utils.mock_now``: a note is added with ``current_time`` =
  its creation time, each query runs with ``now`` = the query's time, and an
  organic access sets the document's ``last_accessed_at``.

The FAISS store follows ``relevance``: ``"cosine"``: an inner-product index
over L2-normalised vectors (``normalize_L2=True``) with the inner product as
relevance (``relevance_score_fn``); ``"l2"``: LangChain's default
(``IndexFlatL2``, relevance ``1 - d / sqrt(2)``); ``"inner-product"``:
``DistanceStrategy.MAX_INNER_PRODUCT`` without normalisation.

Both replays run on the stream with times quantised to whole seconds (as
the Feather check), notes that never expire (LangChain has no TTL: the
check drops ``expires_at``) and one store (no namespaces). The engine's
scores are read as LangChain computes them (``_get_combined_score``, recorded
by a subclass that changes nothing else).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from memsim.runs.config import resolve_policy
from memsim.checks.engine_check import (compare_rankings, csv_saver, format_summary, likely_causes,
                           prepare_stream, read_check_config, replay_memsim, run_check_command, starting,
                           summarise)
from memsim.core.errors import ConfigError, MemsimError
from memsim.core.params import Interval, Options
from memsim.data.stream import Stream

__all__ = ["LangChainCheckResult", "langchain_cross_check", "langchain_policy",
           "replay_langchain", "format_langchain_check", "run_langchain_check", "main"]

#: Simulated day 0 on LangChain's clock.
EPOCH = dt.datetime(2024, 1, 1)


def _require_langchain():
    try:
        import faiss  # noqa: F401
        from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever  # noqa: F401
        from langchain_community.vectorstores import FAISS  # noqa: F401
    except ImportError:
        raise MemsimError(
            "the LangChain cross-check needs langchain-classic, langchain-community and "
            "faiss-cpu, which are not installed: pip install -e \".[langchain]\" (from the repository)"
        ) from None


def langchain_policy(*, k: int = 4, search_k: int = 100, decay_rate: float = 0.01,
                     relevance: str = "cosine", default_salience: float | None = None):
    """memsim's ``langchain-time-weighted`` preset with the retriever's parameters."""
    table = {
        "preset": "langchain-time-weighted",
        "decay": {"decay_rate": decay_rate},
        "ranker": {"relevance": relevance, "search_k": search_k, "k": k,
                   "default_salience": 0.0 if default_salience is None
                   else float(default_salience)},
        "feedback": {"k": k},
        "candidates": k,
    }
    return resolve_policy(table, "langchain_check.policy")


def _retriever_class():
    from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
    from pydantic import PrivateAttr

    class _Recording(TimeWeightedVectorStoreRetriever):
        """The real retriever, recording each document's combined score."""

        _scores: dict = PrivateAttr(default_factory=dict)
        _store_hits: set = PrivateAttr(default_factory=set)

        def _get_combined_score(self, document, vector_relevance, current_time):
            score = super()._get_combined_score(document, vector_relevance, current_time)
            self._scores[document.metadata["buffer_idx"]] = float(score)
            return score

        def get_salient_docs(self, query):
            out = super().get_salient_docs(query)
            self._store_hits = set(out)
            return out

    return _Recording


def _embeddings(note_emb: np.ndarray, query_emb: np.ndarray):
    from langchain_core.embeddings import Embeddings

    class _StreamVectors(Embeddings):
        """Texts are ``n<row>`` / ``q<row>``: their vectors come from the stream."""

        def embed_documents(self, texts):
            return [note_emb[int(t[1:])].tolist() for t in texts]

        def embed_query(self, text):
            return query_emb[int(text[1:])].tolist()

    return _StreamVectors()


def _store(relevance: str, embedding, dim: int):
    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    kw: dict[str, Any] = {}
    if relevance == "cosine":
        index = faiss.IndexFlatIP(dim)
        kw = dict(distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT, normalize_L2=True,
                  relevance_score_fn=lambda s: s)
    elif relevance == "inner-product":
        index = faiss.IndexFlatIP(dim)
        kw = dict(distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
    elif relevance == "l2":
        index = faiss.IndexFlatL2(dim)
    else:
        raise ConfigError(f"relevance: expected 'cosine', 'l2' or 'inner-product', got "
                          f"{relevance!r}")
    with warnings.catch_warnings():
        # LangChain warns that L2 normalisation "is not applicable" to an
        # inner-product index; normalised vectors under an inner product are
        # exactly the cosine this check needs (LangChain's own cosine recipe),
        # so the warning is about a combination memsim chose on purpose.
        warnings.filterwarnings("ignore", message="Normalizing L2 is not applicable")
        return FAISS(embedding, index, InMemoryDocstore(), {}, **kw)


@dataclass
class _EngineSide:
    ids: list
    scores: list
    recent_only: np.ndarray   # per query: returned documents the store did not return
    seconds: float
    version: str


def replay_langchain(stream: Stream, *, k: int = 4, search_k: int = 100,
                     decay_rate: float = 0.01, relevance: str = "cosine",
                     default_salience: float | None = None) -> _EngineSide:
    """Replay a prepared stream (whole seconds, no expiry) through LangChain."""
    _require_langchain()

    from langchain_core.documents import Document
    from langchain_core.utils import mock_now

    notes, queries, acc = stream.notes, stream.queries, stream.accesses
    note_ids = notes["note_id"].to_numpy(np.int64)
    created = np.round(notes["created_at"].to_numpy(np.float64) * 86400).astype(np.int64)
    order = np.lexsort((note_ids, created))
    qt = np.round(queries["t"].to_numpy(np.float64) * 86400).astype(np.int64)
    acc_t = np.round(acc["t"].to_numpy(np.float64) * 86400).astype(np.int64) if len(acc) \
        else np.zeros(0, np.int64)
    acc_rows = pd.Index(note_ids).get_indexer(acc["note_id"].to_numpy(np.int64)) if len(acc) \
        else np.zeros(0, np.int64)
    emb = np.asarray(stream.note_embeddings, dtype=np.float32)
    qemb = np.asarray(stream.query_embeddings, dtype=np.float32)

    def when(s: int) -> dt.datetime:
        return EPOCH + dt.timedelta(seconds=int(s))

    vs = _store(relevance, _embeddings(emb, qemb), emb.shape[1])
    retr = _retriever_class()(vectorstore=vs, decay_rate=decay_rate, k=k,
                              search_kwargs={"k": search_k}, default_salience=default_salience)
    buffer_of = np.full(len(note_ids), -1, dtype=np.int64)
    pending: dict[int, int] = {}
    nxt = acc_done = 0
    ids_out, scores_out = [], []
    recent_only = np.zeros(len(qt), dtype=np.int64)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # relevance outside [0, 1] warns in LangChain
        for j, t in enumerate(qt.tolist()):
            while nxt < len(order) and created[order[nxt]] <= t:
                i = int(order[nxt])
                nxt += 1
                meta = {"note_id": int(note_ids[i])}
                if i in pending:
                    meta["last_accessed_at"] = when(max(pending.pop(i), created[i]))
                buffer_of[i] = len(retr.memory_stream)
                retr.add_documents([Document(page_content=f"n{i}", metadata=meta)],
                                   current_time=when(created[i]))
            while acc_done < len(acc_t) and acc_t[acc_done] < t:
                i = int(acc_rows[acc_done])
                if buffer_of[i] >= 0:
                    doc = retr.memory_stream[buffer_of[i]]
                    doc.metadata["last_accessed_at"] = max(doc.metadata["last_accessed_at"],
                                                           when(acc_t[acc_done]))
                else:
                    pending[i] = int(acc_t[acc_done])
                acc_done += 1
            if not retr.memory_stream:
                ids_out.append(np.zeros(0, np.int64))
                scores_out.append(np.zeros(0))
                continue
            retr._scores.clear()
            with mock_now(when(t)):
                docs = retr.invoke(f"q{j}")
            bidx = [d.metadata["buffer_idx"] for d in docs]
            ids_out.append(np.array([d.metadata["note_id"] for d in docs], dtype=np.int64))
            scores_out.append(np.array([retr._scores[b] for b in bidx], dtype=np.float64))
            recent_only[j] = sum(b not in retr._store_hits for b in bidx)
    seconds = time.perf_counter() - t0
    from importlib.metadata import version

    return _EngineSide(ids=ids_out, scores=scores_out, recent_only=recent_only,
                       seconds=seconds, version=version("langchain-classic"))


@dataclass
class LangChainCheckResult:
    """Outcome of :func:`langchain_cross_check`: ``per_query`` (one row per
    query, :func:`memsim.checks.engine_check.compare_rankings` plus ``recent_only``
    and ``cause``) and ``summary``."""

    per_query: pd.DataFrame
    summary: dict
    engine: Any = field(repr=False, default=None)


def langchain_cross_check(stream: Stream, *, k: int = 4, search_k: int = 100,
                          decay_rate: float = 0.01, relevance: str = "cosine",
                          default_salience: float | None = None,
                          feedback_mode: str = "per-query") -> LangChainCheckResult:
    """Replay ``stream`` through LangChain's retriever and memsim's preset and
    compare the returned top ``k`` query by query.

    ``feedback_mode = "per-tick"`` replays memsim in its default mode, to
    measure how far that approximation moves the top k (the engine always
    resets per call).
    """
    _require_langchain()
    if k < 1:
        raise ConfigError(f"The 'k' parameter of langchain_cross_check must be >= 1. Got {k!r} "
                          "instead.")
    qs = prepare_stream(stream, "the LangChain cross-check needs")
    policy = langchain_policy(k=k, search_k=search_k, decay_rate=decay_rate,
                              relevance=relevance, default_salience=default_salience)
    mem_ids, mem_scores, mem_s = replay_memsim(qs, policy, k, feedback_mode, arm="langchain")
    eng = replay_langchain(qs, k=k, search_k=search_k, decay_rate=decay_rate,
                           relevance=relevance, default_salience=default_salience)
    per_query = compare_rankings(qs, eng.ids, eng.scores, mem_ids, mem_scores, k)
    per_query["recent_only"] = eng.recent_only
    per_query["cause"] = likely_causes(
        per_query["identical"].to_numpy(),
        [(per_query["near_tie"].to_numpy(bool), "near tie (score gap < 1e-6 at the boundary)"),
         (per_query["recent_only"].to_numpy(bool),
          "a recent-window document (not among the store's nearest) was returned")],
        "last-access resets differ since an earlier difference")
    summary = summarise(per_query, k)
    summary.update(engine="langchain", engine_version=eng.version, relevance=relevance,
                   search_k=search_k, decay_rate=decay_rate, feedback_mode=feedback_mode,
                   default_salience=default_salience, n_notes=int(qs.n_notes),
                   memsim_s=mem_s, engine_s=eng.seconds)
    return LangChainCheckResult(per_query=per_query, summary=summary, engine=eng)


def format_langchain_check(res: LangChainCheckResult) -> str:
    s = res.summary
    head = (f"LangChain cross-check: langchain-classic {s['engine_version']} "
            f"TimeWeightedVectorStoreRetriever (FAISS, relevance {s['relevance']}) vs memsim "
            f"preset 'langchain-time-weighted' ({s['feedback_mode']} feedback)\n"
            f"  stream: {s['n_notes']:,} notes, {s['n_queries']:,} queries; k = {s['k']}, "
            f"search k = {s['search_k']}, decay_rate = {s['decay_rate']:g}")

    return head + "\n" + format_summary(res.per_query, s) + (
        f"\n  time: memsim {s['memsim_s']:.1f} s, LangChain {s['engine_s']:.1f} s")


_KEYS = {"seed", "k", "search_k", "decay_rate", "relevance", "default_salience", "feedback_mode"}


def run_langchain_check(path: str | os.PathLike | dict, *, verbose: bool = True,
                        on_result: Any = None) -> list[LangChainCheckResult]:
    """Run the check a TOML file (or its parsed dict) describes: a
    ``[langchain_check]`` (or ``[engine_check]``) table whose ``k`` and
    ``relevance`` may be lists (one result per combination), and a
    ``[workload]`` table (synthetic knobs, or ``source = "DIR"``).
    ``on_result(res)`` is called as each combination finishes."""
    conf = read_check_config(path, ("langchain_check", "engine_check"), _KEYS)
    ks = conf.values("k", Interval(1, 1 << 20, integer=True), [4])
    rels = conf.values("relevance", Options(("cosine", "l2", "inner-product")), ["cosine"])
    search_k = conf.value("search_k", Interval(1, None, integer=True), 100)
    decay_rate = conf.value("decay_rate", Interval(0, 1, closed="left"), 0.01)
    default_salience = conf.value("default_salience", Interval(None, None), None)
    feedback_mode = conf.value("feedback_mode", Options(("per-query", "per-tick")), "per-query")
    combos = [(k, rel) for k in ks for rel in rels]
    results = []
    for i, (k, rel) in enumerate(combos):
        if verbose:
            starting("memsim engine-check langchain", i, len(combos), f"k = {k}, {rel}")
        res = langchain_cross_check(
            conf.stream, k=k, relevance=rel, search_k=search_k, decay_rate=float(decay_rate),
            default_salience=default_salience, feedback_mode=feedback_mode)
        results.append(res)
        if on_result is not None:
            on_result(res)
        if verbose:
            print(format_langchain_check(res), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    """``python -m memsim.checks.langchain_check CONFIG.toml [--csv PREFIX]``."""
    parser = argparse.ArgumentParser(prog="memsim engine-check langchain",
                                     description="Cross-check memsim's langchain-time-weighted "
                                                 "preset against LangChain's retriever.")
    parser.add_argument("config", help="TOML file (see experiments/langchain_check.toml)")
    parser.add_argument("--csv", metavar="PREFIX",
                        help="write PREFIX_k<k>_<relevance>.csv with the per-query table")
    parser.add_argument("--json", action="store_true",
                        help="print each configuration's summary as JSON instead of text")
    args = parser.parse_args(argv)
    def name(res) -> str:
        return f"k{res.summary['k']}_{res.summary['relevance']}"
    return run_check_command(
        lambda: run_langchain_check(args.config, on_result=csv_saver(args.csv, name),
                                    verbose=not args.json),
        args.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
