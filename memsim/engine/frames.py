"""The result frames of a replay."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from memsim.evaluation.metrics import (HIDDEN_COLUMNS, METRIC_COLUMNS, gini,
                                       superseded_use_curve)
from memsim.policies.context import TIER_CODES
from .settings import resolve_budget
from .state import superseded

if TYPE_CHECKING:
    from .inputs import _Inputs
    from .settings import Arm, SimSettings
    from .state import NoteArrays, PolicyState


#: ``arms.csv``'s recall-loss columns of an arm without an approximate
#: prefilter, in a replay where another arm has one (:func:`prefilter_overlap`)
NO_PREFILTER_OVERLAP = {"prefilter_overlap": np.nan, "prefilter_sampled": 0}

#: The per-query columns that hold whole numbers (counts, tokens); every
#: other metric is a float (NaN where undefined)
_WHOLE_METRICS = frozenset({"tokens_used", "budget_tokens", "n_packed", "n_relevant",
                            "stale_reinforced", "oracle_notes", *HIDDEN_COLUMNS})


def _empty_query_columns() -> dict[str, np.ndarray]:
    """The per-query columns of a replay without a query, 0 rows each, in the
    order and of the types a batch gives them: a stream with no query is
    valid, and its ``queries.parquet`` has every documented column, so that
    it reads back (:mod:`memsim.reporting.rundir`)."""
    names = ["query_id", "t"]
    for m in METRIC_COLUMNS:
        names.append(m)
        if m == "tokens_used":
            names.append("budget_tokens")
    names.append("actor_code")
    whole = _WHOLE_METRICS | {"query_id", "actor_code"}
    return {n: np.zeros(0, np.int64 if n in whole else np.float64) for n in names}


@dataclass
class SimResult:
    """Frames of one simulated replicate."""

    queries: pd.DataFrame
    store: pd.DataFrame
    arms: pd.DataFrame
    rankings: pd.DataFrame | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: per arm (in the order given), the (arm, query) answers each
    #: accelerator gave: its name -> count (:data:`ACCELERATORS`; none for
    #: the reference, :mod:`memsim.engine.reference`)
    accelerated: list[dict[str, int]] = field(default_factory=list)
    #: per arm, what its scoring cost (:attr:`memsim.engine.PolicyState.work`)
    work: list[dict[str, int]] = field(default_factory=list)


@dataclass(eq=False)
class _Collected:
    """What the loop gathers for the result frames."""

    metrics: list[list[dict[str, np.ndarray]]]
    rankings: list[list[dict[str, np.ndarray]]]
    store: list[tuple] = field(default_factory=list)


def _arms_frame(arms: list[Arm], per_arm: list[list[dict[str, np.ndarray]]],
                settings: SimSettings, per_query: bool,
                empty: dict[str, np.ndarray] | None = None) -> pd.DataFrame | None:
    """One frame of every arm's batches (column arrays, arm by arm), each
    row labelled with its arm's policy and budget; ``empty``'s columns when
    no arm has a row (None without it). One frame, not one per arm or per
    batch: building frames costs more than scoring in per-query mode."""
    parts = [b for batches in per_arm for b in batches]
    if not parts and empty is None:
        return None
    counts = [sum(len(next(iter(b.values()))) for b in batches) for batches in per_arm]
    budgets = [resolve_budget(a, settings, per_query=per_query) for a in arms]
    return pd.DataFrame({
        # text, not objects: an empty column then has the type a label would give it
        "policy": np.repeat(np.array([a.policy_name for a in arms], dtype=str), counts),
        "budget": np.repeat(np.array(budgets, dtype=np.int64), counts),
        **({k: np.concatenate([b[k] for b in parts]) for k in parts[0]} if parts else empty)})


def _result(inp: _Inputs, arms, states, settings: SimSettings, got: _Collected) -> SimResult:
    """The tidy frames of the run."""
    notes = inp.notes
    pq = bool(np.isfinite(inp.qbudget).any())  # queries with budgets of their own
    qframe = _arms_frame(arms, got.metrics, settings, pq, _empty_query_columns())
    codes = qframe.pop("actor_code").to_numpy()
    # (no row: a text column of no value, as a replay with queries has it)
    qframe["actor"] = (np.asarray(inp.actor_names, dtype=object)[codes] if len(qframe)
                       else pd.Series(dtype=str))
    if inp.qcategory is not None:
        # per-category results: the query's category tag, as text
        qframe["category"] = (pd.Series(inp.qcategory, index=inp.relevance.query_ids)
                              .reindex(qframe["query_id"].to_numpy()).to_numpy(dtype=object)
                              if len(qframe) else pd.Series(dtype=str))

    store = pd.DataFrame(got.store, columns=["arm", "t", "store_notes", "store_tokens",
                                             "store_invalid", "store_stale"])
    store.insert(0, "policy", [arms[i].policy_name for i in store["arm"]])
    store.insert(1, "budget", [resolve_budget(arms[i], settings, per_query=pq)
                               for i in store["arm"]])
    store = store.drop(columns="arm")

    t_end = inp.qt.max() if len(inp.qt) else 0.0
    exist = notes.created_at <= t_end
    longterm = TIER_CODES["longterm"]
    arm_rows = [{
        "policy": arm.policy_name,
        "budget": resolve_budget(arm, settings, per_query=pq),
        "recall_gini": gini(st.recalls[exist]),
        "evicted_notes": int(st.evicted.sum()),
        "promoted_notes": int(((st.tier == longterm) & (notes.tier0 != longterm)).sum()),
        **_supersession_measures(notes, st, t_end),
    } for arm, st in zip(arms, states)]
    overlaps = [prefilter_overlap(st.work) for st in states]
    if any(overlaps):  # an arm with an approximate prefilter: its recall loss
        for row, ov in zip(arm_rows, overlaps):
            row.update(ov or NO_PREFILTER_OVERLAP)
    rankings = _arms_frame(arms, got.rankings, settings, pq) if settings.save_rankings else None
    return SimResult(queries=qframe, store=store, arms=pd.DataFrame(arm_rows), rankings=rankings,
                     accelerated=[dict(st.accelerated) for st in states],
                     work=[dict(st.work) for st in states])


def prefilter_overlap(work: dict) -> dict | None:
    """``arms.csv``'s ``prefilter_overlap`` (the share of the exact nearest-M
    candidates an approximate prefilter returned, over the sampled queries)
    and ``prefilter_sampled`` (those queries) from an arm's ``work``
    counters (:mod:`memsim.engine.ann`); None when it sampled none."""
    n = work.get("overlap-queries", 0)
    if not n:
        return None
    exact = work.get("overlap-exact", 0)
    return {"prefilter_overlap": work.get("overlap-found", 0) / exact if exact else 1.0,
            "prefilter_sampled": int(n)}


def _supersession_measures(notes: NoteArrays, st: PolicyState, t_end: float) -> dict:
    """``arms.csv``'s invalidation audit and superseded-use curve of one arm
    (:mod:`memsim.evaluation.metrics`, "Superseded notes")."""
    sup = superseded(notes)
    inv = ~np.isnan(st.invalid_at)
    return {"invalidated_notes": int(inv.sum()),
            "invalidated_superseded": int((inv & (sup <= st.invalid_at)).sum()),
            **superseded_use_curve(sup, notes.created_at, st.last_access, float(t_end))}


def _add_rankings(got: list[dict[str, np.ndarray]], part: dict[str, np.ndarray],
                  tick_first: bool) -> None:
    """Add a batch's rankings to an arm's ``got``: a tick's first part as
    its own entry, a later part merged into it in the order of the whole
    tick's: every ranked row by query, then the rows of the notes hidden
    from the top C (rank -1)."""
    if tick_first:
        got.append(part)
        return
    head = got[-1]
    hidden = [r["rank"] < 0 for r in (head, part)]
    got[-1] = {k: np.concatenate([head[k][~hidden[0]], part[k][~hidden[1]],
                                  head[k][hidden[0]], part[k][hidden[1]]]) for k in head}
