"""Presets of the memory layers agent frameworks ship, each with its source.

Registered on import (:mod:`memsim.policies` imports this module after the
built-in presets). Every value the source does not give is marked assumed
(:func:`memsim.policies.add_preset`). ``memsim engine-check NAME EXP.toml``
(:mod:`memsim.checks.framework_check`) replays a stream through the real scoring
function and the preset, query by query.
"""

from __future__ import annotations

from .presets import add_preset

__all__: list[str] = []

_LLAMA_DOC = """LlamaIndex's TimeWeightedPostprocessor ({mode}): similarity + 0.01 ** hours since last use.

    Source: llama-index-core 0.14.25, ``llama_index/core/postprocessor/
    node_recency.py``, ``TimeWeightedPostprocessor._postprocess_nodes``: the
    retriever's ``similarity_top_k = 2`` nearest nodes (``VectorIndexRetriever``
    default, ``constants.DEFAULT_SIMILARITY_TOP_K``; cosine, the
    ``SimpleVectorStore`` default) each score ``(score or 1.0) + (1 -
    time_decay) ** hours_since_last_access`` with ``time_decay = 0.99``
    (a 9.0-minute half-life); the top ``top_k = 1`` are returned and their
    ``__last_accessed__`` set to now (``time_access_refresh = True``;
    feedback ``touch = "returned"``, ``k = 1``, per query). {detail}
    ``memsim engine-check llamaindex`` replays a stream through the real
    postprocessor.

    The refresh is kept only where the application keeps the node objects
    (or writes the key back to its store). A ``VectorStoreIndex`` over its
    docstore builds fresh nodes from the docstore at every retrieval
    (``VectorIndexRetriever._build_node_list_from_query_result``), so the
    stamp is lost: replay such a pipeline with ``feedback = {{touch =
    "none"}}`` (the default mode then ranks by similarity alone, every
    node counting as accessed now; the stamped one by age from creation)."""

add_preset(
    "llamaindex-time-weighted",
    _LLAMA_DOC.format(
        mode="its default", detail="A node without ``__last_accessed__`` (never returned) "
        "counts as accessed now: its time weight is 1 until the postprocessor first returns "
        "it (decay ``unstamped = \"now\"``)."),
    assumed={"packer.kind": "the postprocessor has no token budget: skip-fill in score order"},
    retriever={"kind": "cosine", "prefilter": 2},
    decay={"kind": "llamaindex", "time_decay": 0.99, "unstamped": "now"},
    ranker="llamaindex",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 1, "timing": "per-query"},
    candidates=1,
)

add_preset(
    "llamaindex-time-weighted-stamped",
    _LLAMA_DOC.format(
        mode="nodes stamped at creation", detail="Each node is stamped with "
        "``__last_accessed__`` = its creation time when it is inserted (decay ``unstamped = "
        "\"created\"``), as LlamaIndex's own test of the postprocessor does."),
    assumed={"packer.kind": "the postprocessor has no token budget: skip-fill in score order",
             "decay.unstamped": "the application stamps each node at its creation (the "
                                "code's default leaves it unstamped)"},
    retriever={"kind": "cosine", "prefilter": 2},
    decay={"kind": "llamaindex", "time_decay": 0.99, "unstamped": "created"},
    ranker="llamaindex",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 1, "timing": "per-query"},
    candidates=1,
)

add_preset(
    "crewai-memory",
    """CrewAI's memory recall: 0.5 similarity + 0.3 * 0.5 ** (age / 30 d) + 0.2 importance.

    Source: crewai 1.15.30, ``crewai/memory/types.py``,
    ``compute_composite_score`` (weights ``MemoryConfig``: ``semantic_weight
    = 0.5``, ``recency_weight = 0.3``, ``importance_weight = 0.2``,
    ``recency_half_life_days = 30``; the age from ``created_at``), over the
    candidates of ``crewai/memory/recall_flow.py`` (``limit *
    _RECALL_OVERSAMPLE_FACTOR`` = 2 x 10 nearest, ``Memory.recall(limit =
    10)``) from the LanceDB store (``storage/lancedb_storage.py``:
    similarity ``1 / (1 + _distance)``, LanceDB's squared L2 distance: the
    ``inverse-sq-l2`` retriever); the top 10 are returned. ``touch_records``
    sets ``last_accessed``, which the score does not read. The note's
    ``importance`` column stands for ``MemoryRecord.importance`` (0-1,
    default 0.5). ``memsim engine-check crewai`` replays a stream through the
    real ``compute_composite_score``.""",
    assumed={
        "retriever.kind": "LanceDB's default metric (l2; CrewAI sets none), whose _distance "
                          "is taken as the squared L2 distance",
        "retriever.prefilter": "deep recall's 2 x limit oversampling, with the LLM's query "
                               "analysis keeping the one query and scope",
        "packer.kind": "recall has no token budget: skip-fill in score order",
    },
    retriever={"kind": "inverse-sq-l2", "prefilter": 20},
    decay={"kind": "half-life", "half_life_days": 30.0, "clock": "created"},
    ranker={"kind": "linear", "w_relevance": 0.5, "w_recency": 0.3, "w_importance": 0.2},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 10, "timing": "per-query"},
    candidates=10,
)

