"""Plugins: components registered by the user's modules and by installed packages.

A component registers itself when its module is imported
(:func:`~memsim.policies.base.register`). Two ways make memsim import a
module of the user's in every process that reads a config (a run, a rerun
from a run folder's ``config.toml``, ``memsim report``, each sweep worker):

- ``[experiment] plugins = ["my_package.my_decays"]``: the modules are
  imported (:func:`import_plugins`) before the rest of the config is
  validated, and the list is written to the resolved ``config.toml`` and to
  ``manifest.json``;
- an installed distribution's entry points of the group
  :data:`ENTRY_POINT_GROUP` (``memsim.components``), each naming a module
  (or a component class, registered on load)::

      [project.entry-points."memsim.components"]
      my-decays = "my_package.my_decays"

  They are loaded once, lazily, the first time the registry is asked for
  a name it does not hold (:func:`load_entry_points`, called by
  :func:`~memsim.policies.base.build_component`; ``memsim policies`` loads
  them to list them): never while memsim itself is being imported. A
  broken entry point keeps none of the others from loading, and stops only
  a config that names a component memsim lacks, whose error then names it
  (:func:`broken_entry_points`).

A module is found on ``sys.path`` as any import (installed, or on
``PYTHONPATH``); a spawned worker process inherits the parent's path.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Any, Iterable

from memsim.core.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "import_plugins", "load_entry_points", "broken_entry_points",
           "check_module_names"]

#: The entry-point group of installed component packages.
ENTRY_POINT_GROUP = "memsim.components"

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_entry_points_loaded = False
_broken: list[str] = []  # why each entry point that failed to load did


def check_module_names(names: Any, where: str) -> tuple[str, ...]:
    """``names`` as a tuple of dotted module names.

    Raises
    ------
    ConfigError
        ``where`` and what is wrong, when ``names`` is not a list of module
        names.
    """
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of module names, e.g. "
                          f"[\"my_package.my_decays\"], got {names!r}")
    for name in names:
        if not isinstance(name, str) or not _MODULE.match(name):
            raise ConfigError(f"{where}: {name!r} is not a module name (dotted Python "
                              "identifiers, e.g. \"my_package.my_decays\")")
    return tuple(names)


def import_plugins(names: Iterable[str], where: str = "experiment.plugins") -> None:
    """Import each module of ``names`` (once: Python caches modules).

    Raises
    ------
    ConfigError
        One line naming ``where`` and the module: not found, or its import
        raised.
    """
    for name in check_module_names(list(names), where):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            gone = exc.name or ""
            if gone and gone != name and not name.startswith(gone + "."):
                # the module was found: a module it imports is not installed
                raise ConfigError(f"{where}: importing {name!r} failed: it imports {gone!r}, "
                                  f"which is not installed ({exc})") from None
            raise ConfigError(f"{where}: cannot import {name!r}: no such module on the Python "
                              "path; install it or add its folder to PYTHONPATH") from None
        except Exception as exc:  # noqa: BLE001 - the user's module: any error, one line
            raise ConfigError(f"{where}: importing {name!r} failed: "
                              f"{type(exc).__name__}: {exc}") from None


def load_entry_points() -> list[str]:
    """Load the :data:`ENTRY_POINT_GROUP` entry points of the installed
    distributions, once per process: a module is imported (it registers its
    components), a component class is registered. One that cannot be
    loaded (another package's broken import) is skipped, the others loaded.

    Returns
    -------
    list of str
        :func:`broken_entry_points`: one line per entry point that could
        not be loaded, naming it, its distribution and the error.
    """
    global _entry_points_loaded
    if _entry_points_loaded:
        return broken_entry_points()
    _entry_points_loaded = True
    from .base import REGISTRY, Component, register

    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - another package's code: any error, one line
            _broken.append(f"entry point {ep.name} = {ep.value!r} of {dist} (group "
                           f"{ENTRY_POINT_GROUP}): cannot be loaded: "
                           f"{type(exc).__name__}: {exc}")
            continue
        if isinstance(obj, type) and issubclass(obj, Component) \
                and REGISTRY.get(obj.slot, {}).get(obj.name) is not obj:
            register(obj)
    return broken_entry_points()


def broken_entry_points() -> list[str]:
    """Why each entry point :func:`load_entry_points` could not load did,
    one line each (empty before it ran, or when all loaded)."""
    return list(_broken)
