"""What this machine offers a run: the cores it may use and the CPU it has.

Light on purpose (the standard library only): the command line reads it while
building its parser, before any numerical library is imported.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["default_jobs", "cpu_model"]


def default_jobs() -> int:
    """The cores this process may run on (its CPU affinity where the system
    has one, else ``os.cpu_count()``): the default of ``memsim run --jobs``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what
    :func:`platform.processor` says), for benchmark output."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
