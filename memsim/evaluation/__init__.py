"""What a policy's answer is worth: the per-query metrics and the oracle
(:mod:`~memsim.evaluation.metrics`) and the position-aware reader model
(:mod:`~memsim.evaluation.reader`). Below the engine, which scores each
query as it packs it."""
