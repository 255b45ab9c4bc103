"""Components written by outside contributors, served as the engine serves them.

The mistakes a contributor makes that a notebook call does not show, each
caught where it would change results or crash deep in the engine:

- a packer that reads across the rows of its call (the engine packs several
  arms' rows, or a batch's queries, in one call) fails the checker;
- a ranker that normalises over its candidates without declaring
  ``set_dependent`` fails the checker, naming the flag;
- a component that treats a note vector as 1-D fails the checker on
  gathered cells (note vectors (R, W)), naming the shape rule;
- a wrong output shape or dtype, a packer over the budget, an orderer's
  duplicate positions raise :class:`ComponentOutputError` naming the
  component wherever the method returns, the engine included;
- a notebook cell re-run registers its edited class again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import memsim
from memsim.checks import testing
from memsim.checks.testing import CheckError, check_component, random_context
from memsim.core.errors import ConfigError
from memsim.core.params import Interval
from memsim.policies import (REGISTRY, Decay, Orderer, Packer, Policy, Ranker, Retention,
                             Retriever, register)
from memsim.policies import base as policy_base
from memsim.policies.rank import Product

# --------------------------------------------------------------------------
# A. Packers pack each row on its own
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CallCut(Packer):
    """Skip-fill over the candidates whose value reaches ``frac`` of the best
    value of the whole call (not of the row)."""

    name: ClassVar[str] = "call-cut"
    frac: float = 0.8
    _constraints: ClassVar[dict] = {"frac": Interval(0, 1)}

    def pack(self, values, tokens, valid, budget):
        best = np.max(np.where(valid, values, -np.inf), initial=-np.inf)
        return _fill(valid & (values >= self.frac * best), tokens, budget)


@dataclass(frozen=True, kw_only=True)
class RowCut(CallCut):
    """The same cut, relative to each row's own best value."""

    name: ClassVar[str] = "row-cut"

    def pack(self, values, tokens, valid, budget):
        best = np.max(np.where(valid, values, -np.inf), axis=1, keepdims=True,
                      initial=-np.inf)
        return _fill(valid & (values >= self.frac * best), tokens, budget)


def _fill(ok, tokens, budget):
    """The columns ``ok`` in column order while each row's budget lasts."""
    out = np.zeros(ok.shape, dtype=bool)
    left = budget.astype(np.int64).copy()
    for j in range(ok.shape[1]):
        fit = ok[:, j] & (tokens[:, j] <= left)
        out[:, j] = fit
        left -= np.where(fit, tokens[:, j], 0)
    return out


@dataclass(frozen=True, kw_only=True)
class WeakRowsReversed(Orderer):
    """Best first, but best last in the rows whose best value is below the
    median of the call's rows: a row's order depends on the other rows."""

    name: ClassVar[str] = "weak-rows-reversed"

    def order(self, values, packed):
        best = np.max(np.where(packed, values, -np.inf), axis=1, initial=-np.inf)
        flip = best < np.median(best)
        rank = np.cumsum(packed, axis=1) - 1
        n = packed.sum(axis=1, keepdims=True)
        return np.where(packed, np.where(flip[:, None], n - 1 - rank, rank), -1).astype(
            np.int64)


def test_a_packer_that_reads_across_rows_fails_the_checker():
    with pytest.raises(CheckError) as err:
        check_component(CallCut)
    assert err.value.check == "independent rows", str(err.value)
    msg = str(err.value)
    assert msg.startswith("packer 'call-cut' (CallCut): check 'independent rows' failed: "
                          "pack() gives row "), msg
    assert "a packer packs each row on its own" in msg and "in one call" in msg


def test_the_same_cut_row_by_row_passes():
    check_component(RowCut)


def test_an_orderer_that_reads_across_rows_fails_the_checker():
    with pytest.raises(CheckError) as err:
        check_component(WeakRowsReversed)
    assert err.value.check == "independent rows", str(err.value)
    assert "an orderer orders each row on its own" in str(err.value)


