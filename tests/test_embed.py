"""Embedders of real text (memsim.data.embed): WordLlama offline, the cache, and the
``embedder`` option of the importers, the config and the CLI.

WordLlama tests need the ``[embed]`` extra and skip without it; the LoCoMo
run reads ``../shared/data/locomo/locomo10.zip`` and skips without it.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.data import embed
from memsim.cli import main
from memsim.core.errors import ConfigError, StreamError
from memsim.data.importers.trace import import_trace

ROOT = Path(__file__).resolve().parents[1]
ZIP = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip"


@pytest.fixture
def offline(monkeypatch):
    """No socket may connect: any download attempt fails loudly."""
    calls = []

    def refuse(self, *args, **kwargs):
        calls.append(args)
        raise OSError("network disabled by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    # a download fails at the name lookup before any connect: refuse that too
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: refuse(None, *a))
    return calls


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "emb-cache"
    monkeypatch.setenv("MEMSIM_EMBED_CACHE", str(folder))
    return folder


@pytest.fixture
def no_home_cache(tmp_path, monkeypatch):
    """A fresh HOME: nothing in ~/.cache/wordllama for the loader to find."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_wordllama_loads_from_the_wheel_with_the_network_disabled(offline, cache, no_home_cache):
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    texts = ["the cat sat on the mat", "a kitten rested on the rug",
             "the quarterly tax filing deadline", ""]
    vec, info = embed.wordllama_vectors(texts, batch_size=2)
    assert offline == []  # nothing even tried to connect
    assert vec.shape == (4, 256) and vec.dtype == np.float32
    assert np.allclose(np.linalg.norm(vec[:3], axis=1), 1.0, atol=1e-5)
    # a text without tokens is the zero vector, not NaN
    assert np.isfinite(vec).all() and not vec[3].any()
    # semantic: the paraphrase is nearer than the unrelated text
    assert _cos(vec[0], vec[1]) > _cos(vec[0], vec[2]) + 0.1
    assert info["retriever"] == "wordllama" and info["dim"] == 256


def test_batching_and_duplicates_give_the_same_vectors(cache):
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    texts = ["alpha beta", "gamma delta epsilon", "alpha beta", "zeta"]
    a, _ = embed.wordllama_vectors(texts, batch_size=1, cache=None)
    b, _ = embed.wordllama_vectors(texts, batch_size=256, cache=None)
    assert np.allclose(a, b, atol=1e-6)
    assert np.array_equal(a[0], a[2])
    with pytest.raises(ConfigError, match="batch_size"):
        embed.wordllama_vectors(texts, batch_size=0)


def test_vectors_are_cached_by_content(cache, monkeypatch):
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    texts = ["first note", "second note", "a question"]
    first, info = embed.wordllama_vectors(texts)
    files = list(cache.glob("wordllama-*.npy"))
    assert [f.name for f in files] == [f"wordllama-{info['content_sha256']}.npy"]

    def no_model():
        raise AssertionError("the model was loaded although the vectors are cached")

    monkeypatch.setattr(embed, "load_wordllama", no_model)
    again, _ = embed.wordllama_vectors(texts)
    assert np.array_equal(first, again)
    # other content: another key, so the model is needed
    with pytest.raises(AssertionError, match="loaded although"):
        embed.wordllama_vectors(texts + ["new"])
    with pytest.raises(AssertionError, match="loaded although"):
        embed.wordllama_vectors(["second note", "first note", "a question"])
    # MEMSIM_EMBED_CACHE=off: no cache at all
    monkeypatch.setenv("MEMSIM_EMBED_CACHE", "off")
    assert embed.cache_dir() is None
    with pytest.raises(AssertionError, match="loaded although"):
        embed.wordllama_vectors(texts)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MEMSIM_EMBED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embed.cache_dir() == tmp_path / "xdg" / "memsim" / "embeddings"
    monkeypatch.setenv("MEMSIM_EMBED_CACHE", str(tmp_path / "mine"))
    assert embed.cache_dir() == tmp_path / "mine"


def test_missing_wordllama_is_one_clear_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_wordllama(name, *args, **kwargs):
        if name == "wordllama" or name.startswith("wordllama."):
            raise ImportError("no wordllama")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wordllama)
    with pytest.raises(ConfigError, match=r"needs the wordllama package.*\[embed\]"):
        embed.load_wordllama()


