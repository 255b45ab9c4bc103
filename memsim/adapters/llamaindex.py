"""LlamaIndex: record a memsim trace from an index and its retrievals.

- :func:`insert_nodes` inserts nodes into an index (``index.insert_nodes``)
  and records one ``note_added`` per node (id = ``node.node_id``, ``text`` =
  the node's content, ``actor`` / ``namespace`` from the metadata keys of
  those names when set).
- :class:`TraceNodePostprocessor` is a LlamaIndex node postprocessor that
  changes nothing: it records the query (``query`` event, ``text`` = the
  query string) and the nodes retrieved for it, best first, with their
  scores (``retrieved``), and passes the nodes on. Put it first in a query
  engine's ``node_postprocessors`` (what later postprocessors drop was still
  retrieved), or call ``postprocess_nodes(nodes, query_str=...)`` after a
  retriever.
- :meth:`TraceNodePostprocessor.mark_used` records the nodes the answer used
  (e.g. a response's ``source_nodes``).

Writes through a :class:`memsim.data.trace.TraceWriter`. Needs
``llama-index-core`` (the ``[llamaindex]`` extra).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

__all__ = ["TraceNodePostprocessor", "insert_nodes"]


def insert_nodes(index: Any, nodes: Sequence[BaseNode], writer: Any, *,
                 namespace: str | None = None) -> list[str]:
    """``index.insert_nodes(nodes)``, then one ``note_added`` per node."""
    nodes = list(nodes)
    index.insert_nodes(nodes)
    for node in nodes:
        meta = node.metadata or {}
        writer.note_added(node.node_id, node.get_content(),
                          actor=None if meta.get("actor") is None else str(meta["actor"]),
                          namespace=str(meta["namespace"]) if meta.get("namespace") is not None
                          else namespace)
    return [n.node_id for n in nodes]


class TraceNodePostprocessor(BaseNodePostprocessor):
    """Records each query and its retrieved nodes; returns the nodes unchanged.

    A pydantic model: its fields are given by keyword
    (``TraceNodePostprocessor(writer=writer)``).

    Attributes
    ----------
    writer : memsim.data.trace.TraceWriter
    actor, namespace : str, optional
        The ``actor`` and ``namespace`` of the queries.
    last_query_id : str or None
        The id of the query recorded last (for :meth:`mark_used`).
    """

    writer: Any = Field(exclude=True)
    actor: Optional[str] = None
    namespace: Optional[str] = None
    _last: Optional[str] = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "MemsimTraceNodePostprocessor"

    @property
    def last_query_id(self) -> Optional[str]:
        return self._last

    def record(self, query_str: str, nodes: Sequence[NodeWithScore]) -> str:
        """Record one query and what was retrieved for it; returns the query id."""
        qid = self.writer.query(query_str, actor=self.actor, namespace=self.namespace)
        scores = [n.score for n in nodes]
        self.writer.retrieved(qid, [n.node.node_id for n in nodes],
                              None if any(s is None for s in scores) else scores)
        self._last = qid
        return qid

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("TraceNodePostprocessor needs the query (query_bundle or query_str)")
        self.record(query_bundle.query_str, nodes)
        return nodes

    def mark_used(self, nodes: Sequence[NodeWithScore | BaseNode],
                  query_id: Optional[str] = None) -> None:
        """Record that the answer to ``query_id`` (default: the last query)
        used ``nodes``."""
        qid = query_id or self._last
        if qid is None:
            raise ValueError("mark_used: no query recorded yet")
        ids = [(n.node if isinstance(n, NodeWithScore) else n).node_id for n in nodes]
        self.writer.used(qid, ids)
