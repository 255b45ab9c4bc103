"""A lexical retriever that needs no download: exact BM25 as dense vectors.

The engine scores a query against notes with dot products of cached vectors
(cosine, or Feather DB's ``1 / (1 + squared L2)``). Okapi BM25 is itself a dot
product: with ``c_q(w)`` the count of term ``w`` in the query,

.. math::

    \\mathrm{BM25}(q, d) = \\sum_w c_q(w)\\, x_d(w), \\qquad
    x_d(w) = \\mathrm{idf}(w)\\,
             \\frac{f_d(w)\\,(k_1 + 1)}{f_d(w) + k_1 (1 - b + b\\,|d| / \\mathrm{avgdl})},

    \\mathrm{idf}(w) = \\ln\\Big(1 + \\frac{N - n(w) + 0.5}{n(w) + 0.5}\\Big),

where ``f_d(w)`` is the count of ``w`` in document ``d``, ``|d|`` its length
in terms, ``avgdl`` the mean length, ``N`` the number of documents and
``n(w)`` the number that contain ``w`` (Robertson and Zaragoza, "The
Probabilistic Relevance Framework: BM25 and Beyond", FnTIR 3(4), 2009; the
``ln(1 + ...)`` form of the idf is Lucene's, which is never negative).

Cosine similarity would divide by ``|x_d|`` and so change the ranking. To make
*every* similarity the engine offers rank exactly as BM25, each document
vector gets one extra coordinate that brings all norms of its group to the
same value (the inner-product-to-nearest-neighbour transform of Bachrach et
al., RecSys 2014):

.. math::

    \\tilde x_d = \\big(x_d / M,\\ \\sqrt{1 - |x_d|^2 / M^2}\\big), \\qquad
    \\tilde q = (c_q / |c_q|,\\ 0),

with ``M`` the largest ``|x_d|`` of the group. Then ``|\\tilde x_d| = 1`` and
``cos(q, d) = q . d = BM25(q, d) / (M |c_q|)``, and the squared L2 distance is
``2 - 2 cos``: cosine, dot product and L2 all order a group's documents by
BM25. Values are small (the best match of a LoCoMo question has cosine 0.16
to 0.37, 10th to 90th percentile), which matters for policies that add
similarity to recency on a fixed scale (Feather DB's blend, Generative
Agents' sum): there recency weighs more than with dense embeddings.

Groups (namespaces) are independent corpora: statistics (``N``, ``n(w)``,
``avgdl``) and the vocabulary are per group, and the vocabulary columns are
**reused** across groups (column 7 is one word in one conversation and another
word in the next), which keeps the matrix at ``max`` rather than ``sum`` of
the vocabulary sizes. Vectors of different groups are therefore not
comparable; this is right for streams whose queries only see notes of their
own namespace (the engine's ``namespace`` column).

Text analysis (:func:`tokenize`): lower case, possessive ``'s`` dropped,
maximal runs of letters and digits, a built-in English stop-word list, and
Harman's "S" stemmer (plural endings only; D. Harman, "How effective is
suffixing?", JASIS 42(1), 1991).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from memsim.core.errors import ConfigError

__all__ = ["STOPWORDS", "tokenize", "s_stem", "LexicalEmbeddings", "bm25_embeddings",
           "bm25_scores"]

#: English function words dropped by :func:`tokenize`: articles, pronouns,
#: auxiliaries, prepositions and conjunctions, which carry no topic.
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves s t don ll m re ve d
also am im ive id youre thats its oh yeah hey hi wow
""".split())

# Curly apostrophes are folded to ASCII before the possessive is removed.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})
_POSSESSIVE = re.compile(r"'s\b")
_WORD = re.compile(r"[a-z0-9]+")


def s_stem(word: str) -> str:
    """Harman's "S" stemmer: strip English plural endings.

    Rules, first match wins: ``-ies`` -> ``-y`` (not after ``e`` or ``a``),
    ``-es`` -> ``-e`` (not after ``a``, ``e`` or ``o``), ``-s`` -> ``''`` (not
    after ``u`` or ``s``). Words of three letters or fewer are kept.
    """
    if len(word) <= 3:
        return word
    if word.endswith("ies") and word[-4] not in "ea":
        return word[:-3] + "y"
    if word.endswith("es") and word[-3] not in "aeo":
        return word[:-1]
    if word.endswith("s") and word[-2] not in "us":
        return word[:-1]
    return word


def tokenize(text: str, *, stopwords: bool = True, stem: bool = True) -> list[str]:
    """Split a text into index terms (see the module docstring).

    Parameters
    ----------
    text : str
    stopwords : bool
        Drop the words of :data:`STOPWORDS`.
    stem : bool
        Apply :func:`s_stem`.

    Returns
    -------
    list of str
    """
    words = _WORD.findall(_POSSESSIVE.sub("", text.lower().translate(_APOSTROPHES)))
    if stopwords:
        words = [w for w in words if w not in STOPWORDS]
    if stem:
        words = [s_stem(w) for w in words]
    return words


