"""The preset catalogue: each preset's source, time scale, eviction and check.

``memsim policies --markdown`` prints :func:`catalogue_markdown`; the README's
table "Preset catalogue" is that output, and a test keeps the two equal.

The time scale is derived from the resolved policy, not typed in: the
decay's half-life (:meth:`memsim.policies.Decay.half_life`, days) when the
ranker reads the decay; for a ranker that computes its own recency, the
half-lives of its own parameters (:func:`time_scale`). A preset with several
tiers reports the half-life :meth:`~memsim.policies.Decay.half_life`
reports (a fresh, never-used note of the default tier).
"""

from __future__ import annotations

import math

from .base import Policy
from .presets import PRESETS, resolve_policy

__all__ = ["ENGINE_CHECKS", "SOURCES", "catalogue_markdown", "catalogue_rows", "format_days",
           "time_scale"]

#: preset -> its source (package and version, file, function; or the paper).
SOURCES: dict[str, str] = {
    "hivemind-2025-bug": "Hivemind blog post \"5% a Day Sounds Gentle\" (seed 000)",
    "hivemind": "Hivemind after its fix (seed 000)",
    "ai-memory": "akitaonrails/ai-memory, crates/ai-memory-store/src/decay.rs, "
                 "crates/ai-memory-consolidate/src/sweep.rs",
    "ai-memory-breadth": "akitaonrails/ai-memory, decay.rs (breadth term on)",
    "feather": "feather-db 0.21.0, include/scoring.h",
    "feather-v0.16": "feather-db v0.16, include/scoring.h",
    "generative-agents": "Park et al., UIST 2023, section 4.1",
    "langchain-time-weighted": "langchain-classic 1.0.8, retrievers/time_weighted_retriever.py, "
                               "TimeWeightedVectorStoreRetriever",
    "generative-agents-code": "joonspk-research/generative_agents, cognitive_modules/"
                              "retrieve.py, new_retrieve",
    "memorybank": "Zhong et al., AAAI 2024 (MemoryBank)",
    "similarity-only": "memsim reference point",
    "recency-only": "memsim reference point",
    "random": "memsim reference point",
    "oracle": "memsim reference point",
    "as-logged": "memsim reference point (a trace's logged rankings)",
    "per-type-half-life": "memsim: one half-life per memory type, as users of agent "
                          "frameworks configure (episodic 30 d, semantic and procedural "
                          "365 d, other 90 d)",
    "llamaindex-time-weighted": "llama-index-core 0.14.25, postprocessor/node_recency.py, "
                                "TimeWeightedPostprocessor (unstamped nodes)",
    "llamaindex-time-weighted-stamped": "llama-index-core 0.14.25, postprocessor/"
                                        "node_recency.py, TimeWeightedPostprocessor "
                                        "(nodes stamped at creation)",
    "crewai-memory": "crewai 1.15.30, crewai/memory/types.py, compute_composite_score",
    "redis-agent-memory": "agent-memory-server 0.15.2, utils/recency.py, rerank_with_recency",
    "mem0-oss": "mem0ai 2.2.1, mem0/utils/scoring.py, score_and_rank",
    "agent-framework-default": "an agent framework's reported default exp(-0.03 * days)",
    "langgraph-store-ttl": "langgraph-checkpoint 4.3.2, langgraph/store/base/__init__.py, "
                           "TTLConfig",
    "cognee-cleanup": "cognee 1.6.5, cognee/tasks/cleanup/cleanup_unused_data.py, "
                      "cleanup_unused_data",
    "memoryos-mid-term": "BAI-LAB/MemoryOS, memoryos-pypi/mid_term.py, MidTermMemory "
                         "(search_sessions, evict_lfu)",
    "openmemory": "openmemory-python 1.0.0, openmemory/scoring.py, compute_hybrid_score "
                  "(memory_system.py, MemorySystem.query)",
    "autogen-token-limited": "autogen-core 0.7.5, model_context/"
                             "_token_limited_chat_completion_context.py, get_messages",
    "memoripy": "memoripy 0.1.2, memoripy/memory_store.py, MemoryStore.retrieve",
}

