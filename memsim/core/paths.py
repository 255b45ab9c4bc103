"""Where a path cannot become a folder: the file in its way.

A command that will write under ``--out`` (or ``--to``, a storage file's
folder) checks this first: a file on the path is the user's mistake, said
in one line before any work, not an ``OSError`` from ``mkdir`` after it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["file_in_the_way"]


def file_in_the_way(path: Path) -> Path | None:
    """The nearest of ``path`` and its parents that exists, when it is not a
    folder (a file where a folder must be); None when that one is a folder.

    ``path`` itself is returned as given (relative stays relative), its
    parents as absolute paths."""
    for p in (path, *path.absolute().parents):
        if p.exists():
            return None if p.is_dir() else p
    return None
