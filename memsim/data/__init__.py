"""Note streams: the format (:mod:`~memsim.data.stream`), the synthetic
generator (:mod:`~memsim.data.workload`) and its planted posterior
(:mod:`~memsim.data.planted`), embedders of real text
(:mod:`~memsim.data.embed`, :mod:`~memsim.data.lexical`), importers of real
data (:mod:`memsim.data.importers`), the trace writer
(:mod:`~memsim.data.trace`) and public data on demand
(:mod:`~memsim.data.datasets`). Imports only :mod:`memsim.core`."""
