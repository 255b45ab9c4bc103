"""Note streams: the in-memory :class:`Stream` and the on-disk format (version 1).

A stream is everything a simulation replays: notes with their creation times
and sizes, queries with their times and actors, graded ground truth (qrels),
optional organic accesses and optional embeddings. The on-disk layout is fixed
by ``docs/contracts/stream.md``.

Every :class:`Stream` built by :func:`make_stream` (and so by
:func:`read_stream`) has been validated: a malformed input raises
:class:`~memsim.core.errors.StreamError` with one message naming the table (or,
read from a folder, the file by its path: the folder as given joined with the
file name), the column and the first offending row, for example::

    week1/notes.parquet: column 'tokens': row 17 (note_id 123): tokens must be a positive integer, got 0

Rows are counted from 0 in the order given (for a file: the first data row
after the header is row 0). Checks run table by table (notes, queries, qrels,
accesses, embeddings) and column by column in the documented order, so the
message is about the first problem found in that order.

Decisions worth knowing
-----------------------
- Values are accepted when they can be read as the documented type without
  loss: ``tokens`` 3.0 (float) or ``"3"`` (text) is read as 3, ``tokens`` 3.5
  is refused, never truncated; ``created_at`` ``"abc"`` is refused. An
  integer given as a float must be below 2**53 in magnitude (beyond it a
  float does not hold every integer, so the id read may not be the id
  written).
- CSV files: the text columns (``docs/contracts/stream.md``) are read as text; a
  repeated header name and a row with more or fewer fields than the header
  (a trailing comma included) are refused, naming the row and its line.
- ``expires_at``: NaN (or +inf) means never. A value earlier than
  ``created_at`` is refused (a note that is expired before it exists is a data
  error); equal is allowed (a TTL of zero).
- ``updated_at`` (optional, float days): NaN or absent means "never updated"
  and is filled with ``created_at``; it must be ``>= created_at``. The
  canonical notes frame always has it.
- ``importance`` and ``salience`` must be finite and ``>= 0``.
- ``budget_tokens`` (optional query column): when present every query must
  have a positive integer (omit the column to use the experiment's budget).
- ``text`` (optional): missing cells become ``""``.
- ``tier`` and ``memory_type`` are free strings (unknown values are mapped by
  the policies, see :data:`memsim.policies.base.TIER_CODES`).
- Time causality is not enforced: qrels or accesses may name a note created
  after the query or access (the engine only sees live notes);
  :func:`describe_stream` counts such qrels.
- Embeddings are given for both notes and queries or for neither, with the
  same dimension; they are stored as float32 and must be finite as float32.
- A table with zero rows and no columns at all stands for an empty table, so
  ``make_stream(notes, queries, pd.DataFrame())`` is valid; an empty stream
  (0 notes or 0 queries) is valid.
- Extra columns in any table (``note_class``, ``topic``, ``slot``,
  ``valid_until``...) are kept unchanged after the documented ones.

Optional table ``retrieved`` (``retrieved.parquet``)
----------------------------------------------------
What a production system returned for each query (an imported trace's
``retrieved`` events, :mod:`memsim.data.importers.trace`): ``query_id``, ``rank``
(int >= 1, 1 = best), ``note_id``, ``score`` (float, NaN when not logged).
Ids must be known; a (query_id, rank) or (query_id, note_id) pair appears at
most once. Sorted by ``(query_id, rank)``. The ``as-logged`` ranker replays
it (:class:`LoggedRankings` looks it up by stream row).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn

import numpy as np
import pandas as pd
import pyarrow as pa

from memsim.core.errors import StreamError
from memsim.core.paths import file_in_the_way

__all__ = [
    "Stream",
    "make_stream",
    "validate_frames",
    "read_stream",
    "write_stream",
    "check_stream_dest",
    "exact_int64",
    "check_csv_shape",
    "describe_stream",
    "export_fingerprint",
    "stream_facts",
    "NOTE_DEFAULTS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LoggedRankings",
]

FORMAT_NAME = "memsim-stream"
FORMAT_VERSION = 1

#: Optional note columns and their defaults (``docs/contracts/stream.md``).
NOTE_DEFAULTS: dict[str, Any] = {
    "tier": "task",
    "importance": 1.0,
    "salience": 1.0,
    "memory_type": "episodic",
    "pinned": False,
    "expires_at": np.nan,
}

# Table names, in checking order; also the keys of ``where``.
_TABLES = ("notes", "queries", "qrels", "accesses", "note_embeddings", "query_embeddings",
           "retrieved")

# Documented columns of each table, in canonical order (extras follow).
_NOTE_COLUMNS = ("note_id", "created_at", "updated_at", "tokens", "actor", "tier",
                 "importance", "salience", "memory_type", "pinned", "expires_at", "text")
_QUERY_COLUMNS = ("query_id", "t", "actor", "budget_tokens")
_QREL_COLUMNS = ("query_id", "note_id", "gain")
_ACCESS_COLUMNS = ("t", "note_id", "actor")
_RETRIEVED_COLUMNS = ("query_id", "rank", "note_id", "score")

# Columns read as text from CSV, so that an actor "007" stays "007": the
# documented text columns and the text extras that importers and the
# generator write (an imported trace's ``trace_id`` and ``namespace``, a
# query's ``text`` and ``category``). Read as numbers, namespaces "01" and
# "1" would merge into one store.
#: text columns that cannot be missing, where an empty CSV cell is the empty text
_EMPTY_IS_TEXT = ("actor", "tier", "memory_type")

_STR_COLUMNS = {
    "notes": ("actor", "tier", "memory_type", "text", "trace_id", "namespace", "note_class"),
    "queries": ("actor", "text", "category", "trace_id", "namespace", "note_class"),
    "qrels": (),
    "accesses": ("actor",),
    "retrieved": (),
}

# First float magnitude at which floats no longer hold every integer: 2**53 + 1
# reads as 2**53, so an id given as a float from there on may not be the id
# that was written.
_FLOAT_EXACT_INT = 2.0 ** 53


@dataclass(frozen=True, eq=False)
class Stream:
    """A replayable workload, validated and in canonical form.

    Attributes
    ----------
    notes : DataFrame
        One row per note, sorted by ``note_id``; row ``i`` is row ``i`` of
        ``note_embeddings``. Required columns ``note_id`` (int64),
        ``created_at`` (float64 days, may be negative), ``tokens`` (int64 > 0),
        ``actor`` (str); optional columns are filled from
        :data:`NOTE_DEFAULTS`, and ``updated_at`` (float64) from
        ``created_at``. Extra columns (a synthetic workload's
        ``note_class``, ``topic``, ``slot``) are kept and ignored by the engine.
    queries : DataFrame
        ``query_id`` (int64), ``t`` (float64 days), ``actor`` (str), optional
        ``budget_tokens`` (int64); sorted by ``(t, query_id)``; row ``i`` is
        row ``i`` of ``query_embeddings``.
    qrels : DataFrame
        ``query_id``, ``note_id``, ``gain`` (float, non-zero), sorted by
        ``(query_id, note_id)``.
    accesses : DataFrame
        Organic reads ``t``, ``note_id``, ``actor`` (possibly empty), sorted by
        ``(t, note_id)``.
    note_embeddings, query_embeddings : ndarray or None
        float32 arrays, one row per note / query.
    retrieved : DataFrame or None
        Optional logged rankings of a production system: ``query_id``,
        ``rank`` (from 1), ``note_id``, ``score`` (NaN when not logged),
        sorted by ``(query_id, rank)``.
    meta : dict
        ``name``, ``source`` and free-form provenance.

    Build one with :func:`make_stream` (which validates); constructing the
    class directly skips validation.
    """

    notes: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    accesses: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"t": pd.Series(dtype="float64"), "note_id": pd.Series(dtype="int64"),
             "actor": pd.Series(dtype="object")}
        )
    )
    note_embeddings: np.ndarray | None = None
    query_embeddings: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    retrieved: pd.DataFrame | None = None

    @property
    def n_notes(self) -> int:
        return len(self.notes)

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def embedding_dim(self) -> int | None:
        return None if self.note_embeddings is None else int(self.note_embeddings.shape[1])

    @property
    def name(self) -> str:
        return str(self.meta.get("name", "stream"))


#: the columns :func:`export_fingerprint` reads, per table (those present)
FINGERPRINT_COLUMNS = {
    "notes": ("note_id", "trace_id", "created_at"),
    "queries": ("query_id", "trace_id", "t"),
    "qrels": ("query_id", "note_id", "gain"),
}


def export_fingerprint(stream: Stream) -> dict[str, str]:
    """What an export of a run writes from its stream, hashed: per table of
    :data:`FINGERPRINT_COLUMNS`, the sha256 of those columns (the ids a
    TREC file names, the times that decide which notes exist when a query
    is asked, the gains its qrels grade), in the stream's canonical order.

    A run that replays a stream records it (``manifest.json``,
    ``stream_fingerprint``), and its exports refuse a stream whose
    fingerprint differs: another stream with the same note and query ids
    would otherwise be written in silence. The bytes hashed do not depend
    on how the stream was read: integers as int64, numbers as float64, text
    (a trace's own ids) as UTF-8, a missing id marked apart from any text.
    """
    out = {}
    for table, columns in FINGERPRINT_COLUMNS.items():
        frame = getattr(stream, table)
        h = hashlib.sha256()
        for name in columns:
            if name not in frame.columns:
                continue
            col = frame[name]
            h.update(f"\0{name}\0{len(col)}\0".encode())
            if name == "trace_id":
                h.update("\x1f".join("\x00" if pd.isna(v) else str(v)
                                       for v in col.tolist()).encode("utf-8", "surrogatepass"))
            elif pd.api.types.is_integer_dtype(col.dtype):
                h.update(col.to_numpy(np.int64).tobytes())
            else:
                h.update(col.to_numpy(np.float64).tobytes())
        out[table] = h.hexdigest()
    return out


# ---------------------------------------------------------------------------
# Error messages
# ---------------------------------------------------------------------------

def _show(value: Any) -> str:
    """A short, unambiguous rendering of an offending value for a message."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return "None"
    if value is pd.NA:
        return "<NA>"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    text = repr(value)
    if not isinstance(value, str) and not text.startswith(type(value).__name__):
        text = f"{type(value).__name__} {text}"  # e.g. "list [1]", "bytes b'x'"
    return text if len(text) <= 60 else text[:57] + "..."


class _Table:
    """Error reporting for one table: its label and how to name a row.

    ``context(row)`` gives the ids of a row, e.g. ``" (note_id 12)"``; it is
    set once the id columns have been parsed so that later messages can
    point at the note or query as well as at the row number.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.context: Callable[[int], str] = lambda row: ""

    def fail(self, message: str, *, column: str | None = None, row: int | None = None) -> NoReturn:
        parts = [self.label]
        if column is not None:
            parts.append(f"column {column!r}")
        if row is not None:
            parts.append(f"row {row}{self.context(row)}")
        raise StreamError(": ".join(parts + [message]))

    def fail_first(self, bad: np.ndarray, raw: pd.Series, column: str, rule: str) -> None:
        """Raise about the first ``True`` of ``bad``, if any."""
        hits = np.flatnonzero(bad)
        if hits.size:
            row = int(hits[0])
            self.fail(f"{column} must be {rule}, got {_show(raw.iloc[row])}",
                      column=column, row=row)


# ---------------------------------------------------------------------------
# Column parsers: each returns the canonical values and refuses, with the
# first offending row, anything that cannot be read without loss.
# ---------------------------------------------------------------------------

def _parse_number(raw: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Read a column as numbers.

    Returns ``(values, unreadable)``: ``values`` is an int or float ndarray
    (NaN where missing), ``unreadable`` marks cells that are present but are
    not numbers (text such as ``"abc"``, booleans, dates, objects).
    """
    n = len(raw)
    dtype = raw.dtype
    if pd.api.types.is_bool_dtype(dtype):
        # True/False as a number is a type mistake, not a lossless read.
        return np.zeros(n), np.ones(n, dtype=bool)
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        return raw.to_numpy(), np.zeros(n, dtype=bool)
    if _is_extension_number(dtype):
        # Nullable extension types (Int64, Float64, Arrow numbers).
        if pd.api.types.is_integer_dtype(dtype) and not raw.isna().any():
            return raw.to_numpy(dtype="int64" if dtype.kind == "i" else "uint64"), np.zeros(n, bool)
        return raw.to_numpy(dtype="float64", na_value=np.nan), np.zeros(n, dtype=bool)
    # Text, objects, categories, dates: go through the text form, so that "12"
    # and 12 read alike while True, dates and lists are unreadable.
    missing = raw.isna().to_numpy()
    text = raw.astype(object).astype(str)
    values = pd.to_numeric(text, errors="coerce")
    # "nan" is a number (NaN) in text form; other unparsed text is unreadable.
    said_nan = text.str.strip().str.lower().isin(["nan", "+nan", "-nan"]).to_numpy()
    unreadable = values.isna().to_numpy() & ~missing & ~said_nan
    out = values.to_numpy()
    if out.dtype.kind not in "iuf":  # pragma: no cover - to_numeric always gives numbers
        out = out.astype("float64")
    return out, unreadable


def _is_extension_number(dtype: Any) -> bool:
    """Pandas' nullable or Arrow-backed numbers (not numpy, bool or category)."""
    return (not isinstance(dtype, np.dtype) and not isinstance(dtype, pd.CategoricalDtype)
            and not pd.api.types.is_bool_dtype(dtype) and pd.api.types.is_numeric_dtype(dtype))


#: Largest ``tokens`` of a note and ``budget_tokens`` of a query: a store of
#: millions of notes must still sum its tokens in int64 without wrapping, and
#: no context holds a trillion tokens.
MAX_TOKENS = 2 ** 40


def exact_int64(raw: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a column as int64 without loss: floats are accepted when integral
    and below 2**53 in magnitude (where a float holds every integer exactly),
    never truncated or wrapped.

    Returns ``(values, bad, inexact)``: ``bad`` marks cells that are missing,
    not numbers (booleans included), not integral, or an unsigned int beyond
    int64; ``inexact`` marks integral floats of 2**53 or more in magnitude;
    ``values`` is 0 at both.
    """
    values, bad = _parse_number(raw)
    inexact = np.zeros(len(values), dtype=bool)
    if values.dtype.kind == "f":
        integral = np.isfinite(values) & (np.floor(values) == values)
        exact = integral & (np.abs(values) < _FLOAT_EXACT_INT)
        inexact = integral & ~exact
        bad = bad | ~integral
        values = np.where(exact, values, 0.0)
    elif values.dtype.kind == "u":
        ok = values <= np.iinfo(np.int64).max
        bad = bad | ~ok
        values = np.where(ok, values, 0)
    return values.astype(np.int64, copy=False), bad, inexact


def _int_column(t: _Table, raw: pd.Series, column: str, *, positive: bool = False,
                maximum: int | None = None) -> np.ndarray:
    """An int64 column read by :func:`exact_int64`, its first bad row refused."""
    out, bad, inexact = exact_int64(raw)  # (the table built from it copies it)
    if positive:
        bad = bad | (out <= 0)
    _fail_inexact_first(t, bad, inexact, raw, column)
    hits = np.flatnonzero(bad)
    if hits.size and _beyond_int64(raw.iloc[int(hits[0])]):
        # an integer, but not one memsim's columns hold
        t.fail_first(bad, raw, column, "an integer within 64 bits (-2**63 to 2**63 - 1)")
    t.fail_first(bad, raw, column, "a positive integer" if positive else "an integer")
    if maximum is not None:
        t.fail_first(out > maximum, raw, column, f"at most {maximum:,}")
    return out


def _beyond_int64(value: Any) -> bool:
    """Whether ``value`` (a cell) is an integer, written without a fraction,
    outside int64."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return not -2 ** 63 <= int(value) < 2 ** 63
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return not -2 ** 63 <= int(value) < 2 ** 63
    return False


def _fail_inexact_first(t: _Table, bad: np.ndarray, inexact: np.ndarray, raw: pd.Series,
                        column: str) -> None:
    """Raise about a float too large to be an exact integer when it is the
    first offending row (otherwise the usual message names the first row)."""
    hits = np.flatnonzero(bad | inexact)
    if hits.size and inexact[hits[0]]:
        t.fail_first(inexact, raw, column,
                     "an integer below 2**53 in magnitude when given as a float "
                     "(larger floats do not hold every integer exactly)")


def _float_column(t: _Table, raw: pd.Series, column: str, rule: str, *,
                  nan_ok: bool = False, posinf_ok: bool = False,
                  minimum: float | None = None) -> np.ndarray:
    """A float64 column: finite unless NaN / +inf are allowed, ``>= minimum``."""
    values, bad = _parse_number(raw)
    values = values.astype(np.float64, copy=False)  # the table built from it copies it
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(values)
        if nan_ok:
            ok |= np.isnan(values)
        if posinf_ok:
            ok |= values == np.inf
        if minimum is not None:
            ok &= ~(values < minimum)
    t.fail_first(bad | ~ok, raw, column, rule)
    return values


def _bool_column(t: _Table, raw: pd.Series, column: str) -> np.ndarray:
    """A bool column: True/False, 1/0, or the text true/false/1/0 (any case)."""
    dtype = raw.dtype
    missing = raw.isna().to_numpy()
    if pd.api.types.is_bool_dtype(dtype):
        out = raw.to_numpy(dtype=bool, na_value=False)
        bad = missing
    elif (isinstance(dtype, np.dtype) and dtype.kind in "iuf") or _is_extension_number(dtype):
        values = raw.to_numpy(dtype="float64", na_value=np.nan)
        bad = ~np.isin(values, (0.0, 1.0))
        out = values == 1.0
    else:
        text = raw.astype(object).astype(str).str.strip().str.lower()
        out = text.isin(["true", "1"]).to_numpy()
        bad = ~(out | text.isin(["false", "0"]).to_numpy())
    t.fail_first(bad | missing, raw, column, "true or false")
    return out


def _str_column(t: _Table, raw: pd.Series, column: str, *, missing_as: str | None = None) -> pd.Series:
    """A text column. Integer columns (actor ids 1, 2, 3) read losslessly as
    text; floats, booleans and objects do not. Missing cells are refused unless
    ``missing_as`` gives their value."""
    dtype = raw.dtype
    missing = raw.isna().to_numpy()
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        bad = np.zeros(len(raw), dtype=bool)
    elif isinstance(dtype, pd.StringDtype):
        bad = np.zeros(len(raw), dtype=bool)
    elif (isinstance(dtype, np.dtype) and dtype.kind == "O") or isinstance(dtype, pd.CategoricalDtype):
        values = raw.astype(object)
        if pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty", "integer"):
            bad = np.zeros(len(raw), dtype=bool)  # the common case, decided in C
        else:
            # Some cell is not text; finding which one looks at each cell,
            # but only on this error path.
            bad = ~missing & ~values.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    else:
        bad = ~missing  # floats, bools, dates
    if missing_as is None:
        bad = bad | missing
    t.fail_first(bad, raw, column, "a string")
    # Canonical text dtype: pandas' own string dtype ("str"), on a fresh index.
    if isinstance(dtype, pd.StringDtype) and dtype == pd.StringDtype(na_value=np.nan):
        out = raw.reset_index(drop=True).copy()
    else:
        out = pd.Series(raw.to_numpy(dtype=object), dtype=object).astype(str)
    if missing_as is not None and missing.any():
        out = out.where(~missing, missing_as)
    return out


def _check_unique(t: _Table, ids: np.ndarray, column: str) -> None:
    if ids.size < 2 or bool((ids[1:] > ids[:-1]).all()):
        return  # increasing ids (a generator's, a sorted file's) need no hash table
    dup = pd.Series(ids).duplicated(keep="first").to_numpy()
    hits = np.flatnonzero(dup)
    if hits.size:
        row = int(hits[0])
        first = int(np.flatnonzero(ids == ids[row])[0])
        t.fail(f"duplicate {column} {ids[row]} (first at row {first})", column=column, row=row)


# ---------------------------------------------------------------------------
# Table checks
# ---------------------------------------------------------------------------

def _frame(t: _Table, frame: Any, name: str, required: tuple[str, ...]) -> pd.DataFrame:
    """Check the shape of a table: a DataFrame, string column names, no
    duplicate names, every required column present."""
    if not isinstance(frame, pd.DataFrame):
        t.fail(f"expected a pandas DataFrame for {name}, got {type(frame).__name__}")
    names = list(frame.columns)
    odd = [c for c in names if not isinstance(c, str)]
    if odd:
        t.fail(f"column names must be strings, got {_show(odd[0])}")
    dups = frame.columns[frame.columns.duplicated()]
    if len(dups):
        t.fail("column appears more than once", column=str(dups[0]))
    if len(frame) == 0 and len(names) == 0:
        # An empty table with no header stands for the empty table.
        return pd.DataFrame({c: pd.Series(dtype=object) for c in required})
    for col in required:
        if col not in frame.columns:
            present = ", ".join(names) if names else "none"
            t.fail(f"required column is missing (columns present: {present})", column=col)
    return frame.reset_index(drop=True)


def _extras(frame: pd.DataFrame, known: tuple[str, ...]) -> dict[str, pd.Series]:
    return {c: frame[c] for c in frame.columns if c not in known}


def _check_notes(t: _Table, frame: Any) -> pd.DataFrame:
    frame = _frame(t, frame, "notes", ("note_id", "created_at", "tokens", "actor"))
    ids = _int_column(t, frame["note_id"], "note_id")
    _check_unique(t, ids, "note_id")
    t.context = lambda row: f" (note_id {ids[row]})"
    out: dict[str, Any] = {"note_id": ids}
    created = _float_column(t, frame["created_at"], "created_at", "a finite number of days")
    out["created_at"] = created
    if "updated_at" in frame.columns:
        upd = _float_column(t, frame["updated_at"], "updated_at",
                            "a finite number of days (NaN: never updated)", nan_ok=True)
        before = upd < created  # NaN compares False: it is filled below
        t.fail_first(before, frame["updated_at"], "updated_at",
                     "NaN or >= created_at " + _show_created(created, before))
        out["updated_at"] = np.where(np.isnan(upd), created, upd)
    else:
        out["updated_at"] = created.copy()
    out["tokens"] = _int_column(t, frame["tokens"], "tokens", positive=True, maximum=MAX_TOKENS)
    out["actor"] = _str_column(t, frame["actor"], "actor")
    out["tier"] = (_str_column(t, frame["tier"], "tier") if "tier" in frame.columns
                   else _const_text(NOTE_DEFAULTS["tier"], len(frame)))
    for col in ("importance", "salience"):
        out[col] = (_float_column(t, frame[col], col, "a finite number >= 0", minimum=0.0)
                    if col in frame.columns else np.full(len(frame), NOTE_DEFAULTS[col]))
    out["memory_type"] = (_str_column(t, frame["memory_type"], "memory_type")
                          if "memory_type" in frame.columns
                          else _const_text(NOTE_DEFAULTS["memory_type"], len(frame)))
    out["pinned"] = (_bool_column(t, frame["pinned"], "pinned") if "pinned" in frame.columns
                     else np.zeros(len(frame), dtype=bool))
    if "expires_at" in frame.columns:
        exp = _float_column(t, frame["expires_at"], "expires_at",
                            "a number of days or NaN (never)", nan_ok=True, posinf_ok=True)
        before = exp < created
        t.fail_first(before, frame["expires_at"], "expires_at",
                     "NaN (never) or >= created_at " + _show_created(created, before))
        out["expires_at"] = exp
    else:
        out["expires_at"] = np.full(len(frame), np.nan)
    if "text" in frame.columns:
        out["text"] = _str_column(t, frame["text"], "text", missing_as="")
    return _assemble(out, frame, _NOTE_COLUMNS)


def _const_text(value: str, n: int) -> pd.Series:
    return pd.Series(value, index=pd.RangeIndex(n), dtype=str)


def _show_created(created: np.ndarray, bad: np.ndarray) -> str:
    hits = np.flatnonzero(bad)
    return f"({_show(created[hits[0]])})" if hits.size else ""


def _check_queries(t: _Table, frame: Any) -> pd.DataFrame:
    frame = _frame(t, frame, "queries", ("query_id", "t", "actor"))
    ids = _int_column(t, frame["query_id"], "query_id")
    _check_unique(t, ids, "query_id")
    t.context = lambda row: f" (query_id {ids[row]})"
    out: dict[str, Any] = {"query_id": ids,
                           "t": _float_column(t, frame["t"], "t", "a finite number of days"),
                           "actor": _str_column(t, frame["actor"], "actor")}
    if "budget_tokens" in frame.columns:
        out["budget_tokens"] = _int_column(t, frame["budget_tokens"], "budget_tokens",
                                           positive=True, maximum=MAX_TOKENS)
    return _assemble(out, frame, _QUERY_COLUMNS)


def _check_known(t: _Table, ids: np.ndarray, known: np.ndarray, column: str,
                 label: str) -> None:
    """Refuse, at its first row, an id that is not among ``known`` (of ``label``)."""
    unknown = ~np.isin(ids, known)
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        t.fail(f"{column} {ids[row]} is not in {label}", column=column, row=row)


def _check_unique_pairs(t: _Table, qid: np.ndarray, other: np.ndarray, column: str) -> None:
    """Refuse the first row whose ``(query_id, column)`` pair came earlier."""
    row = _first_repeat(qid, other)
    if row is not None:
        first = int(np.flatnonzero((qid == qid[row]) & (other == other[row]))[0])
        t.fail(f"duplicate (query_id, {column}) pair (first at row {first})", column=column,
               row=row)


def _first_repeat(a: np.ndarray, b: np.ndarray) -> int | None:
    """The first row whose ``(a, b)`` pair appeared on an earlier row, or None.

    The same row as ``DataFrame.duplicated(keep="first")`` flags first, by a
    stable sort of the pairs: about half the temporary memory, which matters
    on the millions of rows a production log's rankings hold.
    """
    if len(a) < 2:
        return None
    order = np.lexsort((b, a))  # stable: equal pairs keep their row order
    same = (a[order[1:]] == a[order[:-1]]) & (b[order[1:]] == b[order[:-1]])
    return int(order[1:][same].min()) if same.any() else None


def _check_qrels(t: _Table, frame: Any, note_ids: np.ndarray, query_ids: np.ndarray,
                 notes_label: str, queries_label: str) -> pd.DataFrame:
    frame = _frame(t, frame, "qrels", _QREL_COLUMNS)
    qid = _int_column(t, frame["query_id"], "query_id")
    nid = _int_column(t, frame["note_id"], "note_id")
    t.context = lambda row: f" (query_id {qid[row]}, note_id {nid[row]})"
    _check_known(t, qid, query_ids, "query_id", queries_label)
    _check_known(t, nid, note_ids, "note_id", notes_label)
    _check_unique_pairs(t, qid, nid, "note_id")
    gain = _float_column(t, frame["gain"], "gain", "a finite non-zero number")
    t.fail_first(gain == 0.0, frame["gain"], "gain", "a finite non-zero number")
    return _assemble({"query_id": qid, "note_id": nid, "gain": gain}, frame, _QREL_COLUMNS)


def _check_accesses(t: _Table, frame: Any, note_ids: np.ndarray, notes_label: str) -> pd.DataFrame:
    frame = _frame(t, frame, "accesses", _ACCESS_COLUMNS)
    nid = _int_column(t, frame["note_id"], "note_id")
    t.context = lambda row: f" (note_id {nid[row]})"
    times = _float_column(t, frame["t"], "t", "a finite number of days")
    _check_known(t, nid, note_ids, "note_id", notes_label)
    actor = _str_column(t, frame["actor"], "actor")
    return _assemble({"t": times, "note_id": nid, "actor": actor}, frame, _ACCESS_COLUMNS)


def _check_retrieved(t: _Table, frame: Any, note_ids: np.ndarray, query_ids: np.ndarray,
                     notes_label: str, queries_label: str) -> pd.DataFrame:
    frame = _frame(t, frame, "retrieved", ("query_id", "rank", "note_id"))
    qid = _int_column(t, frame["query_id"], "query_id")
    nid = _int_column(t, frame["note_id"], "note_id")
    t.context = lambda row: f" (query_id {qid[row]}, note_id {nid[row]})"
    _check_known(t, qid, query_ids, "query_id", queries_label)
    rank = _int_column(t, frame["rank"], "rank", positive=True)
    _check_known(t, nid, note_ids, "note_id", notes_label)
    _check_unique_pairs(t, qid, rank, "rank")
    _check_unique_pairs(t, qid, nid, "note_id")
    score = (_float_column(t, frame["score"], "score", "a finite number or NaN (not logged)",
                           nan_ok=True)
             if "score" in frame.columns else np.full(len(frame), np.nan))
    return _assemble({"query_id": qid, "rank": rank, "note_id": nid, "score": score}, frame,
                     _RETRIEVED_COLUMNS)


class LoggedRankings:
    """A stream's logged rankings (the optional ``retrieved`` table), looked
    up by stream row: what the ``as-logged`` ranker reads.

    Parameters
    ----------
    stream : Stream
        With a ``retrieved`` table.
    """

    def __init__(self, stream: Stream):
        r = stream.retrieved if stream.retrieved is not None else pd.DataFrame(
            {c: pd.Series(dtype="float64") for c in _RETRIEVED_COLUMNS})
        qrow = pd.Index(stream.queries["query_id"].to_numpy()).get_indexer(
            r["query_id"].to_numpy(np.int64))
        nrow = pd.Index(stream.notes["note_id"].to_numpy()).get_indexer(
            r["note_id"].to_numpy(np.int64))
        order = np.lexsort((nrow, qrow))
        self.n_notes = len(stream.notes)
        self.qrow = qrow[order].astype(np.int64)
        self.nrow = nrow[order].astype(np.int64)
        self.rank = r["rank"].to_numpy(np.float64)[order]
        self.score = r["score"].to_numpy(np.float64)[order]

    def dense(self, qrows: np.ndarray, note_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rank, score)``, each (Q, L) for the query rows ``qrows`` and the
        note rows ``note_rows``: the logged rank (from 1; ``inf`` where the
        note was not returned) and score (NaN where not returned or not
        logged)."""
        qrows = np.asarray(qrows, dtype=np.int64)
        note_rows = np.asarray(note_rows, dtype=np.int64)
        rank = np.full((len(qrows), len(note_rows)), np.inf)
        score = np.full((len(qrows), len(note_rows)), np.nan)
        lo = np.searchsorted(self.qrow, qrows, side="left")
        hi = np.searchsorted(self.qrow, qrows, side="right")
        if not (hi > lo).any():
            return rank, score
        col = np.full(self.n_notes, -1, dtype=np.int64)
        col[note_rows] = np.arange(len(note_rows))
        counts = hi - lo
        take = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])
        qi = np.repeat(np.arange(len(qrows)), counts)
        ci = col[self.nrow[take]]
        keep = ci >= 0
        rank[qi[keep], ci[keep]] = self.rank[take[keep]]
        score[qi[keep], ci[keep]] = self.score[take[keep]]
        return rank, score


def _assemble(columns: dict[str, Any], frame: pd.DataFrame, known: tuple[str, ...]) -> pd.DataFrame:
    """Documented columns in canonical order and dtype, then extras as given."""
    index = pd.RangeIndex(len(frame))
    # copy=False: the DataFrame below copies every column once; a Series
    # copy first would hold each table twice while it is built
    data = {k: (v if isinstance(v, pd.Series) else pd.Series(v, index=index, copy=False))
            for k, v in columns.items()}
    # Extras share the RangeIndex: the frame was reset by _frame.
    data.update(_extras(frame, known))
    return pd.DataFrame(data, index=index)


#: Values of an embedding matrix checked at a time (its rows in blocks).
_FINITE_BLOCK = 1 << 24


def _check_embeddings(t: _Table, arr: Any, rows: int, owner_label: str) -> np.ndarray:
    """A finite float32 matrix with one row per note / query."""
    if not isinstance(arr, np.ndarray):
        t.fail(f"expected a numpy array, got {type(arr).__name__}")
    if arr.dtype.kind not in "iuf":
        t.fail(f"expected a numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        t.fail(f"expected a 2-d array (rows x dimensions), got shape {arr.shape}")
    if arr.shape[0] != rows:
        t.fail(f"has {arr.shape[0]} rows but {owner_label} has {rows} rows "
               f"(row i is the embedding of row i of {owner_label})")
    if arr.shape[1] < 1:
        t.fail(f"has dimension 0 (shape {arr.shape})")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(arr, dtype=np.float32)
    # a block of rows at a time: a mask of the whole matrix would be a
    # quarter of its size again
    step = max(1, _FINITE_BLOCK // out.shape[1])
    for start in range(0, out.shape[0], step):
        finite = np.isfinite(out[start:start + step])
        if not finite.all():
            row, dim = (int(i) for i in np.argwhere(~finite)[0])
            row += start
            t.fail(f"dimension {dim}: embedding values must be finite as float32, "
                   f"got {_show(arr[row, dim])}", row=row)
    return out


def _checked(notes: Any, queries: Any, qrels: Any, accesses: Any, note_embeddings: Any,
             query_embeddings: Any, where: dict | None, retrieved: Any = None) -> tuple:
    """Validate and convert every table; return canonical but unsorted parts."""
    labels = {k: k for k in _TABLES}  # what a message about the table starts with
    names = dict(labels)  # how a message about another table names it
    if where:
        unknown = set(where) - set(_TABLES)
        if unknown:
            raise ValueError(f"where: unknown table(s) {sorted(unknown)}; known: {_TABLES}")
        for k, v in where.items():
            if isinstance(v, os.PathLike):
                # a file of a stream folder: by its path, and by its name where
                # the message already starts with the folder
                labels[k], names[k] = os.fspath(v), Path(v).name
            else:
                labels[k] = names[k] = str(v)
    t_notes = _Table(labels["notes"])
    notes_c = _check_notes(t_notes, notes)
    queries_c = _check_queries(_Table(labels["queries"]), queries)
    note_ids = notes_c["note_id"].to_numpy()
    query_ids = queries_c["query_id"].to_numpy()
    qrels_c = _check_qrels(_Table(labels["qrels"]), qrels, note_ids, query_ids,
                           names["notes"], names["queries"])
    accesses_c = (None if accesses is None else
                  _check_accesses(_Table(labels["accesses"]), accesses, note_ids, names["notes"]))
    if (note_embeddings is None) != (query_embeddings is None):
        given, lacking = (("note_embeddings", "query_embeddings") if query_embeddings is None
                          else ("query_embeddings", "note_embeddings"))
        _Table(labels[lacking]).fail(f"missing while {names[given]} is given "
                                     "(give embeddings for both notes and queries, or neither)")
    ne = qe = None
    if note_embeddings is not None:
        tn = _Table(labels["note_embeddings"])
        tn.context = lambda row: f" (note_id {note_ids[row]})"
        ne = _check_embeddings(tn, note_embeddings, len(notes_c), names["notes"])
        tq = _Table(labels["query_embeddings"])
        tq.context = lambda row: f" (query_id {query_ids[row]})"
        # Check the dimension before the values: a shape mismatch is the
        # likelier mistake and the clearer message.
        if isinstance(query_embeddings, np.ndarray) and query_embeddings.ndim == 2 \
                and query_embeddings.shape[1] != ne.shape[1]:
            tq.fail(f"has dimension {query_embeddings.shape[1]} but {names['note_embeddings']} "
                    f"has dimension {ne.shape[1]}")
        qe = _check_embeddings(tq, query_embeddings, len(queries_c), names["queries"])
    if retrieved is not None:
        retrieved_c = _check_retrieved(_Table(labels["retrieved"]), retrieved, note_ids,
                                       query_ids, names["notes"], names["queries"])
        return notes_c, queries_c, qrels_c, accesses_c, ne, qe, retrieved_c
    return notes_c, queries_c, qrels_c, accesses_c, ne, qe


def validate_frames(
    notes: pd.DataFrame,
    queries: pd.DataFrame,
    qrels: pd.DataFrame,
    accesses: pd.DataFrame | None = None,
    note_embeddings: np.ndarray | None = None,
    query_embeddings: np.ndarray | None = None,
    *,
    where: dict | None = None,
    retrieved: pd.DataFrame | None = None,
) -> None:
    """Check stream tables without building a :class:`Stream`.

    Parameters
    ----------
    notes, queries, qrels, accesses : DataFrame
        The tables of the stream format; ``accesses`` may be None.
    note_embeddings, query_embeddings : ndarray or None
        One row per row of ``notes`` / ``queries``, in the order given.
    where : dict, optional
        Label of each table in messages, keyed by ``"notes"``, ``"queries"``,
        ``"qrels"``, ``"accesses"``, ``"note_embeddings"``,
        ``"query_embeddings"``, ``"retrieved"`` (e.g. ``{"notes":
        "notes.parquet"}``); the default label is the key itself. A
        :class:`~pathlib.Path` labels the table by the path and is named
        by its file name in messages about the other tables (the message
        already starts with the folder).
    retrieved : DataFrame, optional
        Logged rankings (module docstring, "Optional table ``retrieved``").

    Raises
    ------
    StreamError
        On the first problem found, with one message naming the table, the
        column and the row (counted from 0 in the order given).
    """
    _checked(notes, queries, qrels, accesses, note_embeddings, query_embeddings, where,
             retrieved)


def make_stream(
    notes: pd.DataFrame,
    queries: pd.DataFrame,
    qrels: pd.DataFrame,
    accesses: pd.DataFrame | None = None,
    note_embeddings: np.ndarray | None = None,
    query_embeddings: np.ndarray | None = None,
    meta: dict | None = None,
    *,
    where: dict | None = None,
    retrieved: pd.DataFrame | None = None,
    copy: bool = True,
) -> Stream:
    """Validate frames and build a canonical :class:`Stream`.

    Optional note columns are filled with their defaults (:data:`NOTE_DEFAULTS`;
    ``updated_at`` from ``created_at``), dtypes are cast losslessly, notes are
    sorted by ``note_id`` and queries by ``(t, query_id)`` (embedding rows
    follow their rows), qrels by ``(query_id, note_id)`` and accesses by
    ``(t, note_id)``. The inputs are not modified.

    Parameters
    ----------
    notes, queries, qrels, accesses, note_embeddings, query_embeddings
        See :func:`validate_frames`.
    meta : dict, optional
        ``name``, ``source`` and free-form provenance (copied).
    where : dict, optional
        Labels of the tables in error messages (see :func:`validate_frames`).
    retrieved : DataFrame, optional
        Logged rankings of a production system (``query_id``, ``rank``,
        ``note_id``, optional ``score``); sorted by ``(query_id, rank)``.
    copy : bool, default True
        False: the stream may keep the embedding arrays given, rather than a
        copy, where they already are C-contiguous float32 rows in canonical
        order; for a caller that hands its arrays over and drops them (the
        synthetic generator), so that the largest arrays are not held twice.

    Returns
    -------
    Stream

    Raises
    ------
    StreamError
        If any table is malformed (see :func:`validate_frames`).
    """
    if meta is not None and not isinstance(meta, dict):
        raise StreamError(f"meta: expected a dict, got {type(meta).__name__}")
    checked = _checked(notes, queries, qrels, accesses, note_embeddings, query_embeddings,
                       where, retrieved)
    notes, queries, qrels, accesses, note_embeddings, query_embeddings = checked[:6]
    if retrieved is not None:
        retrieved = (checked[6].sort_values(["query_id", "rank"], kind="stable")
                     .reset_index(drop=True))
    order = np.argsort(notes["note_id"].to_numpy(), kind="stable")
    notes, note_embeddings = _reorder(notes, note_embeddings, order, copy)
    qorder = np.lexsort((queries["query_id"].to_numpy(), queries["t"].to_numpy()))
    queries, query_embeddings = _reorder(queries, query_embeddings, qorder, copy)
    qrels = qrels.sort_values(["query_id", "note_id"], kind="stable").reset_index(drop=True)
    if accesses is None:
        accesses = _empty_accesses()
    else:
        accesses = accesses.sort_values(["t", "note_id"], kind="stable").reset_index(drop=True)
    return Stream(notes=notes, queries=queries, qrels=qrels, accesses=accesses,
                  note_embeddings=note_embeddings, query_embeddings=query_embeddings,
                  meta=dict(meta or {}), retrieved=retrieved)


def _reorder(frame: pd.DataFrame, emb: np.ndarray | None, order: np.ndarray,
             copy: bool) -> tuple[pd.DataFrame, np.ndarray | None]:
    """Rows (and embedding rows) in ``order``. A table already in order is
    kept (it is the checks' own new table); embeddings already in order are
    copied only if ``copy``."""
    if bool((order == np.arange(order.size)).all()):
        return frame, (emb.copy() if copy and emb is not None else emb)
    frame = frame.iloc[order].reset_index(drop=True)
    return frame, (None if emb is None else np.ascontiguousarray(emb[order]))


def _empty_accesses() -> pd.DataFrame:
    return pd.DataFrame({"t": pd.Series(dtype="float64"), "note_id": pd.Series(dtype="int64"),
                         "actor": pd.Series(dtype=str)})


# ---------------------------------------------------------------------------
# Disk
# ---------------------------------------------------------------------------

_REQUIRED_FILES = ("notes", "queries", "qrels")


def _table_file(folder: Path, table: str, required: bool) -> Path | None:
    """``table.parquet`` or ``table.csv``; both present is ambiguous."""
    pq, csv = folder / f"{table}.parquet", folder / f"{table}.csv"
    if pq.exists() and csv.exists():
        raise StreamError(f"{folder}: both {pq.name} and {csv.name} exist; keep one")
    if pq.exists():
        return pq
    if csv.exists():
        return csv
    if required:
        raise StreamError(f"{pq}: missing from the stream folder ({csv.name} is also "
                          "accepted)")
    return None


def _read_table(path: Path, table: str) -> pd.DataFrame:
    if not path.is_file():
        raise StreamError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise StreamError(f"{path}: file is empty")
    header = check_csv_shape(path) if path.suffix == ".csv" else []
    try:
        if path.suffix == ".csv":
            text_cols = {c: str for c in _STR_COLUMNS[table]}
            # Only an empty cell is missing: an actor called "NA" or "null"
            # stays text; numeric "nan" is still read as NaN by the checks.
            # An empty actor, tier or memory type is the empty text, as in
            # Parquet (they cannot be missing): a valid stream written as
            # CSV reads back. index_col=False: never take the first column
            # as an index (the shape check has already refused rows longer
            # than the header).
            return pd.read_csv(path, dtype=text_cols, keep_default_na=False,
                               na_values={c: [""] for c in header if c not in _EMPTY_IS_TEXT},
                               index_col=False)
        return pd.read_parquet(path)
    except Exception as exc:  # any reader failure means the file is unreadable
        raise StreamError(f"{path}: cannot be read as "
                          f"{'CSV' if path.suffix == '.csv' else 'Parquet'}: {exc}") from exc


#: Largest CSV field the shape check reads: the csv module's default (128 KiB)
#: is below a long note's text, which pandas reads without a limit.
_CSV_FIELD_LIMIT = 2 ** 31 - 1


def check_csv_shape(path: Path) -> list[str]:
    """Refuse a CSV whose header repeats a name or that has a row with more or
    fewer fields than the header (a trailing comma is one field more);
    return the header's names.

    pandas would hide both: it renames a repeated ``tokens`` to ``tokens.1``,
    fills a short row with NaN, and drops a row's extra fields or shifts its
    columns into the index. So the file is read once with the csv module
    first, which sees the fields as written. Blank lines are skipped and not
    counted as rows, as pandas does.
    """
    t = _Table(str(path))
    limit = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        # utf-8-sig: a byte order mark is not part of the first name (pandas agrees)
        with open(path, newline="", encoding="utf-8-sig") as f:
            records = csv.reader(f)
            header = next((r for r in records if not _blank_record(r)), [])
            _check_csv_header(t, header)
            width, start, blanks = len(header), records.line_num + 1, 0
            for i, fields in enumerate(records):
                if len(fields) != width:  # the only test on the common path
                    if _blank_record(fields):
                        blanks += 1
                    else:
                        _fail_csv_width(t, header, fields, row=i - blanks, line=start)
                start = records.line_num + 1
        return header
    except UnicodeDecodeError as exc:
        raise StreamError(f"{path}: cannot be read as CSV: {_not_utf8(path, exc)}") from exc
    except (OSError, csv.Error) as exc:
        raise StreamError(f"{path}: cannot be read as CSV: {exc}") from exc
    finally:
        csv.field_size_limit(limit)


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8: its line, the byte and its place in
    the file (the decoder's own position counts from the chunk it read)."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as whole:
        at = whole.start
        line = raw.count(b"\n", 0, at) + 1
        return (f"line {line} is not UTF-8 (byte 0x{raw[at]:02x} at byte {at} of the file); "
                "save it as UTF-8")
    return str(exc)


def csv_line_of(path: Path, row: int) -> int | None:
    """The line of ``path`` where data row ``row`` starts (0-based, counted as
    pandas counts rows: blank lines skipped; a quoted field may span lines),
    for messages; None when the file cannot be read or has no such row.
    (:func:`check_csv_shape` counts rows and lines alike, inline: its common
    path is one test a row, a third faster than through a shared reader.)"""
    limit = csv.field_size_limit(_CSV_FIELD_LIMIT)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            records = csv.reader(f)
            start, seen = 1, -1  # -1: the header comes first
            for fields in records:
                if not _blank_record(fields):
                    if seen == row:
                        return start
                    seen += 1
                start = records.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    finally:
        csv.field_size_limit(limit)
    return None


def _blank_record(fields: list[str]) -> bool:
    """An empty or white-space-only line, which pandas skips."""
    return not fields or (len(fields) == 1 and not fields[0].strip(" \t"))


def _check_csv_header(t: _Table, header: list[str]) -> None:
    seen: set[str] = set()
    for name in header:
        if name in seen:
            t.fail("column appears more than once", column=name)
        seen.add(name)


def _fail_csv_width(t: _Table, header: list[str], fields: list[str], *, row: int,
                    line: int) -> NoReturn:
    t.context = lambda _: f" (line {line})"
    hint = (" (the last one is empty: a trailing comma?)"
            if len(fields) == len(header) + 1 and fields[-1] == "" else "")
    t.fail(f"has {len(fields)} fields but the header has {len(header)}{hint}", row=row)


def _read_npy(path: Path) -> np.ndarray:
    if not path.is_file():  # a folder by that name, say: not an array to read
        raise StreamError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise StreamError(f"{path}: file is empty")
    with open(path, "rb") as fh:
        head = fh.read(6)
    if head != b"\x93NUMPY" and not head.startswith(b"PK"):
        # numpy reads any other file as a pickle, and says so
        raise StreamError(f"{path}: not a .npy file (it does not start with the .npy "
                          "format's magic string)")
    try:
        # allow_pickle=False: a stream folder may come from anywhere, and
        # unpickling runs arbitrary code.
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise StreamError(f"{path}: cannot be read as a .npy array "
                          f"(object arrays are refused): {exc}") from exc
    if not isinstance(arr, np.ndarray):  # an .npz archive
        raise StreamError(f"{path}: expected a single .npy array, got an archive")
    return arr


def _read_header(folder: Path) -> dict:
    path = folder / "stream.json"
    if not path.exists():
        raise StreamError(f"{path}: missing from the stream folder")
    if not path.is_file():
        raise StreamError(f"{path}: not a file")
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StreamError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise StreamError(f"{path}: expected a JSON object, got {type(header).__name__}")
    if header.get("format") != FORMAT_NAME:
        raise StreamError(f"{path}: key 'format': expected {FORMAT_NAME!r}, "
                          f"got {_show(header.get('format'))}")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise StreamError(f"{path}: key 'version': expected a positive integer, "
                          f"got {_show(version)}")
    if version > FORMAT_VERSION:
        raise StreamError(f"{path}: format version {version} is newer than this memsim "
                          f"reads (version {FORMAT_VERSION}); upgrade memsim")
    if header.get("time_unit", "day") != "day":
        raise StreamError(f"{path}: key 'time_unit': expected 'day', "
                          f"got {_show(header.get('time_unit'))}")
    dim = header.get("embedding_dim")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise StreamError(f"{path}: key 'embedding_dim': expected a positive integer or "
                          f"null, got {_show(dim)}")
    return header


def read_stream(path: str | os.PathLike) -> Stream:
    """Read and validate a stream folder (``docs/contracts/stream.md``).

    Parameters
    ----------
    path : str or PathLike
        The folder holding ``stream.json``, ``notes``, ``queries`` and
        ``qrels`` (``.parquet`` or ``.csv``), optionally ``accesses``,
        ``retrieved`` and ``note_embeddings.npy`` / ``query_embeddings.npy``.

    Returns
    -------
    Stream
        Canonical and validated; ``meta`` holds the keys of ``stream.json``
        other than ``format``, ``version``, ``time_unit`` and
        ``embedding_dim`` (``name`` defaults to the folder name).

    Raises
    ------
    StreamError
        Missing folder or file, empty or unreadable file, a ``stream.json``
        of another format or a newer version, or malformed contents; the
        message names the file by its path (``path`` joined with the file
        name), the column and the row.
    """
    folder = Path(path)
    if not folder.exists():
        raise StreamError(f"stream folder not found: {folder}")
    if not folder.is_dir():
        raise StreamError(f"not a stream folder (it is a file): {folder}")
    header = _read_header(folder)
    files = {t: _table_file(folder, t, required=t in _REQUIRED_FILES)
             for t in ("notes", "queries", "qrels", "accesses", "retrieved")}
    frames = {t: (None if p is None else _read_table(p, t)) for t, p in files.items()}
    # Each file is named by its path (the folder as given, joined with the
    # file name): a user with several stream folders must see which one is
    # broken, whichever command read it.
    where: dict[str, Path] = {t: p for t, p in files.items() if p is not None}
    emb: dict[str, np.ndarray | None] = {}
    for t in ("note_embeddings", "query_embeddings"):
        p = folder / f"{t}.npy"
        emb[t] = _read_npy(p) if p.exists() else None
        where[t] = p
    dim = header.get("embedding_dim")
    if "embedding_dim" in header:
        actual = None if emb["note_embeddings"] is None else (
            emb["note_embeddings"].shape[1] if emb["note_embeddings"].ndim == 2 else None)
        if emb["note_embeddings"] is None and dim is not None:
            raise StreamError(f"{folder / 'stream.json'}: key 'embedding_dim' is {dim} but "
                              "note_embeddings.npy is missing")
        if emb["note_embeddings"] is not None and actual is not None and dim != actual:
            raise StreamError(f"{folder / 'stream.json'}: key 'embedding_dim' is {_show(dim)} "
                              f"but note_embeddings.npy has dimension {actual}")
    meta = {k: v for k, v in header.items()
            if k not in ("format", "version", "time_unit", "embedding_dim")}
    meta.setdefault("name", folder.resolve().name)
    return make_stream(frames["notes"], frames["queries"], frames["qrels"], frames["accesses"],
                       emb["note_embeddings"], emb["query_embeddings"], meta, where=where,
                       retrieved=frames["retrieved"])


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (Path, os.PathLike)):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _fsync(path: Path) -> None:
    """Flush a file or folder to disk so the rename publishes complete data."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. folders on some platforms
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - fsync unsupported on this filesystem
        pass
    finally:
        os.close(fd)


def _write_table(frame: pd.DataFrame, path: Path) -> None:
    try:
        frame.to_parquet(path, index=False)
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException) as exc:
        # e.g. an extra column of mixed Python objects that Arrow cannot type
        raise StreamError(f"{path.name}: cannot be written as Parquet: {exc}") from exc


def _write_npy(arr: np.ndarray, path: Path) -> None:
    np.save(path, arr, allow_pickle=False)


def check_stream_dest(path: str | os.PathLike) -> None:
    """Refuse a folder :func:`write_stream` could not write a stream to: an
    existing file, a non-empty folder, or a path that runs through a file
    (the user's mistake: a :class:`StreamError`, not an ``OSError``).
    Commands call it before the work that makes the stream."""
    dest = Path(path)
    if dest.exists():
        if not dest.is_dir():
            raise StreamError(f"refusing to write a stream over a file: {dest}")
        if any(dest.iterdir()):
            raise StreamError(f"refusing to overwrite non-empty folder: {dest}")
        return
    parent = file_in_the_way(dest.parent)
    if parent is not None:
        raise StreamError(f"cannot write a stream at {dest}: {parent} is a file")


def write_stream(stream: Stream, path: str | os.PathLike) -> Path:
    """Write a stream folder (``docs/contracts/stream.md``), atomically.

    Everything is written into a temporary sibling folder which is then
    renamed into place, so a reader never sees a half-written stream and a
    failure leaves nothing at ``path``.

    Parameters
    ----------
    stream : Stream
        Re-validated before writing (its frames are mutable).
    path : str or PathLike
        The folder to create. It may exist only as an empty folder; its parent
        is created if needed.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    StreamError
        If ``path`` exists and is a file or a non-empty folder, no folder
        can be made there (a read-only place), the stream is invalid, or
        ``meta`` or an extra column cannot be serialised.
    OSError
        If writing fails (a full disk), with ``path`` as its file name.
    """
    if not isinstance(stream, Stream):
        raise StreamError(f"write_stream: expected a Stream, got {type(stream).__name__}")
    dest = Path(path)
    canon = make_stream(stream.notes, stream.queries, stream.qrels, stream.accesses,
                        stream.note_embeddings, stream.query_embeddings, stream.meta,
                        retrieved=stream.retrieved)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "time_unit": "day",
              "embedding_dim": canon.embedding_dim, "name": canon.name,
              "source": canon.meta.get("source")}
    header.update({k: v for k, v in canon.meta.items() if k not in header})
    try:
        header_text = json.dumps(header, indent=2, default=_json_default, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StreamError(f"stream.json: meta cannot be written as JSON: {exc}") from exc
    check_stream_dest(dest)
    # A dot-named sibling on the same filesystem, so that the final rename is
    # atomic; os.mkdir (not mkdtemp) so the folder gets the usual permissions.
    tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex}"
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(tmp)
    except OSError as exc:  # a place no folder can be made (read-only, /proc): the path's fault
        raise StreamError(f"cannot write a stream at {dest}: {exc.strerror or exc}") from None
    try:
        (tmp / "stream.json").write_text(header_text + "\n", encoding="utf-8")
        _write_table(canon.notes, tmp / "notes.parquet")
        _write_table(canon.queries, tmp / "queries.parquet")
        _write_table(canon.qrels, tmp / "qrels.parquet")
        if len(canon.accesses):
            _write_table(canon.accesses, tmp / "accesses.parquet")
        if canon.retrieved is not None:
            _write_table(canon.retrieved, tmp / "retrieved.parquet")
        if canon.note_embeddings is not None:
            _write_npy(canon.note_embeddings, tmp / "note_embeddings.npy")
            _write_npy(canon.query_embeddings, tmp / "query_embeddings.npy")
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        try:
            # Replaces an empty folder at dest (POSIX); fails if someone filled
            # it in the meantime, which is the refusal we want.
            os.rename(tmp, dest)
        except OSError as exc:
            raise StreamError(f"cannot move the stream into place at {dest}: {exc}") from exc
        _fsync(dest.parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and str(tmp) in str(exc.filename or ""):
            # the environment (disk full): named by the folder asked for,
            # not the temporary one, which is gone
            raise OSError(exc.errno, exc.strerror or str(exc), str(dest)) from exc
        raise
    return dest


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------

def _num(x: float) -> str:
    """Compact number: integers without decimals, others to 4 significant digits."""
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    x = float(x)
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.4g}"


def stream_facts(stream: Stream) -> dict[str, Any]:
    """What ``memsim stream validate`` reports of a stream, as plain data
    (``memsim stream validate --json``; :func:`describe_stream` prints it).

    Keys: ``name``, ``source``, ``notes`` (note rows: versions of a logged
    note count once each), ``logged_notes`` (distinct logged ids),
    ``note_created`` ([first, last] days), ``note_actors``, ``tokens`` (min,
    median, p90, max, total), ``expiring``, ``pinned``, ``queries``,
    ``query_t`` ([first, last]), ``query_actors``, ``qrels``, ``relevant``,
    ``misleading``, ``relevant_per_query`` (mean, median, max),
    ``queries_without_relevant``, ``qrels_after_query`` (qrels naming a note
    created after its query), ``accesses``, ``embedding_dim`` (None without).
    """
    notes, queries, qrels, acc = stream.notes, stream.queries, stream.qrels, stream.accesses
    f: dict[str, Any] = {"name": stream.name, "source": stream.meta.get("source"),
                         "notes": int(len(notes)),
                         "logged_notes": int(notes["trace_id"].nunique()
                                             if "trace_id" in notes.columns else len(notes))}
    if len(notes):
        created = notes["created_at"].to_numpy()
        tok = notes["tokens"].to_numpy()
        q = np.quantile(tok, [0.5, 0.9])
        f.update(note_created=[float(created.min()), float(created.max())],
                 note_actors=int(notes["actor"].nunique()),
                 # min / max stay exact integers; the total is summed in float so
                 # that huge token counts (up to 2**63 each) cannot overflow
                 tokens={"min": int(tok.min()), "median": float(q[0]), "p90": float(q[1]),
                         "max": int(tok.max()), "total": float(tok.sum(dtype=np.float64))},
                 expiring=int(np.isfinite(notes["expires_at"].to_numpy()).sum()),
                 pinned=int(notes["pinned"].sum()))
    f["queries"] = int(len(queries))
    if len(queries):
        qt = queries["t"].to_numpy()
        f.update(query_t=[float(qt.min()), float(qt.max())],
                 query_actors=int(queries["actor"].nunique()))
    per_query = (qrels.loc[qrels["gain"] > 0, "query_id"].value_counts()
                 .reindex(queries["query_id"], fill_value=0).to_numpy())
    n_neg = int((qrels["gain"] < 0).sum())
    f.update(qrels=int(len(qrels)), relevant=int(len(qrels) - n_neg), misleading=n_neg)
    if len(queries):
        f.update(relevant_per_query={"mean": float(per_query.mean()),
                                     "median": float(np.median(per_query)),
                                     "max": int(per_query.max())},
                 queries_without_relevant=int((per_query == 0).sum()))
    future = 0
    if len(qrels):
        qt = pd.Series(queries["t"].to_numpy(), index=queries["query_id"].to_numpy())
        nc = pd.Series(notes["created_at"].to_numpy(), index=notes["note_id"].to_numpy())
        future = int((nc.reindex(qrels["note_id"]).to_numpy()
                      > qt.reindex(qrels["query_id"]).to_numpy()).sum())
    f.update(qrels_after_query=future, accesses=int(len(acc)),
             embedding_dim=None if stream.embedding_dim is None else int(stream.embedding_dim))
    return f


def describe_stream(stream: Stream) -> str:
    """A short human summary of a stream, as printed by ``memsim stream validate``.

    Parameters
    ----------
    stream : Stream

    Returns
    -------
    str
        Several lines: counts, time spans, token quantiles, actors, qrels per
        query, the share of queries with no relevant (``gain > 0``) note,
        qrels naming notes created after their query, accesses and embeddings
        (:func:`stream_facts` as text).
    """
    f = stream_facts(stream)
    lines = [f"stream {f['name']!r}" + (f" (source: {f['source']})" if f["source"] else "")]
    if f["notes"]:
        # a logged note that was updated is one row per version: say which count this is
        what = (f" (note versions, of {f['logged_notes']:,} logged notes)"
                if f["logged_notes"] != f["notes"] else "")
        (c0, c1), tok = f["note_created"], f["tokens"]
        lines.append(f"notes: {f['notes']:,}{what}, created {_num(c0)} .. {_num(c1)} days, "
                     f"{f['note_actors']:,} actors")
        lines.append(f"tokens per note: min {_num(tok['min'])}, median {_num(tok['median'])}, "
                     f"p90 {_num(tok['p90'])}, max {_num(tok['max'])}; "
                     f"total {_num(tok['total'])}")
        if f["expiring"] or f["pinned"]:
            lines.append(f"  expiring: {f['expiring']:,}, pinned: {f['pinned']:,}")
    else:
        lines.append("notes: 0")
    if f["queries"]:
        t0, t1 = f["query_t"]
        lines.append(f"queries: {f['queries']:,}, t {_num(t0)} .. {_num(t1)} days, "
                     f"{f['query_actors']:,} actors")
    else:
        lines.append("queries: 0")
    line = f"qrels: {f['qrels']:,} ({f['relevant']:,} relevant, {f['misleading']:,} misleading)"
    if f["queries"]:
        per, none = f["relevant_per_query"], f["queries_without_relevant"]
        line += (f"; relevant per query: mean {per['mean']:.2f}, "
                 f"median {_num(per['median'])}, max {_num(per['max'])}; "
                 f"queries with no relevant note: {none:,} ({none / f['queries']:.1%})")
    lines.append(line)
    if f["qrels_after_query"]:
        lines.append(f"  qrels naming a note created after its query: {f['qrels_after_query']:,}")
    lines.append(f"accesses: {f['accesses']:,}")
    dim = f["embedding_dim"]
    lines.append(f"embeddings: dimension {dim}" if dim is not None else "embeddings: none")
    return "\n".join(lines)
