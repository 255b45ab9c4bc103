"""Results, read from run folders: the folder layout, manifest and
:class:`~memsim.reporting.rundir.RunResult` (:mod:`~memsim.reporting.rundir`),
bootstrap intervals (:mod:`~memsim.reporting.stats`), recency curves
(:mod:`~memsim.reporting.curves`), paired comparisons
(:mod:`~memsim.reporting.compare`), figures (:mod:`~memsim.reporting.plots`)
and ``report.html`` / ``report.md`` (:mod:`~memsim.reporting.report`).
Never imports the engine or :mod:`memsim.runs`: what is reported is what a
run folder holds."""
