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
import importlib.abc
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
    "Comparison": "memsim.reporting.compare", "compare": "memsim.reporting.compare",
    "Experiment": "memsim.runs.config", "experiment_from_dict": "memsim.runs.config",
    "load_experiment": "memsim.runs.config",
    "ConfigError": "memsim.core.errors", "MemsimError": "memsim.core.errors",
    "ParameterError": "memsim.core.errors", "StreamError": "memsim.core.errors",
    "build_report": "memsim.reporting.report",
    "RunResult": "memsim.reporting.rundir", "load_run": "memsim.reporting.rundir",
    "run_experiment": "memsim.runs.runner", "run_many": "memsim.runs.runner",
    "run_sweep": "memsim.sweep", "SweepResult": "memsim.sweep",
    "load_sweep": "memsim.sweep",
    "advise": "memsim.tuning.advice", "Advice": "memsim.tuning.advice",
}


# The modules live in one package per layer (README, "Architecture"). Their
# earlier flat names (``memsim.stream``, ``memsim.testing``, ...) stay
# importable as the same module objects, so code written against them keeps
# working; memsim's own code uses the layered names.
_MOVED = {
    **{f"memsim.{m}": f"memsim.core.{m}" for m in ("errors", "machine", "params", "rng", "knapsack")},
    **{f"memsim.{m}": f"memsim.data.{m}" for m in (
        "stream", "workload", "lexical", "embed", "planted", "importers", "trace", "datasets")},
    **{f"memsim.{m}": f"memsim.evaluation.{m}" for m in ("metrics", "reader")},
    **{f"memsim.{m}": f"memsim.reporting.{m}" for m in (
        "rundir", "stats", "curves", "compare", "plots", "report")},
    **{f"memsim.{m}": f"memsim.runs.{m}" for m in ("config", "runner")},
    **{f"memsim.{m}": f"memsim.checks.{m}" for m in (
        "engine_check", "feather_check", "framework_check", "langchain_check", "testing")},
    **{f"memsim.{m}": f"memsim.tuning.{m}" for m in ("advice", "audit", "calibrate", "optimum", "twin")},
    "memsim.tracking": "memsim.adapters.tracking",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves a flat name of :data:`_MOVED` (or a module under it, e.g.
    ``memsim.importers.trace``) to the module at its layered name: one module
    object under both names, so classes and state are never duplicated."""

    @staticmethod
    def _target(fullname: str) -> str | None:
        if not fullname.startswith("memsim."):
            return None
        for old, new in _MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                return new + fullname[len(old):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        new = self._target(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(self._target(spec.name))
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the alias's spec on the module: give it back its own
        module.__spec__ = module.__spec__.loader_state


# first in line: the path finder would otherwise load a second copy of a
# module under a flat package name (``memsim.importers.trace``)
sys.meta_path.insert(0, _MovedModules())


def __getattr__(name):
    # (The audit is ``memsim.tuning.audit.audit``: its module shares its name.)
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"memsim.{name}") is not None:
        return importlib.import_module(f"memsim.{name}")  # a submodule, e.g. memsim.policies
    raise AttributeError(f"module 'memsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOMES))


class _Package(types.ModuleType):
    """The package's module type. Loading a submodule binds it to the package's
    attribute of the same name; ``memsim.reporting.compare`` names both a submodule and
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
