"""The stream's notes as arrays, and each arm's mutable state of them."""

from __future__ import annotations

import dataclasses
import sys
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from memsim.core.errors import ConfigError
from memsim.evaluation.metrics import supersession_times
from memsim.data.planted import PlantedModel
from memsim.policies.context import MEMORY_TYPE_CODES, TIER_CODES, origin_order
from memsim.data.stream import Stream


class Scratch:
    """Memory reused for a replay's (Q, L) batch matrices (similarity,
    validity): at a million notes a fresh one is tens of thousands of page
    faults, paid again every batch (half the CPU time went to the kernel);
    these buffers are allocated once and handed out again once no array
    made from them is alive (every view of one holds it, so its reference
    count says so). A buffer still held (a batch a :class:`ReplayCache`
    keeps) is left to its holder and another taken.

    Each buffer remembers the byte it holds but where it was handed out to
    be written, so that :meth:`filled_except` (:meth:`zeros_except`)
    resets only those bytes the new array needs filled: a product whose
    blocks of evicted notes are skipped (most of the store under an
    evicting retention) writes its few open blocks and clears only the last
    use's; the validity matrix rewrites only the columns of notes created
    or expiring during its batch.
    """

    #: buffers kept, at most
    KEEP = 8
    #: room for growth of a new buffer (the store grows between batches, and
    #: a batch's queries vary): only the pages written are ever resident
    HEADROOM = 2.0
    #: below this many bytes, a plain new array (numpy's own cache serves it)
    SMALL = 1 << 20

    def __init__(self) -> None:
        self._raw: list[np.ndarray] = []
        #: per buffer (same order): its tag, and the byte intervals (K, 2),
        #: sorted and disjoint, that may hold non-zero bytes
        self._tag: list[str] = []
        self._dirty: list[np.ndarray] = []
        #: per buffer: the byte every byte not dirty holds
        self._byte: list[int] = []

    def empty(self, shape: tuple[int, ...], dtype, tag: str = "") -> np.ndarray:
        """An uninitialised array (C order), like :func:`numpy.empty`."""
        dtype = np.dtype(dtype)
        need = int(np.prod(shape)) * dtype.itemsize
        if need < self.SMALL:
            return np.empty(shape, dtype=dtype)
        i = self._take(need, tag)
        self._dirty[i] = np.concatenate([[[0, need]], _clip(self._dirty[i], need)])
        return self._raw[i][:need].view(dtype).reshape(shape)

    def zeros_except(self, shape: tuple[int, ...], dtype, written: np.ndarray,
                     tag: str = "") -> np.ndarray:
        """An array (C order) of zeros but at the flat element intervals
        ``written`` ((K, 2) [start, stop), sorted and disjoint), which the
        caller writes (they are left uninitialised)."""
        return self.filled_except(shape, dtype, 0, written, tag)

    def filled_except(self, shape: tuple[int, ...], dtype, value, written: np.ndarray,
                      tag: str = "") -> np.ndarray:
        """An array (C order) holding ``value`` (one repeated byte: 0, or
        True for bool) but at the flat element intervals ``written`` ((K,
        2) [start, stop), sorted and disjoint), which the caller writes
        (they are left uninitialised)."""
        dtype = np.dtype(dtype)
        byte = np.zeros(1, dtype=dtype)
        byte[0] = value
        byte = byte.view(np.uint8)
        if (byte != byte[0]).any():
            raise ValueError(f"{value!r} is not one repeated byte as {dtype}")
        byte = int(byte[0])
        need = int(np.prod(shape)) * dtype.itemsize
        if need < self.SMALL:
            return np.full(shape, value, dtype=dtype)
        i = self._take(need, tag)
        raw = self._raw[i]
        written = np.asarray(written, dtype=np.int64).reshape(-1, 2) * dtype.itemsize
        if self._byte[i] != byte:  # another value: every byte anew, the rest unknown
            self._byte[i] = byte
            self._dirty[i] = np.array([[0, raw.nbytes]], dtype=np.int64)
        old = self._dirty[i]
        for a, z in _subtract(old[old[:, 0] < need], written).tolist():
            raw[a:min(z, need)] = byte
        self._dirty[i] = np.concatenate([written, _clip(old, need)])
        return raw[:need].view(dtype).reshape(shape)

    def _take(self, need: int, tag: str) -> int:
        """A free buffer of ``need`` bytes or more (of ``tag`` first, the
        smallest), else a new one (zeros)."""
        fits = [i for i in range(len(self._raw)) if self._free(i)
                and self._raw[i].nbytes >= need]
        if fits:
            return min(fits, key=lambda i: (self._tag[i] != tag, self._raw[i].nbytes))
        raw = np.zeros(int(need * self.HEADROOM), dtype=np.uint8)
        _SCRATCH[id(raw)] = raw
        self._raw.append(raw)
        self._tag.append(tag)
        self._dirty.append(np.zeros((0, 2), dtype=np.int64))
        self._byte.append(0)
        # over the count: first those others hold (theirs now), then the
        # smallest free ones
        drop = sorted(range(len(self._raw) - 1),
                      key=lambda i: (self._free(i), self._raw[i].nbytes))
        for i in sorted(drop[:max(0, len(self._raw) - self.KEEP)], reverse=True):
            del self._raw[i], self._tag[i], self._dirty[i], self._byte[i]
        return len(self._raw) - 1

    def _free(self, i: int) -> bool:
        # the list's reference and the argument's only: no array of it alive
        return sys.getrefcount(self._raw[i]) <= 2


