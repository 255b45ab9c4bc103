"""Record a trace from a running application: :class:`TraceWriter`.

A memory layer (or the application around it) calls the writer as it works:
a note stored, changed or deleted, a query asked, what the store returned
for it with the scores, and which of those notes the answer used. The
writer appends one JSON object per event to a JSON Lines file in memsim's
trace format version 1 (:mod:`memsim.data.importers.trace`), which
``memsim stream import trace`` and ``importer = "trace"`` read; the
``as-logged`` preset then replays the recorded rankings beside every other
policy. The adapters of :mod:`memsim.adapters` record from LangChain and
LlamaIndex applications.

Guarantees
----------
- **Append-only**: the file is opened for appending; a writer reopened on a
  trace it wrote continues it (no second header). Each event is one
  ``write`` of one line, flushed at once (a crash loses at most the line
  being written: reopening drops a last line cut short, so that the next
  event starts a line of its own).
- **Thread-safe**: one lock orders the events of all threads; the times
  written never go backwards (``t = max(clock(), last t)``, also across a
  reopening: the last ``t`` of the file is read back), as the format asks; an
  event given its own ``t`` before the last one is refused.
- **Importable**: an event the importer would refuse for its values (NaN or
  infinite numbers, a ``gain`` of 0, a lone surrogate in a text, an integer
  id beyond 64 bits, ``tokens`` or ``budget`` that is not a positive
  integer, a note listed twice in one ``retrieved``) raises
  :class:`ValueError` and writes nothing; numpy integer ids (as vector
  stores return them) are written as integers. So does an ``embedding``
  the importer would refuse: not a non-empty list of finite numbers within
  float32's range, one on a note or query of a trace whose first note or
  query had none, none where it had one (or on an update that gives a new
  ``text``), or another number of dimensions than the first's. The writer
  learns the trace's embeddings from its first note or query, and on
  reopening from the first one of the file (or of its oldest segment).
- **Durable on close**: :meth:`TraceWriter.close` (and leaving the ``with``
  block) flushes and ``fsync``\\ s the file.
- **Rotation by size** (``max_bytes``): when the next line would take the
  file past ``max_bytes``, the file is closed, fsynced and renamed to the
  next free ``<stem>.<n><suffix>`` (``app.1.jsonl``, ``app.2.jsonl``...), and
  a new file is started under the original name with a header that names
  the segment it continues (``"segment"``, ``"continues"``). A trace's events
  refer to notes added in earlier segments, so the segments are imported
  together: :func:`join_segments` writes them as one trace.

Times are the writer's ``clock()`` (default :func:`time.time`, seconds since
1970-01-01 UTC; a test or a simulation passes its own clock), written as
seconds since the header's ``origin``: the whole second of the first reading
(``"origin": "2025-01-01T00:00:01Z"``, ``time_unit = "second"``), so an
imported trace starts near day 0.
"""

from __future__ import annotations

import glob
import json
import math
import numbers
import os
import re
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from memsim.data.importers.trace import (_F32_OVERFLOW, _I64_MAX, _I64_MIN, _TIMED, EVENTS,
                                        TIME_UNITS, TRACE_FORMAT, TRACE_VERSION, iso_days)
from memsim.data.stream import MAX_TOKENS

__all__ = ["TraceWriter", "segments", "join_segments"]


def _plain(value: Any) -> Any:
    """JSON for numpy scalars and arrays (``tolist``) and other number types."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"cannot write a {type(value).__name__} in a trace")


def _integer(value: Any) -> bool:
    """Whether ``value`` is an integer (a numpy integer too), not a boolean."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _ident(value: Any, what: str) -> int | str:
    """An id as the trace writes it: a non-empty string, or an integer within
    64 bits (a numpy integer, as vector stores return ids, is written as
    the int it holds; the importer refuses an integer beyond 64 bits)."""
    if _integer(value):
        value = int(value)
        if not _I64_MIN <= value <= _I64_MAX:
            raise ValueError(f"{what}: an integer id must fit in 64 bits (the importer refuses "
                             f"larger ones), got {value}")
        return value
    if not isinstance(value, str) or value == "":
        raise ValueError(f"{what}: expected an integer or a non-empty string id, got {value!r}")
    return value


def _count(value: Any, what: str) -> int | None:
    """A token count (``tokens``, ``budget``) as the importer reads it: None,
    or a positive integer of at most :data:`MAX_TOKENS` (a numpy integer is
    written as the int it holds)."""
    if value is None:
        return None
    if _integer(value) and 0 < int(value) <= MAX_TOKENS:
        return int(value)
    raise ValueError(f"{what}: expected a positive integer of at most {MAX_TOKENS:,}, "
                     f"got {value!r}")


