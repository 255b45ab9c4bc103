"""LoCoMo: very long multi-session conversations, imported as a memsim stream.

Source
------
Maharana, Lee, Tulyakov, Bansal, Barbieri and Fang, "Evaluating Very
Long-Term Conversational Memory of LLM Agents", ACL 2024
(github.com/snap-research/locomo, ``data/locomo10.zip``). The data are
licensed CC BY-NC 4.0: a stream imported from them inherits the licence
(non-commercial use, with attribution), which is recorded in its ``meta``.

Inputs accepted
---------------
- the release zip (one JSON per conversation, named by the number of its
  sample id: ``26.json`` is ``conv-26``; sessions, observations, summaries and
  events are top-level keys: ``session_3``, ``session_3_date_time``,
  ``session_3_observation``, ``session_3_summary``, ``events_session_3``);
- the widely used ``locomo10.json``: a list of records with ``sample_id``,
  ``conversation`` (``speaker_a``, ``speaker_b``, ``session_N``,
  ``session_N_date_time``), ``qa``, ``observation``, ``session_summary``
  and ``event_summary``;
- a folder of such JSON files, or one record as a JSON object.

Both layouts are normalised to the second by :func:`load_locomo_records`, and
conversations are ordered by the number in their sample id, so both give the
same stream.

What is refused (one :class:`~memsim.core.errors.StreamError` naming the file,
the conversation and the session turn or ``qa`` item): a file with no record;
``notes="observations"`` or ``"summaries"`` of data that hold none (no note);
a session that is not a list of turns (an empty or null one is skipped); a
turn whose ``speaker`` or ``text`` is not a string; a turn ``dia_id`` that is
not one turn of its own session (``"D2:5"`` in session 1), or that an earlier
turn of the conversation has (evidence would land on two notes); a question
that is not a string; a ``category`` that is not an integer (2.7 is not read
as 2; ``"3"`` and 3.0 are 3; a missing one is 0); ``evidence`` that is neither
a list of strings nor a string (a missing or null one is no evidence). A
turn without ``dia_id`` is turn ``i + 1`` of its session.

How the stream is built (decisions)
-----------------------------------
Notes (``notes=``):

- ``"turns"`` (default): one note per dialogue turn (5,882 in LoCoMo-10).
  ``text = "<speaker>: <utterance>"`` (the speaker's name helps retrieval:
  questions name people). ``actor`` = speaker. With ``captions=True`` a turn
  that shared an image gets ``" [shares: <caption>]"`` (the data give a BLIP
  caption, not the image); off by default because it lowers the top-5
  figure below (0.556 against 0.564).
- ``"observations"``: the LLM-extracted facts of each session (2,541), with
  ``actor`` = the speaker they are about and ``dia_id`` = their source turns
  (comma-separated, normalised). A question's qrels are the observations
  whose sources include one of its evidence turns.
- ``"summaries"``: one note per session summary (272), ``actor`` =
  ``"summary"``; a question's qrels are the summaries of the sessions of its
  evidence turns.

Time, in float days, **per conversation**: 0 is the start of the
conversation's first session (conversations are separate stores, see
``namespace``, so they need no common clock, and ages are then comparable
across conversations). Session dates such as ``"1:56 pm on 8 May, 2023"``
are parsed to the minute; the turn at position ``i`` (from 0) of a session
is created at the session time plus ``i`` minutes (the data date sessions,
not turns). An observation is created with the latest of its source turns
(its session's start if none resolves); a summary one minute after the last
turn of its session.

Queries: every question, at 00:00 of the day after the last session of its
conversation (the data give no question time), ``actor = "user"``. Extra
columns: ``category`` as numbered in the data (5 = adversarial; 1-4 are
commonly read as multi-hop, temporal, open-domain, single-hop), ``text`` (the
question), ``answer``, ``adversarial_answer``, ``evidence`` (the normalised
references joined by ``";"``, unparseable ones kept as written) and
``qa_index`` (position in the conversation's ``qa`` list).

Namespaces: ``namespace`` = the conversation's sample id on notes and
queries, so the engine lets a question retrieve only from its conversation.

Qrels: gain 1 for each note named by a resolved evidence reference. The data
contain a few malformed references, normalised as follows: several ids in one
string (``"D8:6; D9:17"``, ``"D9:1 D4:4"``) are split on ``;``, ``,`` and
white space; a stray colon (``"D:11:26"``) and leading zeros (``"D30:05"``)
are dropped; a reference is *resolved* when the normalised ``D<session>:<turn>``
is a turn of the conversation. Counts are in ``meta["evidence"]``. On
LoCoMo-10: 2,824 references, 2,821 resolve (99.89%); 4 strings held several
ids and 2 were rewritten (``D:11:26``, ``D30:05``); the three that do not
resolve are ``"D"`` and two turns that do not exist (``D10:19`` in conv-42,
``D4:36`` in conv-47). Category-5 (adversarial, 446) questions get **no**
qrels even though the data list evidence for them: their right answer is an
abstention, which the per-query ``category`` column lets a report measure.
Four other questions have an empty evidence list, hence no qrels either.

Tokens: ``tokenizer="estimate"`` gives ``ceil(len(text) / 4)`` (about four
characters per token of English text with GPT-style BPE tokenisers);
``"words"`` gives ``ceil(4 * n_words / 3)`` (about 0.75 words per token); a
callable ``str -> int`` may be given instead. At least 1.

Embeddings: exact BM25 vectors (:mod:`memsim.data.lexical`, ``k1 = 1.2``,
``b = 0.75``, statistics per conversation) over the note ``text`` (which
starts with the speaker's name) and the question; no download, no
randomness. Cosine, dot product and squared L2 all rank a conversation's
notes as BM25 does. 1,571 dimensions for turns (the largest conversation
vocabulary plus one): 35 MiB of float32 for the notes, 12 MiB for the queries.
Measured on LoCoMo-10 turns, over the 1,536 answerable questions with
resolved evidence, ranking each question's conversation by cosine: an
evidence turn in the top 5 for 56.4% (top 10: 64.2%), all of the evidence in
the top 5 for 46.1% (top 10: 52.1%), mean share of the evidence in the top 5
50.5% (the data's README quotes about 47% for plain BM25;
``benchmarks/locomo_embedders.py`` prints these figures). TF-IDF + truncated SVD (LSA,
the other download-free option) did worse at every size tried: 48.5%, 53.1%
and 54.8% in the top 5 at 64, 128 and 256 dimensions. ``embedder="wordllama"``
(:mod:`memsim.data.embed`: WordLlama's 256-d dense vectors, from its wheel, no
download) does worse too: an evidence turn in the top 5 for 38.4% (top 10:
46.7%), all of it for 30.8% (top 10: 37.3%). Observations: 2,541
notes; 1,879 of the 2,360 answerable evidence turns have one. Summaries: 272.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.data.embed import EMBEDDERS, embed_texts
from memsim.core.errors import ConfigError, StreamError
from memsim.data.stream import Stream, make_stream, write_stream

__all__ = ["import_locomo", "cli_import_locomo", "load_locomo_records", "evidence_in_top",
           "parse_session_datetime", "parse_evidence", "NOTE_KINDS", "QUERY_ACTOR"]

NOTE_KINDS = ("turns", "observations", "summaries")
#: The actor of every question (the benchmark's questioner is nobody in the dialogue).
QUERY_ACTOR = "user"
SUMMARY_ACTOR = "summary"

CITATION = ("Maharana, Lee, Tulyakov, Bansal, Barbieri and Fang, \"Evaluating Very Long-Term "
            "Conversational Memory of LLM Agents\", ACL 2024")
LICENCE = "CC BY-NC 4.0"

_SESSION = re.compile(r"^session_(\d+)$")
_REF = re.compile(r"^D:?(\d+):(\d+)$")
_SPLIT = re.compile(r"[;,\s]+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %d %B %Y",
                 "%I:%M %p on %d %b %Y", "%H:%M on %d %B, %Y")


# ---------------------------------------------------------------------------
# Reading the records
# ---------------------------------------------------------------------------

def _sample_key(sample_id: str) -> tuple:
    """Order ``conv-26`` before ``conv-100``: by the text, then the number."""
    m = re.search(r"(\d+)\D*$", sample_id)
    return (sample_id[: m.start(1)] if m else sample_id, int(m.group(1)) if m else -1, sample_id)


def _nest(record: dict, label: str, stem: str) -> dict:
    """One record in the ``locomo10.json`` layout, from either layout."""
    if isinstance(record.get("conversation"), dict):
        out = dict(record)
        out.setdefault("sample_id", f"conv-{stem}" if stem.isdigit() else stem)
        for key in ("observation", "session_summary", "event_summary"):
            out.setdefault(key, {})
        out.setdefault("qa", [])
        return out
    if "speaker_a" in record and any(_SESSION.match(k) for k in record):
        # The zip's flat layout: sessions and their annotations at top level.
        conv = {k: v for k, v in record.items()
                if k in ("speaker_a", "speaker_b") or _SESSION.match(k)
                or (k.startswith("session_") and k.endswith("_date_time"))}
        return {
            "sample_id": record.get("sample_id") or (f"conv-{stem}" if stem.isdigit() else stem),
            "conversation": conv,
            "qa": record.get("qa", []),
            "observation": {k: v for k, v in record.items()
                            if k.startswith("session_") and k.endswith("_observation")},
            "session_summary": {k: v for k, v in record.items()
                                if k.startswith("session_") and k.endswith("_summary")},
            "event_summary": {k: v for k, v in record.items() if k.startswith("events_session_")},
        }
    raise StreamError(f"{label}: not a LoCoMo record (no 'conversation' and no "
                      "'speaker_a' with 'session_N' keys)")


def _records_from_json(data: Any, label: str, stem: str) -> list[dict]:
    if isinstance(data, list):
        out = []
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise StreamError(f"{label}: item {i} is a {type(rec).__name__}, "
                                  "expected a LoCoMo record (a JSON object)")
            out.append(_nest(rec, f"{label}: item {i}", f"{stem}-{i}"))
        return out
    if isinstance(data, dict):
        return [_nest(data, label, stem)]
    raise StreamError(f"{label}: expected a LoCoMo record or a list of records, "
                      f"got a JSON {type(data).__name__}")


def _parse_json(raw: bytes, label: str) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StreamError(f"{label}: not valid JSON: {exc}") from exc


def load_locomo_records(path: str | os.PathLike) -> list[dict]:
    """Read LoCoMo records in the ``locomo10.json`` layout.

    Parameters
    ----------
    path : str or PathLike
        The release zip, ``locomo10.json`` (a list of records), one record
        as a JSON object, or a folder of JSON files.

    Returns
    -------
    list of dict
        Records with ``sample_id``, ``conversation``, ``qa``,
        ``observation``, ``session_summary`` and ``event_summary``, ordered by
        the number in the sample id.

    Raises
    ------
    StreamError
        Missing or unreadable file, invalid JSON, a record of another shape,
        or two records with one sample id; the message names the file.
    """
    p = Path(path)
    if not p.exists():
        raise StreamError(f"LoCoMo data not found: {p}")
    records: list[dict] = []
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() == ".json")
        if not files:
            raise StreamError(f"{p}: no .json file in this folder")
        for f in files:
            records += _records_from_json(_parse_json(f.read_bytes(), str(f)), str(f), f.stem)
    elif zipfile.is_zipfile(p):
        try:
            with zipfile.ZipFile(p) as z:
                members = sorted(n for n in z.namelist()
                                 if n.lower().endswith(".json") and not n.endswith("/")
                                 and not Path(n).name.startswith("."))
                if not members:
                    raise StreamError(f"{p}: no .json file in this zip")
                for m in members:
                    label = f"{p}:{m}"
                    records += _records_from_json(_parse_json(z.read(m), label), label,
                                                  Path(m).stem)
        except (zipfile.BadZipFile, OSError) as exc:
            raise StreamError(f"{p}: cannot read the zip: {exc}") from exc
    else:
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise StreamError(f"{p}: cannot read: {exc}") from exc
        records = _records_from_json(_parse_json(raw, str(p)), str(p), p.stem)
    if not records:
        raise StreamError(f"{p}: no LoCoMo record in it (an empty list): nothing to import")
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        sid = str(r["sample_id"])
        if sid in seen:
            raise StreamError(f"{p}: sample_id {sid!r} appears twice")
        seen[sid] = i
    return sorted(records, key=lambda r: _sample_key(str(r["sample_id"])))


# ---------------------------------------------------------------------------
# Parsing helpers
# ---------------------------------------------------------------------------

def parse_session_datetime(text: str) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"``.

    Accepted: 12-hour time with am/pm (any case), ``on``, day, full or
    abbreviated month name, optional comma, year; or a 24-hour time.

    Raises
    ------
    ValueError
        If the text matches none of the forms.
    """
    norm = " ".join(str(text).replace(",", ", ").split()).replace(" ,", ",")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(norm, fmt)
        except ValueError:
            continue
    raise ValueError(f"unrecognised session date {text!r} (expected e.g. "
                     "'1:56 pm on 8 May, 2023')")