def _clip(intervals: np.ndarray, start: int) -> np.ndarray:
    """The parts of ``intervals`` (K, 2) at or after ``start``."""
    keep = intervals[intervals[:, 1] > start].copy()
    keep[:, 0] = np.maximum(keep[:, 0], start)
    return keep


def _subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The intervals ``a`` less ``b`` (each (K, 2) [start, stop), sorted and
    disjoint): the parts of ``a`` no interval of ``b`` covers."""
    out = []
    b = b.tolist()
    j, nb = 0, len(b)
    for s, e in a.tolist():
        while j < nb and b[j][1] <= s:
            j += 1
        k = j
        while s < e and k < nb and b[k][0] < e:
            if b[k][0] > s:
                out.append((s, b[k][0]))
            s = max(s, b[k][1])
            k += 1
        if s < e:
            out.append((s, e))
    return np.array(out, dtype=np.int64).reshape(-1, 2)


#: every buffer of a :class:`Scratch`, weakly, by id (:func:`scratch_view`)
_SCRATCH: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def scratch_view(x: np.ndarray) -> bool:
    """Whether ``x`` is an array handed out by a :class:`Scratch` (or a view
    of one): its data are not its base's alone to count."""
    return x.base is not None and _SCRATCH.get(id(x.base)) is x.base