add_preset(
    "redis-agent-memory",
    """Redis agent-memory-server: 0.8 similarity + 0.2 (0.6 freshness + 0.4 novelty), 7 d / 30 d.

    Source: agent-memory-server 0.15.2, ``agent_memory_server/utils/
    recency.py``, ``rerank_with_recency`` / ``score_recency`` (the
    ``redis-recency`` ranker), applied by ``api.py``'s
    ``search_long_term_memory`` (``recency_boost`` on by default) to the
    page of ``limit = 10`` nearest memories (``SearchRequest.limit``; Redis
    cosine distance, ``config.py`` ``redisvl_distance_metric = "COSINE"``,
    so ``1 - dist`` is the cosine); afterwards
    ``long_term_memory.update_last_accessed`` sets ``last_accessed`` of
    every returned memory whose ``last_accessed`` is at least 900 s old,
    one ``last_accessed`` per memory (whoever asks) (feedback ``touch =
    "returned"``, ``cooldown_s = 900``, ``cooldown_per = "note"``). A
    memory's first return always refreshes it: ``last_accessed`` is stored
    at creation as a float (``memory_vector_db.py``, ``.timestamp()``), which
    the rate limit's ``int(val)`` cannot read and takes as 0; the 900 s run
    from the first refresh, which stores whole seconds
    (``cooldown_from_creation = false``, the default). ``memsim engine-check
    redis`` replays a stream through the real ``rerank_with_recency`` and
    ``update_last_accessed``.""",
    assumed={"packer.kind": "search has no token budget: skip-fill in score order"},
    retriever={"kind": "cosine", "prefilter": 10},
    ranker="redis-recency",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 10, "cooldown_s": 900.0,
              "cooldown_per": "note", "timing": "per-query"},
    candidates=10,
)

add_preset(
    "mem0-oss",
    """mem0 OSS search: semantic score over an over-fetched pool, gated at 0.1; no recency.

    Source: mem0ai 2.2.1, ``mem0/memory/main.py`` (``Memory.search``:
    ``top_k = 20``, ``threshold = 0.1``; ``_search_vector_store``: a pool of
    ``max(limit * 4, 60)`` = 80 nearest) and ``mem0/utils/scoring.py``
    (``score_and_rank``, the ``mem0-oss`` ranker): ``min((semantic + bm25 +
    entity) / max_possible, 1)``; memsim's streams carry no BM25 or entity
    signal, so the score is the cosine, capped at 1. The OSS library has no
    recency term and updates nothing on search. ``memsim engine-check mem0``
    replays a stream through the real ``score_and_rank``.""",
    assumed={"packer.kind": "search has no token budget: skip-fill in score order",
             "retriever.kind": "the vector store's similarity (Qdrant's cosine by default)"},
    retriever={"kind": "cosine", "prefilter": 80},
    ranker={"kind": "mem0-oss", "threshold": 0.1},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "none", "timing": "per-query"},
    candidates=20,
)

add_preset(
    "agent-framework-default",
    """An agent framework's default decay: similarity times exp(-0.03 * days) since creation.

    The default reported from one agent framework's tracker (a 23.1-day
    half-life, ``ln 2 / 0.03``; recall 0.000 on a 242-day LoCoMo corpus
    there). The decay is ``exp-rate`` with ``rate_per_day = 0.03``; how the
    framework combines it with similarity, and from which clock, is not in
    the report: memsim multiplies (``product``) and counts from creation.""",
    assumed={"ranker.kind": "the report gives the decay only: multiplied with similarity",
             "decay.clock": "the report gives the decay only: age since creation",
             "packer.kind": "skip-fill in score order within the budget"},
    retriever="cosine",
    decay={"kind": "exp-rate", "rate_per_day": 0.03, "clock": "created"},
    ranker="product",
    packer="skip-fill",
    orderer="score",
)

