"""What every cross-check against a real engine shares (``memsim engine-check``).

``memsim engine-check ENGINE EXP.toml`` replays one stream through a real
engine with a controlled clock and through memsim's preset of it, query by
query: ``feather`` (:mod:`memsim.checks.feather_check`, the feather-db engine) and
``langchain`` (:mod:`memsim.checks.langchain_check`, LangChain's
``TimeWeightedVectorStoreRetriever``). This module holds their common parts:

* :func:`read_check_config` (:func:`load_check_config`): the TOML file: the check's table and the stream,
  read from disk (``[workload] source = "DIR"``, a stream folder, relative to
  the file) or generated (``[workload]`` synthetic knobs, the table's
  ``seed``);
* :func:`quantise_stream`: every time rounded to a whole second (real
  engines' clocks);
* :func:`compare_rankings`, :func:`summarise`, :func:`format_summary`:
  identical top-k, overlap@k, Kendall's tau of the shared notes, score
  differences, and the first differing queries with a likely cause.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.engine import Arm, SimSettings, simulate, with_timing
from memsim.core.errors import ConfigError, MemsimError, StreamError
from memsim.core.params import (Interval, check_keys, describe_constraint, did_you_mean,
                                 short_repr)
from memsim.reporting.rundir import jsonable, write_atomic
from memsim.data.stream import Stream, make_stream, read_stream
from memsim.data.workload import SyntheticWorkload

__all__ = ["CheckConfig", "DAY_S", "NEAR_TIE", "compare_rankings", "csv_saver",
           "first_differences", "format_summary", "kendall", "likely_causes", "load_check_config",
           "print_summaries", "prepare_stream", "quantise_stream", "read_check_config",
           "replay_memsim", "run_check_command", "starting", "summarise"]

#: Seconds per simulated day.
DAY_S = 86400
#: Two scores closer than this are a near tie: float32 rounding may order them
#: either way.
NEAR_TIE = 1e-6


def quantise_stream(stream: Stream) -> Stream:
    """The stream with every time rounded to a whole second.

    Note ``created_at`` / ``updated_at`` / ``expires_at``, query ``t`` and
    access ``t`` become ``round(x * 86400) / 86400`` days. Both replays of a
    cross-check run on this stream, because a real engine's clock has whole
    seconds and memsim's has float days.
    """

    def q(x):
        x = np.asarray(x, dtype=np.float64)
        return np.where(np.isfinite(x), np.round(x * DAY_S) / DAY_S, x)

    notes = stream.notes.copy()
    for col in ("created_at", "updated_at", "expires_at"):
        if col in notes:
            notes[col] = q(notes[col].to_numpy())
    queries = stream.queries.copy()
    queries["t"] = q(queries["t"].to_numpy())
    accesses = stream.accesses.copy()
    if len(accesses):
        accesses["t"] = q(accesses["t"].to_numpy())
    meta = dict(stream.meta)
    meta["time_quantised_s"] = 1
    return make_stream(notes, queries, stream.qrels, accesses, stream.note_embeddings,
                       stream.query_embeddings, meta, retrieved=stream.retrieved)


@dataclass(frozen=True)
class CheckConfig:
    """A cross-check's config, read and checked (:func:`read_check_config`).

    Attributes
    ----------
    check : dict
        The check's table (empty when the file has none).
    name : str
        That table's name (``"feather_check"``, ``"engine_check"`` ...), the
        first part of the keys errors name.
    where : str
        The file (or, for a parsed dict, the first table name), in front of
        every message.
    workload : SyntheticWorkload or None
        The generator, when the stream is generated (with ``seed``).
    source : Path or None
        The stream folder, when the stream is read from disk.
    seed : int
    """

    check: dict
    name: str
    where: str
    workload: SyntheticWorkload | None = None
    source: Path | None = None
    seed: int = 0

    @functools.cached_property
    def stream(self) -> Stream:
        """The stream, read or generated on first use (after the check's
        values are checked, so that a mistake is found at once)."""
        if self.source is not None:
            try:
                return read_stream(self.source)
            except StreamError as exc:
                # the folder came from the config: name its file and key, as
                # the config's other mistakes are named
                raise StreamError(f"{self.where}: workload.source: {exc}") from exc
        assert self.workload is not None
        return self.workload.generate(np.random.SeedSequence(self.seed))

    def value(self, key: str, constraint: Any, default: Any) -> Any:
        """``check[key]`` (``default`` when absent), refused unless
        ``constraint`` (an :class:`~memsim.core.params.Interval` or
        :class:`~memsim.core.params.Options`) accepts it as it is: ``2.5``
        for an int is refused, never truncated."""
        if key not in self.check:
            return default
        value = self.check[key]
        if not _accepts(constraint, value):
            self.fail(key, f"must be {describe_constraint(constraint)}", value)
        return value

    def values(self, key: str, constraint: Any, default: list) -> list:
        """``check[key]``: one value or a non-empty list of them, each
        accepted by ``constraint``; ``default`` (a list) when absent."""
        value = self.check.get(key, default)
        items = value if isinstance(value, list) else [value]
        if not items:
            self.fail(key, f"an empty list checks nothing; give {describe_constraint(constraint)} "
                           "or a non-empty list of them", value)
        for item in items:
            if not _accepts(constraint, item):
                self.fail(key, f"must be {describe_constraint(constraint)} or a non-empty list "
                               "of them", item)
        return items

    def fail(self, key: str, message: str, value: Any) -> None:
        """Raise ``WHERE: NAME.KEY: MESSAGE; got VALUE``."""
        raise ConfigError(f"{self.where}: {self.name}.{key}: {message}; got {short_repr(value)}")


def _accepts(constraint: Any, value: Any) -> bool:
    """Whether ``constraint`` (or one of a tuple of alternatives) accepts ``value``."""
    alternatives = constraint if isinstance(constraint, (list, tuple)) else (constraint,)
    return any(c.check(value) for c in alternatives)


def _read_toml(path: Path) -> dict:
    """The parsed TOML file: a readable regular file of at most
    :data:`memsim.runs.config.MAX_CONFIG_BYTES`, UTF-8, valid TOML."""
    from memsim.runs.config import read_config_file

    data = read_config_file(path, "check config file")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def read_check_config(path: str | os.PathLike | dict, tables: tuple[str, ...],
                      keys: set[str]) -> CheckConfig:
    """Read a cross-check's TOML file (or parsed dict) and check its shape.

    Parameters
    ----------
    path : path or dict
    tables : tuple of str
        The names the check's table may have (``("langchain_check",
        "engine_check")``); a file holds at most one of them.
    keys : set of str
        The keys that table may hold (``seed`` is always allowed).

    Raises
    ------
    ConfigError
        Naming the file and the key: a file that cannot be read (missing,
        not UTF-8, not TOML), a top-level table other than ``tables`` and
        ``workload`` (a misspelt one is not ignored), two of ``tables``, a
        table that is not a table, an unknown key, a ``seed`` that is not an
        int >= 0 (or given with ``workload.source``, where it would do
        nothing), a bad ``workload``. The stream is read or generated only
        when :attr:`CheckConfig.stream` is first used, so a check that
        checks its values first reports their mistakes at once.
    """
    if isinstance(path, dict):
        cfg, where, base = path, tables[0], Path.cwd()
    else:
        where, base = str(path), Path(path).absolute().parent
        cfg = _read_toml(Path(path))
    allowed = [*tables, "workload"]
    unknown = [t for t in cfg if t not in allowed]
    if unknown:
        raise ConfigError(errors=[
            f"{where}: {t}: unknown table{did_you_mean(t, allowed)}; allowed: "
            f"{', '.join(allowed)}" for t in unknown])
    present = [t for t in tables if t in cfg]
    if len(present) > 1:
        raise ConfigError(f"{where}: {present[1]}: a check config holds one of the tables "
                          f"{', '.join(tables)}; this one has {' and '.join(present)}")
    name = present[0] if present else tables[0]
    check = cfg.get(name, {})
    if not isinstance(check, dict):
        raise ConfigError(f"{where}: {name}: expected a table, got {short_repr(check)}")
    try:
        check_keys(check, sorted(keys | {"seed"}), name)
    except ConfigError as exc:
        raise exc.prefixed(f"{where}: ") from None
    conf = CheckConfig(check=check, name=name, where=where)
    seed = conf.value("seed", Interval(0, 2**63 - 1, integer=True), 0)
    wl = cfg.get("workload", {})
    if not isinstance(wl, dict):
        raise ConfigError(f"{where}: workload: expected a table, got {short_repr(wl)}")
    if "source" in wl:
        extra = sorted(set(wl) - {"source"})
        imports = [k for k in ("importer", "embedder") if k in extra]
        if imports:  # (memsim run's keys for a file it imports)
            raise ConfigError(f"{where}: workload.{imports[0]}: an engine check replays a "
                              "stream folder as it is, importing nothing: import the file "
                              "first (memsim stream import trace FILE --out DIR) and give "
                              "source = DIR")
        if extra:
            raise ConfigError(f"{where}: workload.{extra[0]}: a workload with 'source' replays "
                              "a stream and takes no generator knobs")
        if "seed" in check:
            raise ConfigError(f"{where}: {name}.seed: a workload with 'source' replays a stream "
                              "and generates none; the seed would do nothing")
        if not isinstance(wl["source"], str) or not wl["source"]:
            raise ConfigError(f"{where}: workload.source: expected a stream folder (a string), "
                              f"got {short_repr(wl['source'])}")
        src = Path(wl["source"]).expanduser()
        src = src if src.is_absolute() else base / src
        if not src.exists():
            raise ConfigError(f"{where}: workload.source: {src}: no such file or folder")
        if not src.is_dir():  # refused here, before any configuration starts
            raise ConfigError(f"{where}: workload.source: {src} is a file, not a stream "
                              "folder: import it first (memsim stream import trace FILE "
                              "--out DIR) and give source = DIR")
        return dataclasses.replace(conf, source=src)
    try:
        workload = SyntheticWorkload.from_config(wl, "workload")
    except ConfigError as exc:
        raise exc.prefixed(f"{where}: ") from None
    return dataclasses.replace(conf, workload=workload, seed=seed)


def load_check_config(path: str | os.PathLike | dict, tables: tuple[str, ...],
                      keys: set[str]) -> tuple[dict, Stream, str]:
    """:func:`read_check_config` as (check table, stream, where)."""
    conf = read_check_config(path, tables, keys)
    return conf.check, conf.stream, conf.where


def kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a between two rankings of the same items (no ties)."""
    m = len(a)
    if m < 2:
        return float("nan")
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(m, 1)
    return float((da[iu] * db[iu]).sum() / len(iu[0]))


