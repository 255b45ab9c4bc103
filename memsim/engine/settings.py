"""Engine settings and arms: what an experiment hands the engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from memsim.core.errors import ParameterError
from memsim.core.params import Interval, Options, Validated
from memsim.policies import Policy


#: The engine's accelerators, each in a module of its own, each exact (its
#: contract: the same top C and the same values as the reference,
#: :func:`memsim.engine.reference.simulate`):
#:
#: - ``"prefilter"``: a retriever prefilter's nearest M found through the
#:   similarity levels, and only its cells scored (:mod:`.prefilter`);
#: - ``"prune"``: a query's top C found on the notes above a similarity
#:   threshold, proven by the ranker's bound (:mod:`.pruning`);
#: - ``"filter"``: within ``"prune"``, only the notes whose similarity can
#:   reach a query's C-th score are scored (:mod:`.simfilter`);
#: - ``"stack"``: arms that differ only by their decay's floor and rate
#:   scored as one array (:mod:`.stacking`);
#: - ``"walk"``: per-query feedback corrected from one scoring of the tick
#:   (:mod:`.walk`);
#: - ``"minmax"``: a min-max-normalised sum's top C (Generative Agents')
#:   found on the notes whose bound reaches it (:mod:`.minmax`).
ACCELERATORS = ("prefilter", "prune", "filter", "stack", "walk", "minmax")


def usable_accelerators(policy: Policy, accelerators: tuple[str, ...]) -> tuple[str, ...]:
    """The accelerators that may answer ``policy``'s queries: none for a
    policy that keeps per-note state (:meth:`Policy.keeps_note_state`),
    which every retrieval call changes for every note it searched: no
    accelerator models it, so the loop scores every live note, query by
    query under per-query feedback, as the reference does."""
    return () if policy.keeps_note_state() else accelerators


def check_accelerators(accelerators: tuple[str, ...], walk_window: int) -> None:
    """Refuse names not in :data:`ACCELERATORS` (or repeated) and a walk
    window below 1, in the uniform parameter message."""
    if not (isinstance(accelerators, tuple) and len(set(accelerators)) == len(accelerators)
            and all(isinstance(a, str) and a in ACCELERATORS for a in accelerators)):
        raise ParameterError(
            "The 'accelerators' parameter of simulate must be a tuple of distinct names "
            f"among {', '.join(repr(a) for a in ACCELERATORS)}. Got {accelerators!r} instead.")
    if not Interval(1, None, integer=True).check(walk_window):
        raise ParameterError("The 'walk_window' parameter of simulate must be an int >= 1. "
                             f"Got {walk_window!r} instead.")


#: (query, note) cells of one batch, about, at most, when every arm can take
#: a tick in parts (:attr:`SimSettings.max_tick_cells`, :func:`splits_ticks`)
MAX_TICK_CELLS = 100_000_000


@dataclass(frozen=True, kw_only=True)
class SimSettings(Validated):
    """Engine settings shared by every arm of an experiment.

    Parameters
    ----------
    budget_tokens : int
        Token budget of each context (Hivemind's default: 1,500). A stream's
        per-query ``budget_tokens`` column overrides it.
    candidates : int
        Default top-C: packers work on the C best-scored notes.
    tick_days : float
        Length of a tick; all queries of a tick are scored with one matrix
        product and (in per-tick mode) see the same state.
    feedback_mode : {"per-tick", "per-query"}
        When uses are applied, for policies whose ``feedback.timing`` is
        "experiment": after each tick, or before the next query (exact; the
        presets of real systems set it themselves).
    retention_period_days : float
        Period of the retention sweeps.
    save_rankings : {False, True, "hidden"}
        Keep every query's top-C ranking (``rankings.parquet``), with the
        columns ``oracle`` (the oracle packs the note) and ``hidden`` (why an
        oracle note was not packed: ``"budget"`` within the top C, else
        ``""``). ``"hidden"`` also adds a row (``rank`` -1, ``score`` NaN) for
        each note the oracle packs that is not among the top C, with its
        reason (``"age"``, ``"cut"``, ``"evicted"``, ``"invalid"``;
        :mod:`memsim.evaluation.metrics`).
    max_tick_cells : int
        A tick whose queries times its notes exceed this is replayed in
        parts of consecutive queries (at least 2 each), so that a batch's
        (queries x notes) matrices stay near this many cells
        (:func:`memsim.engine.batch.replay_batches`): the memory of a
        replay of millions of notes, at some CPU (each part multiplies every
        note again). Each query is answered on the state it has either way
        (at its time with per-query feedback; at its tick's start with
        per-tick feedback, the tick's uses recorded after its last part), so
        the frames are the same but for a ``random`` ranker's draws, which
        are per batch cell. Ticks stay whole when a policy cannot take them
        in parts (:func:`splits_ticks`). Default
        :data:`MAX_TICK_CELLS` (10**8: about 0.6 GiB for a policy scored
        on the notes above a similarity level, 2 GiB for one that scores
        every note).
    """

    budget_tokens: int = 1500
    candidates: int = 50
    tick_days: float = 1.0
    feedback_mode: str = "per-tick"
    retention_period_days: float = 1.0
    save_rankings: bool = False
    max_tick_cells: int = MAX_TICK_CELLS

    _constraints = {
        "budget_tokens": Interval(1, None, integer=True),
        "candidates": Interval(1, None, integer=True),
        "tick_days": Interval(0, None, closed="neither"),
        "feedback_mode": Options(("per-tick", "per-query")),
        "retention_period_days": Interval(0, None, closed="neither"),
        "save_rankings": Options((True, False, "hidden")),
        "max_tick_cells": Interval(1, 2**62, integer=True),
    }


@dataclass(frozen=True)
class Arm:
    """One simulated arm: a named policy at a budget (``None`` = the default).

    ``stream_name`` names the arm's random stream (default: ``policy_name``):
    a sweep that simulates several trials of one policy as arms of one replay
    gives each the stream the policy would have alone, so its values are
    those of a replay of its own.
    """

    policy_name: str
    policy: Policy
    budget: int | None = None
    stream_name: str | None = None


def resolve_budget(arm: Arm, settings: SimSettings, stream_budget: np.ndarray | None = None,
                   *, per_query: bool = False):
    """The token budget of an arm: the one place that resolves it.

    Parameters
    ----------
    arm : Arm
    settings : SimSettings
    stream_budget : ndarray of float, shape (Q,), optional
        The stream's per-query ``budget_tokens`` column (NaN where unset).

    Returns
    -------
    int or ndarray of int64
        Without ``stream_budget``: the arm's budget label in the result
        frames, ``arm.budget`` or else ``settings.budget_tokens``; 0 when the
        arm sets none and the stream gives queries budgets of their own
        (``per_query``): each query's budget is then in the ``budget_tokens``
        column, and no single label would be true. With it: the
        budget (Q,) of each query: ``arm.budget`` when the arm sets one (it
        overrides the stream), else the stream's value, else
        ``settings.budget_tokens``.
    """
    if stream_budget is None:
        if arm.budget is None and per_query:
            return 0
        return arm.budget or settings.budget_tokens
    if arm.budget is not None:
        return np.full(len(stream_budget), arm.budget, dtype=np.int64)
    return np.where(np.isnan(stream_budget), settings.budget_tokens,
                    stream_budget).astype(np.int64)


def feedback_timing(policy: Policy, settings: SimSettings) -> str:
    """When a policy's uses take effect: its feedback's ``timing``, or the
    experiment's ``feedback_mode`` when the policy leaves it to the experiment."""
    timing = policy.feedback.timing
    return settings.feedback_mode if timing == "experiment" else timing


def splits_ticks(policy: Policy, settings: SimSettings) -> bool:
    """Whether a replay may take a tick in parts for ``policy``
    (:attr:`SimSettings.max_tick_cells`): each query is answered on the
    state at its own time (per-query feedback), or on its tick's start
    with the tick's uses recorded after its last query (per-tick), whichever
    part it is in. Not when the ranker keeps per-note columns (updated from
    a whole retrieval call's context) or the uses of a per-tick policy come
    before scoring (the whole tick's prefilter)."""
    if feedback_timing(policy, settings) == "per-query":
        return True
    return not policy.keeps_note_state() and not policy.feedback.touches_before_scoring


def with_timing(policy: Policy, timing: str) -> Policy:
    """``policy`` with its uses taking effect ``timing`` (its feedback's
    ``timing``): the engine checks compare both modes of one preset."""
    return dataclasses.replace(policy, feedback=dataclasses.replace(policy.feedback,
                                                                    timing=timing))