def parse_evidence(refs: Any) -> list[tuple[str, int | None, int | None]]:
    """Split and normalise evidence references.

    Parameters
    ----------
    refs : str or list of str
        E.g. ``["D3:11", "D8:6; D9:17", "D:11:26", "D30:05"]``.

    Returns
    -------
    list of (piece, session, turn)
        One entry per reference after splitting on ``;``, ``,`` and white
        space; ``session`` and ``turn`` are None when the piece is not of the
        form ``D<s>:<t>`` (a stray colon after ``D`` and leading zeros are
        allowed).
    """
    if refs is None:
        return []
    if isinstance(refs, (str, int, float)):
        refs = [refs]
    out: list[tuple[str, int | None, int | None]] = []
    for item in refs:
        for piece in _SPLIT.split(str(item).strip()):
            if not piece:
                continue
            m = _REF.match(piece)
            out.append((piece, int(m.group(1)), int(m.group(2))) if m else (piece, None, None))
    return out


def _token_counter(tokenizer: str | Callable[[str], int]
                   ) -> tuple[Callable[[pd.Series], np.ndarray], str]:
    """Vectorised token counts and the rule's description."""
    if callable(tokenizer):
        def count(texts: pd.Series) -> np.ndarray:
            return np.array([int(tokenizer(t)) for t in texts], dtype=np.int64)
        return count, f"callable {getattr(tokenizer, '__name__', repr(tokenizer))}"
    if tokenizer == "estimate":
        return (lambda texts: np.ceil(texts.str.len().to_numpy(np.float64) / 4.0).astype(np.int64),
                "ceil(len(text) / 4)")
    if tokenizer == "words":
        return (lambda texts: np.ceil(texts.str.split().str.len().to_numpy(np.float64) * 4.0 / 3.0)
                .astype(np.int64), "ceil(4 * words / 3)")
    raise ConfigError(f"The 'tokenizer' parameter of import_locomo must be 'estimate', 'words' or "
                      f"a callable. Got {tokenizer!r} instead.")


