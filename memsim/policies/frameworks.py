"""Components of the memory layers of agent frameworks, read from their code.

Each component names the package, its version, the file and the function it
follows. The presets built from them are registered in
:mod:`memsim.policies.framework_presets`; ``memsim engine-check`` replays
streams through the real functions (:mod:`memsim.checks.framework_check`).

========================== ==================================================
component                  formula
========================== ==================================================
decay ``llamaindex``       ``(1 - time_decay) ** hours_since_last_access``; a
                           note never used counts as accessed now
                           (``unstamped = "now"``) or at its creation
                           (``"created"``)
decay ``exp-rate``         ``exp(-rate_per_day * days)``
ranker ``llamaindex``      ``(similarity or 1.0) + recency``
ranker ``linear``          ``w_rel rel + w_rec rec + w_imp importance``
                           (CrewAI's composite score)
ranker ``redis-recency``   ``w_sem rel + w_rec clip(w_f 2 ** (-da / h_a) +
                           w_n 2 ** (-dc / h_c), 0, 1)`` (agent-memory-server)
ranker ``mem0-oss``        ``min(rel / 1, 1)``, nothing returned below the
                           threshold (mem0 OSS ``score_and_rank`` without
                           BM25 or entity terms)
ranker ``openmemory-hybrid`` ``sigmoid(0.6 (1 - exp(-3 clip(rel, 0, 1))) + 0.05
                           recency)``
ranker ``similarity-gate`` ``rel``, nothing returned below the threshold
retention ``ttl``          evict once the age on ``clock`` exceeds ``ttl_days``
                           (LangGraph's store TTL, refreshed on read)
packer ``drop-middle``     the oldest and newest within the budget, the middle
                           dropped (AutoGen's token-limited context)
retention ``unused-cleanup`` evict notes not used within ``threshold_days``
                           or never used (Cognee's ``cleanup_unused_data``)
ranker ``memoripy``        ``100 rel f exp(-r s) ln(2 + recalls)``, nothing
                           below the threshold; the per-note factor ``f``
                           kept and compounded at every retrieval call
========================== ==================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval, Options
from .base import Decay, Packer, Ranker, Retention, ScoringContext, register
from .retrieval import Cosine

__all__ = ["DropMiddle", "ExpRate", "LinearBlend", "LlamaIndexRanker", "LlamaIndexRecency", "Mem0Oss",
           "Memoripy", "OpenMemoryHybrid", "RedisRecency", "SimilarityGate", "TimeToLive", "UnusedCleanup"]

_LN2 = math.log(2.0)
_NON_NEGATIVE = Interval(0, None)
_POSITIVE = Interval(0, None, closed="neither")


def _age(age: np.ndarray) -> np.ndarray:
    # negative ages (a note seen before its creation time) count as 0
    return np.maximum(np.asarray(age, dtype=np.float64), 0.0)


@register
@dataclass(frozen=True, kw_only=True)
class LlamaIndexRecency(Decay):
    """LlamaIndex's time weight: ``(1 - time_decay) ** hours_since_last_access``.

    Source: llama-index-core 0.14.25, ``llama_index/core/postprocessor/
    node_recency.py``, ``TimeWeightedPostprocessor._postprocess_nodes``::

        last_accessed = node.metadata.get("__last_accessed__", None)
        if last_accessed is None:
            last_accessed = now
        hours_passed = (now - last_accessed) / 3600
        time_similarity = (1 - self.time_decay) ** hours_passed

    with ``time_decay = 0.99``: the weight keeps 1 % per hour, a half-life
    of ``ln 2 / ln 100`` = 0.15 h = 9.0 minutes. The returned nodes get
    ``__last_accessed__ = now`` (``time_access_refresh = True``).

    ``unstamped`` says what a note never used (no ``__last_accessed__``)
    counts as: ``"now"``, the code's default (the key is absent until the
    postprocessor returns the node: its weight is 1 at every query until
    then), or ``"created"`` (the application stamps each node with its
    creation time, as LlamaIndex's own test does). A use (a returned note, an
    organic access) sets the stamp in both modes.

    Parameters
    ----------
    time_decay : float in (0, 1]
        ``time_decay``; the weight keeps ``1 - time_decay`` per hour.
    unstamped : {"now", "created"}
    """

    name: ClassVar[str] = "llamaindex"
    reads_salience: ClassVar[bool] = False
    clock: str = "last_access"
    time_decay: float = 0.99
    unstamped: str = "now"
    _constraints: ClassVar[dict] = {"time_decay": Interval(0, 1, closed="right"),
                                    "unstamped": Options(("now", "created"))}

    def falls_with_age_alone(self) -> bool:
        # "now": a never-used note's weight is 1 whatever its age
        return self.unstamped == "created"

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        age = _age(age)
        if self.unstamped == "now":
            never = np.isnan(np.asarray(ctx.since_access, dtype=np.float64))
            age = np.where(never, 0.0, age)
        base = 1.0 - self.time_decay  # as the code computes it (0.010000000000000009)
        if base == 0.0:  # 0 ** hours: 1 at hour 0, else 0 (Python's 0.0 ** 0 = 1)
            return np.where(age == 0.0, 1.0, 0.0)
        return np.exp(24.0 * age * math.log(base))

    def half_life(self) -> float:
        base = 1.0 - self.time_decay
        if base == 0.0:
            return 0.0
        return math.inf if base >= 1.0 else _LN2 / -math.log(base) / 24.0

    def lower_bound(self) -> float:
        return 0.0

    def upper_bound(self) -> float:
        return 1.0


@register
@dataclass(frozen=True, kw_only=True)
class ExpRate(Decay):
    """``recency = exp(-rate_per_day * days)``: a rate in nats per day.

    The form agent frameworks write their default decay in (``exp(-0.03 *
    days)``: half-life ``ln 2 / 0.03`` = 23.1 days).

    Parameters
    ----------
    rate_per_day : float >= 0
    """

    name: ClassVar[str] = "exp-rate"
    reads_salience: ClassVar[bool] = False
    rate_per_day: float = 0.03
    _constraints: ClassVar[dict] = {"rate_per_day": _NON_NEGATIVE}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        if self.rate_per_day == 0:  # no decay: 1 even at an infinite age (inf * 0 is NaN)
            return np.ones(np.shape(age), dtype=np.float64)
        return np.exp(-self.rate_per_day * _age(age))

    def exponential_form(self, ctx: ScoringContext):
        return 0.0, self.rate_per_day

    def half_life(self) -> float:
        return math.inf if self.rate_per_day == 0 else _LN2 / self.rate_per_day

    def lower_bound(self) -> float:
        return 1.0 if self.rate_per_day == 0 else 0.0

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        return self.clock == "last_access"


@register
@dataclass(frozen=True, kw_only=True)
class LlamaIndexRanker(Ranker):
    """LlamaIndex's ``TimeWeightedPostprocessor`` score: ``(score or 1.0) + time_similarity``.

    Source: llama-index-core 0.14.25, ``postprocessor/node_recency.py``
    (``score = node_with_score.score or 1.0``; ``similarity = score +
    time_similarity``): a similarity of exactly 0 counts as 1 (Python's
    ``or``). The nodes are then sorted by it (a stable sort, descending) and
    the top ``top_k`` returned (the preset's ``candidates``).
    """

    name: ClassVar[str] = "llamaindex"

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        rel = np.asarray(rel, dtype=np.float64)
        return np.where(rel == 0.0, 1.0, rel) + rec


@register
@dataclass(frozen=True, kw_only=True)
class LinearBlend(Ranker):
    """A weighted sum: ``w_relevance rel + w_recency rec + w_importance importance``.

    CrewAI's composite score (crewai 1.15.30, ``crewai/memory/types.py``,
    ``compute_composite_score``: ``semantic_weight * semantic_score +
    recency_weight * decay + importance_weight * record.importance``,
    defaults 0.5 / 0.3 / 0.2, ``decay = 0.5 ** (age_days / 30)`` from
    creation). No normalisation: each note's score is its own.

    Parameters
    ----------
    w_relevance, w_recency, w_importance : float >= 0
    """

    name: ClassVar[str] = "linear"
    w_relevance: float = 0.5
    w_recency: float = 0.3
    w_importance: float = 0.2
    _constraints: ClassVar[dict] = {"w_relevance": _NON_NEGATIVE, "w_recency": _NON_NEGATIVE,
                                    "w_importance": _NON_NEGATIVE}

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        imp = np.asarray(ctx.importance, dtype=np.float64)
        return (self.w_relevance * np.asarray(rel, dtype=np.float64)
                + self.w_recency * np.asarray(rec, dtype=np.float64)
                + self.w_importance * imp)

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class RedisRecency(Ranker):
    """Redis agent-memory-server's re-rank: similarity plus freshness and novelty.

    Source: agent-memory-server 0.15.2, ``agent_memory_server/utils/
    recency.py``, ``rerank_with_recency`` and ``score_recency``::

        freshness = exp(-ln 2 / half_life_last_access_days * days_since_access)
        novelty   = exp(-ln 2 / half_life_created_days * days_since_created)
        recency   = clip(freshness_weight * freshness + novelty_weight * novelty, 0, 1)
        score     = semantic_weight * (1 - dist) + recency_weight * recency

    defaults 0.8 / 0.2, 0.6 / 0.4, 7 / 30 days (half-lives floored at 0.001
    days). ``1 - dist`` is the similarity the policy's retriever gives (the
    cosine, for Redis's cosine distance). A memory's ``last_accessed`` starts
    at its creation. The ranker computes its own recency from both clocks
    (the policy's decay is not used).

    Parameters
    ----------
    semantic_weight, recency_weight : float >= 0
    freshness_weight, novelty_weight : float >= 0
    half_life_last_access_days, half_life_created_days : float > 0
    """

    name: ClassVar[str] = "redis-recency"
    uses_recency: ClassVar[bool] = False
    semantic_weight: float = 0.8
    recency_weight: float = 0.2
    freshness_weight: float = 0.6
    novelty_weight: float = 0.4
    half_life_last_access_days: float = 7.0
    half_life_created_days: float = 30.0
    _constraints: ClassVar[dict] = {
        "semantic_weight": _NON_NEGATIVE, "recency_weight": _NON_NEGATIVE,
        "freshness_weight": _NON_NEGATIVE, "novelty_weight": _NON_NEGATIVE,
        "half_life_last_access_days": _POSITIVE, "half_life_created_days": _POSITIVE}

    def own_recency(self, ctx: ScoringContext) -> np.ndarray:
        return self.recency(ctx)

    def recency(self, ctx: ScoringContext) -> np.ndarray:
        """The clipped freshness-and-novelty term (Q, L)."""
        ha = max(self.half_life_last_access_days, 0.001)
        hc = max(self.half_life_created_days, 0.001)
        fresh = np.exp(-(_LN2 / ha) * _age(ctx.age_last_access))
        novel = np.exp(-(_LN2 / hc) * _age(ctx.age_created))
        return np.clip(self.freshness_weight * fresh + self.novelty_weight * novel, 0.0, 1.0)

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return (self.semantic_weight * np.asarray(rel, dtype=np.float64)
                + self.recency_weight * self.recency(ctx))


@register
@dataclass(frozen=True, kw_only=True)
class Mem0Oss(Ranker):
    """mem0 OSS's hybrid score with only its semantic term: ``min(rel, 1)``, gated.

    Source: mem0ai 2.2.1, ``mem0/utils/scoring.py``, ``score_and_rank``:
    ``combined = min((semantic + bm25 + entity_boost) / max_possible, 1)``,
    ``max_possible = 1`` (+1 with BM25 scores, +0.5 with entity boosts);
    a candidate whose semantic score is below ``threshold`` (0.1,
    ``Memory.search``) is dropped. memsim's streams carry no BM25 or entity
    signal, so ``max_possible = 1``. mem0 OSS 2.2.1 has no recency term
    (its "decay" is a hosted-platform setting). The gate is
    :meth:`candidate_mask`, on the cosine similarity (the store's).

    Parameters
    ----------
    threshold : float in [0, 1]
        The gate on the cosine; ``Memory.search`` refuses one outside [0, 1]
        (``_validate_search_params``), and so does memsim.
    """

    name: ClassVar[str] = "mem0-oss"
    uses_recency: ClassVar[bool] = False
    threshold: float = 0.1
    _constraints: ClassVar[dict] = {"threshold": Interval(0, 1)}

    def candidate_mask(self, ctx: ScoringContext) -> np.ndarray:
        """(Q, L) bool: the notes whose cosine reaches the threshold (the
        engine drops the others)."""
        return np.asarray(ctx.similarity(Cosine()), dtype=np.float64) >= self.threshold

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return np.minimum(np.asarray(rel, dtype=np.float64), 1.0)

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class TimeToLive(Retention):
    """Evict a note ``ttl_days`` after its last use: a store's TTL, refreshed on read.

    LangGraph's store TTL (langgraph-checkpoint 4.3.2,
    ``langgraph/store/base/__init__.py``, ``TTLConfig``): an item expires
    ``default_ttl`` minutes after its last access; with ``refresh_on_read``
    (default True) a ``get`` or ``search`` that returns it restarts the
    timer (use the clock ``"last_access"`` with a feedback that touches the
    returned notes), without it only a write does (``"updated"``); a sweep
    every ``sweep_interval_minutes`` deletes the expired items (the
    experiment's retention period). ``default_ttl`` is None (no expiry)
    unless the application sets it.

    Parameters
    ----------
    ttl_days : float > 0
    clock : {"last_access", "updated", "created"}
        The age that must exceed ``ttl_days``.
    """

    name: ClassVar[str] = "ttl"
    ttl_days: float = 30.0
    clock: str = "last_access"
    _constraints: ClassVar[dict] = {"ttl_days": _POSITIVE,
                                    "clock": Options(("last_access", "updated", "created"))}

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        return np.asarray(ctx.age(self.clock)[0], dtype=np.float64) > self.ttl_days


@register
@dataclass(frozen=True, kw_only=True)
class UnusedCleanup(Retention):
    """Cognee's cleanup: delete what was not accessed within the threshold, or never.

    Source: cognee 1.6.5, ``cognee/tasks/cleanup/cleanup_unused_data.py``
    (``cleanup_unused_data``, ``_cleanup_via_sql``): every document whose
    ``last_accessed`` is older than ``minutes_threshold`` **or NULL** is
    deleted, so a document no search has returned goes at the first cleanup
    whatever its age; the cleanup does nothing while no document has been
    accessed at all ("tracking may be newly enabled"). ``last_accessed`` is
    set on the documents a retrieval returns
    (``modules/retrieval/utils/access_tracking.py``, with
    ``ENABLE_LAST_ACCESSED=true``).

    Parameters
    ----------
    threshold_days : float > 0
        ``minutes_threshold / 1440``.
    """

    name: ClassVar[str] = "unused-cleanup"
    threshold_days: float = 30.0
    _constraints: ClassVar[dict] = {"threshold_days": _POSITIVE}

    def by_age_alone(self) -> bool:
        return False  # a never-used note goes once any note of the store was used

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        since = np.asarray(ctx.since_access[0], dtype=np.float64)
        never = np.isnan(since)
        if never.all():  # nothing tracked yet: the cleanup is skipped
            return np.zeros(len(since), dtype=bool)
        return never | (since > self.threshold_days)


@register
@dataclass(frozen=True, kw_only=True)
class SimilarityGate(Ranker):
    """``score = relevance``, and no result whose cosine is below ``threshold``.

    A vector search with a similarity cut-off, as MemoryOS's mid-term search
    (``segment_similarity_threshold = page_similarity_threshold = 0.1``).

    Parameters
    ----------
    threshold : float
    """

    name: ClassVar[str] = "similarity-gate"
    uses_recency: ClassVar[bool] = False
    threshold: float = 0.1
    _constraints: ClassVar[dict] = {"threshold": Interval(None, None)}

    def candidate_mask(self, ctx: ScoringContext) -> np.ndarray:
        """(Q, L) bool: the notes whose cosine reaches the threshold."""
        return np.asarray(ctx.similarity(Cosine()), dtype=np.float64) >= self.threshold

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return np.asarray(rel, dtype=np.float64)

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class OpenMemoryHybrid(Ranker):
    """OpenMemory's hybrid score: a sigmoid of boosted similarity and recency.

    Source: openmemory-python 1.0.0, ``openmemory/scoring.py``
    (``compute_hybrid_score``), ``openmemory/decay.py``
    (``boosted_similarity``, ``calc_recency_score``) and
    ``openmemory/embeddings.py`` (``cosine_similarity``)::

        sim     = clip(cosine, 0, 1)                           # cosine_similarity
        sim'    = 1 - exp(-tau * sim)                          # tau = 3
        recency = clip(exp(-d / t_days) * (1 - d / t_max_days), 0, 1)   # 7, 60 days
        score   = sigmoid(0.6 sim' + 0.2 overlap + 0.15 waypoint + 0.05 recency)

    with ``d`` the days since ``last_seen_at`` (creation, then each time a
    query returns the memory). ``cosine_similarity`` clamps the cosine to
    [0, 1] (and ``MemorySystem.query`` starts each memory's best similarity
    at 0.0), so a note with a negative cosine scores as one with cosine 0:
    by its recency alone. memsim's notes carry no text and no waypoint
    graph: ``overlap = waypoint = 0``. The ranker computes its own recency
    (the policy's decay is not used).

    Parameters
    ----------
    w_similarity, w_recency : float >= 0
        The weights of ``sim'`` and of the recency (0.6, 0.05).
    tau : float >= 0
        The similarity boost (3).
    t_days, t_max_days : float > 0
        The recency's time constant and its zero (7, 60 days).
    """

    name: ClassVar[str] = "openmemory-hybrid"
    uses_recency: ClassVar[bool] = False
    w_similarity: float = 0.6
    w_recency: float = 0.05
    tau: float = 3.0
    t_days: float = 7.0
    t_max_days: float = 60.0
    _constraints: ClassVar[dict] = {"w_similarity": _NON_NEGATIVE, "w_recency": _NON_NEGATIVE,
                                    "tau": _NON_NEGATIVE, "t_days": _POSITIVE,
                                    "t_max_days": _POSITIVE}

    def own_recency(self, ctx: ScoringContext) -> np.ndarray:
        return self.recency(ctx)

    def recency(self, ctx: ScoringContext) -> np.ndarray:
        """``calc_recency_score`` (Q, L)."""
        d = np.asarray(ctx.age_last_access, dtype=np.float64)
        return np.clip(np.exp(-d / self.t_days) * (1.0 - d / self.t_max_days), 0.0, 1.0)

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        sim = np.clip(np.asarray(rel, dtype=np.float64), 0.0, 1.0)
        boosted = 1.0 - np.exp(-self.tau * sim)
        raw = self.w_similarity * boosted + self.w_recency * self.recency(ctx)
        return 1.0 / (1.0 + np.exp(-raw))


@register
@dataclass(frozen=True, kw_only=True)
class DropMiddle(Packer):
    """AutoGen's token-limited context: drop the middle of the history until it fits.

    Source: autogen-core 0.7.5, ``autogen_core/model_context/
    _token_limited_chat_completion_context.py``,
    ``TokenLimitedChatCompletionContext.get_messages``: while the messages
    exceed ``token_limit``, ``messages.pop(len(messages) // 2)``. Popping the
    middle again and again removes one contiguous central block: of ``n``
    messages, ``L`` left are the oldest ``ceil(L / 2)`` and the newest
    ``floor(L / 2)``, with the largest ``L`` whose tokens fit the budget.

    The candidates must come newest first (the ``recency-only`` ranker) and
    hold the whole history (``candidates`` at least the number of notes);
    the oldest are the last valid ones.
    """

    name: ClassVar[str] = "drop-middle"

    def pack(self, values, tokens, valid, budget):
        valid = np.asarray(valid, dtype=bool)
        budget = np.asarray(budget, dtype=np.int64)
        # the valid candidates first, in their order (a row may have gaps)
        order = np.argsort(~valid, axis=1, kind="stable")
        tokens = np.take_along_axis(np.where(valid, np.asarray(tokens, dtype=np.int64), 0),
                                    order, axis=1)
        q, c = tokens.shape
        n = valid.sum(axis=1)                               # (Q,) messages per query
        head = np.concatenate([np.zeros((q, 1), np.int64), np.cumsum(tokens, axis=1)], axis=1)
        total = head[np.arange(q), n]
        lens = np.arange(c + 1)[None, :]                    # L = messages kept
        newest, oldest = lens // 2, lens - lens // 2        # floor(L/2) newest, ceil(L/2) oldest
        # tokens of the newest a (list head) plus the oldest b (the last b valid ones)
        used = (np.take_along_axis(head, newest, axis=1)
                + total[:, None] - np.take_along_axis(head, np.maximum(n[:, None] - oldest, 0),
                                                      axis=1))
        ok = (lens <= n[:, None]) & (used <= budget[:, None])
        keep = np.where(ok, lens, -1).max(axis=1)           # the largest L that fits (0 always does)
        col = np.arange(c)[None, :]
        a, b = (keep // 2)[:, None], (keep - keep // 2)[:, None]
        kept = (col < n[:, None]) & ((col < a) | (col >= n[:, None] - b))
        out = np.zeros((q, c), dtype=bool)
        np.put_along_axis(out, order, kept, axis=1)
        return out


@register
@dataclass(frozen=True, kw_only=True)
class Memoripy(Ranker):
    """memoripy's short-term retrieval: a per-note decay factor compounded at every call.

    Source: memoripy 0.1.2, ``memoripy/memory_store.py``,
    ``MemoryStore.retrieve`` (``similarity_threshold = 40``, ``decay_rate =
    0.0001`` per second). At each call, for every stored interaction::

        f      = f * exp(-decay_rate * seconds_since_timestamp)   # stored back
        score  = 100 * cosine * f * log1p(access_count)
        if score >= threshold:  access_count += 1; timestamp = now; f *= 1.1
        else:                   f *= 0.9

    ``f`` (``decay_factor``) starts at 1 and is a per-note column the
    ranker keeps (:attr:`note_columns`, updated by
    :meth:`update_note_state`): it multiplies the *whole* time since the
    last access into itself at every call, so it compounds.
    ``access_count`` starts at 1 (``MemoryManager.add_interaction``): it is
    ``1 + recalls``, with a feedback that touches every note above the
    threshold (``touch = "prefilter"``: the candidates :meth:`candidate_mask`
    keeps); ``timestamp`` is the last use (creation until then). The gate
    reads the cosine, memoripy's metric, whatever the retriever; the score
    reads the retriever's similarity. The relevant interactions are returned
    sorted by score.

    Parameters
    ----------
    threshold : float
        ``similarity_threshold`` (on the score, in per cent).
    decay_rate_per_s : float >= 0
        ``decay_rate``, per second.
    boost, fade : float >= 0
        The factors a returned (1.1) and a not returned (0.9) note's ``f``
        is multiplied by after the call.
    """

    name: ClassVar[str] = "memoripy"
    uses_recency: ClassVar[bool] = False
    note_columns: ClassVar[dict[str, float]] = {"decay_factor": 1.0}
    threshold: float = 40.0
    decay_rate_per_s: float = 0.0001
    boost: float = 1.1
    fade: float = 0.9
    _constraints: ClassVar[dict] = {"threshold": Interval(None, None),
                                    "decay_rate_per_s": _NON_NEGATIVE,
                                    "boost": _NON_NEGATIVE, "fade": _NON_NEGATIVE}

    def own_recency(self, ctx: ScoringContext) -> np.ndarray:
        return self._decayed(ctx)

    def _decayed(self, ctx: ScoringContext) -> np.ndarray:
        """``f * exp(-decay_rate * seconds since the last use)`` (Q, L)."""
        seconds = np.asarray(ctx.age_last_access, dtype=np.float64) * 86400.0
        return self.note_column(ctx, "decay_factor") * np.exp(-self.decay_rate_per_s * seconds)

    def _adjusted(self, rel: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        reinforcement = np.log1p(1.0 + np.asarray(ctx.recalls, dtype=np.float64))
        return (np.asarray(rel, dtype=np.float64) * 100.0) * self._decayed(ctx) * reinforcement

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return self._adjusted(rel, ctx)

    def candidate_mask(self, ctx: ScoringContext) -> np.ndarray:
        """(Q, L) bool: the notes whose score (on the cosine) reaches the threshold."""
        return self._adjusted(ctx.similarity(Cosine()), ctx) >= self.threshold

    def update_note_state(self, ctx: ScoringContext, state) -> dict[str, np.ndarray]:
        """``f`` after the call: each searched note's decayed factor times
        ``boost`` if it reached the threshold, else ``fade``; each query of
        the call in turn (a loop over queries, not notes)."""
        f = np.array(state["decay_factor"], dtype=np.float64)
        q = len(ctx.t)
        live = np.ones((q, len(f)), dtype=bool) if ctx.live is None else np.asarray(ctx.live)
        relevant = self.candidate_mask(ctx) & live
        seconds = np.asarray(ctx.age_last_access, dtype=np.float64) * 86400.0
        for i in range(q):
            decayed = f * np.exp(-self.decay_rate_per_s * seconds[i])
            f = np.where(live[i], decayed * np.where(relevant[i], self.boost, self.fade), f)
        return {"decay_factor": f}
