"""Where a study lives: ``--storage`` strings, opening Optuna storages.

The default storage is an Optuna journal file inside the run folder
(``sweep/journal.log``, :class:`optuna.storages.JournalStorage` over
:class:`optuna.storages.journal.JournalFileBackend`), which several processes
on one machine can share. ``--storage`` also takes Optuna's RDB URLs
(``sqlite:///file.db``, a relative path made absolute;
``postgresql://user:pw@host/db``) or ``journal:PATH`` (a new file or an
Optuna journal: any other file is refused, never rewritten; its folder must
exist). An in-memory SQLite database (``sqlite:///:memory:``,
``sqlite://``) is refused: no other process could open the study.
An RDB storage runs Optuna's heartbeat (every :data:`HEARTBEAT_S` s, stale
after :data:`GRACE_S` s), which fails and retries the trials of dead workers
on any machine.

Holds the normalisation of ``--storage`` (:func:`normalise_storage`), the form
recorded in the run folder (:func:`recorded_storage`, relative for a journal
inside the folder, without a password otherwise), :func:`open_storage` and
the choice of a PostgreSQL driver.

A journal whose last write did not finish (disk full, a killed writer) ends
in a torn record; Optuna would refuse the file from then on. Opening it
(:func:`repair_journal`) keeps every complete record and moves the torn bytes
into a side file ``<journal>.torn-<n>``, saying so on stderr.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from memsim.core.errors import ConfigError
from memsim.core.paths import file_in_the_way

from .study import quiet_optuna

#: RDB heartbeat period and the silence after which a trial counts as dead (seconds).
HEARTBEAT_S = 5
GRACE_S = 30

#: Diagnostics of the storage (a repaired journal) go to the memsim logger.
_log = logging.getLogger(__name__)


def mask_url(url: str) -> str:
    """A storage URL without its password (for files and messages)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def normalise_storage(storage: str | None, run_dir: Path | None) -> str:
    """Normalise ``--storage`` to a string every worker can open."""
    if storage is None:
        if run_dir is None:
            return "memory"
        return f"journal:{(run_dir / 'sweep' / 'journal.log').resolve()}"
    if not isinstance(storage, str) or not storage:
        raise ConfigError(f"--storage: expected a URL, got {storage!r}")
    if storage.startswith("journal:"):
        return _journal_spec(Path(storage[len("journal:"):]).expanduser(), storage)
    if re.match(r"^(sqlite|postgresql|postgres|mysql)(\+\w+)?://", storage):
        _refuse_memory_sqlite(storage)
        return absolute_sqlite(storage)
    hint = (f" (a journal file: journal:{storage})"
            if storage.endswith((".log", ".jsonl", ".journal")) else "")
    raise ConfigError(f"--storage: {mask_url(storage)!r} is not a storage URL; expected "
                      "sqlite:///FILE.db, postgresql://USER:PASSWORD@HOST/DB or "
                      f"journal:FILE.log{hint}")


def _refuse_memory_sqlite(url: str) -> None:
    """Refuse a SQLite URL without a file (``sqlite://``, ``sqlite:///``,
    ``sqlite:///:memory:``, ``mode=memory``): its database lives in one
    connection of one process, so the run folder would record a study no
    resume, no other worker and no later session can open (each connection
    even sees a database of its own)."""
    m = re.match(r"^sqlite(?:\+\w+)?://(.*)$", url)
    if m is None:
        return
    rest = m.group(1)
    path = rest[1:] if rest.startswith("/") else rest
    path = path.split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:") or \
            "mode=memory" in rest:
        raise ConfigError(f"--storage: {url} is an in-memory SQLite database, which lives in "
                          "one process only: no resume or other worker could open the study; "
                          "give a file: sqlite:///FILE.db")


def absolute_sqlite(spec: str) -> str:
    """A SQLite URL with a relative path made absolute (it is relative to the
    folder the sweep runs in), so that the URL recorded in the run folder and
    printed opens the same database from anywhere."""
    m = re.match(r"^(sqlite(?:\+\w+)?:///)(.+)$", spec)
    if m and not m.group(2).startswith(("/", ":memory:")):
        return m.group(1) + str(Path(m.group(2)).absolute())
    return spec


def _journal_spec(path: Path, given: str) -> str:
    """``journal:<absolute path>``, refusing a path that cannot be a journal file."""
    if not str(path) or str(path) == ".":
        raise ConfigError(f"--storage {given}: expected journal:FILE.log")
    if path.is_dir():
        raise ConfigError(f"--storage {given}: {path} is a folder; give a file in it, "
                          f"e.g. journal:{path / 'journal.log'}")
    if path.exists() and not path.is_file():
        raise ConfigError(f"--storage {given}: {path} is not a regular file")
    if path.is_file() and not _holds_journal(path):
        raise ConfigError(f"--storage {given}: {path} is not an Optuna journal (no journal "
                          "record in it); give a new file or a sweep's journal")
    parent = file_in_the_way(path.absolute().parent)
    if parent is not None:
        raise ConfigError(f"--storage {given}: {parent} is a file, not a folder")
    if not path.absolute().parent.is_dir():
        # as for sqlite:///DIR/FILE.db: a mistyped folder is said, not made
        # (journal:/nonexistent/x.log would create /nonexistent)
        raise ConfigError(f"--storage {given}: the folder {path.absolute().parent} does not "
                          "exist; create it first, or give a journal file in an existing folder")
    return f"journal:{path.resolve()}"


