"""Arm jobs: an arm's work on a batch, packed and measured together with others."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.evaluation.metrics import (HIDDEN_REASONS, RelevanceIndex, hidden_counts, in_oracle,
                                       query_metrics, stale_reinforced)
from memsim.policies.base import ComponentOutputError
from .context import BatchContext, cell_similarity
from .uses import _used_candidates

if TYPE_CHECKING:
    from .batch import Batch
    from .settings import Arm, SimSettings
    from .state import PolicyState


@dataclass(eq=False)
class _ArmJob:
    """One arm's work on one batch."""

    arm: Arm
    st: PolicyState
    rng: np.random.Generator
    batch: Batch
    budget: np.ndarray
    settings: SimSettings
    reader: Any
    oracle: np.ndarray
    relevance: RelevanceIndex
    #: the accelerators on (:data:`~memsim.engine.settings.ACCELERATORS`)
    accelerators: tuple[str, ...] = ()
    #: queries the ``"walk"`` accelerator corrects at once, to start with
    walk_window: int = 64
    #: the oracle's packed set (:func:`memsim.evaluation.metrics.oracle_packing`
    #: keys; none by default)
    oracle_keys: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def c(self) -> int:
        p = self.arm.policy
        return self.settings.candidates if p.candidates is None else p.candidates

    def row(self, i: int) -> _ArmJob:
        """The same work for query ``i`` of the batch alone."""
        r = slice(i, i + 1)
        return dataclasses.replace(self, batch=self.batch.row(i), budget=self.budget[r],
                                   oracle=self.oracle[r])


@dataclass(eq=False)
class _Packed:
    """An arm's candidates (Q, C') and what it packs of them."""

    pos: np.ndarray
    vals: np.ndarray
    cand_ok: np.ndarray
    cand_rows: np.ndarray
    tokens: np.ndarray
    gains: np.ndarray
    packed: np.ndarray
    position: np.ndarray


def _pack(job: _ArmJob, batch: Batch, pos: np.ndarray, vals: np.ndarray,
          rows: slice | np.ndarray = slice(None)) -> _Packed:
    """Pack the candidates ``pos``/``vals`` of the queries ``rows`` of ``batch``."""
    return _pack_all([(job, batch, pos, vals, rows)])[0]


def _pack_all(items: list[tuple]) -> list[_Packed]:
    """:func:`_pack` of several arms' candidates, ``(job, batch, pos, vals,
    rows)`` each. Arms that pack alike (the same packer, orderer and C) pack
    as one array, a row per (arm, query): packers and orderers treat rows
    independently, so each row gets what it gets alone."""
    cand = []
    groups: dict[tuple, list[int]] = {}
    for i, (job, batch, pos, vals, rows) in enumerate(items):
        policy = job.arm.policy
        cand_ok = np.isfinite(vals)
        if np.count_nonzero(vals == np.inf):
            raise _infinite_score(job, batch, rows, vals)
        cand_rows = batch.idx[pos]
        gains = job.relevance.lookup(batch.qrows[rows], cand_rows)
        cand.append({"cand_ok": cand_ok, "cand_rows": cand_rows,
                     "tokens": batch.notes.tokens[cand_rows], "gains": gains,
                     "values": gains if policy.ranker.needs_truth else vals,
                     "budget": job.budget[rows]})
        if getattr(policy.packer, "needs_similarity", False):
            cand[-1]["similarity"] = _candidate_similarity(job, batch, pos, rows)
        groups.setdefault((_key(policy.packer), _key(policy.orderer), pos.shape[1]),
                          []).append(i)
    out: list[_Packed] = [None] * len(items)  # type: ignore[list-item]
    for members in groups.values():
        policy = items[members[0]][0].arm.policy
        sim = getattr(policy.packer, "needs_similarity", False)
        got = _rows_of_all([cand[i] for i in members], ("cand_ok", "tokens", "values", "budget")
                           + (("similarity",) if sim else ()))
        ok, values = got["cand_ok"], got["values"]
        extra = {"similarity": np.where(ok, got["similarity"], 0.0)} if sim else {}
        packed = np.asarray(policy.packer.pack(np.where(ok, values, 0.0), got["tokens"], ok,
                                               got["budget"], **extra), dtype=bool)
        packed &= ok
        position = policy.orderer.order(np.where(ok, values, -np.inf), packed)
        together = len({id(items[i][0].st) for i in members}) > 1  # other arms' rows
        for i, sl in zip(members, _row_blocks([cand[i]["cand_ok"] for i in members])):
            if together:
                items[i][0].st.work["packed-together"] += sl.stop - sl.start
            c = cand[i]
            out[i] = _Packed(items[i][2], items[i][3], c["cand_ok"], c["cand_rows"], c["tokens"],
                             c["gains"], packed[sl], position[sl])
    return out