@dataclass(frozen=True, eq=False)
class NoteArrays:
    """Column arrays of the stream's notes, in ``note_id`` order (row i = note i)."""

    note_id: np.ndarray
    created_at: np.ndarray
    updated_at: np.ndarray
    tokens: np.ndarray
    importance: np.ndarray
    salience: np.ndarray
    pinned: np.ndarray
    memory_type: np.ndarray
    tier0: np.ndarray
    expires_at: np.ndarray
    actor: np.ndarray
    emb: np.ndarray
    norm2: np.ndarray
    #: optional store partition: a query only sees notes of its own namespace
    namespace: np.ndarray | None = None
    #: the stream's ``note_class`` column (the class a generator planted each
    #: note in, as text) as each note's index into :attr:`note_class_texts`
    #: (int32: a text object per note would take 60 bytes), and the
    #: generator's config (the stream's ``meta["config"]`` when memsim
    #: generated it), for the planted model
    note_class_rows: np.ndarray | None = None
    note_class_texts: tuple = ()
    workload_config: dict | None = None
    #: when a newer note superseded each note (NaN = never): ground truth
    #: for the invalidation retention and the superseded-use curve
    superseded_at: np.ndarray | None = None
    #: each scaled retriever's note factors (:meth:`dot_scale`), by name
    _scales: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    #: memory reused for the replay's batch matrices
    scratch: Scratch = dataclasses.field(default_factory=Scratch, init=False, repr=False)

    def dot_scale(self, retriever) -> np.ndarray | None:
        """``retriever.dot_scale`` of every note's squared norm (N,), computed
        once per replay (None for a retriever whose similarity is not a
        scaled dot product). Elementwise: a batch's columns are the factors
        the retriever would compute for them alone."""
        key = similarity_key(retriever)
        if key not in self._scales:
            self._scales[key] = retriever.dot_scale(self.norm2)
        return self._scales[key]

    @cached_property
    def default_salience(self) -> bool:
        """Whether every note has the default salience (1): a decay's
        :meth:`~memsim.policies.base.Decay.lower_bound` then holds for
        every note, whatever the decay reads."""
        return bool(np.all(self.salience == 1.0))

    @cached_property
    def planted(self) -> PlantedModel | None:
        """The stream's planted model (:mod:`memsim.data.planted`), built on first
        use; None when the stream was not generated by memsim."""
        if self.workload_config is None:
            return None
        return PlantedModel.from_config(self.workload_config)

    @cached_property
    def note_class(self) -> np.ndarray | None:
        """Each note's planted class as the planted model codes it (an index
        into its ``class_names``; -1 for another text), read on first use;
        None without a ``note_class`` column or a planted model."""
        if self.note_class_rows is None or self.planted is None:
            return None
        codes = {c: i for i, c in enumerate(self.planted.class_names)}
        return _distinct_codes(self.note_class_texts, codes)[self.note_class_rows]

    @classmethod
    def from_stream(cls, stream: Stream, actor_codes: dict[str, int],
                    namespace_codes: dict[str, int] | None = None) -> NoteArrays:
        n = stream.notes
        if stream.note_embeddings is None or stream.query_embeddings is None:
            raise ConfigError(
                f"stream {stream.name!r} has no embeddings: the engine needs note and "
                "query vectors (embed a trace's text when importing it: memsim stream "
                "import trace FILE --embedder bm25, or [workload] source with importer "
                "and embedder)"
            )
        emb = np.ascontiguousarray(stream.note_embeddings, dtype=np.float32)
        updated = n["updated_at"].to_numpy(np.float64) if "updated_at" in n else n[
            "created_at"].to_numpy(np.float64)
        expires = n["expires_at"].to_numpy(np.float64)
        return cls(
            note_id=n["note_id"].to_numpy(np.int64),
            created_at=n["created_at"].to_numpy(np.float64),
            updated_at=updated,
            tokens=n["tokens"].to_numpy(np.int64),
            importance=n["importance"].to_numpy(np.float64),
            salience=n["salience"].to_numpy(np.float64),
            pinned=n["pinned"].to_numpy(bool),
            memory_type=text_codes(n["memory_type"], MEMORY_TYPE_CODES,
                               MEMORY_TYPE_CODES["other"]).astype(np.int8),
            tier0=text_codes(n["tier"], TIER_CODES, TIER_CODES["task"]).astype(np.int8),
            # NaN = never expires; inf keeps the comparisons simple
            expires_at=np.where(np.isnan(expires), np.inf, expires),
            actor=text_codes(n["actor"], actor_codes),
            emb=emb,
            norm2=np.einsum("ij,ij->i", emb, emb, dtype=np.float64),
            namespace=None if namespace_codes is None else text_codes(n["namespace"], namespace_codes),
            **_factorized("note_class", n),
            workload_config=(stream.meta.get("config")
                             if stream.meta.get("source") == "memsim.data.workload" else None),
            superseded_at=supersession_times(n),
        )

    @cached_property
    def _in_creation_order(self) -> tuple[bool, bool, np.ndarray]:
        """Whether the rows are in creation order, whether some note
        expires, and every row (read-only), for :meth:`existing`."""
        c = self.created_at
        rows = np.arange(len(c))
        rows.flags.writeable = False
        return bool(np.all(c[1:] >= c[:-1])), bool(np.isfinite(self.expires_at).any()), rows

    @property
    def creation_ordered(self) -> bool:
        """Whether the rows are in creation order (``created_at`` non-decreasing)."""
        return self._in_creation_order[0]

    def existing(self, tmin: float, tmax: float) -> tuple[np.ndarray, slice | np.ndarray]:
        """The rows of the notes created by ``tmax`` and not expired by
        ``tmin`` (ascending), and the same rows as a slice when they are
        consecutive (else the rows again). With the rows in creation order
        and no note expiring, a prefix found by bisection (a batch of a
        ten-million-note store would otherwise make three passes over it)."""
        ordered, expiring, every = self._in_creation_order
        if ordered and not expiring:
            k = int(np.searchsorted(self.created_at, tmax, side="right"))
            return every[:k], slice(0, k)
        idx = np.flatnonzero((self.created_at <= tmax) & (self.expires_at > tmin))
        n = len(idx)
        consecutive = n and int(idx[-1]) - int(idx[0]) + 1 == n
        return idx, slice(int(idx[0]), int(idx[0]) + n) if consecutive else idx

    def changing(self, rows: slice | np.ndarray, tmin: float, tmax: float) -> np.ndarray:
        """Positions among ``rows`` of the notes created after ``tmin`` or
        expiring by ``tmax``: valid for some of a batch's queries only."""
        ordered, expiring, _ = self._in_creation_order
        if ordered and not expiring and isinstance(rows, slice) and rows.start == 0:
            # the notes created after tmin: the end of the prefix
            j = int(np.searchsorted(self.created_at[rows], tmin, side="right"))
            return np.arange(j, rows.stop)
        return np.flatnonzero((self.created_at[rows] > tmin) | (self.expires_at[rows] <= tmax))

    def take(self, rows: np.ndarray) -> NoteArrays:
        """The notes ``rows`` as arrays of their own (row k is note
        ``rows[k]``)."""
        n = len(self.note_id)
        return dataclasses.replace(self, **{
            f.name: v[rows] for f in dataclasses.fields(self)
            if isinstance(v := getattr(self, f.name), np.ndarray) and len(v) == n})


