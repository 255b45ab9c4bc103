"""The foundations every layer stands on: memsim's errors
(:mod:`~memsim.core.errors`), parameter validation (:mod:`~memsim.core.params`),
named seed streams (:mod:`~memsim.core.rng`), the host's description
(:mod:`~memsim.core.machine`), stopping on a signal
(:mod:`~memsim.core.interrupt`), the file in an output path's way
(:mod:`~memsim.core.paths`) and the exact 0/1 knapsack
(:mod:`~memsim.core.knapsack`) that both the packers and the oracle use.
Nothing here imports another memsim package."""