def _infinite_score(job: _ArmJob, batch: Batch, rows: slice | np.ndarray,
                    vals: np.ndarray) -> ComponentOutputError:
    """The error of an arm whose candidates include a score of +inf: it
    would rank first and could not be packed (values are added up). Read on
    each query's C best, where a +inf among its live notes always is."""
    r = int(np.flatnonzero((vals == np.inf).any(axis=1))[0])
    q = int(np.arange(len(batch.qrows))[rows][r])
    policy = job.arm.policy
    ranker = type(policy.ranker)
    detail = (f"arm {job.arm.policy_name!r} scored a note +inf for the query at "
              f"t = {float(batch.t[q]):g} (query row {int(batch.qrows[q])}): a score is a "
              "number, or -inf or NaN (never a candidate); "
              "+inf cannot be packed (the ranker's combine(), times the breadth's "
              "on_score())")
    return ComponentOutputError(f"ranker {ranker.name!r} ({ranker.__qualname__}): {detail}",
                                check="combine", detail=detail)


def _key(component: Any) -> Any:
    """A key equal for components of equal parameters: the component itself
    when hashable (a frozen dataclass compares by its fields, cheaper than
    its repr), else its repr."""
    return repr(component) if type(component).__hash__ is None else component


def _candidate_similarity(job: _ArmJob, batch: Batch, pos: np.ndarray,
                          rows: slice | np.ndarray) -> np.ndarray:
    """The retriever's similarity (Q', C) of the candidates ``pos`` of the
    queries ``rows``, for a packer that cuts on similarity
    (``Packer.needs_similarity``): the batch's shared similarity matrix, the
    same floats the scores were computed from."""
    sim = np.asarray(BatchContext(batch, job.st, job.rng).similarity(job.arm.policy.retriever))
    r = np.arange(len(sim))[rows]
    # the cells alone, then float64 (exact from float32): not whole rows
    return sim[r[:, None], np.clip(pos, 0, sim.shape[1] - 1)].astype(np.float64)


def _rows_of_all(parts: list[dict], names) -> dict[str, np.ndarray]:
    """The arrays ``names`` of several arms' rows, one below the other."""
    if len(parts) == 1:
        return {k: parts[0][k] for k in names}
    return {k: np.concatenate([p[k] for p in parts]) for k in names}


def _row_blocks(arrays: list[np.ndarray]) -> list[slice]:
    """The row slices of ``arrays`` stacked one below the other."""
    ends = np.cumsum([len(a) for a in arrays]).tolist()
    return [slice(e - len(a), e) for e, a in zip(ends, arrays)]


#: the arrays query_metrics reads of each arm's packed batch (the rest:
#: the batch's ``t`` and ``qrows``, the arm's ``budget`` and ``oracle``)
_PACKED_METRIC_INPUTS = ("cand_rows", "cand_ok", "packed", "position", "gains", "tokens")


def _outputs(job: _ArmJob, batch: Batch, pk: _Packed) -> dict[str, Any]:
    """The per-query metrics (and rankings) of a packed batch."""
    return _outputs_all([(job, batch, pk)])[0]