def _factorized(name: str, notes: pd.DataFrame) -> dict[str, Any]:
    """The column ``name`` of ``notes`` (when there) as ``{name}_rows``, each
    row's index into ``{name}_texts``, its distinct values."""
    if name not in notes:
        return {}
    rows, distinct = pd.factorize(notes[name], use_na_sentinel=False)
    return {f"{name}_rows": rows.astype(np.int32), f"{name}_texts": tuple(distinct)}


def superseded(notes: NoteArrays) -> np.ndarray:
    """Each note's supersession time (NaN = never; all NaN when unknown)."""
    if notes.superseded_at is None:
        return np.full(len(notes.note_id), np.nan)
    return notes.superseded_at


def text_codes(values: pd.Series, codes: dict[str, int], default: int = -1) -> np.ndarray:
    """Integer code of each value as text (``str``; a missing value reads
    ``"nan"``), ``default`` for a text not in ``codes``: one lookup per
    distinct value."""
    rows, distinct = pd.factorize(values, use_na_sentinel=False)
    return _distinct_codes(distinct, codes, default)[rows]


def _distinct_codes(distinct, codes: dict[str, int], default: int = -1) -> np.ndarray:
    """The code of each distinct value as text (:func:`text_codes`)."""
    return np.array([codes.get(_text(v), default) for v in distinct], dtype=np.int64)


def distinct_texts(values: pd.Series) -> set[str]:
    """The distinct values as :func:`text_codes` reads them."""
    return {_text(v) for v in pd.factorize(values, use_na_sentinel=False)[1]}


def _text(value: Any) -> str:
    """A value as text, ``"nan"`` for a missing one (None, NaN, NA)."""
    return "nan" if pd.isna(value) else str(value)