@pytest.mark.parametrize("slot, name", [(s, n) for s in ("packer", "orderer")
                                        for n in sorted(REGISTRY[s])])
def test_every_builtin_packer_and_orderer_handles_rows_independently(slot, name):
    comp = REGISTRY[slot][name]()
    for seed in (0, 1):
        testing._check_rows(testing._Checker(name), comp, seed)


# --------------------------------------------------------------------------
# B. A ranker that reads the other notes declares set_dependent
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NormProduct(Ranker):
    """``rel * rec`` divided by the best of the query's live notes (set dependent)."""

    name: ClassVar[str] = "norm-product"
    set_dependent: ClassVar[bool] = True

    def combine(self, rel, rec, ctx):
        s = rel * rec
        live = True if ctx.live is None else np.broadcast_to(ctx.live, s.shape)
        top = np.max(np.where(live, s, -np.inf), axis=1, keepdims=True, initial=-np.inf)
        return s / np.where(np.isfinite(top) & (top > 0), top, 1.0)


@dataclass(frozen=True, kw_only=True)
class NormProductUndeclared(NormProduct):
    """The same, its ``set_dependent`` flag forgotten."""

    name: ClassVar[str] = "norm-product-undeclared"
    set_dependent: ClassVar[bool] = False


def test_an_undeclared_set_dependent_ranker_fails_the_checker():
    with pytest.raises(CheckError) as err:
        check_component(NormProductUndeclared)
    msg = str(err.value)
    assert err.value.check == "set_dependent", msg
    assert "among a third of the notes, reordered" in msg
    assert "declare set_dependent: ClassVar[bool] = True" in msg


def test_the_declared_set_dependent_ranker_passes():
    check_component(NormProduct)


@pytest.mark.parametrize("name", sorted(REGISTRY["ranker"]))
def test_every_builtin_ranker_keeps_its_cells(name):
    testing._check_cells(testing._Checker(name), REGISTRY["ranker"][name](), 0)


# --------------------------------------------------------------------------
# C. Note vectors are (R, W) on gathered cells
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ImportanceProduct(Ranker):
    """``rel * rec * (1 + w * importance)``, the importance made a row with
    ``reshape(1, -1)``, and a bound: the engine prunes it."""

    name: ClassVar[str] = "importance-product"
    w: float = 0.5
    _constraints: ClassVar[dict] = {"w": Interval(0, None)}

    def _importance(self, ctx):
        return np.asarray(ctx.importance, dtype=np.float64).reshape(1, -1)

    def combine(self, rel, rec, ctx):
        return rel * rec * (1.0 + self.w * self._importance(ctx))

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        if rec_lo is None or rec_hi is None or rec_lo < 0:
            return None
        imp = np.asarray(ctx.importance, dtype=np.float64)
        hi_f, lo_f = 1.0 + self.w * imp.max(), 1.0 + self.w * imp.min()
        rel = np.asarray(rel, dtype=np.float64)
        b = np.where(rel >= 0, rel * rec_hi * hi_f, rel * rec_lo * lo_f)
        return b + 1e-9 * np.abs(b) + 1e-300

    def reads_uses(self):
        return False


@dataclass(frozen=True, kw_only=True)
class ImportanceProductNone(ImportanceProduct):
    """The importance made a row with ``[None, :]``."""

    name: ClassVar[str] = "importance-product-none"

    def _importance(self, ctx):
        return np.asarray(ctx.importance, dtype=np.float64)[None, :]


