"""Named presets: faithful configurations of real systems and baselines.

A preset is a partial policy table (slot -> component spec). In an experiment,
``preset = "NAME"`` starts from it and any other key of the policy table
overrides it. Each preset's text cites its source and says what memsim had to
design where the source is silent.

Assumed marks. Every parameter of a preset whose value is not in the source
system (memsim designed or guessed it) is recorded in :attr:`Preset.assumed`,
a mapping from the parameter's dotted path in the resolved policy table
(``packer.min_relative_score``; ``packer.kind`` for the choice of component;
``candidates``) to a one-line reason. :func:`add_preset` checks that every
path names a real parameter of the resolved policy and appends the marks to
the preset's text, so the record and the text cannot disagree;
:func:`assumptions` gives the marks that still apply to a policy table, a run
folder's resolved table or a :class:`Policy`. A fact of the source is never
marked, even where the source itself calls its constant a guess (Hivemind's
180 d / 0.35: "every constant in there is a guess"): the mark says what
*memsim* had to supply. The reference points (``similarity-only``, ``recency-only``,
``random``, ``oracle``, ``as-logged``) are memsim's own definitions, not models of a
system, so they carry no marks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from memsim.core.errors import ConfigError
from memsim.core.params import did_you_mean, fields_of
from .base import REGISTRY, SLOTS, Policy

__all__ = ["HIVEMIND_CUT", "Preset", "PRESETS", "add_preset", "assumptions", "parameter_paths",
           "preset_of", "preset_table", "resolve_policy"]


@dataclass(frozen=True)
class Preset:
    """A named, documented policy table.

    Attributes
    ----------
    name : str
    doc : str
        The source, the formulas, and (appended by :func:`add_preset`) the
        assumed parameters.
    table : dict
        The partial policy table (slot -> component spec).
    assumed : dict[str, str]
        Dotted parameter path in the resolved policy table -> why memsim chose
        the value (the source does not give it). Read-only by convention; use
        :func:`assumptions` for a copy.
    """

    name: str
    doc: str
    table: dict[str, Any] = field(default_factory=dict)
    assumed: dict[str, str] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {}


def parameter_paths(config: dict[str, Any]) -> dict[str, Any]:
    """The dotted parameter paths of a resolved policy table and their values.

    ``{"packer": {"kind": "greedy", "min_relative_score": 0.7}, "candidates":
    10}`` gives ``{"packer.kind": "greedy", "packer.min_relative_score": 0.7,
    "candidates": 10}``: the paths :attr:`Preset.assumed` may use.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            for pname, pval in value.items():
                out[f"{key}.{pname}"] = pval
        else:
            out[key] = value
    return out


