"""Embedders: the vectors a stream of real text is scored with.

An importer of real text (LoCoMo, a trace) turns every note and query into a
vector; the engine scores a query against notes by the dot product (cosine)
of those vectors. Three embedders, named by ``[workload] embedder``:

``"bm25"``
    Exact Okapi BM25 as dense vectors (:mod:`memsim.data.lexical`): lexical, no
    model, per-namespace statistics. The default of the importers.
``"wordllama"``
    WordLlama's ``l2_supercat`` 256-dimension model (a static token-embedding
    table distilled from the input embeddings of large language models,
    mean-pooled over a text's tokens and L2-normalised; Miller,
    github.com/dleemiller/WordLlama, MIT licence). Dense and semantic,
    as the embedding models of production memory layers are. It needs the
    optional ``wordllama`` package (``pip install "memsim[embed]"``), whose
    wheel ships the weights and the tokenizer file: :func:`load_wordllama`
    loads both from the installed package and never downloads (it raises a
    one-line error rather than fall back to the network).
``"vectors"``
    The vectors a trace logs itself (``embedding`` on every note and query
    event): nothing is computed. Only a trace has them.

Cache
-----
WordLlama vectors are cached per stream by content: the key is the SHA-256
of the model's name, dimension and package version, and of every note and
query text in order (length-prefixed). A second import of the same data
reads ``<cache>/wordllama-<key>.npy`` (float32, notes then queries; written
to a temporary name and renamed, so a crash leaves no half file; read
without pickle). ``<cache>`` is ``$MEMSIM_EMBED_CACHE`` when set, else
``$XDG_CACHE_HOME/memsim/embeddings``, else ``~/.cache/memsim/embeddings``
(:func:`cache_dir`). ``MEMSIM_EMBED_CACHE=off`` turns the cache off. The
cache holds derived vectors only: deleting it is always safe.

Batching: unique texts are embedded ``batch_size`` at a time (the model
pads a batch to its longest text and masks the padding, so the batch size
changes memory, not the vectors beyond float rounding).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from memsim.core.errors import ConfigError
from memsim.data.lexical import bm25_embeddings

__all__ = ["EMBEDDERS", "TEXT_EMBEDDERS", "TextEmbeddings", "embed_texts", "cache_dir",
           "load_wordllama", "wordllama_vectors", "check_embedder"]

#: The embedders a workload may name.
EMBEDDERS = ("bm25", "wordllama", "vectors")
#: The embedders that compute vectors from text.
TEXT_EMBEDDERS = ("bm25", "wordllama")

#: WordLlama's model: its configuration name and dimension (the one the wheel ships).
WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256
_CACHE_ENV = "MEMSIM_EMBED_CACHE"


@dataclass(frozen=True, eq=False)
class TextEmbeddings:
    """Note and query vectors of one stream.

    Attributes
    ----------
    notes, queries : ndarray
        float32, one row per note / query, the same number of columns.
    info : dict
        The embedder and its settings (JSON-serialisable), for the stream's
        ``meta["embedding"]``; ``info["retriever"]`` names the embedder.
    """

    notes: np.ndarray
    queries: np.ndarray
    info: dict = field(default_factory=dict)


def check_embedder(name: object, where: str) -> str:
    """``name`` if it is one of :data:`EMBEDDERS`, else a one-line ConfigError."""
    if not isinstance(name, str) or name not in EMBEDDERS:
        raise ConfigError(f"{where}: unknown embedder {name!r}; allowed: {', '.join(EMBEDDERS)}")
    return name


def cache_dir() -> Path | None:
    """The folder of cached vectors (see the module docstring); None when
    ``MEMSIM_EMBED_CACHE=off``."""
    env = os.environ.get(_CACHE_ENV, "").strip()
    if env.lower() == "off":
        return None
    if env:  # absolute: the folder the variable named when it was read
        return Path(env).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "memsim" / "embeddings"


def load_wordllama():
    """WordLlama's 256-d model, from the files its wheel ships; never downloads.

    WordLlama's loader looks for the weights in the package's ``weights/``
    and for the tokenizer file in ``tokenizers/`` of its cache folder, and
    downloads what it does not find. Giving it the package's own folder as
    the cache folder makes it find both files there; ``disable_download``
    makes a missing file an error instead of a download.

    Raises
    ------
    ConfigError
        The package is not installed, or its wheel lacks the files.
    """
    try:
        import wordllama
        from wordllama import WordLlama
    except ImportError:
        raise ConfigError("embedder 'wordllama' needs the wordllama package, which is not "
                          "installed: pip install -e \".[embed]\" (from the repository)") from None
    package = Path(wordllama.__file__).resolve().parent
    try:
        return WordLlama.load(config=WORDLLAMA_CONFIG, dim=WORDLLAMA_DIM, cache_dir=package,
                              disable_download=True)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise ConfigError(f"embedder 'wordllama': cannot load the model shipped in {package} "
                          f"(reinstall wordllama): {exc}") from None


def _wordllama_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("wordllama")
    except PackageNotFoundError:
        return "unknown"


def _content_key(texts: Sequence[str], version: str) -> str:
    h = hashlib.sha256(f"wordllama\0{WORDLLAMA_CONFIG}\0{WORDLLAMA_DIM}\0{version}\0".encode())
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def wordllama_vectors(texts: Sequence[str], *, batch_size: int = 256,
                      cache: Path | None | str = "default") -> tuple[np.ndarray, dict]:
    """Unit-norm WordLlama vectors of ``texts`` (float32, ``(n, 256)``).

    Parameters
    ----------
    texts : sequence of str
    batch_size : int
        Texts embedded at once (> 0).
    cache : Path, None or "default"
        The cache folder; None: no cache; "default": :func:`cache_dir`.

    Returns
    -------
    vectors : ndarray
        A text with no known token gets the zero vector (its cosine with
        every note is 0), not NaN.
    info : dict
        Model, dimension, package version and the cache key.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ConfigError(f"The 'batch_size' parameter of wordllama_vectors must be a positive "
                          f"integer. Got {batch_size!r} instead.")
    texts = [str(t) for t in texts]
    version = _wordllama_version()
    key = _content_key(texts, version)
    folder = cache_dir() if cache == "default" else (None if cache is None else Path(cache))
    info = {"retriever": "wordllama", "model": WORDLLAMA_CONFIG, "dim": WORDLLAMA_DIM,
            "wordllama": version, "pooling": "mean of token embeddings, L2-normalised",
            "content_sha256": key}
    path = None if folder is None else folder / f"wordllama-{key}.npy"
    if path is not None and path.is_file():
        try:
            vec = np.load(path, allow_pickle=False)
            if vec.shape == (len(texts), WORDLLAMA_DIM) and vec.dtype == np.float32:
                return vec, info
        except (OSError, ValueError):
            pass  # an unreadable cache file is recomputed and replaced
    model = load_wordllama()
    # each distinct text once, in order of first appearance
    uniq, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    first = np.full(len(uniq), len(texts), dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(len(texts)))
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    distinct = [str(uniq[i]) for i in order]
    raw = np.zeros((len(distinct), WORDLLAMA_DIM), dtype=np.float64)
    if distinct:
        raw = np.asarray(model.embed(distinct, norm=False, batch_size=batch_size),
                         dtype=np.float64)
    norm = np.linalg.norm(raw, axis=1, keepdims=True)
    unit = np.where(norm > 0, raw / np.where(norm > 0, norm, 1.0), 0.0)
    vec = np.ascontiguousarray(unit[rank[inverse]], dtype=np.float32)
    if path is not None:
        _save(path, vec)
    return vec, info


