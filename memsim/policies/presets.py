"""Named presets: faithful configurations of real systems and baselines.

A preset is a partial policy table (slot -> component spec). In an experiment,
``preset = "NAME"`` starts from it and any other key of the policy table
overrides it. Each preset's text cites its source and says what memsim had to
design where the source is silent.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from memsim.errors import ConfigError
from memsim.params import did_you_mean
from .base import SLOTS, Policy

__all__ = ["Preset", "PRESETS", "add_preset", "preset_table", "resolve_policy"]


@dataclass(frozen=True)
class Preset:
    """A named, documented policy table."""

    name: str
    doc: str
    table: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {}


def add_preset(name: str, doc: str, **table: Any) -> Preset:
    if name in PRESETS:
        raise RuntimeError(f"duplicate preset {name!r}")
    PRESETS[name] = Preset(name=name, doc=doc.strip(), table=table)
    return PRESETS[name]


def preset_table(name: str, where: str) -> dict[str, Any]:
    """A deep copy of a preset's table; a clear error for an unknown name."""
    if name not in PRESETS:
        raise ConfigError(
            f"{where}: unknown preset {name!r}{did_you_mean(name, PRESETS)}; "
            f"allowed: {', '.join(sorted(PRESETS))}"
        )
    return copy.deepcopy(PRESETS[name].table)


def resolve_policy(ptable: dict[str, Any], where: str) -> Policy:
    """Merge a policy table over its preset (if any) and build the Policy.

    Parameters
    ----------
    ptable : dict
        A ``[policies.NAME]`` table: ``preset = "..."`` and/or one entry per
        slot. A slot given as parameters only (no ``kind``) keeps the
        preset's (or the default) component kind; a slot of the preset's
        kind merges its parameters over the preset's; another kind replaces it.
    where : str
        The dotted key, for error messages.
    """
    ptable = copy.deepcopy(ptable)
    name = ptable.pop("preset", None)
    base: dict[str, Any] = {}
    if name is not None:
        if not isinstance(name, str):
            raise ConfigError(f"{where}.preset: expected a preset name, got {name!r}")
        base = preset_table(name, f"{where}.preset")
    for key, value in ptable.items():
        if key in SLOTS and isinstance(value, dict) and "kind" not in value:
            # parameters only: keep the preset's (or the default) component kind
            prev = base.get(key, Policy.DEFAULTS[key])
            prev = {"kind": prev} if isinstance(prev, str) else dict(prev)
            prev.update(value)
            base[key] = prev
        elif key in SLOTS and isinstance(value, dict):
            prev = base.get(key)
            prev_kind = prev if isinstance(prev, str) else (prev or {}).get("kind")
            if prev_kind == value["kind"] and isinstance(prev, dict):
                merged = dict(prev)
                merged.update(value)
                base[key] = merged
            else:
                base[key] = value
        else:
            base[key] = value
    return Policy.from_config(base, where)


# --------------------------------------------------------------------------
# Hivemind (seed 000; the code is private: facts from the author's post)
# --------------------------------------------------------------------------

add_preset(
    "hivemind-2025-bug",
    """Hivemind before its fix: 5% a day decay on every tier, top-k cutoff packing.

    Seed 000, "5% a Day Sounds Gentle": score =
    cosine similarity x ``0.95 ** days`` on every tier, packed by sorting on
    score and filling from the top until the first note that does not fit
    (top-k with a cutoff), in score order. Notes are promoted to the longterm
    tier after 5 uses, but the decay ignores the tier: "the quiet one won".

    memsim's choices where the post is silent: similarity is cosine, a "use"
    is being packed into the context.""",
    retriever="cosine",
    decay={"kind": "per-day", "rate": 0.05},
    ranker="product",
    packer="top-k-cutoff",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "promote_after": 5},
)

add_preset(
    "hivemind",
    """Hivemind after its fix: per-tier half-life with floor, promotion, greedy-swap.

    Seed 000: score = cosine similarity x a
    per-tier recency, ``floor + (1 - floor) * 0.5 ** (days / half_life)``
    with task 180 d / 0.35 and scratch 21 d / 0.05, longterm = 1 (no decay);
    a note is promoted to the longterm tier after 5 uses ("earned
    permanence"); packed by value per token (score / tokens), greedily, then
    a bounded swap pass (``greedy-swap``); best items at the start and the end
    of the context (``edges``). Hivemind's default budget of 1,500 tokens is
    the experiment's ``budget_tokens`` (memsim's default too), not part of the
    policy.

    Not public, so designed by memsim: the **swap rule** (see the
    ``greedy-swap`` packer's docstring), the **access weight** (how much a use
    counts beyond promotion: memsim gives uses no weight in the score, no
    stickiness), what counts as a use (being packed), the scratch tier's
    constants (21 d / 0.05, from DESIGN.md; the post only says scratch should
    fade fast) and the similarity (cosine).""",
    retriever="cosine",
    decay={"kind": "per-tier", "task_half_life_days": 180.0, "task_floor": 0.35,
           "scratch_half_life_days": 21.0, "scratch_floor": 0.05},
    stickiness="none",
    ranker="product",
    packer="greedy-swap",
    orderer="edges",
    feedback={"kind": "default", "touch": "packed", "promote_after": 5},
)