def add_preset(name: str, doc: str, *, assumed: dict[str, str] | None = None,
               **table: Any) -> Preset:
    """Register a preset.

    Parameters
    ----------
    name : str
    doc : str
        First line: a one-sentence summary; then the source and its formulas.
    assumed : dict[str, str], optional
        Parameter path -> one-line reason, for every value memsim supplied.
        Each path must be a parameter of the resolved policy
        (:func:`parameter_paths`); the marks are appended to ``doc``.
    **table
        The partial policy table.

    Raises
    ------
    RuntimeError
        A duplicate name, or an assumed path that is not a parameter of the
        resolved policy (a programming error in the catalogue).
    """
    if name in PRESETS:
        raise RuntimeError(f"duplicate preset {name!r}")
    assumed = dict(assumed or {})
    paths = parameter_paths(resolve_policy(copy.deepcopy(table), name).to_config())
    paths.setdefault("candidates", None)  # a preset may leave top-C to the experiment
    unknown = sorted(set(assumed) - set(paths))
    if unknown:
        raise RuntimeError(f"preset {name!r}: assumed {unknown} are not parameters of its "
                           f"policy; allowed: {', '.join(sorted(paths))}")
    doc = doc.strip()
    if assumed:
        lines = "\n".join(f"    * ``{k}`` = {paths[k]!r}: {v}" for k, v in sorted(assumed.items()))
        doc += ("\n\n    Assumed (not in the source; memsim's values, see "
                "``memsim.policies.assumptions``):\n\n" + lines)
    PRESETS[name] = Preset(name=name, doc=doc, table=table, assumed=assumed)
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
    ptable : dict or str
        A ``[policies.NAME]`` table: ``preset = "..."`` and/or one entry per
        slot. A slot given as parameters only (no ``kind``) keeps the
        preset's (or the default) component kind; a slot of the preset's
        kind merges its parameters over the preset's; another kind replaces it.
        A preset's name alone stands for ``{"preset": name}``.
    where : str
        The dotted key, for error messages.
    """
    if isinstance(ptable, str):
        ptable = {"preset": ptable}
    if not isinstance(ptable, dict):
        raise ConfigError(f"{where}: expected a policy table or a preset name, got "
                          f"{type(ptable).__name__} {ptable!r:.60}")
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
            _check_kept_kind(key, prev["kind"], value, where, "preset's" if name else "default")
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


def _check_kept_kind(slot: str, kind: Any, params: dict, where: str, whose: str) -> None:
    """A slot given as parameters only keeps ``kind``: refuse a parameter that
    kind does not have, naming the kinds that have it (a ``decay`` table of
    ``half_life_days`` alone would otherwise be blamed on the default 'none')."""
    cls = REGISTRY[slot].get(kind) if isinstance(kind, str) else None
    if cls is None:
        return  # an unknown kind: Policy.from_config says so
    allowed = fields_of(cls)
    for param in params:
        having = [k for k, c in REGISTRY[slot].items() if param in fields_of(c)]
        if param not in allowed and having:  # else a typo: from_config suggests the name
            raise ConfigError(
                f"{where}.{slot}.{param}: {where}.{slot} gives no kind, so it keeps the "
                f"{whose} {slot} {kind!r}, which has no parameter {param!r}; set "
                f"{slot}.kind to one that has it: {', '.join(having)}")


def _resolved(name: str) -> dict[str, Any]:
    return resolve_policy({"preset": name}, name).to_config()


def preset_of(spec: str | dict[str, Any] | Policy) -> str | None:
    """The preset a policy comes from, or None.

    Parameters
    ----------
    spec : str, dict or Policy
        A preset name; a policy table (its ``preset`` key, if any, decides);
        or a resolved table / :class:`Policy` without one, such as the
        ``[policies.NAME]`` tables of a run folder's ``config.toml``.

    Notes
    -----
    A resolved table does not keep its preset's name, so it is matched: the
    presets whose component kinds equal the table's in every slot, and among
    them the one with the fewest parameters of other value (ties: the first
    registered). A table of other kinds than every preset has none.
    """
    if isinstance(spec, str):
        preset_table(spec, "preset")  # an unknown name fails clearly
        return spec
    if isinstance(spec, dict) and spec.get("preset") is not None:
        return spec["preset"] if spec["preset"] in PRESETS else None
    config = spec.to_config() if isinstance(spec, Policy) else \
        resolve_policy(spec, "policy").to_config()
    paths = parameter_paths(config)
    best, best_diff = None, None
    for name in PRESETS:
        ref = parameter_paths(_resolved(name))
        kinds = [k for k in ref if k.endswith(".kind")]
        if any(paths.get(k) != ref[k] for k in kinds):
            continue
        diff = sum(paths.get(k) != v for k, v in ref.items() if k != "candidates")
        if best_diff is None or diff < best_diff:
            best, best_diff = name, diff
    return best


def assumptions(spec: str | dict[str, Any] | Policy) -> dict[str, str]:
    """The assumed parameters of a preset, or of a policy built on one.

    Parameters
    ----------
    spec : str, dict or Policy
        A preset name (all its marks); a policy table with ``preset = ...``
        and overrides; or a resolved table / :class:`Policy` (a run folder's
        ``[policies.NAME]``), whose preset is found by :func:`preset_of`.

    Returns
    -------
    dict[str, str]
        Dotted parameter path -> reason, sorted by path. A mark applies only
        while the policy keeps the preset's value: a parameter the table
        overrides with another value, or a slot given another component kind,
        is the table's choice and drops out. Empty when the policy comes from
        no preset.

    Examples
    --------
    >>> "packer.min_relative_score" in assumptions("hivemind")
    True
    >>> "packer.min_relative_score" in assumptions(
    ...     {"preset": "hivemind", "packer": {"min_relative_score": 0.5}})
    False
    """
    name = preset_of(spec)
    if name is None:
        return {}
    marks = PRESETS[name].assumed
    if isinstance(spec, str):
        return dict(sorted(marks.items()))
    config = spec.to_config() if isinstance(spec, Policy) else \
        resolve_policy(spec, "policy").to_config()
    paths = parameter_paths(config)
    ref = parameter_paths(_resolved(name))
    out = {}
    for key, reason in sorted(marks.items()):
        slot = key.split(".")[0]
        same_kind = "." not in key or paths.get(f"{slot}.kind") == ref.get(f"{slot}.kind")
        if same_kind and key in paths and paths[key] == ref.get(key):
            out[key] = reason
    return out


# --------------------------------------------------------------------------
# Hivemind (seed 000; the code is private: facts from the author's post)
# --------------------------------------------------------------------------

#: Relevance cut of the ``hivemind`` preset (``packer.min_relative_score``),
#: assumed, applied to each candidate's cosine similarity (``packer.cut_on =
#: "similarity"``): the quantity its argument is about. The cut is relative to
#: the best candidate's similarity, so it must keep the asked note when it is
#: less similar than the best: with cosines of the asked slot ``mu +- sd``
#: (default world, ``SyntheticWorkload().similarity_model()``: 0.520 +-
#: 0.091), the asked note one sd low against a best one sd high sits at ``(mu
#: - sd) / (mu + sd) = 0.70`` of the best; a typical same-topic note (0.260)
#: sits at 0.50 of a typical asked note. 0.70 is the strictest cut that keeps
#: the first and drops the second; it is argued from the similarity law, not
#: tuned on utility. Applied to Hivemind's score (similarity x recency) the
#: same cut would also drop notes for their age, which the argument does not
#: cover (``experiments/packing.toml``'s ``cut70`` packers cut on the score of
#: one ranker, as a packing study; notebook 03 compares both).
HIVEMIND_CUT = 0.7

_HIVEMIND_ASSUMED = {
    "retriever.kind": "relevance is cosine similarity: the post does not name its measure",
    "decay.clock": "age counts from creation: the post says 'older notes' and no more",
    "feedback.touch": "a 'use' (promotion after 5) is being packed into the context",
}

add_preset(
    "hivemind-2025-bug",
    """Hivemind before its fix: 5% a day decay on every tier, top-k cutoff packing.

    Seed 000, "5% a Day Sounds Gentle": score =
    cosine similarity x ``0.95 ** days`` on every tier, packed by sorting on
    score and filling from the top until the first note that does not fit
    (top-k with a cutoff), in score order. Notes are promoted to the longterm
    tier after 5 uses, but the decay ignores the tier: "the quiet one won".

    memsim's choices where the post is silent: similarity is cosine, age
    counts from creation, a "use" is being packed into the context.""",
    assumed=_HIVEMIND_ASSUMED,
    retriever="cosine",
    decay={"kind": "per-day", "rate": 0.05},
    ranker="product",
    packer="top-k-cutoff",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "promote_after": 5, "timing": "per-query"},
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
    constants (21 d / 0.05, memsim's values; the post only says scratch
    should fade fast) and the similarity (cosine).

    **Relevance cut (assumed).** Candidates whose cosine similarity is under
    0.70 of the query's most similar candidate are not packed
    (``min_relative_score``, ``cut_on = "similarity"``). The post publishes
    no cut, but without one value per token on raw cosine packs dozens of
    small, weakly related notes per query (the post's own caveat: "more notes
    isn't always better"): on ``experiments/presets.toml`` the uncut packer
    packs ~33 notes per query and loses to the bug it fixes. The threshold is
    argued from the similarity law, not tuned (see ``HIVEMIND_CUT``), so it
    is applied to similarity, not to the score (similarity x recency), which
    would also cut by age; notebook 03 shows the result at other cuts and on
    the score.""",
    assumed={
        **_HIVEMIND_ASSUMED,
        "packer.min_relative_score": "relevance cut before packing; no threshold is "
                                     "published: 0.70 = (mu - sd) / (mu + sd) of the asked "
                                     "note's cosine (see HIVEMIND_CUT)",
        "packer.cut_on": "the cut is argued from the cosine law, so it compares "
                         "similarity, not similarity x recency",
        "packer.max_swaps": "the swap rule is not public: memsim's rule (greedy-swap "
                            "docstring), at most 4 swaps per query",
        "stickiness.kind": "the access weight is not public: uses add nothing to the "
                           "score beyond promotion",
        "decay.scratch_half_life_days": "the post only says scratch notes should fade "
                                        "fast: 21 d is memsim's value",
        "decay.scratch_floor": "the post only says scratch notes should fade fast: "
                               "0.05 is memsim's value",
    },
    retriever="cosine",
    decay={"kind": "per-tier", "task_half_life_days": 180.0, "task_floor": 0.35,
           "scratch_half_life_days": 21.0, "scratch_floor": 0.05},
    stickiness="none",
    ranker="product",
    packer={"kind": "greedy-swap", "min_relative_score": HIVEMIND_CUT, "cut_on": "similarity"},
    orderer="edges",
    feedback={"kind": "default", "touch": "packed", "promote_after": 5, "timing": "per-query"},
)

