"""A cooldown per note (``Feedback.cooldown_per = "note"``), optionally
running from the note's creation (``cooldown_from_creation``): what
agent-memory-server's ``update_last_accessed`` does (one ``last_accessed``
per memory, refreshed only once it is 900 s old; the creation stamp, a
float, reads as 0 there), in the state, in the walk's what-if states, and
against the real server code.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from memsim.engine.state import PolicyState
from memsim.policies.base import Feedback
from memsim.runs.config import resolve_policy
from memsim.data.stream import make_stream

from .test_feedback import assert_cooldown_walks, busy_stream

SECOND = 1 / 86400


def _state(created_s):
    notes = types.SimpleNamespace(note_id=np.arange(len(created_s)),
                                  tier0=np.zeros(len(created_s), dtype=np.int8),
                                  created_at=np.asarray(created_s, dtype=float) * SECOND)
    return PolicyState(notes, n_actors=4)


def _uses(st, fb, uses):
    """Apply uses (row, actor, second) one call each; the recalls after."""
    for row, actor, sec in uses:
        st.touch(np.array([row]), np.array([actor]), np.array([sec * SECOND]), fb)
    return st.recalls.tolist()


def test_the_cooldown_counts_per_note_actor_or_per_note_and_from_creation():
    uses = [(0, 0, 100), (0, 1, 200), (0, 0, 1000), (0, 1, 1100), (1, 2, 950)]
    # per (note, actor), first use always counted: (0, a0) at 100 and 1000
    # (900 s later, exactly), (0, a1) at 200 and 1100, note 1 at 950
    assert _uses(_state([0, 50]), Feedback(cooldown_s=900), uses) == [4, 1]
    # per note: 100, then 1000 (900 s after 100); 200 and 1100 are within
    assert _uses(_state([0, 50]), Feedback(cooldown_s=900, cooldown_per="note"),
                 uses) == [2, 1]
    # from creation too: note 0 (created at 0) first counts at 1000 (200 is
    # 200 s old, 100 too young), note 1 (created at 50) at 950
    assert _uses(_state([0, 50]), Feedback(cooldown_s=900, cooldown_per="note",
                                           cooldown_from_creation=True), uses) == [1, 1]
    # a use exactly cooldown_s after creation counts, in days' floats too
    late = [(0, 0, 86400 * 37 + 900)]
    assert _uses(_state([86400 * 37]), Feedback(cooldown_s=900, cooldown_per="note",
                                                cooldown_from_creation=True), late) == [1]


def test_the_options_are_checked():
    from memsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="cooldown_per"):
        resolve_policy({"feedback": {"cooldown_s": 60, "cooldown_per": "actor"}}, "p")
    with pytest.raises(ConfigError, match="cooldown_from_creation"):
        resolve_policy({"feedback": {"cooldown_s": 60, "cooldown_from_creation": "yes"}}, "p")


@pytest.mark.parametrize("per", ["note", "note-actor"])
def test_the_walk_corrects_for_a_cooldown_per_note_from_creation(per):
    """Queries minutes apart from several actors, a cooldown longer than the
    gaps: the correction's what-if states keep a note's last counted use
    (under either key) and its creation, as the state does query by query."""
    stream = busy_stream(5, n_notes=150, n_queries=160, dim=2, accesses=60)
    scale = 200.0
    stream = make_stream(stream.notes.assign(created_at=stream.notes["created_at"] / scale,
                                             updated_at=stream.notes["created_at"] / scale),
                         stream.queries.assign(t=stream.queries["t"] / scale,
                                               actor=np.resize(["a0", "a1", "a2"],
                                                               len(stream.queries))),
                         stream.qrels, stream.accesses.assign(t=stream.accesses["t"] / scale),
                         stream.note_embeddings, stream.query_embeddings, {"name": "fast"})

    assert_cooldown_walks(stream, 900.0, half_life_days=0.02, promote_after=2,
                          tick_days=0.01, cooldown_per=per, cooldown_from_creation=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("k", [None, 25])
def test_redis_preset_refreshes_as_the_server_on_minute_scale_streams(seed, k):
    """agent-memory-server's real rerank and rate-limited refresh
    (``update_last_accessed`` itself, on a stand-in for Redis) against the
    ``redis-agent-memory`` preset, on streams whose queries are seconds to
    minutes apart: a note returned within 900 s of another actor's refresh
    is not refreshed, a refresh exactly 900 s later is, and a note's first
    return always is (its creation stamp, a float, reads as 0: the preset
    that counted the 900 s from creation differed at k = 25)."""
    pytest.importorskip("agent_memory_server", reason="agent-memory-server is not installed "
                        "(.ci/run installs it; README, \"Framework presets\")")
    from memsim.checks.framework_check import framework_cross_check

    from .test_frameworks import minutes_stream

    res = framework_cross_check("redis", minutes_stream(seed), k=k)
    assert res.summary["n_queries"] == 120
    assert res.summary["identical_share"] == 1.0, res.per_query.loc[~res.per_query["identical"]]


def test_the_resolved_config_names_the_options_only_when_used():
    """At their defaults the two options are left out of the resolved
    config (a config that does not use them keeps its run hash); set, they
    are written and read back to the same policy."""
    plain = resolve_policy({"feedback": {"cooldown_s": 60}}, "p")
    fb = plain.to_config()["feedback"]
    assert "cooldown_per" not in fb and "cooldown_from_creation" not in fb
    table = {"feedback": {"cooldown_s": 900, "cooldown_per": "note",
                          "cooldown_from_creation": True}}
    used = resolve_policy(table, "p")
    fb = used.to_config()["feedback"]
    assert fb["cooldown_per"] == "note" and fb["cooldown_from_creation"] is True
    assert resolve_policy(used.to_config(), "p") == used
    assert resolve_policy(plain.to_config(), "p") == plain