def _ids(values: Iterable[Any], what: str) -> list:
    return [_ident(v, f"{what}[{i}]") for i, v in enumerate(values)]


def _vector(value: Any, what: str) -> list[float]:
    """An embedding as the importer reads it: a non-empty 1-D sequence of
    finite numbers within float32's range (the stream stores float32),
    written as floats; a text, a boolean or anything else is refused, not
    converted."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):  # (a ragged nesting)
        a = np.asarray([None])
    if a.ndim != 1 or not len(a) or a.dtype.kind not in "iuf":
        raise ValueError(f"{what}: expected a non-empty list of numbers, got "
                         f"{_short(value)}")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (np.abs(a) >= _F32_OVERFLOW)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{what}: item {i} must be a finite number within float32's range "
                         f"(about 3.4e38; the stream stores float32), got {a[i]!r}")
    return a.tolist()


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class TraceWriter:
    """Append memsim trace events (format version 1) to a JSON Lines file.

    Parameters
    ----------
    path : str or PathLike
        The trace file; created with its header if absent or empty, else
        appended to.
    header : dict, optional
        Extra header keys (``name``, ``source``...), written with a new file.
    max_bytes : int, optional
        Rotate when the file would grow past this size (see the module
        docstring); None: never.
    clock : callable, optional
        Seconds since 1970-01-01 UTC; default :func:`time.time`.
    actor : str
        The default ``actor`` of notes and queries (default ``"app"``).

    Examples
    --------
    >>> with TraceWriter("app.jsonl") as w:                    # doctest: +SKIP
    ...     w.note_added("n1", text="Ann moved to Lisbon")
    ...     q = w.query("where does Ann live?")
    ...     w.retrieved(q, ["n1"], scores=[0.83])
    ...     w.used(q, ["n1"])
    """

    def __init__(self, path: str | os.PathLike, *, header: dict | None = None,
                 max_bytes: int | None = None, clock: Callable[[], float] | None = None,
                 actor: str = "app") -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes <= 0):
            raise ValueError(f"max_bytes must be a positive integer or None, got {max_bytes!r}")
        if header is not None and not isinstance(header, dict):
            raise ValueError(f"header must be a dict, got {type(header).__name__}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.actor = actor
        self._clock = clock or time.time
        self._extra = {k: v for k, v in (header or {}).items()
                       if k not in ("event", "format", "version", "time_unit", "origin")}
        self._lock = threading.Lock()
        self._last_t = -math.inf
        #: the dimensions of the trace's embeddings (0: it has none; None:
        #: no note or query yet), as its first note or query has them
        self._dims: int | None = None
        self._segment = 1
        self._origin = float(math.floor(self._now()))  # epoch seconds of t = 0
        self._fh = None
        self._open(continues=None)

    def _now(self) -> float:
        now = float(self._clock())
        if not math.isfinite(now):
            raise ValueError(f"the clock gave {now!r}")
        return now

    # -- the file ----------------------------------------------------------
    def _header(self, continues: str | None) -> dict:
        origin = datetime.fromtimestamp(self._origin, tz=timezone.utc)
        head = {"event": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION,
                "time_unit": "second",
                "origin": origin.isoformat(timespec="seconds").replace("+00:00", "Z"),
                **self._extra}
        if continues is not None:
            head.update(segment=self._segment, continues=continues)
        return head

    def _open(self, continues: str | None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        if not fresh:
            self._check_existing()
        self._fh = open(self.path, "a", encoding="utf-8")
        if fresh:
            self._fh.write(json.dumps(self._header(continues)) + "\n")
            self._fh.flush()

    def _check_existing(self) -> None:
        """Appending: the file must be a trace in seconds (this writer's unit)."""
        with open(self.path, encoding="utf-8") as fh:
            first = fh.readline()
        try:
            head = json.loads(first)
        except json.JSONDecodeError:
            head = None
        origin = head.get("origin") if isinstance(head, dict) else None
        try:
            when = datetime.fromisoformat(origin.replace("Z", "+00:00"))
        except (AttributeError, ValueError):
            when = None
        if when is None or head.get("event") != "header" or head.get("format") != TRACE_FORMAT \
                or head.get("time_unit") != "second":
            raise ValueError(f"{self.path}: not a trace this writer started (its first line is "
                             "not a memsim-trace header with time_unit 'second' and an origin); "
                             "give a new path")
        self._segment = int(head.get("segment", 1))
        self._origin = when.timestamp()
        self._dims = _first_dims(segments(self.path))
        _mend_tail(self.path)
        # continue the file's clock: a clock that reads earlier now (another
        # process, a restarted simulation) must not write times going back
        self._last_t = _last_time(self.path)

    def _rotate(self) -> None:
        self._sync_close()
        n = 1
        while _segment_path(self.path, n).exists():
            n += 1
        done = _segment_path(self.path, n)
        os.replace(self.path, done)
        self._segment = n + 1
        self._open(continues=done.name)

    def _sync_close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def close(self) -> None:
        """Flush, fsync and close (idempotent)."""
        with self._lock:
            self._sync_close()

    @property
    def closed(self) -> bool:
        return self._fh is None or self._fh.closed

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- events ------------------------------------------------------------
    def write(self, event: dict, *, timed: bool = True) -> dict:
        """Append one event (a dict with ``"event"``); ``t`` is added when
        ``timed`` and absent. Returns the event as written."""
        name = event.get("event")
        if name not in EVENTS or name == "header":
            raise ValueError(f"unknown trace event {name!r}; known: {', '.join(EVENTS[1:])}")
        with self._lock:
            if self.closed:
                raise ValueError(f"{self.path}: the trace writer is closed")
            ev = dict(event)
            if name in ("note_added", "query", "note_updated"):
                self._embedded(ev, name)
            t = self._last_t
            if timed and ev.get("t") is None:
                t = ev["t"] = max(self._now() - self._origin, self._last_t)
            elif timed:
                t = ev["t"]
                # (numbers.Real: numpy's floats too)
                if isinstance(t, bool) or not isinstance(t, numbers.Real) \
                        or not math.isfinite(t) or t < self._last_t:
                    raise ValueError(f"{name}: t: expected a finite number of seconds since "
                                     f"the origin, not before the last event's "
                                     f"({self._last_t:g}), got {t!r}")
                t = ev["t"] = float(t)
            data = _line(name, ev)
            if self.max_bytes is not None and self._fh.tell() > 0 and \
                    self._fh.tell() + len(data) > self.max_bytes:
                self._rotate()
            self._fh.write(data.decode("utf-8"))
            self._fh.flush()
            self._last_t = t
            if self._dims is None and name in ("note_added", "query"):
                self._dims = len(ev.get("embedding") or ())
            return ev

    def _embedded(self, ev: dict, what: str) -> None:
        """Check the embedding of ``ev`` (a note or a query) against the
        trace's (its first note or query decides whether it has them, and
        how many dimensions), and make it floats; called by :meth:`write`
        holding the lock, so that the first event's decision is the one
        written."""
        v = ev.get("embedding")
        if v is not None:
            v = ev["embedding"] = _vector(v, f"{what}: embedding")
        dims = self._dims
        if dims is None:  # the first note or query
            return
        if dims == 0 and v is not None:
            raise ValueError(f"{what}: embedding: the trace's first note or query had none: "
                             "give embeddings everywhere or nowhere")
        if dims and v is None and (what != "note_updated" or ev.get("text") is not None):
            raise ValueError(f"{what}: embedding: missing: the trace's first note or query had "
                             "one, so every note and query (and every new text) needs one")
        if v is not None and len(v) != dims:
            raise ValueError(f"{what}: embedding: has {len(v)} dimensions, the trace's first "
                             f"has {dims}")

    def note_added(self, id: int | str, text: str | None = None, *, tokens: int | None = None,
                   actor: str | None = None, embedding: Sequence[float] | None = None,
                   namespace: str | None = None, **fields: Any) -> int | str:
        """A note stored (``text`` or ``tokens``; optional fields as in the
        format: ``tier``, ``type``, ``importance``, ``salience``, ``pinned``,
        ``expires_at``...). Returns the id."""
        if text is None and tokens is None:
            raise ValueError("note_added: give text or tokens")
        tokens = _count(tokens, "note_added: tokens")
        ev = {"event": "note_added", "id": _ident(id, "note_added: id"),
              "actor": actor or self.actor, **_given(text=text, tokens=tokens,
                                                     embedding=embedding, namespace=namespace),
              **fields}
        self.write(ev)
        return ev["id"]

    def note_updated(self, id: int | str, **fields: Any) -> None:
        """A new version of a note (``text``, ``embedding``, ``tier``...)."""
        if fields.get("tokens") is not None:
            fields["tokens"] = _count(fields["tokens"], "note_updated: tokens")
        self.write({"event": "note_updated", "id": _ident(id, "note_updated: id"), **fields})

    def note_deleted(self, id: int | str) -> None:
        self.write({"event": "note_deleted", "id": _ident(id, "note_deleted: id")})

    def query(self, text: str | None = None, *, id: int | str | None = None,
              actor: str | None = None, embedding: Sequence[float] | None = None,
              budget: int | None = None, category: str | int | None = None,
              namespace: str | None = None) -> int | str:
        """A query asked; returns its id (a new random hex id when not given)."""
        if text is None and embedding is None:
            raise ValueError("query: give text or an embedding")
        budget = _count(budget, "query: budget")
        qid = uuid.uuid4().hex if id is None else _ident(id, "query: id")
        self.write({"event": "query", "id": qid, "actor": actor or self.actor,
                    **_given(text=text, embedding=embedding, budget=budget, category=category,
                             namespace=namespace)})
        return qid

    def retrieved(self, query: int | str, notes: Sequence[int | str],
                  scores: Sequence[float] | None = None) -> None:
        """What the store returned for ``query``, best first, with its scores."""
        ids = _ids(notes, "retrieved: notes")
        if len(set(ids)) != len(ids):
            first: dict = {}
            for i, v in enumerate(ids):
                if v in first:
                    raise ValueError(f"retrieved: notes[{i}]: note {v!r} is listed twice "
                                     f"(first at notes[{first[v]}])")
                first[v] = i
        ev: dict[str, Any] = {"event": "retrieved", "query": _ident(query, "retrieved: query"),
                              "notes": ids}
        if scores is not None:
            vals = [math.nan if s is None else float(s) for s in scores]
            if len(vals) != len(ids):
                raise ValueError(f"retrieved: {len(vals)} scores for {len(ids)} notes")
            # a store that gives no score for a note (None / NaN): leave scores out
            if all(math.isfinite(v) for v in vals):
                ev["scores"] = vals
        self.write(ev, timed=False)

    def used(self, query: int | str, notes: Sequence[int | str]) -> None:
        """The notes the answer used (implicit relevance)."""
        self.write({"event": "used", "query": _ident(query, "used: query"),
                    "notes": _ids(notes, "used: notes")}, timed=False)

    def judgement(self, query: int | str, note: int | str, gain: float) -> None:
        """Explicit relevance of one note to one query (non-zero gain)."""
        gain = float(gain)
        if gain == 0 or not math.isfinite(gain):
            raise ValueError(f"judgement: gain: expected a finite non-zero number, got {gain!r}")
        self.write({"event": "judgement", "query": _ident(query, "judgement: query"),
                    "note": _ident(note, "judgement: note"), "gain": gain}, timed=False)

    def accessed(self, note: int | str, actor: str | None = None) -> None:
        """A read of a note outside any query."""
        self.write({"event": "accessed", "note": _ident(note, "accessed: note"),
                    "actor": actor or self.actor})


def _line(name: str, ev: dict) -> bytes:
    """One event as a UTF-8 JSON line; a value no importer reads back (NaN,
    infinity, a lone surrogate) raises ValueError naming its field."""
    try:
        return (json.dumps(ev, default=_plain, ensure_ascii=False, allow_nan=False)
                + "\n").encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        for key, value in ev.items():
            try:
                json.dumps(value, default=_plain, ensure_ascii=False,
                           allow_nan=False).encode("utf-8")
            except (ValueError, UnicodeEncodeError) as exc:
                raise ValueError(f"{name}: {key}: cannot be written in a trace (JSON has no "
                                 f"NaN or Infinity, UTF-8 no lone surrogate): {exc}") from None
        raise


def _last_line_start(fh: Any, end: int) -> int:
    """The offset where the last line of an open binary file starts (0: the
    file is one line), found by reading backwards in blocks."""
    pos, block = end, 1 << 16
    while pos > 0:
        step = min(pos, block)
        pos -= step
        fh.seek(pos)
        cut = fh.read(step).rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1
    return 0


def _mend_tail(path: Path) -> None:
    """Make a trace end with a newline before appending: a last line without
    one is either a whole event (a hand-written file: the newline is added)
    or a line cut short by a crash, which is dropped (else the next event
    would be glued to it and both would be lost)."""
    with open(path, "rb+") as fh:
        end = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, end - 1))
        if end == 0 or fh.read(1) == b"\n":
            return
        start = _last_line_start(fh, end)
        fh.seek(start)
        try:
            json.loads(fh.read())
        except ValueError:
            fh.truncate(start)
        else:
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")