def _near_tie(scores: np.ndarray) -> bool:
    return len(scores) > 1 and bool((np.abs(np.diff(scores)) < NEAR_TIE).any())


def top_k_overlap(n_a: int, n_b: int, n_shared: int, k: int) -> float:
    """Shared notes of two top-k lists (of ``n_a`` and ``n_b`` notes) over the
    longer one, at most k: lists that both rightly hold fewer than k notes,
    the same ones, overlap 1 (not ``n_shared / k``); two empty lists, 1."""
    longer = min(k, max(n_a, n_b))
    return n_shared / longer if longer else 1.0


def compare_rankings(stream: Stream, eng_ids: list, eng_scores: list, mem_ids: list,
                     mem_scores: list, k: int) -> pd.DataFrame:
    """One row per query (stream order): ``query_id``, ``t``, ``n_engine``,
    ``n_memsim``, ``identical`` (same notes in the same order), ``overlap``
    (:func:`top_k_overlap`), ``n_shared``, ``rank_corr``
    (Kendall's tau of the shared notes), ``max_score_diff`` (largest ``|engine - memsim|`` over shared
    notes), ``near_tie`` (two adjacent scores of either list within
    :data:`NEAR_TIE`)."""
    rows = []
    for a_ids, a_s, b_ids, b_s in zip(eng_ids, eng_scores, mem_ids, mem_scores):
        shared, ia, ib = np.intersect1d(a_ids, b_ids, assume_unique=True, return_indices=True)
        rows.append((
            len(a_ids), len(b_ids),
            bool(len(a_ids) == len(b_ids) and np.array_equal(a_ids, b_ids)),
            top_k_overlap(len(a_ids), len(b_ids), len(shared), k), len(shared),
            kendall(ia.astype(float), ib.astype(float)),
            float(np.abs(a_s[ia] - b_s[ib]).max()) if len(shared) else float("nan"),
            _near_tie(np.asarray(a_s)) or _near_tie(np.asarray(b_s)),
        ))
    df = pd.DataFrame(rows, columns=["n_engine", "n_memsim", "identical", "overlap", "n_shared",
                                     "rank_corr", "max_score_diff", "near_tie"])
    df.insert(0, "query_id", stream.queries["query_id"].to_numpy(np.int64))
    df.insert(1, "t", stream.queries["t"].to_numpy(np.float64))
    return df


