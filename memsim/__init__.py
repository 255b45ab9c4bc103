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

from .compare import Comparison, compare
from .config import Experiment, experiment_from_dict, load_experiment
from .errors import ConfigError, MemsimError, ParameterError, StreamError
from .report import build_report
from .rundir import RunResult, load_run
from .runner import run_experiment, run_many


def __getattr__(name):
    # Sweeps pull in Optuna: load them on first use.
    # (The audit is ``memsim.audit.audit``: its module shares its name.)
    homes = {"run_sweep": "memsim.sweep", "SweepResult": "memsim.sweep",
             "advise": "memsim.advice", "Advice": "memsim.advice"}
    if name in homes:
        return getattr(importlib.import_module(homes[name]), name)
    raise AttributeError(f"module 'memsim' has no attribute {name!r}")


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
