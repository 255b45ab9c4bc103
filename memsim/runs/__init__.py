"""Experiments: the experiment file read and validated into an
:class:`~memsim.runs.config.Experiment` (:mod:`~memsim.runs.config`) and run
into a run folder (:mod:`~memsim.runs.runner`)."""