@dataclass(frozen=True, eq=False)
class LexicalEmbeddings:
    """Dense BM25 vectors of a corpus and its queries.

    Attributes
    ----------
    notes, queries : ndarray
        float32, one row per document / query, ``dim`` columns (the largest
        group vocabulary plus the norm-equalising coordinate, which is the
        last column). Document rows have norm 1; query rows norm 1, or 0 for
        a query with no term in its group's vocabulary.
    scale : ndarray
        float64, per query: ``BM25 = dot * scale`` (``M |c_q|``; 0 for a
        query whose vector is 0).
    info : dict
        Parameters and vocabulary sizes (JSON-serialisable), for a stream's
        ``meta``.
    """

    notes: np.ndarray
    queries: np.ndarray
    scale: np.ndarray
    info: dict = field(default_factory=dict)


def _token_table(texts: Sequence[str], groups: np.ndarray, stopwords: bool,
                 stem: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per term occurrence: ``row``, ``group``, ``term``; and the
    number of terms of each text."""
    tokens = [tokenize(str(t), stopwords=stopwords, stem=stem) for t in texts]
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    rows = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
    terms = np.array([w for t in tokens for w in t], dtype=object)
    return pd.DataFrame({"row": rows, "group": groups[rows], "term": terms}), lengths


def _group_codes(doc_groups, query_groups, n_docs: int, n_queries: int
                 ) -> tuple[np.ndarray, np.ndarray, list]:
    """Integer group codes for documents and queries (one group when None)."""
    if doc_groups is None and query_groups is None:
        return np.zeros(n_docs, np.int64), np.zeros(n_queries, np.int64), ["all"]
    if doc_groups is None or query_groups is None:
        raise ConfigError("bm25_embeddings: give doc_groups and query_groups together, or neither")
    d = np.asarray(doc_groups).astype(str)
    q = np.asarray(query_groups).astype(str)
    if len(d) != n_docs or len(q) != n_queries:
        raise ConfigError(f"bm25_embeddings: {len(d)} doc groups for {n_docs} documents and "
                          f"{len(q)} query groups for {n_queries} queries; they must match")
    names = sorted(set(d) | set(q))
    code = {g: i for i, g in enumerate(names)}
    return (np.array([code[g] for g in d], dtype=np.int64),
            np.array([code[g] for g in q], dtype=np.int64), names)


def _check_params(k1: float, b: float) -> None:
    if not (np.isfinite(k1) and k1 >= 0):
        raise ConfigError(f"The 'k1' parameter of bm25_embeddings must be >= 0. "
                          f"Got {k1!r} instead.")
    if not (np.isfinite(b) and 0 <= b <= 1):
        raise ConfigError(f"The 'b' parameter of bm25_embeddings must be in [0, 1]. "
                          f"Got {b!r} instead.")


def _bm25_sparse(doc_texts, query_texts, doc_groups, query_groups, k1, b, stopwords, stem):
    """Sparse BM25 document weights ``x_d`` and query counts ``c_q`` over
    per-group vocabulary columns."""
    _check_params(k1, b)
    n_docs, n_q = len(doc_texts), len(query_texts)
    dg, qg, names = _group_codes(doc_groups, query_groups, n_docs, n_q)
    n_groups = len(names)
    occ, dl = _token_table(doc_texts, dg, stopwords, stem)
    # Vocabulary: sorted (group, term) pairs, columns numbered within a group,
    # so the columns do not depend on the order of the documents.
    vocab = (occ[["group", "term"]].drop_duplicates().sort_values(["group", "term"])
             .reset_index(drop=True))
    vocab["col"] = vocab.groupby("group").cumcount().astype(np.int64)
    sizes = np.bincount(vocab["group"].to_numpy(np.int64), minlength=n_groups)
    dim = int(sizes.max()) if len(vocab) else 0
    cols = occ.merge(vocab, on=["group", "term"], how="left")["col"].to_numpy(np.int64)
    tf = sparse.csr_matrix((np.ones(len(cols)), (occ["row"].to_numpy(np.int64), cols)),
                           shape=(n_docs, dim))
    tf.sum_duplicates()
    rows = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
    g_of = dg[rows]
    df = np.zeros((n_groups, max(dim, 1)))
    np.add.at(df, (g_of, tf.indices), 1.0)
    n_in = np.bincount(dg, minlength=n_groups).astype(np.float64)
    len_sum = np.bincount(dg, weights=dl.astype(np.float64), minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        avgdl = np.where(len_sum > 0, len_sum / np.maximum(n_in, 1), 1.0)
    n_w = df[g_of, tf.indices]
    idf = np.log1p((n_in[g_of] - n_w + 0.5) / (n_w + 0.5))
    f = tf.data
    norm = k1 * (1.0 - b + b * dl[rows] / avgdl[g_of])
    x = sparse.csr_matrix((idf * f * (k1 + 1.0) / (f + norm), tf.indices, tf.indptr),
                          shape=(n_docs, dim))
    # Queries: term counts over their group's vocabulary; unknown terms have
    # no document to match and are dropped.
    qocc, _ = _token_table(query_texts, qg, stopwords, stem)
    qocc = qocc.merge(vocab, on=["group", "term"], how="inner")
    c = sparse.csr_matrix((np.ones(len(qocc)), (qocc["row"].to_numpy(np.int64),
                                                qocc["col"].to_numpy(np.int64))),
                          shape=(n_q, dim))
    c.sum_duplicates()
    info = {"retriever": "bm25", "k1": float(k1), "b": float(b),
            "idf": "ln(1 + (N - n + 0.5)/(n + 0.5))",
            "stopwords": bool(stopwords), "stemmer": "harman-s" if stem else "none",
            "groups": n_groups, "vocabulary_max": dim,
            "vocabulary_total": int(sizes.sum())}
    return x, c, dg, qg, n_groups, info


def bm25_scores(doc_texts: Sequence[str], query_texts: Sequence[str], doc_groups=None,
                query_groups=None, *, k1: float = 1.2, b: float = 0.75, stopwords: bool = True,
                stem: bool = True) -> np.ndarray:
    """Exact BM25 scores, ``(n_queries, n_docs)``; ``-inf`` across groups.

    A reference for :func:`bm25_embeddings` (dense, so for small corpora or
    tests). Parameters as in :func:`bm25_embeddings`.
    """
    x, c, dg, qg, _, _ = _bm25_sparse(doc_texts, query_texts, doc_groups, query_groups,
                                      k1, b, stopwords, stem)
    scores = (c @ x.T).toarray()
    scores[qg[:, None] != dg[None, :]] = -np.inf
    return scores


def bm25_embeddings(doc_texts: Sequence[str], query_texts: Sequence[str], doc_groups=None,
                    query_groups=None, *, k1: float = 1.2, b: float = 0.75,
                    stopwords: bool = True, stem: bool = True) -> LexicalEmbeddings:
    """Dense vectors whose cosine ranks a group's documents exactly by BM25.

    Parameters
    ----------
    doc_texts, query_texts : sequence of str
    doc_groups, query_groups : array-like, optional
        Group (namespace) of each document and query; both or neither. A
        query is only meant to be compared with documents of its group.
    k1 : float
        Term-frequency saturation (>= 0; 1.2 is the usual default).
    b : float
        Length normalisation in [0, 1] (0.75 is the usual default).
    stopwords, stem : bool
        Text analysis options of :func:`tokenize`.

    Returns
    -------
    LexicalEmbeddings
        With ``q_i . d_j * scale_i == BM25(q_i, d_j)`` for ``d_j`` in the
        group of ``q_i`` (up to float32 rounding).

    Notes
    -----
    Memory is ``(n_docs + n_queries) * (V + 1) * 4`` bytes with ``V`` the
    largest group vocabulary (1,570 terms for the largest LoCoMo
    conversation's turns). Deterministic: no randomness, columns in sorted term order.
    """
    x, c, dg, qg, n_groups, info = _bm25_sparse(doc_texts, query_texts, doc_groups,
                                                query_groups, k1, b, stopwords, stem)
    n_docs, dim = x.shape
    dnorm = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    big = np.zeros(n_groups)
    np.maximum.at(big, dg, dnorm)
    # A group whose documents have no terms at all: every vector is the pad.
    big = np.where(big > 0, big, 1.0)
    notes = np.zeros((n_docs, dim + 1), dtype=np.float64)
    notes[:, :dim] = (sparse.diags(1.0 / big[dg]) @ x).toarray()
    notes[:, dim] = np.sqrt(np.maximum(0.0, 1.0 - (dnorm / big[dg]) ** 2))
    qnorm = np.sqrt(np.asarray(c.multiply(c).sum(axis=1)).ravel())
    inv = np.where(qnorm > 0, 1.0 / np.where(qnorm > 0, qnorm, 1.0), 0.0)
    queries = np.zeros((c.shape[0], dim + 1), dtype=np.float64)
    queries[:, :dim] = (sparse.diags(inv) @ c).toarray()
    scale = qnorm * big[qg]
    info = dict(info, dim=dim + 1, transform="norm-equalising pad (Bachrach et al. 2014)")
    return LexicalEmbeddings(notes.astype(np.float32), queries.astype(np.float32), scale, info)
