"""``memsim advise``: tune the whole pipeline against today's setting, and
prove the gain on queries the search never saw.

The experiment names a workload and, in its ``[advise]`` table, the setting
that runs today::

    [advise]
    current = "today"           # a policy of the experiment, a preset, or "as-logged"
    # everything below is optional
    trials = 30                 # Optuna trials per tuning fold (TPE, seeded)
    batch = 10                  # trials simulated together as the arms of one replay
    seed = 1                    # default: the experiment's seed (fold j's sampler
                                # draws from its child stream ("advise", "tpe", j))
    split = 0.7                 # a stream: tune on the first 70% of its queries by time
    folds = 0                   # a stream: 0 = automatic (rolling origin, 3 folds, when few)
    holdout_replicates = 0      # synthetic: fresh seeds to test on (0: experiment.replicates)
                                # (a key that does not apply to the workload is refused)
    rankers = ["current", "similarity", "half-life", "half-life-floor", "per-type"]
    packers = ["top-k-cutoff", "skip-fill", "greedy", "greedy-swap", "exact"]
    cuts = ["none", "score", "similarity"]
    candidates = [10, 20, 50, 100]
    half_life_days = [1.0, 1000.0]
    floor = [0.0, 0.9]
    retention = true            # tune the retention threshold where today's evicts

The search space spans the pipeline, one stage after the other:

- *ranking* (``rankers``): ``current`` keeps today's retriever, decay,
  stickiness, breadth and ranker (for ``as-logged``: the system's own logged
  ranking); ``similarity`` ranks by similarity alone; ``half-life`` and
  ``half-life-floor`` rank by similarity x an exponential recency (half-life
  in ``half_life_days``, floor in ``floor``); ``per-type`` gives each memory
  type its own half-life (the ``per-type-half-life`` decay) when the notes
  carry several types, else each tier (the ``per-tier`` decay: task and
  scratch, longterm never decays) when they carry several tiers, and is left
  out when they carry neither;
- *candidates*: the top-C the packer sees;
- *packing* (``packers``): the five packers of :mod:`memsim.policies.packing`;
- *cut* (``cuts``): ``score`` drops the candidates scoring under a share of
  the best, ``similarity`` those whose similarity is under a share of the
  best candidate's (``packer.min_relative_score`` and ``packer.cut_on``; only
  the value packers have a cut);
- *retention*: the threshold of today's retention (``cold_threshold`` of
  ``ai-memory``, ``threshold`` of ``memorybank``, ``max_notes`` of
  ``capacity``), from half to twice today's, when today's retention evicts:
  within the interval the component declares for the parameter
  (``threshold`` in [0, 1]), as the int or float its dataclass field
  declares (whatever type today's value was written in; an int on a log
  scale). Today's 0 has no scale: the whole declared interval is searched
  where it is bounded; a knob with no range left (unbounded, or one value)
  is not searched.

Rankers that read what no deployed system can read (``bayes`` reads the
planted classes, ``oracle`` the true gains) are never in the space and may
not be ``current``: their utility is a reference (a bound for ``oracle``), not
achievable headroom.

Out of sample by construction
-----------------------------
*A stream with a time order* (a trace, LoCoMo, a stream folder): the replay
always runs the whole stream, because the memory's state evolves over all of
it; what is split is which queries are scored. With ``folds = 1`` the search
is scored on the first ``split`` of the queries by time and the
recommendation is tested on the rest. With ``folds = k > 1`` (rolling
origin; automatic, with 3 folds, when a time split would hold fewer than 100
test queries, and fewer folds, down to one split, when the log has too few
queries for 3) the queries in time order are cut into ``k + 1`` blocks; fold
``j`` tunes on blocks ``0 .. j - 1`` and tests on block ``j``. The held-out
gain is then pooled over the ``k`` test blocks (each scored by the winner of
its own fold), and the recommendation is the last fold's winner (tuned on
the most history). Queries asked at one time are never split: a cut moves
past them, and a split that would then leave nothing to test on (the last of
two sessions, say) moves before them instead; only a log whose queries all
share one time cannot be cut. ``split`` is used only for a time split: set
while rolling folds run, it is refused; ``holdout_replicates`` is refused on a
stream. A log is one history, replayed once (replicate 0):
``experiment.replicates`` does not apply to it (a policy that draws at
random is scored on replicate 0's draws).

*A synthetic workload*: the search runs on the experiment's replicates
``0 .. R - 1``; the recommendation is tested on fresh replicates (new seeds,
``holdout_replicates`` of them, numbered from ``R``); ``split`` and ``folds``
are refused.

*Something to measure*: a query has something to gain when a relevant note
fits its budget (``oracle_utility > 0``, the same for every setting). A fold
whose tuning part has no such query is not searched: it keeps today's
setting, and its test block is left out of the pooled held-out figures (what
is left out depends on the tuning part alone, never on a test score). Where
the tuning part of the last fold (which holds every fold's) or the test
blocks of the searched folds have no such query, advise refuses before it
writes anything, in one line saying why: no ground truth (no relevant note),
or no relevant note that fits the budget (naming ``experiment.budget_tokens``).
The budget is ``experiment.budget_tokens`` (or a stream's per-query budgets),
or the one entry of ``experiment.budgets``, as ``memsim run`` runs it; a
``budgets`` list of several is refused: advice is for one budget.

The gain is the paired difference of ``utility_share`` (recommended minus
current) over the held-out queries, with its 95% bootstrap interval
(:func:`memsim.reporting.stats.paired_tests`: over queries, or over replicates when
there are 5 or more); it is called significant only when the interval
excludes 0 and the paired test's p-value is below 0.05 (the delta-method
z-test over the queries; exact over 16 or fewer, so that five or fewer
held-out queries are never significant, however alike they gain). The
tuning score (the best trial's, on the queries it was chosen on) is printed
beside the held-out score, so the optimism of the search shows.

The answer
----------
:class:`Advice` holds what to change (each slot of the policy that differs,
from today's value to the recommended one), the held-out utility share,
recall of notes 90 days or older, harm and tokens used, today's and
recommended (a warning on the same line when harm rises or old-note recall
falls significantly: the 95% interval excludes 0 on that side; tokens used
are not warned on, the budget caps them), the verdict (``verdict``:
``"adopt"`` only for a significant held-out gain, else ``"keep"`` today's
setting, and ``verdict_reason``; ``advice.md`` offers the setting to paste
only to adopt), the gain by stage (today's setting changed one stage at a time
towards the recommendation, in the order ranking, packing, cut, retention;
each step's held-out gain over the step before), and the runner-ups whose
tuning score is within noise of the best. :func:`advise` writes
``advice.md`` and ``advice.json`` (and ``trials.csv``, ``manifest.json``,
and ``config.toml``: the experiment with its ``[advise]`` table resolved,
``current`` included, the folds or fresh replicates concrete, which gives the
same advice; written first, so that an interrupted folder has it) to a run
folder named by that config's hash, each written to a temporary name and
renamed. An interrupted advise does not resume: its folder says ``failed``,
and its ``config.toml`` runs it again in a new folder.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import typing
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable
from warnings import catch_warnings, filterwarnings

import numpy as np
import optuna
import pandas as pd

from memsim.runs.config import (Experiment, StreamSource, attribute_overrides, dumps_toml,
                                experiment_with_overrides)
from memsim.engine import Arm, ReplayCache
from memsim.core.errors import ConfigError
from memsim.evaluation.metrics import OLD_RECALL_COLUMN
from memsim.core.params import (Interval, as_path, check_callable, check_keys, check_out_folder,
                                 did_you_mean)
from memsim.core.rng import child_seq, seed_sequence
from memsim.policies import PRESETS, REGISTRY, Policy, resolve_policy
from memsim.policies.context import MEMORY_TYPE_CODES, TIER_CODES
from memsim.engine.state import distinct_texts
from memsim.reporting.rundir import (Manifest, jsonable, new_run_dir, relevant_when_asked,
                                     utc_now, write_atomic, write_text_atomic)
from memsim.runs.runner import load_stream_for, simulate_replicate
from memsim.reporting.numbers import p_phrase
from memsim.reporting.stats import paired_tests, utility_share
from memsim.sweep.evaluate import cache_budget
from memsim.sweep.study import quiet_optuna

__all__ = ["advise", "Advice", "AdviseSpec", "RANKINGS", "PACKERS", "CUTS", "STAGES"]

#: Ranking families of the search space (see the module docstring).
RANKINGS = ("current", "similarity", "half-life", "half-life-floor", "per-type")
#: Packers of the search space.
PACKERS = ("top-k-cutoff", "skip-fill", "greedy", "greedy-swap", "exact")
#: The packers that take a relevance cut (``min_relative_score``).
VALUE_PACKERS = ("greedy", "greedy-swap", "exact")
#: Relevance cuts of the search space: none, on the score, on the similarity.
CUTS = ("none", "score", "similarity")
#: The stages of the gain's decomposition, in the order they are applied.
STAGES = ("ranking", "packing", "cut", "retention")
#: The slots each stage changes.
_STAGE_SLOTS = {"ranking": ("retriever", "decay", "stickiness", "breadth", "ranker", "candidates"),
                "packing": ("packer.kind",), "cut": ("packer.min_relative_score",),
                "retention": ("retention",)}
#: Retention parameters tuned, by retention kind.
RETENTION_KNOBS = {"ai-memory": "cold_threshold", "memorybank": "threshold",
                   "capacity": "max_notes"}
#: Automatic rolling origin: a time split whose test part would hold fewer
#: queries than this uses ``AUTO_FOLDS`` folds instead.
MIN_TEST_QUERIES = 100
AUTO_FOLDS = 3
#: Metrics reported for today's and the recommended setting.
REPORTED = ("utility_share", "recall", OLD_RECALL_COLUMN, "harm", "tokens_used")
#: Columns of the queries frame kept per arm.
_KEEP = ("replicate", "policy", "budget", "query_id", "utility", "oracle_utility", "recall",
         OLD_RECALL_COLUMN, "harm", "tokens_used", "budget_tokens", "n_relevant")
#: The named random stream every arm draws (common random numbers).
_STREAM = "advise"

#: the values of ``split``, ``folds`` and ``holdout_replicates`` that mean "not set"
_UNSET = {"split": 0.7, "folds": 0, "holdout_replicates": 0}

_KEYS = ("current", "trials", "batch", "seed", "split", "folds", "holdout_replicates",
         "rankers", "packers", "cuts", "candidates", "half_life_days", "floor", "retention",
         "runner_ups")


# --------------------------------------------------------------------------
# The [advise] table
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class AdviseSpec:
    """The ``[advise]`` table, validated (see the module docstring)."""

    current: str
    trials: int = 30
    batch: int = 10
    seed: int = 0
    split: float = 0.7
    folds: int = 0
    holdout_replicates: int = 0
    rankers: tuple = RANKINGS
    packers: tuple = PACKERS
    cuts: tuple = CUTS
    candidates: tuple = (10, 20, 50, 100)
    half_life_days: tuple = (1.0, 1000.0)
    floor: tuple = (0.0, 0.9)
    retention: bool = True
    runner_ups: int = 3
    #: the keys the table sets (a key that does not apply is refused, not ignored)
    given: frozenset = field(default=frozenset(), compare=False)

    @classmethod
    def from_table(cls, table: dict | None, exp: Experiment,
                   current: str | None = None) -> AdviseSpec:
        """Parse ``[advise]`` (``current`` overrides its ``current``).

        ``holdout_replicates`` applies to a synthetic workload only, ``split``
        and ``folds`` to a stream only: set where it does not apply, a key is
        refused."""
        table = dict(table or {})
        # every mistake of the table at once, one message each
        errors: list[str] = []
        try:
            check_keys(table, _KEYS, "advise")
        except ConfigError as exc:
            errors += exc.errors
        if current is not None:
            table["current"] = current
        if "current" not in table:
            errors.append("advise.current: missing; name the setting that runs today (a "
                          f"policy of the experiment: {', '.join(exp.policies)}; or a preset, "
                          "e.g. \"as-logged\")")
        kw: dict[str, Any] = {"seed": exp.seed}
        for key, value in table.items():
            if key in _KEYS:
                try:
                    kw[key] = _checked(key, value)
                except ConfigError as exc:
                    errors += exc.errors
        # a key at the value that means "not set" is not set (a config.toml
        # written before only the keys that apply were kept holds all three)
        given = frozenset(k for k in kw if k in table
                          and not (k in _UNSET and kw[k] == _UNSET[k]))
        if isinstance(exp.workload, StreamSource):
            if "holdout_replicates" in given:
                errors.append("advise.holdout_replicates: does not apply to a log, which is "
                              "tested on its own later queries (advise.split, advise.folds), "
                              "not on fresh replicates; leave it out")
        else:
            errors += [f"advise.{key}: does not apply to a synthetic workload, which is tested "
                       "on fresh replicates (advise.holdout_replicates); leave it out"
                       for key in ("split", "folds") if key in given]
        if errors:
            raise ConfigError(errors=errors)
        return cls(**kw, given=given)

    def to_config(self) -> dict:
        """The table: every default filled, concrete seed (what
        :meth:`from_table` reads back as this spec). :func:`_resolved_table`
        keeps of ``split``, ``folds`` and ``holdout_replicates`` only what
        applies."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name != "given":
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