# --------------------------------------------------------------------------
# ai-memory (seed 001; crates/ai-memory-store/src/decay.rs,
# crates/ai-memory-consolidate/src/sweep.rs)
# --------------------------------------------------------------------------

_AI_MEMORY_DOC = """ai-memory (akitaonrails/ai-memory; seed 001,
    ``crates/ai-memory-store/src/decay.rs`` and
    ``crates/ai-memory-consolidate/src/sweep.rs``). ai-memory's decay is an
    **eviction** policy: it does not change retrieval ranking, so notes are
    ranked by similarity only (cosine) and a periodic sweep (the experiment's
    ``retention_period_days``, daily by default) soft-deletes every unpinned
    episodic note whose retention ``salience * exp(-0.02 * days_since_update)
    + 0.6 * ln(1 + accesses) * exp(-0.04 * days_since_access) * breadth`` is
    strictly below 0.20; other memory types never decay; TTL expiry (done by
    the engine) removes even pinned notes. An access is counted at most once
    per (note, actor) per 60 s (``cooldown_s = 60``).

    ai-memory silently coerces an invalid ``breadth_weight`` (NaN, infinite or
    negative) to 0.0, so such a configuration behaves as the default weight 0;
    memsim refuses invalid weights instead (to model ai-memory's behaviour,
    pass ``memsim.policies.breadth.ai_memory_coerce_weight(w)``).

    memsim's choices where the source is silent: an access is a note being
    packed into the context; packing is skip-fill in score order; eviction is
    final (ai-memory hard-deletes 180 days after the soft delete unless the
    page is accessed again)."""

add_preset(
    "ai-memory",
    "ai-memory as coded: similarity ranking, periodic eviction of cold episodic notes.\n\n"
    + _AI_MEMORY_DOC + """

    Breadth weight 0.0, ai-memory's default (the breadth term is off).""",
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "ai-memory", "lambda_per_day": 0.02, "sigma": 0.6, "mu_per_day": 0.04,
               "breadth_weight": 0.0, "cold_threshold": 0.20},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "cooldown_s": 60.0},
)

add_preset(
    "ai-memory-breadth",
    "ai-memory with its breadth term on: notes many actors use survive the sweep longer.\n\n"
    + _AI_MEMORY_DOC + """

    With the breadth term on: ``breadth_weight = 1.5`` (seed 001's example:
    10 distinct actors multiply the access term by 4.45, 4 actors by 3.08),
    so notes used by many actors survive the sweep longer.""",
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "ai-memory", "lambda_per_day": 0.02, "sigma": 0.6, "mu_per_day": 0.04,
               "breadth_weight": 1.5, "cold_threshold": 0.20},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "cooldown_s": 60.0},
)

# --------------------------------------------------------------------------
# Feather DB (seed 002; include/scoring.h; feather-db 0.21.0 verified)
# --------------------------------------------------------------------------

_FEATHER_DOC = """Feather DB's scored search (feather-store/feather,
    ``include/scoring.h``; seed 002): similarity ``1 / (1 + d)`` with ``d``
    the squared L2 distance, ``stickiness = 1 + ln(1 + recall_count)``,
    ``effective_age = age / stickiness``, ``recency = max(min_weight, 0.5 **
    (effective_age / 30))``, ``score = (0.7 * similarity + 0.3 * recency) *
    importance``, in float32. ``search(q, k)`` returns k = 10 results; memsim
    sets ``candidates = 10`` so that the packer sees exactly the k returned
    notes (skip-fill in score order: Feather has no token budget, memsim's
    choice). If you change k, change ``retriever.prefilter`` (3k),
    ``candidates`` and ``feedback.k`` together. The engine reads ages from the
    wall clock in whole seconds; memsim's ages are exact (fractional days)."""

#: What both Feather presets share: the 3k = 30 nearest by squared L2, scored by
#: Feather's blend with a 30-day half-life and log-recall stickiness, top k = 10.
_FEATHER_TABLE = dict(
    retriever={"kind": "inverse-sq-l2", "prefilter": 30},
    decay={"kind": "half-life", "half_life_days": 30.0},
    stickiness={"kind": "log-recall"},
    ranker={"kind": "feather-blend", "time_weight": 0.3, "min_weight": 0.0},
    packer="skip-fill",
    orderer="score",
    candidates=10,
)

add_preset(
    "feather",
    "Feather DB as its installed engine searches: the k returned gain a recall after scoring."
    "\n\n" + _FEATHER_DOC + """

    As the installed engine (feather-db 0.21.0) does, verified by black-box
    tests: only the 3k = 30 nearest notes by squared L2 are scored (memsim
    takes them exactly; the engine's HNSW at the default ef = 50 is
    approximate on large stores), the top k by final score are returned, and
    only then do the k returned notes gain a recall (scores use the counts
    from before the search).""",
    **_FEATHER_TABLE,
    feedback={"kind": "default", "touch": "returned", "k": 10, "before_scoring": False},
)

