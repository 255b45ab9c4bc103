"""The checker checks every promise a component declares.

For each declaration the engine trusts (``upper_bound``, ``lower_bound``,
``exponential_form``, ``half_life``, ``score_bound``, ``similarity_needed``,
``evicts``, and the stickiness and breadth bounds), a component that declares
it wrongly fails :func:`memsim.checks.testing.check_component` with a message naming
the component, the declaration, where it broke and the values; and a wrong
bound is caught again by :func:`memsim.checks.testing.check_engine_paths`, which
replays a small stream through the engine's fast paths and its reference.
Every registered component passes both (taken from the registry, so a new
one is covered without editing a list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from memsim.core.params import Interval
from memsim.policies import (REGISTRY, Breadth, Decay, Policy, Ranker, Retention, Retriever,
                             Stickiness)
from memsim.checks.testing import CheckError, check_component, check_engine_paths
from memsim.policies.rank import LangChainTimeWeighted

_POSITIVE = Interval(0, None, closed="neither")


@dataclass(frozen=True, kw_only=True)
class HalfLifeUnder(Decay):
    """A half-life decay that declares ``upper_bound() = 0.3`` while it returns up to 1."""

    name: ClassVar[str] = "half-life-under"
    reads_salience: ClassVar[bool] = False
    half_life_days: float = 10.0
    _constraints: ClassVar[dict] = {"half_life_days": _POSITIVE}

    def recency(self, age, ctx):
        return np.exp2(-np.maximum(age, 0.0) / self.half_life_days)

    def lower_bound(self):
        return 0.0

    def upper_bound(self):
        return 0.3


@dataclass(frozen=True, kw_only=True)
class FloorAbove(HalfLifeUnder):
    """Declares a floor of 0.2, but decays to 0."""

    name: ClassVar[str] = "floor-above"

    def lower_bound(self):
        return 0.2

    def upper_bound(self):
        return 1.0


@dataclass(frozen=True, kw_only=True)
class WrongRate(HalfLifeUnder):
    """Declares an exponential form twice as fast as its recency."""

    name: ClassVar[str] = "wrong-rate"

    def upper_bound(self):
        return 1.0

    def exponential_form(self, ctx):
        return 0.0, 2.0 * np.log(2.0) / self.half_life_days


@dataclass(frozen=True, kw_only=True)
class WrongHalfLife(HalfLifeUnder):
    """Reports twice its half-life."""

    name: ClassVar[str] = "wrong-half-life"

    def upper_bound(self):
        return 1.0

    def half_life(self):
        return 2.0 * self.half_life_days


@dataclass(frozen=True, kw_only=True)
class HalfBound(Ranker):
    """``rel * rec``, bounded by half of what it returns."""

    name: ClassVar[str] = "half-bound"

    def combine(self, rel, rec, ctx):
        return rel * rec

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        if rec_lo is None or rec_hi is None:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        return np.where(rel >= 0, rel * rec_hi, rel * rec_lo) * 0.5 + 1e-300


@dataclass(frozen=True, kw_only=True)
class NeedTooHigh(Ranker):
    """``rel * rec`` with a correct bound, but asks for twice the similarity needed."""

    name: ClassVar[str] = "need-too-high"

    def combine(self, rel, rec, ctx):
        return rel * rec

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        if rec_lo is None or rec_hi is None:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        b = np.where(rel >= 0, rel * rec_hi, rel * rec_lo)
        return b + 1e-5 * np.abs(b) + 1e-300

    def similarity_needed(self, score, rec_lo, rec_hi, ctx):
        score = np.asarray(score, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(score > 0, 2.0 * score / np.asarray(rec_hi), -np.inf)


@dataclass(frozen=True, kw_only=True)
class SecretEvictions(Retention):
    """Declares ``evicts = False`` (the engine skips its sweeps), yet evicts old notes."""

    name: ClassVar[str] = "secret-evictions"
    evicts: ClassVar[bool] = False

    def evict(self, ctx):
        return np.asarray(ctx.age_created[0]) > 100.0


@dataclass(frozen=True, kw_only=True)
class UnboundedAccess(Stickiness):
    """An access term of 1 per recall, declared at most 0.5."""

    name: ClassVar[str] = "unbounded-access"

    def access_term(self, ctx):
        return np.broadcast_to(np.asarray(ctx.recalls, dtype=np.float64),
                               np.shape(ctx.age_created)).copy()

    def access_term_bound(self, ctx):
        return 0.5


@dataclass(frozen=True, kw_only=True)
class ScoringBreadth(Breadth):
    """Multiplies the score by 1 + distinct actors, yet declares the factor is 1."""

    name: ClassVar[str] = "scoring-breadth"

    def on_score(self, ctx):
        return 1.0 + np.asarray(ctx.distinct_actors, dtype=np.float64)

    def score_factor_bound(self, ctx):
        return 1.0


@dataclass(frozen=True, kw_only=True)
class WideAccess(Breadth):
    """An access factor of 1 + actors, declared at most 1.5."""

    name: ClassVar[str] = "wide-access"

    def on_access(self, ctx):
        return 1.0 + np.asarray(ctx.distinct_actors, dtype=np.float64)

    def access_factor_bound(self, ctx):
        return 1.5


@dataclass(frozen=True, kw_only=True)
class RelativeAge(HalfLifeUnder):
    """Declares a bound (so, elementwise), but measures age against the oldest note."""

    name: ClassVar[str] = "relative-age"

    def recency(self, age, ctx):
        age = np.maximum(age, 0.0)
        return np.exp(-age / (1.0 + age.max()))

    def upper_bound(self):
        return 1.0


@dataclass(frozen=True, kw_only=True)
class RankedProduct(Ranker):
    """A bounded score, but shared out over the notes scored."""

    name: ClassVar[str] = "ranked-product"

    def combine(self, rel, rec, ctx):
        return rel * rec / np.shape(rel)[1]

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        if rec_lo is None or rec_hi is None:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        return np.abs(rel) * max(abs(rec_hi), abs(rec_lo)) + 1e-300


@dataclass(frozen=True, kw_only=True)
class BlindProduct(Ranker):
    """Declares it does not read the similarity, and multiplies by it."""

    name: ClassVar[str] = "blind-product"
    uses_similarity: ClassVar[bool] = False

    def combine(self, rel, rec, ctx):
        return rel * rec


@dataclass(frozen=True, kw_only=True)
class CellsOwnSets(LangChainTimeWeighted):
    """Declares it scores chosen cells as the whole context (LangChain's
    does), and finds its sets among the chosen cells alone."""

    name: ClassVar[str] = "cells-own-sets"

    def _sets(self, ctx):
        return self._find_sets(ctx, None if ctx.live is None else np.asarray(ctx.live))


@dataclass(frozen=True, kw_only=True)
class UsedAreCandidates(LangChainTimeWeighted):
    """Declares its candidates read no use (LangChain's do), and lets every
    note used before be a candidate too."""

    name: ClassVar[str] = "used-are-candidates"

    def candidate_mask(self, ctx):
        return super().candidate_mask(ctx) | (np.asarray(ctx.recalls) > 0)


@dataclass(frozen=True, kw_only=True)
class BusiestStore(LangChainTimeWeighted):
    """Declares its sets read no use, and adds the most recalls of any note
    of the (whole) context to every score."""

    name: ClassVar[str] = "busiest-store"

    def combine(self, rel, rec, ctx):
        whole = getattr(ctx, "whole", None)
        recalls = np.asarray((ctx if whole is None else whole[0]).recalls)
        return super().combine(rel, rec, ctx) + 1e-3 * recalls.max()


@dataclass(frozen=True, kw_only=True)
class CenteredDots(Retriever):
    """Declares its similarity per cell, and centres each row on its mean."""

    name: ClassVar[str] = "centered-dots"
    per_cell: ClassVar[bool] = True

    def similarity(self, ctx):
        dots = np.asarray(ctx.dots, dtype=np.float64)
        return dots - dots.mean(axis=1, keepdims=True)


# (component, the declaration named, a pattern of the values in the message)
WRONG = [
    (CellsOwnSets, "scores_cells", r"gets combine\(\) = [0-9.e-]+ in the whole context and "
                                   r"[0-9.e-]+ among a third of its notes"),
    (UsedAreCandidates, "sets_read_uses", r"gets candidate_mask\(\) = [01]\.0, and [01]\.0 when the "
                                          r"uses of every other note are drawn again"),
    (BusiestStore, "sets_read_uses", r"note \d+ of query \d+: .* gets combine\(\) = "
                                     r"[0-9.e-]+, and [0-9.e-]+ when"),
    (BlindProduct, "uses_similarity", r"raised TypeError: "),
    (CenteredDots, "per_cell", r"per_cell = True .* gets similarity [0-9.e-]+ in the whole "
                               r"context and [0-9.e-]+ with every third note"),
    (HalfLifeUnder, "upper_bound", r"recency\(\) = 1\.0 > declared upper_bound\(\) = 0\.3"),
    (FloorAbove, "lower_bound", r"recency\(\) = [0-9.e-]+ < declared lower_bound\(\) = 0\.2"),
    (WrongRate, "exponential_form", r"exp\(-rate age\) = [0-9.e-]+ but recency\(\) = "),
    (RelativeAge, "upper_bound", r"declaring upper_bound\(\) declares recency\(\) elementwise, "
                                 r"but note \d+ of query 0: .* gets [0-9.e-]+ among all the "
                                 r"notes and [0-9.e-]+ among a third of them"),
    (RankedProduct, "score_bound", r"declaring score_bound\(\) declares combine\(\) "
                                   r"elementwise, but a note scores"),
    (WrongHalfLife, "half_life", r"half_life\(\) = 20\.0 days, but recency\(\) there is 0\.25"),
    (HalfBound, "score_bound", r"combine\(\) = [0-9.e-]+ > score_bound\(\) = [0-9.e-]+"),
    (NeedTooHigh, "similarity_needed", r"similarity_needed\(score=[0-9.e-]+, rec_lo=.*\) = "),
    (SecretEvictions, "evicts", r"evicts = False .* but evict\(\) evicts note \d+"),
    (UnboundedAccess, "access_term_bound", r"access_term\(\) = \d+\.0 > declared "
                                           r"access_term_bound\(\) = 0\.5"),
    (ScoringBreadth, "score_factor_bound", r"score_factor_bound\(\) = 1\.0 but on_score\(\) = "),
    (WideAccess, "access_factor_bound", r"on_access\(\) = [0-9.]+ > declared "
                                        r"access_factor_bound\(\) = 1\.5"),
]


@pytest.mark.parametrize("cls, declaration, values", WRONG,
                         ids=[f"{w[1]}-{w[0].name}" for w in WRONG])
def test_a_wrong_declaration_fails_the_checker(cls, declaration, values):
    with pytest.raises(CheckError) as err:
        check_component(cls)
    msg = str(err.value)
    assert err.value.check == declaration, msg
    # the component, the declaration, the values and where it broke
    assert msg.startswith(f"{cls.slot} {cls.name!r} ({cls.__qualname__}): "
                          f"check {declaration!r} failed: "), msg
    assert re.search(values, msg), msg
    if cls.slot in ("decay", "stickiness", "breadth", "retention"):
        assert re.search(r"note \d+ of query \d+: age [-0-9.e]+ d", msg) or "fresh note" in msg
    # the same component inside a policy fails check_policy too
    with pytest.raises(CheckError, match=declaration):
        from memsim.checks.testing import check_policy
        check_policy(Policy(**{cls.slot: cls()}))


def test_the_wrong_upper_bound_names_the_context_where_it_broke():
    with pytest.raises(CheckError) as err:
        check_component(HalfLifeUnder)
    # a fresh note of age 0: the first extreme note
    assert "age 0 d, recalls 0, tier task" in str(err.value)
    assert "(the extreme notes)" in str(err.value)
    assert "the engine prunes with this bound" in str(err.value)


def test_the_engine_paths_catch_a_wrong_upper_bound():
    # the declaration checks skipped: the replay alone shows what it changes
    with pytest.raises(CheckError) as err:
        check_engine_paths(HalfLifeUnder())
    assert err.value.check == "engine paths"
    assert re.search(r"the fast paths give another \w+ frame than the reference: \d+ of \d+ "
                     r"rows differ in '\w+'; first at row \d+ \(query_id \d+", str(err.value))


def test_check_component_runs_the_engine_paths_on_request():
    # a component whose every declaration holds passes, with and without the replay
    from memsim.policies.decay import HalfLife

    check_component(HalfLife(half_life_days=3.0), engine=True)
    calls = []
    import memsim.checks.testing as testing

    real = testing.check_engine_paths
    try:
        testing.check_engine_paths = lambda comp, seed=0: calls.append((comp, seed))
        check_component(HalfLife, engine=True, seed=2)
        check_component(HalfLife, seed=2)
    finally:
        testing.check_engine_paths = real
    assert calls == [(HalfLife(), 2)]


# --------------------------------------------------------------------------
# Every registered component keeps its promises
# --------------------------------------------------------------------------

#: Components too slow for a replay in the test suite: the hnsw retriever
#: builds an index per batch (its results against exact search are in
#: tests/test_ann.py).
SLOW = {("retriever", "hnsw")}
REGISTERED = [(slot, name, cls) for slot, table in REGISTRY.items()
              for name, cls in sorted(table.items()) if (slot, name) not in SLOW]


@pytest.mark.parametrize("slot, name, cls", REGISTERED,
                         ids=[f"{s}:{n}" for s, n, _ in REGISTERED])
def test_every_registered_component_keeps_its_promises_in_the_engine(slot, name, cls):
    check_component(cls, engine=True)


def test_the_readme_example_catches_a_wrong_bound():
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S)
                 if "class Capped" in b)
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    check, message = out.stdout.splitlines()[:2]
    assert check == "upper_bound"
    # the output the README's comment shows
    shown = re.search(r"print\(err\)\s+# (.*?)\.\.\.", block).group(1)
    assert message.startswith(shown), (message, shown)


def test_check_policy_replays_a_policy_through_the_engine_paths():
    from memsim.policies.decay import HalfLife
    from memsim.checks.testing import check_policy

    check_policy(Policy(decay=HalfLife(half_life_days=3.0)), engine=True)
    with pytest.raises(CheckError) as err:
        check_engine_paths(Policy(decay=HalfLifeUnder()))
    assert err.value.check == "engine paths"
    assert err.value.component.startswith("policy (retriever=cosine, decay=half-life-under")
