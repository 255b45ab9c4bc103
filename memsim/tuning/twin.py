"""A synthetic twin of a real stream: the generator's knobs fitted to it.

A real stream (your trace, LoCoMo) is one draw: a sweep tuned on it can fit
its accidents. A *twin* is a :class:`~memsim.data.workload.SyntheticWorkload`
whose knobs are measured on the real stream, so that fresh seeds give fresh
streams that look like it; a policy tuned on twins is then checked on the
real stream. ``memsim calibrate workload STREAM --out DIR`` writes the twin
(``twin.toml``, a runnable experiment with the fitted ``[workload]`` and a
similarity-only policy) and a report that puts real and synthetic side by
side.

What is measured and how each knob is set
-----------------------------------------
Time: the twin's day 0 is the real stream's first query. ``horizon_days`` =
last query - first query (at least 1), ``backfill_days`` = first query -
first note; notes created after the last query are ignored.

Rates: ``notes_per_day`` = notes (every version of an updated note counts:
an update is a new note in the generator's world) / (``backfill_days +
horizon_days``); ``queries_per_day`` = queries / ``horizon_days``; queries
arrive ``steady`` (a Poisson process: bursts and weekly cycles are not
fitted; the report's query-rate figure shows what that leaves out);
``accesses_per_day`` from organic reads.

Sizes: per note class (a ``note_class`` column naming the generator's
classes, as a synthetic stream has), else one LogNormal for every class:
``size_median = exp(mean ln tokens)``, ``size_sigma = sd(ln tokens)``.

Classes: with a ``note_class`` column their note shares and query shares
are counted. Without one the twin has four classes: ``superseding`` (the
share of notes that are versions of an updated note, ``notes_per_slot`` the
mean versions per updated note), ``distractor`` (never relevant), and
``evergreen`` and ``project`` splitting the rest. The relevant notes per
answerable query give ``notes_per_slot`` and the mean gap between a query's
relevant notes ``interval_days``. The evergreen query share ``w`` (0, 0.25,
0.5, 0.75, 1) and the project lifetime median (3, 10, 30, 90, 300 days) are
chosen on a grid by the two-sample Kolmogorov-Smirnov statistic between the
real and synthetic ages of relevant notes at query time (one small stream
per grid point, common seed). The distractor share is set so that the share
of notes never relevant to any query matches: a stream without distractors
gives the slot notes never asked ``u0``, and ``d = (u - u0) / (1 - u0)``
(once before and once after the grid).

Actors: ``n_actors`` = distinct query actors; ``personal_share`` from the
share ``P`` of relevant notes written by the query's own actor, ``P = p + (1
- p) / A``.

Gains: ``gain_current`` = the largest positive gain, ``gain_valid`` the
same when every positive gain is equal (implicit ``used`` relevance), else
the median positive gain; ``gain_stale`` the median negative gain, 0 when
there is none.

Similarity: ``embedding_dim`` is the real one up to 256 (64 above: BM25
vectors are as wide as the vocabulary). ``retriever_noise`` is fitted so
that *similarity-only recall within the budget* (the ``similarity-only``
preset's mean ``recall``) matches the real stream's: a 1-D bisection over
the noise in ``[0, 6]``, each step simulating a small twin stream (the
fitted knobs with at most ``search_queries`` queries; the store keeps its
full size) on one common seed, so that recall falls smoothly with the
noise. ``slot_weight`` stays 1: when even noise 0 recalls less than the
real stream, the budget, not similarity, limits recall, and the report
says so. The separation of relevant from irrelevant similarities (their
means, sds and AUC within queries) is reported for both streams.

Checks: the fitted twin is generated on a fresh seed at full size and
measured like the real stream: recall (the target: within
:data:`RECALL_TOLERANCE`, 0.05; a note says when it is missed), the share
of notes never relevant (within :data:`NEVER_TOLERANCE`, 0.03, when the
distractor share was fitted to it), KS statistics of token sizes,
relevant-note ages and query times, rates.

Refused: a stream with no query, or with no query that has a relevant note
(no ground truth: the recall the noise is fitted to is undefined), before
anything is fitted or written; ``profile.json`` is strict JSON (an undefined
measure is ``null``).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.runs.config import MAX_TOKENS_BUDGET, dumps_toml, experiment_from_dict
from memsim.core.errors import ConfigError, StreamError
from memsim.core.paths import file_in_the_way
from memsim.data.importers.locomo import import_locomo
from memsim.data.importers.trace import import_trace
from memsim.reporting.rundir import jsonable, relevant_when_asked
from memsim.runs.runner import load_stream_for, simulate_experiment
from memsim.data.stream import Stream, read_stream
from memsim.data.workload import CLASS_NAMES, MAX_TOKENS, MIN_TOKENS, SyntheticWorkload

__all__ = [
    "StreamProfile",
    "Twin",
    "profile_stream",
    "similarity_recall",
    "ks_statistic",
    "fit_twin",
    "write_twin",
    "load_any_stream",
    "calibrate_workload",
    "format_twin",
    "twin_figures",
    "report_markdown",
    "NOISE_RANGE",
    "AGE_GRID_SHARES",
    "AGE_GRID_LIFETIMES",
]

#: The bisection interval of ``retriever_noise``.
NOISE_RANGE = (0.0, 6.0)
#: Evergreen query shares and project lifetime medians (days) of the age grid.
AGE_GRID_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
AGE_GRID_LIFETIMES = (3.0, 10.0, 30.0, 90.0, 300.0)
#: Most bisection steps (the bracket is 6 / 2**64 wide by then: more cannot
#: move the noise, only take longer).
MAX_STEPS = 64
#: Largest seed: ``twin.toml``'s seed is the fit's + 1, and an experiment's
#: seed is at most 2**63 - 1.
MAX_SEED = 2 ** 63 - 2
_POLICY = "similarity-only"


# --------------------------------------------------------------------------
# Measuring a stream
# --------------------------------------------------------------------------


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic ``sup_x |F_a(x) - F_b(x)|``
    (NaN when either sample is empty)."""
    a = np.sort(np.asarray(a, dtype=np.float64))
    b = np.sort(np.asarray(b, dtype=np.float64))
    if a.size == 0 or b.size == 0:
        return math.nan
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, side="right") / a.size
    fb = np.searchsorted(b, x, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


@dataclass
class StreamProfile:
    """What the twin is fitted to, measured on one stream (times shifted so
    that the first query is at day 0).

    Attributes
    ----------
    scalars : dict
        ``n_notes``, ``n_queries``, ``horizon_days``, ``backfill_days``,
        ``notes_per_day``, ``queries_per_day``, ``accesses_per_day``,
        ``token_median``, ``token_sigma``, ``never_relevant_share``,
        ``updated_share``, ``versions_per_updated``, ``answerable_share``,
        ``relevant_per_query``, ``relevant_gap_days``, ``n_actors``,
        ``own_actor_share``, ``sim_relevant_mean``, ``sim_relevant_sd``,
        ``sim_other_mean``, ``sim_other_sd``, ``sim_auc``, and ``recall``
        (similarity-only, once measured).
    tokens, relevant_ages, query_times : ndarray
        Token sizes of the notes; ages of the relevant notes (gain > 0) at
        their queries' times; query times.
    classes : DataFrame or None
        Per generator class (a ``note_class`` column): ``share``,
        ``query_share``, ``size_median``, ``size_sigma``.
    gains : ndarray
        Every gain of the qrels.
    """

    scalars: dict
    tokens: np.ndarray
    relevant_ages: np.ndarray
    query_times: np.ndarray
    gains: np.ndarray
    classes: pd.DataFrame | None = None


def _lognormal(tokens: np.ndarray) -> tuple[float, float]:
    lt = np.log(np.maximum(np.asarray(tokens, dtype=np.float64), 1.0))
    if lt.size == 0:
        return 100.0, 1.0
    return float(np.exp(lt.mean())), float(lt.std()) if lt.size > 1 else 0.0


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a relevant similarity > an irrelevant one), ties half (Mann-Whitney)."""
    if pos.size == 0 or neg.size == 0:
        return math.nan
    neg = np.sort(neg)
    lo = np.searchsorted(neg, pos, side="left")
    hi = np.searchsorted(neg, pos, side="right")
    return float(np.mean((lo + 0.5 * (hi - lo)) / neg.size))


def _separation(stream: Stream, max_queries: int = 300) -> dict[str, float]:
    """Cosine of each query to its relevant live notes and to the other live
    notes it can see (its namespace), over up to ``max_queries`` answerable
    queries (evenly spaced)."""
    nan = {"sim_relevant_mean": math.nan, "sim_relevant_sd": math.nan,
           "sim_other_mean": math.nan, "sim_other_sd": math.nan, "sim_auc": math.nan}
    if stream.note_embeddings is None or stream.query_embeddings is None:
        return nan
    notes, queries = stream.notes, stream.queries
    pos = stream.qrels[stream.qrels["gain"] > 0]
    qids = pd.unique(pos["query_id"])
    if qids.size == 0:
        return nan
    qids = qids[np.unique(np.linspace(0, qids.size - 1, min(max_queries, qids.size))
                          .round().astype(int))]
    qrow = pd.Series(np.arange(len(queries)), index=queries["query_id"].to_numpy())
    nrow = pd.Series(np.arange(len(notes)), index=notes["note_id"].to_numpy())
    created = notes["created_at"].to_numpy(np.float64)
    expires = notes["expires_at"].to_numpy(np.float64) if "expires_at" in notes else None
    ns_n = notes["namespace"].astype(str).to_numpy() if "namespace" in notes else None
    ns_q = queries["namespace"].astype(str).to_numpy() if "namespace" in queries else None
    rel_by_q = pos.groupby("query_id")["note_id"].apply(np.asarray)
    ne = _unit(stream.note_embeddings)
    rel_all, oth_all, aucs = [], [], []
    for qid in qids:
        qi = int(qrow[qid])
        t = float(queries["t"].iat[qi])
        live = created <= t
        if expires is not None:
            live &= ~(expires <= t)
        if ns_n is not None and ns_q is not None:
            live &= ns_n == ns_q[qi]
        idx = np.flatnonzero(live)
        if idx.size == 0:
            continue
        qv = _unit(stream.query_embeddings[qi:qi + 1])[0]
        cos = ne[idx] @ qv
        is_rel = np.isin(idx, nrow.reindex(rel_by_q[qid]).dropna().astype(int).to_numpy())
        if is_rel.any() and (~is_rel).any():
            rel_all.append(cos[is_rel])
            oth_all.append(cos[~is_rel])
            aucs.append(_auc(cos[is_rel], cos[~is_rel]))
    if not rel_all:
        return nan
    r, o = np.concatenate(rel_all), np.concatenate(oth_all)
    return {"sim_relevant_mean": float(r.mean()), "sim_relevant_sd": float(r.std()),
            "sim_other_mean": float(o.mean()), "sim_other_sd": float(o.std()),
            "sim_auc": float(np.mean(aucs))}


def profile_stream(stream: Stream) -> StreamProfile:
    """Measure ``stream`` (see :class:`StreamProfile`); recall is not
    measured here (:func:`similarity_recall`)."""
    notes, queries, qrels = stream.notes, stream.queries, stream.qrels
    if len(queries) == 0:
        raise StreamError(f"stream {stream.name!r} has no queries: nothing to fit a twin to")
    qt = queries["t"].to_numpy(np.float64)
    t0, t1 = float(qt.min()), float(qt.max())
    created_all = notes["created_at"].to_numpy(np.float64)
    keep = created_all <= t1
    nt = notes[keep]
    created = created_all[keep]
    horizon = max(t1 - t0, 1.0)
    backfill = max(t0 - (float(created.min()) if created.size else t0), 0.0)
    span = horizon + backfill
    tokens = nt["tokens"].to_numpy(np.int64)
    med, sig = _lognormal(tokens)

    pos = qrels[qrels["gain"] > 0]
    n_at = pd.Series(created_all, index=notes["note_id"].to_numpy())
    q_t = pd.Series(qt, index=queries["query_id"].to_numpy())
    pt = q_t.reindex(pos["query_id"].to_numpy()).to_numpy()
    pc = n_at.reindex(pos["note_id"].to_numpy()).to_numpy()
    exists = pc <= pt
    ages = (pt - pc)[exists]
    pos_e = pos[exists]
    per_q = pos_e.groupby("query_id").size()
    gaps = []
    for _, grp in pd.DataFrame({"q": pos_e["query_id"].to_numpy(),
                                "c": pc[exists]}).groupby("q"):
        if len(grp) > 1:
            gaps.append(float(np.mean(np.diff(np.sort(grp["c"].to_numpy())))))
    never = _never_share(stream)

    # updates: versions of one logged note (trace), or superseding notes (synthetic)
    updated, versions = 0.0, 1.0
    if "trace_id" in nt.columns and "version" in nt.columns:
        nv = nt.groupby("trace_id")["version"].transform("size").to_numpy()
        updated = float(np.mean(nv > 1)) if len(nt) else 0.0
        multi = nt.groupby("trace_id").size()
        versions = float(multi[multi > 1].mean()) if (multi > 1).any() else 1.0
    elif "note_class" in nt.columns and "slot" in nt.columns:
        sup = nt[nt["note_class"] == "superseding"]
        updated = len(sup) / max(len(nt), 1)
        versions = float(sup.groupby("slot").size().mean()) if len(sup) else 1.0

    q_actors = queries["actor"].astype(str).to_numpy()
    n_actors = int(pd.unique(q_actors).size)
    author = pd.Series(notes["actor"].astype(str).to_numpy(), index=notes["note_id"].to_numpy())
    qa = pd.Series(q_actors, index=queries["query_id"].to_numpy())
    own = (author.reindex(pos_e["note_id"].to_numpy()).to_numpy()
           == qa.reindex(pos_e["query_id"].to_numpy()).to_numpy())
    acc = stream.accesses
    n_acc = int(((acc["t"] <= t1) & (acc["t"] >= t0 - backfill)).sum()) if len(acc) else 0

    scalars = {
        "n_notes": int(len(nt)), "n_queries": int(len(queries)),
        "horizon_days": horizon, "backfill_days": backfill,
        "notes_per_day": len(nt) / span, "queries_per_day": len(queries) / horizon,
        "accesses_per_day": n_acc / span,
        "token_median": med, "token_sigma": sig,
        "never_relevant_share": never, "updated_share": updated,
        "versions_per_updated": versions,
        "answerable_share": float(per_q.size / len(queries)),
        "relevant_per_query": float(per_q.mean()) if per_q.size else 1.0,
        "relevant_gap_days": float(np.mean(gaps)) if gaps else math.nan,
        "n_actors": n_actors,
        "own_actor_share": float(own.mean()) if own.size else math.nan,
        "relevant_age_median": float(np.median(ages)) if ages.size else math.nan,
    }
    scalars.update(_separation(stream))
    classes = None
    if "note_class" in nt.columns and set(pd.unique(nt["note_class"])) <= set(CLASS_NAMES):
        rows = []
        qc = queries["note_class"] if "note_class" in queries.columns else None
        n_ask = int((qc != "none").sum()) if qc is not None else 0
        for name in CLASS_NAMES:
            tok = nt.loc[nt["note_class"] == name, "tokens"].to_numpy()
            m, s = _lognormal(tok) if tok.size else (med, sig)
            qs = float((qc == name).sum() / n_ask) if qc is not None and n_ask else math.nan
            rows.append({"class": name, "share": tok.size / max(len(nt), 1),
                         "query_share": qs, "size_median": m, "size_sigma": s})
        classes = pd.DataFrame(rows).set_index("class")
    return StreamProfile(scalars=scalars, tokens=tokens, relevant_ages=ages,
                         query_times=qt - t0, gains=qrels["gain"].to_numpy(np.float64),
                         classes=classes)


def similarity_recall(stream: Stream, budget: int = 1500, *, candidates: int = 50,
                      seed: int = 0) -> float:
    """Mean ``recall`` of the ``similarity-only`` preset on ``stream`` within
    ``budget`` tokens (the queries with a relevant note)."""
    exp = experiment_from_dict({
        "experiment": {"name": "twin-recall", "seed": seed, "replicates": 1,
                       "budget_tokens": int(budget), "candidates": int(candidates)},
        "workload": {"horizon_days": 1.0, "backfill_days": 0.0},
        "policies": {_POLICY: {"preset": _POLICY}}})
    q = simulate_experiment(exp, replicates=[0], streams={0: stream})["queries"]
    r = q["recall"].to_numpy(np.float64)
    r = r[np.isfinite(r)]
    return float(r.mean()) if r.size else math.nan


# --------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------


def _class_table(p: StreamProfile, *, distractor: float, evergreen_w: float,
                 lifetime: float) -> dict:
    """``[workload.classes]`` of a twin without known classes."""
    s = p.scalars
    med, sig = s["token_median"], s["token_sigma"]
    per_slot = max(1.0, s["relevant_per_query"])
    gap = s["relevant_gap_days"] if math.isfinite(s["relevant_gap_days"]) else 7.0
    gap = max(gap, 1e-3)
    sup = min(max(s["updated_share"], 0.0), 0.95)
    rest = max(1.0 - distractor - sup, 0.0)
    size = {"size_median": med, "size_sigma": sig}
    return {
        "evergreen": {"share": rest * evergreen_w, "query_share": evergreen_w,
                      "notes_per_slot": per_slot, "interval_days": gap, **size},
        "project": {"share": rest * (1.0 - evergreen_w), "query_share": 1.0 - evergreen_w,
                    "notes_per_slot": per_slot, "interval_days": gap,
                    "lifetime_median_days": lifetime, **size},
        "scratch": {"share": 0.0, "query_share": 0.0, **size},
        "superseding": {"share": sup, "query_share": 0.2 if sup > 0 else 0.0,
                        "notes_per_slot": max(1.0, s["versions_per_updated"]), **size},
        "distractor": {"share": distractor, **size},
    }


def _known_classes(p: StreamProfile) -> dict:
    out = {}
    for name, r in p.classes.iterrows():
        t = {"share": float(r["share"]), "size_median": float(r["size_median"]),
             "size_sigma": float(r["size_sigma"])}
        if name != "distractor":
            t["query_share"] = float(r["query_share"]) if math.isfinite(r["query_share"]) else 0.0
        out[name] = t
    return out


def _gains(p: StreamProfile) -> dict:
    g = p.gains
    posg, negg = g[g > 0], g[g < 0]
    cur = float(posg.max()) if posg.size else 1.0
    valid = cur if posg.size == 0 or np.all(posg == posg[0]) else float(np.median(posg))
    return {"gain_current": cur, "gain_valid": min(valid, cur),
            "gain_stale": float(np.median(negg)) if negg.size else 0.0}


def _base_table(p: StreamProfile, dim: int) -> dict:
    s = p.scalars
    a = max(int(s["n_actors"]), 1)
    own = s["own_actor_share"]
    personal = 0.0 if a == 1 or not math.isfinite(own) else (own - 1.0 / a) / (1.0 - 1.0 / a)
    return {
        "horizon_days": float(s["horizon_days"]), "backfill_days": float(s["backfill_days"]),
        "notes_per_day": float(s["notes_per_day"]),
        "queries_per_day": float(s["queries_per_day"]),
        "accesses_per_day": float(s["accesses_per_day"]),
        "n_actors": a, "personal_share": float(min(max(personal, 0.0), 1.0)),
        "embedding_dim": dim, **_gains(p),
    }


def _workload(table: dict) -> SyntheticWorkload:
    return SyntheticWorkload.from_config(table)


def _small(table: dict, search_queries: int) -> dict:
    """The same knobs with at most ``search_queries`` queries (the store keeps its size)."""
    n = table["queries_per_day"] * table["horizon_days"]
    if n <= search_queries:
        return table
    return {**table, "queries_per_day": search_queries / table["horizon_days"]}


#: how far the twin's recall may be from the real one without a note
RECALL_TOLERANCE = 0.05
#: how far its share of notes never relevant may be (a fitted distractor share)
NEVER_TOLERANCE = 0.03


def _never_share(stream: Stream) -> float:
    """The share of the notes created by the last query that no query has
    as relevant (:class:`StreamProfile`'s ``never_relevant_share``: what the
    distractor share is fitted to, measured alike)."""
    last = stream.queries["t"].max()
    ids = stream.notes.loc[stream.notes["created_at"] <= last, "note_id"].to_numpy()
    rel = stream.qrels.loc[stream.qrels["gain"] > 0, "note_id"].to_numpy()
    return float(np.mean(~np.isin(ids, rel))) if ids.size else 0.0


#: bisection steps of :func:`_distractor_share` (a share within 0.95 / 2**10)
DISTRACTOR_STEPS = 10


def _distractor_share(table: dict, real: StreamProfile, evergreen_w: float, lifetime: float,
                      target: float, seed: int) -> float:
    """The distractor share ``d`` whose full-size stream (generated, not
    simulated: cheap) has the ``target`` share of notes never relevant, by
    bisection on [0, 0.95]. Not ``d + (1 - d) u0`` with ``u0`` measured
    without distractors: at a fixed note rate the distractors leave fewer
    slot notes for the same queries, so fewer of them go unasked (LoCoMo's
    twin fell 0.06 short of its never-relevant share that way)."""
    def never(d: float) -> float:
        t = {**table, "classes": _class_table(real, distractor=d, evergreen_w=evergreen_w,
                                              lifetime=lifetime)}
        return _never_share(_workload(t).generate(seed))

    lo, hi = 0.0, 0.95
    at_lo, at_hi = never(lo), never(hi)
    if at_lo >= target:
        return lo
    if at_hi <= target:
        return hi
    for _ in range(DISTRACTOR_STEPS):
        mid = (lo + hi) / 2
        at = never(mid)
        if at < target:
            lo, at_lo = mid, at
        else:
            hi, at_hi = mid, at
    return float(lo if target - at_lo <= at_hi - target else hi)


def _relevant_ages(stream: Stream) -> np.ndarray:
    pos = stream.qrels[stream.qrels["gain"] > 0]
    t = pd.Series(stream.queries["t"].to_numpy(), index=stream.queries["query_id"].to_numpy())
    c = pd.Series(stream.notes["created_at"].to_numpy(), index=stream.notes["note_id"].to_numpy())
    a = t.reindex(pos["query_id"].to_numpy()).to_numpy() - c.reindex(pos["note_id"].to_numpy()
                                                                      ).to_numpy()
    return a[a >= 0]


@dataclass
class Twin:
    """A fitted twin (what :func:`fit_twin` returns).

    Attributes
    ----------
    workload : SyntheticWorkload
        The fitted knobs.
    real, synthetic : StreamProfile
        The real stream and the twin on a fresh seed, measured alike.
    noise_search : DataFrame
        ``retriever_noise, recall``: the bisection steps.
    age_grid : DataFrame
        ``evergreen_query_share, lifetime_median_days, ks``: the age grid
        (empty when the stream has classes).
    fitted : dict
        knob -> how it was set (for the report).
    budget, seed : int
    notes : list of str
        What the fit could not match.
    """

    workload: SyntheticWorkload
    real: StreamProfile
    synthetic: StreamProfile
    noise_search: pd.DataFrame
    age_grid: pd.DataFrame
    fitted: dict
    budget: int
    seed: int
    source: str = ""
    notes: list = field(default_factory=list)
    candidates: int = 50

    def comparison(self) -> pd.DataFrame:
        """Real against twin: rates, sizes, ages, similarity, recall and
        the two-sample KS statistics."""
        r, s = self.real.scalars, self.synthetic.scalars
        keys = ["n_notes", "n_queries", "notes_per_day", "queries_per_day", "token_median",
                "token_sigma", "relevant_age_median", "relevant_per_query", "answerable_share",
                "never_relevant_share", "updated_share", "n_actors", "own_actor_share",
                "sim_relevant_mean", "sim_other_mean", "sim_auc", "recall"]
        rows = [(k, r.get(k, math.nan), s.get(k, math.nan)) for k in keys]
        df = pd.DataFrame(rows, columns=["measure", "real", "twin"])
        df["difference"] = df["twin"] - df["real"]
        return df

    def ks(self) -> dict[str, float]:
        """Two-sample KS statistics, real against twin."""
        return {"tokens": ks_statistic(self.real.tokens, self.synthetic.tokens),
                "relevant_ages": ks_statistic(self.real.relevant_ages,
                                              self.synthetic.relevant_ages),
                "query_times": ks_statistic(self.real.query_times, self.synthetic.query_times)}


def _check_options(budget: object, steps: object, seed: object,
                   names: tuple[str, str, str]) -> None:
    """Refuse a budget that is not a whole number from 1 to 2**40, a step
    count that is not a whole number from 0 to ``MAX_STEPS`` and a seed that
    is not a whole number from 0 to ``MAX_SEED`` (ConfigError naming the
    parameter or option, with the allowed range).

    Zero steps is a search: the noise is interpolated between the ends of
    ``NOISE_RANGE``, each step halves that bracket first. A negative count
    would silently be zero."""
    # full: the message always gives both ends (a seed's range is the value's
    # domain); else only the end that was crossed
    for name, value, least, most, note, full in (
            (names[0], budget, 1, MAX_TOKENS_BUDGET, " (2**40)", False),
            (names[1], steps, 0, MAX_STEPS, "", False),
            (names[2], seed, 0, MAX_SEED, " (2**63 - 2: twin.toml's seed is this + 1)", True)):
        whole = not isinstance(value, bool) and isinstance(value, (int, np.integer))
        if whole and least <= value <= most:
            continue
        if full or (whole and value > most):
            raise ConfigError(f"{name}: give a whole number from {least} to {most}{note}, "
                              f"got {value!r}")
        raise ConfigError(f"{name}: give a whole number >= {least}, got {value!r}")


def _check_fittable(stream: Stream, where: str) -> None:
    """Refuse a stream with nothing to fit a twin to, in one line that starts
    with ``where`` (the file, or the stream's name): no query, or no query
    with a relevant note (the ``n_relevant`` of :func:`memsim.reporting.rundir.
    relevant_when_asked`, as ``memsim advise`` counts it: a positive gain of a
    note that exists when the query is asked). Without one the similarity-only
    recall the noise is fitted to is undefined (NaN)."""
    if len(stream.queries) == 0:
        raise StreamError(f"{where}: no query: nothing to fit a twin to")
    in_r, _ = relevant_when_asked(stream)
    if in_r.any():
        return
    gains = stream.qrels["gain"].to_numpy(np.float64)
    if not (gains > 0).any() and gains.size:
        why = (f"all {gains.size} judgements of the log have a negative gain: notes that "
               "mislead, none that helps")
    elif gains.size:
        why = "each note judged relevant is created after its query"
    else:
        why = "no ground truth: a trace's 'used' or 'judgement' events, a stream's qrels"
    raise StreamError(f"{where}: nothing to measure: no query has a relevant note ({why}); "
                      "the twin's retriever_noise is fitted to similarity-only recall, which "
                      "needs one")


def fit_twin(stream: Stream, *, budget: int = 1500, seed: int = 0, steps: int = 10,
             search_queries: int = 1500, candidates: int = 50,
             progress: Callable[[str], None] | None = None, where: str | None = None) -> Twin:
    """Fit the generator's knobs to ``stream`` (see the module docstring).

    Parameters
    ----------
    budget : int
        Token budget of the similarity-only recall the noise is fitted to.
    seed : int
        Seed of the search streams; the check replays the stream of replicate 0
        of ``twin.toml`` (whose seed is ``seed + 1``).
    steps : int
        Bisection steps of the noise search (the bracket is ``NOISE_RANGE``,
        6 / 2**steps wide at the end; 0 interpolates between its ends).
    search_queries : int
        Most queries of a search stream.
    where : str, optional
        How errors name the stream (default ``stream 'NAME'``; the command
        line gives the file).

    Raises
    ------
    ConfigError
        A budget, step count or seed out of range.
    StreamError
        A stream without a query, or without a query that has a relevant
        note (nothing to measure recall on).
    """
    _check_options(budget, steps, seed, ("budget", "steps", "seed"))
    _check_fittable(stream, where or f"stream {stream.name!r}")
    say = progress or (lambda _msg: None)
    real = profile_stream(stream)
    real.scalars["recall"] = similarity_recall(stream, budget, candidates=candidates, seed=seed)
    # the profile counts the note versions created by the last query (later ones
    # cannot be asked about): say so beside the stream's own count
    later = len(stream.notes) - real.scalars["n_notes"]
    say(f"real stream: {real.scalars['n_notes']} notes created by the last query"
        + (f" (of {len(stream.notes)} note versions)" if later else "")
        + f", {real.scalars['n_queries']} queries, "
        f"similarity-only recall {real.scalars['recall']:.3f}")
    dim = stream.embedding_dim or 64
    dim = int(dim) if dim <= 256 else 64
    table = _base_table(real, dim)
    fitted = {k: "measured" for k in table}
    notes: list[str] = []
    grid = pd.DataFrame(columns=["evergreen_query_share", "lifetime_median_days", "ks"])
    if real.classes is not None:
        table["classes"] = _known_classes(real)
        fitted["classes"] = "counted per note_class (shares, query shares, sizes)"
    else:
        u = real.scalars["never_relevant_share"]
        table["classes"] = _class_table(real, distractor=0.0, evergreen_w=0.5, lifetime=30.0)
        d = _distractor_share(table, real, 0.5, 30.0, u, seed)
        rows = []
        best = (math.inf, 0.5, 30.0)
        for w in AGE_GRID_SHARES:
            for m in (AGE_GRID_LIFETIMES if w < 1.0 else AGE_GRID_LIFETIMES[:1]):
                t = {**table, "classes": _class_table(real, distractor=d, evergreen_w=w,
                                                      lifetime=m)}
                st = _workload(_small(t, search_queries)).generate(seed)
                k = ks_statistic(real.relevant_ages, _relevant_ages(st))
                rows.append((w, m if w < 1.0 else math.nan, k))
                if k < best[0]:
                    best = (k, w, m)
        grid = pd.DataFrame(rows, columns=["evergreen_query_share", "lifetime_median_days", "ks"])
        _, w, m = best
        d = _distractor_share(table, real, w, m, u, seed)
        table["classes"] = _class_table(real, distractor=d, evergreen_w=w, lifetime=m)
        fitted["classes"] = (f"evergreen query share {w:g} and project lifetime {m:g} d (age "
                             f"grid, KS {best[0]:.3f}); distractor share {d:.3f} (never-relevant "
                             "share); superseding from updates")
        say(f"age grid: evergreen share {w:g}, project lifetime {m:g} d, KS {best[0]:.3f}")

    target = real.scalars["recall"]
    search: list[tuple[float, float]] = []

    def recall_at(noise: float) -> float:
        t = {**_small(table, search_queries), "retriever_noise": noise}
        r = similarity_recall(_workload(t).generate(seed), budget, candidates=candidates,
                              seed=seed)
        search.append((noise, r))
        say(f"noise {noise:.3f}: recall {r:.3f} (target {target:.3f})")
        return r

    lo, hi = NOISE_RANGE
    if not math.isfinite(target):
        noise = 1.35
        notes.append("the real stream has no answerable query: retriever_noise left at 1.35")
    else:
        r_lo, r_hi = recall_at(lo), recall_at(hi)
        if target >= r_lo:
            noise = lo
            notes.append(f"similarity-only recall {target:.3f} is at or above what noise 0 gives "
                         f"({r_lo:.3f}): the budget and store, not similarity, limit recall; "
                         "slot_weight cannot raise it")
        elif target <= r_hi:
            noise = hi
            notes.append(f"similarity-only recall {target:.3f} is below what noise {hi:g} gives "
                         f"({r_hi:.3f})")
        else:
            for _ in range(steps):
                mid = 0.5 * (lo + hi)
                if recall_at(mid) > target:
                    lo = mid
                else:
                    hi = mid
            # interpolate inside the last bracket
            rl = [r for n, r in search if n == lo][-1]
            rh = [r for n, r in search if n == hi][-1]
            noise = lo if rl == rh else lo + (hi - lo) * (rl - target) / (rl - rh)
    table["retriever_noise"] = float(noise)
    fitted["retriever_noise"] = (f"bisection on similarity-only recall within {budget} tokens, "
                                 f"{len(search)} small streams of at most {search_queries} "
                                 "queries, one seed")
    wl = _workload(table)
    # checked on the stream twin.toml's first replicate replays, so that
    # `memsim run twin.toml --set experiment.replicates=1` gives its recall
    check = experiment_from_dict(_experiment_table(wl, seed, budget, candidates))
    twin_stream = load_stream_for(check, 0)
    syn = profile_stream(twin_stream)
    syn.scalars["recall"] = similarity_recall(twin_stream, budget, candidates=candidates,
                                              seed=check.seed)
    say(f"twin (replicate 0 of twin.toml): recall {syn.scalars['recall']:.3f}")
    if int(real.tokens.min(initial=MIN_TOKENS)) < MIN_TOKENS:
        notes.append(f"the generator clips sizes to [{MIN_TOKENS}, {MAX_TOKENS}] tokens; the "
                     f"real stream has notes of {int(real.tokens.min())} tokens")
    if real.scalars["answerable_share"] < 0.99:
        notes.append(f"{1 - real.scalars['answerable_share']:.0%} of the real queries have no "
                     "relevant note; the generator asks about a note whenever one is askable")
    if "namespace" in stream.notes.columns:
        notes.append("the real stream has namespaces (separate stores); the twin is one store, "
                     "so the fitted noise also absorbs the larger store")
    miss = syn.scalars["recall"] - real.scalars["recall"]
    if abs(miss) > RECALL_TOLERANCE:
        notes.append(f"the twin's recall misses the real one by {miss:+.3f}, more than the "
                     f"{RECALL_TOLERANCE:g} the fit aims at: one replicate's recall varies with "
                     "its seed (the noise was fitted on small streams of one seed); run "
                     "twin.toml's replicates to see the spread")
    never = syn.scalars["never_relevant_share"] - real.scalars["never_relevant_share"]
    if real.classes is None and abs(never) > NEVER_TOLERANCE:
        notes.append(f"the twin's share of notes never relevant misses the real one by "
                     f"{never:+.3f}")
    return Twin(workload=wl, real=real, synthetic=syn,
                noise_search=pd.DataFrame(search, columns=["retriever_noise", "recall"]),
                age_grid=grid, fitted=fitted, budget=int(budget), seed=int(seed),
                source=stream.name, notes=notes, candidates=int(candidates))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------


def _twin_experiment(twin: Twin) -> dict:
    return _experiment_table(twin.workload, twin.seed, twin.budget, twin.candidates)


def _experiment_table(workload: SyntheticWorkload, seed: int, budget: int, candidates: int
                      ) -> dict:
    """``twin.toml``: the twin's workload and the similarity-only preset, its
    seed the fit's + 1 (a stream the fit did not search on)."""
    return {
        "experiment": {"name": "twin", "seed": seed + 1, "replicates": 3,
                       "budget_tokens": int(budget), "candidates": int(candidates)},
        "workload": workload.to_config(),
        "policies": {_POLICY: {"preset": _POLICY}},
    }


def _ecdf(ax, x: np.ndarray, label: str, color: str, log: bool = False) -> None:
    x = np.sort(np.asarray(x, dtype=np.float64))
    if x.size == 0:
        return
    if log:
        x = np.maximum(x, 1e-3)
    ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=f"{label} (n={x.size})",
            color=color)
    if log:
        ax.set_xscale("log")