# --------------------------------------------------------------------------
# ai-memory (seed 001; crates/ai-memory-store/src/decay.rs,
# crates/ai-memory-consolidate/src/sweep.rs)
# --------------------------------------------------------------------------

#: What both ai-memory presets assume (the source is silent on them).
_AI_MEMORY_ASSUMED = {
    "retriever.kind": "seed 001 covers eviction only: retrieval by cosine similarity assumed",
    "packer.kind": "ai-memory has no token budget: skip-fill in score order",
    "feedback.touch": "an access is a note being packed into the context",
}

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
    assumed=_AI_MEMORY_ASSUMED,
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "ai-memory", "lambda_per_day": 0.02, "sigma": 0.6, "mu_per_day": 0.04,
               "breadth_weight": 0.0, "cold_threshold": 0.20},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "cooldown_s": 60.0, "timing": "per-query"},
)

add_preset(
    "ai-memory-breadth",
    "ai-memory with its breadth term on: notes many actors use survive the sweep longer.\n\n"
    + _AI_MEMORY_DOC + """

    With the breadth term on: ``breadth_weight = 1.5`` (seed 001's example:
    10 distinct actors multiply the access term by 4.45, 4 actors by 3.08),
    so notes used by many actors survive the sweep longer. The value is the
    seed's example, not a recommendation of the project (its default is 0.0
    and its tests check only that 0.0 is the identity).""",
    assumed={
        **_AI_MEMORY_ASSUMED,
        "retention.breadth_weight": "the seed's worked example (1.5); ai-memory's default "
                                    "is 0.0 and it publishes no recommended value",
    },
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "ai-memory", "lambda_per_day": 0.02, "sigma": 0.6, "mu_per_day": 0.04,
               "breadth_weight": 1.5, "cold_threshold": 0.20},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "cooldown_s": 60.0, "timing": "per-query"},
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
    wall clock in whole seconds; memsim's ages are exact (fractional days).
    The engine adds its recalls after every search, and so does the preset
    (``feedback.timing = "per-query"``, exact; ``"per-tick"`` applies them
    once a tick, a faster approximation: ``memsim engine-check feather``
    measures both)."""

#: What both Feather presets assume: k is the caller's argument, and there is no budget.
_FEATHER_ASSUMED = {
    "feedback.k": "k is the caller's argument to search(): 10, as in seed 002's example call",
    "candidates": "the packer sees the k = 10 returned notes (follows feedback.k)",
    "packer.kind": "Feather has no token budget: skip-fill in score order",
}

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
    assumed=_FEATHER_ASSUMED,
    **_FEATHER_TABLE,
    feedback={"kind": "default", "touch": "returned", "k": 10, "before_scoring": False,
              "timing": "per-query"},
)

add_preset(
    "feather-v0.16",
    "Feather DB with the older feedback rule: all 3k candidates gain a recall before scoring."
    "\n\n" + _FEATHER_DOC + """

    As the older source (v0.16) did: all 3k = 30 prefilter candidates gain a
    recall *before* they are scored, so every candidate's stickiness grows on
    each search whether it is returned or not. Kept as a variant to show how
    much the feedback rule alone moves rankings.""",
    assumed=_FEATHER_ASSUMED,
    **_FEATHER_TABLE,
    feedback={"kind": "default", "touch": "prefilter", "k": 10, "before_scoring": True,
              "timing": "per-query"},
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
    ``0.99 ** rank`` in last-access order: the ``generative-agents-code``
    preset. The paper's system resets last access per retrieval, and so does
    the preset (``feedback.timing = "per-query"``; ``"per-tick"`` applies the
    resets once a day, an approximation).""",
    assumed={
        "packer.kind": "the paper has no token budget (the released code takes the top 30 "
                       "whatever their size): skip-fill in score order",
        "feedback.touch": "the retrieved memories (whose last access resets) are the packed ones",
    },
    retriever="cosine",
    decay={"kind": "generative-agents", "decay_factor": 0.995},
    ranker={"kind": "weighted-sum", "w_recency": 1.0, "w_importance": 1.0, "w_relevance": 1.0},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "timing": "per-query"},
)

