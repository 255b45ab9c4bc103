"""Importers: real traces and benchmarks turned into memsim streams.

Each importer reads a published data set as its authors released it and
returns a validated :class:`memsim.data.stream.Stream` (``docs/contracts/stream.md``), with
cached embeddings so that the engine can replay it without a download.
"""

from __future__ import annotations

from .locomo import cli_import_locomo, import_locomo, load_locomo_records

__all__ = ["import_locomo", "cli_import_locomo", "load_locomo_records"]