def _days(dt: datetime, origin: datetime) -> float:
    return (dt - origin).total_seconds() / 86400.0


# ---------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------

def _sessions(rec: dict, label: str) -> list[tuple[int, datetime, list]]:
    """(number, start, turns) of each session with turns, in number order."""
    conv = rec["conversation"]
    out = []
    for key, turns in conv.items():
        m = _SESSION.match(key)
        if not m or turns is None or turns == []:
            continue  # an empty session has nothing to import
        if not isinstance(turns, list):
            raise StreamError(f"{label}: {rec['sample_id']}: {key}: expected a list of turns, "
                              f"got a {type(turns).__name__}")
        s = int(m.group(1))
        raw = conv.get(f"session_{s}_date_time")
        if raw is None:
            raise StreamError(f"{label}: {rec['sample_id']}: session {s} has no "
                              f"'session_{s}_date_time'")
        try:
            start = parse_session_datetime(raw)
        except ValueError as exc:
            raise StreamError(f"{label}: {rec['sample_id']}: session_{s}_date_time: {exc}") from exc
        out.append((s, start, turns))
    if not out:
        raise StreamError(f"{label}: {rec['sample_id']}: the conversation has no session "
                          "with turns")
    return sorted(out, key=lambda x: x[0])


def _turn_table(records: list[dict], label: str, captions: bool) -> tuple[pd.DataFrame, dict]:
    """Every turn with its time (days from its conversation's origin)."""
    rows = []
    clock: dict[str, tuple[datetime, datetime, dict]] = {}
    for rec in records:
        sid = str(rec["sample_id"])
        sessions = _sessions(rec, label)
        origin = min(start for _, start, _ in sessions)
        starts = {s: start for s, start, _ in sessions}
        last = origin
        seen: set[tuple[int, int]] = set()
        for s, start, turns in sessions:
            for i, turn in enumerate(turns):
                where = f"{label}: {sid}: session {s} turn {i}"
                if not isinstance(turn, dict) or "text" not in turn or "speaker" not in turn:
                    raise StreamError(f"{where}: expected an object with 'speaker' and 'text'")
                for key in ("speaker", "text"):
                    if not isinstance(turn[key], str):
                        # str(None) would make a speaker "None" and a text "Ann: None"
                        raise StreamError(f"{where}: {key!r} must be a string, got "
                                          f"{turn[key]!r}")
                text = f"{turn['speaker']}: {turn['text']}"
                caption = turn.get("blip_caption")
                if captions and caption:
                    text += f" [shares: {caption}]"
                turn_no = _turn_number(turn.get("dia_id"), s, i, where)
                if (s, turn_no) in seen:
                    # evidence naming it would land on two notes
                    raise StreamError(f"{where}: dia_id 'D{s}:{turn_no}' is given to an "
                                      "earlier turn too: turn ids must be unique")
                seen.add((s, turn_no))
                when = start + timedelta(minutes=i)
                last = max(last, when)
                rows.append((sid, s, turn_no, f"D{s}:{turn_no}", str(turn["speaker"]), text,
                             _days(when, origin), start.isoformat(timespec="minutes")))
        clock[sid] = (origin, last, starts)
    frame = pd.DataFrame(rows, columns=["namespace", "session", "turn", "dia_id", "actor",
                                        "text", "created_at", "session_time"])
    return frame, clock