def _outputs_all(items: list[tuple]) -> list[dict[str, Any]]:
    """:func:`_outputs` of several arms' packed batches, ``(job, batch, pk)``
    each: the metrics of arms with the same C are computed as one array, a
    row per (arm, query) (every metric is per query)."""
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(item[2].pos.shape[1], []).append(i)
    metrics: list[dict] = [None] * len(items)  # type: ignore[list-item]
    for members in groups.values():
        parts = []
        for i in members:
            job, batch, pk = items[i]
            part = {name: getattr(pk, name) for name in _PACKED_METRIC_INPUTS}
            part.update(t=batch.t, qrows=batch.qrows, budget=job.budget, oracle=job.oracle)
            parts.append(part)
        blocks = _row_blocks([p["t"] for p in parts])
        job = items[members[0]][0]
        m = query_metrics(**_rows_of_all(parts, list(parts[0])), relevance=job.relevance,
                          evicted=[(sl, items[i][0].st.evicted) for i, sl in zip(members, blocks)],
                          reader=job.reader)
        for i, sl in zip(members, blocks):
            metrics[i] = {k: v[sl] for k, v in m.items()} if len(members) > 1 else m
    out = []
    for (job, batch, pk), m in zip(items, metrics):
        m["actor_code"] = batch.actors
        hidden = _reinforced_and_hidden(job, batch, pk, m)
        one: dict[str, Any] = {"metrics": m}
        if job.settings.save_rankings:
            q, cc = pk.pos.shape
            keep = pk.cand_ok.ravel()
            one["rankings"] = {
                "query_id": np.repeat(job.relevance.query_ids[batch.qrows], cc)[keep],
                "rank": np.tile(np.arange(1, cc + 1), q)[keep],
                "note_id": batch.notes.note_id[pk.cand_rows].ravel()[keep],
                "score": pk.vals.ravel()[keep],
                "packed": pk.packed.ravel()[keep],
                "position": pk.position.ravel()[keep],
            }
            _hidden_rankings(one["rankings"], job, batch, pk, keep, hidden,
                             rows=job.settings.save_rankings == "hidden")
        out.append(one)
    return out


def _reinforced_and_hidden(job: _ArmJob, batch: Batch, pk: _Packed, m: dict) -> tuple:
    """Add ``stale_reinforced``, ``oracle_notes`` and the ``hidden_*``
    columns (:mod:`memsim.evaluation.metrics`) to the metrics ``m`` of one arm's packed
    batch; return the hidden notes ``(q, note row, reason)``."""
    policy, st = job.arm.policy, job.st
    m["stale_reinforced"] = stale_reinforced(_used_candidates(policy.feedback, pk), pk.gains)
    counts, hidden = hidden_counts(
        qrows=batch.qrows, t=batch.t, cand_rows=pk.cand_rows, cand_ok=pk.cand_ok,
        packed=pk.packed, relevance=job.relevance, oracle_keys=job.oracle_keys,
        invalid_at=st.invalid_at, evicted=st.evicted,
        expires_at=batch.notes.expires_at, similarity=cell_similarity(policy, batch))
    m.update(counts)
    return hidden


def _hidden_rankings(r: dict, job: _ArmJob, batch: Batch, pk: _Packed, keep: np.ndarray,
                     hidden: tuple, rows: bool) -> None:
    """Add the rankings' ``oracle`` and ``hidden`` columns and, with
    ``rows``, a row (rank -1, score NaN) for each note the oracle packed
    that is not among the policy's top C, with the reason it is hidden."""
    q, cc = pk.pos.shape
    oracle = in_oracle(job.relevance, np.repeat(batch.qrows, cc)[keep],
                       pk.cand_rows.ravel()[keep], job.oracle_keys)
    r["oracle"] = oracle
    # text, not objects: a column with no row then has the type its labels give it
    r["hidden"] = np.where(oracle & ~r["packed"], "budget", "")
    if not rows:
        return
    hq, hrow, reason = hidden
    out = reason != HIDDEN_REASONS.index("budget")
    hq, hrow, reason = hq[out], hrow[out], reason[out]
    k = len(hq)
    extra = {"query_id": job.relevance.query_ids[batch.qrows[hq]],
             "rank": np.full(k, -1, dtype=r["rank"].dtype),
             "note_id": batch.notes.note_id[hrow], "score": np.full(k, np.nan),
             "packed": np.zeros(k, dtype=bool), "position": np.full(k, -1, r["position"].dtype),
             "oracle": np.ones(k, dtype=bool),
             "hidden": np.asarray(HIDDEN_REASONS, dtype=str)[reason]}
    for col, v in extra.items():
        r[col] = np.concatenate([r[col], v])


def _stacked(parts: list[_Packed]) -> _Packed:
    """One batch's packing from its queries' (widths padded with
    non-candidates)."""
    w = max(p.pos.shape[1] for p in parts)
    fills = {"pos": 0, "vals": -np.inf, "cand_ok": False, "cand_rows": 0, "tokens": 0,
             "gains": 0.0, "packed": False, "position": -1}

    def stack(name: str) -> np.ndarray:
        arrays = [getattr(p, name) for p in parts]
        out = np.full((len(arrays), w), fills[name], dtype=arrays[0].dtype)
        for i, a in enumerate(arrays):  # a loop over the batch's queries
            out[i, :a.shape[1]] = a[0]
        return out

    return _Packed(**{name: stack(name) for name in fills})