def summarise(per_query: pd.DataFrame, k: int) -> dict[str, Any]:
    """``n_queries``, ``k``, ``identical_share``, ``overlap_mean``,
    ``overlap_min``, ``rank_corr_mean``, ``max_score_diff``,
    ``first_difference`` (position of the first differing query, None if
    none), ``max_score_diff_before_first`` and ``answered_share`` (queries
    the engine returned at least one note for: identical empty lists agree
    on nothing)."""
    n = len(per_query)
    scored = per_query["max_score_diff"].dropna()
    differs = np.flatnonzero(~per_query["identical"].to_numpy(bool))
    first = int(differs[0]) if len(differs) else None
    before = per_query["max_score_diff"].iloc[:first].dropna()
    return {
        "n_queries": n, "k": int(k),
        "identical_share": float(per_query["identical"].mean()) if n else float("nan"),
        "overlap_mean": float(per_query["overlap"].mean()) if n else float("nan"),
        "overlap_min": float(per_query["overlap"].min()) if n else float("nan"),
        "rank_corr_mean": float(per_query["rank_corr"].mean()) if n else float("nan"),
        "max_score_diff": float(scored.max()) if len(scored) else float("nan"),
        "first_difference": first,
        "max_score_diff_before_first": float(before.max()) if len(before) else float("nan"),
        "answered_share": float((per_query["n_engine"] > 0).mean()) if n else float("nan"),
    }