def _turn_number(dia_id: Any, session: int, i: int, where: str) -> int:
    """The turn number of a turn of ``session`` at position ``i`` (from 0):
    from its ``dia_id`` (``"D3:11"``, normalised as evidence is), or ``i + 1``
    when it has none. A ``dia_id`` that is not one turn of this session is
    refused: evidence naming it would silently miss or hit another turn."""
    if dia_id is None:
        return i + 1
    refs = parse_evidence(dia_id)
    if len(refs) != 1 or refs[0][1] != session:
        raise StreamError(f"{where}: dia_id {dia_id!r} is not a turn id of session {session} "
                          f"(expected e.g. 'D{session}:{i + 1}')")
    return refs[0][2]


def _category(value: Any, where: str) -> int:
    """A question's category as an integer, never truncated (2.7 is refused,
    not read as 2; ``"3"`` and 3.0 are 3)."""
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise StreamError(f"{where}: category must be an integer, got {value!r}")
    return value


def _query_table(records: list[dict], clock: dict, label: str) -> pd.DataFrame:
    rows = []
    for rec in records:
        sid = str(rec["sample_id"])
        origin, last, _ = clock[sid]
        # 00:00 of the day after the conversation's last turn
        t = _days(datetime.combine(last.date() + timedelta(days=1), datetime.min.time()), origin)
        for j, qa in enumerate(rec.get("qa") or []):
            where = f"{label}: {sid}: qa item {j}"
            if not isinstance(qa, dict) or "question" not in qa:
                raise StreamError(f"{where}: expected an object with 'question'")
            if not isinstance(qa["question"], str):
                raise StreamError(f"{where}: 'question' must be a string, got "
                                  f"{qa['question']!r}")
            category = _category(qa.get("category", 0), where)
            ev = qa.get("evidence")
            if ev is None:  # no evidence listed: a question without qrels
                ev = []
            elif isinstance(ev, str):
                ev = [ev]
            # 0, false, {} or [13] would lose the question's ground truth in silence
            if not isinstance(ev, list) or not all(isinstance(e, str) for e in ev):
                raise StreamError(f"{where}: evidence must be a list of turn ids such as "
                                  f"['D1:3'] (or one as a string), got {ev!r}")
            rows.append((sid, t, category, str(qa["question"]),
                         "" if qa.get("answer") is None else str(qa["answer"]),
                         "" if qa.get("adversarial_answer") is None
                         else str(qa["adversarial_answer"]),
                         ";".join(str(e) for e in ev), j, ev))
    frame = pd.DataFrame(rows, columns=["namespace", "t", "category", "text", "answer",
                                        "adversarial_answer", "evidence", "qa_index", "_refs"])
    frame.insert(0, "query_id", np.arange(len(frame), dtype=np.int64))
    frame.insert(3, "actor", QUERY_ACTOR)
    return frame