class PolicyState:
    """Mutable per-arm state of every note: uses, last access, actors, tier,
    eviction, and the ranker's own per-note columns. Arrays are indexed by
    note row."""

    def __init__(self, notes: NoteArrays, n_actors: int):
        n = len(notes.note_id)
        self.recalls = np.zeros(n, dtype=np.int64)
        self.last_access = np.full(n, np.nan)
        self.tier = notes.tier0.copy()
        self.evicted = np.zeros(n, dtype=bool)
        self.evicted_at = np.full(n, np.nan)
        #: when an invalidating retention invalidated the note (NaN = never):
        #: it is evicted too, and kept for audit
        self.invalid_at = np.full(n, np.nan)
        self._words = max(1, (n_actors + 63) // 64)
        self.actor_bits = np.zeros((n, self._words), dtype=np.uint64)
        #: the last counted use of each (note, actor), or (note, -1) for a
        #: cooldown per note (``Feedback.cooldown_per``)
        self._last_bump: dict[tuple[int, int], float] = {}
        #: the notes' creation times (a cooldown that also runs from creation)
        self._created = notes.created_at
        #: the ranker's per-note columns (``Ranker.note_columns``), made at
        #: its first retrieval call (:meth:`update_note_state`)
        self.note_state: dict[str, np.ndarray] = {}
        #: (origins, the permutation that sorts them) of the last
        #: :meth:`access_order`: the next one places again only what moved
        self._access_order: tuple[np.ndarray, np.ndarray] | None = None
        #: :meth:`uses_by_time`: the used notes sorted by their last use when
        #: first asked (None until then), and the rows used since
        self._used_sorted: tuple[np.ndarray, np.ndarray] | None = None
        self._used_since: list[np.ndarray] = []
        self._used_since_n = 0
        #: pruning: notes per query to score first (learnt from the last
        #: batch), and whether this arm's components turned out to read what
        #: gathered cells lack (then neither pruning nor the per-query
        #: rescoring of used notes scores cells: both score whole rows)
        self.prune_level = 0
        #: the last batch had a query whose top C only the similarity filter
        #: proved cheaply: the next one filters after its first level
        self.prune_filter = False
        self.prune_off = False
        #: batches left to score in full before pruning again, and how many
        #: the last batch whose pruning did not pay set (``pruning._judge``)
        self.prune_rest = 0
        self.prune_wait = 0
        #: the ``"minmax"`` accelerator: the newest-origin band's width and
        #: about how many notes by u a row needs (each row's first guess),
        #: and the rows since they were chosen
        self.minmax_guess: tuple[int, float, int] | None = None
        #: (arm, query) answers each accelerator gave (its name -> count)
        self.accelerated: Counter[str] = Counter()
        #: what the arm's scoring cost: ``"cells"`` (query, note) cells
        #: scored, ``"packed-levels"`` levels packed to its live notes,
        #: ``"packed-together"`` queries packed in one array with other arms,
        #: ``"rescored"`` queries the walk scored again in full
        self.work: Counter[str] = Counter()

    def gather(self, rows: np.ndarray, bumps: tuple[np.ndarray, np.ndarray] | None = None
               ) -> PolicyState:
        """The state of the notes ``rows`` as a state of its own (row k is
        note ``rows[k]``), to record what-if uses without touching this one.
        ``bumps``: (row k, actor) pairs whose last counted use (the feedback's
        cooldown) is carried over."""
        own = PolicyState.__new__(PolicyState)
        own.__dict__.update(self.__dict__)
        for name in ("recalls", "last_access", "tier", "evicted", "evicted_at", "invalid_at",
                     "actor_bits"):
            setattr(own, name, getattr(self, name)[rows])
        own.note_state = {k: v[rows] for k, v in self.note_state.items()}
        own._used_sorted, own._used_since, own._used_since_n = None, [], 0
        own._created = self._created[rows]
        own._last_bump = {}
        if bumps is not None:
            for k, a in set(zip(*(x.tolist() for x in bumps))):
                for who in (a, -1):  # (a cooldown per note keeps its use under -1)
                    prev = self._last_bump.get((int(rows[k]), who))
                    if prev is not None:
                        own._last_bump[(k, who)] = prev
        return own

    def access_order(self, origin: np.ndarray) -> np.ndarray | None:
        """A permutation that sorts ``origin``, the times some notes' ages
        since last use count from (:func:`memsim.policies.context.origin_order`),
        from the order this state gave last (a query's uses move a few
        notes)."""
        order = origin_order(origin, self._access_order)
        if order is not None:  # new arrays each time: a gathered state shares the tuple
            self._access_order = (origin, order)
        return order

    def uses_by_time(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The notes used so far, for finding those last used before or
        after a time without a pass over every note: ``(rows, times,
        since)``, ``rows`` the notes used when the list was made, sorted by
        their last use then (``times``, ascending), and ``since`` the rows
        used after (any order, repeats allowed). A last use only moves
        later (:meth:`touch`), so a note's last use now is at least its
        listed time, and a note whose last use moved is in ``since``. The
        list is made again once ``since`` grows past an eighth of it."""
        if self._used_sorted is None or self._used_since_n > max(256, len(self._used_sorted[0]) // 8):
            rows = np.flatnonzero(~np.isnan(self.last_access))
            times = self.last_access[rows]
            order = np.argsort(times, kind="stable")
            self._used_sorted = (rows[order], times[order])
            self._used_since, self._used_since_n = [], 0
        since = (np.concatenate(self._used_since) if self._used_since
                 else np.zeros(0, dtype=np.int64))
        return *self._used_sorted, since

    def distinct_actors(self, idx: np.ndarray) -> np.ndarray:
        """Number of distinct actors that used each note of ``idx``."""
        return np.bitwise_count(self.actor_bits[idx]).sum(axis=1).astype(np.int64)

    def touch(self, rows: np.ndarray, actors: np.ndarray, t: np.ndarray, feedback) -> None:
        """Record uses: ``rows[i]`` used by ``actors[i]`` at time ``t[i]``."""
        if len(rows) == 0:
            return
        if feedback.cooldown_s > 0:
            rows, actors, t = self._apply_cooldown(rows, actors, t, feedback)
            if len(rows) == 0:
                return
        np.add.at(self.recalls, rows, 1)
        # each used note's latest use: the largest of its uses' times and
        # its last access before (NaN: none), whatever the order of the uses
        np.fmax.at(self.last_access, rows, np.asarray(t, dtype=np.float64))
        if self._used_sorted is not None:  # uses_by_time's list: these moved
            self._used_since.append(np.asarray(rows, dtype=np.int64))
            self._used_since_n += len(rows)
        word, bit = np.divmod(actors, 64)
        np.bitwise_or.at(self.actor_bits, (rows, word), np.left_shift(np.uint64(1),
                                                                     bit.astype(np.uint64)))
        if feedback.promote_after > 0:
            self.tier[rows[self.recalls[rows] >= feedback.promote_after]] = TIER_CODES["longterm"]

    def update_note_state(self, ranker, ctx) -> None:
        """After a retrieval call scored on ``ctx`` (its ``live`` set, the
        call's uses not yet recorded): set the ranker's per-note columns
        (``Ranker.note_columns``) of ``ctx.idx`` from its
        ``update_note_state``. Nothing for a ranker that keeps none."""
        if not ranker.note_columns:
            return
        n = len(self.recalls)
        for name, initial in ranker.note_columns.items():
            if name not in self.note_state:
                self.note_state[name] = np.full(n, float(initial))
        idx = ctx.idx
        new = ranker.update_note_state(ctx, {k: v[idx] for k, v in self.note_state.items()})
        for name in ranker.note_columns:
            self.note_state[name][idx] = np.asarray(new[name], dtype=np.float64)

    def _apply_cooldown(self, rows, actors, t, feedback):
        # At most one use per (note, actor), or per note, per cooldown
        # (Feedback.cooldown_per), counted from the last use kept and, with
        # cooldown_from_creation, from the note's creation: a Python loop
        # over the uses of one batch (not over the store), in time order.
        # A use counts from cooldown_s less half a microsecond on: times a
        # whole number of seconds apart, as days, differ from it by a float's
        # rounding, which must not refuse a use exactly on time.
        cooldown = (feedback.cooldown_s - 5e-7) / 86400.0
        per_actor = feedback.cooldown_per == "note-actor"
        created = self._created if feedback.cooldown_from_creation else None
        order = np.argsort(t, kind="stable")
        keep = np.zeros(len(rows), dtype=bool)
        last = self._last_bump
        # (Python scalars: numpy's, element by element, cost several times more)
        rl, al, tl = rows.tolist(), np.asarray(actors).tolist(), np.asarray(t).tolist()
        for i in order.tolist():
            key = (rl[i], al[i] if per_actor else -1)
            prev = last.get(key)
            if prev is None and created is not None:
                prev = float(created[rl[i]])
            if prev is None or tl[i] - prev >= cooldown:
                last[key] = tl[i]
                keep[i] = True
        return rows[keep], actors[keep], t[keep]


def similarity_key(retriever) -> str:
    """What the values computed from ``retriever``'s similarity are shared
    under (across the arms of a batch, and the replays of a replay cache):
    its name and every parameter but ``prefilter``, which chooses
    candidates, not values. Two retrievers of one kind with other
    parameters compute other similarities; arms whose retrievers differ by
    their prefilter alone share one."""
    params = {k: v for k, v in retriever.params().items() if k != "prefilter"}
    if not params:
        return retriever.name
    return f"{retriever.name}({', '.join(f'{k}={params[k]!r}' for k in sorted(params))})"