def test_bm25_embedder_is_the_lexical_vectors():
    from memsim.data.lexical import bm25_embeddings

    docs, qs = ["red apples and pears", "blue sky", "apples"], ["apples", "sky"]
    got = embed.embed_texts("bm25", docs, qs)
    ref = bm25_embeddings(docs, qs)
    assert np.array_equal(got.notes, ref.notes) and np.array_equal(got.queries, ref.queries)
    assert got.info == ref.info
    with pytest.raises(ConfigError, match="'vectors' takes the vectors logged in a trace"):
        embed.embed_texts("vectors", docs, qs)
    with pytest.raises(ConfigError, match="unknown embedder 'glove'"):
        embed.embed_texts("glove", docs, qs)


# ---------------------------------------------------------------------------
# The importers, the config and the CLI
# ---------------------------------------------------------------------------

def _trace(path: Path, embeddings: bool) -> Path:
    ev = [{"event": "header", "format": "memsim-trace", "version": 1}]
    texts = ["the cat sat on the mat", "dogs chase cats", "a recipe for pancakes"]
    for i, t in enumerate(texts):
        e = {"event": "note_added", "id": i, "t": i, "actor": "ann", "text": t}
        if embeddings:
            e["embedding"] = [float(i == j) for j in range(3)]
        ev.append(e)
    q = {"event": "query", "id": 0, "t": 5, "actor": "ann", "text": "where is the cat"}
    if embeddings:
        q["embedding"] = [1.0, 0.0, 0.0]
    ev += [q, {"event": "used", "query": 0, "notes": [0]}]
    path.write_text("".join(json.dumps(e) + "\n" for e in ev), encoding="utf-8")
    return path


def test_trace_embedder_option(tmp_path, cache):
    logged = _trace(tmp_path / "logged.jsonl", embeddings=True)
    plain = _trace(tmp_path / "plain.jsonl", embeddings=False)
    # default: logged vectors when there are some, else BM25 (as before)
    assert import_trace(logged).meta["embedding"]["retriever"] == "logged"
    assert import_trace(plain).meta["embedding"]["retriever"] == "bm25"
    assert import_trace(logged, embedder="vectors").embedding_dim == 3
    with pytest.raises(StreamError, match="embedder 'vectors': the trace logs no embeddings"):
        import_trace(plain, embedder="vectors")
    # a text embedder replaces the logged vectors
    s = import_trace(logged, embedder="bm25")
    assert s.meta["embedding"]["retriever"] == "bm25" and s.embedding_dim != 3
    with pytest.raises(ConfigError, match="unknown embedder 'bert'"):
        import_trace(plain, embedder="bert")
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    w = import_trace(plain, embedder="wordllama")
    assert w.meta["embedding"]["retriever"] == "wordllama" and w.embedding_dim == 256


