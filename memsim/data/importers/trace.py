"""Your own memory log: a production trace of a memory layer, imported as a stream.

A *trace* is what a running memory layer can log about itself: notes written,
changed and deleted, queries asked, what the system returned for each query,
and which of those notes the answer used. :func:`import_trace` turns it into
a memsim stream (``docs/contracts/stream.md``), so that every policy can be replayed
on your own workload and compared with what runs today (the ``as-logged``
preset replays the logged rankings).

Trace format, version 1
=======================

JSON Lines (UTF-8, a byte order mark allowed): one JSON object per line;
empty lines are skipped. A line that is not UTF-8 (a file saved as UTF-16),
a key given twice in one object (JSON parsers keep one value, silently) and
a text holding a lone UTF-16 surrogate (``"\\ud800"`` without its pair) are
refused at their line. Every object has ``"event"``, one of the names below.
Ids (``id``, ``query``, ``note``, ``notes``) are integers or strings; two ids
that print the same (``7`` and ``"7"``) are refused where the second is added
or logged (the stream keeps renumbered ids as text, where they would be one).
An integer written as a float (``7.0``: an id, ``tokens``, ``budget``, a
``category`` or the header's ``version``) is read as that integer below
2**53 in magnitude and refused from there (such a float may already be
another integer than the one written). Number fields (``importance``,
``salience``, ``scores``, ``gain``, times, embedding values) take any finite
number, ``1e19`` and ``1e308`` included (a whole-valued float is a float
there); an integer written as one (no decimal point or exponent) must fit 64
bits in every field. Times (``t``,
``expires_at``) are numbers in the header's ``time_unit`` since its
``origin``, or ISO 8601 strings in the extended calendar form
(:data:`ISO_TIME_PATTERN`): ``YYYY-MM-DD``, optionally ``T`` (or a space)
and ``hh``, ``hh:mm``, ``hh:mm:ss`` or ``hh:mm:ss.f``, then optionally ``Z``
or an offset ``+hh``, ``+hh:mm`` or ``+hhmm`` (``"2025-03-01T12:00:00Z"``;
without a zone they are read as UTC), which are converted to the same scale.
Other ISO forms (basic ``20250302T000000Z``, week ``2025-W09-6``, ordinal
``2025-060``, an offset without a time) are refused, as dates that do not
exist are. memsim's clock is in days. An optional field of an event given as
``null`` is the same as the field left out; a required field may not be
``null`` (nor may the header's fields): one left out is refused as missing,
one given as ``null`` naming null.

``header`` (optional; only as the first non-empty line)
    ``format`` = ``"memsim-trace"``; ``version`` = 1 (a newer version is
    refused); ``time_unit``: ``"day"`` (default), ``"hour"``, ``"minute"``,
    ``"second"`` or ``"millisecond"``, or their plurals (``"days"`` ...);
    ``origin``: the ISO time that numbers count from (default
    ``1970-01-01T00:00:00Z``); ``ordered`` (bool, default true: see below);
    ``name``, ``source`` and any other key go to the stream's ``meta``
    (``stream.json``: a NaN or Infinity in them is refused at the header's
    line).

``note_added``
    ``id`` (unique), ``t``, ``actor`` (str), and ``tokens`` (int > 0, at most
    2**40 as in a stream) or ``text`` (str) or both (``tokens`` defaults to
    ``ceil(len(text) / 4)``). Optional: ``embedding`` (list of numbers within
    float32's range, about 3.4e38: the stream holds float32), ``tier`` (str,
    default ``"task"``), ``type`` (memory type, default ``"episodic"``),
    ``importance`` and ``salience`` (numbers >= 0, default 1), ``pinned``
    (bool), ``expires_at`` (time), ``namespace`` (str: a separate store, e.g.
    one per user; a query only sees notes of its own namespace),
    ``supersedes`` (the id of an earlier note, or a list of ids, that this
    note makes wrong: unlike ``note_updated``, the older note stays in the
    store; its live version gets ``superseded_at`` = this note's ``t``, the
    truth that supersession detectors are scored against).

``note_updated``
    ``id`` (an added note), ``t``, and any of the optional fields of
    ``note_added`` plus ``text``, ``tokens`` and ``actor``. The update is a
    new *version* of the note: the live version expires at ``t`` and a new
    row, created at ``t``, takes every field not given from it
    (``first_created_at`` keeps the note's original creation time,
    ``version`` counts from 0). A new ``text`` without ``tokens`` counts
    them again (``ceil(len(text) / 4)``); with embeddings in the trace, an
    update that changes ``text`` must give a new ``embedding``. The note's
    own text given again is no change (its ``tokens`` and embedding stay).
    ``namespace`` moves the new version (and the later ones) to that store; ``supersedes`` marks the
    notes it names wrong from ``t``, as on ``note_added`` (not the updated
    note itself: refused). A note is live while ``t < expires_at``: an update
    at or after its ``expires_at`` is refused, as that of a deleted note (an
    expired note is gone); deleting it stays allowed.

``note_deleted``
    ``id``, ``t``: the live version expires at ``t``; no event may name the
    note afterwards except ``retrieved``, ``used`` and ``judgement`` of
    earlier queries (logged before the delete; a line of a TREC qrels file
    counts as a ``judgement``): any other is refused at its line.

``query``
    ``id`` (unique), ``t``, ``actor``, and ``text`` or ``embedding`` (as
    the notes). Optional: ``budget`` (int > 0, at most 2**40: the token
    budget the system had), ``category`` (str or int: a tag to group results
    by, kept in the ``category`` column), ``namespace``.

``retrieved``
    ``query``, ``notes`` (list of note ids, best first: what the production
    system returned), optional ``scores`` (numbers, one per note). At most
    one per query; no note twice. Written to the stream's optional
    ``retrieved`` table (``query_id``, ``rank`` from 1, ``note_id``,
    ``score``, NaN when not logged).

``used``
    ``query``, ``notes``: the notes the answer cited or the user kept
    (implicit relevance). Several events for one query add up; a note used
    twice counts once.

``judgement``
    ``query``, ``note``, ``gain`` (a non-zero number; negative = misleading):
    explicit relevance. At most one per (query, note).

``accessed``
    ``note``, ``t``, ``actor``: an organic read outside any query (the
    stream's ``accesses`` table).

Every event that names a note or a query must come after the line that
added it, and the times ``t`` of the events must not go backwards from one
line to the next. A header with ``"ordered": false`` says the file is not in
time order: the importer then reads every event first (the whole file in
memory) and handles them sorted by time, stably: ``retrieved``, ``used``
and ``judgement`` events, which have no time (a ``t`` key on them is an
unknown key, ignored), at their query's time after the timed events of that
time; events of one time keep their file order;
errors still name the event's own line (an event that names a note or query
added at a later time says at which line). A time further than
:data:`MAX_ABS_DAYS` (1,000,000 days) from the origin is refused (a unit or
origin mistake), and so is an integer beyond 64 bits anywhere, and an empty
trace (no ``note_added`` and no ``query`` event). Unknown keys are ignored
(logs carry more than memsim reads).

The format of one line is published as a JSON Schema (draft 2020-12),
``memsim/schemas/trace-v1.json`` (:data:`SCHEMA_PATH`); the rules across
lines above are the importer's. :func:`check_trace` (``memsim stream check
trace FILE``) lists every error of a file, both kinds, without writing
anything.

How the stream is built
-----------------------
- **qrels** come from ``judgement`` events (and the non-zero grades of a TREC
  qrels file, ``import_trace(path, qrels=FILE)``: ``QUERY ITERATION NOTE
  GRADE`` a line, with the trace's ids; UTF-8, a byte order mark allowed)
  when the trace has any or a qrels file is given (one that grades every
  pair 0 judges no note relevant), else from ``used`` events (gain 1), else
  there are none; ``stream.json`` says which
  in ``"qrels_from"`` (``"judgement"``, ``"used"`` or ``"none"``). A note
  id named by a query's ``retrieved``, ``used`` or ``judgement`` event means
  the version of the note live at the query's time (its first version if the
  query came before the note).
- **ids**: when every note id is an integer and no note was updated, the
  stream's ``note_id`` is the logged id; otherwise notes are numbered from 0
  in the order their versions appear. Queries likewise (integer ids kept,
  else numbered in file order). When the ids are renumbered, the logged id
  is kept as text in ``trace_id`` (one text per logged id: ``7`` and ``"7"``
  are refused).
- **embeddings**: from the trace when the first note or query carries one
  (then every note and query must, with one dimension); otherwise exact BM25
  vectors over ``text`` (:func:`memsim.data.lexical.bm25_embeddings`, per
  namespace), as the LoCoMo importer does, and every note and query needs
  ``text``. ``embedder=`` (``[workload] embedder``, ``--embedder``) chooses:
  ``"vectors"`` (the logged ones, required), ``"bm25"`` or ``"wordllama"``
  (computed from ``text``, :mod:`memsim.data.embed`). Dense BM25 vectors take
  ``(notes + queries) * (vocabulary + 1) * 4`` bytes: for large logs, log the
  embeddings.
- **columns** besides the documented ones: notes ``first_created_at``,
  ``version``, and ``trace_id``, ``namespace`` as said, and ``superseded_at``
  (NaN = never) when any note names ``supersedes``; queries
  ``category`` (``""`` when untagged), ``text`` (when any query has one),
  ``trace_id``, ``namespace`` (when any event has one).

Errors: a malformed line raises :class:`~memsim.core.errors.StreamError` with one
message naming the file, the line (from 1) and the field, e.g.
``trace.jsonl: line 17: field 'tokens': must be a positive integer, got 0``.

Memory: the file is read line by line; each column is appended to a compact
``array`` (8 bytes a number) or a list of strings, and no event object is
kept; the frames handed to validation reuse those arrays (no copy), with
ids as int32 where they fit, strings as categoricals and all-default
optional columns left out. Measured on a generated trace of 2 million events with 16-dimension
embeddings: see README, "Your own memory log".
"""

from __future__ import annotations

import json
import math
import os
import re
from array import array
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from memsim.data.embed import TEXT_EMBEDDERS, check_embedder, embed_texts
from memsim.core.errors import StreamError
from memsim.data.stream import MAX_TOKENS, Stream, make_stream, write_stream
from memsim.data.workload import planted_superseded_at