def _evidence_table(queries: pd.DataFrame, turns: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Normalised references (query_id, namespace, session, turn, resolved)."""
    rows = [(qid, ns, cat, piece, s, t)
            for qid, ns, cat, refs in zip(queries["query_id"], queries["namespace"],
                                          queries["category"], queries["_refs"])
            for piece, s, t in parse_evidence(refs)]
    ev = pd.DataFrame(rows, columns=["query_id", "namespace", "category", "piece", "session",
                                     "turn"])
    ev["session"] = ev["session"].astype("Int64")
    ev["turn"] = ev["turn"].astype("Int64")
    known = turns[["namespace", "session", "turn"]].drop_duplicates().assign(resolved=True)
    known["session"] = known["session"].astype("Int64")
    known["turn"] = known["turn"].astype("Int64")
    ev = ev.merge(known, on=["namespace", "session", "turn"], how="left")
    ev["resolved"] = ev["resolved"].fillna(False).astype(bool)
    canonical = ("D" + ev["session"].astype(str) + ":" + ev["turn"].astype(str))
    ev["canonical"] = canonical.where(ev["session"].notna(), ev["piece"])
    n_split = sum(len(parse_evidence(item)) > 1 for refs in queries["_refs"] for item in refs)
    stats = {
        "references": int(len(ev)),
        "resolved": int(ev["resolved"].sum()),
        "rate": float(ev["resolved"].mean()) if len(ev) else float("nan"),
        # evidence strings holding several ids ("D8:6; D9:17"), and ids
        # rewritten to D<s>:<t> (stray colon, leading zeros)
        "split_strings": int(n_split),
        "rewritten": int((ev["session"].notna() & (ev["piece"] != canonical)).sum()),
        "unresolved": [f"{ns} query {q}: {p!r}" for ns, q, p in
                       ev.loc[~ev["resolved"], ["namespace", "query_id", "piece"]]
                       .itertuples(index=False)],
        "answerable_references": int((ev["category"] != 5).sum()),
        "answerable_resolved": int((ev["resolved"] & (ev["category"] != 5)).sum()),
    }
    return ev, stats


def _observation_table(records: list[dict], turns: pd.DataFrame, clock: dict,
                       label: str) -> pd.DataFrame:
    rows = []
    for rec in records:
        sid = str(rec["sample_id"])
        _, _, starts = clock[sid]
        origin = clock[sid][0]
        for key, per_speaker in (rec.get("observation") or {}).items():
            m = re.match(r"^session_(\d+)_observation$", key)
            if not m or not isinstance(per_speaker, dict):
                continue
            s = int(m.group(1))
            fallback = _days(starts[s], origin) if s in starts else math.nan
            for speaker, items in per_speaker.items():
                for k, item in enumerate(items or []):
                    if not isinstance(item, (list, tuple)) or len(item) < 1:
                        raise StreamError(f"{label}: {sid}: {key}: {speaker} item {k}: expected "
                                          "[text, dia_id]")
                    refs = parse_evidence(item[1] if len(item) > 1 else None)
                    rows.append((sid, s, str(speaker), str(item[0]), fallback,
                                 [(a, b) for _, a, b in refs if a is not None]))
    obs = pd.DataFrame(rows, columns=["namespace", "session", "actor", "text", "fallback", "_src"])
    obs["_row"] = np.arange(len(obs))
    src = obs[["_row", "namespace", "_src"]].explode("_src").dropna(subset=["_src"])
    src["ref_session"] = src["_src"].map(lambda x: x[0]).astype(np.int64)
    src["turn"] = src["_src"].map(lambda x: x[1]).astype(np.int64)
    src = src.merge(turns[["namespace", "session", "turn", "created_at"]]
                    .rename(columns={"session": "ref_session"}),
                    on=["namespace", "ref_session", "turn"], how="inner")
    latest = src.groupby("_row")["created_at"].max()
    ids = (src.sort_values(["_row", "ref_session", "turn"])
           .assign(d="D" + src["ref_session"].astype(str) + ":" + src["turn"].astype(str))
           .groupby("_row")["d"].agg(",".join))
    obs["created_at"] = latest.reindex(obs["_row"]).to_numpy()
    obs["created_at"] = obs["created_at"].fillna(obs["fallback"])
    if obs["created_at"].isna().any():
        bad = obs.loc[obs["created_at"].isna()].iloc[0]
        raise StreamError(f"{label}: {bad['namespace']}: an observation of session "
                          f"{bad['session']} has neither a resolvable source nor a dated session")
    obs["dia_id"] = ids.reindex(obs["_row"]).fillna("").to_numpy()
    obs.attrs["sources"] = src[["_row", "namespace", "ref_session", "turn"]]
    return obs


def _summary_table(records: list[dict], turns: pd.DataFrame) -> pd.DataFrame:
    rows = []
    ends = turns.groupby(["namespace", "session"])["created_at"].max()
    for rec in records:
        sid = str(rec["sample_id"])
        for key, text in (rec.get("session_summary") or {}).items():
            m = re.match(r"^session_(\d+)_summary$", key)
            if not m or not text or (sid, int(m.group(1))) not in ends.index:
                continue
            s = int(m.group(1))
            # written once the session is over: one minute after its last turn
            rows.append((sid, s, SUMMARY_ACTOR, str(text), float(ends[(sid, s)]) + 1.0 / 1440.0,
                         f"D{s}"))
    return pd.DataFrame(rows, columns=["namespace", "session", "actor", "text", "created_at",
                                       "dia_id"])


# ---------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------

def import_locomo(path: str | os.PathLike, *, notes: str = "turns",
                  tokenizer: str | Callable[[str], int] = "estimate",
                  captions: bool = False, k1: float = 1.2, b: float = 0.75,
                  embedder: str = "bm25") -> Stream:
    """Import LoCoMo as a stream with BM25 (or WordLlama) embeddings (see the module docstring).

    Parameters
    ----------
    path : str or PathLike
        ``locomo10.zip``, ``locomo10.json`` or a folder of record files.
    notes : {"turns", "observations", "summaries"}
        What a note is.
    tokenizer : {"estimate", "words"} or callable
        Token count rule: ``ceil(len(text) / 4)``, ``ceil(4 * words / 3)``,
        or ``f(text) -> int``; at least 1.
    captions : bool
        Append the caption of a shared image to the turn's text.
    k1, b : float
        BM25 parameters of the cached embeddings (:func:`memsim.data.lexical.bm25_embeddings`).
    embedder : {"bm25", "wordllama"}
        How text becomes vectors (:mod:`memsim.data.embed`).

    Returns
    -------
    Stream
        Validated; notes carry ``namespace``, ``session``, ``dia_id`` (and
        ``turn`` for turns), ``text`` and ``session_time`` (ISO start of the
        session, turns only); queries carry ``namespace``, ``category``,
        ``text``, ``answer``, ``adversarial_answer``, ``evidence`` and
        ``qa_index``. ``meta["evidence"]`` counts the resolved references.

    Raises
    ------
    ConfigError
        Unknown ``notes``, ``tokenizer`` or ``embedder``.
    StreamError
        Unreadable or malformed data; the message names the file.
    """
    if notes not in NOTE_KINDS:
        raise ConfigError(f"The 'notes' parameter of import_locomo must be one of "
                          f"{', '.join(map(repr, NOTE_KINDS))}. Got {notes!r} instead.")
    if embedder not in EMBEDDERS or embedder == "vectors":
        raise ConfigError(f"The 'embedder' parameter of import_locomo must be 'bm25' or "
                          f"'wordllama' (LoCoMo logs no vectors). Got {embedder!r} instead.")
    count_tokens, token_rule = _token_counter(tokenizer)
    label = str(path)
    records = load_locomo_records(path)
    turns, clock = _turn_table(records, label, captions)
    queries = _query_table(records, clock, label)
    ev, stats = _evidence_table(queries, turns)
    queries["evidence"] = (ev.groupby("query_id")["canonical"].agg(";".join)
                           .reindex(queries["query_id"], fill_value="").to_numpy())
    hits = ev.loc[ev["resolved"] & (ev["category"] != 5),
                  ["query_id", "namespace", "session", "turn"]]
    hits = hits.astype({"session": np.int64, "turn": np.int64}).drop_duplicates()

    if notes == "turns":
        table = turns
        pairs = hits.merge(turns[["namespace", "session", "turn"]].reset_index(names="_row"),
                           on=["namespace", "session", "turn"])
    elif notes == "observations":
        table = _observation_table(records, turns, clock, label)
        src = table.attrs.pop("sources").rename(columns={"ref_session": "session"})
        pairs = hits.merge(src, on=["namespace", "session", "turn"])
        covered = hits.merge(src[["namespace", "session", "turn"]].drop_duplicates(),
                             on=["namespace", "session", "turn"])
        stats["turns_with_observation"] = int(len(covered))
        stats["answerable_turn_references"] = int(len(hits))
        stats["observations_without_source"] = int((table["dia_id"] == "").sum())
    else:
        table = _summary_table(records, turns)
        pairs = hits.merge(table[["namespace", "session"]].reset_index(names="_row"),
                           on=["namespace", "session"])
    if not len(table):
        # (every conversation has turns: only the annotations can be absent)
        what = ("observation ('observation')" if notes == "observations"
                else "summary of a session with turns ('session_summary')")
        raise StreamError(f"{label}: notes={notes!r}: the data hold no {what}, so the "
                          "stream would have no note: import notes='turns'")
    table = table.reset_index(drop=True)
    keep = [c for c in ("namespace", "session", "turn", "dia_id", "actor", "text", "created_at",
                        "session_time") if c in table.columns]
    note_frame = table[keep].copy()
    note_frame.insert(0, "note_id", np.arange(len(note_frame), dtype=np.int64))
    note_frame["tokens"] = np.maximum(count_tokens(note_frame["text"]), 1)
    qrels = (pairs[["query_id", "_row"]].drop_duplicates()
             .rename(columns={"_row": "note_id"}).astype(np.int64)
             .assign(gain=1.0).sort_values(["query_id", "note_id"]).reset_index(drop=True))

    emb = embed_texts(embedder, note_frame["text"].tolist(), queries["text"].tolist(),
                      note_frame["namespace"].to_numpy(), queries["namespace"].to_numpy(),
                      k1=k1, b=b, where="import_locomo: embedder")
    meta = {
        "name": f"locomo-{notes}",
        "source": f"LoCoMo ({Path(path).name}; snap-research/locomo)",
        "citation": CITATION,
        "licence": LICENCE,
        "notes": notes,
        "conversations": len(records),
        "time_origin": "per conversation: day 0 = start of its first session",
        "turn_time": "session start + position in session (from 0) minutes",
        "query_time": "00:00 of the day after the conversation's last session",
        "tokens": token_rule,
        "evidence": stats,
        "embedding": emb.info,
    }
    return make_stream(note_frame, queries.drop(columns="_refs"), qrels, None,
                       emb.notes, emb.queries, meta,
                       where={"notes": f"{label} (notes)", "queries": f"{label} (queries)",
                              "qrels": f"{label} (qrels)"})


def cli_import_locomo(path: str | os.PathLike, out: str | os.PathLike,
                      notes: str = "turns", captions: bool = False,
                      embedder: str = "bm25") -> Stream:
    """``memsim stream import locomo PATH --out DIR [--notes ...] [--captions] [--embedder ...]``.

    Imports with :func:`import_locomo` and writes the stream folder with
    :func:`memsim.data.stream.write_stream` (atomic; refuses a non-empty ``out``).

    Returns
    -------
    Stream
    """
    stream = import_locomo(path, notes=notes, captions=captions, embedder=embedder)
    write_stream(stream, Path(out))
    return stream


def evidence_in_top(stream: Stream, k: int) -> tuple[pd.Series, pd.Series]:
    """Per answerable question (category 1-4 with qrels) of an imported LoCoMo
    stream: how many of its relevant notes are among the top ``k`` of its
    conversation (namespace) by cosine (ties to the lower row), and how many
    it has. ``found == need`` is "all evidence in the top k"."""
    notes, q, qr = stream.notes, stream.queries, stream.qrels
    nemb = stream.note_embeddings.astype(np.float64)
    nemb /= np.maximum(np.linalg.norm(nemb, axis=1, keepdims=True), 1e-300)
    qemb = stream.query_embeddings.astype(np.float64)
    qemb /= np.maximum(np.linalg.norm(qemb, axis=1, keepdims=True), 1e-300)
    ask = q[(q["category"] != 5) & q["query_id"].isin(qr["query_id"])]
    tops = []
    for ns, g in ask.groupby("namespace"):
        rows = np.flatnonzero(notes["namespace"].to_numpy() == ns)
        sim = qemb[q.index.get_indexer(g.index)] @ nemb[rows].T
        best = np.argsort(-sim, axis=1, kind="stable")[:, :k]
        tops.append(pd.DataFrame({"query_id": np.repeat(g["query_id"].to_numpy(), best.shape[1]),
                                  "note_id": notes["note_id"].to_numpy()[rows[best]].ravel()}))
    found = (pd.concat(tops).merge(qr, on=["query_id", "note_id"]).groupby("query_id").size()
             .reindex(ask["query_id"], fill_value=0))
    need = qr.groupby("query_id").size().reindex(ask["query_id"])
    return found, need