add_preset(
    "langchain-time-weighted",
    """LangChain's time-weighted retriever: similarity plus an hourly decay since last use.

    LangChain's ``TimeWeightedVectorStoreRetriever``
    (``langchain_classic/retrievers/time_weighted_retriever.py``,
    langchain-classic 1.0.8; ``langchain/retrievers/...`` before LangChain
    1.x), all of it in the ``langchain-time-weighted`` ranker: the candidates
    of a query are the vector store's 100 nearest (``search_kwargs = {"k":
    100}``) with the store's relevance, and the ``k = 4`` most recently
    added documents (``memory_stream[-k:]``) with relevance
    ``default_salience`` (None: none, i.e. 0); each scores
    ``relevance + (1 - 0.01) ** hours_since_last_access``; the top ``k = 4``
    after a stable sort are returned and their ``last_accessed_at`` set to
    now (feedback ``touch = "returned"``, ``k = 4``; ``candidates = 4`` so the
    packer sees the 4 returned documents).

    The relevance is the vector store's (``ranker.relevance``): ``"cosine"``
    here (an inner-product FAISS index over normalised vectors whose
    relevance is the cosine); ``"l2"`` is LangChain's FAISS default
    (``1 - d / sqrt(2)`` on the squared L2 distance FAISS returns),
    ``"inner-product"`` its ``MAX_INNER_PRODUCT`` rule. ``memsim engine-check
    langchain`` replays a stream through the real retriever and this preset.

    The retriever resets last access after every call, and so does the
    preset (``feedback.timing = "per-query"``); with ``"per-tick"`` the
    queries of one day would not see each other's resets (an approximation;
    measured in the README, "Real data and a real engine"). memsim's choice:
    packing is skip-fill in score order (the retriever has no token budget).""",
    assumed={
        "ranker.relevance": "the vector store is the user's choice: an inner-product index "
                            "over normalised vectors with cosine relevance (FAISS's default "
                            "is l2)",
        "packer.kind": "the retriever has no token budget: skip-fill in score order",
    },
    retriever="cosine",
    decay={"kind": "langchain", "decay_rate": 0.01},
    ranker={"kind": "langchain-time-weighted", "relevance": "cosine", "search_k": 100, "k": 4,
            "default_salience": 0.0},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 4, "timing": "per-query"},
    candidates=4,
)