@dataclass(frozen=True, kw_only=True)
class ImportanceProductBroadcast(ImportanceProduct):
    """The importance as it comes: it broadcasts against ``rel``."""

    name: ClassVar[str] = "importance-product-broadcast"

    def _importance(self, ctx):
        return np.asarray(ctx.importance, dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class SalienceRow(Decay):
    """``exp(-age / (10 * salience))``, the salience made a row."""

    name: ClassVar[str] = "salience-row"

    def recency(self, age, ctx):
        sal = np.asarray(ctx.salience, dtype=np.float64)
        return np.exp(-np.maximum(age, 0.0) / (10.0 * sal[np.newaxis, :]))


@pytest.mark.parametrize("cls", [ImportanceProduct, ImportanceProductNone, SalienceRow],
                         ids=lambda c: c.name)
def test_a_component_that_treats_a_note_vector_as_1d_fails_the_checker(cls):
    # it passes every other check: whole contexts give (L,) note vectors
    with pytest.raises(CheckError) as err:
        check_component(cls)
    msg = str(err.value)
    assert err.value.check == "gathered cells", msg
    assert "are all (R, W)" in msg
    assert "never reshape or index a note vector as 1-D" in msg


def test_a_component_that_broadcasts_its_note_vectors_passes():
    check_component(ImportanceProductBroadcast)


def test_the_scoring_context_documents_gathered_note_vectors():
    from memsim.policies.context import ScoringContext

    doc = ScoringContext.__doc__
    assert "(R, W)" in doc and "never a reshape" in doc


# --------------------------------------------------------------------------
# D. Outputs are checked where the methods return, naming the component
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecayTransposed(Decay):
    name: ClassVar[str] = "decay-transposed"

    def recency(self, age, ctx):
        return np.exp(-np.maximum(age, 0) / 5).T


@dataclass(frozen=True, kw_only=True)
class DecayNoReturn(Decay):
    name: ClassVar[str] = "decay-no-return"

    def recency(self, age, ctx):
        np.exp(-np.maximum(age, 0) / 5)


@dataclass(frozen=True, kw_only=True)
class RankerRow(Ranker):
    name: ClassVar[str] = "ranker-row"

    def combine(self, rel, rec, ctx):
        return (rel * rec).sum(axis=0)


@dataclass(frozen=True, kw_only=True)
class RankerInt(Ranker):
    name: ClassVar[str] = "ranker-int"

    def combine(self, rel, rec, ctx):
        return (rel * rec * 100).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class RetrieverRow(Retriever):
    name: ClassVar[str] = "retriever-row"

    def similarity(self, ctx):
        return np.asarray(ctx.dots, dtype=np.float64)[0]


@dataclass(frozen=True, kw_only=True)
class RetentionIndices(Retention):
    name: ClassVar[str] = "retention-indices"

    def evict(self, ctx):
        return np.flatnonzero(np.asarray(ctx.recalls) == 0)


@dataclass(frozen=True, kw_only=True)
class PackerIgnoresBudget(Packer):
    name: ClassVar[str] = "packer-ignores-budget"

    def pack(self, values, tokens, valid, budget):
        return valid.copy()


@dataclass(frozen=True, kw_only=True)
class OrdererDuplicates(Orderer):
    name: ClassVar[str] = "orderer-duplicates"

    def order(self, values, packed):
        return np.where(packed, 0, -1).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class OrdererInt32(Orderer):
    name: ClassVar[str] = "orderer-int32"

    def order(self, values, packed):
        return np.where(packed, np.cumsum(packed, axis=1) - 1, -1).astype(np.int32)


def _pack_problem():
    rng = np.random.default_rng(0)
    values = -np.sort(-rng.uniform(0, 1, (4, 6)), axis=1)
    tokens = rng.integers(100, 400, (4, 6)).astype(np.int64)
    return values, tokens, np.ones((4, 6), dtype=bool), np.full(4, 500, dtype=np.int64)


def _call(cls):
    comp, ctx = cls(), random_context(0)
    if cls.slot == "decay":
        return comp.recency(ctx.age_created, ctx)
    if cls.slot == "ranker":
        return comp.combine(np.asarray(ctx.dots, np.float64), np.ones((5, 60)), ctx)
    if cls.slot == "retriever":
        return comp.similarity(ctx)
    if cls.slot == "retention":
        return comp.evict(random_context(0, sweep=True))
    values, tokens, valid, budget = _pack_problem()
    if cls.slot == "packer":
        return comp.pack(values, tokens, valid, budget)
    return comp.order(values, valid & (np.arange(6) < 3))


@pytest.mark.parametrize("cls, check, got, expected", [
    (DecayTransposed, "recency", "returned shape (60, 5)", "expected (5, 60)"),
    (DecayNoReturn, "recency", "returned None", "expected a float array of shape (5, 60)"),
    (RankerRow, "combine", "returned shape (60,)", "expected (5, 60)"),
    (RankerInt, "combine", "returned dtype int64", "expected a float array"),
    (RetrieverRow, "similarity", "returned shape (60,)", "expected (5, 60)"),
    (RetentionIndices, "evict", "returned shape (31,)", "expected (60,)"),
    (PackerIgnoresBudget, "budget", "packed", "over its budget of 500"),
    (OrdererDuplicates, "permutation", "the positions [0, 0, 0]", "take 0 .. n-1, each once"),
    (OrdererInt32, "order", "returned dtype int32", "expected an int64 array"),
], ids=lambda x: x.name if isinstance(x, type) else None)
def test_a_wrong_output_raises_one_error_naming_the_component(cls, check, got, expected):
    with pytest.raises(policy_base.ComponentOutputError) as err:
        _call(cls)
    msg = str(err.value)
    assert isinstance(err.value, ConfigError)
    assert err.value.check == check, msg
    assert msg.startswith(f"{cls.slot} {cls.name!r} ({cls.__qualname__}): "), msg
    assert got in msg and expected in msg, msg


def test_the_checker_reports_a_wrong_output_under_its_check():
    with pytest.raises(CheckError) as err:
        check_component(PackerIgnoresBudget)
    assert err.value.check == "budget"
    assert "check 'budget' failed: pack() packed" in str(err.value)


def test_a_wrong_output_in_a_run_names_the_component():
    register(DecayTransposed)
    try:
        exp = memsim.experiment_from_dict({
            "experiment": {"name": "t", "replicates": 1, "seed": 1},
            "workload": {"horizon_days": 5, "backfill_days": 5},
            "policies": {"p": {"decay": "decay-transposed"}}})
        with pytest.raises(policy_base.ComponentOutputError, match=r"^decay 'decay-transposed' "
                           r"\(DecayTransposed\): recency\(\) returned shape \((\d+), (\d+)\), "
                           r"expected \(\2, \1\)"):
            memsim.run_experiment(exp, out=None)
    finally:
        REGISTRY["decay"].pop("decay-transposed", None)


def test_an_exception_a_method_raises_gets_a_note_naming_the_component():
    ctx = random_context(0)
    cells = testing._CellsContext(ctx, np.array([0, 1]), np.array([[0, 1, 2], [3, 4, 5]]))
    with pytest.raises(ValueError) as err:
        ImportanceProduct().combine(np.ones((2, 3)), np.ones((2, 3)), cells)
    notes = getattr(err.value, "__notes__", [])
    assert notes == ["raised in ranker 'importance-product' (ImportanceProduct).combine(); "
                     + policy_base.GATHERED_RULE], notes


def test_gathered_cells_keep_the_engines_fallback_for_another_shape():
    # on gathered cells the engine scores a policy whose output has another
    # shape by whole rows: only the dtype is checked there
    ctx = random_context(0)
    cells = testing._CellsContext(ctx, np.array([0, 1]), np.array([[0, 1, 2], [3, 4, 5]]))
    out = ImportanceProductNone().combine(np.ones((2, 3)), np.ones((2, 3)), cells)
    assert np.shape(out) == (1, 2, 3)


@pytest.mark.parametrize("slot", ["retriever", "decay", "ranker", "retention", "packer",
                                  "orderer"])
def test_every_builtin_output_passes_its_check(slot):
    # the wrapped methods of every registered class: the checker's contexts
    # give them the shapes the engine does
    for name, cls in sorted(REGISTRY[slot].items()):
        method = {"retriever": "similarity", "decay": "recency", "ranker": "combine",
                  "retention": "evict", "packer": "pack", "orderer": "order"}[slot]
        assert any(getattr(k.__dict__.get(method), "_output_checked", False)
                   for k in cls.__mro__), f"{slot}:{name}.{method} is not checked"
    policy = Policy()
    assert policy.score(random_context(0)).shape == (5, 60)


# --------------------------------------------------------------------------
# E. Re-running a notebook cell registers the edited class again
# --------------------------------------------------------------------------

CELL = '''
from dataclasses import dataclass
from typing import ClassVar
import numpy as np
from memsim.core.params import Interval
from memsim.policies import Decay, register

@register
@dataclass(frozen=True, kw_only=True)
class Linear(Decay):
    """Linear fade to a floor."""
    name: ClassVar[str] = "test-rerun-linear"
    span_days: float = SPAN
    _constraints: ClassVar[dict] = {"span_days": Interval(0, None, closed="neither")}
    def recency(self, age, ctx):
        return np.maximum(0.2, 1.0 - np.maximum(age, 0.0) / self.span_days)
'''


def _run_cell(span: float, qualname: str = "Linear", module: str = "notebook_cell") -> type:
    namespace = {"__name__": module}
    exec(compile(CELL.replace("SPAN", repr(span)).replace("class Linear", f"class {qualname}"),
                 "<cell>", "exec", dont_inherit=True), namespace)
    return namespace[qualname]


def test_rerunning_a_cell_replaces_its_registered_class():
    try:
        first = _run_cell(90.0)
        second = _run_cell(120.0)  # the cell edited and run again
        assert first is not second
        assert REGISTRY["decay"]["test-rerun-linear"] is second
        assert memsim.policies.build_component("decay", "test-rerun-linear", "d").span_days \
            == 120.0
    finally:
        REGISTRY["decay"].pop("test-rerun-linear", None)


def test_another_class_under_a_taken_name_is_refused_naming_the_holder():
    try:
        _run_cell(90.0)
        with pytest.raises(RuntimeError, match=r"duplicate registration decay:test-rerun-linear: "
                           r"the name is held by notebook_cell\.Linear; register "
                           r"notebook_cell\.Other under another name"):
            _run_cell(90.0, qualname="Other")
        with pytest.raises(RuntimeError, match="held by notebook_cell.Linear"):
            _run_cell(90.0, module="another_module")
    finally:
        REGISTRY["decay"].pop("test-rerun-linear", None)


@dataclass(frozen=True, kw_only=True)
class ProductOfRows(Product):
    """The product ranker's scores (and bounds), times ones shaped from a
    note vector made a row: 1-D note vectors only."""

    name: ClassVar[str] = "product-of-rows"

    def combine(self, rel, rec, ctx):
        ones = np.ones_like(np.asarray(ctx.importance, dtype=np.float64)).reshape(1, -1)
        return super().combine(rel, rec, ctx) * ones


@pytest.mark.parametrize("ranker", [ImportanceProduct, ProductOfRows], ids=lambda c: c.name)
@pytest.mark.parametrize("mode", ["per-tick", "per-query"])
def test_a_ranker_that_fails_on_gathered_cells_is_scored_by_whole_rows(mode, ranker):
    """A contributor's ranker that treats a note vector as 1-D works on
    whole contexts and raises on gathered cells (the checker's ``gathered
    cells`` check tells): the engine scores its arms by whole rows, alone or
    stacked by their decays (``ProductOfRows``: a sweep's trials stack), and
    gives the reference's frames."""
    from pandas.testing import assert_frame_equal

    from memsim.core.rng import seed_sequence
    from memsim.engine import Arm, SimSettings, reference, simulate
    from memsim.policies import build_component
    from tests.test_accelerators import _frames, _stream

    def arm(hl):
        return Arm(f"hl-{hl}", Policy(
            ranker=ranker(),
            decay=build_component("decay", {"kind": "half-life", "half_life_days": hl}, "d")))

    stream = _stream(0)
    arms = [arm(hl) for hl in (3.0, 10.0, 30.0)]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode=mode, save_rankings=True)
    got = simulate(stream, arms, settings, seed_sequence(5))
    want = reference.simulate(stream, arms, settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, _frames(want)[key], check_exact=True)