def recorded_storage(spec: str, run_dir: Path | None) -> str:
    """``spec`` as the run folder records it: a journal inside the folder
    relative to it (so that a moved folder still resumes), a URL masked."""
    if spec.startswith("journal:") and run_dir is not None:
        path = Path(spec[len("journal:"):])
        try:
            return f"journal:{path.relative_to(run_dir.resolve())}"
        except ValueError:
            return spec
    return mask_url(spec)


def open_storage(spec: str):
    """Open an Optuna storage from a normalised ``--storage`` string.

    ``journal:PATH`` is a :class:`~optuna.storages.JournalStorage` over a
    :class:`~optuna.storages.journal.JournalFileBackend`; an RDB URL is an
    :class:`~optuna.storages.RDBStorage` with a heartbeat and a retry of
    stale trials; ``memory`` is an in-memory storage (one process).
    """
    if spec == "memory":
        return optuna.storages.InMemoryStorage()
    if spec.startswith("journal:"):
        path = Path(spec[len("journal:"):])
        # the run folder's own sweep/ for the default journal; a journal of
        # the user's lies in a folder that exists (_journal_spec), and a
        # missing one is never made with its parents (a typo at /)
        try:
            path.parent.mkdir(exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--storage journal:{path}: cannot create {path.parent}: "
                              f"{exc.strerror or exc}") from None
        repair_journal(path)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if re.match(r"^postgres(ql)?://", spec):
        spec = _pg_driver(spec)
    kwargs: dict[str, Any] = {}
    if spec.startswith("sqlite"):
        # several local workers write to one file: wait for the lock, do not fail
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    try:
        with quiet_optuna():
            return optuna.storages.RDBStorage(
                spec, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(), **kwargs)
    except ImportError as exc:
        raise ConfigError(f"--storage: {mask_url(spec)}: a driver is missing: {exc}") from None
    except Exception as exc:  # sqlalchemy errors: bad URL, refused connection ...
        msg = " ".join(str(exc).split())[:300]
        raise ConfigError(f"--storage: cannot open {mask_url(spec)}: "
                          f"{type(exc).__name__}: {mask_url(msg)}") from None


def _pg_driver(url: str) -> str:
    """Name the installed PostgreSQL driver in a driver-less URL.

    SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3, while memsim's
    ``postgres`` extra installs psycopg2: use whichever is there.
    """
    rest = url.split("://", 1)[1]
    for module, dialect in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{dialect}://{rest}"
    raise ConfigError("--storage: a PostgreSQL storage needs a driver: pip install "
                      "psycopg2-binary (memsim[postgres])")


def _holds_journal(path: Path) -> bool:
    """Whether ``path`` is empty or holds at least one Optuna journal record
    (a JSON object with an ``op_code``): a journal, perhaps with a torn tail
    that :func:`repair_journal` sets aside, not some other file."""
    try:
        if path.stat().st_size == 0:
            return True
        for line in _lines(path):
            if line.startswith(b'{"op_code"'):  # a record, perhaps torn
                return True
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "op_code" in record:
                return True
    except OSError as exc:
        raise ConfigError(f"--storage journal:{path}: cannot read it: "
                          f"{exc.strerror or exc}") from None
    return False


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _split_record(line: bytes) -> tuple[bytes, bytes] | None:
    """(torn prefix, complete record) of a line where a torn write was
    followed by a complete one; None when no suffix is a record."""
    start = line.find(b"{", 1)
    while start != -1:
        if _is_record(line[start:]):
            return line[:start], line[start:]
        start = line.find(b"{", start + 1)
    return None


def repair_journal(path: Path) -> int:
    """Set aside the torn records of an Optuna journal file.

    Every complete record (a line that is a JSON object) stays, in order.
    The bytes of a torn one (a write cut short, after which the file ends or
    the next write went on) go to ``<journal>.torn-<n>``, and one line on
    stderr says so. Runs under the journal's own lock.

    Returns
    -------
    int
        The number of bytes set aside (0: the journal was whole).
    """
    if not path.is_file() or path.stat().st_size == 0:
        return 0
    with open(path, "rb") as f:  # a cheap look first: a whole journal is left alone
        f.seek(-1, os.SEEK_END)
        ends_whole = f.read(1) == b"\n"
    if ends_whole and all(_is_record(line) for line in _lines(path)):
        return 0
    lock = JournalFileSymlinkLock(str(path))
    while not lock.acquire():  # pragma: no cover - acquire() blocks until it succeeds
        pass
    try:
        kept, torn = [], []
        for line in _lines(path):
            if line.endswith(b"\n") and _is_record(line):
                kept.append(line)
                continue
            split = _split_record(line) if line.endswith(b"\n") else None
            if split is None:
                torn.append(line)
            else:
                torn.append(split[0])
                kept.append(split[1])
        if not torn:
            return 0
        side = _side_file(path)
        side.write_bytes(b"".join(torn))
        tmp = path.with_name(f".{path.name}.repair-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                f.write(b"".join(kept))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    finally:
        lock.release()
    n = sum(len(t) for t in torn)
    _log.warning("%s: an unfinished write left %d torn bytes; kept the %d complete records "
                 "and moved the rest to %s", path, n, len(kept), side)
    return n


def _lines(path: Path):
    with open(path, "rb") as f:
        yield from f


def _side_file(path: Path) -> Path:
    n = 1
    while path.with_name(f"{path.name}.torn-{n}").exists():
        n += 1
    return path.with_name(f"{path.name}.torn-{n}")
