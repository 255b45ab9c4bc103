"""Optional compilation (numba) of the few loops numpy cannot vectorise.

A loop whose steps depend on each other (a packer's swap pass, one row at a
time) costs a few numpy calls per step when vectorised over rows; on the
few rows of a per-query correction those calls cost more than the work.
Such a loop is written twice: a numpy version over all rows, and a
per-row kernel compiled with numba (the ``fast`` extra) that does the same
float operations in the same order, so both give the same results bit for
bit. The numpy version runs when numba is not installed, or when the
environment variable ``MEMSIM_NUMBA`` is ``0`` (read at each call, so a test
can compare both).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Any, Callable

__all__ = ["ENV", "available", "enabled", "kernel"]

#: the environment variable that turns the compiled kernels off (``0``)
ENV = "MEMSIM_NUMBA"


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether numba is installed (the optional ``fast`` extra); it is
    imported only when a kernel is first called."""
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    """Whether the compiled kernels run: numba is installed and
    ``MEMSIM_NUMBA`` is not ``0``."""
    return os.environ.get(ENV, "1") != "0" and available()


def kernel(fn: Callable) -> Callable[..., Any]:
    """``fn`` compiled by numba on its first call (nopython, cached on
    disk); call it only when :func:`enabled`."""
    compiled: list[Callable] = []

    def call(*args):
        if not compiled:
            numba = importlib.import_module("numba")
            compiled.append(numba.njit(cache=True, nogil=True)(fn))
        return compiled[0](*args)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    call.py_func = fn  # the plain Python function
    return call
