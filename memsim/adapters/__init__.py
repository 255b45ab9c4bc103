"""Record memsim traces from the frameworks applications run.

- :mod:`memsim.adapters.langchain`: :class:`~memsim.adapters.langchain.TracingRetriever`,
  a LangChain retriever over any vector store that records what is added,
  every query with the documents returned and their scores, and what the
  application marks as used (needs ``langchain-core``).
- :mod:`memsim.adapters.llamaindex`:
  :class:`~memsim.adapters.llamaindex.TraceNodePostprocessor`, a LlamaIndex
  node postprocessor that records each query with the nodes retrieved and
  their scores, and :func:`~memsim.adapters.llamaindex.insert_nodes`, which
  records the nodes added to an index (needs ``llama-index-core``).

Both write through a :class:`memsim.data.trace.TraceWriter`. The submodules import
their framework, so they are imported by name, never from here.
"""