def _last_time(path: Path) -> float:
    """The ``t`` of the last timed event of a trace file (-inf: none), read
    backwards from its end in blocks (a long trace is not read whole); a
    last line cut short by a crash is skipped."""
    block = 1 << 16
    with open(path, "rb") as fh:
        pos = fh.seek(0, os.SEEK_END)
        partial = b""
        while pos > 0:
            step = min(pos, block)
            pos -= step
            fh.seek(pos)
            pieces = (fh.read(step) + partial).split(b"\n")
            # the first piece may be the end of a line that starts further back
            partial = pieces[0] if pos > 0 else b""
            for raw in reversed(pieces if pos == 0 else pieces[1:]):
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                t = ev.get("t") if isinstance(ev, dict) and ev.get("event") in _TIMED else None
                if not isinstance(t, bool) and isinstance(t, (int, float)) and math.isfinite(t):
                    return float(t)
    return -math.inf


def _first_dims(files: list[Path]) -> int | None:
    """The dimensions of the embedding of the first note or query of the
    trace ``files`` (a trace's segments, oldest first): 0 when it has
    none, None when there is no note or query yet. Read from the start,
    line by line, up to that event."""
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"note_added"' not in line and '"query"' not in line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if isinstance(ev, dict) and ev.get("event") in ("note_added", "query"):
                    v = ev.get("embedding")
                    return len(v) if isinstance(v, list) else 0
    return None


