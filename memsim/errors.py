"""Error types. Every user mistake raises a subclass of :class:`MemsimError`.

The CLI turns a ``MemsimError`` into one line on stderr and exit code 2; any
other exception is a bug in memsim and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["MemsimError", "ConfigError", "ParameterError", "StreamError"]


class MemsimError(Exception):
    """A mistake in what the user gave memsim (config, parameter, file)."""


class ConfigError(MemsimError, ValueError):
    """An experiment config is malformed: unknown key, wrong type, bad value."""


class ParameterError(ConfigError):
    """A policy or workload parameter is out of its allowed range."""


class StreamError(MemsimError, ValueError):
    """A stream folder or file is malformed."""