__all__ = ["import_trace", "cli_import_trace", "check_trace", "write_trace", "TRACE_FORMAT",
           "TRACE_VERSION", "EVENTS", "TIME_UNITS", "MAX_ABS_DAYS", "SCHEMA_PATH",
           "ISO_TIME_PATTERN"]

TRACE_FORMAT = "memsim-trace"
TRACE_VERSION = 1
#: Event names of trace format version 1.
EVENTS = ("header", "note_added", "note_updated", "note_deleted", "query", "retrieved", "used",
          "judgement", "accessed")
#: The events that have a time ``t`` (the others take their query's time: a
#: ``t`` key on them is an unknown key, ignored).
_TIMED = frozenset(("note_added", "note_updated", "note_deleted", "query", "accessed"))
#: Units a header may give for numeric times, in days (singular or plural).
TIME_UNITS = {"day": 1.0, "hour": 1.0 / 24.0, "minute": 1.0 / 1440.0,
              "second": 1.0 / 86400.0, "millisecond": 1.0 / 86_400_000.0}
TIME_UNITS.update({f"{unit}s": days for unit, days in list(TIME_UNITS.items())})
#: A time further than this from the origin (about 2,700 years) is a unit or
#: origin mistake (epoch seconds read as days), not a date: refused.
MAX_ABS_DAYS = 1e6
#: The published JSON Schema of one trace line (format version 1).
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "trace-v1.json"
#: The ISO 8601 times a trace may give (the schema's ``$defs.iso_time`` pattern,
#: the same string): the extended calendar form, ``YYYY-MM-DD``, optionally
#: ``T`` (or a space) and ``hh``, ``hh:mm``, ``hh:mm:ss`` or ``hh:mm:ss.f...``,
#: then optionally ``Z`` or an offset ``+hh``, ``+hh:mm`` or ``+hhmm``.
#: ``datetime.fromisoformat`` reads more (basic and week forms) and misreads
#: a date with an offset but no time as a time of day: the importer checks
#: this pattern first, so that it and the schema accept the same strings.
ISO_TIME_PATTERN = (r"^\s*[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
                    r"([T ]([01][0-9]|2[0-3])(:[0-5][0-9](:[0-5][0-9](\.[0-9]+)?)?)?"
                    r"(Z|[+-]([01][0-9]|2[0-3])(:?[0-5][0-9])?)?)?\s*$")