def _given(**kw: Any) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def _segment_path(path: Path, n: int) -> Path:
    return path.with_name(f"{path.stem}.{n}{path.suffix}")


def segments(path: str | os.PathLike) -> list[Path]:
    """The files of a rotated trace, oldest first: ``<stem>.1<suffix>``,
    ``<stem>.2<suffix>``... then ``path`` itself (when it exists)."""
    p = Path(path)
    pattern = re.compile(re.escape(p.stem) + r"\.(\d+)" + re.escape(p.suffix) + "$")
    # (glob.escape: a name holding [ or * is matched as it is written)
    found = p.parent.glob(f"{glob.escape(p.stem)}.*{glob.escape(p.suffix)}")
    numbered = sorted((int(m.group(1)), f) for f in found if (m := pattern.match(f.name)))
    return [f for _, f in numbered] + ([p] if p.exists() else [])


def _clock_of(head: dict | None) -> tuple[float, float] | None:
    """``(origin, unit)`` of a segment's header in days since 1970 and days
    per unit (the importer's defaults without a header); None when the
    header's ``origin`` or ``time_unit`` cannot be read (the importer then
    reports it)."""
    head = head or {}
    unit = head.get("time_unit", "day")
    origin = head.get("origin", "1970-01-01T00:00:00Z")
    if not isinstance(unit, str) or unit not in TIME_UNITS or not isinstance(origin, str):
        return None
    try:
        return iso_days(origin), TIME_UNITS[unit]
    except ValueError:
        return None


