"""Error and warning types. Every user mistake raises a subclass of
:class:`MemsimError`; every warning memsim gives is a :class:`MemsimWarning`.

The CLI turns a ``MemsimError`` into one line on stderr and exit code 2; any
other exception is a bug in memsim and keeps its traceback. Warnings go
through :mod:`warnings`, so a user can filter them by category, e.g.
``warnings.filterwarnings("ignore", category=memsim.core.errors.ReportWarning)``;
diagnostics go to the ``memsim`` logger (:mod:`logging`; ``memsim -v``
shows them on the command line).
"""

from __future__ import annotations

import signal

__all__ = ["MemsimError", "ConfigError", "ParameterError", "StreamError", "MemsimWarning",
           "ReportWarning", "SweepWarning", "Terminated"]


class MemsimError(Exception):
    """A mistake in what the user gave memsim (config, parameter, file)."""


class ConfigError(MemsimError, ValueError):
    """An experiment config is malformed: unknown key, wrong type, bad value.

    One exception may carry several mistakes (a config is validated part by
    part, and every independent part's error is reported): :attr:`errors`
    holds one message per mistake. ``str(exc)`` is the message when there is
    one, else the count and the messages, one a line. The CLI prints one
    ``memsim: error: ...`` line per message.

    Parameters
    ----------
    *args : str
        The one message (``ConfigError("...")``), as any exception takes it.
    errors : list of str, optional
        Several messages (instead of the one).
    """

    def __init__(self, *args, errors: list[str] | None = None) -> None:
        if errors is None:
            errors = [str(args[0]) if args else ""]
        else:
            errors = [str(e) for e in errors]
            if args or not errors:
                raise TypeError("ConfigError: give one message or a non-empty errors list")
            args = (errors[0] if len(errors) == 1
                    else f"{len(errors)} errors:\n" + "\n".join(f"  {e}" for e in errors),)
        super().__init__(*args)
        #: one message per mistake
        self.errors: list[str] = errors

    def prefixed(self, prefix: str) -> ConfigError:
        """The same error (same type), each message prefixed with ``prefix``."""
        return self.with_messages([f"{prefix}{m}" for m in self.errors])

    def with_messages(self, messages: list[str]) -> ConfigError:
        """The same error type holding ``messages`` instead."""
        return type(self)(errors=messages)


class ParameterError(ConfigError):
    """A policy or workload parameter is out of its allowed range."""


class StreamError(MemsimError, ValueError):
    """A stream folder or file is malformed."""


class Terminated(KeyboardInterrupt):
    """The process was told to stop by a signal other than Ctrl-C (SIGTERM).

    A :class:`KeyboardInterrupt`, so that it stops everything as Ctrl-C does
    (a run marks its folder failed, a sweep gives its open trials back to
    the study), while what is recorded names the signal: a manifest's
    ``error`` reads ``Terminated: SIGTERM`` where Ctrl-C leaves
    ``KeyboardInterrupt``.

    Parameters
    ----------
    signum : int
        The signal's number (``signal.SIGTERM``).
    """

    def __init__(self, signum: int) -> None:
        # the number alone in args: the exception pickles (a worker sends it
        # to its parent) and is rebuilt from it
        super().__init__(int(signum))
        #: the signal's number
        self.signum = int(signum)

    def __str__(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


class MemsimWarning(UserWarning):
    """Something the user should know that does not stop the work."""


class ReportWarning(MemsimWarning):
    """A part of a report (a figure, a curve) could not be drawn; the rest stands."""


class SweepWarning(MemsimWarning):
    """A sweep setting that does less than it seems (a pruner with one replicate,
    a report that failed after the trials)."""
