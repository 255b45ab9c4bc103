"""A LangChain retriever that records a memsim trace while the app runs.

:class:`TracingRetriever` wraps a LangChain vector store (any
``langchain_core.vectorstores.VectorStore``: FAISS, Chroma, the in-memory
store...) and is itself a LangChain retriever (``BaseRetriever``), so it goes
wherever a retriever goes (``retriever.invoke(question)``, LCEL chains).
Through a :class:`memsim.data.trace.TraceWriter` it records:

- ``note_added`` for every document added with :meth:`TracingRetriever.add_documents`
  (id = the store's document id, ``text`` = ``page_content``, ``actor`` and
  ``namespace`` from the metadata keys ``actor`` / ``namespace`` when set);
- ``note_deleted`` for :meth:`TracingRetriever.delete`;
- ``query`` and ``retrieved`` for every retrieval: the query's id is the
  LangChain run id of the retrieval, the notes are the returned documents
  best first with the store's scores (``similarity_search_with_relevance_scores``:
  higher is better; a store without a relevance function falls back to
  ``similarity_search_with_score``, whose scores may be distances);
- ``used`` for :meth:`TracingRetriever.mark_used` (the documents the answer
  cited or the user kept).

Each returned document is a copy whose metadata adds ``memsim_query`` (the
query id) and ``memsim_score``, so the application can mark it used later.
Needs ``langchain-core`` (the ``[langchain]`` extra installs it).
"""

from __future__ import annotations

from typing import Any, Sequence

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field

__all__ = ["TracingRetriever"]

QUERY_KEY = "memsim_query"
SCORE_KEY = "memsim_score"


class TracingRetriever(BaseRetriever):
    """A retriever over ``vectorstore`` that records a memsim trace.

    A pydantic model: its fields are given by keyword
    (``TracingRetriever(vectorstore=store, writer=writer)``).

    Attributes
    ----------
    vectorstore : VectorStore
    writer : memsim.data.trace.TraceWriter
    k : int
        Documents returned per query (default 4).
    search_kwargs : dict
        More keyword arguments of the store's search (``filter``...).
    actor : str, optional
        The ``actor`` of the queries (default: the writer's).
    namespace : str, optional
        The ``namespace`` of the queries and of notes without one in their
        metadata (a separate store, e.g. one per user).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    writer: Any = Field(exclude=True)
    k: int = 4
    search_kwargs: dict = Field(default_factory=dict)
    actor: str | None = None
    namespace: str | None = None

    def add_documents(self, documents: Sequence[Document], ids: Sequence[str] | None = None,
                      **kwargs: Any) -> list[str]:
        """Add to the store, then record one ``note_added`` per document."""
        docs = list(documents)
        added = self.vectorstore.add_documents(docs, ids=list(ids) if ids else None, **kwargs)
        for doc, doc_id in zip(docs, added):
            meta = doc.metadata or {}
            self.writer.note_added(str(doc_id), doc.page_content,
                                   actor=_text(meta.get("actor")),
                                   namespace=_text(meta.get("namespace")) or self.namespace)
        return list(added)

    def delete(self, ids: Sequence[str], **kwargs: Any) -> Any:
        """Delete from the store, then record one ``note_deleted`` per id."""
        out = self.vectorstore.delete(list(ids), **kwargs)
        for doc_id in ids:
            self.writer.note_deleted(str(doc_id))
        return out

    def _search(self, query: str) -> list[tuple[Document, float]]:
        try:
            return self.vectorstore.similarity_search_with_relevance_scores(
                query, k=self.k, **self.search_kwargs)
        except NotImplementedError:  # the store has no relevance function
            return self.vectorstore.similarity_search_with_score(query, k=self.k,
                                                                 **self.search_kwargs)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        pairs = self._search(query)
        qid = self.writer.query(query, id=str(run_manager.run_id), actor=self.actor,
                                namespace=self.namespace)
        ids = []
        for doc, _ in pairs:
            if doc.id is None:
                raise ValueError(f"{type(self.vectorstore).__name__} returned a document "
                                 "without an id: the trace cannot name it")
            ids.append(str(doc.id))
        self.writer.retrieved(qid, ids, [float(s) for _, s in pairs])
        return [Document(id=doc.id, page_content=doc.page_content,
                         metadata={**(doc.metadata or {}), QUERY_KEY: qid,
                                   SCORE_KEY: float(score)})
                for doc, score in pairs]

    def mark_used(self, documents: Sequence[Document], query_id: str | None = None) -> None:
        """Record that the answer used ``documents`` (returned by this
        retriever; their query is read from their metadata unless given)."""
        by_query: dict[str, list[str]] = {}
        for doc in documents:
            qid = query_id or (doc.metadata or {}).get(QUERY_KEY)
            if qid is None or doc.id is None:
                raise ValueError("mark_used: a document this retriever did not return "
                                 "(no memsim_query in its metadata, or no id)")
            by_query.setdefault(str(qid), []).append(str(doc.id))
        for qid, ids in by_query.items():
            self.writer.used(qid, ids)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