def _rebased(line: str, src: tuple[float, float], dest: tuple[float, float]) -> str:
    """``line`` with its numeric times (``t``, ``expires_at``) moved from the
    clock ``src`` to ``dest`` (``(origin, unit)`` as :func:`_clock_of`)."""
    try:
        ev = json.loads(line)
    except ValueError:
        return line  # (the importer reports the line)
    if not isinstance(ev, dict):
        return line
    for key in ("t", "expires_at"):
        v = ev.get(key)
        if not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v):
            ev[key] = (src[0] + v * src[1] - dest[0]) / dest[1]
    return json.dumps(ev, ensure_ascii=False) + "\n"


def join_segments(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the segments of a rotated trace as one trace file ``out``.

    The first segment's header is kept (without its segment keys), the
    later segments' headers are dropped, every other line is copied in
    order. A segment whose header has another ``origin`` or ``time_unit``
    than the first's (a writer started afresh beside earlier segments) has
    its numeric times (``t``, ``expires_at``) converted to the first one's,
    so that they keep their meaning. ``out`` is written to a temporary name
    and renamed.
    """
    files = segments(path)
    if not files:
        raise FileNotFoundError(f"no trace at {path}")
    dest = Path(out)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            first: tuple[float, float] | None = None
            for i, f in enumerate(files):
                with open(f, encoding="utf-8") as src:
                    clock: tuple[float, float] | None = None
                    for j, line in enumerate(src):
                        if j == 0:
                            head = None
                            if line.startswith("{") and '"header"' in line:
                                head = json.loads(line)
                                head = head if head.get("event") == "header" else None
                            clock = _clock_of(head)
                            if i == 0:
                                first = clock
                            elif clock == first or clock is None or first is None:
                                clock = None  # the same clock: lines copied as they are
                            if head is not None:
                                if i == 0:
                                    head.pop("segment", None)
                                    head.pop("continues", None)
                                    fh.write(json.dumps(head) + "\n")
                                continue
                        fh.write(_rebased(line, clock, first) if i and clock is not None
                                 else line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest
