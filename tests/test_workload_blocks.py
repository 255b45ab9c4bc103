"""The synthetic generator works a block of rows at a time, and its streams are
those of one whole-array draw: the merged notes and the embeddings are checked
against a reference that concatenates every class and draws every array in one
call, for block sizes from one row to the whole stream."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import memsim.data.workload as wk
from memsim.core.rng import child
from memsim.data.stream import make_stream
from memsim.data.workload import CLASS_NAMES, SLOT_CLASSES, SyntheticWorkload

CONFIGS = {
    "default": {"horizon_days": 30, "backfill_days": 30, "notes_per_day": 200},
    "dim-3-accesses": {"horizon_days": 20, "backfill_days": 10, "notes_per_day": 300,
                       "embedding_dim": 3, "n_actors": 2, "accesses_per_day": 50},
    "zero-ages": {"horizon_days": 10, "backfill_days": 0, "notes_per_day": 150,
                  "age_mode": "zero", "uniform_tokens": 200},
    "no-distractors-bursty": {"horizon_days": 40, "backfill_days": 40, "notes_per_day": 150,
                              "arrival": "bursty", "classes": {"distractor": {"share": 0.0},
                                                               "scratch": {"share": 0.0}}},
    "evergreen-weekly-dim-17": {"horizon_days": 40, "backfill_days": 5, "notes_per_day": 150,
                                "arrival": "weekly", "embedding_dim": 17,
                                "classes": {"project": {"share": 0.0}, "scratch": {"share": 0.0},
                                            "superseding": {"share": 0.0},
                                            "distractor": {"share": 0.0}}},
}


# -- the reference: every class concatenated, every array drawn in one call ------------------

def _one_draw_notes(wl: SyntheticWorkload, seed) -> dict:
    t0, t1 = -float(wl.backfill_days), float(wl.horizon_days)
    shares = wl.classes.note_shares()
    draws = [wk._draw_class(wl, name, wl.notes_per_day * shares[name], t0, t1, seed)
             for name in CLASS_NAMES]
    offsets = np.cumsum([0] + [int(d["n_slots"]) for d in draws[:-1]])
    parts: dict[str, list] = {k: [] for k in ("created", "cls", "slot", "topic", "lifetime",
                                               "tokens", "author", "personal", "local")}
    for code, (name, d) in enumerate(zip(CLASS_NAMES, draws)):
        n = d["created"].size
        parts["cls"].append(np.full(n, code, dtype=np.int64))
        parts["slot"].append(d["slot"] + offsets[code] if name in SLOT_CLASSES
                             else np.full(n, -1, dtype=np.int64))
        for key in ("created", "topic", "lifetime", "tokens", "author", "personal"):
            parts[key].append(d[key])
        parts["local"].append(np.arange(n))
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    order = np.lexsort((cat["local"], cat["cls"], cat["created"]))
    notes = {k: v[order] for k, v in cat.items()}
    notes["n_slots_of"] = [int(d["n_slots"]) for d in draws]
    if wl.age_mode == "zero":
        notes["created"] = np.zeros_like(notes["created"])
    notes["valid_until"] = notes["created"] + notes["lifetime"]
    wk._supersede(notes)
    return notes


def _mix(wl, centroid, direction, noise):
    x = centroid
    x += np.float32(wl.slot_weight) * direction
    x += np.float32(wl.retriever_noise) * noise
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.float32(1e-12))
    return x


def _gauss(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    x *= np.float32(1.0 / math.sqrt(d))
    return x


def _one_draw_embeddings(wl: SyntheticWorkload, notes: dict, q_topic, q_slot, seed):
    d = wl.embedding_dim
    centroids = _gauss(child(seed, "embeddings", "topics"), wl.n_topics, d)
    slot_dirs = np.concatenate([_gauss(child(seed, "embeddings", "slots", name), k, d)
                                for name, k in zip(SLOT_CLASSES, notes["n_slots_of"])])
    n = notes["created"].size
    on_slot = notes["slot"] >= 0
    direction = np.empty((n, d), dtype=np.float32)
    direction[on_slot] = slot_dirs[notes["slot"][on_slot]]
    rows = np.flatnonzero(~on_slot)
    direction[rows] = _gauss(child(seed, "embeddings", "distractors"), rows.size, d)[
        notes["local"][rows]]
    noise = np.empty((n, d), dtype=np.float32)
    for code, name in enumerate(CLASS_NAMES):
        rows = np.flatnonzero(notes["cls"] == code)
        noise[rows] = _gauss(child(seed, "embeddings", "notes", name), rows.size, d)[
            notes["local"][rows]]
    note_emb = _mix(wl, centroids[notes["topic"]], direction, noise)
    answerable = q_slot >= 0
    qdir = np.empty((q_slot.size, d), dtype=np.float32)
    qdir[answerable] = slot_dirs[q_slot[answerable]]
    qdir[~answerable] = _gauss(child(seed, "embeddings", "unanswerable"),
                               int((~answerable).sum()), d)
    qnoise = _gauss(child(seed, "embeddings", "queries"), q_slot.size, d)
    return note_emb, _mix(wl, centroids[q_topic], qdir, qnoise)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


# -- the checks ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CONFIGS))
def test_blocks_of_any_size_give_the_one_draw_stream(name, monkeypatch):
    wl = SyntheticWorkload.from_config(CONFIGS[name])
    seed = np.random.SeedSequence(11)
    notes = _one_draw_notes(wl, seed)
    d = wl.embedding_dim
    streams = []
    for rows in (1, 7, 1000, None):  # None: the default, one block for these sizes
        if rows is not None:
            monkeypatch.setattr(wk, "CHUNK_BYTES", 4 * d * rows)
        else:
            monkeypatch.undo()
        streams.append(wl.generate(seed))
    s = streams[-1]
    assert s.n_notes > 1000  # several blocks of 7 and of 1000 rows
    q = s.queries
    note_emb, query_emb = _one_draw_embeddings(wl, notes, q["topic"].to_numpy(),
                                               q["slot"].to_numpy(), seed)
    actors = np.array(wl.actor_names(), dtype=object)
    for st in streams:
        assert _bits(st.note_embeddings) == _bits(note_emb)
        assert _bits(st.query_embeddings) == _bits(query_emb)
        n = st.notes
        np.testing.assert_array_equal(n["created_at"].to_numpy(), notes["created"])
        np.testing.assert_array_equal(n["valid_until"].to_numpy(), notes["valid_until"])
        np.testing.assert_array_equal(n["tokens"].to_numpy(), notes["tokens"])
        np.testing.assert_array_equal(n["topic"].to_numpy(), notes["topic"])
        np.testing.assert_array_equal(n["slot"].to_numpy(), notes["slot"])
        np.testing.assert_array_equal(n["actor"].to_numpy(dtype=object), actors[notes["author"]])
        np.testing.assert_array_equal(n["note_class"].to_numpy(dtype=object),
                                      np.array(CLASS_NAMES, dtype=object)[notes["cls"]])
        np.testing.assert_array_equal(n["scope"].to_numpy(dtype=object),
                                      np.where(notes["personal"], "personal", "team"))
        for table in ("notes", "queries", "qrels", "accesses"):
            pd.testing.assert_frame_equal(getattr(st, table), getattr(s, table),
                                          check_exact=True)


def test_make_stream_keeps_the_embeddings_given_only_when_told():
    s = SyntheticWorkload(horizon_days=5, backfill_days=5, notes_per_day=40).generate(3)
    emb, qemb = s.note_embeddings.copy(), s.query_embeddings.copy()
    copied = make_stream(s.notes, s.queries, s.qrels, None, emb, qemb)
    kept = make_stream(s.notes, s.queries, s.qrels, None, emb, qemb, copy=False)
    assert not np.shares_memory(copied.note_embeddings, emb)
    assert not np.shares_memory(copied.query_embeddings, qemb)
    assert kept.note_embeddings is emb and kept.query_embeddings is qemb
    assert _bits(kept.note_embeddings) == _bits(copied.note_embeddings)
    # out of order: reordered, so a new array whatever copy says
    back = np.arange(s.n_notes)[::-1]
    moved = make_stream(s.notes.iloc[back], s.queries, s.qrels, None, emb[back], qemb,
                        copy=False)
    assert _bits(moved.note_embeddings) == _bits(emb)
    pd.testing.assert_frame_equal(moved.notes, copied.notes, check_exact=True)
    # the stream's tables are its own, never the caller's
    assert not np.shares_memory(copied.notes["created_at"].to_numpy(),
                                s.notes["created_at"].to_numpy())


@pytest.mark.parametrize("block", [64, 4 * 64, 1 << 24])  # 1 row, 4 rows, all
def test_the_first_non_finite_embedding_value_is_named_whatever_the_block(block, monkeypatch):
    import memsim.data.stream as ms
    from memsim.core.errors import StreamError

    s = SyntheticWorkload(horizon_days=5, backfill_days=5, notes_per_day=40).generate(3)
    emb = s.note_embeddings.copy()
    emb[7, 5], emb[9, 1], emb[7, 60] = np.inf, np.nan, np.nan  # row 7, dimension 5 first
    monkeypatch.setattr(ms, "_FINITE_BLOCK", block)
    with pytest.raises(StreamError, match=r"row 7 \(note_id 7\): dimension 5: .* got inf"):
        make_stream(s.notes, s.queries, s.qrels, None, emb, s.query_embeddings)