add_preset(
    "generative-agents-code",
    """Generative Agents as released: rank-based recency, weights 0.5 / 3 / 2, top 30 reset.

    ``joonspk-research/generative_agents``,
    ``reverie/backend_server/persona/cognitive_modules/retrieve.py``
    (``new_retrieve``): every memory is ranked by last access (oldest
    first, as the code sorts) and gets recency ``0.99 ** rank``; recency,
    relevance (cosine) and importance are each min-max normalised over the
    memories and weighed ``0.5 / 3 / 2`` (``gw``; ``recency_w =
    relevance_w = importance_w = 1``); the top ``n_count = 30`` are
    returned and their ``last_accessed`` set to now (feedback ``touch =
    "returned"``, ``k = 30``; ``candidates = 30``). As coded, the memory
    accessed longest ago gets the highest recency (the ranker's
    ``rank_from = "least-recent"``); the ``generative-agents`` preset is the
    paper (``0.995 ** hours``, weights 1).

    Each retrieval resets last access, which moves every later rank: the
    preset applies the resets query by query (``feedback.timing =
    "per-query"``; ``"per-tick"`` would apply them once a day, an
    approximation). memsim's choices: the 30
    returned are packed skip-fill in score order within the budget (the code
    hands all 30 on), and every note counts as an event memory (the code's
    event / thought split only orders ties).""",
    assumed={
        "packer.kind": "the code takes the top 30 whatever their size: skip-fill in score "
                       "order within the budget",
    },
    retriever="cosine",
    ranker={"kind": "generative-agents-code", "recency_decay": 0.99, "w_recency": 0.5,
            "w_relevance": 3.0, "w_importance": 2.0, "rank_from": "least-recent"},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "returned", "k": 30, "timing": "per-query"},
    candidates=30,
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
    assumed={
        "retention.threshold": "the paper forgets 'when R falls low' and gives no threshold: 0.05",
        "retention.strength_days": "S starts at 1 as published; reading t in days is memsim's",
        "retention.protect_pinned": "MemoryBank has no pinned notes: memsim never forgets them",
        "retriever.kind": "the paper retrieves by embedding similarity: cosine assumed",
        "packer.kind": "MemoryBank has no token budget: skip-fill in score order",
        "feedback.touch": "a recall (S + 1, t reset) is a note being packed into the context",
    },
    retriever="cosine",
    ranker="similarity",
    retention={"kind": "memorybank", "strength_days": 1.0, "strength_per_recall": 1.0,
               "mode": "threshold", "threshold": 0.05},
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "timing": "per-query"},
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

