"""memsim: a simulation and parameter-sweep workbench for the ranking,
retention and context-packing policies of AI memory layers.

The notebook API::

    import memsim
    exp = memsim.load_experiment("experiments/quickstart.toml")
    result = memsim.run_experiment(exp, out=None)      # frames in memory
    result.summary, result.queries
"""

from __future__ import annotations

from .compare import Comparison, compare
from .config import Experiment, experiment_from_dict, load_experiment
from .errors import ConfigError, MemsimError, ParameterError, StreamError
from .runner import RunResult, load_run, run_experiment, run_many

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
    "load_run",
    "ConfigError",
    "MemsimError",
    "ParameterError",
    "StreamError",
    "__version__",
]
