"""Knobs at the edges of their ranges generate streams without numeric noise.

A very wide token-size law (``size_sigma`` of hundreds, which the knob
allows) overflows ``exp``; the clip to ``[MIN_TOKENS, MAX_TOKENS]`` gives the
right sizes, and generating must not warn about it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from memsim.data.workload import MAX_TOKENS, MIN_TOKENS, SyntheticWorkload


def test_a_very_wide_size_law_is_clipped_without_an_overflow_warning():
    wl = SyntheticWorkload.from_config({
        "horizon_days": 5, "backfill_days": 5, "notes_per_day": 50.0,
        "classes": {"project": {"size_sigma": 1000.0}}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stream = wl.generate(1)
    tokens = stream.notes.loc[stream.notes["note_class"] == "project", "tokens"].to_numpy()
    assert tokens.min() == MIN_TOKENS and tokens.max() == MAX_TOKENS
    assert set(np.unique(tokens)) == {MIN_TOKENS, MAX_TOKENS}  # |sigma z| > 30 nearly always


def test_the_size_law_knob_leaves_the_other_classes_and_every_other_column_alone():
    base = {"horizon_days": 5, "backfill_days": 5, "notes_per_day": 50.0}
    a = SyntheticWorkload.from_config(base).generate(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = SyntheticWorkload.from_config(
            {**base, "classes": {"project": {"size_sigma": 1000.0}}}).generate(1)
    assert a.notes.drop(columns="tokens").equals(b.notes.drop(columns="tokens"))
    other = (a.notes["note_class"] != "project").to_numpy()
    assert (a.notes["tokens"][other] == b.notes["tokens"][other]).all()
    assert a.queries.equals(b.queries) and a.qrels.equals(b.qrels)


def test_chains_drawn_before_the_window_count_in_the_memory_check():
    """A class whose chains start long before the window (a huge
    ``interval_days`` with several notes per slot) draws those notes and
    drops them: the memory check counts them and names the class's knob,
    instead of the generator running out of memory (or numpy refusing a
    Poisson mean without naming the key)."""
    from memsim.core.errors import ConfigError
    from memsim.data.workload import (NoteClasses, ProjectClass, SyntheticWorkload,
                                      slot_lead_days)
    from memsim.runs.config import estimate_stream_bytes, load_experiment

    for gap in ("1e9", "1e300"):
        with pytest.raises(ConfigError, match=r"drawn before the window and dropped, most of "
                                              r"them by workload\.classes\.project "
                                              r"\(interval_days"):
            load_experiment("experiments/quickstart.toml",
                            [f"workload.classes.project.interval_days={gap}",
                             "workload.classes.project.notes_per_slot=3"])
    # the estimate grows with the lead (past the replay's share), and a
    # one-note-per-slot class adds nothing
    wl = SyntheticWorkload()
    assert slot_lead_days(wl.classes.spec("evergreen")) == 0.0

    def chains(gap: float) -> SyntheticWorkload:
        return SyntheticWorkload(classes=NoteClasses(
            project=ProjectClass(interval_days=gap, notes_per_slot=5.0)))

    assert estimate_stream_bytes(chains(1e5)) > 2 * estimate_stream_bytes(chains(5.0))


def test_a_weekly_arrival_over_a_huge_horizon_counts_in_the_memory_check():
    """``arrival = "weekly"`` draws a count for every day of the horizon:
    with a huge horizon and few queries the memory check counts those days
    and says so, instead of the generator running out of memory; a steady
    arrival of the same rate draws only its queries."""
    from memsim.core.errors import ConfigError
    from memsim.runs.config import load_experiment

    sets = ["workload.horizon_days=1e10", "workload.queries_per_day=1e-7",
            "workload.notes_per_day=1e-7", "workload.backfill_days=0"]
    with pytest.raises(ConfigError, match=r"arrival 'weekly' draws a count for each of the "
                                          r"~1e\+10 days of horizon_days"):
        load_experiment("experiments/quickstart.toml", [*sets, "workload.arrival=weekly"])
    load_experiment("experiments/quickstart.toml", [*sets, "workload.arrival=steady"])
    # a year of weekly arrivals is a few kilobytes more
    small = load_experiment("experiments/quickstart.toml", ["workload.arrival=weekly"])
    assert small.workload.arrival == "weekly"