add_preset(
    "langgraph-store-ttl",
    """LangGraph's store with a TTL refreshed on read: similarity search, items expire unused.

    Source: langgraph-checkpoint 4.3.2, ``langgraph/store/base/__init__.py``
    (``TTLConfig``: ``default_ttl`` minutes after the last access,
    ``refresh_on_read = True``, expired items deleted by a sweep every
    ``sweep_interval_minutes``); ``BaseStore.search`` ranks by the index's
    similarity (cosine), ``limit = 10``, and refreshes the TTL of what it
    returns (feedback ``touch = "returned"``, ``k = 10``; the ``ttl``
    retention counts from the last use). ``default_ttl`` is None in the code:
    the application sets it. The SQLite store (``langgraph/store/sqlite/
    base.py``) refreshes only when the TTL config sets ``refresh_on_read``
    itself (``ttl_config.get("refresh_on_read", False)``): with ``ttl =
    {"default_ttl": ...}`` alone its items expire a TTL after they were
    written, however often read; ``retention.clock = "created"`` models that
    store (``memsim engine-check langgraph`` sets ``refresh_on_read``).""",
    assumed={"retention.ttl_days": "the code has no default TTL (None: no expiry): 30 days",
             "packer.kind": "search has no token budget: skip-fill in score order"},
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "ttl", "ttl_days": 30.0, "clock": "last_access"},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 10, "timing": "per-query"},
    candidates=10,
)

add_preset(
    "cognee-cleanup",
    """Cognee's unused-data cleanup: documents not returned within the threshold, or never, are deleted.

    Source: cognee 1.6.5, ``cognee/tasks/cleanup/cleanup_unused_data.py``
    (``cleanup_unused_data``: ``last_accessed < now - minutes_threshold`` **or
    NULL**; skipped while nothing has been accessed) and
    ``cognee/modules/retrieval/utils/access_tracking.py`` (a retrieval
    stamps ``last_accessed`` on the documents it returns, with
    ``ENABLE_LAST_ACCESSED=true``): the ``unused-cleanup`` retention, run at
    the experiment's retention period. Cognee's retrieval (graph completion
    over its knowledge graph) is not modelled: notes are ranked by similarity
    and the top 10 count as returned.""",
    assumed={"retention.threshold_days": "minutes_threshold has no default in the code: 30 days",
             "ranker.kind": "Cognee's graph retrieval is not modelled: similarity",
             "feedback.k": "the documents behind the top 10 results count as accessed",
             "packer.kind": "skip-fill in score order within the budget"},
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "unused-cleanup", "threshold_days": 30.0},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 10, "timing": "per-query"},
    candidates=10,
)

add_preset(
    "memoryos-mid-term",
    """MemoryOS's mid-term memory: cosine search gated at 0.1, LFU eviction at 2,000 sessions.

    Source: BAI-LAB/MemoryOS, ``memoryos-pypi/mid_term.py`` (``MidTermMemory``):
    ``search_sessions`` returns the ``top_k_sessions = 5`` nearest sessions
    by cosine (``faiss.IndexFlatIP`` over normalised vectors) whose
    similarity reaches 0.1 (the ``similarity-gate`` ranker), and counts a
    visit of each (``N_visit``, ``access_count_lfu``; feedback ``touch =
    "returned"``, ``k = 5``); ``add_session`` evicts the least frequently
    accessed session (``evict_lfu``; ties: the first inserted) once there are
    more than ``max_capacity = 2000`` (retention ``capacity``, ``by =
    "recalls"``, which keeps the newer on ties). The heat ``N_visit +
    L_interaction + exp(-hours_since_visit / 24)`` (``compute_segment_heat``,
    ``utils.compute_time_decay``, a 16.6-hour half-life) decides promotion
    to the long-term profile only: neither the ranking nor the eviction reads
    it, and memsim does not model the profile. A memsim note stands for a
    mid-term session.""",
    assumed={"retention.protect_pinned": "MemoryOS has no pins (no effect without pinned notes)",
             "packer.kind": "search has no token budget: skip-fill in score order"},
    retriever="cosine",
    ranker={"kind": "similarity-gate", "threshold": 0.1},
    retention={"kind": "capacity", "max_notes": 2000, "by": "recalls"},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 5, "timing": "per-query"},
    candidates=5,
)