def _fail(key: str, want: str, value: Any) -> ConfigError:
    return ConfigError(f"advise.{key}: expected {want}, got {value!r}")


def _checked(key: str, v: Any) -> Any:
    """One ``[advise]`` value, validated; lists become tuples."""
    def is_int(x):
        return isinstance(x, int) and not isinstance(x, bool)

    def is_num(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if key == "current":
        if not isinstance(v, str) or not v:
            raise _fail(key, "a policy or preset name", v)
        return v
    if key in ("trials", "batch"):
        if not is_int(v) or not 1 <= v <= 100_000:
            raise _fail(key, "an int from 1 to 100000", v)
        return v
    if key in ("folds", "holdout_replicates", "runner_ups"):
        if not is_int(v) or not 0 <= v <= 1000:
            raise _fail(key, "an int from 0 to 1000", v)
        return v
    if key == "seed":
        if not is_int(v) or not 0 <= v < 2**63:
            raise _fail(key, "an int from 0 to 2**63 - 1", v)
        return v
    if key == "split":
        if not is_num(v) or not 0.1 <= v <= 0.9:
            raise _fail(key, "a share from 0.1 to 0.9", v)
        return float(v)
    if key == "retention":
        if not isinstance(v, bool):
            raise _fail(key, "true or false", v)
        return v
    if key in ("rankers", "packers", "cuts"):
        allowed = {"rankers": RANKINGS, "packers": PACKERS, "cuts": CUTS}[key]
        if not isinstance(v, list) or not v:
            raise _fail(key, f"a non-empty list of {', '.join(allowed)}", v)
        for x in v:
            if x not in allowed:
                raise ConfigError(f"advise.{key}: unknown {x!r}{did_you_mean(str(x), allowed)}; "
                                  f"allowed: {', '.join(allowed)}")
        return tuple(dict.fromkeys(v))
    if key == "candidates":
        if not isinstance(v, list) or not v or not all(is_int(x) and 1 <= x <= 1 << 20 for x in v):
            raise _fail(key, "a non-empty list of ints from 1 to 2**20", v)
        return tuple(sorted(set(v)))
    # half_life_days, floor: [low, high]
    lo_ok = 0.0 if key == "floor" else 1e-6
    hi_ok = 0.99 if key == "floor" else 1e6
    if (not isinstance(v, list) or len(v) != 2 or not all(is_num(x) for x in v)
            or not lo_ok <= v[0] <= v[1] <= hi_ok):
        raise _fail(key, f"[low, high] with {lo_ok:g} <= low <= high <= {hi_ok:g}", v)
    return (float(v[0]), float(v[1]))


# --------------------------------------------------------------------------
# The search space: a trial's parameters -> a policy
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Space:
    """What the search may change, fixed for the workload and today's policy."""

    spec: AdviseSpec
    current: Policy
    current_candidates: int
    #: "memory_type" or "tier": what ``per-type`` keys on ("" when neither varies)
    per_type_key: str
    #: the types (or tiers) present in the stream, in code order
    types: tuple
    retention_knob: str

    @property
    def rankings(self) -> tuple:
        return tuple(r for r in self.spec.rankers if r != "per-type" or self.per_type_key)

    @property
    def candidates(self) -> tuple:
        return tuple(sorted(set(self.spec.candidates) | {self.current_candidates}))

    @property
    def packers(self) -> tuple:
        return self.spec.packers

    def own_params(self) -> dict:
        """Today's setting as a trial's parameters (enqueued as trial 0)."""
        p: dict[str, Any] = {"ranking": "current", "candidates": self.current_candidates,
                             "packer": self.current.packer.name}
        cut = self._own_cut()
        if cut is not None:
            if len(self.spec.cuts) > 1:  # one cut is no trial parameter (see sample)
                p["cut"] = cut
            if cut != "none":  # its level is, even where the cut is the only one
                p["cut_level"] = float(self.current.packer.min_relative_score)
        knob = self.knob_range
        if knob is not None:
            p[f"retention.{self.retention_knob}"] = knob.cast(
                getattr(self.current.retention, self.retention_knob))
        return p

    def in_space(self, params: dict) -> bool:
        """Whether :meth:`own_params` can be a trial (``current`` among the
        rankings, today's packer among the packers, today's cut among the cuts)."""
        # today's cut, not params["cut"]: with one cut in the space params has none
        cut = self._own_cut()
        cut_ok = cut is None or cut in self.spec.cuts
        return ("current" in self.rankings and params["packer"] in self.packers and cut_ok)

    def _own_cut(self) -> str | None:
        """Today's cut: ``"none"``, ``"score"`` or ``"similarity"`` (None for
        a rank-order packer, which has no cut)."""
        if self.current.packer.name not in VALUE_PACKERS:
            return None
        if getattr(self.current.packer, "min_relative_score", 0.0) > 0:
            return getattr(self.current.packer, "cut_on", "score")
        return "none"

    def sample(self, trial) -> dict:
        """Draw a trial's parameters (define-by-run: a family's own knobs only)."""
        s = self.spec
        fam = trial.suggest_categorical("ranking", self.rankings)
        if fam in ("half-life", "half-life-floor"):
            trial.suggest_float("half_life_days", *s.half_life_days, log=True)
        if fam == "per-type":
            for t in self.types:
                trial.suggest_float(f"half_life_days.{t}", *s.half_life_days, log=True)
        if fam in ("half-life-floor", "per-type"):
            trial.suggest_float("floor", *s.floor)
        trial.suggest_categorical("candidates", self.candidates)
        packer = trial.suggest_categorical("packer", self.packers)
        if packer in VALUE_PACKERS:
            cut = trial.suggest_categorical("cut", s.cuts) if len(s.cuts) > 1 else s.cuts[0]
            if cut != "none":
                trial.suggest_float("cut_level", 0.05, 0.95)
        knob = self.knob_range
        if knob is not None:
            key = f"retention.{self.retention_knob}"
            if knob.integer:
                trial.suggest_int(key, int(knob.low), int(knob.high), log=knob.log)
            else:
                trial.suggest_float(key, knob.low, knob.high, log=knob.log)
        return dict(trial.params)

    @property
    def knob_range(self) -> _KnobRange | None:
        """The retention knob's search range (None: not searched)."""
        if not self.retention_knob:
            return None
        return _retention_range(self.current.retention, self.retention_knob)

    def table(self, params: dict) -> dict:
        """The resolved policy table of a trial's parameters."""
        table = self.current.to_config()
        table["candidates"] = int(params["candidates"])
        fam = params["ranking"]
        if fam != "current":
            table["retriever"] = self.current.retriever.to_config()
            table["stickiness"] = {"kind": "none"}
            table["breadth"] = {"kind": "none"}
            if self.current.ranker.needs_logged:  # the logged ranker reads no similarity
                table["retriever"] = {"kind": "cosine"}
            table["ranker"] = {"kind": "similarity" if fam == "similarity" else "product"}
            table["decay"] = self._decay(fam, params)
        kind = params["packer"]
        # today's packer keeps its own settings (a solver's limits, swaps)
        table["packer"] = (dict(table["packer"]) if kind == self.current.packer.name
                           else {"kind": kind})
        if kind in VALUE_PACKERS:
            cut = params.get("cut", self.spec.cuts[0] if len(self.spec.cuts) == 1 else "none")
            table["packer"]["min_relative_score"] = (float(params["cut_level"])
                                                     if cut != "none" else 0.0)
            # no cut: today's packer keeps its cut_on, which then does nothing
            # (else today's setting would read as a change of packer)
            table["packer"]["cut_on"] = cut if cut != "none" else table["packer"].get(
                "cut_on", "score")
        knob = self.knob_range
        if knob is not None:
            table["retention"][self.retention_knob] = knob.cast(
                params[f"retention.{self.retention_knob}"])
        return table

    def _decay(self, fam: str, params: dict) -> dict:
        if fam == "similarity":
            return {"kind": "none"}
        if fam == "half-life":
            return {"kind": "half-life", "half_life_days": params["half_life_days"]}
        if fam == "half-life-floor":
            return {"kind": "half-life-floor", "half_life_days": params["half_life_days"],
                    "floor": params["floor"]}
        floor = params["floor"]
        if self.per_type_key == "memory_type":
            d: dict[str, Any] = {"kind": "per-type-half-life", "floor": floor}
            for t in self.types:
                d[f"{t}_half_life_days"] = params[f"half_life_days.{t}"]
            return d
        d = {"kind": "per-tier", "task_floor": floor, "scratch_floor": floor}
        for t in self.types:
            if t in ("task", "scratch"):
                d[f"{t}_half_life_days"] = params[f"half_life_days.{t}"]
        return d

    def policy(self, params: dict) -> Policy:
        return Policy.from_config(self.table(params), "advise")

    def resolved(self, params: dict) -> dict:
        """The trial's policy table with every default filled in."""
        return _resolved(self.table(params), self.current_candidates)


@dataclass(frozen=True)
class _KnobRange:
    """Where the search draws a retention knob: ``[low, high]``, ints or
    floats (the parameter's declared type), on a log scale or not."""

    integer: bool
    low: float
    high: float
    log: bool

    def cast(self, value: Any) -> int | float:
        """``value`` as the declared type (a float knob written ``1`` is 1.0)."""
        return int(value) if self.integer else float(value)


def _retention_range(retention, knob: str) -> _KnobRange | None:
    """The search range of ``knob`` of the retention component ``retention``.

    From half to twice today's value, clamped to the bounds the component
    declares for the parameter (its ``_constraints`` interval: memorybank's
    ``threshold`` in [0, 1]); ints or floats as the parameter's dataclass
    field declares it, whatever type today's value was written in. An int
    knob is searched on a log scale where its range is positive; a float one
    linearly. Today's 0 gives no scale: the whole declared range is searched
    when it is bounded, else the knob is not. None (not searched) as well
    when the range collapses to one value or the parameter declares no
    numeric type or no single interval.
    """
    integer, lo, hi = _declared(type(retention), knob)
    if integer is None:
        return None
    now = getattr(retention, knob)
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        return None
    if now != 0:
        low, high = sorted((now / 2, now * 2))
    elif math.isfinite(lo) and math.isfinite(hi):
        low, high = lo, hi
    else:
        return None
    if integer:  # whole numbers, the declared bounds rounded inwards
        low, high = math.floor(low), math.ceil(high)
        lo, hi = math.ceil(lo) if math.isfinite(lo) else lo, (
            math.floor(hi) if math.isfinite(hi) else hi)
    low, high = max(low, lo), min(high, hi)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        return None
    rng = _KnobRange(bool(integer), low, high, log=bool(integer) and low >= 1)
    for end in (low, high):  # a cross-field check the interval does not say
        try:
            type(retention)(**{**retention.params(), knob: rng.cast(end)})
        except (ConfigError, TypeError, ValueError):
            return None
    return rng


@lru_cache(maxsize=None)
def _declared(cls: type, knob: str) -> tuple[bool | None, float, float]:
    """(int?, low, high) of a component's parameter: its dataclass field's
    type (``int`` or ``float``; else its interval's ``integer``; None: not a
    number) and the interval its ``_constraints`` declares (an open bound
    moved inwards; +-inf where unbounded)."""
    cons = cls._all_constraints().get(knob)
    alternatives = cons if isinstance(cons, (list, tuple)) else (cons,)
    intervals = [c for c in alternatives if isinstance(c, Interval)]
    if len(intervals) > 1:
        return None, -math.inf, math.inf
    iv = intervals[0] if intervals else None
    try:
        hint = typing.get_type_hints(cls).get(knob)
    except Exception:  # an annotation that does not resolve: use the interval's word
        hint = None
    if hint is int or hint is float:
        integer: bool | None = hint is int
    elif iv is not None:
        integer = iv.integer
    else:
        return None, -math.inf, math.inf
    lo = -math.inf if iv is None or iv.low is None else float(iv.low)
    hi = math.inf if iv is None or iv.high is None else float(iv.high)
    if iv is not None and iv.closed in ("right", "neither") and math.isfinite(lo):
        lo = lo + 1 if integer else math.nextafter(lo, math.inf)
    if iv is not None and iv.closed in ("left", "neither") and math.isfinite(hi):
        hi = hi - 1 if integer else math.nextafter(hi, -math.inf)
    return integer, lo, hi


def _resolved(table: dict, candidates: int) -> dict:
    """A policy table with every default filled in (so that two tables of the
    same policy compare equal); ``candidates`` when the table sets none."""
    out = Policy.from_config(table, "advise").to_config()
    out.setdefault("candidates", candidates)
    return out


def _per_type_key(stream) -> tuple[str, tuple]:
    """What ``per-type`` keys on: the memory types when the notes carry
    several, else the tiers (task, scratch) when they carry both; else none.
    A type the engine does not know counts as ``other``, a tier as ``task``,
    as the engine reads them."""
    notes = stream.notes

    def present(column: str, codes: dict, default: str) -> set[str]:
        # as the engine reads them: a text it does not know (or none) is the default
        return {t if t in codes else default for t in distinct_texts(notes[column])}

    if "memory_type" in notes.columns:
        seen = present("memory_type", MEMORY_TYPE_CODES, "other")
        types = [t for t in MEMORY_TYPE_CODES if t in seen]
        if len(types) > 1:
            return "memory_type", tuple(types)
    if "tier" in notes.columns:
        seen = present("tier", TIER_CODES, "task")
        tiers = [t for t in TIER_CODES if t in seen]
        decaying = [t for t in tiers if t != "longterm"]
        if len(tiers) > 1 and decaying:
            return "tier", tuple(decaying)
    return "", ()


def current_policy(exp: Experiment, name: str) -> Policy:
    """Today's policy: a policy of the experiment, else a preset.

    Raises
    ------
    ConfigError
        An unknown name, or a policy that reads hidden labels.
    """
    if name in exp.policies:
        pol = exp.policies[name]
    elif name in PRESETS:
        pol = resolve_policy({"preset": name}, "advise.current")
    else:
        allowed = list(exp.policies) + sorted(PRESETS)
        raise ConfigError(f"advise.current: {name!r} is neither a policy of this experiment nor "
                          f"a preset{did_you_mean(name, allowed)}; policies: "
                          f"{', '.join(exp.policies)}")
    if pol.ranker.needs_truth or pol.ranker.needs_planted:
        raise ConfigError(f"advise.current: {name!r} ranks with {pol.ranker.name!r}, which reads "
                          "hidden labels (the true gains or the planted classes): a reference, "
                          "not a setting a system can run")
    return pol


# --------------------------------------------------------------------------
# Replays
# --------------------------------------------------------------------------


class _Replays:
    """Simulates policies as the arms of one replay per replicate, keeping
    the work shared by every arm between calls (:class:`ReplayCache`)."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.budget = advised_budget(exp)
        self.cache = ReplayCache(min(cache_budget(None), 512 << 20))
        self._streams: dict[int, Any] = {}

    def stream(self, r: int):
        if r not in self._streams:
            self._streams[r] = load_stream_for(self.exp, r)
        return self._streams[r]

    def run(self, policies: dict[str, Policy], reps: list[int]) -> pd.DataFrame:
        arms = [Arm(name, pol, self.budget, stream_name=_STREAM)
                for name, pol in policies.items()]
        parts = []
        for r in reps:
            q = simulate_replicate(self.exp, arms, r, self.stream(r), cache=self.cache)["queries"]
            parts.append(q[[c for c in _KEEP if c in q.columns]])
        out = pd.concat(parts, ignore_index=True)
        out["policy"] = out["policy"].astype(str)
        return out


def advised_budget(exp: Experiment) -> int | None:
    """The budget advise tunes at, as ``memsim run`` would run it: the one
    entry of ``experiment.budgets``, else None (``experiment.budget_tokens``,
    or a stream's per-query budgets where it has them).

    Raises
    ------
    ConfigError
        ``experiment.budgets`` with several entries: advice is for one budget.
    """
    budgets = exp.settings.budgets
    if len(budgets) > 1:
        raise ConfigError(f"experiment.budgets: advise tunes at one budget, and "
                          f"{list(budgets)} holds {len(budgets)}; advise once per budget "
                          f"(--set experiment.budgets=[{budgets[0]}]), or set "
                          "experiment.budget_tokens and leave budgets out")
    return budgets[0] if budgets else None


@dataclass(frozen=True)
class _Fold:
    """Which (replicate, query) pairs a fold tunes on and tests on."""

    name: str
    tune_reps: tuple
    test_reps: tuple
    tune: frozenset   # (replicate, query_id) pairs; empty: every query of the replicates
    test: frozenset


def _folds(exp: Experiment, spec: AdviseSpec, replays: _Replays) -> tuple[list[_Fold], str]:
    """The tuning and test parts, and a sentence saying how they were made."""
    if not isinstance(exp.workload, StreamSource):
        r = exp.settings.replicates
        h = spec.holdout_replicates or r
        fold = _Fold("holdout", tuple(range(r)), tuple(range(r, r + h)), frozenset(), frozenset())
        tuned = "replicate 0" if r == 1 else f"replicates 0-{r - 1}"
        tested = (f"1 fresh replicate ({r}: a new seed)" if h == 1 else
                  f"{h} fresh replicates ({r}-{r + h - 1}: new seeds)")
        return [fold], f"tuned on {tuned}, tested on {tested}"
    q = replays.stream(0).queries.sort_values(["t", "query_id"], kind="stable")
    order = q["query_id"].to_numpy()
    times = q["t"].to_numpy()
    n, split = len(order), spec.split
    d = len(set(times.tolist()))
    distinct = f"{n} quer{'y' if n == 1 else 'ies'} ({d} distinct time{'' if d == 1 else 's'})"
    # what a time split leaves to test on: its cut moved past the queries
    # asked at the same time, as _time_cuts moves it (a log of sessions
    # whose questions share a time can leave far fewer than 1 - split)
    n_test = n - _time_cut(times, int(round(split * n)))
    if spec.folds:  # set: that many
        k = spec.folds
        cuts = _time_cuts(times, k, split)
        if cuts is None:
            parts = "a tuning and a test part" if k == 1 else f"{k + 1} blocks"
            raise ConfigError(f"advise.{'split' if k == 1 else 'folds'}: the {distinct} "
                              f"cannot be cut into {parts}")
    else:  # automatic: one split when it leaves enough to test on, else rolling
        # folds, as many as the log allows up to AUTO_FOLDS, down to one split
        for k in ([1] if n_test >= MIN_TEST_QUERIES else range(AUTO_FOLDS, 0, -1)):
            cuts = _time_cuts(times, k, split)
            if cuts is not None:
                break
        else:
            # one split fails only where every query has one time: no
            # advise.split helps then
            raise ConfigError(f"workload: the log's {distinct} cannot be cut by time into a "
                              "tuning and a test part; advise needs earlier queries to tune on "
                              "and later ones to test on")
    if k > 1 and "split" in spec.given:
        why = (f"advise.folds = {k}" if spec.folds else
               f"advise.folds is automatic, and a split leaving {n_test} of the {n} queries to "
               f"test on, fewer than {MIN_TEST_QUERIES}, gives way to {k} rolling folds")
        raise ConfigError(f"advise.split: not used ({why}); set advise.folds = 1 to test on a "
                          "time split, or leave advise.split out")
    pairs = [frozenset((0, int(x)) for x in part) for part in np.split(order, cuts)]
    # why no more folds, said alike whether the folds were automatic or set:
    # config.toml sets them, and its re-run must give the same advice
    no_more = not any(_time_cuts(times, m, split) is not None
                      for m in range(k + 1, AUTO_FOLDS + 1))
    if k == 1:
        small = (" (the log is too small for rolling folds)"
                 if no_more and n_test < MIN_TEST_QUERIES else "")
        return [_Fold("time-split", (0,), (0,), pairs[0], pairs[1])], (
            f"time split{small}: tuned on the first {_queries(cuts[0])} by time, tested on the "
            f"last {n - cuts[0]}")
    folds = [_Fold(f"fold-{j}", (0,), (0,), frozenset().union(*pairs[:j]), pairs[j])
             for j in range(1, k + 1)]
    sizes = ", ".join(str(len(p)) for p in pairs)
    at = f", at {d} distinct times," if d < n else ""  # (ties are never split)
    fewer = f" (the {n} queries{at} allow no more)" if no_more and k < AUTO_FOLDS else ""
    return folds, (f"rolling origin over time, {k} folds{fewer}: the {n} queries cut into "
                   f"{k + 1} blocks ({sizes}); fold j tunes on blocks 0..j-1 and tests on "
                   "block j")


def _time_cuts(times: np.ndarray, k: int, split: float) -> list[int] | None:
    """Where the queries in time order are cut: one split at ``split`` (k = 1)
    or ``k + 1`` equal blocks, each cut moved past queries asked at the same
    time as the one before, so that no test query is as old as a tuning one;
    None when the cuts leave a part empty.

    One split that would leave a part empty (the share falls on the first or
    the last time, say the last of two sessions) is moved to the nearest
    time inside instead: there is a split wherever the log has two times."""
    n = len(times)
    if k == 1:
        cut = _time_cut(times, min(max(int(round(split * n)), 1), n - 1))
        if cut >= n:  # inside the queries of the last time: cut before them
            cut = int(np.searchsorted(times, times[-1], side="left"))
        return [cut] if 1 <= cut < n else None
    shares = np.arange(1, k + 1) / (k + 1)
    cuts = [_time_cut(times, int(round(share * n))) for share in shares]
    if len(set(cuts)) < len(cuts) or cuts[0] < 1 or cuts[-1] >= n:
        return None
    return cuts


def _time_cut(times: np.ndarray, i: int) -> int:
    """``i`` moved forward past the queries asked at the time of query ``i - 1``."""
    while 0 < i < len(times) and times[i] == times[i - 1]:
        i += 1
    return i


def _measurable(folds: list[_Fold], frame: pd.DataFrame, replays: _Replays) -> list[bool]:
    """Which folds have something to tune on: a tuning query with something
    to gain (``oracle_utility > 0``: a relevant note that fits the budget,
    whatever the setting). A fold without one keeps today's setting.

    ``frame`` is today's setting replayed on every query of the folds.

    Raises
    ------
    ConfigError
        Nothing to measure: no query with something to gain in the tuning
        part (the last fold's, which holds every fold's), or none in the
        test blocks of the folds that tune.
    """
    tuned = [_gains(_rows(frame, f.tune, f.tune_reps)) for f in folds]
    tests = [_rows(frame, f.test, f.test_reps) for f, ok in zip(folds, tuned) if ok]
    if tests and _gains(pd.concat(tests)):
        return tuned
    if not _gains(frame):
        rows, part = frame, ""
    elif not tests:
        rows, part = _rows(frame, folds[-1].tune, folds[-1].tune_reps), "tuning"
    else:
        rows, part = pd.concat(tests), "held-out"
    raise ConfigError(_nothing_to_measure(rows, part, replays))


def _gains(rows: pd.DataFrame) -> bool:
    """Whether a query of ``rows`` has something to gain."""
    return bool((rows["oracle_utility"] > 0).any())


def _nothing_to_measure(rows: pd.DataFrame, part: str, replays: _Replays) -> str:
    """Why no query of ``rows`` (the ``part`` queries; "": every query) has
    something to gain, in one line naming what to change."""
    which = f"none of the {len(rows)} {part} queries has" if part else "no query has"
    what = {"tuning": "nothing to tune on", "held-out": "nothing to test on"}.get(
        part, "nothing to measure")
    if not (rows["n_relevant"] > 0).any():
        gains = replays.stream(0).qrels["gain"]
        if part:
            note = ""
        elif len(gains) and not (gains > 0).any():  # judged, but only as misleading
            note = (f" (all {len(gains)} judgements of the log have a negative gain: notes that "
                    "mislead, none that helps)")
        else:
            note = " (no ground truth: a trace's 'used' or 'judgement' events, a stream's qrels)"
        lead, why = "workload", "a relevant note" + note
    else:
        # experiment.budgets overrides a stream's per-query budgets; budget_tokens does not
        lead = ("experiment.budgets" if replays.exp.settings.budgets
                or _per_query_budgets(replays.stream(0)) else "experiment.budget_tokens")
        low, high = int(rows["budget_tokens"].min()), int(rows["budget_tokens"].max())
        budget = f"{high} tokens" if low == high else f"{low} to {high} tokens"
        why = (f"a relevant note that fits the budget of {budget} (the smallest relevant note "
               f"has {_smallest_relevant(rows, replays)} tokens)")
    line = f"{lead}: {what}: {which} {why}"
    if not part:
        return line
    if isinstance(replays.exp.workload, StreamSource):
        return line + "; another cut of the log (advise.split, advise.folds) may leave some"
    return line + "; more replicates (experiment.replicates, advise.holdout_replicates) may give some"


def _smallest_relevant(rows: pd.DataFrame, replays: _Replays) -> int:
    """Tokens of the smallest note in a query's R+ (its relevant notes that
    exist at its time), over the queries of ``rows``: a note created after
    the query could never fit its budget."""
    sizes = []
    for r, ids in rows.groupby("replicate")["query_id"]:
        stream = replays.stream(int(r))
        in_r, _ = relevant_when_asked(stream)
        qrels = stream.qrels[in_r & stream.qrels["query_id"].isin(ids).to_numpy()]
        sizes.append(stream.notes.loc[stream.notes["note_id"].isin(qrels["note_id"]), "tokens"])
    return int(pd.concat(sizes).min())


def _rows(frame: pd.DataFrame, pairs: frozenset, reps: tuple) -> pd.DataFrame:
    """The rows of ``frame`` on the given replicates and (replicate, query) pairs."""
    sub = frame[frame["replicate"].isin(reps)]
    if not pairs:
        return sub
    keys = pd.MultiIndex.from_arrays([sub["replicate"].to_numpy(), sub["query_id"].to_numpy()])
    return sub[keys.isin(list(pairs))]


# --------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------


@dataclass
class Advice:
    """What :func:`advise` found (see the module docstring).

    Attributes
    ----------
    current : str
        Today's setting, as named.
    changes : list of str
        One line per slot that changes: ``"packer from skip-fill to greedy(...)"``.
    recommended : dict
        The tuned policy's resolved table (``[policies.NAME]``): the
        recommendation where :attr:`verdict` is ``"adopt"``, else the best
        setting on the tuning queries, not recommended.
    heldout : dict
        Metric -> {"current", "recommended", "diff", "low", "high"} on the
        held-out queries (pooled over the test blocks of the folds that were
        searched, each scored by its own fold's winner).
    gain, gain_low, gain_high : float
        The held-out gain of ``utility_share`` and its 95% interval.
    ci_over, n_heldout
        What the interval resamples (``"queries"`` or ``"replicates"``) and
        the held-out queries with an achievable utility.
    significant : bool
        The interval excludes 0 and the paired test's p-value
        (``heldout["utility_share"]["p"]``) is below 0.05.
    verdict, verdict_reason : str (properties, in ``advice.json``)
        ``"adopt"`` the tuned setting (a significant held-out gain) or
        ``"keep"`` today's; why: ``"significant gain"``, ``"significantly
        worse"``, ``"not significant"``, ``"nothing better found"``.
    tuning : dict
        ``{"current", "recommended"}``: the tuning scores of the last fold.
    stages : list of dict
        The decomposition: stage, held-out share, gain over the step before, interval.
    runner_ups : list of dict
        Settings within noise of the best on the tuning queries, with their
        changes and held-out shares (on the last fold's test queries).
    warnings : list of str
    folds : list of dict
        Per fold: its tuning and test sizes (``n_tune``, ``n_test``), today's
        and its winner's held-out share (``current``, ``winner``), its
        winner's tuning share and changes (``tuning``, ``changes``), and
        ``tuned``: false for a fold whose tuning part had nothing to gain (not
        searched: today's setting kept, ``winner`` is today's share,
        ``tuning`` NaN, and its test block is left out of :attr:`heldout`).
    split, workload : str
        How the tuning and test queries were chosen; what was replayed.
    trials : int
        Trials per fold.
    heldout_replicates : int
        Replicates the held-out queries come from (1 for a stream).
    heldout_fresh : bool
        Whether they are fresh replicates of a synthetic workload (new
        seeds), not a part of a stream's queries.
    path : Path or None
        The run folder, when one was written.
    """

    current: str
    changes: list
    recommended: dict
    heldout: dict
    gain: float
    gain_low: float
    gain_high: float
    ci_over: str
    n_heldout: int
    significant: bool
    tuning: dict
    stages: list
    runner_ups: list
    folds: list
    warnings: list
    split: str
    workload: str
    trials: int
    heldout_replicates: int = 1
    heldout_fresh: bool = False
    path: Path | None = None
    trials_table: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    def to_dict(self, path: bool = True) -> dict:
        """The advice as JSON values; ``path``: with the run folder's path
        (``advice.json``, inside that folder, leaves it out: the same
        experiment writes the same file wherever it runs)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("path", "trials_table")}
        if path:
            d["path"] = str(self.path) if self.path else None
        d["verdict"] = self.verdict
        d["verdict_reason"] = self.verdict_reason
        return jsonable(d)

    def to_json(self, path: bool = True) -> str:
        return json.dumps(self.to_dict(path), indent=2) + "\n"

    @property
    def verdict_reason(self) -> str:
        """Why :attr:`verdict`: ``"significant gain"``, ``"significantly
        worse"``, ``"not significant"`` (the held-out gain's interval), or
        ``"nothing better found"`` (the tuned setting is today's)."""
        if not self.changes:
            return "nothing better found"
        if self.significant and self.gain_low > 0:
            return "significant gain"
        if self.significant:
            return "significantly worse"
        return "not significant"

    @property
    def verdict(self) -> str:
        """``"adopt"`` the tuned setting (:attr:`recommended`: a significant
        held-out gain) or ``"keep"`` today's (anything else: then
        :attr:`recommended` is the best setting on the tuning queries, not a
        recommendation)."""
        return "adopt" if self.verdict_reason == "significant gain" else "keep"

    @property
    def _pooled(self) -> bool:
        """The held-out figures pool each fold's own winner (rolling folds)."""
        return len(self.folds) > 1

    def _winners_differ(self) -> bool:
        """Whether an earlier fold's winner is not the recommendation."""
        return any(f.get("changes") != self.changes for f in self.folds[:-1]
                   if f.get("tuned", True))

    def _kept_folds(self) -> list[str]:
        """The folds with nothing to gain in their tuning part: not searched,
        today's setting kept, their test blocks left out of the pooled figures."""
        return [f["fold"] for f in self.folds if not f.get("tuned", True)]

    def headline(self) -> str:
        """The line a person acts on."""
        u = self.heldout["utility_share"]
        reason = self.verdict_reason
        if reason == "nothing better found":
            if self.significant and self._pooled:
                verdict = (("a significant gain" if self.gain_low > 0 else "significantly worse")
                           + " for the folds' own winners, but the last fold's winner (the "
                           "recommendation) is today's setting: keep it")
            else:
                verdict = ("NOT significant, and the search found nothing better than today's "
                           "setting: keep it")
        elif reason == "significant gain":
            verdict = "a significant gain"
        elif reason == "significantly worse":
            verdict = "significantly WORSE than today's setting: keep today's"
        else:
            verdict = ("NOT significant: keep today's setting unless the other metrics argue "
                       "for the change")
        kept = self._kept_folds()
        pooled = ""
        if self._pooled:
            n = len(self.folds) - len(kept)
            pooled = (f", pooled over {n}{f' of {len(self.folds)}' if kept else ''} folds, each "
                      "block scored by its own fold's winner")
        if kept:
            pooled += (f"; {', '.join(kept)} left out (nothing to gain in "
                       f"{'its' if len(kept) == 1 else 'their'} tuning part: today's setting "
                       "kept)")
        over = self.ci_over
        if over == "queries" and self.heldout_fresh:  # (over replicates from 5 of them)
            h = self.heldout_replicates
            over += (f" of {h} fresh replicate{'s' if h > 1 else ''}, fewer than 5: it leaves "
                     "out the variation between workloads")
        return (f"held-out utility_share {u['current']:.3f} -> {u['recommended']:.3f}, gain "
                f"{_interval(self.gain, self.gain_low, self.gain_high)} "
                f"({_queries(self.n_heldout, 'held-out')} with something to gain{pooled}, interval "
                f"over {over}; paired test {p_phrase(u.get('p'))}): {verdict}")

    def metrics_line(self) -> str:
        h = self.heldout
        parts = []
        old = h.get(OLD_RECALL_COLUMN)
        if old is None or not math.isfinite(old["current"]):
            parts.append("recall of notes >= 90 days: n/a (no relevant note that old)")
        else:
            parts.append(f"recall of notes >= 90 days {old['current']:.3f} -> "
                         f"{old['recommended']:.3f}")
        parts.append(f"harm {h['harm']['current']:.3f} -> {h['harm']['recommended']:.3f}")
        parts.append(f"tokens used {h['tokens_used']['current']:.0f} -> "
                     f"{h['tokens_used']['recommended']:.0f}")
        line = "; ".join(parts)
        if self._pooled:  # the figures are not the recommendation's alone
            line = "held-out, each fold's own winner: " + line
        if self.warnings:
            line += "  WARNING: " + "; ".join(self.warnings)
        return line

    def to_text(self) -> str:
        lines = [f"memsim advise: {self.workload}; current = {self.current!r}",
                 f"{self.split}; {self.trials} trials per fold", ""]
        adopt = self.verdict == "adopt"
        if self.changes:
            lines.append("Recommendation:" if adopt else
                         "Best setting on the tuning queries (not a recommendation: "
                         f"{self.verdict_reason} on the held-out queries, see the gain):")
            lines += [f"  change {c}" for c in self.changes]
        else:
            lines.append("Recommendation: keep today's setting (the search found nothing better "
                         "on the tuning queries)")
            if self._pooled and self._winners_differ():
                lines.append("(the held-out figures below pool each fold's own winner, and an "
                             "earlier fold's winner differs from today's setting: see the fold "
                             "table; they are not this recommendation's)")
        lines += ["", self.headline(), self.metrics_line(), ""]
        t = self.tuning
        u = self.heldout["utility_share"]
        name = "recommended" if adopt else "tuned"
        lines += ["utility_share   tuning   held-out"
                  + (", each fold's own winner" if self._pooled else ""),
                  f"current         {t['current']:.3f}    {u['current']:.3f}",
                  f"{name:<15} {t['recommended']:.3f}    {u['recommended']:.3f}",
                  f"gain            {_signed(t['recommended'] - t['current'])}   "
                  f"{_signed(u['recommended'] - u['current'])}   (the tuning gain is what the "
                  "search saw; the held-out gain is the estimate)"]
        if self._pooled:
            kept = self._kept_folds()
            blocks = ("every fold's test block" if not kept else
                      f"the test blocks of the folds searched ({', '.join(kept)} left out)")
            lines.append(f"(tuning: the last fold's tuning queries, its winner; held-out: {blocks}"
                         ", each scored by its own fold's winner, as in the line above)")
        if self._pooled:
            lines += ["", "fold      tuned on  tested on  current  its winner  gain"]
            for f in self.folds:
                line = f"{f['fold']:<9} {f['n_tune']:>8}  {f['n_test']:>9}  {_share(f['current'])}    "
                if f.get("tuned", True):
                    line += f"{_share(f['winner'])}       {_signed(f['winner'] - f['current'])}"
                else:
                    line += ("today's setting kept: nothing to gain in its tuning part (left out "
                             "of the pooled figures)")
                lines.append(line)
        last_base = (f"on the last fold's {_queries(self.folds[-1]['n_test'], 'test')}"
                     if self._pooled else "")
        if last_base and not math.isfinite(_nan(self.folds[-1]["current"])):
            # a block with no relevant note that fits: its shares are n/a, say why
            last_base += ", none of them with something to gain"
        if self.stages:
            where = last_base or "held-out"
            lines += ["", f"Gain by stage ({where}; today's setting changed one stage at a "
                      "time, in the order " + " -> ".join(STAGES) + "):"]
            w = max(10, *(len(s["stage"]) for s in self.stages))
            for s in self.stages:
                lines.append(f"  {s['stage']:<{w}} share {_share(s['share']).strip()}  gain "
                             f"{_interval(s['gain'], s['low'], s['high'])}")
        if self.runner_ups:
            base = ""
            if last_base:  # not the pooled base of the figures above
                f = self.folds[-1]
                base = (f" (held-out: {last_base}, where the {name} setting scores "
                        f"{_share(f['winner']).strip()} and today's "
                        f"{_share(f['current']).strip()})")
            lines += ["", f"Runner-ups within noise of the best on the tuning queries{base}:"]
            for ru in self.runner_ups:
                lines.append(f"  tuning {ru['tuning']:.3f}, held-out "
                             f"{_share(ru['heldout']).strip()}: "
                             + ("; ".join(ru["changes"]) or "today's setting"))
        lines += ["", "Not offered: bayes and oracle read hidden labels (the planted classes, "
                  "the true gains); their utility is a reference, not achievable headroom."]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        head = f"# Advice for {self.workload}\n\n```text\n{self.to_text()}\n```\n\n"
        if self.verdict == "adopt":
            return (head + "Recommended policy (paste as a `[policies.NAME]` table):\n\n```toml\n"
                    + dumps_toml({"policies": {"recommended": self.recommended}}) + "```\n")
        head += (f"Verdict: keep today's setting (`{self.current}`): "
                 f"{self.verdict_reason} on the held-out queries.\n")
        if not self.changes:
            return head
        return (head + "\nThe tuned setting, not recommended (for reference only; do not paste "
                "it as an improvement):\n\n```toml\n"
                + dumps_toml({"policies": {"tuned-not-recommended": self.recommended}})
                + "```\n")


def _queries(n: int, what: str = "") -> str:
    """``"12 test queries"``, ``"1 test query"``."""
    return " ".join([str(n)] + ([what] if what else []) + ["query" if n == 1 else "queries"])


def _nan(x: float | None) -> float:
    """``x``, with None (a NaN read back from JSON) as NaN."""
    return math.nan if x is None else float(x)


def _share(x: float) -> str:
    """A share with 3 decimals, or ``n/a`` where nothing was there to gain."""
    return "  n/a" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _signed(x: float, decimals: int | None = None) -> str:
    """A difference or a bound of its interval, with a sign, to ``decimals``
    (default :func:`_decimals` of ``x`` alone)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.{_decimals(x) if decimals is None else decimals}f}"


def _decimals(*values: float) -> int:
    """3, or as many as give two significant digits where 3 would print one
    of ``values`` that is not 0 as 0 (at most 15): the values printed side
    by side share it (an interval that excludes 0 never reads ``[+0.000,
    ...]``)."""
    return min(15, max([3] + [1 - math.floor(math.log10(abs(v))) for v in values
                              if v is not None and math.isfinite(v) and 0 < abs(v) < 0.0005]))


def _interval(x: float, low: float, high: float) -> str:
    """``+0.012 [+0.003, +0.020]``: a difference and its interval, with the
    same decimals (:func:`_decimals`)."""
    d = _decimals(x, low, high)
    return f"{_signed(x, d)} [{_signed(low, d)}, {_signed(high, d)}]"


def describe_space(slot: str, table: Any) -> str:
    """``kind(param=value, ...)`` of a component table: its real-valued
    parameters (half-lives, floors, cuts), and the others where they differ
    from the kind's defaults (a solver's limits, the clock)."""
    if not isinstance(table, dict):
        return str(table)
    cls = REGISTRY.get(slot, {}).get(table.get("kind"))
    defaults = cls().to_config() if cls is not None else {}
    params = [f"{k}={_short_num(v)}" for k, v in table.items()
              if k != "kind" and (isinstance(v, float) or defaults.get(k, object()) != v)]
    return f"{table.get('kind')}({', '.join(params)})" if params else str(table.get("kind"))


def _short_num(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def changes_between(now: dict, rec: dict) -> list[str]:
    """One line per slot whose table differs: ``"slot from X to Y"``."""
    out = []
    for slot in dict.fromkeys((*now, *rec)):
        a, b = now.get(slot), rec.get(slot)
        if a != b:
            out.append(f"{slot} from {describe_space(slot, a)} to {describe_space(slot, b)}")
    return out


def _paired(frame: pd.DataFrame, policy: str, baseline: str,
            metrics=("utility_share",)) -> dict[str, dict]:
    """Metric -> paired difference of ``policy`` over ``baseline`` on the
    rows of ``frame`` (their interval: :func:`memsim.reporting.stats.paired_tests`)."""
    sub = frame[frame["policy"].isin([policy, baseline])]
    have = [m for m in metrics if m == "utility_share" or sub[m].notna().any()]
    res = paired_tests(sub, baseline=baseline, metrics=have)
    out = {}
    for m in metrics:
        row = res[(res["policy"] == policy) & (res["metric"] == m)]
        if not len(row):
            out[m] = {"current": math.nan, "recommended": math.nan, "diff": math.nan,
                      "low": math.nan, "high": math.nan, "over": "", "n": 0, "p": None}
            continue
        r = row.iloc[0]
        out[m] = {"current": float(r["baseline_mean"]), "recommended": float(r["policy_mean"]),
                  "diff": float(r["diff"]), "low": float(r["diff_ci_low"]),
                  "high": float(r["diff_ci_high"]), "over": str(r["ci_over"]),
                  "n": int(r["n_pairs"]),
                  # None: no test (no pair differs)
                  "p": float(r["p_value"]) if math.isfinite(r["p_value"]) else None}
    return out


def _excludes_zero(lo: float, hi: float) -> bool:
    return math.isfinite(lo) and math.isfinite(hi) and (lo > 0 or hi < 0)


#: the significance level of the held-out gain's paired test
ALPHA = 0.05


def _significant(d: dict) -> bool:
    """Whether a paired difference (:func:`_paired`) is significant: its
    interval excludes 0 and its paired test's p-value is below
    :data:`ALPHA` (exact over few queries, so that a handful of held-out
    queries that gain alike, whose interval has no width, is not enough)."""
    return _excludes_zero(d["low"], d["high"]) and d["p"] is not None and d["p"] < ALPHA


# --------------------------------------------------------------------------
# advise()
# --------------------------------------------------------------------------


def advise(exp: Experiment | str | Path, *, current: str | None = None,
           overrides: list[str] | dict | None = None, out: str | Path | None = None,
           progress: Callable[[str], None] | None = None,
           argv: list[str] | None = None,
           progress_fraction: Callable[[float], None] | None = None) -> Advice:
    """Tune the pipeline against today's setting; test the result out of sample.

    Parameters
    ----------
    exp : Experiment or path
        The experiment (its ``[advise]`` table, its workload, its budget).
    current : str, optional
        Overrides ``advise.current``.
    overrides : list of "KEY=VALUE" or dict, optional
        Dotted-key overrides (``advise.trials=10``), applied before validation.
    out : path, optional
        Parent folder of the run folder (``advice.md``, ``advice.json``,
        ``trials.csv``); None keeps everything in memory.
    progress : callable, optional
        Called with a line of text after each batch of trials.
    progress_fraction : callable, optional
        Called with the share of the trials done (0 to 1) after each batch
        (what ``memsim advise --progress json`` prints, through the
        command line's progress printer).

    Returns
    -------
    Advice
    """
    check_callable(progress, "advise(progress=)")
    check_callable(progress_fraction, "advise(progress_fraction=)")
    # the command line passes argv: its mistakes are named by its options,
    # a call's by its arguments
    cli = argv is not None
    if out is not None:  # before the work, which a folder that cannot be made would lose
        check_out_folder(as_path(out, "advise(out=)"), "--out" if cli else "advise(out=)")
    exp = experiment_with_overrides(exp, overrides).single("memsim advise")
    try:
        spec = AdviseSpec.from_table(exp.advise, exp, current)
        pol = current_policy(exp, spec.current)
        replays = _Replays(exp)
        stream0 = replays.stream(0)
        if pol.ranker.needs_logged and getattr(stream0, "retrieved", None) is None:
            raise ConfigError(f"advise.current: {spec.current!r} replays logged rankings, and "
                              "this workload has none (a trace with 'retrieved' events has them)")
        key, types = _per_type_key(stream0)
        knob = RETENTION_KNOBS.get(pol.retention.name, "") if (
            spec.retention and pol.retention.evicts) else ""
        if knob and _retention_range(pol.retention, knob) is None:
            knob = ""  # no range to search (today's 0 with no bound, or one value)
        space = _Space(spec, pol, int(pol.candidates or exp.sim.candidates), key, types, knob)
        if not space.rankings:
            raise ConfigError("advise.rankers: only 'per-type', and the notes carry neither "
                              "several memory types nor several tiers; add another ranking")
        folds, split_text = _folds(exp, spec, replays)
        # today's setting on every query: what there is to measure, before any folder
        current_frame = replays.run({"current": pol}, _replicates(folds))
        tuned = _measurable(folds, current_frame, replays)
    except ConfigError as exc:  # the [advise] checks: name the file, and what set the key
        raise _attributed(exc, exp.source_file, overrides, current, cli) from None
    # the experiment that runs has the [advise] table resolved (--current
    # included): its config.toml gives the same advice, and its hash differs
    exp = dataclasses.replace(exp, advise=_resolved_table(spec, exp, folds))

    manifest = path = None
    if out is not None:
        path = new_run_dir(out, f"{exp.name}_advise", exp.hash8())
        manifest = Manifest(path, name=exp.name, config_hash=exp.hash8(),
                            source_file=exp.source_file, argv=argv)
        manifest.update(kind="advise")  # an interrupted folder, without advice.json, says so
    try:
        if path is not None:  # first, like a run's: an interrupted folder says what ran
            write_text_atomic(path / "config.toml", _config_header(exp) + dumps_toml(
                exp.to_config()))
        advice = _advise(exp, spec, space, folds, tuned, split_text, replays, current_frame,
                         progress, progress_fraction)
        if path is not None:
            advice.path = path
            write_atomic(path / "trials.csv",
                         lambda p: advice.trials_table.to_csv(p, index=False))
            write_text_atomic(path / "advice.json", advice.to_json(path=False))
            write_text_atomic(path / "advice.md", advice.to_markdown())
            manifest.update(status="completed", finished_utc=utc_now())
        return advice
    except BaseException as exc:
        # a stop once the folder reads completed (its files all written)
        # leaves it completed
        if manifest is not None and manifest.status_on_disk() != "completed":
            try:
                manifest.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                                finished_utc=utc_now())
            except OSError:
                pass
        raise


def _replicates(folds: list[_Fold]) -> list[int]:
    """The replicates the folds tune and test on."""
    return sorted({r for f in folds for r in (*f.tune_reps, *f.test_reps)})


def _resolved_table(spec: AdviseSpec, exp: Experiment, folds: list[_Fold]) -> dict:
    """The ``[advise]`` table as it ran: every default filled, and of
    ``split``, ``folds`` and ``holdout_replicates`` what applies, concrete (a
    log: the number of folds, and the split when there is one; a synthetic
    workload: the fresh replicates)."""
    table = spec.to_config()
    if isinstance(exp.workload, StreamSource):
        del table["holdout_replicates"]
        table["folds"] = len(folds)
        if len(folds) > 1:
            del table["split"]
    else:
        del table["split"], table["folds"]
        table["holdout_replicates"] = len(folds[0].test_reps)
    return table


def _config_header(exp: Experiment) -> str:
    return (f"# Resolved configuration of {exp.name}'s advice (every default filled in).\n"
            "# Re-run with: memsim advise config.toml (a new folder; an interrupted one does "
            "not resume)\n")


def _attributed(exc: ConfigError, source_file: str, overrides: list[str] | dict | None,
                current: str | None, cli: bool = True) -> ConfigError:
    """``exc`` (same type) as :func:`load_experiment` words a mistake: each
    message about a key that an override set ends with ``(from --set
    KEY=VALUE)``, or ``(from --current NAME)`` for ``advise.current``
    (``current=NAME`` from a call, not the command line), and starts with
    the experiment's file when it has one."""
    attributed = attribute_overrides(exc, overrides).errors
    given = f"--current {current}" if cli else f"current={current!r}"
    messages = [f"{m} (from {given})"
                if current is not None and m.startswith("advise.current: ") else a
                for m, a in zip(exc.errors, attributed)]
    if source_file:
        messages = [f"{source_file}: {m}" for m in messages]
    return exc.with_messages(messages)


@contextmanager
def _optuna_errors_only():
    """Optuna's log at ERROR during the search (an INFO line per trial would
    bury the progress lines), then back to what it was: a notebook's own
    studies keep their log."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _advise(exp: Experiment, spec: AdviseSpec, space: _Space, folds: list[_Fold],
            tuned: list[bool], split_text: str, replays: _Replays,
            current_frame: pd.DataFrame, progress: Callable[[str], None] | None,
            progress_fraction: Callable[[float], None] | None = None) -> Advice:
    """The search and the held-out test. ``tuned[j]``: fold ``j``'s tuning
    part has something to gain (else it is not searched, keeps today's
    setting, and its test block is left out of the pooled held-out figures);
    the last fold's has (:func:`_measurable`). ``current_frame``: today's
    setting on every query."""
    searched = [j for j in range(len(folds)) if tuned[j]]
    last = len(folds) - 1
    with _optuna_errors_only(), quiet_optuna(), catch_warnings():
        # trial 0 is today's setting, whose cut level may lie outside the
        # range the search draws from: Optuna takes it, with a warning that
        # would break the progress lines on stderr
        filterwarnings("ignore", message="Fixed parameter .* is out of range")
        studies = {j: optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=_fold_seed(spec.seed, j)))
            for j in searched}
        if space.in_space(space.own_params()):
            for s in studies.values():  # today's setting is trial 0 of each fold
                s.enqueue_trial(space.own_params())
        tune_reps = sorted({r for f in folds for r in f.tune_reps})
        records: dict[int, list[dict]] = {j: [] for j in searched}
        done = 0
        while done < spec.trials:
            n = min(spec.batch, spec.trials - done)
            asked, pols = [], {}
            for j, study in studies.items():
                for _ in range(n):
                    trial = study.ask()
                    params = space.sample(trial)
                    name = f"f{j}/t{trial.number}"
                    asked.append((j, trial, params, name))
                    pols[name] = space.policy(params)
            frame = replays.run(pols, tune_reps)
            for j, trial, params, name in asked:
                rows = _rows(frame[frame["policy"] == name], folds[j].tune, folds[j].tune_reps)
                value = utility_share(rows)  # finite: the fold has something to gain
                studies[j].tell(trial, value)
                records[j].append({"fold": folds[j].name, "number": trial.number,
                                   "tuning": value, "params": params, "name": name,
                                   "frame": frame[frame["policy"] == name]})
            done += n
            if progress is not None:
                best = max(r["tuning"] for r in records[last])
                progress(f"advise: {done}/{spec.trials} trials, best tuning utility_share "
                         f"{best:.3f}")
            if progress_fraction is not None:
                progress_fraction(done / spec.trials)

    # each searched fold's winner: the best tuning score (ties: the earlier trial)
    winners = {j: max(recs, key=lambda r: (r["tuning"], -r["number"]))
               for j, recs in records.items()}
    best = winners[last]
    rec_table = space.resolved(best["params"])
    now_table = _resolved(space.current.to_config(), space.current_candidates)

    # runner-ups: other distinct settings within noise of the best on the tuning queries
    fl = folds[last]
    tune_cur = _rows(current_frame, fl.tune, fl.tune_reps)
    ranked = sorted((r for r in records[last] if r is not best),
                    key=lambda r: (-r["tuning"], r["number"]))
    seen = {json.dumps(rec_table, sort_keys=True, default=str)}
    runner = []
    for r in ranked:
        if len(runner) >= spec.runner_ups:
            break
        table = space.resolved(r["params"])
        sig = json.dumps(table, sort_keys=True, default=str)
        if sig in seen:
            continue
        seen.add(sig)
        pair = pd.concat([_rows(best["frame"], fl.tune, fl.tune_reps).assign(policy="best"),
                          _rows(r["frame"], fl.tune, fl.tune_reps).assign(policy="other")])
        d = _paired(pair, "other", "best")["utility_share"]
        if _excludes_zero(d["low"], d["high"]):
            break  # ranked by tuning score: the rest are further from the best
        runner.append((r, table))

    # held-out replay: today's, every fold's winner, the stages, the runner-ups
    stage_tables = _stage_tables(now_table, rec_table)
    pols = {"current": space.current}
    for j, w in winners.items():
        pols[f"winner-{j}"] = space.policy(w["params"])
    for name, table in stage_tables:
        pols[f"stage:{name}"] = Policy.from_config(table, "advise")
    for i, (_, table) in enumerate(runner):
        pols[f"runner-up-{i}"] = Policy.from_config(table, "advise")
    test_reps = sorted({r for f in folds for r in f.test_reps})
    held = replays.run(pols, test_reps)

    # the pooled held-out comparison: each test block scored by its own fold's
    # winner; a fold that was not searched has none, and its block is left out
    # (what is left out depends on the tuning part only, never on a test score)
    cur_parts, rec_parts, fold_rows = [], [], []
    for j, f in enumerate(folds):
        c = _rows(held[held["policy"] == "current"], f.test, f.test_reps)
        row = {"fold": f.name, "n_tune": _count(f.tune, f.tune_reps, replays),
               "n_test": len(c), "current": utility_share(c), "tuned": tuned[j]}
        if not tuned[j]:  # kept today's setting
            fold_rows.append({**row, "winner": row["current"], "tuning": math.nan,
                              "changes": []})
            continue
        w = _rows(held[held["policy"] == f"winner-{j}"], f.test, f.test_reps)
        cur_parts.append(c)
        rec_parts.append(w.assign(policy="recommended"))
        fold_rows.append({**row, "winner": utility_share(w), "tuning": winners[j]["tuning"],
                          "changes": changes_between(
                              now_table, space.resolved(winners[j]["params"]))})
    pooled = pd.concat(cur_parts + rec_parts, ignore_index=True)
    heldout = _paired(pooled, "recommended", "current", REPORTED)
    u = heldout["utility_share"]

    # the stages, on the last fold's test queries
    test_last = _rows(held, fl.test, fl.test_reps)
    stages = []
    prev = "current"
    for name, _ in stage_tables:
        d = _paired(test_last, f"stage:{name}", prev)["utility_share"]
        stages.append({"stage": name, "share": d["recommended"], "gain": d["diff"],
                       "low": d["low"], "high": d["high"]})
        prev = f"stage:{name}"

    runner_ups = []
    for i, (r, table) in enumerate(runner):
        runner_ups.append({"tuning": r["tuning"], "changes": changes_between(now_table, table),
                           "heldout": utility_share(test_last[test_last["policy"]
                                                              == f"runner-up-{i}"]),
                           "policy": table})

    warnings = _side_effect_warnings(heldout)

    trials_rows = []
    for recs in records.values():
        for r in recs:
            trials_rows.append({"fold": r["fold"], "number": r["number"], "tuning": r["tuning"],
                                **{f"params.{k}": v for k, v in r["params"].items()}})
    return Advice(
        current=spec.current, changes=changes_between(now_table, rec_table),
        recommended=rec_table, heldout=heldout, gain=u["diff"], gain_low=u["low"],
        gain_high=u["high"], ci_over=u["over"], n_heldout=u["n"],
        significant=_significant(u),
        tuning={"current": utility_share(tune_cur), "recommended": best["tuning"]},
        stages=stages, runner_ups=runner_ups, folds=fold_rows, warnings=warnings,
        split=split_text, workload=_workload_text(exp, replays), trials=spec.trials,
        heldout_replicates=len(test_reps),
        heldout_fresh=not isinstance(exp.workload, StreamSource),
        trials_table=pd.DataFrame(trials_rows))


def _fold_seed(seed: int, j: int) -> int:
    """The seed of fold ``j``'s TPE sampler: the named child stream
    ``("advise", "tpe", j)`` of the experiment's (or ``advise.seed``'s)
    seed, 32 bits (numpy's legacy generator under Optuna takes no more), so
    that every seed ``memsim run`` accepts works and the folds draw apart."""
    return int(child_seq(seed_sequence(seed), "advise", "tpe", j).generate_state(1)[0])


def _side_effect_warnings(heldout: dict) -> list[str]:
    """A warning where a side effect is significant: harm rises, or recall
    of notes 90 days or older falls, with a 95% interval that excludes 0 on
    that side. Tokens used are reported, not warned on (the budget caps them)."""
    out = []
    harm = heldout.get("harm")
    if harm is not None and math.isfinite(harm["low"]) and harm["low"] > 0:
        out.append(f"raises harm by {_interval(harm['diff'], harm['low'], harm['high'])[1:]}")
    old = heldout.get(OLD_RECALL_COLUMN)
    if old is not None and math.isfinite(old["high"]) and old["high"] < 0:
        out.append("lowers recall of notes >= 90 days by "
                   + _interval(-old["diff"], old["low"], old["high"])[1:])
    return out


def _count(pairs: frozenset, reps: tuple, replays: _Replays) -> int:
    if pairs:
        return len(pairs)
    return sum(replays.stream(r).n_queries for r in reps)


def _stage_tables(now: dict, rec: dict) -> list[tuple[str, dict]]:
    """Today's table changed one stage at a time towards ``rec``, in the
    order of :data:`STAGES`; a stage that changes nothing is left out."""
    out = []
    table = copy.deepcopy(now)
    for stage in STAGES:
        nxt = copy.deepcopy(table)
        for slot in _STAGE_SLOTS[stage]:
            if slot == "packer.kind":
                nxt["packer"] = copy.deepcopy(rec["packer"])
                if rec["packer"]["kind"] in VALUE_PACKERS:  # the cut is the next stage
                    nxt["packer"]["min_relative_score"] = table["packer"].get(
                        "min_relative_score", 0.0)
                    nxt["packer"]["cut_on"] = table["packer"].get("cut_on", "score")
            elif slot == "packer.min_relative_score":
                nxt["packer"] = copy.deepcopy(rec["packer"])
            elif slot in rec:
                nxt[slot] = copy.deepcopy(rec[slot])
        if Policy.from_config(nxt, "advise").to_config() != Policy.from_config(
                table, "advise").to_config() or nxt.get("candidates") != table.get("candidates"):
            dropped = (stage == "packing" and table["packer"].get("min_relative_score", 0) > 0
                       and "min_relative_score" not in nxt["packer"])
            # a rank-order packer has no cut: moving to one drops it in this step
            out.append(("packing (drops the cut)" if dropped else stage, nxt))
        table = nxt
    return out


def _workload_text(exp: Experiment, replays: _Replays) -> str:
    s = replays.stream(0)
    budget = f"budget {replays.budget or exp.sim.budget_tokens} tokens"
    if replays.budget is None and _per_query_budgets(s):
        budget = (f"the log's per-query budgets ({exp.sim.budget_tokens} tokens where a query "
                  "has none)")
    if isinstance(exp.workload, StreamSource):
        what = exp.workload.importer or "stream"
        return (f"{exp.name} ({what} {Path(exp.workload.path).name}: {s.n_notes:,} notes, "
                f"{s.n_queries:,} queries), {budget}")
    return (f"{exp.name} (synthetic: ~{s.n_notes:,} notes, ~{s.n_queries:,} queries per "
            f"replicate), {budget}")


def _per_query_budgets(stream) -> bool:
    """Whether a stream's queries carry budgets of their own."""
    q = stream.queries
    return "budget_tokens" in q and bool(q["budget_tokens"].notna().any())


def print_progress(line: str) -> None:
    """The CLI's progress: one line per batch on stderr."""
    print(line, file=sys.stderr, flush=True)