_ISO_TIME = re.compile(ISO_TIME_PATTERN)
#: A number as a TREC qrels file writes a grade (ASCII digits, no "_").
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_I64_MIN, _I64_MAX = -(2 ** 63), 2 ** 63 - 1
#: From this magnitude on a float does not hold every integer (2**53 + 1 reads
#: as 2**53): an id or a count written as such a float may not be the one meant.
_FLOAT_EXACT_INT = 2.0 ** 53
#: The smallest magnitude that rounds to infinity as float32 (the largest
#: float32 plus half its last step): the stream stores embeddings as float32.
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The messages of a required field left out and of one given as null (the
#: importer's and the schema check's alike).
MISSING = "required field is missing"
NULL_REQUIRED = "required field may not be null, got null"
#: What a time is (the schema's ``$defs.time`` description, the same string).
_TIME = ("a finite number (in the header's time_unit since its origin) or an ISO 8601 time "
         "(YYYY-MM-DD, optionally Thh:mm:ss and Z or +hh:mm; without a zone: UTC)")


def iso_days(text: str) -> float:
    """Days since 1970 of an ISO 8601 time as the format reads it (``Z`` for
    UTC; a time without a zone is UTC). Raises :class:`ValueError` for text
    ``datetime.fromisoformat`` cannot read (the importer checks the
    schema's pattern first)."""
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (when - _EPOCH).total_seconds() / 86400.0


class _Codes:
    """Strings interned to small integer codes (actors, tiers, namespaces...)."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.names: list[str] = []

    def __call__(self, name: str) -> int:
        c = self.code.get(name)
        if c is None:
            c = self.code[name] = len(self.names)
            self.names.append(name)
        return c

    def categorical(self, codes: array) -> pd.Categorical | np.ndarray:
        """The codes as a Categorical (1 to 4 bytes a row instead of a text
        column); validation reads it back as the same strings."""
        if not len(codes):
            return self.decode(codes)
        return pd.Categorical.from_codes(np.frombuffer(codes, dtype=np.int32),
                                         categories=pd.Index(self.names, dtype=object))

    def decode(self, codes: array) -> np.ndarray:
        return np.asarray(self.names, dtype=object)[np.frombuffer(codes, dtype=np.int32)] \
            if len(codes) else np.zeros(0, dtype=object)


class _Reader:
    """Reads a trace line by line into column arrays."""

    def __init__(self, label: str):
        self.label = label
        # a table given for a trace: said when its first line cannot be read
        self.hint = (" (a trace is JSON Lines, one JSON object a line; CSV and Parquet "
                     "tables go in a stream folder: docs/contracts/stream.md)"
                     if Path(label).suffix.lower() in (".csv", ".tsv", ".parquet") else "")
        self.line = 0
        self.unit = 1.0
        self.unit_name = "day"  # the header's time_unit, as written
        #: a TREC qrels file was read: its judgements are the qrels, even
        #: when it judges nothing relevant (not the used events)
        self.qrels_file = False
        self.origin_days = 0.0
        self.meta: dict[str, Any] = {}
        self.has_emb: bool | None = None
        self.dim = 0
        self.emb_line = 0
        # interned strings
        self.actors, self.tiers, self.types = _Codes(), _Codes(), _Codes()
        self.spaces, self.categories = _Codes(), _Codes()
        self.any_namespace = False
        # notes: one row per version
        self.note_key: dict[Any, int] = {}       # logged id -> note key
        self.note_ids: list = []                 # key -> logged id
        self.live_row = array("q")               # key -> row of its live version
        self.deleted = bytearray()               # key -> deleted flag
        # deleted key -> (queries logged before the delete, its line): only
        # those queries' retrieved / used / judgement events may name it
        self.deleted_by: dict[int, tuple[int, int]] = {}
        self.first_row = array("q")              # key -> row of version 0
        self.n_created = array("d")              # row -> created_at
        self.n_line = array("q")                 # row -> the line of its version
        self.n_first = array("d")                # row -> first_created_at
        self.n_tokens = array("q")
        self.n_actor, self.n_tier, self.n_type, self.n_space = (array("i") for _ in range(4))
        self.n_imp, self.n_sal, self.n_exp = array("d"), array("d"), array("d")
        self.n_pinned = bytearray()
        self.n_key = array("q")
        self.n_version = array("i")
        self.n_next = array("q")                 # row -> next version row (-1: none)
        self.n_sup = array("d")                  # row -> superseded_at (NaN: never)
        self.any_sup = False
        self.n_text: list[str] = []
        self.n_emb = array("f")
        self.versioned = False
        # queries
        self.query_key: dict[Any, int] = {}
        self.query_ids: list = []
        self.q_t = array("d")
        self.q_actor, self.q_space, self.q_cat = array("i"), array("i"), array("i")
        self.q_budget = array("q")
        self.q_line = array("q")                 # query row -> its line (for messages)
        self.q_text: list[str] = []
        self.q_emb = array("f")
        self.q_retrieved = bytearray()
        # relations (query row, note key)
        self.r_q, self.r_n, self.r_rank, self.r_score = array("q"), array("q"), array("i"), array("d")
        self.u_q, self.u_n = array("q"), array("q")
        self.j_q, self.j_n, self.j_gain = array("q"), array("q"), array("d")
        self.a_t, self.a_n, self.a_actor = array("d"), array("q"), array("i")
        self.judged: set[tuple[int, int]] = set()
        # time order: the latest event time so far (a header may say the file
        # is unordered: then its events are buffered and sorted by time)
        self.ordered = True
        self.buffer: list[tuple[int, dict]] | None = None
        self.last_t, self.last_t_line = -math.inf, 0
        self.pending_t: float | None = None
        # unordered trace, per event that adds an id: the id -> the line
        # that adds it, not yet handled
        self.later: dict[str, dict[Any, int]] = {"note_added": {}, "query": {}}
        self.first_line = 0                      # the first non-empty line
        # checking (memsim stream check): every error is collected, not raised
        self.errors: list[str] | None = None
        self.validator: Any = None

    def release(self) -> None:
        """Drop the column arrays (once the frames are built)."""
        for name, value in list(vars(self).items()):
            if isinstance(value, (array, bytearray, list, dict)) and name != "meta":
                setattr(self, name, type(value)() if not isinstance(value, array)
                        else array(value.typecode))

    # -- errors and fields ---------------------------------------------------
    def fail(self, message: str, field: str | None = None) -> None:
        where = f"{self.label}: line {self.line}"
        if field is not None:
            where += f": field {field!r}"
        raise StreamError(f"{where}: {message}")

    def get(self, ev: dict, field: str) -> Any:
        """A required field: a key left out is missing, a key given as null
        is refused naming null (as the schema's check says it)."""
        if field not in ev:
            self.fail(MISSING, field)
        if ev[field] is None:
            self.fail(NULL_REQUIRED, field)
        return ev[field]

    def text(self, ev: dict, field: str) -> str:
        v = self.get(ev, field)
        if not isinstance(v, str):
            self.fail(f"must be a string, got {_show(v)}", field)
        return v

    def number(self, v: Any, field: str, *, minimum: float | None = None,
               nonzero: bool = False) -> float:
        # any finite float (1e19 too); an integer written as one (no decimal
        # point or exponent) within 64 bits, as everywhere
        if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
            self.int64(v, field)
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                or (minimum is not None and v < minimum)):
            what = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
            self.fail(f"must be {what}, got {_show(v)}", field)
        if nonzero and v == 0:
            self.fail(f"must be a non-zero number, got {_show(v)}", field)
        return float(v)

    def int64(self, v: Any, field: str) -> None:
        """JSON integers have no size limit; memsim's columns hold 64 bits.
        (The hot paths test ``type(v) is int`` and the range inline first.)"""
        if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
            self.fail(_beyond_int64(v), field)

    def positive_int(self, v: Any, field: str, maximum: int | None = None) -> int:
        if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
            self.int64(v, field)
        v = self.integral_float(v, field)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            self.fail(f"must be a positive integer, got {_show(v)}", field)
        if maximum is not None and v > maximum:
            self.fail(f"must be at most {maximum:,}, got {_show(v)}", field)
        return v

    def integral_float(self, v: Any, field: str) -> Any:
        """``v``, or the int an integral float stands for (``7.0``: 7, as the
        schema reads it); refused from 2**53 on, where the float may already
        be another integer than the one written."""
        if isinstance(v, float) and v.is_integer():
            if abs(v) >= _FLOAT_EXACT_INT:
                self.fail("an integer given as a float must be below 2**53 in magnitude "
                          f"(larger floats do not hold every integer exactly), got {_show(v)}: "
                          "write it without a decimal point", field)
            return int(v)
        return v

    def ident(self, v: Any, field: str) -> Any:
        if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
            self.int64(v, field)
        v = self.integral_float(v, field)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or v == "":
            self.fail(f"must be an integer or a non-empty string id, got {_show(v)}", field)
        return v

    def time(self, v: Any, field: str) -> float:
        if isinstance(v, str):
            # the schema's pattern first: fromisoformat alone reads forms the
            # schema refuses (and a date with an offset as a time of day)
            if _ISO_TIME.search(v) is None:
                self.fail("must be a number or an ISO 8601 time (YYYY-MM-DD, optionally "
                          f"Thh:mm:ss and Z or +hh:mm), got {_show(v)}", field)
            try:
                days = iso_days(v) - self.origin_days
            except ValueError as exc:
                self.fail(f"must be a number or an ISO 8601 time, got {_show(v)} ({exc})", field)
        else:
            if type(v) is int and not _I64_MIN <= v <= _I64_MAX:
                self.int64(v, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                self.fail(f"must be {_TIME}, got {_show(v)}", field)  # (as the schema says)
            days = float(v) * self.unit
        if abs(days) > MAX_ABS_DAYS:
            if field == "expires_at" and days > 0:
                # a far-off date is how many stores write "never" (9999-12-31)
                self.fail(f"{_show(v)} is {days:.3g} days from the origin, more than "
                          f"{MAX_ABS_DAYS:,.0f} (about 2,700 years): for a note that never "
                          "expires, leave expires_at out (or null); else check the header's "
                          "time_unit and origin", field)
            self.fail(f"{_show(v)} is {days:.3g} days from the origin, more than "
                      f"{MAX_ABS_DAYS:,.0f} (about 2,700 years): check the header's time_unit "
                      "and origin", field)
        return days

    def clock(self, t: float) -> None:
        """An event's time: in an ordered trace, never before the previous one's."""
        if self.ordered and t < self.last_t:
            # in the trace's own unit first (the numbers it holds), then days
            unit = self.unit_name.rstrip("s")
            own = ("" if unit == "day" else
                   f"{t / self.unit:g} {unit}s since the origin ({t:g} days)")
            before = ("" if unit == "day" else
                      f"{self.last_t / self.unit:g} {unit}s, ")
            self.fail(f"{own or f'{t:g} days'} is before the previous event's time "
                      f"({before}{self.last_t:g} days, line {self.last_t_line}): sort the file "
                      'by time, or say "ordered": false in the header', "t")
        self.pending_t = t

    def embedding(self, ev: dict, what: str) -> list | None:
        v = ev.get("embedding")
        if self.has_emb is None:
            self.has_emb = v is not None
            self.emb_line = self.line
        if not self.has_emb:
            if v is not None:
                self.fail(f"this {what} has an embedding but the first note or query (line "
                          f"{self.emb_line}) had none: give embeddings everywhere or nowhere",
                          "embedding")
            return None
        if v is None:
            self.fail(f"missing: the first note or query (line {self.emb_line}) had an "
                      "embedding, so every note and query needs one", "embedding")
        if not isinstance(v, list) or not v:
            self.fail(f"must be a non-empty list of numbers, got {_show(v)}", "embedding")
        if not self.dim:
            self.dim = len(v)
        if len(v) != self.dim:
            self.fail(f"has {len(v)} dimensions, the first embedding (line {self.emb_line}) "
                      f"has {self.dim}", "embedding")
        for i, x in enumerate(v):
            if type(x) is float and math.isfinite(x):
                continue  # the usual case, first
            if type(x) is int and not _I64_MIN <= x <= _I64_MAX:
                self.int64(x, f"embedding[{i}]")
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                self.fail(_embedding_item(i, x), "embedding")
        # finite as float64 is not enough: the stream holds float32 (two passes
        # in C, not a test per item)
        if max(v) >= _F32_OVERFLOW or min(v) <= -_F32_OVERFLOW:
            i = next(i for i, x in enumerate(v) if abs(x) >= _F32_OVERFLOW)
            self.fail(_embedding_item(i, v[i]), "embedding")
        return v

    def namespace(self, ev: dict) -> int:
        v = ev.get("namespace")
        if v is None:
            return self.spaces("")
        if not isinstance(v, str):
            self.fail(f"must be a string, got {_show(v)}", "namespace")
        self.any_namespace = True
        return self.spaces(v)

    def note_of(self, v: Any, field: str) -> int:
        key = self.note_key.get(self.ident(v, field))
        if key is None:
            self.fail(self._not_yet("note", v, self.later["note_added"], "added"), field)
        return key

    def _not_yet(self, what: str, v: Any, later: dict, verb: str) -> str:
        """Why an unknown id is refused: in an unordered trace, say where it is
        added when that is at a later time (its line may well come first)."""
        line = later.get(v) if isinstance(v, (int, str)) else None
        if line is not None:
            return (f"{what} {v!r} is {verb} at line {line}, at a later time than this "
                    "event (an unordered trace is handled in time order)")
        return f"{what} {v!r} has not been {verb} before this line"

    def alive(self, key: int, field: str, query: int | None = None) -> int:
        """``key``, unless the note was deleted: then only the ``retrieved``,
        ``used`` and ``judgement`` events of a query logged before the delete
        (``query``, its row) may name it."""
        if self.deleted[key]:
            before, line = self.deleted_by[key]
            if query is None or query >= before:
                self.fail(f"note {self.note_ids[key]!r} was deleted at line {line} of the "
                          "trace: after that only the retrieved, used and judgement events "
                          "of earlier queries may name it", field)
        return key

    def new_id(self, v: Any, known: dict, what: str) -> None:
        """Refuse an id that was logged before, or that prints as one of the
        other type (``7`` and ``"7"``): the stream keeps renumbered ids as
        text (``trace_id``), where the two would be one."""
        if v in known:
            self.fail(f"{what} {v!r} was already {'added' if what == 'note' else 'logged'}",
                      "id")
        twin = _twin(v)
        if twin is not None and twin in known:
            self.fail(f"{what} {v!r} prints as the earlier {what} {twin!r}: ids that print "
                      "the same must have one type (both integers or both strings)", "id")

    def query_of(self, v: Any, field: str) -> int:
        row = self.query_key.get(self.ident(v, field))
        if row is None:
            self.fail(self._not_yet("query", v, self.later["query"], "logged"), field)
        return row

    # -- events --------------------------------------------------------------
    def header(self, ev: dict) -> None:
        if self.line != self.first_line:
            self.fail("a header is only allowed as the first line (empty lines aside): "
                      f"the first here is line {self.first_line}", "event")
        if ev.get("format", TRACE_FORMAT) != TRACE_FORMAT:
            self.fail(f"expected {TRACE_FORMAT!r}, got {_show(ev.get('format'))}", "format")
        version = self.integral_float(ev.get("version", TRACE_VERSION), "version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.fail(f"must be a positive integer, got {_show(version)}", "version")
        if version > TRACE_VERSION:
            self.fail(f"trace format version {version} is newer than this memsim reads "
                      f"(version {TRACE_VERSION}); upgrade memsim", "version")
        unit = ev.get("time_unit", "day")
        if not isinstance(unit, str) or unit not in TIME_UNITS:
            self.fail(f"must be one of {', '.join(TIME_UNITS)}, got {_show(unit)}", "time_unit")
        ordered = ev.get("ordered", True)
        if not isinstance(ordered, bool):
            self.fail(f"must be true or false, got {_show(ordered)}", "ordered")
        if "origin" in ev:
            if not isinstance(ev["origin"], str):
                self.fail(f"must be an ISO 8601 time, got {_show(ev['origin'])}", "origin")
            self.origin_days = self.time(ev["origin"], "origin")
        meta = {k: v for k, v in ev.items() if k not in ("event", "format", "version", "ordered")}
        for k, v in meta.items():
            if v is None:  # (a field of the header is never optional by null)
                self.fail("must not be null: leave the key out", k)
            # the header's keys go to stream.json, which holds standard JSON only
            try:
                json.dumps(v, allow_nan=False)
            except ValueError:
                self.fail("must not hold NaN or Infinity (stream.json keeps the header's keys "
                          f"and standard JSON has neither), got {_show(v)}", k)
        self.unit = TIME_UNITS[unit]
        self.unit_name = unit
        self.ordered = ordered
        if not ordered:
            self.buffer = []
        self.meta = meta

    def note_added(self, ev: dict) -> None:
        # every field is checked before anything is recorded: a refused line
        # leaves no trace (stream check goes on reading after it)
        nid = self.ident(self.get(ev, "id"), "id")
        self.new_id(nid, self.note_key, "note")
        t = self.time(self.get(ev, "t"), "t")
        actor = self.text(ev, "actor")
        text = ev.get("text")
        if text is not None and not isinstance(text, str):
            self.fail(f"must be a string, got {_show(text)}", "text")
        if "tokens" in ev and ev["tokens"] is not None:
            tokens = self.positive_int(ev["tokens"], "tokens", MAX_TOKENS)
        elif text is not None:
            tokens = max(1, math.ceil(len(text) / 4))
        else:
            self.fail("a note needs 'tokens' or 'text'", "tokens")
        emb = self.embedding(ev, "note")
        space = self.namespace(ev)
        opt = self._optional(ev, t, self.tiers("task"), self.types("episodic"), 1.0, 1.0, False,
                             math.nan)
        superseded = self._supersedes(ev)
        self.clock(t)
        key = len(self.note_ids)
        self.note_key[nid] = key
        self.note_ids.append(nid)
        self.deleted.append(0)
        row = len(self.n_created)
        self.first_row.append(row)
        self.live_row.append(row)
        self._version(key, t, t, 0, tokens, self.actors(actor),
                      text if text is not None else "", emb, space, *opt)
        self._supersede(superseded, t)

    def _supersedes(self, ev: dict, own: int | None = None) -> list[int]:
        """The keys of the notes ``ev`` supersedes (checked, not recorded);
        ``own``: the key of the note being updated, which cannot supersede
        itself."""
        if ev.get("supersedes") is None:
            return []
        olds = ev["supersedes"] if isinstance(ev["supersedes"], list) else [ev["supersedes"]]
        keys = []
        for old in olds:
            k = self.note_of(old, "supersedes")
            if self.deleted[k]:
                self.fail(f"note {old!r} cannot be superseded here (it was deleted)",
                          "supersedes")
            if k == own:
                self.fail(f"note {old!r} cannot supersede itself (an update already "
                          "replaces its previous version)", "supersedes")
            keys.append(k)
        return keys

    def _supersede(self, keys: list[int], t: float) -> None:
        """Record that the notes ``keys`` are wrong from ``t`` on."""
        for k in keys:
            # the newer note makes the older one wrong from now on (ground truth
            # for invalidation and the superseded-use curve)
            r = self.live_row[k]
            prev = self.n_sup[r]
            self.n_sup[r] = t if math.isnan(prev) else min(prev, t)
            self.any_sup = True

    def _optional(self, ev: dict, t: float, tier: int, mtype: int, imp: float, sal: float,
                  pinned: bool, expires: float) -> tuple:
        """The optional note fields of ``ev``, else the given ones (checked, not recorded)."""
        if ev.get("tier") is not None:
            tier = self.tiers(self.text(ev, "tier"))
        if ev.get("type") is not None:
            mtype = self.types(self.text(ev, "type"))
        if ev.get("importance") is not None:
            imp = self.number(ev["importance"], "importance", minimum=0.0)
        if ev.get("salience") is not None:
            sal = self.number(ev["salience"], "salience", minimum=0.0)
        if ev.get("pinned") is not None:
            if not isinstance(ev["pinned"], bool):
                self.fail(f"must be true or false, got {_show(ev['pinned'])}", "pinned")
            pinned = ev["pinned"]
        if ev.get("expires_at") is not None:
            expires = self.time(ev["expires_at"], "expires_at")
            if expires < t:
                self.fail(f"must not be before the note's time ({t:g} days)", "expires_at")
        return tier, mtype, imp, sal, pinned, expires

    def _version(self, key: int, t: float, first: float, version: int, tokens: int, actor: int,
                 text: str, emb: list | None, space: int, tier: int, mtype: int, imp: float,
                 sal: float, pinned: bool, expires: float) -> None:
        """Append a note row (every field already checked)."""
        self.n_created.append(t)
        self.n_first.append(first)
        self.n_tokens.append(tokens)
        self.n_actor.append(actor)
        self.n_tier.append(tier)
        self.n_type.append(mtype)
        self.n_space.append(space)
        self.n_imp.append(imp)
        self.n_sal.append(sal)
        self.n_exp.append(expires)
        self.n_pinned.append(1 if pinned else 0)
        self.n_key.append(key)
        self.n_version.append(version)
        self.n_next.append(-1)
        self.n_sup.append(math.nan)
        self.n_text.append(text)
        self.n_line.append(self.line)
        if emb is not None:
            self.n_emb.extend(emb)

    def _live(self, ev: dict) -> tuple[int, int, float]:
        key = self.note_of(self.get(ev, "id"), "id")
        if self.deleted[key]:
            self.fail(f"note {self.note_ids[key]!r} was deleted earlier", "id")
        row = self.live_row[key]
        t = self.time(self.get(ev, "t"), "t")
        if t < self.n_created[row]:
            self.fail(f"{t:g} days is before the note's previous event "
                      f"({self.n_created[row]:g} days)", "t")
        return key, row, t

    def note_updated(self, ev: dict) -> None:
        key, old, t = self._live(ev)
        old_exp = self.n_exp[old]
        if t >= old_exp:
            # an expired note is gone (live while t < expires_at), as a deleted
            # one: its update would be a version that expires before it starts
            self.fail(f"note {self.note_ids[key]!r} expired at {old_exp:g} days (its "
                      "expires_at), before this update: an expired note cannot be updated",
                      "t")
        text = self.n_text[old]
        # an update may repeat the note's text (a log of the whole note on
        # every change): only a different text is a new one, which needs a
        # new embedding and counts its tokens again
        changed_text = False
        if ev.get("text") is not None:
            given = self.text(ev, "text")
            changed_text = given != text
            text = given
        if ev.get("tokens") is not None:
            tokens = self.positive_int(ev["tokens"], "tokens", MAX_TOKENS)
        elif changed_text:
            tokens = max(1, math.ceil(len(text) / 4))
        else:
            tokens = self.n_tokens[old]
        actor = self.actors(self.text(ev, "actor")) if ev.get("actor") is not None \
            else self.n_actor[old]
        emb = None
        if self.has_emb:
            if ev.get("embedding") is not None:
                emb = self.embedding(ev, "note")
            elif changed_text:
                self.fail("the text changed: give the new embedding (the trace has "
                          "embeddings)", "embedding")
            else:
                emb = list(self.n_emb[old * self.dim:(old + 1) * self.dim])
        elif ev.get("embedding") is not None:
            self.embedding(ev, "note")  # raises: the trace has none
        space = self.namespace(ev) if ev.get("namespace") is not None else self.n_space[old]
        opt = self._optional(ev, t, self.n_tier[old], self.n_type[old], self.n_imp[old],
                             self.n_sal[old], bool(self.n_pinned[old]), old_exp)
        superseded = self._supersedes(ev, own=key)
        self.clock(t)
        self.n_exp[old] = t if math.isnan(old_exp) else min(old_exp, t)
        row = len(self.n_created)
        self.n_next[old] = row
        self.live_row[key] = row
        self.versioned = True
        self._version(key, t, self.n_first[old], self.n_version[old] + 1, tokens, actor, text,
                      emb, space, *opt)
        self._supersede(superseded, t)

    def note_deleted(self, ev: dict) -> None:
        key, row, t = self._live(ev)
        self.clock(t)
        old = self.n_exp[row]
        self.n_exp[row] = t if math.isnan(old) else min(old, t)
        self.deleted[key] = 1
        self.deleted_by[key] = (len(self.query_ids), self.line)

    def query(self, ev: dict) -> None:
        qid = self.ident(self.get(ev, "id"), "id")
        self.new_id(qid, self.query_key, "query")
        t = self.time(self.get(ev, "t"), "t")
        actor = self.text(ev, "actor")
        text = ev.get("text")
        if text is not None and not isinstance(text, str):
            self.fail(f"must be a string, got {_show(text)}", "text")
        emb = self.embedding(ev, "query")
        budget = (self.positive_int(ev["budget"], "budget", MAX_TOKENS)
                  if ev.get("budget") is not None else 0)
        # 3.0 is the integer 3, as for ids (and as the schema reads it)
        cat = self.integral_float(ev.get("category"), "category")
        if cat is not None and (isinstance(cat, bool) or not isinstance(cat, (str, int))):
            self.fail(f"must be a string or an integer, got {_show(cat)}", "category")
        if type(cat) is int:
            self.int64(cat, "category")
        space = self.namespace(ev)
        self.clock(t)
        self.query_key[qid] = len(self.query_ids)
        self.query_ids.append(qid)
        self.q_t.append(t)
        self.q_actor.append(self.actors(actor))
        self.q_space.append(space)
        self.q_cat.append(self.categories("" if cat is None else str(cat)))
        self.q_budget.append(budget)
        self.q_line.append(self.line)
        self.q_text.append("" if text is None else text)
        self.q_retrieved.append(0)
        if emb is not None:
            self.q_emb.extend(emb)

    def _note_list(self, ev: dict, query: int) -> list[int]:
        v = self.get(ev, "notes")
        if not isinstance(v, list):
            self.fail(f"must be a list of note ids, got {_show(v)}", "notes")
        keys = [self.note_of(x, f"notes[{i}]") for i, x in enumerate(v)]
        if self.deleted_by:  # (the usual trace deletes little: no check per note)
            for i, k in enumerate(keys):
                self.alive(k, f"notes[{i}]", query)
        return keys

    def retrieved(self, ev: dict) -> None:
        q = self.query_of(self.get(ev, "query"), "query")
        if self.q_retrieved[q]:
            self.fail(f"query {self.query_ids[q]!r} already has a 'retrieved' event", "query")
        keys = self._note_list(ev, q)
        if len(set(keys)) != len(keys):
            seen: set[int] = set()
            for i, k in enumerate(keys):
                if k in seen:
                    self.fail(f"note {self.note_ids[k]!r} is listed twice", f"notes[{i}]")
                seen.add(k)
        scores = ev.get("scores")
        if scores is not None:
            if not isinstance(scores, list) or len(scores) != len(keys):
                self.fail(f"must be a list of {len(keys)} numbers (one per note), got "
                          f"{_show(scores)}", "scores")
            vals = [self.number(s, f"scores[{i}]") for i, s in enumerate(scores)]
        else:
            vals = [math.nan] * len(keys)
        self.q_retrieved[q] = 1
        for rank, (k, s) in enumerate(zip(keys, vals), start=1):
            self.r_q.append(q)
            self.r_n.append(k)
            self.r_rank.append(rank)
            self.r_score.append(s)

    def used(self, ev: dict) -> None:
        q = self.query_of(self.get(ev, "query"), "query")
        for k in self._note_list(ev, q):
            self.u_q.append(q)
            self.u_n.append(k)

    def judgement(self, ev: dict) -> None:
        q = self.query_of(self.get(ev, "query"), "query")
        k = self.note_of(self.get(ev, "note"), "note")
        gain = self.number(self.get(ev, "gain"), "gain", nonzero=True)
        self.judge(q, k, gain, "note")

    def judge(self, q: int, k: int, gain: float, field: str) -> None:
        """Record a judgement (an event, or a line of a TREC qrels file)."""
        self.alive(k, field, q)
        if (q, k) in self.judged:
            self.fail(f"a second judgement of note {self.note_ids[k]!r} for query "
                      f"{self.query_ids[q]!r}", field)
        self.judged.add((q, k))
        self.j_q.append(q)
        self.j_n.append(k)
        self.j_gain.append(gain)

    def accessed(self, ev: dict) -> None:
        k = self.alive(self.note_of(self.get(ev, "note"), "note"), "note")
        t = self.time(self.get(ev, "t"), "t")
        actor = self.text(ev, "actor")
        self.clock(t)
        self.a_t.append(t)
        self.a_n.append(k)
        self.a_actor.append(self.actors(actor))

    # -- reading ---------------------------------------------------------------
    def read(self, lines: Iterable[bytes | str]) -> None:
        """Read every line; an unordered trace (header ``"ordered": false``)
        is buffered and its events handled in time order (stable)."""
        self.handlers = {name: getattr(self, name) for name in EVENTS}
        checking = self.errors is not None
        parse, dispatch = self._parse, self._dispatch
        for raw in lines:
            self.line += 1
            if not raw.strip():
                continue
            if not self.first_line:
                self.first_line = self.line  # where a header may be
            ev = self._guard(parse, raw) if checking else parse(raw)
            if ev is None:
                continue
            if self.buffer is not None:
                self.buffer.append((self.line, ev))
            elif checking:
                self._guard(dispatch, ev)
            else:
                dispatch(ev)
        if self.buffer:
            events, self.buffer = self.buffer, None
            # the lines that add each id, until handled (for messages only)
            for line, ev in events:
                if (later := self._later_of(ev)) is not None:
                    later.setdefault(ev["id"], line)
            for line, ev in sorted(events, key=self._sort_key(events)):
                self.line = line
                if (later := self._later_of(ev)) is not None:
                    later.pop(ev["id"], None)
                self._guard(self._dispatch, ev)
            self.later = {k: {} for k in self.later}

    def _later_of(self, ev: dict) -> dict[Any, int] | None:
        """The map of ids not yet handled that ``ev`` adds one to (None for
        an event that adds no id, or one whose id is refused later)."""
        later = self.later.get(ev.get("event"))
        return later if later is not None and isinstance(ev.get("id"), (int, str)) else None

    def _parse(self, raw: bytes | str) -> dict:
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                why = self.hint or (" (a trace is UTF-8 JSON Lines; a file saved as UTF-16 "
                                    "or Latin-1 must be converted)")
                self.fail(f"not UTF-8 text{why}: {exc}")
        if raw.startswith("\ufeff"):
            raw = raw[1:]  # a byte order mark: skipped, as json.loads of bytes does
        try:
            ev = _DECODER.decode(raw)
        except json.JSONDecodeError as exc:
            # the column within this line (the decoder counts the line's own
            # newline as a line break: "line 2 column 1" for a line cut short)
            end = len(raw.rstrip("\r\n"))
            where = "at the end of the line" if exc.pos >= end else f"at column {exc.pos + 1}"
            self.fail(f"not valid JSON{self.hint}: {exc.msg} {where}")
        except _RepeatedKey as exc:
            self.fail("appears twice in one JSON object (a JSON parser keeps one of the two "
                      "values, silently): keep one", exc.key)
        if not isinstance(ev, dict):
            self.fail(f"expected a JSON object, got a JSON {type(ev).__name__}")
        if "\\ud" in raw or "\\uD" in raw:
            self._no_lone_surrogate(ev)  # (only lines with such escapes need the walk)
        return ev

    def _no_lone_surrogate(self, ev: dict) -> None:
        """Refuse text that holds half of a UTF-16 surrogate pair (``"\\ud800"``
        alone): JSON can escape it, but no UTF-8 file or Parquet column holds it."""
        for k, v in ev.items():
            try:
                json.dumps([k, v], ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                self.fail("holds a lone UTF-16 surrogate (an escape such as \\ud800 without "
                          "its pair), which is not text", k)

    def _dispatch(self, ev: dict) -> None:
        name = ev.get("event")
        handler = self.handlers.get(name) if isinstance(name, str) else None
        if self.validator is not None:
            problems = _schema_errors(self.validator, ev)
            if problems:
                # the schema's findings stand for this line; the importer still
                # reads it when it can, so later lines see its ids
                for field, message in problems:
                    self.record(field, message)
                if handler is not None:
                    try:
                        handler(ev)
                    except StreamError:
                        pass
                return
        if handler is None:
            if "event" not in ev:
                self.fail(MISSING, "event")
            self.fail(f"unknown event {_show(name)}; known: {', '.join(EVENTS)}", "event")
        self.pending_t = None
        handler(ev)
        if self.pending_t is not None:
            self.last_t, self.last_t_line = self.pending_t, self.line

    def _guard(self, fn, *args):
        """``fn(*args)``; when checking, a refused line is recorded, not raised."""
        if self.errors is None:
            return fn(*args)
        try:
            return fn(*args)
        except StreamError as exc:
            self.errors.append(str(exc))
            return None

    def record(self, field: str | None, message: str) -> None:
        where = f"{self.label}: line {self.line}"
        if field is not None:
            where += f": field {field!r}"
        self.errors.append(f"{where}: {message}")

    def _sort_key(self, events: list[tuple[int, dict]]):
        """Sort key of a buffered event: its time, or for an event without
        one (``retrieved``, ``used``, ``judgement``) its query's time, after the
        timed events of that time; then the file order. A time that cannot be
        read sorts first: its line reports it before any event that names its
        note or query (which would otherwise fail first, blaming the order)."""
        def when(v: Any) -> float:
            saved = self.line
            try:
                return self.time(v, "t")
            except StreamError:
                return -math.inf
            finally:
                self.line = saved

        qtime = {}
        for _, ev in events:
            if ev.get("event") == "query" and isinstance(ev.get("id"), (int, str)):
                qtime.setdefault(ev["id"], when(ev.get("t")))
        keys = {}
        for i, (line, ev) in enumerate(events):
            # only timed events sort by their own t: on retrieved, used and
            # judgement a "t" is an unknown key (ignored)
            if ev.get("event") in _TIMED and "t" in ev:
                keys[line] = (when(ev["t"]), 0, i)
            else:
                q = ev.get("query")
                keys[line] = (qtime.get(q, math.inf) if isinstance(q, (int, str)) else math.inf,
                              1, i)
        return lambda item: keys[item[0]]


class _RepeatedKey(ValueError):
    """A key given twice in one JSON object."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object's dict, refusing a repeated key (json keeps the last one)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _RepeatedKey(k)
            seen.add(k)
    return obj


#: The decoder of trace lines (about as fast as ``json.loads``, measured).
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _embedding_item(i: int, x: Any) -> str:
    """Why item ``i`` of an embedding is refused (the importer's message and
    the schema check's alike)."""
    if not isinstance(x, bool) and isinstance(x, (int, float)) \
            and (isinstance(x, int) or math.isfinite(x)) and abs(x) >= _F32_OVERFLOW:
        return (f"item {i} is beyond float32's range (about 3.4e38; embeddings are stored "
                f"as float32), got {_show(x)}")
    return f"item {i} must be a finite number, got {_show(x)}"


def _beyond_int64(v: int) -> str:
    """Why an integer beyond 64 bits is refused (any field; the importer's
    message and the schema check's alike)."""
    return f"integer beyond 64 bits, got {_show(v)}"


def _show(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _i64(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, np.int64)


def _f64(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0, np.float64)


def _version_rows(r: _Reader, qrow: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The note row (version) live at each query's time."""
    rows = _i64(r.first_row)[key].copy()
    if not r.versioned or not len(rows):
        return rows
    created, nxt = _f64(r.n_created), _i64(r.n_next)
    qt = _f64(r.q_t)[qrow]
    # walk version chains only where a later version exists (updates are rare)
    todo = np.flatnonzero(nxt[rows] >= 0)
    while len(todo):
        cand = nxt[rows[todo]]
        step = created[cand] <= qt[todo]
        rows[todo[step]] = cand[step]
        todo = todo[step]
        todo = todo[nxt[rows[todo]] >= 0]
    return rows


def _narrow(ids: np.ndarray) -> np.ndarray:
    """int64 ids as int32 when every one fits (a smaller frame for validation,
    which reads them back as the same int64 values)."""
    if len(ids) and np.iinfo(np.int32).min <= ids.min() and ids.max() <= np.iinfo(np.int32).max:
        return ids.astype(np.int32)
    return ids


def _ids(logged: list, keys: np.ndarray, keep_logged: bool) -> np.ndarray:
    if keep_logged:
        return np.asarray([logged[k] for k in keys], dtype=np.int64) if len(keys) else \
            np.zeros(0, np.int64)
    return np.arange(len(keys), dtype=np.int64)


def _build(r: _Reader, label: str, embedder: str | None = None) -> Stream:
    # The frames take the reader's columns without copying them (copy=False),
    # and each other part of the reader is freed once used: the peak is the
    # reader's columns plus what validation builds, not both in full.
    r.note_key, r.query_key = {}, {}
    n_rows, n_q = len(r.n_created), len(r.query_ids)
    keys = _i64(r.n_key)
    int_notes = not r.versioned and all(isinstance(x, int) for x in r.note_ids)
    int_queries = all(isinstance(x, int) for x in r.query_ids)
    note_id = _ids(r.note_ids, keys, int_notes)
    query_id = _ids(r.query_ids, np.arange(n_q), int_queries)
    # optional columns that hold their default on every row are left out:
    # make_stream fills the same values (NOTE_DEFAULTS)
    cols: dict[str, Any] = {"note_id": note_id, "created_at": _f64(r.n_created),
                            "tokens": _i64(r.n_tokens), "actor": r.actors.categorical(r.n_actor)}
    if not n_rows or r.tiers.names != ["task"]:
        cols["tier"] = r.tiers.categorical(r.n_tier)
    for col, values in (("importance", _f64(r.n_imp)), ("salience", _f64(r.n_sal))):
        if not n_rows or not (values == 1.0).all():
            cols[col] = values
    if not n_rows or r.types.names != ["episodic"]:
        cols["memory_type"] = r.types.categorical(r.n_type)
    if not n_rows or any(r.n_pinned):
        cols["pinned"] = np.frombuffer(bytes(r.n_pinned), dtype=np.uint8).astype(bool)
    if not n_rows or not np.isnan(_f64(r.n_exp)).all():
        cols["expires_at"] = _f64(r.n_exp)
    cols["first_created_at"] = _f64(r.n_first)
    cols["version"] = (np.frombuffer(r.n_version, dtype=np.int32).astype(np.int64)
                       if n_rows else np.zeros(0, np.int64))
    notes = pd.DataFrame(cols, copy=False)  # the frames keep the reader's columns: no copy
    del cols
    queries = pd.DataFrame({
        "query_id": query_id,
        "t": _f64(r.q_t),
        "actor": r.actors.categorical(r.q_actor),
        "category": r.categories.decode(r.q_cat),
    }, copy=False)
    # text only when some note / query has one; the logged id only when the
    # stream's id is not the logged one
    if any(r.n_text):
        notes.insert(len(notes.columns) - 2, "text", np.asarray(r.n_text, dtype=object))
    if any(r.q_text):
        queries["text"] = np.asarray(r.q_text, dtype=object)
    if r.any_sup:
        notes["superseded_at"] = _f64(r.n_sup)
    if not int_notes:
        notes["trace_id"] = np.asarray([str(r.note_ids[k]) for k in keys], dtype=object)
    if not int_queries:
        queries["trace_id"] = np.asarray([str(x) for x in r.query_ids], dtype=object)
    budget = _i64(r.q_budget)
    if len(budget) and (budget > 0).any():
        if not (budget > 0).all():
            miss = int(np.flatnonzero(budget == 0)[0])
            raise StreamError(f"{label}: line {r.q_line[miss]}: field 'budget': query "
                              f"{r.query_ids[miss]!r} has none while other queries have one: "
                              "give every query a budget, or none")
        queries.insert(3, "budget_tokens", budget)
    if r.any_namespace:
        notes["namespace"] = r.spaces.decode(r.n_space)
        queries["namespace"] = r.spaces.decode(r.q_space)

    # qrels: judgements (a qrels file's, even one of grade 0 only), else used
    if len(r.j_q) or r.qrels_file:
        # (one judgement per pair: the reader refused a second one on its line)
        qrow, key, gain = _i64(r.j_q), _i64(r.j_n), _f64(r.j_gain)
        source = "judgement"
    elif len(r.u_q):
        pairs = pd.DataFrame({"q": _i64(r.u_q), "n": _i64(r.u_n)}).drop_duplicates()
        qrow, key = pairs["q"].to_numpy(), pairs["n"].to_numpy()
        gain = np.ones(len(qrow))
        source = "used"
    else:
        qrow, key, gain, source = (np.zeros(0, np.int64), np.zeros(0, np.int64),
                                   np.zeros(0), "none")
    rows = _version_rows(r, qrow, key)
    qrels = pd.DataFrame({"query_id": query_id[qrow], "note_id": note_id[rows], "gain": gain})
    qrels = qrels.drop_duplicates(["query_id", "note_id"])  # two versions can map to one row

    retrieved = None
    if len(r.r_q):
        # the largest table: free each reader column as soon as it is used,
        # hold ids as int32 where they fit (validation reads them as int64),
        # and let the frame keep the arrays (copy=False) instead of copying
        rq = _i64(r.r_q)
        rrows = _version_rows(r, rq, _i64(r.r_n))
        r.r_n = array("q")
        nid = _narrow(note_id)[rrows]
        del rrows
        qid = _narrow(query_id)[rq]
        del rq
        r.r_q = array("q")
        retrieved = pd.DataFrame({"query_id": qid,
                                  "rank": np.frombuffer(r.r_rank, dtype=np.int32),
                                  "note_id": nid, "score": _f64(r.r_score)}, copy=False)
        del qid, nid
        r.r_rank, r.r_score = array("i"), array("d")
    accesses = None
    if len(r.a_t):
        at, ak = _f64(r.a_t), _i64(r.a_n)
        # the version live at the access time
        arows = _i64(r.first_row)[ak].copy()
        if r.versioned:
            created, nxt = _f64(r.n_created), _i64(r.n_next)
            for i in np.flatnonzero(nxt[arows] >= 0):
                while nxt[arows[i]] >= 0 and created[nxt[arows[i]]] <= at[i]:
                    arows[i] = nxt[arows[i]]
        accesses = pd.DataFrame({"t": at, "note_id": note_id[arows],
                                 "actor": r.actors.decode(r.a_actor)})

    meta: dict[str, Any] = {"name": Path(label).stem, "source": f"memory-layer trace "
                            f"({Path(label).name})"}
    meta.update(r.meta)
    meta.update({"trace_format": TRACE_FORMAT, "trace_version": TRACE_VERSION,
                 "qrels_from": source,
                 "note_versions": int(n_rows), "notes_logged": len(r.note_ids),
                 "logged_rankings": retrieved is not None})
    if embedder == "vectors" and not r.has_emb:
        raise StreamError(f"{label}: embedder 'vectors': the trace logs no embeddings (give "
                          "'embedding' on every note and query, or use 'bm25' or 'wordllama')")
    # the logged vectors unless a text embedder was asked for
    if r.has_emb and embedder not in TEXT_EMBEDDERS:
        ne = np.frombuffer(r.n_emb, dtype=np.float32).reshape(n_rows, r.dim)
        qe = np.frombuffer(r.q_emb, dtype=np.float32).reshape(n_q, r.dim)
        meta["embedding"] = {"retriever": "logged", "dim": r.dim}
    else:
        for frame in (notes, queries):
            if "text" not in frame.columns:
                frame["text"] = ""
        ns = notes["namespace"].to_numpy() if r.any_namespace else None
        qs = queries["namespace"].to_numpy() if r.any_namespace else None
        name = embedder or "bm25"
        why = (f"required when the trace has no embeddings ({name} needs text)" if not r.has_emb
               else f"required by embedder {name!r}, which embeds the text")
        missing = np.flatnonzero(queries["text"].to_numpy() == "")
        if len(missing):
            raise StreamError(f"{label}: line {r.q_line[missing[0]]}: field 'text': query "
                              f"{r.query_ids[missing[0]]!r}: {why}")
        missing = np.flatnonzero(notes["text"].to_numpy() == "")
        if len(missing):
            raise StreamError(f"{label}: line {r.n_line[missing[0]]}: field 'text': note "
                              f"{r.note_ids[keys[missing[0]]]!r}: {why}")
        emb = embed_texts(name, notes["text"].tolist(), queries["text"].tolist(), ns, qs,
                          where="import_trace: embedder")
        ne, qe = emb.notes, emb.queries
        meta["embedding"] = emb.info
    where = {t: f"{label} ({t})" for t in ("notes", "queries", "qrels", "accesses")}
    r.release()  # free what the frames do not hold before validation copies them
    return make_stream(notes, queries, qrels, accesses, ne, qe, meta, where=where,
                       retrieved=retrieved)


def _read_trace(p: Path, reader: _Reader, qrels: str | os.PathLike | None) -> None:
    """Read the trace (and a TREC qrels file) into ``reader``; refuse an empty trace."""
    try:
        with open(p, "rb") as fh:
            reader.read(fh)
    except OSError as exc:
        raise StreamError(f"{p.name}: cannot read: {exc}") from exc
    if not reader.note_ids and not reader.query_ids:
        message = (f"{p.name}: an empty trace (no note_added or query event in "
                   f"{reader.line} lines): nothing to replay")
        if reader.errors is None:
            raise StreamError(message)
        if not reader.errors:
            reader.errors.append(message)
    if qrels is not None:
        _read_trec_qrels(Path(qrels), reader)


def _read_trec_qrels(path: Path, r: _Reader) -> None:
    """Judgements from a TREC qrels file: ``QUERY ITERATION NOTE GRADE`` per
    line (whitespace-separated; ITERATION is ignored), ids as the trace logs
    them. Grade 0 (judged not relevant) adds nothing; other grades are gains,
    as ``judgement`` events (a pair judged twice is refused)."""
    if not path.is_file():
        raise StreamError(f"qrels: {path} is a folder, not a qrels file" if path.is_dir()
                          else f"qrels not found: {path}")
    notes = _by_text(r.note_ids)
    queries = _by_text(r.query_ids)
    saved_label, saved_line = r.label, r.line
    r.label, r.line = path.name, 0
    try:
        # utf-8-sig: a byte order mark is read as the trace's is (json skips it)
        with open(path, encoding="utf-8-sig") as fh:
            for text in fh:
                r.line += 1
                if text.strip():
                    r._guard(_qrels_line, r, text.split(), notes, queries)
    except (OSError, UnicodeDecodeError) as exc:
        raise StreamError(f"{path.name}: cannot read: {exc}") from exc
    finally:
        r.label, r.line = saved_label, saved_line
    r.meta["qrels_file"] = path.name
    r.qrels_file = True


def _by_text(ids: list) -> dict[str, int]:
    """Logged ids by their text (a TREC file's ids are text): one each, as the
    reader refused two ids that print the same (``7`` and ``"7"``)."""
    return {str(x): key for key, x in enumerate(ids)}


def _twin(v: int | str) -> int | str | None:
    """The id of the other type that prints as ``v`` (``"7"`` for ``7``,
    ``7`` for ``"7"``), or None (``"07"``, ``"n7"``)."""
    if isinstance(v, int):
        return str(v)
    if not v.lstrip("-").isdigit():
        return None  # most string ids ("n7", uuids): no int to parse
    try:
        n = int(v)
    except ValueError:
        return None
    return n if str(n) == v else None


def _qrels_line(r: _Reader, parts: list[str], notes: dict, queries: dict) -> None:
    if len(parts) != 4:
        r.fail(f"expected 4 fields (QUERY ITERATION NOTE GRADE), got {len(parts)}")
    qid, _, nid, grade = parts
    for ids, value, field, what in ((queries, qid, "query", "a query"),
                                    (notes, nid, "note", "a note")):
        if value not in ids:
            r.fail(f"{value!r} is not {what} id of the trace", field)
    # float() also reads "1_0" as 10 and other scripts' digits: a grade is
    # a plain decimal number
    if _DECIMAL.fullmatch(grade) is None:
        r.fail(f"must be a number, got {grade!r}", "grade")
    gain = float(grade)
    if not math.isfinite(gain):
        r.fail(f"must be a finite number, got {grade!r}", "grade")
    if gain != 0:
        r.judge(queries[qid], notes[nid], gain, "note")


def _schema_errors(validator: Any, ev: dict) -> list[tuple[str | None, str]]:
    """``(field, message)`` of every error the JSON Schema finds in one event."""
    out = []
    event = ev.get("event")
    spec = validator.schema.get("$defs", {}).get(event) if isinstance(event, str) else None
    required = set(spec.get("required", ())) if isinstance(spec, dict) else set()
    for err in validator.iter_errors(ev):
        path = list(err.absolute_path)
        field = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p))
                        for i, p in enumerate(path)) or None
        schema = err.schema if isinstance(err.schema, dict) else {}
        if err.validator == "required":
            field = err.message.split("'")[1] if err.message.count("'") >= 2 else field
            message = MISSING
        elif err.instance is None and len(path) == 1 and path[0] in required:
            message = NULL_REQUIRED
        elif type(err.instance) is int and not _I64_MIN <= err.instance <= _I64_MAX:
            # (the importer's first test of any number, whatever the field)
            message = _beyond_int64(err.instance)
        elif len(path) == 2 and path[0] == "embedding" and isinstance(path[1], int):
            # named as the importer names it (one message, not one per keyword)
            field, message = "embedding", _embedding_item(path[1], err.instance)
        elif err.validator == "anyOf" and not path:
            field, message = "tokens", "a note needs 'tokens' or 'text'"
        elif path == ["event"]:
            message = f"unknown event {_show(err.instance)}; known: {', '.join(EVENTS)}"
        elif schema.get("description"):
            message = f"must be {schema['description']}, got {_show(err.instance)}"
        elif err.validator == "type":
            kind = {"string": "a string", "boolean": "true or false", "array": "a list",
                    "object": "a JSON object"}.get(str(err.validator_value), err.validator_value)
            message = f"must be {kind}, got {_show(err.instance)}"
        else:
            message = err.message
        out.append((field, message))
    return sorted(dict.fromkeys(out), key=lambda fm: (fm[0] or "", fm[1]))


def import_trace(path: str | os.PathLike, *, embedder: str | None = None,
                 qrels: str | os.PathLike | None = None) -> Stream:
    """Import a memory-layer trace (format version 1, see the module docstring).

    Parameters
    ----------
    path : str or PathLike
        A ``.jsonl`` file (JSON Lines).
    embedder : {"vectors", "bm25", "wordllama"}, optional
        ``"vectors"``: the logged embeddings (an error when the trace has
        none); ``"bm25"`` / ``"wordllama"``: vectors computed from the
        ``text`` of every note and query (:mod:`memsim.data.embed`; logged
        embeddings are then ignored). Default: the logged embeddings when the
        trace has them, else BM25.
    qrels : str or PathLike, optional
        A TREC qrels file (``QUERY ITERATION NOTE GRADE`` per line, the
        trace's ids): its non-zero grades are judgements, beside the trace's
        ``judgement`` events (``stream.json`` names it in ``"qrels_file"``).

    Returns
    -------
    Stream
        Validated, with the logged rankings in ``stream.retrieved`` when the
        trace has ``retrieved`` events; ``meta["qrels_from"]`` says where the
        qrels came from.

    Raises
    ------
    StreamError
        A missing or unreadable file, an empty trace, or a malformed line (the
        message names the file, the line and the field).
    """
    if embedder is not None:
        check_embedder(embedder, "import_trace: embedder")
    p = Path(path)
    _trace_file(p)
    reader = _Reader(p.name)
    _read_trace(p, reader, qrels)
    return _build(reader, p.name, embedder)


def check_trace(path: str | os.PathLike, *, limit: int = 50,
                qrels: str | os.PathLike | None = None) -> tuple[list[str], int]:
    """Every error of a trace, as ``memsim stream check trace FILE`` lists them.

    Each line is checked against the published JSON Schema
    (``memsim/schemas/trace-v1.json``, when ``jsonschema`` is installed) and
    by the importer's rules across lines; a refused line does not stop the
    check. When no line is refused, the stream is built (nothing is written)
    so that the rules over the whole trace are checked too.

    Returns
    -------
    (list of str, int)
        The first ``limit`` messages (``FILE: line N: field 'F': ...``) and
        how many more there were.
    """
    p = Path(path)
    _trace_file(p)
    reader = _Reader(p.name)
    reader.errors = []
    reader.validator = _schema_validator()
    _read_trace(p, reader, qrels)
    errors = reader.errors
    if not reader.ordered:
        # an unordered trace is handled in time order: list its errors by line
        prefix = f"{p.name}: line "

        def line_of(message: str) -> float:
            if not message.startswith(prefix):
                return math.inf
            digits = message[len(prefix):].split(":", 1)[0]
            return int(digits) if digits.isdigit() else math.inf

        errors.sort(key=line_of)
    if not errors:
        try:
            _build(reader, p.name)
        except StreamError as exc:
            errors.append(str(exc))
    limit = max(0, int(limit))
    return errors[:limit], max(0, len(errors) - limit)


def _trace_file(p: Path) -> None:
    """Refuse a path that is not a trace file (missing, or a folder)."""
    if p.is_dir():
        raise StreamError(f"{p} is a directory, not a trace file (a trace is one JSON Lines "
                          "file)")
    if not p.is_file():
        raise StreamError(f"trace not found: {p}")


def _schema_validator() -> Any:
    """A validator of the published schema, or None without ``jsonschema``
    (the importer's own rules then check each line)."""
    try:
        import jsonschema
    except ImportError:
        return None
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def cli_import_trace(path: str | os.PathLike, out: str | os.PathLike, *,
                     embedder: str | None = None,
                     qrels: str | os.PathLike | None = None) -> Stream:
    """``memsim stream import trace FILE.jsonl --out DIR [--embedder ...]``:
    import and write the stream folder (atomic; refuses a non-empty ``out``)."""
    stream = import_trace(path, embedder=embedder, qrels=qrels)
    write_stream(stream, Path(out))
    return stream


# ---------------------------------------------------------------------------
# Writing a trace (examples, tests, exporters)
# ---------------------------------------------------------------------------

def _num(x: Any) -> Any:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2 ** 53 else x


def _refs(table: pd.DataFrame, key: str) -> list:
    """The id each row of a stream table is written under: its logged id
    (``trace_id``, text) when every row has one, so that an imported trace
    comes back with its own ids and a note's versions under one id; else
    its ``key`` (an int)."""
    ids = [int(x) for x in table[key]]
    if "trace_id" not in table.columns:
        return ids
    logged = table["trace_id"].tolist()
    if any(not isinstance(x, str) or x == "" for x in logged):
        return ids
    return logged


def _version_chains(notes: pd.DataFrame, refs: list) -> dict[int, int] | None:
    """``row -> previous version's row`` for the notes that share a logged
    id, when they form version chains as :func:`import_trace` builds them
    (``version`` 0, 1, 2..., each version expiring when the next one is
    created); None when rows share an id otherwise (then they cannot be
    written as one note's versions)."""
    groups: dict[Any, list[int]] = {}
    for i, ref in enumerate(refs):
        groups.setdefault(ref, []).append(i)
    created = notes["created_at"].to_numpy(np.float64)
    expires = notes["expires_at"].to_numpy(np.float64)
    version = (notes["version"].to_numpy() if "version" in notes.columns
               else np.zeros(len(notes), np.int64))
    prev: dict[int, int] = {}
    for rows in groups.values():
        if len(rows) == 1:
            continue
        rows = sorted(rows, key=lambda i: (int(version[i]), i))
        for k, (a, b) in enumerate(zip(rows, rows[1:])):
            if int(version[a]) != k or int(version[b]) != k + 1 or created[b] < created[a] \
                    or expires[a] != created[b]:
                return None
            prev[b] = a
    return prev


def write_trace(stream: Stream, path: str | os.PathLike, *, embeddings: bool = False,
                relevance: str = "judgement", retrieved: pd.DataFrame | None = None,
                header: dict | None = None) -> Path:
    """Write a stream as a trace (format version 1) that imports back to it.

    Events are written in time order (notes before accesses and queries at
    equal times, then each query's ``retrieved`` and relevance events right
    after it and after every note they name). A stream imported from a
    trace keeps its logged ids (``trace_id``): they are written, and the
    versions of an updated note (``version`` 1, 2...) are written as
    ``note_updated`` events of it; otherwise every note is one
    ``note_added`` under its ``note_id``. Organic reads (``accesses``) are
    ``accessed`` events, and a note's ``superseded_at`` is a ``supersedes``
    on the note added or updated at that time. A stream memsim generated
    keeps its truth of supersession the same way (its superseding versions'
    ``valid_until``) and its queries' class as ``category``; its other
    planted columns (the notes' ``note_class``, ``topic``, ``slot``,
    ``scope``, ``valid_until``, the queries' ``topic`` and ``slot``) have
    no field in a trace and are not written.

    Parameters
    ----------
    stream : Stream
    path : str or PathLike
        The ``.jsonl`` file to create.
    embeddings : bool
        Write the stream's embeddings (else the importer computes BM25 over
        ``text``, which the notes and queries must then have).
    relevance : {"judgement", "used"}
        Write qrels as ``judgement`` events (every gain), or as ``used``
        events (the notes of gain > 0).
    retrieved : DataFrame, optional
        Logged rankings (``query_id``, ``rank``, ``note_id``, optional
        ``score``); default: ``stream.retrieved``.
    header : dict, optional
        Extra header keys (``name``, ``source``...).

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        If ``relevance`` is neither value, ``embeddings`` is asked of a
        stream without them, or the stream holds what a trace cannot say:
        a ``superseded_at`` (or, on a stream memsim generated, the planted
        one, :func:`~memsim.data.workload.planted_superseded_at`) when no
        other note is added or updated, an
        access before its note is created, a note row whose ``updated_at``
        is later than its ``created_at`` (a trace's update is a
        ``note_updated`` event, a version of its own), or a logged ranking
        with scores for some of its notes only (a ``retrieved`` event scores
        every note or none). Nothing is written.
    """
    if relevance not in ("judgement", "used"):
        raise ValueError(f"relevance must be 'judgement' or 'used', got {relevance!r}")
    notes, queries = stream.notes, stream.queries
    if retrieved is None:
        retrieved = getattr(stream, "retrieved", None)
    _check_sayable(notes, retrieved)
    planted = planted_superseded_at(notes) if "superseded_at" not in notes.columns else None
    if planted is not None:  # a generated stream's supersession, as supersedes events
        notes = notes.assign(superseded_at=planted)
    has_ns = "namespace" in notes.columns and "namespace" in queries.columns
    ne, qe = stream.note_embeddings, stream.query_embeddings
    if embeddings and ne is None:
        raise ValueError("the stream has no embeddings to write")
    cat_col = next((c for c in ("category", "note_class") if c in queries.columns), None)
    # the ids written: the logged ones when the stream keeps them (the
    # importer numbers notes and queries again in the same order)
    nref, qref = _refs(notes, "note_id"), _refs(queries, "query_id")
    prev = _version_chains(notes, nref)
    if prev is None:
        nref, prev = [int(x) for x in notes["note_id"]], {}
    if len(set(qref)) != len(qref):
        qref = [int(x) for x in queries["query_id"]]
    last = set(prev.values())                  # rows a later version replaces
    row_of = {int(n): i for i, n in enumerate(notes["note_id"])}
    qref_of = dict(zip((int(q) for q in queries["query_id"]), qref))

    def note_ref(n: Any, table: str) -> Any:
        if int(n) not in row_of:
            raise ValueError(f"{table}: note {int(n)} is not a note of the stream")
        return nref[row_of[int(n)]]

    def query_ref(q: Any, table: str) -> Any:
        if int(q) not in qref_of:
            raise ValueError(f"{table}: query {int(q)} is not a query of the stream")
        return qref_of[int(q)]

    by_query: dict[int, list[str]] = {}
    qr = stream.qrels
    if relevance == "judgement":
        for q, n, g in zip(qr["query_id"], qr["note_id"], qr["gain"]):
            by_query.setdefault(int(q), []).append(json.dumps(
                {"event": "judgement", "query": query_ref(q, "qrels"),
                 "note": note_ref(n, "qrels"),
                 "gain": _num(g)}))
    else:
        pos = qr[qr["gain"] > 0]
        for q, grp in pos.groupby("query_id", sort=False):
            by_query.setdefault(int(q), []).append(json.dumps(
                {"event": "used", "query": query_ref(q, "qrels"),
                 "notes": [note_ref(x, "qrels") for x in grp["note_id"]]}))
    if retrieved is not None and len(retrieved):
        rs = retrieved.sort_values(["query_id", "rank"])
        for q, grp in rs.groupby("query_id", sort=False):
            ev: dict[str, Any] = {"event": "retrieved", "query": query_ref(q, "retrieved"),
                                  "notes": [note_ref(x, "retrieved") for x in grp["note_id"]]}
            if "score" in grp and grp["score"].notna().all():
                ev["scores"] = [float(x) for x in grp["score"]]
            by_query.setdefault(int(q), []).insert(0, json.dumps(ev))
    # (time, kind, row): notes (0) before accesses (1) and queries (2) at
    # equal times; a query's retrieved and relevance events (3) once the
    # query and every note they name have been written
    created_at = notes["created_at"].to_numpy(np.float64)
    created = pd.Series(created_at, index=notes["note_id"].to_numpy())
    named: dict[int, float] = {}
    for frame in (qr, retrieved):
        if frame is not None and len(frame):
            latest = pd.Series(created.reindex(frame["note_id"]).to_numpy(),
                               index=frame["query_id"].to_numpy()).groupby(level=0).max()
            for q, v in latest.items():
                named[int(q)] = max(named.get(int(q), -math.inf), float(v))
    accesses = getattr(stream, "accesses", None)
    if accesses is None:
        accesses = pd.DataFrame({"t": [], "note_id": [], "actor": []})
    access_at = accesses["t"].to_numpy(np.float64)
    for t, n in zip(access_at, accesses["note_id"]):
        note_ref(n, "accesses")
        if t < created_at[row_of[int(n)]]:
            raise ValueError(f"accesses: note {int(n)} is read at t = {t:g}, before it is "
                             f"created ({created_at[row_of[int(n)]]:g}): a trace cannot say "
                             "so (an event names only a note added before it)")
    order = sorted([(float(t), 0, i) for i, t in enumerate(created_at)]
                   + [(float(t), 1, i) for i, t in enumerate(access_at)]
                   + [(float(t), 2, i) for i, t in enumerate(queries["t"])]
                   + [(max(float(t), named.get(int(q), -math.inf)), 3, i)
                      for i, (t, q) in enumerate(zip(queries["t"], queries["query_id"]))])
    supersedes = _carriers(notes, nref, order)
    dest = Path(path)
    with open(dest, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION,
                             "time_unit": "day", **(header or {})}) + "\n")
        for t, kind, i in order:
            if kind == 0:
                row = notes.iloc[i]
                p = prev.get(i)
                old = notes.iloc[p] if p is not None else None
                ev = {"event": "note_added" if old is None else "note_updated", "id": nref[i],
                      "t": t}
                fields: dict[str, Any] = {"actor": str(row["actor"]),
                                          "tokens": int(row["tokens"])}
                if "text" in notes.columns:
                    fields["text"] = str(row["text"])
                for col, key in (("tier", "tier"), ("memory_type", "type")):
                    fields[key] = str(row[col])
                for col in ("importance", "salience"):
                    fields[col] = float(row[col])
                fields["pinned"] = bool(row["pinned"])
                if has_ns:
                    fields["namespace"] = str(row["namespace"])
                if old is None:
                    # what the importer would take for a field left out
                    base = {"tier": "task", "type": "episodic", "importance": 1.0,
                            "salience": 1.0, "pinned": False, "text": ""}
                else:
                    base = {"actor": str(old["actor"]), "tokens": int(old["tokens"]),
                            "tier": str(old["tier"]), "type": str(old["memory_type"]),
                            "importance": float(old["importance"]),
                            "salience": float(old["salience"]), "pinned": bool(old["pinned"])}
                    if "text" in notes.columns:
                        base["text"] = str(old["text"])
                    if has_ns:
                        base["namespace"] = str(old["namespace"])
                changed_text = old is not None and fields.get("text") != base.get("text")
                for key, value in fields.items():
                    if key not in base or base[key] != value or \
                            (key == "tokens" and changed_text):
                        ev[key] = value
                if old is None and "text" in ev and not ev["text"]:
                    del ev["text"]
                # a version that a later one replaces expires when it does
                if i not in last and np.isfinite(row["expires_at"]):
                    ev["expires_at"] = float(row["expires_at"])
                if embeddings and (old is None or changed_text
                                   or not np.array_equal(ne[i], ne[p])):
                    ev["embedding"] = [float(x) for x in ne[i]]
                if i in supersedes:
                    olds = supersedes[i]
                    ev["supersedes"] = olds[0] if len(olds) == 1 else olds
                fh.write(json.dumps(ev) + "\n")
            elif kind == 1:
                fh.write(json.dumps({"event": "accessed",
                                     "note": note_ref(accesses["note_id"].iat[i], "accesses"),
                                     "t": t, "actor": str(accesses["actor"].iat[i])}) + "\n")
            elif kind == 2:
                row = queries.iloc[i]
                ev = {"event": "query", "id": qref[i], "t": t, "actor": str(row["actor"])}
                if "text" in queries.columns and str(row["text"]):
                    ev["text"] = str(row["text"])
                if "budget_tokens" in queries.columns:
                    ev["budget"] = int(row["budget_tokens"])
                if cat_col is not None:
                    cat = row[cat_col]
                    ev["category"] = int(cat) if isinstance(cat, (int, np.integer)) else str(cat)
                if has_ns:
                    ev["namespace"] = str(row["namespace"])
                if embeddings:
                    ev["embedding"] = [float(x) for x in qe[i]]
                fh.write(json.dumps(ev) + "\n")
            else:
                for line in by_query.get(int(queries["query_id"].iat[i]), ()):
                    fh.write(line + "\n")
    return dest


def _check_sayable(notes: pd.DataFrame, retrieved: pd.DataFrame | None) -> None:
    """Refuse (``ValueError``, naming the first row) what a trace cannot
    say and :func:`write_trace` would otherwise drop: a note updated in
    place (``updated_at`` later than ``created_at``), and a logged ranking
    with scores for some of its notes only."""
    if "updated_at" in notes.columns:
        created = notes["created_at"].to_numpy(np.float64)
        updated = notes["updated_at"].to_numpy(np.float64)
        later = np.flatnonzero(updated > created)
        if len(later):
            i = int(later[0])
            raise ValueError(
                f"notes: note {int(notes['note_id'].iat[i])} has updated_at = {updated[i]:g}, "
                f"later than its created_at = {created[i]:g} ({len(later)} such "
                f"{'row' if len(later) == 1 else 'rows'}): a trace cannot say so (an update "
                "is a note_updated event, which makes a version of its own)")
    if retrieved is not None and len(retrieved) and "score" in retrieved.columns:
        logged = retrieved["score"].notna().groupby(retrieved["query_id"]).agg(["any", "all"])
        part = logged.index[(logged["any"] & ~logged["all"]).to_numpy()]
        if len(part):
            rows = retrieved[retrieved["query_id"] == part[0]]
            raise ValueError(
                f"retrieved: query {int(part[0])} has a score for {int(rows['score'].notna().sum())}"
                f" of its {len(rows)} notes ({len(part)} such "
                f"{'query' if len(part) == 1 else 'queries'}): a trace cannot say so (a "
                "retrieved event scores every note it names or none)")


def _carriers(notes: pd.DataFrame, refs: list, order: list) -> dict[int, list]:
    """``row -> ids it supersedes``: each note row with a ``superseded_at``
    is named by the ``supersedes`` of a row of another note created at that
    time and written after it (the first such one, of its namespace when
    one is), as the importer recorded it.

    Raises
    ------
    ValueError
        If no such row exists for one (a trace could not say it).
    """
    out: dict[int, list] = {}
    if "superseded_at" not in notes.columns:
        return out
    sup = notes["superseded_at"].to_numpy(np.float64)
    if not np.isfinite(sup).any():
        return out
    created = notes["created_at"].to_numpy(np.float64)
    ns = notes["namespace"].astype(str).to_numpy() if "namespace" in notes.columns else None
    position = {i: k for k, (_, kind, i) in enumerate(o for o in order if o[1] == 0)}
    at: dict[float, list[int]] = {}
    for i in sorted(range(len(notes)), key=position.__getitem__):
        at.setdefault(float(created[i]), []).append(i)
    for i in np.flatnonzero(np.isfinite(sup)):
        i = int(i)
        cands = [c for c in at.get(float(sup[i]), ())
                 if refs[c] != refs[i] and position[c] > position[i]]
        if ns is not None:
            cands = [c for c in cands if ns[c] == ns[i]] or cands
        if not cands:
            raise ValueError(f"notes: note {int(notes['note_id'].iat[i])} is superseded at "
                             f"t = {sup[i]:g}, when no other note is added or updated: a trace "
                             "marks it with 'supersedes' on the note that makes it wrong")
        out.setdefault(cands[0], []).append(refs[i])
    return out
