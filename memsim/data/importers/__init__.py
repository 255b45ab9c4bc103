"""Importers: real traces and benchmarks turned into memsim streams.

Each importer reads a published data set as its authors released it and
returns a validated :class:`memsim.data.stream.Stream` (``docs/contracts/stream.md``), with
cached embeddings so that the engine can replay it without a download.
"""

from __future__ import annotations

from pathlib import Path

from .locomo import cli_import_locomo, import_locomo, load_locomo_records

__all__ = ["import_locomo", "cli_import_locomo", "load_locomo_records", "load_source"]


def load_source(path: str | Path, importer: str | None = None, *, notes: str = "turns",
                embedder: str | None = None):
    """The stream of an experiment's ``[workload] source``: imported with
    ``importer`` (``"locomo"``: ``notes`` and ``embedder``, default
    ``"bm25"``; ``"trace"``: ``embedder``), else read as a stream folder
    (:func:`memsim.data.stream.read_stream`). One reader for ``memsim run``
    and for the exports that re-read a run's source."""
    if importer == "locomo":
        return import_locomo(path, notes=notes, embedder=embedder or "bm25")
    if importer == "trace":
        from .trace import import_trace  # (imports the embedders: only when asked)

        return import_trace(path, embedder=embedder)
    from memsim.data.stream import read_stream

    return read_stream(path)
