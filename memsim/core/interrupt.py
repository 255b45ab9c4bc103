"""Stopping on a signal: SIGINT and SIGTERM unwind the process as a
:class:`KeyboardInterrupt`, and a stop the interpreter lost is raised again.

Python runs a signal's handler in the main thread at its next bytecode. When
that bytecode belongs to a Python function called back from C through ctypes
(numba calls one, ``_raw_object_cache_notify``, while it compiles a kernel on
a run's first batch), the exception the handler raises is printed as
"Exception ignored on calling ctypes callback function" and lost: the run
would go on as if no one had asked it to stop. So the handlers here also
remember the stop, and :func:`raise_if_asked`, which the simulation calls
between batches, raises it again until the process unwinds.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable

from memsim.core.errors import Terminated

_asked: int | None = None  # the signal of the stop asked for in this process


def _stop(signum: int) -> KeyboardInterrupt:
    # Ctrl-C is a plain KeyboardInterrupt; SIGTERM a Terminated naming itself
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def on_signal(signum, frame) -> None:
    """A handler of SIGINT and SIGTERM: remember the stop, and raise it.

    Every signal raises again (a second Ctrl-C stops the clean-up too).
    """
    global _asked
    _asked = signum
    raise _stop(signum)


def once_on_signal(signum, frame) -> None:
    """A handler of SIGINT and SIGTERM whose first signal unwinds the process
    (a run marks its folder failed, naming the signal; a sweep worker gives
    its trials back) and whose later ones are ignored, so that they cannot
    cut that bookkeeping short.

    Ignored by a handler that does nothing, not ``SIG_IGN``: a signal
    already caught and pending would find ``SIG_IGN`` and raise ``OSError``
    ("ignored due to race condition") in the middle of it.
    """
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGTERM, _ignore)
    on_signal(signum, frame)


def _ignore(signum, frame) -> None:
    pass


def install(handler: Callable[[int, Any], None]) -> None:
    """``handler`` (:func:`on_signal` or :func:`once_on_signal`) on SIGINT
    and SIGTERM, and a ``sys.unraisablehook`` that keeps quiet about this
    module's stops: one lost in a callback (an import's module lock, numba's
    compiler) is raised again later, so Python's "Exception ignored ...
    Traceback" report of it would only alarm."""
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    previous = sys.unraisablehook
    if getattr(previous, "_memsim_quiet", False):
        return

    def quiet(unraisable) -> None:
        if _asked is not None and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        previous(unraisable)

    quiet._memsim_quiet = True  # type: ignore[attr-defined]
    sys.unraisablehook = quiet


def raise_if_asked() -> None:
    """Raise the stop a signal asked for, if any: a no-op unless one of this
    module's handlers has run in this process (and :func:`forget` has not).

    Called where the process computes (between the simulation's batches),
    never in the clean-up a stop starts, so it raises again only a stop
    that was lost."""
    if _asked is not None:
        raise _stop(_asked)


def asked() -> KeyboardInterrupt | None:
    """The stop a signal asked for (a new exception of its kind), or None."""
    return None if _asked is None else _stop(_asked)


def forget() -> None:
    """Forget the stop asked for: a command that has handled it and returns
    (in a process that goes on, such as a test's or a notebook's)."""
    global _asked
    _asked = None
