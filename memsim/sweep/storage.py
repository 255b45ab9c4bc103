"""Where a study lives: ``--storage`` strings, opening Optuna storages.

The default storage is an Optuna journal file inside the run folder
(``sweep/journal.log``, :class:`optuna.storages.JournalStorage` over
:class:`optuna.storages.journal.JournalFileBackend`), which several processes
on one machine can share. ``--storage`` also takes Optuna's RDB URLs
(``sqlite:///file.db``, ``postgresql://user:pw@host/db``) or ``journal:PATH``.
An RDB storage runs Optuna's heartbeat (every :data:`HEARTBEAT_S` s, stale
after :data:`GRACE_S` s), which fails and retries the trials of dead workers
on any machine.

Holds the normalisation of ``--storage`` (:func:`_storage_spec`), the form
recorded in the run folder (:func:`_recorded_storage`, relative for a journal
inside the folder, without a password otherwise), :func:`open_storage` and
the choice of a PostgreSQL driver.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend

from memsim.errors import ConfigError

from .study import _quiet_optuna

#: RDB heartbeat period and the silence after which a trial counts as dead (seconds).
HEARTBEAT_S = 5
GRACE_S = 30


def _mask_url(url: str) -> str:
    """A storage URL without its password (for files and messages)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _storage_spec(storage: str | None, run_dir: Path | None) -> str:
    """Normalise ``--storage`` to a string every worker can open."""
    if storage is None:
        if run_dir is None:
            return "memory"
        return f"journal:{(run_dir / 'sweep' / 'journal.log').resolve()}"
    if not isinstance(storage, str) or not storage:
        raise ConfigError(f"--storage: expected a URL, got {storage!r}")
    if storage.startswith("journal:"):
        path = Path(storage[len("journal:"):]).expanduser()
        return f"journal:{path.resolve()}"
    if re.match(r"^(sqlite|postgresql|postgres|mysql)(\+\w+)?://", storage):
        return storage
    if storage.endswith((".log", ".jsonl", ".journal")):
        return f"journal:{Path(storage).expanduser().resolve()}"
    raise ConfigError(f"--storage: {_mask_url(storage)!r} is not a storage URL; expected "
                      "sqlite:///FILE.db, postgresql://USER:PASSWORD@HOST/DB or journal:FILE.log")


def _recorded_storage(spec: str, run_dir: Path | None) -> str:
    """``spec`` as the run folder records it: a journal inside the folder
    relative to it (so that a moved folder still resumes), a URL masked."""
    if spec.startswith("journal:") and run_dir is not None:
        path = Path(spec[len("journal:"):])
        try:
            return f"journal:{path.relative_to(run_dir.resolve())}"
        except ValueError:
            return spec
    return _mask_url(spec)


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
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if re.match(r"^postgres(ql)?://", spec):
        spec = _pg_driver(spec)
    kwargs: dict[str, Any] = {}
    if spec.startswith("sqlite"):
        # several local workers write to one file: wait for the lock, do not fail
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    try:
        with _quiet_optuna():
            return optuna.storages.RDBStorage(
                spec, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(), **kwargs)
    except ImportError as exc:
        raise ConfigError(f"--storage: {_mask_url(spec)}: a driver is missing: {exc}") from None
    except Exception as exc:  # sqlalchemy errors: bad URL, refused connection ...
        msg = " ".join(str(exc).split())[:300]
        raise ConfigError(f"--storage: cannot open {_mask_url(spec)}: "
                          f"{type(exc).__name__}: {_mask_url(msg)}") from None


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