def twin_figures(twin: Twin) -> dict[str, Any]:
    """The report's figures (matplotlib Figures by name): ECDFs of token sizes,
    relevant-note ages and query times (real and twin, KS in the title), the
    query rate over time and the noise search."""
    from matplotlib.figure import Figure

    ks = twin.ks()
    figs: dict[str, Any] = {}
    for name, attr, xlabel, log in (
            ("tokens", "tokens", "tokens per note", True),
            ("relevant_ages", "relevant_ages", "age of a relevant note at its query (days)", True),
            ("query_times", "query_times", "query time (days since the first query)", False)):
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.add_subplot()
        _ecdf(ax, getattr(twin.real, attr), "real", "#1f77b4", log)
        _ecdf(ax, getattr(twin.synthetic, attr), "twin", "#d62728", log)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("cumulative share")
        ax.set_title(f"{xlabel.split(' (')[0]}: KS = {_f3(ks[name])}")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # an empty sample draws no line
            ax.legend(fontsize=9)
        figs[name] = fig
    # query rate over time
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.add_subplot()
    horizon = twin.real.scalars["horizon_days"]
    bins = np.linspace(0.0, horizon, min(40, max(5, int(horizon))) + 1)
    width = bins[1] - bins[0]
    for prof, label, color in ((twin.real, "real", "#1f77b4"),
                               (twin.synthetic, "twin", "#d62728")):
        h, _ = np.histogram(prof.query_times, bins=bins)
        ax.step(bins[:-1], h / width, where="post", label=label, color=color)
    ax.set_xlabel("days since the first query")
    ax.set_ylabel("queries per day")
    ax.set_title("Query rate over time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    figs["query_rate"] = fig
    if len(twin.noise_search):
        fig = Figure(figsize=(6.4, 3.6), layout="constrained")
        ax = fig.add_subplot()
        ns = twin.noise_search.sort_values("retriever_noise")
        ax.plot(ns["retriever_noise"], ns["recall"], "o-", color="0.4", label="search streams")
        ax.axhline(twin.real.scalars["recall"], color="#1f77b4", ls="--", label="real stream")
        ax.axvline(twin.workload.retriever_noise, color="#d62728", ls=":", label="fitted noise")
        ax.set_xlabel("retriever_noise")
        ax.set_ylabel(f"similarity-only recall ({twin.budget} tokens)")
        ax.set_title("Fitting the noise")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
        figs["noise_search"] = fig
    return figs


def _f3(x: float, fmt: str = ".3f") -> str:
    """``x`` to three decimals, ``n/a`` when undefined (NaN, infinite)."""
    return format(x, fmt) if math.isfinite(x) else "n/a"


def _md_table(df: pd.DataFrame) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, (float, np.floating)):
            return "n/a" if not math.isfinite(v) else f"{v:.4g}"
        return str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def report_markdown(twin: Twin) -> str:
    """The twin's report as markdown (figures under ``figures/``)."""
    ks = twin.ks()
    r, s = twin.real.scalars["recall"], twin.synthetic.scalars["recall"]
    lines = [
        f"# Synthetic twin of {twin.source}",
        "",
        f"Similarity-only recall within {twin.budget} tokens: real {_f3(r)}, twin {_f3(s)} "
        f"(difference {_f3(s - r, '+.3f')}; the twin on the stream of replicate 0 of `twin.toml`, "
        f"seed {twin.seed + 1}: `memsim run twin.toml --set experiment.replicates=1` gives it; "
        "its other replicates draw other streams).",
        f"Two-sample KS statistics, real against twin: token sizes {_f3(ks['tokens'])}, "
        f"ages of relevant notes at query time {_f3(ks['relevant_ages'])}, query times "
        f"{_f3(ks['query_times'])} (0 = identical distributions, 1 = disjoint).",
        "",
        "`twin.toml` is a runnable experiment with the fitted `[workload]` and a "
        "similarity-only policy: `memsim run twin.toml`.",
        "",
        "## Real and twin side by side",
        "",
        _md_table(twin.comparison()),
        "",
        "![token sizes](figures/tokens.png)",
        "",
        "![ages of relevant notes](figures/relevant_ages.png)",
        "",
        "![query rate over time](figures/query_rate.png)",
        "",
        "![query times](figures/query_times.png)",
        "",
        "## Fitted knobs",
        "",
        _md_table(pd.DataFrame(
            [(k, json.dumps(twin.workload.to_config().get(k)) if k != "classes" else "see twin.toml",
              v) for k, v in twin.fitted.items()], columns=["knob", "value", "how"])),
        "",
        f"retriever_noise = {twin.workload.retriever_noise:.4g}.",
        "",
    ]
    if len(twin.noise_search):
        lines += ["## Noise search", "", _md_table(twin.noise_search), "",
                  "![noise search](figures/noise_search.png)", ""]
    if len(twin.age_grid):
        lines += ["## Age grid (KS of relevant-note ages)", "", _md_table(twin.age_grid), ""]
    if twin.notes:
        lines += ["## What the twin does not match", ""] + [f"- {n}" for n in twin.notes] + [""]
    return "\n".join(lines)


