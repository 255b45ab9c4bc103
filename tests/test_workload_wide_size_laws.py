"""Knobs at the edges of their ranges generate streams without numeric noise.

A very wide token-size law (``size_sigma`` of hundreds, which the knob
allows) overflows ``exp``; the clip to ``[MIN_TOKENS, MAX_TOKENS]`` gives the
right sizes, and generating must not warn about it.
"""

from __future__ import annotations

import warnings

import numpy as np

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
