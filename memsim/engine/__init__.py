"""The simulation engine: replays a stream through policies, tick by tick.

Read :mod:`memsim.engine.loop` first (the loop), then
:mod:`memsim.engine.reference` (the executable specification: every live
note scored, nothing accelerated). The package, a module per noun:

============== ==============================================================
loop           :func:`simulate`: organic uses, retention sweeps, a batch's
               similarity, the arms, their feedback
reference      the same replay, plainly: what every accelerator must equal
settings       :class:`SimSettings` (with :data:`ACCELERATORS`), :class:`Arm`
state          :class:`NoteArrays` (the notes), :class:`PolicyState` (an arm's)
batch          :class:`Batch`: queries scored together, their product blocks
context        :class:`BatchContext` (and gathered cells): what components read
inputs         the stream encoded as arrays
arms           an arm's work on a batch; arms packed and measured together
scoring        an arm's context, its top C (through the accelerators) and packing
uses           the uses an arm's answers make
frames         :class:`SimResult` and its frames
cache          :class:`ReplayCache`
topc           :func:`top_candidates`
cells          the similarity levels and gathered cells the accelerators share
prefilter      accelerator ``"prefilter"`` (a retriever's prefilter, a ranker's own
               candidates)
pruning        accelerator ``"prune"``
simfilter      accelerator ``"filter"``
stacking       accelerator ``"stack"``
walk           accelerator ``"walk"``
minmax         accelerator ``"minmax"`` (Generative Agents' min-max-normalised sum)
============== ==============================================================

Each accelerator is exact (its contract: the same top C and the same values
as the reference, hence the same frames) and can be turned off through
the ``accelerators`` argument of :func:`simulate`; ``tests/test_accelerators.py`` runs each
against the reference for every registered component.

The engine owns the loop; policies only answer narrow questions (see
:mod:`memsim.policies.base`). For one stream and several *arms* (a policy at a
budget), time advances over batches of queries:

1. organic accesses that happened before the batch are applied as uses;
2. a retention sweep runs for every arm when one is due;
3. the similarity of the batch's queries to every existing note is one
   matrix product in fixed blocks of columns (:data:`PRODUCT_BLOCK`), shared
   by all arms; the notes every arm has evicted are not multiplied;
4. for each arm: score -> top-C candidates (ties by lower ``note_id``) ->
   pack into the budget -> order -> per-query metrics;
5. feedback: the notes each query used gain a recall (after the batch by
   default: ``feedback_mode = "per-tick"``; after each query with
   ``"per-query"``, which is exact and slower).

Everything is vectorised over notes; the only Python loops run over batches,
arms and (inside packers) candidate ranks.

**Pruning.** A policy whose components declare bounds (``Ranker.score_bound``,
``Decay.upper_bound``, ``Stickiness.access_term_bound``,
``Breadth.access_factor_bound``, ``Breadth.score_factor_bound``; see
:mod:`memsim.policies.base`) is not scored on every live note. Per query, the
notes whose similarity is above a threshold ``tau`` are scored (the
thresholds and the notes above them are computed once per batch and shared by
every arm), and the query is done when its C-th best score is strictly above
the ranker's bound at ``tau``: no note left out can then enter, or tie into,
the top C. Otherwise ``tau`` is lowered (about 4x more notes) until it holds
or every note is scored. When the ranker declares ``similarity_needed``, the
recency is one exponential of a clock and the levels the batch's first scan
holds do not prove the top C, a level's C-th best score is a score the top
C reaches, so only the notes whose similarity reaches the ranker's
``similarity_needed`` at it and at the highest recency of their block of
columns can be in it (or tie); those alone are scored
(:func:`_filtered_top`), whatever the half-life and floor. Arms that differ
only by their decay's floor and rate (a sweep's trials) go through these
two steps as one array, a row per (arm, query) (:func:`_stacked_tops`).
The levels hold only the notes some arm can see: a
note every arm has evicted is in none (retention sweeps run between
batches), and an arm whose retention evicted most of a level scores only
its own live cells of it. Scores of the notes scored are the same floats as
full scoring gives (the notes' columns are kept in ``note_id`` order, so ties
still go to the lower ``note_id``), so rankings, packing, metrics and
feedback are identical bit for bit (``"prune"`` and ``"filter"`` in
the ``accelerators`` of :func:`simulate`; ``"stack"`` for arms as one array). A
retriever's prefilter (its M nearest notes per query, an exact search
through the same levels) hands its cells on, and an arm scores those alone.
Everything that reads more than the top C (set-dependent rankers, rankers
that choose their candidates, the oracle) is scored in full.

**Arms together.** The per-tick arms of a batch are scored one by one, then
packed (those with the same packer, orderer and C) and measured as one
array, a row per (arm, query): packers, orderers and metrics treat rows
independently, so every value is the one the arm gets alone, for the cost
of one call instead of one per arm.

**Replays of one stream.** A sweep replays the same replicate streams once
per batch of trials. A :class:`ReplayCache` passed to :func:`simulate` keeps
what does not depend on the arms (the stream's arrays, each batch with its
similarity and levels) for the next replay of the same stream object, up to
a budget of bytes; values built on the notes every arm evicted are rebuilt
when those differ, so the results are those of a replay without it.

**Per-query feedback.** An arm whose uses take effect before the next query
(:func:`feedback_timing`) still shares its tick's similarity product and is
scored once on the state at the tick's start. The uses its queries make with
those answers (and the organic uses before each query's time) are a guess at
what each query sees: every query is corrected at once, the notes used
before it rescored on the state they have at its time (what-if copies of
their state, not the arm's) and merged into its top C, and packed again. A
query whose own uses change makes the guess wrong only for the later queries
that see the notes concerned; it is made again from the first of them, so a
tick costs a few array passes, not a loop over its queries. The merge is
exact when the query's C-th candidate ranks at or above the C-th of the
tick's scoring (no note left alone can then enter); otherwise the query is
scored again in full on the state at its time. A policy whose scores read no
use (``Policy.reads_uses()``) has nothing to rescore; a set-dependent
ranker, one that chooses its own candidates, or a use before scoring is
scored query by query. A recency cell's value depends on its own query time,
note and the tick's end alone (:func:`separable_recency`), so the
corrected tick gives the same floats as scoring each query alone (the
``"walk"`` accelerator off, and the reference), and retention sweeps and store
rows stay at tick starts.
"""

from .batch import PRODUCT_BLOCK, Batch
from .cache import ReplayCache
from .context import BatchContext
from .frames import NO_PREFILTER_OVERLAP, SimResult
from .loop import simulate
from .settings import ACCELERATORS, Arm, SimSettings, feedback_timing, resolve_budget, with_timing
from .state import NoteArrays, PolicyState
from .topc import top_candidates

__all__ = ["SimSettings", "Arm", "simulate", "SimResult", "NoteArrays", "PolicyState",
           "Batch", "BatchContext", "top_candidates", "resolve_budget", "feedback_timing",
           "with_timing", "ReplayCache", "PRODUCT_BLOCK", "ACCELERATORS", "NO_PREFILTER_OVERLAP"]