def write_twin(twin: Twin, out: str | os.PathLike) -> Path:
    """Write ``twin.toml``, ``report.md``, ``profile.json`` and
    ``figures/*.png`` into ``out`` (created; an existing non-empty folder is
    refused).

    Everything is rendered first and written into a hidden folder beside
    ``out`` that is then renamed to ``out``: a failure leaves no ``out``, never
    a half-written one. ``profile.json`` is strict JSON: a measure that is
    undefined (NaN, infinite) is ``null``."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: refusing to overwrite non-empty folder")
    head = (f"# A synthetic twin of {twin.source}, fitted by memsim calibrate workload\n"
            f"# (similarity-only recall within {twin.budget} tokens: real "
            f"{_f3(twin.real.scalars['recall'])}, twin {_f3(twin.synthetic.scalars['recall'])}\n"
            "# on its replicate 0: memsim run twin.toml --set experiment.replicates=1).\n"
            "# Run it with: memsim run twin.toml\n")
    text = head + dumps_toml(_twin_experiment(twin))
    md = report_markdown(twin)
    prof = {"real": twin.real.scalars, "twin": twin.synthetic.scalars, "ks": twin.ks(),
            "budget": twin.budget, "seed": twin.seed, "notes": twin.notes}
    prof_text = json.dumps(jsonable(prof), indent=2, allow_nan=False)
    figs = twin_figures(twin)
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    tmp = out.absolute().parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        (tmp / "figures").mkdir()
        (tmp / "twin.toml").write_text(text, encoding="utf-8")
        for name, fig in figs.items():
            fig.savefig(tmp / "figures" / f"{name}.png", format="png", dpi=110)
        (tmp / "report.md").write_text(md, encoding="utf-8")
        (tmp / "profile.json").write_text(prof_text, encoding="utf-8")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_any_stream(path: str | os.PathLike) -> Stream:
    """A stream folder, a trace (``.jsonl``) or LoCoMo (``.zip``, ``.json``)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such file or folder")
    if p.is_dir():
        return read_stream(p)
    if p.suffix == ".jsonl":
        return import_trace(p)
    if p.suffix in (".zip", ".json"):
        return import_locomo(p)
    raise ConfigError(f"{p}: expected a stream folder, a trace (.jsonl) or LoCoMo (.zip, .json)")


