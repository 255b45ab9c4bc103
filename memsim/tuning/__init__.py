"""What to change, and how sure: held-out advice over the whole pipeline
(:mod:`~memsim.tuning.advice`), the audit of a sweep space
(:mod:`~memsim.tuning.audit`), the derived optimum
(:mod:`~memsim.tuning.optimum`), decay families fitted to data
(:mod:`~memsim.tuning.calibrate`) and a synthetic twin of a stream
(:mod:`~memsim.tuning.twin`)."""