#: preset -> the ``memsim engine-check`` engine that replays it against the real code.
ENGINE_CHECKS: dict[str, str] = {
    "feather": "feather",
    "langchain-time-weighted": "langchain",
    "llamaindex-time-weighted": "llamaindex",
    "llamaindex-time-weighted-stamped": "llamaindex",
    "crewai-memory": "crewai",
    "redis-agent-memory": "redis",
    "mem0-oss": "mem0",
    "openmemory": "openmemory",
    "memoripy": "memoripy",
    "autogen-token-limited": "autogen",
    "langgraph-store-ttl": "langgraph",
}


def format_days(days: float) -> str:
    """A time scale in days, with minutes or hours beside it when below a day."""
    if math.isnan(days):
        return "n/a"
    if math.isinf(days):
        return "none"
    if days < 1 / 24:
        return f"{days:.3g} d ({days * 1440:.3g} min)"
    if days < 1:
        return f"{days:.3g} d ({days * 24:.3g} h)"
    return f"{days:.3g} d"


def time_scale(policy: Policy) -> str:
    """The half-life, in days, the policy's ranking decays with ("none")."""
    r = policy.ranker
    if r.name == "redis-recency":
        return (f"{format_days(r.half_life_last_access_days)} since access, "
                f"{format_days(r.half_life_created_days)} since creation")
    if r.name == "openmemory-hybrid":
        # exp(-d / t) (1 - d / t_max) = 1/2, solved by bisection on [0, t_max]
        lo, hi = 0.0, r.t_max_days
        for _ in range(60):
            mid = (lo + hi) / 2
            f = math.exp(-mid / r.t_days) * (1 - mid / r.t_max_days)
            lo, hi = (mid, hi) if f > 0.5 else (lo, mid)
        return f"{format_days(lo)} since last use (recency term; 0 at {r.t_max_days:g} d)"
    if r.name == "memoripy":
        hl = math.inf if r.decay_rate_per_s == 0 else math.log(2) / r.decay_rate_per_s / 86400
        return (f"{format_days(hl)} since last use, compounded: every call multiplies the "
                "whole time since last use into a per-note factor")
    if r.name == "generative-agents-code":
        return f"rank-based: {r.recency_decay:g} ** rank of last access"
    if r.name == "recency":
        return "none: age order only"
    if not r.uses_recency or r.name in ("random", "oracle", "as-logged"):
        return "none"
    d = policy.decay
    hl = d.half_life()
    clock = {"created": "creation", "updated": "update", "last_access": "last use"}[d.clock]
    text = format_days(hl)
    if text in ("none", "n/a"):
        return text
    return f"{text} since {clock}" + (" (task tier; one per tier)" if d.name == "per-tier" else "")


def _evicts(policy: Policy) -> str:
    ret = policy.retention
    if not ret.evicts:
        if policy.packer.name == "drop-middle":
            return "nothing stored; the context drops the middle of the history"
        return "nothing"
    first = (type(ret).__doc__ or ret.name).strip().splitlines()[0].rstrip(".")
    params = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                       for k, v in ret.params().items()
                       if (k.endswith("_days") and v) or k in ("max_notes", "by"))
    return (f"{ret.name}" + (f" ({params})" if params else "") + f": {first}").replace("``", "`")


def catalogue_rows() -> list[dict[str, str]]:
    """One row per preset (registration order): ``preset``, ``source``,
    ``half_life``, ``evicts``, ``engine_check``."""
    rows = []
    for name in PRESETS:
        pol = resolve_policy({"preset": name}, name)
        rows.append({
            "preset": name,
            "source": SOURCES.get(name, "see memsim policies"),
            "half_life": time_scale(pol),
            "evicts": _evicts(pol),
            "engine_check": ENGINE_CHECKS.get(name, "-"),
        })
    return rows


def catalogue_markdown() -> str:
    """The catalogue as a Markdown table (no trailing newline)."""
    lines = ["| preset | source | half-life (time scale) | evicts | engine-check |",
             "|---|---|---|---|---|"]
    for r in catalogue_rows():
        cells = [f"`{r['preset']}`", r["source"], r["half_life"], r["evicts"],
                 f"`{r['engine_check']}`" if r["engine_check"] != "-" else "-"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