add_preset(
    "feather-v0.16",
    "Feather DB with the older feedback rule: all 3k candidates gain a recall before scoring."
    "\n\n" + _FEATHER_DOC + """

    As the older source (v0.16) did: all 3k = 30 prefilter candidates gain a
    recall *before* they are scored, so every candidate's stickiness grows on
    each search whether it is returned or not. Kept as a variant to show how
    much the feedback rule alone moves rankings.""",
    **_FEATHER_TABLE,
    feedback={"kind": "default", "touch": "prefilter", "k": 10, "before_scoring": True},
)

# --------------------------------------------------------------------------
# Published baselines
# --------------------------------------------------------------------------

add_preset(
    "generative-agents",
    """Generative Agents as published: normalised recency, importance, relevance, summed.

    Park et al., UIST 2023, section 4.1:
    score = recency + importance + relevance, each min-max normalised over
    the candidate memories, weights 1; recency = ``0.995 ** hours since last
    retrieval``; relevance = cosine similarity; importance = the note's
    importance column. Retrieved memories have their last access reset.

    memsim's choices: the retrieved memories are those packed into the
    context (skip-fill in score order over the top-C; the released code takes
    the top 30 regardless of size); normalisation is over the notes live at
    the query. The released code (``retrieve.py``) differs from the paper:
    weights 0.5 / 3 / 2 (recency / relevance / importance) and a recency of
    ``0.99 ** rank``; override ``ranker`` weights to approach it.""",
    retriever="cosine",
    decay={"kind": "generative-agents", "decay_factor": 0.995},
    ranker={"kind": "weighted-sum", "w_recency": 1.0, "w_importance": 1.0, "w_relevance": 1.0},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed"},
)

add_preset(
    "langchain-time-weighted",
    """LangChain's time-weighted retriever: similarity plus an hourly decay since last use.

    LangChain's ``TimeWeightedVectorStoreRetriever``
    (``langchain/retrievers/time_weighted_retriever.py``): score =
    ``similarity + (1 - 0.01) ** hours_since_last_access``; it scores the
    vector store's 100 nearest (``search_kwargs = {"k": 100}``), returns the
    top ``k = 4`` and sets their ``last_accessed_at`` to now (retrieval
    resets last access: feedback ``touch = "returned"``). ``candidates = 4``
    so the packer sees the 4 returned documents.

    memsim's simplifications: LangChain also rescores the ``k`` most recently
    added memories even when they are not among the nearest (not modelled:
    only the 100 nearest are candidates); similarity is cosine (LangChain
    uses the vector store's relevance score, often a rescaled distance);
    packing is skip-fill in score order.""",
    retriever={"kind": "cosine", "prefilter": 100},
    decay={"kind": "langchain", "decay_rate": 0.01},
    ranker="additive",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 4},
    candidates=4,
)

add_preset(
    "memorybank",
    """MemoryBank: similarity retrieval, Ebbinghaus forgetting that recalls slow down.

    Zhong et al., AAAI 2024: retrieval by similarity
    (cosine), and forgetting by the Ebbinghaus curve ``R = exp(-t / S)``:
    strength S starts at 1 (day) and grows by 1 on each recall, which also
    resets t. A memory is forgotten when R < 0.05 at a sweep (memsim's
    threshold; ``mode = "probabilistic"`` forgets with probability 1 - R
    instead). memsim's choices: a recall is being packed into the context;
    pinned notes are never forgotten; skip-fill packing in score order.""",
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "memorybank", "strength_days": 1.0, "strength_per_recall": 1.0,
               "mode": "threshold", "threshold": 0.05},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed"},
)

add_preset(
    "similarity-only",
    """A static vector store: cosine similarity only, no decay, no use signal.

    Skip-fill packing in score order.""",
    retriever="cosine",
    ranker="similarity",
    packer="skip-fill",
    orderer="score",
)

add_preset(
    "recency-only",
    """The newest notes first, whatever the query; skip-fill packing.

    Score = ``0.5 ** (age /
    30)`` from creation (any decreasing curve gives the same order; ties by
    lower ``note_id``); skip-fill packing in score order. A baseline.""",
    retriever="cosine",
    decay={"kind": "half-life", "half_life_days": 30.0},
    ranker="recency",
    packer="skip-fill",
    orderer="score",
)

add_preset(
    "random",
    """Uniform random scores from the policy's seeded stream; skip-fill packing.

    The floor any policy must beat.""",
    retriever="cosine",
    ranker="random",
    packer="skip-fill",
    orderer="score",
)

add_preset(
    "oracle",
    """The ground truth: the best context by true gains (exact knapsack); the bound.

    Candidates ranked by their true gain and packed by
    the exact 0/1 knapsack on the true gains (the engine passes the gains as
    values when the ranker is ``oracle``): the best context within the
    budget among the top-C by gain. The upper bound for regret; no feedback
    (it never learns from use).""",
    retriever="cosine",
    ranker="oracle",
    packer="exact",
    orderer="score",
    feedback={"kind": "default", "touch": "none"},
)
