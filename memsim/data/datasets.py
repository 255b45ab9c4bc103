"""Public data sets on demand: ``memsim data get NAME``, named ``data:NAME``.

memsim never downloads anything implicitly. ``memsim data get locomo``
fetches a data set's file from its authors' repository (a URL pinned to a
commit), checks its pinned SHA-256, and keeps it in the data cache;
``--from FILE`` registers a copy you already have (an offline machine), with
the same check. Experiments, notebooks and commands then name the file
``data:locomo``, which :func:`resolve` turns into the cached path, or into an
error that gives the command to run.

The cache
---------
``$MEMSIM_DATA`` when set, else ``$XDG_CACHE_HOME/memsim`` (default
``~/.cache/memsim``; on Windows ``%LOCALAPPDATA%\\memsim``). A data set's file
lives at ``<cache>/<name>/<file name>``; it is written to a temporary name
in that folder and renamed only once its checksum matched, so the cache
never holds half a file or a wrong one.

Pinned files
------------
The checksums are of the files as their authors published them at the
pinned commit (the LoCoMo release is the authors' ``data/locomo10.zip``, one
JSON file per conversation, not the ``locomo10.json`` list; memsim's LoCoMo
importer reads both).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memsim.core.errors import MemsimError
from memsim.core.paths import file_in_the_way

__all__ = ["Dataset", "DATASETS", "DATA_PREFIX", "DataError", "cache_dir", "cached_path",
           "resolve", "get", "is_cached", "register", "describe", "check_folder", "content_hash"]

#: The prefix that names a data set instead of a path (``source = "data:locomo"``).
DATA_PREFIX = "data:"
#: The environment variable that moves the cache.
CACHE_ENV = "MEMSIM_DATA"


class DataError(MemsimError):
    """A data set is unknown, absent, or its bytes are not the pinned ones."""


@dataclass(frozen=True)
class Dataset:
    """A public file memsim knows how to fetch and check.

    Parameters
    ----------
    name : str
        The name after ``data:`` and in ``memsim data get NAME``.
    filename : str
        The file's name in the cache (its name upstream).
    url : str
        Where its authors publish it, pinned to a commit.
    sha256 : str
        Hex SHA-256 of the file's bytes.
    size : int
        Its size in bytes (a cheap check when the path is resolved).
    licence, citation, homepage, what : str
        Printed by ``memsim data get``; ``what`` says what the file holds.
    importer : str or None
        The importer a ``[workload] source = "data:NAME"`` uses by default
        (None: the file is not a stream, e.g. the review log for
        ``memsim calibrate revlog``).
    """

    name: str
    filename: str
    url: str
    sha256: str
    size: int
    licence: str
    citation: str
    homepage: str
    what: str
    importer: str | None = None


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset(
        name="locomo",
        filename="locomo10.zip",
        url=("https://raw.githubusercontent.com/snap-research/locomo/"
             "e76cdff4a04fce19090596d49862fe87a5c15aaa/data/locomo10.zip"),
        sha256="5c342973da4b45c12583c9fc7594d6410880f5aba2c491a0db09db262c906fb5",
        size=626_797,
        licence="CC BY-NC 4.0 (non-commercial use, with attribution)",
        citation=('Maharana, Lee, Tulyakov, Bansal, Barbieri and Fang, "Evaluating Very '
                  'Long-Term Conversational Memory of LLM Agents", ACL 2024'),
        homepage="https://github.com/snap-research/locomo",
        what=("LoCoMo: 10 very long multi-session conversations (5,882 turns), 1,986 "
              "questions with their evidence turns"),
        importer="locomo",
    ),
    Dataset(
        name="fsrs-revlog",
        filename="review_logs_josh_1711744352250_to_1728234780857.csv",
        url=("https://raw.githubusercontent.com/open-spaced-repetition/py-fsrs/"
             "ac403c0419439587df90c16375c8bf7dd827ffb3/tests/"
             "review_logs_josh_1711744352250_to_1728234780857.csv"),
        sha256="1cebb655825974579538877d018b5ffc8cc324bb6bb6fda9cbd5da85cfe9e445",
        size=686_229,
        licence="MIT (py-fsrs)",
        citation="open-spaced-repetition/py-fsrs, tests/review_logs_josh_*.csv",
        homepage="https://github.com/open-spaced-repetition/py-fsrs",
        what=("one user's flash-card review log: 12,580 pass/fail reviews of 1,205 cards "
              "over 191 days (for memsim calibrate revlog)"),
    ),
)}


def cache_dir() -> Path:
    """The data cache: ``$MEMSIM_DATA``, else the platform's user cache + ``memsim``.

    Always absolute: a relative ``$MEMSIM_DATA`` is taken from the current
    folder, where ``memsim data get`` writes, not from the folder of the
    experiment file that names ``data:NAME`` (relative sources are read
    from there).
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser().absolute()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return (Path(os.environ["LOCALAPPDATA"]) / "memsim").absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return ((Path(xdg) if xdg else Path.home() / ".cache") / "memsim").absolute()


