"""memsim: a simulation and parameter-sweep workbench for the ranking,
retention and context-packing policies of AI memory layers.

The notebook API::

    import memsim
    exp = memsim.load_experiment("experiments/quickstart.toml")
    result = memsim.run_experiment(exp, out=None)      # frames in memory
    result.summary, result.queries
    run = memsim.load_run("results/...")               # a run folder, read back
    run.recall_by_age()                                # tidy: policy x budget x age bucket
    memsim.compare([result, run])                      # several runs, paired query by query
    memsim.advise("experiments/advise.toml")           # what to change, tested on held-out queries
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types

# A library logs, an application shows: memsim's diagnostics go to the
# "memsim" logger, silent unless the application (or `memsim -v`) shows them.
logging.getLogger("memsim").addHandler(logging.NullHandler())

# Every public name is loaded on first use (PEP 562), so that `import memsim`
# and `memsim --help` import no numerical library: the command line starts in
# a fraction of a second and each command imports what it needs.
_HOMES = {
    "Comparison": "memsim.compare", "compare": "memsim.compare",
    "Experiment": "memsim.config", "experiment_from_dict": "memsim.config",
    "load_experiment": "memsim.config",
    "ConfigError": "memsim.errors", "MemsimError": "memsim.errors",
    "ParameterError": "memsim.errors", "StreamError": "memsim.errors",
    "build_report": "memsim.report",
    "RunResult": "memsim.rundir", "load_run": "memsim.rundir",
    "run_experiment": "memsim.runner", "run_many": "memsim.runner",
    "run_sweep": "memsim.sweep", "SweepResult": "memsim.sweep",
    "load_sweep": "memsim.sweep",
    "advise": "memsim.advice", "Advice": "memsim.advice",
}


def __getattr__(name):
    # (The audit is ``memsim.audit.audit``: its module shares its name.)
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"memsim.{name}") is not None:
        return importlib.import_module(f"memsim.{name}")  # a submodule, e.g. memsim.stats
    raise AttributeError(f"module 'memsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOMES))


class _Package(types.ModuleType):
    """The package's module type. Loading a submodule binds it to the package's
    attribute of the same name; ``memsim.compare`` names both a submodule and
    the function users call, so that binding is skipped and the attribute
    stays the function (as it was when ``memsim`` imported it eagerly)."""

    def __setattr__(self, name, value):
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__version__ = "0.1.0"

__all__ = [
    "Comparison",
    "compare",
    "Experiment",
    "RunResult",
    "load_experiment",
    "experiment_from_dict",
    "run_experiment",
    "run_many",
    "run_sweep",
    "SweepResult",
    "load_sweep",
    "advise",
    "Advice",
    "build_report",
    "load_run",
    "ConfigError",
    "MemsimError",
    "ParameterError",
    "StreamError",
    "__version__",
]
