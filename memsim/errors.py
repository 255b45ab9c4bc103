"""Error and warning types. Every user mistake raises a subclass of
:class:`MemsimError`; every warning memsim gives is a :class:`MemsimWarning`.

The CLI turns a ``MemsimError`` into one line on stderr and exit code 2; any
other exception is a bug in memsim and keeps its traceback. Warnings go
through :mod:`warnings`, so a user can filter them by category, e.g.
``warnings.filterwarnings("ignore", category=memsim.errors.ReportWarning)``;
diagnostics go to the ``memsim`` logger (:mod:`logging`; ``memsim -v``
shows them on the command line).
"""

from __future__ import annotations

__all__ = ["MemsimError", "ConfigError", "ParameterError", "StreamError", "MemsimWarning",
           "ReportWarning", "SweepWarning"]


class MemsimError(Exception):
    """A mistake in what the user gave memsim (config, parameter, file)."""


class ConfigError(MemsimError, ValueError):
    """An experiment config is malformed: unknown key, wrong type, bad value."""


class ParameterError(ConfigError):
    """A policy or workload parameter is out of its allowed range."""


class StreamError(MemsimError, ValueError):
    """A stream folder or file is malformed."""


class MemsimWarning(UserWarning):
    """Something the user should know that does not stop the work."""


class ReportWarning(MemsimWarning):
    """A part of a report (a figure, a curve) could not be drawn; the rest stands."""


class SweepWarning(MemsimWarning):
    """A sweep setting that does less than it seems (a pruner with one replicate,
    a report that failed after the trials)."""