def dataset(name: str) -> Dataset:
    """The registered data set ``name`` (:class:`DataError` naming the known ones)."""
    try:
        return DATASETS[name]
    except KeyError:
        raise DataError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}") from None


def cached_path(name: str, root: str | os.PathLike | None = None) -> Path:
    """Where data set ``name`` lives in the cache (``root`` or :func:`cache_dir`)."""
    d = dataset(name)
    return (Path(root).expanduser() if root is not None else cache_dir()) / d.name / d.filename


def _get_command(name: str) -> str:
    return f"memsim data get {name}"


def resolve(text: str) -> Path:
    """The file a ``data:NAME`` reference names, from the cache.

    Raises
    ------
    DataError
        Unknown name, or the file is not in the cache (the message gives the
        exact ``memsim data get`` command), or it has another size than the
        pinned file (a partial or foreign copy).
    """
    name = text[len(DATA_PREFIX):] if text.startswith(DATA_PREFIX) else text
    d = dataset(name)
    path = cached_path(name)
    if not path.is_file():
        raise DataError(f"{DATA_PREFIX}{name} is not in the data cache ({path.parent.parent}); "
                        f"get it with: {_get_command(name)} (or {_get_command(name)} --from "
                        f"FILE for a copy you have; {CACHE_ENV} moves the cache)")
    size = path.stat().st_size
    if size != d.size:
        raise DataError(f"{path}: {size} bytes, the pinned {DATA_PREFIX}{name} has {d.size}; "
                        f"delete it and run: {_get_command(name)}")
    return path


def check_folder(name: str, to: str | os.PathLike | None = None) -> None:
    """Refuse a data folder (``to``, else the cache) that is a file or lies
    under one, before anything is downloaded or copied.

    Raises
    ------
    DataError
        Naming ``--to`` (or ``$MEMSIM_DATA``, or the cache) and the file.
    """
    root = Path(to).expanduser() if to is not None else cache_dir()
    label = ("--to" if to is not None
             else f"${CACHE_ENV}" if os.environ.get(CACHE_ENV) else "the data cache")
    p = file_in_the_way(cached_path(name, root).parent)
    if p is not None:
        raise DataError(f"{label} {root}: {p} is a file, not a folder; give a folder, "
                        f"new or existing")