add_preset(
    "as-logged",
    """What runs today: the production system's logged ranking, replayed.

    For streams imported from a memory-layer trace with ``retrieved`` events
    (:mod:`memsim.data.importers.trace`): each query gets exactly the notes the
    system returned, in its order (scored by its logged scores, else
    ``1 / rank``), packed into the budget with skip-fill in that order. Every
    other policy of an experiment is then compared with the system as it
    runs. A reference point of memsim's: no decay, no retention (the log
    already reflects the system's own), no feedback (the log's rankings do
    not change with what memsim's replay uses).""",
    retriever="cosine",
    ranker="as-logged",
    packer="skip-fill",
    orderer="score",
    feedback={"kind": "default", "touch": "none"},
)

add_preset(
    "per-type-half-life",
    """Similarity x a recency with one half-life per memory type; skip-fill.

    memsim's own reference for logs whose notes carry a type (a trace's
    ``type``: episodic, semantic, procedural, other): the ``product`` ranker
    over the ``per-type-half-life`` decay (events fade in a month, facts and
    how-tos in a year, the rest in 90 days, no floor), packed with skip-fill.
    Its half-lives are starting points for ``memsim advise`` or a sweep, not
    a system's published constants.""",
    retriever="cosine",
    decay="per-type-half-life",
    ranker="product",
    packer="skip-fill",
    orderer="score",
)
