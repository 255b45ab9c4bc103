"""Recency curves of presets: multipliers by age, half-life, crossover age.

``memsim curves PRESET [--set K=V]`` prints :func:`format_curves` of
:func:`curves_table`. For each preset:

- ``rec_<A>d``: the recency multiplier of a fresh, never-used note (task tier,
  episodic, importance and salience 1) at age A days, as the preset's ranker
  sees it (its decay after stickiness, floored by ``min_weight`` for the
  ``feather-blend`` ranker; the ranker's own recency term where it keeps
  one, :meth:`Ranker.own_recency`, as agent-memory-server's freshness and
  novelty); 1 at every age when the ranker ignores recency;
- ``half_life_days``: the decay's half-life (:meth:`Decay.half_life`; for a
  ranker's own recency term, the age at which it falls to half its value
  at age 0; inf when the ranker ignores recency). For ``0.95 ** days``:
  13.5 days;
- ``crossover_days``: the oldest age at which a note of similarity ``s``
  still outranks a fresh note of similarity ``s - delta`` under the preset's
  whole scoring pipeline (computed numerically; inf if it always does; 0 if
  it never does; NaN for rankers whose score depends on the other
  candidates, such as ``weighted-sum``, ``random`` and ``oracle``);
- ``evict_after_days``: the age (since creation = last update = last use) at
  which the preset's retention sweep first evicts such a note (inf if never;
  NaN for retentions that do not depend on age alone
  (:meth:`Retention.by_age_alone`), such as ``capacity``, probabilistic
  forgetting and ``unused-cleanup``, which deletes every never-used note
  once any note of the store was used).

:func:`recency_curve` is the data behind a recency plot
(:func:`memsim.reporting.plots.recency_curve_data`). Every function here evaluates
resolved :class:`~memsim.policies.Policy` objects on an
:class:`~memsim.policies.ArrayContext` (any component at chosen ages, recall
counts, tiers and similarities, without a stream).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from memsim.core.errors import ConfigError
from memsim.core.params import apply_override, attribute_overrides, did_you_mean, split_key
from memsim.policies import ArrayContext, Policy, resolve_policy

__all__ = ["recency_curve", "curves_table", "format_curves", "crossover_age",
           "DEFAULT_AGES"]

DEFAULT_AGES = (0, 7, 30, 90, 180, 365, 730)

#: Upper end of the crossover search: beyond ~270 years, "always" (inf).
_MAX_AGE = 1e5


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------


def _check_policy_keys(presets: Sequence[str], overrides: dict[str, Any] | None) -> None:
    """Refuse a ``policies.NAME...`` override whose NAME is not one of
    ``presets``, as ``memsim run --set`` refuses a key into a policy the
    experiment does not have: it would change nothing."""
    for key in overrides or {}:
        parts = split_key(key)
        if parts[0] != "policies":
            continue
        if len(parts) < 2:
            raise ConfigError(f"--set {key}: give policies.PRESET.KEY (e.g. "
                              "policies.PRESET.decay.half_life_days; policies: "
                              f"{', '.join(presets)})")
        if parts[1] not in presets:
            raise ConfigError(f"--set {key}: no policy {parts[1]!r}"
                              f"{did_you_mean(parts[1], presets)} "
                              f"(policies: {', '.join(presets)})")


def _resolve(name: str, overrides: dict[str, Any] | None) -> Policy:
    # the preset as an experiment file's [policies.NAME] table: a policies.*
    # key sets it as it would there (a slot, a parameter, the whole table)
    tables: dict[str, Any] = {"policies": {name: {"preset": name}}}
    for key, value in (overrides or {}).items():
        parts = split_key(key)
        if parts[0] == "policies":  # policies.NAME...: only for that preset
            if parts[1] != name:
                continue  # another preset's (curves_table checked the names)
            _apply(tables, key, value, overrides)
            if not isinstance(tables["policies"][name], dict):
                raise ConfigError(f"--set {key}: expected a table (the preset's slots, as "
                                  f"in [policies.{name}]), got {value!r}")
        else:
            _apply(tables["policies"][name], key, value, overrides)
    try:
        return resolve_policy(tables["policies"][name], name)
    except ConfigError as exc:
        raise _from_set(exc, name, overrides or {}) from None


def _apply(table: dict, key: str, value: Any, overrides: dict[str, Any]) -> None:
    """:func:`apply_override`, its error (a key below a value: ``decay =
    "none"`` and ``decay.x``) ending in ``(from --set KEY=VALUE)``: the
    message names the key as the overrides spell it."""
    try:
        apply_override(table, key, value)
    except ConfigError as exc:
        raise attribute_overrides(exc, overrides) from None


def _from_set(exc: ConfigError, name: str, overrides: dict[str, Any]) -> ConfigError:
    """``exc`` (same type) with each message about a key that one of
    ``overrides`` set ending in ``(from --set KEY=VALUE)``, as the messages
    of ``memsim run`` end (:func:`memsim.core.params.attribute_overrides`).

    A message names preset ``name``'s key as ``NAME.KEY``, which an override
    sets as ``policies.NAME.KEY`` (this preset) or as ``KEY`` (every preset,
    which the message then also says)."""
    def provenance(message: str, given: dict[str, Any]) -> str:
        # what attribute_overrides appends to message: "" when no override set its key
        return attribute_overrides(type(exc)(message), given).errors[0][len(message):]

    own = {k: v for k, v in overrides.items() if k.startswith("policies.")}

    def tail(rest: str) -> str:
        said = provenance(f"policies.{name}.{rest}", own)
        if said:
            return said
        for key, value in overrides.items():
            if key not in own and (said := provenance(rest, {key: value})):
                return (f" ({key} applies to every preset; policies.PRESET.{key} to one "
                        f"only){said}")
        return ""

    prefix = f"{name}."
    return exc.with_messages([m + tail(m[len(prefix):]) if m.startswith(prefix) else m
                              for m in exc.errors])


def recency_curve(policy: Policy, ages, *, rng: np.random.Generator | None = None
                  ) -> np.ndarray:
    """Recency multiplier of a fresh, never-used note at each age, as the
    policy's ranker sees it.

    The note is in the task tier, episodic, of importance and salience 1, and
    its creation is its last update. The multiplier is the decay of the
    stickiness' effective age, plus the access term, floored by the ranker's
    :meth:`~memsim.policies.Ranker.recency_floor`; a ranker's own recency
    term where it keeps one (:meth:`~memsim.policies.Ranker.own_recency`);
    1 at every age when the ranker ignores recency.

    Parameters
    ----------
    policy : Policy
        A resolved policy.
    ages : array_like, shape (n,)
        Ages in days.
    rng : numpy.random.Generator, optional
        Stream for a randomised component (default: the context's own
        named stream).

    Returns
    -------
    ndarray, shape (n,)
    """
    ages = np.asarray(ages, dtype=np.float64).reshape(-1)
    ctx = ArrayContext(t=0.0, created_at=-ages, rng=rng)
    own = policy.ranker.own_recency(ctx)
    if own is not None:  # a ranker with a recency term of its own (agent-memory-server's)
        return np.asarray(own, dtype=np.float64).reshape(-1)
    if not policy.ranker.uses_recency:
        return np.ones(len(ages))
    age = policy.stickiness.effective_age(ctx.age(policy.decay.clock), ctx)
    rec = np.asarray(policy.decay.recency(age, ctx), dtype=np.float64)
    access = policy.stickiness.access_term(ctx)
    rec = rec + np.asarray(access) * np.asarray(policy.breadth.on_access(ctx))
    floor = policy.ranker.recency_floor()
    if floor is not None:
        rec = np.maximum(rec, floor)
    return rec[0]


def _pair_scores(policy: Policy, ages: np.ndarray, s: float, delta: float) -> tuple:
    """Scores of old notes (similarity s, the given ages) and of a fresh note
    (similarity s - delta, age 0), each pair scored on its own."""
    n = len(ages)
    created = np.concatenate([[0.0], -ages])
    sim = np.concatenate([[s - delta], np.full(n, s)])[None, :]
    ctx = ArrayContext(t=0.0, created_at=created, similarity=sim)
    score = np.asarray(policy.score(ctx), dtype=np.float64)[0]
    return score[1:], score[0]


def crossover_age(policy: Policy, s: float = 0.8, delta: float = 0.1) -> float:
    """The oldest age (days) at which a never-used note of similarity ``s``
    still outranks (strictly) a fresh one of similarity ``s - delta``.

    inf if it outranks at every age up to ~270 years, 0.0 if it never does,
    NaN for rankers whose scores depend on the other candidates
    (``set_dependent``). Assumes the score does not rise with age (true of
    every registered decay); found by a grid then bisection to 1e-9 days.
    """
    if policy.ranker.set_dependent:
        return math.nan

    def wins(ages: np.ndarray) -> np.ndarray:
        old, fresh = _pair_scores(policy, np.asarray(ages, dtype=np.float64), s, delta)
        return old > fresh

    return _last_age(wins)


def _evict_age(policy: Policy) -> float:
    """Age at which the retention sweep first evicts a fresh, never-used
    note whose creation is its last update and last use (NaN where that
    does not follow from the age alone)."""
    ret = policy.retention
    if not ret.evicts:
        return math.inf
    if not ret.by_age_alone():
        return math.nan

    def kept(ages: np.ndarray) -> np.ndarray:
        ctx = ArrayContext(t=np.array([0.0]), created_at=-np.asarray(ages, dtype=np.float64))
        return ~np.asarray(ret.evict(ctx), dtype=bool)

    return _first_age_not(kept)


def _half_life(policy: Policy) -> float:
    """The decay's half-life; for a ranker with a recency term of its own,
    the age at which that term of a fresh, never-used note falls to half its
    value at age 0; inf when the ranker ignores recency."""
    r = policy.ranker
    probe = ArrayContext(t=0.0, created_at=np.zeros(1))
    if r.own_recency(probe) is None:
        return float(policy.decay.half_life()) if r.uses_recency else math.inf
    at0 = float(recency_curve(policy, [0.0])[0])
    if not at0 > 0:
        return math.nan
    return _first_age_not(lambda ages: recency_curve(policy, ages) > at0 / 2)


def _last_age(holds) -> float:
    """The oldest age (days) up to :data:`_MAX_AGE` at which ``holds`` (a
    vectorised test of ages, true from age 0 up to some age and false
    after) is true: inf when it holds at every age, 0.0 when not at age 0;
    a grid, then bisection to 1e-9 days."""
    lo, _ = _bracket(holds)
    return lo


def _first_age_not(holds) -> float:
    """The youngest age at which ``holds`` (as :func:`_last_age`) is false:
    inf when it holds at every age, 0.0 when not at age 0."""
    return _bracket(holds)[1]


def _bracket(holds) -> tuple[float, float]:
    grid = np.concatenate([[0.0], np.geomspace(1e-6, _MAX_AGE, 400)])
    h = np.asarray(holds(grid), dtype=bool)
    if h[-1]:
        return math.inf, math.inf
    if not h[0]:
        return 0.0, 0.0
    last = int(np.flatnonzero(~h)[0]) - 1
    lo, hi = float(grid[last]), float(grid[last + 1])
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if holds(np.array([mid]))[0]:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(1.0, lo):
            break
    return lo, hi


def _age_label(a: float) -> str:
    return f"rec_{a:g}d"


def curves_table(presets: Sequence[str], ages: Sequence[float] = DEFAULT_AGES,
                 overrides: dict[str, Any] | None = None, s: float = 0.8,
                 delta: float = 0.1) -> pd.DataFrame:
    """One row per preset: recency multipliers at ``ages``, half-life,
    crossover age and eviction age (see the module docstring).

    Parameters
    ----------
    presets : list of str
        Preset names (:data:`memsim.policies.PRESETS`).
    ages : sequence of float
        Ages in days (>= 0).
    overrides : dict, optional
        Dotted keys relative to the policy table (``"decay.half_life_days":
        90``), applied to every preset, or ``"policies.NAME..."`` applied
        to preset NAME only, as in an experiment file's ``[policies.NAME]``
        (a parameter, a whole slot such as ``"policies.NAME.decay":
        "none"``, or the whole table).
    s, delta : float
        Similarity of the old note and the fresh note's deficit (``delta >
        0``; ``s`` and ``s - delta`` in [-1, 1], the range of a cosine).

    Raises
    ------
    ConfigError
        An unknown preset, an override that does not fit a preset, a
        ``policies.NAME`` key whose NAME is not one of ``presets``, or an
        ``s`` or ``delta`` out of range.
    """
    if isinstance(presets, str):
        presets = [presets]
    ages_arr = np.asarray(list(ages), dtype=np.float64)
    if ages_arr.size == 0 or not np.all(np.isfinite(ages_arr)) or np.any(ages_arr < 0):
        raise ConfigError(f"curves: ages must be finite and >= 0, got {list(ages)!r}")
    for label, v in (("s", s), ("delta", delta)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ConfigError(f"curves: {label} must be a finite number, got {v!r}")
    if delta <= 0:
        raise ConfigError(f"curves: delta must be > 0, got {delta!r}")
    # a retriever's similarity is a cosine, in [-1, 1]: a pair outside it is
    # no note a store could hold, and its crossover age would mean nothing
    if not (s <= 1.0 and s - delta >= -1.0):
        raise ConfigError(f"curves: s and s - delta must be similarities in [-1, 1], got "
                          f"s = {s!r}, s - delta = {s - delta:g}")
    _check_policy_keys(presets, overrides)
    rows = []
    for name in presets:
        policy = _resolve(name, overrides)
        rec = recency_curve(policy, ages_arr)
        row: dict[str, Any] = {"preset": name, "decay": policy.decay.name,
                               "ranker": policy.ranker.name}
        for a, r in zip(ages_arr, rec):
            row[_age_label(a)] = float(r)
        row["half_life_days"] = _half_life(policy)
        row["crossover_days"] = crossover_age(policy, s, delta)
        row["evict_after_days"] = _evict_age(policy)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update({"s": s, "delta": delta, "ages": [float(a) for a in ages_arr]})
    return df


def _fmt_days(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "never" if x > 0 else "-inf"
    # a day to a tenth, up to a million years (beyond: 4 significant digits,
    # not hundreds of digits); below a tenth, 3 significant digits, so that
    # minutes (a 9-minute half-life) do not read as 0
    if 0 < abs(x) < 0.1:
        return f"{x:.3g}"
    return f"{x:.1f}" if abs(x) < 1e8 else f"{x:.4g}"


def _fmt_mult(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    if x == 0 or (abs(x) >= 1e-3):
        return f"{x:.3f}"
    return f"{x:.1e}"


def format_curves(df: pd.DataFrame) -> str:
    """A plain-text table of :func:`curves_table`'s frame, with a legend."""
    rec_cols = [c for c in df.columns if c.startswith("rec_")]
    header = ["preset"] + [c[4:] for c in rec_cols] + ["half-life", "crossover", "evicted at"]
    body = []
    for _, row in df.iterrows():
        half = row["half_life_days"]
        body.append([str(row["preset"])] + [_fmt_mult(float(row[c])) for c in rec_cols]
                    + ["none" if math.isinf(half) else _fmt_days(float(half)),
                       "always" if math.isinf(row["crossover_days"])
                       else _fmt_days(float(row["crossover_days"])),
                       _fmt_days(float(row["evict_after_days"]))])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in body:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    s = df.attrs.get("s", 0.8)
    delta = df.attrs.get("delta", 0.1)
    lines += [
        "",
        "Columns: recency multiplier of a fresh, never-used note at each age (days);",
        "half-life in days; crossover = oldest age (days) at which a note of similarity "
        f"{s:g} still outranks a fresh note of similarity {s - delta:g} "
        f"('always': at every age up to {_MAX_AGE:g} days, about 270 years; 0: at no age; "
        "n/a: the ranker scores relative to other candidates);",
        "evicted at = age (days, no update or use) at which the retention sweep evicts "
        "such a note ('never', or n/a when it does not depend on age alone).",
    ]
    return "\n".join(lines)
