"""The replay cache: work that replays of one stream share."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.data.stream import Stream
from .inputs import _inputs
from .state import scratch_view

if TYPE_CHECKING:
    from .batch import Batch
    from .inputs import _Inputs


#: the engine's own classes (a batch, its levels) are walked into
_PACKAGE = __name__.rpartition(".")[0] + "."


class ReplayCache:
    """The work replays of the same stream share from one :func:`simulate`
    call to the next: the stream's arrays and each batch's similarity, levels
    and other values shared by its arms (:class:`Batch`), kept up to
    ``max_bytes`` of arrays in all.

    A sweep replays the same replicate streams once per batch of trials;
    only the arms change, so the similarity products and the levels built on
    them are the same every time. The results are those of a replay without
    the cache, bit for bit: a kept batch's values are what it would compute
    again, and those that depend on the arms (the notes every arm evicted)
    are rebuilt when those differ (:meth:`Batch.set_dead`).

    Batches are kept in the order they are first met until the budget is
    spent (the earliest are the smallest); nothing is dropped to make room.
    A batch's dot products are released when its similarities are kept (a
    retriever that needs them again computes them, the same floats), and
    values that are not arrays (an approximate index) are not kept, so that
    :attr:`nbytes` counts everything the batches hold. Entries are keyed by
    the stream object (``is``) and the tick length; the
    :attr:`MAX_STREAMS` used last are kept (a sweep of workload keys
    replays a new stream for every trial).

    Parameters
    ----------
    max_bytes : int
        Bytes of arrays kept, at most, over every stream (0 keeps nothing).
    """

    #: streams (at a tick length) kept, the ones used last
    MAX_STREAMS = 16

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        #: bytes of the arrays kept
        self.nbytes = 0
        self._work: dict[tuple, _StreamWork] = {}

    def work(self, stream: Stream, tick_days: float) -> _StreamWork:
        """What is kept of ``stream`` at ``tick_days``: its arrays (computed
        on first use) and its batches."""
        key = (id(stream), float(tick_days))
        got = self._work.pop(key, None)
        if got is None or got.stream is not stream:
            # the entry holds the stream, so that its id is not reused
            got = _StreamWork(stream, _inputs(stream))
        self._work[key] = got  # the last used, last
        while len(self._work) > self.MAX_STREAMS:
            self.nbytes -= sum(self._work.pop(next(iter(self._work))).sizes.values())
        return got

    def keep(self, work: _StreamWork, bi: tuple[int, int], batch: Batch) -> None:
        """Keep (or measure again) batch ``bi`` (its first query row and its
        number of queries) of ``work`` once its arms are done, while the
        budget allows; a kept batch that outgrows it (the values its later
        arms added) is dropped."""
        # one walk: each cache entry's arrays (an entry that is not only
        # arrays is dropped, its walk undone), then the batch's own
        seen = {id(batch.notes), id(batch.relevance), id(batch.logged)}  # not the batch's
        size = 0
        for key, value in list(batch.cache.items()):
            walked = set(seen)
            got = array_bytes(value, walked)
            if got is None:
                del batch.cache[key]
            else:
                seen, size = walked, size + got
        keys = [k[0] for k in batch.cache if isinstance(k, tuple)]
        if "similarity" in keys and "row" not in keys:
            batch._dots = None  # the similarities are kept and no row holds a view of them
        size += array_bytes(batch, seen)  # the kept entries count 0 there: seen
        total = self.nbytes - work.sizes.pop(bi, 0)
        work.batches.pop(bi, None)
        if total + size <= self.max_bytes:
            work.batches[bi], work.sizes[bi] = batch, size
            total += size
        self.nbytes = total


@dataclass(eq=False)
class _StreamWork:
    """What a :class:`ReplayCache` keeps of one stream: its arrays
    (:class:`_Inputs`) and its batches by (first query row, queries), with
    their bytes."""

    stream: Stream
    inputs: _Inputs
    batches: dict[tuple[int, int], Batch] = field(default_factory=dict)
    sizes: dict[tuple[int, int], int] = field(default_factory=dict)


def array_bytes(x: Any, seen: set[int]) -> int | None:
    """Bytes of the numpy arrays ``x`` holds that own their data (in dicts,
    lists, tuples and object attributes, each counted once; ids in ``seen``
    are left out); None when it holds an object of another kind."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, slice, np.generic, weakref.ref)):
        return 0  # a weak reference: its object is counted where it is held
    if id(x) in seen:
        return 0
    seen.add(id(x))
    if isinstance(x, np.ndarray):
        # a view's data is its base's, counted where the base is held (a
        # batch's views are of its own arrays or of the stream's)
        # (but the engine's reused buffers: a kept array of one is its own)
        return x.nbytes if x.base is None or scratch_view(x) else 0
    if isinstance(x, dict):
        parts = [array_bytes(v, seen) for v in x.values()]
    elif isinstance(x, (list, tuple)):
        parts = [array_bytes(v, seen) for v in x]
    elif hasattr(x, "__dict__") and type(x).__module__.startswith(_PACKAGE):
        parts = [array_bytes(v, seen) for v in vars(x).values()]
    else:
        return None
    return None if None in parts else sum(parts)