def _save(path: Path, vec: np.ndarray) -> None:
    """Write the cache file atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.save(fh, vec, allow_pickle=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # the cache is an optimisation: a read-only home still imports


def embed_texts(embedder: str, doc_texts: Sequence[str], query_texts: Sequence[str],
                doc_groups=None, query_groups=None, *, k1: float = 1.2, b: float = 0.75,
                batch_size: int = 256, cache: Path | None | str = "default",
                where: str = "embedder") -> TextEmbeddings:
    """Vectors of notes and queries from their text.

    Parameters
    ----------
    embedder : {"bm25", "wordllama"}
    doc_texts, query_texts : sequence of str
    doc_groups, query_groups : array-like, optional
        Namespaces (BM25 keeps statistics per namespace; WordLlama ignores them).
    k1, b : float
        BM25 parameters (:func:`memsim.data.lexical.bm25_embeddings`).
    batch_size, cache
        WordLlama's batching and cache (:func:`wordllama_vectors`).
    where : str
        What to name in an error (a config key, a CLI option).

    Returns
    -------
    TextEmbeddings
    """
    if embedder == "bm25":
        emb = bm25_embeddings(doc_texts, query_texts, doc_groups, query_groups, k1=k1, b=b)
        return TextEmbeddings(emb.notes, emb.queries, emb.info)
    if embedder == "wordllama":
        n = len(doc_texts)
        vec, info = wordllama_vectors(list(doc_texts) + list(query_texts),
                                      batch_size=batch_size, cache=cache)
        return TextEmbeddings(vec[:n], vec[n:], info)
    if embedder == "vectors":
        raise ConfigError(f"{where}: 'vectors' takes the vectors logged in a trace; these "
                          "data have none (use 'bm25' or 'wordllama')")
    check_embedder(embedder, where)
    raise AssertionError("unreachable")  # pragma: no cover