def _copy_checked(d: Dataset, read: Callable[[int], bytes], dest: Path, origin: str) -> Path:
    """Stream ``read`` into a temporary file beside ``dest``, hashing on the
    way; rename it to ``dest`` only when the SHA-256 is the pinned one."""
    made = [p for p in (dest.parent, dest.parent.parent) if not p.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for block in iter(lambda: read(1 << 20), b""):
                h.update(block)
                out.write(block)
        got = h.hexdigest()
        if got != d.sha256:
            raise DataError(f"{origin}: SHA-256 {got} is not the pinned {d.sha256} of "
                            f"{DATA_PREFIX}{d.name}; nothing was cached")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
        if not dest.exists():  # nothing cached: no empty folder made for it left behind
            for p in made:
                with contextlib.suppress(OSError):
                    p.rmdir()
    return dest


def get(name: str, *, to: str | os.PathLike | None = None, url: str | None = None,
        announce: Callable[[str], None] | None = None) -> Path:
    """Download data set ``name`` from its pinned URL (or ``url``, a mirror of
    the same bytes), check it and put it in the cache (or under ``to``).

    A file already there with the pinned size and checksum is kept (no
    download). ``announce(url)``, when given, is called right before a
    download starts (not when the cached file is kept).

    Returns
    -------
    Path
        The cached file.

    Raises
    ------
    DataError
        An unreachable URL, bytes that are not the pinned ones (then
        nothing is written), or a data folder that is a file (see
        :func:`check_folder`).
    """
    d = dataset(name)
    check_folder(name, to)
    dest = cached_path(name, to)
    if is_cached(name, to):
        return dest
    src = url or d.url
    if announce is not None:
        announce(src)
    # the network stack is imported only for a download (the CLI reads this
    # module to build its parser)
    import http.client
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(src, timeout=60) as resp:
            return _copy_checked(d, resp.read, dest, src)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError,
            ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        reason = getattr(exc, "reason", None) or exc
        raise DataError(f"cannot download {DATA_PREFIX}{name} from {src}: {reason} (on a "
                        f"machine without network: {_get_command(name)} --from FILE)") from None


def is_cached(name: str, to: str | os.PathLike | None = None) -> bool:
    """Whether data set ``name`` is in the cache (or under ``to``) with its
    pinned size and SHA-256: :func:`get` then downloads nothing."""
    d = dataset(name)
    dest = cached_path(name, to)
    return dest.is_file() and dest.stat().st_size == d.size and _sha256(dest) == d.sha256


def register(name: str, source: str | os.PathLike, *, to: str | os.PathLike | None = None
             ) -> Path:
    """Copy a file you already have into the cache as data set ``name``,
    after checking its SHA-256 (nothing is cached when it differs). A
    folder holding the file under its upstream name
    (:attr:`Dataset.filename`) stands for that file."""
    d = dataset(name)
    src = Path(source).expanduser()
    if src.is_dir():
        inside = src / d.filename
        if not inside.is_file():
            raise DataError(f"{src}: a folder without {d.filename}; give the file of "
                            f"{DATA_PREFIX}{name}")
        src = inside
    if not src.is_file():
        raise DataError(f"{src}: no such file")
    check_folder(name, to)
    dest = cached_path(name, to)
    if dest.exists() and dest.resolve() == src.resolve():
        if _sha256(src) != d.sha256:
            raise DataError(f"{src}: SHA-256 is not the pinned one of {DATA_PREFIX}{name}")
        return dest
    with open(src, "rb") as fh:
        return _copy_checked(d, fh.read, dest, str(src))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_HASH_CACHE: dict[tuple, str] = {}


def content_hash(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of a file's bytes, or of a folder's files (every file,
    by relative path and bytes: a copy elsewhere hashes the same), as a run's
    ``workload.source_hash`` holds it; cached while no file's size or mtime
    changes.

    Raises
    ------
    OSError
        A file that cannot be read (or ``path`` does not exist).
    """
    path = Path(path)
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    stats = tuple((str(f.relative_to(path)) if f != path else "", f.stat().st_size,
                   f.stat().st_mtime_ns) for f in files)
    key = (str(path), stats)
    if key in _HASH_CACHE:
        return _HASH_CACHE[key]
    h = hashlib.sha256()
    for f, (rel, _, _) in zip(files, stats):
        h.update(f"{rel}\0".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    digest = f"sha256:{h.hexdigest()}"
    _HASH_CACHE[key] = digest
    return digest


def describe(name: str) -> str:
    """What ``memsim data get`` prints about a data set: licence and citation."""
    d = dataset(name)
    return (f"{d.what}\nsource:   {d.url}\nlicence:  {d.licence}\ncite:     {d.citation}\n"
            f"use as:   {DATA_PREFIX}{d.name}")


def listing() -> str:
    """One line per known data set: its name, whether it is cached, where."""
    rows = []
    for name in DATASETS:
        path = cached_path(name)
        rows.append(f"{name:<12} {'cached' if path.is_file() else 'absent':<7} {path}")
    return "\n".join(rows)