def format_twin(twin: Twin) -> str:
    """A few lines for the console."""
    ks = twin.ks()
    wl = twin.workload
    return "\n".join([
        f"twin of {twin.source}: {wl.notes_per_day:.4g} notes/day over "
        f"{wl.backfill_days:.4g} + {wl.horizon_days:.4g} days, {wl.queries_per_day:.4g} "
        f"queries/day, retriever_noise {wl.retriever_noise:.4g}",
        f"similarity-only recall within {twin.budget} tokens: real "
        f"{_f3(twin.real.scalars['recall'])}, twin {_f3(twin.synthetic.scalars['recall'])}",
        f"KS real vs twin: tokens {_f3(ks['tokens'])}, relevant ages "
        f"{_f3(ks['relevant_ages'])}, query times {_f3(ks['query_times'])}",
    ] + [f"note: {n}" for n in twin.notes])


def calibrate_workload(path: str | os.PathLike, out: str | os.PathLike | None = None, *,
                       budget: int = 1500, seed: int = 0, steps: int = 10,
                       progress: Callable[[str], None] | None = None) -> Twin:
    """``memsim calibrate workload STREAM --out DIR``: load, fit, write.

    A bad ``--budget``, ``--steps`` or ``--seed``, and an ``out`` that is a
    file or a non-empty folder, are refused before anything is loaded or
    fitted; a stream with nothing to fit (no query, or no query with a
    relevant note) is refused, naming ``path``, before anything is fitted or
    written."""
    _check_options(budget, steps, seed, ("--budget", "--steps", "--seed"))
    if out is not None:
        o = Path(out)
        p = file_in_the_way(o)
        if p is not None:
            where = "" if p == o else f" ({p} is a file)"
            raise ConfigError(f"--out {o}: not a folder{where}; give a new or empty folder")
        if o.exists() and any(o.iterdir()):
            raise ConfigError(f"--out {o}: refusing to overwrite non-empty folder")
    stream = load_any_stream(path)
    twin = fit_twin(stream, budget=budget, seed=seed, steps=steps, progress=progress,
                    where=str(path))
    if out is not None:
        write_twin(twin, out)
    return twin