def test_config_embedder_key(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", embeddings=False)

    def exp(**wl):
        return memsim.experiment_from_dict({
            "experiment": {"name": "e", "replicates": 1, "seed": 1},
            "workload": {"source": str(trace), "importer": "trace", **wl},
            "policies": {"s": {"preset": "similarity-only"}}})

    assert "embedder" not in exp().to_config()["workload"]  # unchanged when not given
    e = exp(embedder="bm25")
    assert e.to_config()["workload"]["embedder"] == "bm25"
    assert e.workload.load().meta["embedding"]["retriever"] == "bm25"
    with pytest.raises(ConfigError, match="workload.embedder: unknown embedder 'sbert'"):
        exp(embedder="sbert")
    with pytest.raises(ConfigError, match="workload.embedder: .*without an importer"):
        memsim.experiment_from_dict({
            "experiment": {"name": "e"}, "workload": {"source": str(tmp_path), "embedder": "bm25"},
            "policies": {"s": {"preset": "similarity-only"}}})
    with pytest.raises(ConfigError, match="workload.embedder: only for data imported"):
        memsim.experiment_from_dict({
            "experiment": {"name": "e"},
            "workload": {"source": str(trace), "importer": "locomo", "embedder": "vectors"},
            "policies": {"s": {"preset": "similarity-only"}}})


def test_cli_import_embedder(tmp_path, capsys, cache):
    plain = _trace(tmp_path / "plain.jsonl", embeddings=False)
    assert main(["stream", "import", "trace", str(plain), "--out", str(tmp_path / "a"),
                 "--embedder", "vectors"]) == 2
    assert "the trace logs no embeddings" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        main(["stream", "import", "trace", str(plain), "--out", str(tmp_path / "b"),
              "--embedder", "glove"])
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    assert main(["stream", "import", "trace", str(plain), "--out", str(tmp_path / "c"),
                 "--embedder", "wordllama"]) == 0
    meta = json.loads((tmp_path / "c" / "stream.json").read_text())
    assert meta["embedding"]["retriever"] == "wordllama" and meta["embedding_dim"] == 256


@pytest.mark.skipif(not ZIP.exists(), reason=f"LoCoMo data not found at {ZIP} (shared data folder)")
@pytest.mark.slow
def test_locomo_run_with_wordllama_offline_names_the_embedder(tmp_path, offline, cache,
                                                              no_home_cache, monkeypatch):
    """experiments/locomo.toml with embedder = "wordllama", the network disabled:
    the run completes, and its report names the embedder."""
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    if not ZIP.is_file():
        pytest.skip(f"needs {ZIP}, absent")
    from memsim.data import datasets

    # experiments/locomo.toml names data:locomo: the shared copy, registered
    # in this test's data cache as `memsim data get locomo --from` does
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "data"))
    datasets.register("locomo", ZIP)
    exp = memsim.load_experiment(ROOT / "experiments" / "locomo.toml",
                                 ["workload.embedder=wordllama"])
    import dataclasses

    exp = dataclasses.replace(exp, policies={"similarity-only": exp.policies["similarity-only"]})
    res = memsim.run_experiment(exp, out=tmp_path / "runs")
    assert offline == []
    assert res.config["workload"]["embedder"] == "wordllama"
    html = (res.path / "report.html").read_text(encoding="utf-8")
    assert "Embedder: wordllama" in html
    q = res.queries
    assert len(q) == 1986 and (q["tokens_used"] <= 1500).all()
    # dense vectors find evidence, less often than BM25 does (README, benchmarks)
    assert 0.2 < q.loc[q["category"] != 5, "recall"].mean() < 0.9


@pytest.mark.slow
def test_the_report_names_the_embedder(tmp_path):
    """The report's opening lines say which vectors scored similarity."""
    def run(**wl):
        exp = memsim.experiment_from_dict({
            "experiment": {"name": "emb", "replicates": 1, "seed": 1},
            "workload": {"source": str(ROOT / "experiments" / "traces" / "example.jsonl"),
                         "importer": "trace", **wl},
            "policies": {"s": {"preset": "similarity-only"}}})
        res = memsim.run_experiment(exp, out=tmp_path / "runs")
        return (res.path / "report.html").read_text(encoding="utf-8")

    assert "Embedder: vectors (the vectors logged in the trace)" in run(embedder="vectors")
    default = run()
    assert "Embedder: vectors" not in default
    assert re.search(r"Embedder: the trace(&#x27;|&#39;|')s logged vectors, else exact BM25",
                     default)


def test_wordllama_offline_in_a_fresh_process(tmp_path):
    """From the first import on (a fresh interpreter), with every socket
    refusing to connect and an empty HOME: loading and embedding never try
    the network."""
    pytest.importorskip("wordllama", reason="the [embed] extra (wordllama) is not installed")
    import os
    import subprocess
    import sys

    code = (
        "import socket\n"
        "tried = []\n"
        "def refuse(self, *a, **k):\n"
        "    tried.append(a)\n"
        "    raise OSError('network disabled')\n"
        "socket.socket.connect = refuse\n"
        "socket.socket.connect_ex = refuse\n"
        "socket.getaddrinfo = lambda *a, **k: refuse(None, *a)\n"
        "from memsim.data.embed import wordllama_vectors\n"
        "vec, info = wordllama_vectors(['a cat on a mat', 'tax forms'])\n"
        "assert vec.shape == (2, 256), vec.shape\n"
        "assert tried == [], tried\n"
        "print('offline ok')\n")
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               MEMSIM_EMBED_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "offline ok" in proc.stdout
    assert not (tmp_path / "home" / ".cache" / "wordllama").exists()