def first_differences(per_query: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The first ``n`` differing queries (``query_id``, ``t``, ``overlap``,
    ``max_score_diff`` and ``cause`` when the table has one)."""
    cols = [c for c in ("query_id", "t", "overlap", "max_score_diff", "cause")
            if c in per_query]
    return per_query.loc[~per_query["identical"].to_numpy(bool), cols].head(n)


def format_summary(per_query: pd.DataFrame, s: dict[str, Any], n_first: int = 5) -> str:
    """The common lines of a cross-check's report."""
    k = s["k"]
    lines = [
        f"  identical top-{k}:      {s['identical_share']:.2%} of queries",
        f"  answered:             {s['answered_share']:.2%} of queries (the engine "
        "returned a note)",
        f"  top-{k} overlap:        mean {s['overlap_mean']:.4f}, min {s['overlap_min']:.2f}",
        f"  rank corr. (shared):  mean Kendall tau {s['rank_corr_mean']:.4f}",
        f"  largest score diff.:  {s['max_score_diff']:.3g}",
        "  first difference:     "
        + ("none" if s["first_difference"] is None else f"query #{s['first_difference']}")
        + ("" if s["first_difference"] == 0 else  # (no query before the first)
           f" (largest score diff. before it: {s['max_score_diff_before_first']:.3g})"),
    ]
    if s["n_queries"] and s["answered_share"] == 0:
        # identical empty lists agree on nothing: say so beside the 100%
        lines.insert(1, "  NOTHING COMPARED: neither side returned a note for any query "
                        "(every top-k is empty): replay a stream whose queries the engine "
                        "answers")
    first = first_differences(per_query, n_first)
    for row in first.itertuples(index=False):
        d = row._asdict()
        lines.append(f"    query {d['query_id']} (day {d['t']:.3f}): overlap "
                     f"{d['overlap']:.2f}" + (f"; {d['cause']}" if d.get("cause") else ""))
    return "\n".join(lines)


def starting(label: str, i: int, n: int, what: str) -> None:
    """The line an engine-check prints on stderr as a configuration starts
    (each can take a while: the real engine scores every query)."""
    print(f"{label}: configuration {i + 1}/{n} ({what})", file=sys.stderr, flush=True)


def prepare_stream(stream: Stream, who_needs: str) -> Stream:
    """The stream a cross-check replays on both sides: every time rounded to
    a whole second (:func:`quantise_stream`) and no expiry (the engines
    checked this way have no TTL). A stream without embeddings is refused
    (``who_needs``: the message's subject and verb, e.g. "the LangChain
    cross-check needs"), and so is one split into namespaces."""
    if stream.note_embeddings is None or stream.query_embeddings is None:
        raise ConfigError(f"stream {stream.name!r} has no embeddings: {who_needs} "
                          "note and query vectors")
    if "namespace" in stream.notes and "namespace" in stream.queries:
        raise ConfigError(f"stream {stream.name!r} is split into namespaces: the cross-check "
                          "replays one store")
    qs = quantise_stream(stream)
    notes = qs.notes.copy()
    notes["expires_at"] = np.nan
    return make_stream(notes, qs.queries, qs.qrels, qs.accesses, qs.note_embeddings,
                       qs.query_embeddings, dict(qs.meta), retrieved=qs.retrieved)


def run_check_command(run: Callable[[], list], as_json: bool) -> int:
    """The end of an ``engine-check`` command: run it (``run()`` gives its
    results), one ``memsim: error:`` line and exit code 2 on a user
    mistake, the summaries as JSON with ``--json``; the exit code."""
    try:
        results = run()
    except MemsimError as exc:
        print(f"memsim: error: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print_summaries(results)
    return 0


def csv_saver(prefix: str | None, name: Callable[[Any], str]) -> Callable[[Any], None]:
    """What to do with each result as its configuration finishes: with
    ``--csv PREFIX``, write its per-query table to ``PREFIX_<name>.csv`` at
    once (atomically), so an interrupted check keeps what it finished.

    A ``PREFIX`` whose folder does not exist (or is a file) is refused here,
    before the check runs (it used to fail after the whole replay)."""
    if prefix:
        folder = Path(prefix).parent
        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise ConfigError(f"--csv {prefix}: its folder {folder} {what}; the tables are "
                              f"written as {prefix}_<configuration>.csv")

    def save(res: Any) -> None:
        if prefix:
            write_atomic(Path(f"{prefix}_{name(res)}.csv"),
                         lambda p: res.per_query.to_csv(p, index=False))
    return save


def print_summaries(results: list) -> None:
    """``memsim engine-check --json``: each configuration's summary (the
    figures the text prints: identical top-k, overlap, score differences ...)
    as one JSON list on stdout."""
    import json

    print(json.dumps(jsonable([res.summary for res in results]), indent=2, allow_nan=False))


def likely_causes(identical: np.ndarray, checks: list[tuple[np.ndarray, str]],
                  since_first: str) -> np.ndarray:
    """A likely cause for each query whose top k differs (empty where identical).

    ``checks`` are (mask over queries, cause) in the order they are tried: the
    first mask true at a differing query names its cause. Otherwise a query
    after the first difference gets ``since_first`` (the feedback loop carries
    an earlier difference forward), and the first one "scores differ".
    """
    out = np.full(len(identical), "", dtype=object)
    differs = np.flatnonzero(~np.asarray(identical, dtype=bool))
    first = int(differs[0]) if len(differs) else len(out)
    for j in differs:
        cause = next((why for mask, why in checks if mask[j]), None)
        out[j] = cause or (since_first if j > first else "scores differ")
    return out


def replay_memsim(stream: Stream, policy: Any, k: int, feedback_mode: str = "per-query",
                  arm: str = "memsim", packed: bool = False
                  ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """memsim's side of a check: ``policy`` replayed over ``stream`` with its
    top ``k`` kept, as (note ids, scores) per query in the stream's query
    order, and the seconds the replay took. ``arm`` names the arm (its name
    seeds the arm's random stream, so each check keeps its own). ``packed``:
    the notes packed into each context, in context order, instead of the
    ranking (a check of a packer)."""
    policy = with_timing(policy, feedback_mode)
    settings = SimSettings(feedback_mode=feedback_mode, save_rankings=True, candidates=k)
    t0 = time.perf_counter()
    res = simulate(stream, [Arm(arm, policy)], settings, np.random.SeedSequence(0))
    seconds = time.perf_counter() - t0
    qids = stream.queries["query_id"].to_numpy(np.int64)
    ids = [np.zeros(0, np.int64) for _ in qids]
    scores = [np.zeros(0) for _ in qids]
    r = res.rankings
    if r is not None and len(r):
        qpos = {int(q): i for i, q in enumerate(qids)}
        if packed:
            r = r.loc[r["packed"].to_numpy(bool)]
        by = "position" if packed else "rank"
        for qid, g in r.sort_values(["query_id", by], kind="stable").groupby("query_id"):
            i = qpos[int(qid)]
            ids[i] = g["note_id"].to_numpy(np.int64)
            scores[i] = g["score"].to_numpy(np.float64)
    return ids, scores, seconds