add_preset(
    "openmemory",
    """OpenMemory (Python port): sigmoid of boosted similarity and a 7-day recency, top 8 per sector.

    Source: openmemory-python 1.0.0, ``openmemory/memory_system.py``
    (``MemorySystem.query``, ``k = 10``): the candidates are the first 8 of
    the ``k * 3`` most similar memories in each of the query's sectors (one
    sector here: retriever prefilter ``min(8, 3 k)`` = 8), each scored by
    ``compute_hybrid_score`` (``scoring.py``; the ``openmemory-hybrid``
    ranker, on ``embeddings.cosine_similarity``, the cosine clamped to
    [0, 1]) and the top ``k`` returned; their ``last_seen_at`` is set to now (feedback ``touch =
    "returned"``). The salience decay ``calc_decay`` (``decay.py``: per-sector
    rates 0.001-0.02 per day, a dual fast/slow process, floored at 0.7 of
    the salience) and the +0.1 reinforcement change the stored salience
    only: the score does not read it (it filters only with ``min_salience``,
    None by default). Not modelled: the waypoint-graph expansion when the
    mean similarity of the top 8 is below 0.55 (up to ``2 k`` memories linked
    to them join the candidates, waypoints being made at each add whose best
    match has cosine >= 0.75; each scores with its similarity if it is
    among the ``3 k`` most similar, else 0, and may outrank a direct
    candidate; the real query then returns up to ``k = 10`` memories where
    the preset's candidates stop at 8) and the token overlap (memsim's notes
    carry no text). Where fewer than 8 memories have a
    positive cosine, the real search fills its candidates with the
    earliest stored of the others (all clamped to 0, a stable sort), the
    prefilter with those of highest cosine.""",
    assumed={"retriever.prefilter": "one sector per query and no waypoint expansion: the "
                                    "8 nearest",
             "packer.kind": "query has no token budget: skip-fill in score order"},
    retriever={"kind": "cosine", "prefilter": 8},
    ranker="openmemory-hybrid",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 10, "timing": "per-query"},
    candidates=10,
)

add_preset(
    "autogen-token-limited",
    """AutoGen's token-limited chat context: the whole history, the middle dropped to fit.

    Source: autogen-core 0.7.5, ``autogen_core/model_context/
    _token_limited_chat_completion_context.py``
    (``TokenLimitedChatCompletionContext.get_messages``): every message in
    order, and while they exceed ``token_limit`` (the experiment's budget)
    the middle one is popped (the ``drop-middle`` packer over the notes
    newest first: ``recency-only`` ranker, every note a candidate). No
    similarity, no decay, no store: the context keeps the start and the end
    of the history.""",
    assumed={"candidates": "every note: a cap of 1,000,000 candidates stands for the whole "
                           "history",
             "orderer.kind": "the code keeps chronological order: reversed (oldest first) "
                             "of the newest-first candidates"},
    retriever="cosine",
    decay={"kind": "half-life", "half_life_days": 30.0, "clock": "created"},
    ranker="recency",
    packer="drop-middle",
    orderer="reversed",
    feedback={"kind": "default", "touch": "none", "timing": "per-query"},
    candidates=1_000_000,
)

add_preset(
    "memoripy",
    """memoripy's short-term memory: 100 cosine x a compounding factor x ln(1 + access count), gated at 40.

    Source: memoripy 0.1.2, ``memoripy/memory_store.py``,
    ``MemoryStore.retrieve`` (the ``memoripy`` ranker): every call
    multiplies each interaction's stored ``decay_factor`` by ``exp(-0.0001 *
    seconds since its timestamp)`` (the whole time since its last access, at
    every call: the factor compounds), scores ``100 * cosine *
    decay_factor * log1p(access_count)``, and returns every interaction
    scoring at least ``similarity_threshold = 40``, best first; those gain
    an access (``access_count`` from 1, ``timestamp = now``; feedback
    ``touch = "prefilter"``, every candidate above the threshold) and
    ``decay_factor *= 1.1``, the others ``*= 0.9``. An interaction whose
    access count exceeds 10 is copied to the long-term list
    (``classify_memory``; ``promote_after = 10`` recalls, the ``longterm``
    tier), which ``retrieve`` does not read. A fresh note identical to the
    query reaches the threshold only when first queried within 1.53 hours
    of being stored (``100 * 0.693 * exp(-0.0001 s) >= 40``). ``memsim engine-check
    memoripy`` replays a stream through the real ``MemoryStore.retrieve``.""",
    assumed={
        "candidates": "retrieve returns every interaction above the threshold; "
                      "MemoryManager.generate_response puts the first context_window = 3 "
                      "in the prompt",
        "packer.kind": "retrieve has no token budget: skip-fill in score order",
        "ranker.kind": "no spreading activation (memsim's notes carry no concepts, which "
                       "memoripy's LLM extracts) and no semantic-memory recall (the store "
                       "starts empty, so cluster_interactions built no clusters); "
                       "exclude_last_n = 0, the library default (its example passes 5)",
    },
    retriever="cosine",
    ranker="memoripy",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "prefilter", "promote_after": 10,
              "timing": "per-query"},
    candidates=3,
)
