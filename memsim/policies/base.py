"""Component base classes, the registry, and the composed :class:`Policy`.

A policy is a composition of small frozen components, each answering one
narrow question for the engine (Gymnasium's pattern: the engine owns the loop):

========== ==============================================================
slot       question
========== ==============================================================
retriever  how similar is each live note to the query? (and which notes
           are candidates at all: an optional nearest-M prefilter)
decay      how much is a note's age worth? (recency multiplier)
stickiness how does use slow ageing? (effective age, additive access term)
breadth    how much do many distinct actors count?
ranker     how are relevance, recency and importance combined into a score?
retention  which notes does a periodic sweep evict?
packer     which of the top-C candidates go into the token budget?
orderer    in which order are the packed notes placed in the context?
feedback   which notes count as used after a query, and what does use do?
========== ==============================================================

The score of note *i* for query *q* is computed in this fixed order::

    rel   = retriever.similarity(ctx)                       # (Q, L)
    age   = stickiness.effective_age(ctx.age(decay.clock), ctx)
    rec   = decay.recency(age, ctx)
    rec  += stickiness.access_term(ctx) * breadth.on_access(ctx)
    score = ranker.combine(rel, rec, ctx) * breadth.on_score(ctx)

Every component is registered under ``(slot, name)`` in :data:`REGISTRY`.
Components read only the :class:`~memsim.policies.context.ScoringContext`
protocol, never the engine. What the engine may ask of a component beyond
its slot's method is a declared capability on the slot's base class, never a
name: ``Ranker.uses_recency``, ``Ranker.uses_similarity``, ``Ranker.set_dependent``,
``Ranker.sets_read_uses``, ``Ranker.needs_truth``, ``Ranker.needs_planted``,
``Ranker.needs_logged``,
``Ranker.note_columns`` (per-note state, set by ``Ranker.update_note_state``),
``Ranker.recency_floor()``, ``Ranker.candidate_mask()``,
``Retriever.prefilter_mask()``, ``Retention.evicts``, ``Retention.invalidates``,
``Decay.exponential_form()`` and ``Decay.lower_bound()`` (the two methods
return None for "not available").

Bounds that let the engine find a policy's exact top C without scoring every
live note (see :mod:`memsim.engine`, "pruning") are declared the same way,
each None (or unavailable) by default, which keeps the engine on full
scoring: ``Decay.upper_bound()``, ``Stickiness.access_term_bound(ctx)``,
``Breadth.access_factor_bound(ctx)``, ``Breadth.score_factor_bound(ctx)`` and
``Ranker.score_bound(rel, rec_lo, rec_hi, ctx)``; with its inverse
``Ranker.similarity_needed(score, rec_lo, rec_hi, ctx)`` and a decay of one
exponential (``Decay.exponential_form``), the engine keeps only the notes
whose similarity can reach a query's C-th best score. A component that declares
one must also be *elementwise*: the value for a (query, note) cell depends
only on that cell's and that note's inputs, so that the engine may score any
subset of cells (note vectors then arrive with the cells' shape).

What a slot's method returns is checked wherever it returns (each class's
own ``similarity``, ``recency``, ``combine``, ``evict``, ``pack`` and
``order`` is wrapped when the class is defined): the shape and dtype its
slot documents, a packer's budget and an orderer's permutation (memsim's
own packers and orderers are held to those two by the test suite, and
spared them on the hot path). A mistake raises :class:`ComponentOutputError`
(a :class:`ConfigError`) naming the component, what was expected and what
came back; an exception a method raises gets a note naming the component.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from memsim.core.errors import ConfigError
from memsim.core.params import Interval, Options, Validated, describe_constraint, did_you_mean, fields_of
from .context import MEMORY_TYPE_CODES, TIER_CODES, ArrayContext, ScoringContext

__all__ = [
    "SLOTS",
    "REGISTRY",
    "register",
    "Component",
    "ComponentOutputError",
    "Retriever",
    "Decay",
    "Stickiness",
    "Breadth",
    "Ranker",
    "Retention",
    "Packer",
    "Orderer",
    "Feedback",
    "Policy",
    "ScoringContext",
    "ArrayContext",
    "build_component",
    "build_from_spec",
    "construct",
    "TIER_CODES",
    "MEMORY_TYPE_CODES",
]

SLOTS = (
    "retriever", "decay", "stickiness", "breadth", "ranker",
    "retention", "packer", "orderer", "feedback",
)

#: slot -> registry name -> component class
REGISTRY: dict[str, dict[str, type[Component]]] = {slot: {} for slot in SLOTS}


def register(cls: type[Component]) -> type[Component]:
    """Class decorator: add a component class to :data:`REGISTRY`.

    A class of the same module and qualified name as the one registered
    under its ``(slot, name)`` replaces it: the same definition run again
    (a notebook cell re-run after an edit, a reloaded module). Any other
    class under a taken name is refused, with the class that holds it.

    Raises
    ------
    RuntimeError
        ``(slot, name)`` is held by another class.
    """
    slot, name = cls.slot, getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        # (a component is chosen by its name: one without could only be
        # listed, and chosen, as "")
        raise RuntimeError(f"cannot register {_where(cls)}: it has no name; give it one "
                           "(name: ClassVar[str] = \"my-decay\")")
    if slot not in REGISTRY:
        REGISTRY[slot] = {}
    held = REGISTRY[slot].get(name)
    if held is not None and held is not cls and _where(held) != _where(cls):
        raise RuntimeError(
            f"duplicate registration {slot}:{name}: the name is held by {_where(held)}; "
            f"register {_where(cls)} under another name (name: ClassVar[str] = ...)")
    REGISTRY[slot][name] = cls
    return cls


def _where(cls: type) -> str:
    """``module.QualifiedName`` of a class: what identifies a definition
    across a re-run of it."""
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, kw_only=True)
class Component(Validated, abc.ABC):
    """Base of every pluggable part. Subclasses set ``slot`` and ``name``.

    A slot's base class marks the method a component must provide as
    abstract, so that a class missing it fails at construction.
    """

    slot: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_outputs_of(cls)

    def to_config(self) -> dict[str, Any]:
        """``{"kind": name, **params}``: the resolved TOML table of this part."""
        return {"kind": self.name, **self.params()}

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str]]:
        """(parameter, default, allowed) for each parameter."""
        cons = cls._all_constraints()
        out = []
        for name, f in fields_of(cls).items():
            default = f.default if f.default is not dataclasses.MISSING else None
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            out.append((name, default, describe_constraint(cons[name]) if name in cons
                        else _kind_text(default)))
        return out


def _kind_text(default: Any) -> str:
    """What an unconstrained parameter takes, read from its default's type."""
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, (list, tuple)):
        return "a list"
    if isinstance(default, dict):
        return "a table"
    return "any value"


def construct(cls: type, params: Mapping[str, Any], *, what: str, where: str,
              key_names_param: bool = False) -> Any:
    """Build ``cls(**params)`` from a config table, with one-line errors.

    The routine shared by every config-built object (components, readers).

    Parameters
    ----------
    cls : type
        A validated frozen dataclass.
    params : mapping
        Its parameters (no ``kind``).
    what : str
        How errors call the object, e.g. ``"decay 'half-life'"``.
    where : str
        The dotted key of the table, put in front of every message.
    key_names_param : bool
        Put the offending parameter in the key of a refused value
        (``reader.depth: The 'depth' parameter ...``) instead of the table's
        key alone (``policies.p.decay: The 'half_life_days' parameter ...``).

    Raises
    ------
    ConfigError
        An unknown parameter (with a suggestion), a value the class refuses
        (its :class:`~memsim.core.errors.ParameterError` keeps its type), or a
        wrong type the dataclass itself refused.
    """
    allowed = fields_of(cls)
    for key in params:
        if key not in allowed:
            raise ConfigError(
                f"{where}.{key}: unknown parameter of {what}{did_you_mean(key, allowed)}"
                f"; allowed: {', '.join(allowed) or '(none)'}"
            )
    try:
        return cls(**params)
    except ConfigError as exc:
        bad = next((k for k in params if f"'{k}' parameter" in str(exc)), None)
        prefix = f"{where}.{bad}" if key_names_param and bad else where
        raise type(exc)(f"{prefix}: {exc}") from None
    except TypeError as exc:  # wrong type that the dataclass itself refused
        raise ConfigError(f"{where}: {exc}") from None


def build_from_spec(spec: Any, registry: Mapping[str, type], *, what: str, where: str,
                    base: type | None = None, default_kind: str | None = None,
                    key_names_param: bool = False) -> Any:
    """Build an object of a registry from a config value.

    ``spec`` is a kind name (``"skip-fill"``), a table with ``kind`` and
    parameters, an already built object (an instance of ``base``), or None
    when ``default_kind`` is given. ``what`` names the registry in errors
    (``"packer"``); ``where`` is the dotted key. See :func:`construct`.
    """
    if base is not None and isinstance(spec, base):
        return spec
    if spec is None and default_kind is not None:
        spec = {}
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a {what} name or a table with 'kind', got {spec!r}")
    kind = spec.get("kind", default_kind)
    if not isinstance(kind, str) or kind not in registry:
        raise ConfigError(
            f"{where}.kind: unknown {what} {kind!r}{did_you_mean(str(kind), registry)}; "
            f"allowed: {', '.join(sorted(registry))}"
        )
    params = {k: v for k, v in spec.items() if k != "kind"}
    return construct(registry[kind], params, what=f"{what} {kind!r}", where=where,
                     key_names_param=key_names_param)


def build_component(slot: str, spec: Any, where: str) -> Component:
    """Build a component from a config value.

    ``spec`` is a registry name (``"skip-fill"``), a table with ``kind`` and
    parameters, or an already built component. ``where`` is the dotted key used
    in error messages. The installed packages' components (entry points
    ``memsim.components``) are loaded the first time a name is not found.
    """
    kind = spec if isinstance(spec, str) else spec.get("kind") if isinstance(spec, dict) else None
    # a kind that is not a string (a list, a table) is refused by build_from_spec
    broken: list[str] = []
    if isinstance(kind, str) and kind not in REGISTRY.get(slot, {}):
        from .plugins import load_entry_points  # here: plugins imports this module

        broken = load_entry_points()
    try:
        return build_from_spec(spec, REGISTRY.get(slot, {}), what=slot, where=where,
                               base=Component)
    except ConfigError as exc:
        if not broken or kind in REGISTRY.get(slot, {}):
            raise
        # the name is unknown, and a package that failed to load may hold it
        raise type(exc)(f"{exc}; it may be in a package whose components could not be "
                        f"loaded: {'; '.join(broken)}") from None


# --------------------------------------------------------------------------
# The outputs of a slot's method, checked where any caller gets them
# --------------------------------------------------------------------------


class ComponentOutputError(ConfigError):
    """A component's method returned what its slot's contract refuses: a
    wrong shape or dtype, a packer over the budget, an orderer's positions
    that are no permutation.

    Raised where the method returns, whoever called it (the engine, the
    checker, a notebook), naming the component (slot, registered name,
    class), what was expected and what came back, instead of a traceback
    deep in the engine or a silently wrong result.

    Attributes
    ----------
    check : str
        What failed: the method's name (``"recency"``, ``"combine"``...),
        ``"budget"``, ``"candidate subset"`` or ``"permutation"``.
    detail : str
        The message without the component's name.
    """

    def __init__(self, *args: Any, errors: list[str] | None = None, check: str = "",
                 detail: str = "") -> None:
        super().__init__(*args, errors=errors)
        self.check = check
        self.detail = detail


def _output_error(comp: Component, check: str, detail: str) -> ComponentOutputError:
    cls = type(comp)
    return ComponentOutputError(f"{cls.slot} {cls.name!r} ({cls.__qualname__}): {detail}",
                                check=check, detail=detail)


def _cells_shape(ctx: Any) -> tuple[int, ...] | None:
    """The shape of a context's matrices: (Q, L), or the (R, W) of gathered
    cells (``idx`` a matrix); None for an object that is no context."""
    try:
        idx, t = ctx.idx, ctx.t
        return tuple(np.shape(idx)) if np.ndim(idx) == 2 else (len(t), len(idx))
    except Exception:  # noqa: BLE001 - no context: nothing to check against
        return None


def _gathered(ctx: Any) -> bool:
    """Whether ``ctx`` holds gathered cells (``idx`` an (R, W) matrix): the
    engine's pruned, prefiltered and per-query scoring, which scores a
    policy whose output has another shape there by whole rows instead."""
    return np.ndim(getattr(ctx, "idx", None)) == 2


#: The shape rule of gathered cells, in the notes added to a component's error.
GATHERED_RULE = ("the context held gathered cells: ctx.idx and every note vector "
                 "(importance, tokens, recalls, tier, ...) are (R, W) arrays shaped like the "
                 "similarity; use elementwise operations and broadcasting, never reshape or "
                 "index a note vector as 1-D")

_KIND_TEXT = {"f": "a float array", "b": "a bool array", "i": "an int64 array"}
_DTYPE_TEXT = {"f": " (float64 or float32)", "b": "", "i": ""}


def _as_output(comp: Component, method: str, out: Any,
               shapes: tuple[tuple[int, ...], ...] | None, kind: str, why: str,
               hint: str = "") -> np.ndarray:
    """``out`` as an array whose shape is one of ``shapes`` (any shape when
    None) and whose dtype kind is ``kind`` (``"i"``: int64 exactly); else
    a :class:`ComponentOutputError` saying what was expected (``why``: the
    shape's origin) and what came back. One comparison of the shape and one
    of the dtype: no pass over the values."""
    want = _KIND_TEXT[kind] + (f" of shape {shapes[0]} ({why})" if shapes else "")
    if out is None:
        raise _output_error(comp, method, f"{method}() returned None, expected {want}: "
                                          "a missing return?")
    try:
        arr = np.asarray(out)
    except Exception as exc:  # noqa: BLE001 - anything that is no array
        raise _output_error(comp, method, f"{method}() returned {type(out).__name__}, "
                                          f"expected {want} ({exc})") from None
    if shapes and arr.shape not in shapes:
        raise _output_error(comp, method, f"{method}() returned shape {arr.shape}, expected "
                                          f"{shapes[0]} ({why})")
    if not (arr.dtype == np.int64 if kind == "i" else arr.dtype.kind == kind):
        raise _output_error(comp, method, f"{method}() returned dtype {arr.dtype}, expected "
                                          f"{_KIND_TEXT[kind]}{_DTYPE_TEXT[kind]}{hint}")
    return arr


def _arg(args: tuple, kwargs: Mapping[str, Any], i: int, name: str) -> Any:
    """The argument ``i`` (``name``) of a call, None when not given."""
    return args[i] if len(args) > i else kwargs.get(name)


def _args(args: tuple, kwargs: Mapping[str, Any], *names: str) -> tuple:
    """The first arguments of a call, by position or name (None when not given)."""
    if len(args) >= len(names):
        return args[:len(names)]
    return tuple(_arg(args, kwargs, i, k) for i, k in enumerate(names))


# On gathered cells the engine scores a policy whose output has another
# shape by whole rows (its designed fallback): there only the dtype is
# checked, and a crash gets the shape rule as a note (_note_component).


def _built_in(comp: Component) -> bool:
    """Whether a component is one of memsim's own classes. Their packers'
    budgets and orderers' permutations are held by the test suite (the
    checker runs over the registry), so the hot path spares them the value
    checks; their shapes and dtypes are checked as any component's."""
    return type(comp).__module__.startswith("memsim.")


def _checked_similarity(comp, out, args, kwargs):
    ctx = _arg(args, kwargs, 0, "ctx")
    idx = getattr(ctx, "idx", None)
    if (type(out) is np.ndarray and out.dtype.kind == "f" and type(idx) is np.ndarray
            and idx.ndim == 1 and out.shape == (len(ctx.t), len(idx))):
        return out  # the common case: (Q, L) floats
    shape = _cells_shape(ctx)
    if shape is None:
        return out
    return _as_output(comp, "similarity", out, None if _gathered(ctx) else (shape,), "f",
                      "one value per query and note of the context")


def _checked_recency(comp, out, args, kwargs):
    age = _arg(args, kwargs, 0, "age")
    if age is None:
        return out
    shape = np.shape(age)
    if type(out) is np.ndarray and out.shape == shape and out.dtype.kind == "f":
        return out  # the common case: two comparisons
    shapes = None if _gathered(_arg(args, kwargs, 1, "ctx")) else (shape,)
    return _as_output(comp, "recency", out, shapes, "f", "the shape of its age argument: one "
                      "value per query and note")


def _checked_combine(comp, out, args, kwargs):
    rel, rec = _args(args, kwargs, "rel", "rec")
    if type(out) is np.ndarray and out.dtype.kind == "f":  # the common case: two comparisons
        ref = rel if rel is not None else rec
        if (type(ref) is np.ndarray and out.shape == ref.shape
                and (rec is None or rel is None or np.shape(rec) == ref.shape)):
            return out
    given = [np.shape(x) for x in (rel, rec) if x is not None]
    ctx = _arg(args, kwargs, 2, "ctx")
    if _gathered(ctx):
        return _as_output(comp, "combine", out, None, "f", "")
    shapes = []
    try:
        if given:
            shapes.append(tuple(np.broadcast_shapes(*given)))
    except ValueError:
        pass
    ctx_shape = _cells_shape(ctx)
    if ctx_shape is not None and ctx_shape not in shapes:
        shapes.append(ctx_shape)
    if not shapes:
        return out
    return _as_output(comp, "combine", out, tuple(shapes), "f",
                      "the shape of rel and rec: one score per query and note")


def _checked_evict(comp, out, args, kwargs):
    ctx = _arg(args, kwargs, 0, "ctx")
    try:
        n = len(ctx.idx)
    except Exception:  # noqa: BLE001 - no context: nothing to check against
        return out
    return _as_output(comp, "evict", out, ((n,),), "b", "one flag per note of ctx.idx",
                      ": a mask over ctx.idx, not the indices of the notes to evict")


def _checked_pack(comp, out, args, kwargs):
    values, tokens, valid, budget = _args(args, kwargs, "values", "tokens", "valid", "budget")
    if values is None or tokens is None or valid is None or budget is None:
        return out
    if (type(out) is np.ndarray and out.dtype.kind == "b" and out.shape == np.shape(values)
            and _built_in(comp)):
        return out  # the common case: a built-in packer's mask, its shape and dtype
    packed = _as_output(comp, "pack", out, (np.shape(values),), "b",
                        "one flag per candidate, the shape of values", ": a mask of the "
                        "packed candidates")
    if packed.ndim != 2 or _built_in(comp):
        return packed
    stray = packed > np.asarray(valid, dtype=bool)  # packed where not valid
    if np.count_nonzero(stray):
        r = int(np.flatnonzero(stray.any(axis=1))[0])
        raise _output_error(comp, "candidate subset", f"pack() packed a candidate that is not "
                            f"valid (row {r}): pack only where valid is True")
    used = np.where(packed, tokens, 0).sum(axis=1)
    over = used > np.asarray(budget)
    if np.count_nonzero(over):
        budget = np.maximum(np.asarray(budget), 0)  # a negative budget packs nothing
        over = used > budget
        if over.any():
            r = int(np.flatnonzero(over)[0])
            raise _output_error(comp, "budget", f"pack() packed {int(used[r])} tokens in row "
                                f"{r}, over its budget of {int(budget[r])}: the packed tokens "
                                "of a row never exceed its budget")
    return packed


def _checked_order(comp, out, args, kwargs):
    values, packed = _args(args, kwargs, "values", "packed")
    if values is None or packed is None:
        return out
    if (type(out) is np.ndarray and out.dtype == np.int64 and out.shape == np.shape(values)
            and _built_in(comp)):
        return out  # the common case: a built-in orderer's positions, their shape and dtype
    pos = _as_output(comp, "order", out, (np.shape(values),), "i",
                     "one position per candidate, the shape of values")
    packed = np.asarray(packed, dtype=bool)
    if pos.ndim != 2 or packed.shape != pos.shape or _built_in(comp):
        return pos
    q, c = pos.shape
    # a row's packed candidates at 0 .. n-1, each once; the others at -1:
    # every position below the row's count, -1 exactly where not packed,
    # and no (row, position) twice
    n = packed.sum(axis=1)
    ok = not (np.count_nonzero((pos == -1) == packed) or np.count_nonzero(pos >= n[:, None])
              or np.count_nonzero(pos < -1))
    if ok:
        at = (pos + np.arange(0, q * c, c)[:, None])[packed]
        ok = not np.count_nonzero(np.bincount(at, minlength=q * c) > 1)
    if not ok:
        bad = ((pos == -1) == packed) | (pos >= n[:, None]) | (pos < -1)
        dup = [r for r in range(q) if len(np.unique(pos[r][packed[r]])) < n[r]]
        r = int(np.flatnonzero(bad.any(axis=1))[0]) if bad.any() else dup[0]
        raise _output_error(comp, "permutation", f"order() gave the {int(n[r])} "
                            f"packed candidates of row {r} the positions "
                            f"{_listed(pos[r][packed[r]])} and the others "
                            f"{_listed(np.unique(pos[r][~packed[r]]))}: the packed "
                            "candidates of a row take 0 .. n-1, each once, and the others -1")
    return pos


def _listed(values: np.ndarray, most: int = 12) -> str:
    """Up to ``most`` values of a vector, as a list in words."""
    shown = ", ".join(str(v) for v in values[:most].tolist())
    return f"[{shown}{', ...' if len(values) > most else ''}]"


#: slot -> (the method whose output is checked, its check)
_OUTPUT_CHECKS = {
    "retriever": ("similarity", _checked_similarity),
    "decay": ("recency", _checked_recency),
    "ranker": ("combine", _checked_combine),
    "retention": ("evict", _checked_evict),
    "packer": ("pack", _checked_pack),
    "orderer": ("order", _checked_order),
}


def declared_for(obj: Any, declaration: str, method: str) -> bool:
    """Whether the class of ``obj`` makes ``declaration`` (a method
    declaring a property of ``method``) where ``method`` is defined, or
    below: a subclass that overrides ``method`` and inherits the declaration
    promises nothing about its own method (the engine and the checker then
    take it as undeclared)."""
    mro = type(obj).__mro__
    owner = next((k for k in mro if declaration in vars(k)), None)
    defines = next((k for k in mro if method in vars(k)), None)
    return owner is not None and defines is not None and issubclass(owner, defines)


def _check_outputs_of(cls: type) -> None:
    """Wrap the slot's method that ``cls`` itself defines so that its
    output is checked (shape and dtype; a packer's budget, an orderer's
    permutation) whenever it returns, and a mistake raises
    :class:`ComponentOutputError` naming the component. Each check is a
    few comparisons of shapes, or one vectorised pass over the (Q, C)
    candidates of a packer or an orderer."""
    method, check = _OUTPUT_CHECKS.get(getattr(cls, "slot", ""), (None, None))
    f = cls.__dict__.get(method) if method else None
    if (not inspect.isfunction(f) or getattr(f, "__isabstractmethod__", False)
            or getattr(f, "_output_checked", False)):
        return

    @functools.wraps(f)
    def checked(self, *args, **kwargs):
        try:
            out = f(self, *args, **kwargs)
        except Exception as exc:
            _note_component(exc, self, method, args, kwargs)
            raise
        return check(self, out, args, kwargs)

    checked._output_checked = True  # type: ignore[attr-defined]
    setattr(cls, method, checked)


#: The argument each checked method takes its context at: (position, name).
_CONTEXT_ARG = {"similarity": (0, "ctx"), "recency": (1, "ctx"), "combine": (2, "ctx"),
                "evict": (0, "ctx")}


def _note_component(exc: BaseException, comp: Component, method: str, args: tuple,
                    kwargs: Mapping[str, Any]) -> None:
    """Add a note to an exception a component's method raised, naming the
    component (the type is kept: the engine reads an AttributeError as
    "scores whole rows"), and on gathered cells the shape rule. Once: a
    method that calls its parent's adds no second note."""
    if getattr(exc, "_component_noted", False):
        return
    cls = type(comp)
    note = f"raised in {cls.slot} {cls.name!r} ({cls.__qualname__}).{method}()"
    at = _CONTEXT_ARG.get(method)
    if at is not None and _gathered(_arg(args, kwargs, *at)):
        note += f"; {GATHERED_RULE}"
    try:
        exc.add_note(note)
        exc._component_noted = True  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an exception that takes no note keeps its message
        pass


# --------------------------------------------------------------------------
# Slot base classes. Defaults are the neutral element of each slot.
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Retriever(Component):
    """Similarity between queries and notes, and an optional nearest-M prefilter.

    ``prefilter = M > 0`` keeps only the M notes most similar to the query (ties
    by lower ``note_id``) as candidates for scoring, as an ANN index would.
    """

    slot: ClassVar[str] = "retriever"
    #: True when :meth:`similarity` at a cell depends on that query and note
    #: alone, bit for bit, whichever other queries and notes the context
    #: holds (a dot product computed per pair, not by a matrix product,
    #: whose last bits depend on its blocking): the engine then computes
    #: it on the cells an arm scores only, without the batch's product.
    per_cell: ClassVar[bool] = False
    prefilter: int = 0
    _constraints: ClassVar[dict] = {"prefilter": Interval(0, None, integer=True)}

    @abc.abstractmethod
    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        """Similarity (Q, L) of each query to each note of ``ctx``."""

    def prefilter_mask(self, ctx: ScoringContext, mask: np.ndarray | None = None
                       ) -> np.ndarray:
        """(Q, L) bool: the ``prefilter`` (M) notes each query keeps as
        candidates, among the allowed ones (``mask``, default ``ctx.live``,
        else all).

        The default is the exact nearest M: the M allowed notes of highest
        :meth:`similarity`, ties to the lower column (``note_id``), a NaN
        similarity never kept. A retriever that searches otherwise (an
        approximate index) overrides it; the engine finds the default's
        answer faster through its similarity levels (the ``"prefilter"``
        accelerator) unless the class overrides it
        (:meth:`chooses_prefilter`).
        """
        allowed = _allowed(ctx, mask)
        return Retriever.nearest(self, ctx, allowed, np.arange(len(allowed)))

    def prefilter_cells(self, ctx: ScoringContext, allowed: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
        """The cells of :meth:`prefilter_mask` among the ``allowed`` ones
        ((Q, L) bool): (query rows, note columns), row-major, each row's
        columns ascending. A retriever that finds its candidates query by
        query (an index) gives them without a (Q, L) mask."""
        return np.nonzero(np.asarray(self.prefilter_mask(ctx, allowed), dtype=bool) & allowed)

    def nearest(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray
                ) -> np.ndarray:
        """(R, L) bool: the exact nearest M of the queries ``rows`` (R,),
        among the notes ``allowed`` (Q, L): the M allowed notes of highest
        :meth:`similarity`, ties to the lower column, a NaN never kept (the
        default :meth:`prefilter_mask`, and the reference an approximate
        index's candidates are compared with). A retriever may find the same
        notes faster."""
        sim = np.asarray(ctx.similarity(self))[rows]
        return _nearest(np.where(allowed[rows], sim, -np.inf), self.prefilter)

    def near_levels(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray
                    ) -> np.ndarray:
        """(R, L) int8, how near each allowed note is beside the M-th
        nearest of the queries ``rows``: 2 nearer, 1 as near (the M-th and
        every note tied with it: any of them may be the one :meth:`nearest`
        keeps), 0 farther (or not allowed, or NaN); every finite one 2 when
        a row has fewer than M. An index that returns a tied note instead of
        the lower column's has lost nothing. A retriever may find the same
        levels faster."""
        sim = np.asarray(ctx.similarity(self))[rows]
        return _near_levels(np.where(allowed[rows], sim, -np.inf), self.prefilter)

    def dot_scale(self, norm2: np.ndarray) -> np.ndarray | None:
        """Per-vector factors ``s`` (float32, the shape of ``norm2``) when
        :meth:`similarity` is the float32 dot product scaled by rows and
        columns, ``(dots * s(|q|^2)[:, None]) * s(|n|^2)[None, :]`` in that
        order, from the squared norms (float64); None otherwise (the
        default). The engine then computes a note's factor once per replay
        and the scaled product block by block, the same floats."""
        return None

    def chooses_prefilter(self) -> bool:
        """Whether the class overrides :meth:`prefilter_mask` (its prefilter
        is not the exact nearest M)."""
        return type(self).prefilter_mask is not Retriever.prefilter_mask

    def reads_uses(self) -> bool:
        """Whether the output may depend on the notes' uses (recalls, last
        use, distinct actors, tier): True unless a class declares otherwise.
        Per-query feedback rescores the notes used between two queries only
        for policies that read them (:meth:`Policy.reads_uses`); the checker
        verifies a declared False."""
        return True


def _allowed(ctx: ScoringContext, mask: np.ndarray | None) -> np.ndarray:
    """(Q, L) bool: the notes a prefilter may keep, ``mask`` (default
    ``ctx.live``; every note when that is None too) broadcast to the
    context's cells."""
    q, n = len(ctx.t), len(ctx.idx)
    if mask is None:
        mask = ctx.live
    if mask is None:
        return np.ones((q, n), dtype=bool)
    return np.broadcast_to(np.asarray(mask, dtype=bool), (q, n))


def _nearest(sim: np.ndarray, m: int) -> np.ndarray:
    """(Q, L) bool: each row's ``m`` highest finite values, ties to the lower
    column (the first ``m`` of a stable sort of ``-sim``, NaN and -inf never
    kept), found by a partition: a sort of a million-note row costs ten
    times as much."""
    key, kth = _mth_highest(sim, m)
    if kth is None:
        return np.isfinite(key)
    above = key > kth
    tied = key == kth
    # the tied columns that fill each row to m, lowest first
    need = m - np.count_nonzero(above, axis=1)
    keep = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int64) <= need[:, None]))
    return keep & np.isfinite(key)


def _near_levels(sim: np.ndarray, m: int) -> np.ndarray:
    """(Q, L) int8: 2 where a finite value is above its row's ``m``-th
    highest, 1 where equal to it, else 0 (:meth:`Retriever.near_levels`);
    2 at every finite value of a row of fewer than ``m``."""
    key, kth = _mth_highest(sim, m)
    finite = np.isfinite(key)
    if kth is None:
        return 2 * finite.astype(np.int8)
    return np.where(finite & (key > kth), 2, np.where(finite & (key == kth), 1, 0)
                    ).astype(np.int8)


def _mth_highest(sim: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The values with NaN as -inf, and each row's ``m``-th highest (Q, 1);
    None when rows have fewer than ``m`` values."""
    n = sim.shape[1]
    key = np.where(np.isnan(sim), -np.inf, sim)
    if m > n:
        return key, None
    return key, np.partition(key, n - m, axis=1)[:, n - m, None]


@dataclass(frozen=True, kw_only=True)
class Decay(Component):
    """Recency multiplier as a function of age (days).

    ``clock`` says which age: ``"created"`` (t - created_at), ``"updated"``
    (t - updated_at) or ``"last_access"`` (t - last access, creation if never
    accessed).
    """

    slot: ClassVar[str] = "decay"
    #: True when :meth:`exponential_form` always gives per-note arrays (one
    #: curve per note, never one for all), as ``memsim check`` verifies; the
    #: engine reads the form's shape itself (arms of such families are
    #: scored as one array with a floor and rate per cell)
    per_note_form: ClassVar[bool] = False
    #: whether :meth:`recency` may read a note's salience, so that a note of
    #: other than default salience may fall below :meth:`lower_bound` (which
    #: holds at default salience): the engine's pruning then trusts the bound
    #: only where every note has default salience. True unless declared
    #: (a contributor's family); the built-in families that read no
    #: salience declare False
    reads_salience: ClassVar[bool] = True
    clock: str = "created"
    _constraints: ClassVar[dict] = {"clock": Options(("created", "updated", "last_access"))}

    @abc.abstractmethod
    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        """Multiplier (Q, L) at the (effective) ages ``age`` (Q, L), days."""

    def half_life(self) -> float:
        """Age (days) at which a fresh, never-used note's multiplier halves
        its distance to the floor; inf if it never decays, NaN if unknown."""
        return float("nan")

    def exponential_form(self, ctx: ScoringContext
                         ) -> tuple[float | np.ndarray, float | np.ndarray] | None:
        """``(floor, rate)`` when ``recency = floor + (1 - floor) * exp(-rate *
        age)`` (scalars or per-note (L,) arrays); None when the family is not
        of that form (the default).

        Lets the engine compute the (Q, L) recency without a transcendental
        per cell (see :meth:`ScoringContext.exponential_recency`); the value
        is the same as :meth:`recency`'s up to rounding. The curve itself is
        :meth:`exponential_curve`, the one definition the engine uses.
        """
        return None

    def falls_with_age_alone(self) -> bool:
        """Whether :meth:`recency` is a non-increasing function of the age
        alone: the same curve for every note (no tier, salience, recalls or
        other column of ``ctx``), evaluated elementwise on ages of any shape.
        False (the default) promises nothing; ``memsim check`` verifies a
        True. The ``"minmax"`` accelerator then finds the extremes of a
        query's recencies at its notes of newest and oldest origin
        (:mod:`memsim.engine.minmax`)."""
        return False

    @staticmethod
    def exponential_curve(age, floor, rate) -> np.ndarray:
        """The curve :meth:`exponential_form` declares: ``floor + (1 - floor)
        * exp(-rate * max(age, 0))`` (arrays that broadcast; a negative age
        counts as 0). The engine evaluates it per note where it needs a
        curve's value at given ages (the highest recency of a block of notes,
        the similarity filter's); the (Q, L) recency itself is this curve
        computed separably (:meth:`ScoringContext.exponential_recency`)."""
        return floor + (1.0 - floor) * np.exp(-rate * np.maximum(age, 0.0))

    def lower_bound(self) -> float | None:
        """The smallest multiplier :meth:`recency` returns for a note of
        default salience at any age (its floor; 0 when the curve goes to 0);
        None when the family declares none (the default). The checker
        (:func:`memsim.checks.testing.check_component`) verifies a declared floor is
        never crossed."""
        return None

    def upper_bound(self) -> float | None:
        """The largest multiplier :meth:`recency` returns for any note at any
        age (negative ages clamp to 0), in exact arithmetic; None when the
        family declares none (the default: the engine then scores every live
        note). Declaring it also declares the family elementwise (module
        docstring)."""
        return None

    def reads_uses(self) -> bool:
        """See :meth:`Retriever.reads_uses` (default True)."""
        return True


@dataclass(frozen=True, kw_only=True)
class Stickiness(Component):
    """How use slows ageing. The neutral element changes nothing."""

    slot: ClassVar[str] = "stickiness"

    def effective_age(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return age

    def access_term(self, ctx: ScoringContext) -> np.ndarray | float:
        return 0.0

    def access_term_bound(self, ctx: ScoringContext) -> float | None:
        """An upper bound of :meth:`access_term` over the notes of ``ctx``
        (the term must be >= 0), or None when unknown. The default: 0 when the
        class keeps the neutral access term, else None."""
        return 0.0 if type(self).access_term is Stickiness.access_term else None

    def reads_uses(self) -> bool:
        """See :meth:`Retriever.reads_uses`; the default: False when the class
        keeps the neutral effective age and access term, else True."""
        cls = type(self)
        return not (cls.effective_age is Stickiness.effective_age
                    and cls.access_term is Stickiness.access_term)


@dataclass(frozen=True, kw_only=True)
class Breadth(Component):
    """Reward for notes used by many distinct actors. Neutral: factor 1."""

    slot: ClassVar[str] = "breadth"

    def on_access(self, ctx: ScoringContext) -> np.ndarray | float:
        return 1.0

    def on_score(self, ctx: ScoringContext) -> np.ndarray | float:
        return 1.0

    def access_factor_bound(self, ctx: ScoringContext) -> float | None:
        """An upper bound of :meth:`on_access` (>= 0) over the notes of
        ``ctx``, or None when unknown. The default: 1 when the class keeps
        the neutral factor, else None."""
        return 1.0 if type(self).on_access is Breadth.on_access else None

    def score_factor_bound(self, ctx: ScoringContext) -> float | None:
        """1.0 when :meth:`on_score` is exactly 1 for every note of ``ctx``
        (the engine prunes only then), else None. The default: 1 when the
        class keeps the neutral factor, else None."""
        return 1.0 if type(self).on_score is Breadth.on_score else None

    def reads_uses(self) -> bool:
        """See :meth:`Retriever.reads_uses`; the default: False when the class
        keeps both neutral factors, else True."""
        cls = type(self)
        return not (cls.on_access is Breadth.on_access and cls.on_score is Breadth.on_score)


@dataclass(frozen=True, kw_only=True)
class Ranker(Component):
    """Combines relevance and recency into the score used for ranking and packing."""

    slot: ClassVar[str] = "ranker"
    #: True when the ranker needs the decay pipeline at all.
    uses_recency: ClassVar[bool] = True
    #: True when :meth:`combine` reads the retriever's similarity ``rel``;
    #: False (a ranker that computes its own relevance from the context)
    #: spares the engine the similarity product, and ``rel`` is None.
    uses_similarity: ClassVar[bool] = True
    #: True when a note's score depends on the other live notes (e.g. a
    #: normalisation over the candidates, a rank); False (the default)
    #: promises :meth:`combine` elementwise, a cell's score unchanged when
    #: other notes are added, removed or reordered, and lets the engine
    #: score only chosen cells (a retriever prefilter's notes, the pruned
    #: scoring's, the per-query walk's used notes). The checker verifies
    #: that promise.
    set_dependent: ClassVar[bool] = False
    #: True when :meth:`combine` and :meth:`candidate_mask`, given a context
    #: of chosen cells of a bigger one (``ctx.whole``: that context and the
    #: cells' flat indices in its (Q, L) matrices), give each cell what it
    #: gets on the bigger context: a set-dependent ranker reads its sets
    #: there. For a ranker that chooses its candidates
    #: (:meth:`chooses_candidates`), it lets the engine score those cells
    #: alone (LangChain's: a few hundred of a query's notes).
    scores_cells: ClassVar[bool] = False
    #: False when what the ranker reads of the *other* notes (its chosen
    #: candidates, :meth:`candidate_mask`; what makes it
    #: :attr:`set_dependent`) does not change with the notes' uses (recalls,
    #: last use, distinct actors, tier), only with the notes that exist,
    #: their similarity and their creation (LangChain's sets: the nearest
    #: and the newest by creation). A use then changes a query's scores at
    #: the used note alone: with :attr:`scores_cells`, per-query feedback is
    #: corrected note by note from one scoring of the tick (the ``"walk"``
    #: accelerator) instead of answered query by query. True (the default)
    #: promises nothing.
    sets_read_uses: ClassVar[bool] = True
    #: True when the ranker reads the ground truth (``ctx.gains``): then the
    #: engine hands the packer and the orderer the true gains of the
    #: candidates as their values, instead of the scores (the oracle).
    needs_truth: ClassVar[bool] = False
    #: True when the ranker reads the synthetic workload's planted model
    #: (``ctx.planted``, ``ctx.note_class``): the ``bayes`` ranker. It runs
    #: only on streams memsim generated.
    needs_planted: ClassVar[bool] = False
    #: True when the ranker replays a production system's logged rankings
    #: (``ctx.logged_rank``, ``ctx.logged_score``): the engine then restricts
    #: it to the notes the system returned (the ``as-logged`` preset).
    needs_logged: ClassVar[bool] = False
    #: Per-note float columns the ranker keeps between retrieval calls
    #: (name -> initial value), e.g. memoripy's decay factor that every call
    #: multiplies: the engine keeps them per arm, offers them as
    #: ``ctx.note_state`` (name -> (L,)), and sets them after each call from
    #: :meth:`update_note_state`. Empty (the default): none. The
    #: accelerators decline a policy that keeps any
    #: (:func:`memsim.engine.settings.usable_accelerators`).
    note_columns: ClassVar[Mapping[str, float]] = {}

    @abc.abstractmethod
    def combine(self, rel: np.ndarray, rec: np.ndarray | None,
                ctx: ScoringContext) -> np.ndarray:
        """Score (Q, L) from the similarity ``rel`` (Q, L; None when
        ``uses_similarity`` is False) and the recency ``rec`` (Q, L; None
        when ``uses_recency`` is False)."""

    def candidate_mask(self, ctx: ScoringContext) -> np.ndarray | None:
        """(Q, L) bool: the notes the ranker lets be candidates among the
        live ones (LangChain's store results and recent window); None (the
        default) when every live note may be. A ranker that overrides it
        (:meth:`chooses_candidates`) is scored on every live note, unless it
        declares :attr:`scores_cells`: then on its candidates alone."""
        return None

    def chooses_candidates(self) -> bool:
        """Whether the class overrides :meth:`candidate_mask`."""
        return type(self).candidate_mask is not Ranker.candidate_mask

    def recency_floor(self) -> float | None:
        """A floor the ranker puts under the recency before combining it
        (Feather DB's ``min_weight``); None when it puts none (the default)."""
        return None

    def own_recency(self, ctx: ScoringContext) -> np.ndarray | None:
        """The recency term (Q, L) of a ranker that keeps its own instead of
        the decay slot's (``uses_recency`` False, such as agent-memory-server's
        freshness and novelty), for ``memsim curves``; None for the others
        (the default)."""
        return None

    def minmax_weights(self) -> tuple[float, float, float] | None:
        """``(w_recency, w_importance, w_relevance)`` when :meth:`combine` is
        :func:`memsim.policies.rank.minmax_sum` of the recency, the notes'
        importance and the similarity with these weights, in this order,
        over the live notes (Generative Agents' score); None (the default)
        otherwise. The ``"minmax"`` accelerator then scores a query's notes
        that can reach its top C alone (:mod:`memsim.engine.minmax`)."""
        return None

    def score_bound(self, rel: np.ndarray, rec_lo: float | None, rec_hi: float | None,
                    ctx: ScoringContext) -> np.ndarray | None:
        """An upper bound, elementwise over ``rel``, of the score
        :meth:`combine` gives any note of ``ctx`` whose similarity is at most
        ``rel`` and whose recency lies in ``[rec_lo, rec_hi]`` (either None
        when unknown; both None when ``uses_recency`` is False).

        It must hold for the scores as computed in floating point (the
        engine stops scoring a query once its C-th best score found is
        *strictly* above the bound of the best note left), so add a relative
        slack for rounding. None (the default) when the ranker cannot bound
        its score by a non-decreasing function of the similarity (a
        set-dependent ranker, an unknown one): the engine then scores every
        live note. Declaring it also declares :meth:`combine` elementwise.
        """
        return None

    def similarity_needed(self, score: np.ndarray, rec_lo: float | None,
                          rec_hi: np.ndarray, ctx: ScoringContext) -> np.ndarray | None:
        """The inverse of :meth:`score_bound`: elementwise over ``score``
        and ``rec_hi`` (arrays that broadcast), a similarity below which no
        note of ``ctx`` whose recency lies in ``[rec_lo, rec_hi]`` gets a
        score (as computed in floating point) of ``score`` or more; ``-inf``
        where every similarity may.

        The engine keeps a query's notes whose similarity reaches the value
        at a lower bound of the query's C-th best score and at each note's
        own highest recency, and scores those alone. Err low: a value too
        low costs time, one too high loses notes. None (the default) when
        the ranker declares none: the engine then lowers a similarity
        threshold until :meth:`score_bound` proves the top C.
        """
        return None

    def reads_uses(self) -> bool:
        """See :meth:`Retriever.reads_uses` (default True)."""
        return True

    def note_column(self, ctx: ScoringContext, name: str) -> np.ndarray:
        """The column ``name`` of :attr:`note_columns` at ``ctx.idx``: the
        engine's values, or the declared initial value where the context
        keeps none (an :class:`ArrayContext`, an arm before its first call)."""
        col = (getattr(ctx, "note_state", None) or {}).get(name)
        if col is None:
            return np.full(np.shape(ctx.idx), float(self.note_columns[name]))
        return np.asarray(col, dtype=np.float64)

    def update_note_state(self, ctx: ScoringContext, state: Mapping[str, np.ndarray]
                          ) -> dict[str, np.ndarray]:
        """The new values (L,) of the :attr:`note_columns` of ``ctx``'s notes
        after a retrieval call, from their values ``state`` (L,) before it.

        ``ctx`` is the call's scoring context (``ctx.live``: the notes its
        queries searched), read before the call's uses are recorded; with
        several queries (per-tick feedback) each query's update applies in
        turn. A note no query searched must keep its value. The default
        changes nothing."""
        return dict(state)


@dataclass(frozen=True, kw_only=True)
class Retention(Component):
    """Periodic eviction sweep."""

    slot: ClassVar[str] = "retention"
    #: False for a retention that never evicts: the engine then skips its
    #: sweeps altogether.
    evicts: ClassVar[bool] = True
    #: True for a retention whose evictions are invalidations: the notes are
    #: taken out of retrieval but kept, marked invalid with the time, for
    #: audit (the engine's ``invalid_at``; ``store_invalid``, ``hidden_invalid``).
    invalidates: ClassVar[bool] = False
    #: True when the retention reads ground truth (``ctx.superseded_at``).
    needs_truth: ClassVar[bool] = False

    def by_age_alone(self) -> bool:
        """Whether a never-used note's eviction follows from its age alone,
        so that ``memsim curves`` can give the age it is evicted at: False
        where it depends on the rest of the store (a capacity, a cleanup
        that runs only once something was used), on chance or on ground
        truth. True unless a family says otherwise."""
        return not self.needs_truth

    @abc.abstractmethod
    def evict(self, ctx: ScoringContext) -> np.ndarray:
        """Boolean mask over ``ctx.idx``: notes to evict now (at ``ctx.t[0]``).

        The engine only passes notes that exist and are not yet evicted.
        """


@dataclass(frozen=True, kw_only=True)
class Packer(Component):
    """Chooses which of the top-C candidates fit the token budget."""

    slot: ClassVar[str] = "packer"

    @abc.abstractmethod
    def pack(self, values: np.ndarray, tokens: np.ndarray, valid: np.ndarray,
             budget: np.ndarray) -> np.ndarray:
        """Boolean mask (Q, C) of packed candidates.

        ``values`` (Q, C) are the policy's scores, candidates sorted best first;
        ``tokens`` (Q, C) int64; ``valid`` (Q, C) marks real candidates (rows
        may hold fewer than C); ``budget`` (Q,) int64. The packed tokens of a
        row never exceed its budget; only valid candidates are packed.

        Each row is packed on its own: row q's mask depends on row q's
        values, tokens, validity and budget alone, never on the other rows
        of the call (no cut relative to the best value of the whole array,
        no budget shared across rows). The engine packs several arms'
        rows, or a batch's queries, in one call, and the reference engine
        other row sets: a packer that reads across rows gives other results
        on each. :func:`memsim.checks.testing.check_component` packs random
        problems whole, row by row and shuffled among other rows, and
        requires the same masks; every call's mask is checked (dtype
        bool, shape (Q, C); for a packer outside memsim the budget and
        valid candidates only too) and a mistake raises
        :class:`ComponentOutputError` naming the packer.
        """


@dataclass(frozen=True, kw_only=True)
class Orderer(Component):
    """Places packed notes in the context."""

    slot: ClassVar[str] = "orderer"

    @abc.abstractmethod
    def order(self, values: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Context position (Q, C) int64 of each packed candidate, 0 first;
        -1 where not packed: a row's packed candidates take 0 .. n-1, each
        once.

        Like :meth:`Packer.pack`, each row is ordered on its own, from that
        row's ``values`` and ``packed`` alone (the engine orders several
        arms' rows in one call). Every call's output is checked (dtype
        int64, shape; for an orderer outside memsim the permutation too):
        a mistake raises :class:`ComponentOutputError` naming the orderer."""


@dataclass(frozen=True, kw_only=True)
class Feedback(Component):
    """What counts as a use of a note, and what a use does.

    Parameters
    ----------
    touch : {"packed", "returned", "prefilter", "none"}
        Notes that gain a recall after a query: those packed into the context,
        the top ``k`` of the ranking ("returned", as a search API returns k
        results), or every prefilter candidate.
    k : int
        Number of returned notes for ``touch = "returned"``.
    before_scoring : bool
        Apply the touch before the query's scores are computed (Feather DB
        v0.16) instead of after.
    promote_after : int
        Promote a note to the ``longterm`` tier once it has this many recalls
        (0 = never).
    cooldown_s : float
        At most one recall per (note, actor) per this many seconds (ai-memory
        uses 60): a use within that time of the last one counted gains
        nothing (no recall, no new last access).
    cooldown_per : {"note-actor", "note"}
        What the cooldown counts its time for: each (note, actor) pair
        (ai-memory's ``touch`` per agent), or each note whatever the actor
        (agent-memory-server's ``update_last_accessed``, one
        ``last_accessed`` per memory).
    cooldown_from_creation : bool
        The cooldown also runs from the note's creation, as if it were a use
        (a ``last_accessed`` that starts at creation): a note used within
        ``cooldown_s`` of its creation gains nothing. False: a note's first
        use always counts (agent-memory-server 0.15.2 in effect: its creation
        stamp, a float, reads as 0 in its rate limit).
    timing : {"experiment", "per-query", "per-tick"}
        When uses take effect: before the next query ("per-query", as the
        real systems do; exact), after the tick ("per-tick": every query of
        a tick sees the state at its start), or as ``[experiment]
        feedback_mode`` says ("experiment", the default). The presets of real
        systems set "per-query".
    """

    slot: ClassVar[str] = "feedback"
    name: ClassVar[str] = "default"
    touch: str = "packed"
    k: int = 10
    before_scoring: bool = False
    promote_after: int = 0
    cooldown_s: float = 0.0
    cooldown_per: str = "note-actor"
    cooldown_from_creation: bool = False
    timing: str = "experiment"
    _constraints: ClassVar[dict] = {
        "touch": Options(("packed", "returned", "prefilter", "none")),
        "k": Interval(1, None, integer=True),
        "before_scoring": Options((True, False)),
        "promote_after": Interval(0, None, integer=True),
        "cooldown_s": Interval(0, None),
        "cooldown_per": Options(("note-actor", "note")),
        "cooldown_from_creation": Options((True, False)),
        "timing": Options(("experiment", "per-query", "per-tick")),
    }

    #: parameters added after run hashes were first published: left out of
    #: the resolved config at their defaults, so that a config that does not
    #: use them keeps its run hash (and resumes into its folder)
    _LATER_DEFAULTS: ClassVar[dict] = {"cooldown_per": "note-actor",
                                       "cooldown_from_creation": False}

    def to_config(self) -> dict[str, Any]:
        out = super().to_config()
        for name, default in self._LATER_DEFAULTS.items():
            if out.get(name) == default:
                del out[name]
        return out

    @property
    def touches_before_scoring(self) -> bool:
        """Whether a query's uses come before its scores are computed:
        ``before_scoring`` with a ``prefilter`` touch (the other touches
        need the query's answer)."""
        return self.touch == "prefilter" and self.before_scoring


register(Feedback)


@dataclass(frozen=True, kw_only=True)
class Policy(Validated):
    """A complete policy: one component per slot.

    ``candidates`` overrides the experiment's top-C for this policy (None:
    the experiment's).
    """

    retriever: Retriever = field(default=None)  # type: ignore[assignment]
    decay: Decay = field(default=None)  # type: ignore[assignment]
    stickiness: Stickiness = field(default=None)  # type: ignore[assignment]
    breadth: Breadth = field(default=None)  # type: ignore[assignment]
    ranker: Ranker = field(default=None)  # type: ignore[assignment]
    retention: Retention = field(default=None)  # type: ignore[assignment]
    packer: Packer = field(default=None)  # type: ignore[assignment]
    orderer: Orderer = field(default=None)  # type: ignore[assignment]
    feedback: Feedback = field(default=None)  # type: ignore[assignment]
    candidates: int | None = None

    _constraints: ClassVar[dict] = {
        "candidates": (Interval(1, None, integer=True), Options((None,))),
    }

    #: The component used for a slot left unset.
    DEFAULTS: ClassVar[dict[str, str]] = {
        "retriever": "cosine",
        "decay": "none",
        "stickiness": "none",
        "breadth": "none",
        "ranker": "product",
        "retention": "none",
        "packer": "skip-fill",
        "orderer": "score",
        "feedback": "default",
    }

    def __post_init__(self) -> None:
        for slot in SLOTS:
            value = getattr(self, slot)
            if value is None:
                value = build_component(slot, self.DEFAULTS[slot], slot)
                object.__setattr__(self, slot, value)
            elif not isinstance(value, Component) or value.slot != slot:
                raise ConfigError(f"{slot}: expected a {slot} component, got {value!r}")
        super().__post_init__()

    @classmethod
    def from_config(cls, table: dict[str, Any], where: str = "policy") -> Policy:
        """Build from a resolved or partial TOML table (slot -> spec)."""
        kwargs: dict[str, Any] = {}
        # each slot is built on its own, so that one run reports every slot's mistake
        caught: list[ConfigError] = []
        for key, value in table.items():
            try:
                if key in SLOTS:
                    kwargs[key] = build_component(key, value, f"{where}.{key}")
                elif key == "candidates":
                    kwargs[key] = value
                else:
                    allowed = list(SLOTS) + ["candidates", "preset"]
                    raise ConfigError(
                        f"{where}.{key}: unknown key{did_you_mean(key, allowed)}; "
                        f"allowed: {', '.join(allowed)}"
                    )
            except ConfigError as exc:
                caught.append(exc)
        if len(caught) == 1:
            raise caught[0]
        if caught:
            raise ConfigError(errors=[m for exc in caught for m in exc.errors])
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {slot: getattr(self, slot).to_config() for slot in SLOTS}
        if self.candidates is not None:
            out["candidates"] = self.candidates
        return out

    # -- scoring -------------------------------------------------------------
    def keeps_note_state(self) -> bool:
        """Whether a component keeps per-note columns between retrieval
        calls (:attr:`Ranker.note_columns`)."""
        return bool(self.ranker.note_columns)

    def reads_uses(self) -> bool:
        """Whether a note's score may change when notes are used (any
        component :meth:`score` calls declares it reads the uses): per-query
        feedback then rescores the notes used since the batch's start."""
        parts = [self.retriever, self.ranker, self.breadth]
        if self.ranker.uses_recency:
            parts += [self.decay, self.stickiness]
        return any(p.reads_uses() for p in parts)

    def recency(self, ctx: ScoringContext) -> np.ndarray | None:
        """The recency (Q, L) :meth:`score` hands the ranker: the decay at
        the stickiness's effective age, plus the access term times the
        breadth's factor; None when the ranker uses none."""
        if not self.ranker.uses_recency:
            return None
        rec = None
        if type(self.stickiness).effective_age is Stickiness.effective_age:
            # age is the plain clock: an exponential family can be
            # computed separably (same values, far fewer exponentials)
            form = self.decay.exponential_form(ctx)
            if form is not None:
                rec = ctx.exponential_recency(self.decay.clock, *form)
        if rec is None:
            age = self.stickiness.effective_age(ctx.age(self.decay.clock), ctx)
            rec = self.decay.recency(age, ctx)
        access = self.stickiness.access_term(ctx)
        if not (np.isscalar(access) and access == 0.0):
            rec = rec + access * self.breadth.on_access(ctx)
        return rec

    def score(self, ctx: ScoringContext) -> np.ndarray:
        """Scores (Q, L) of the context's notes for its queries (see module doc)."""
        rel = ctx.similarity(self.retriever) if self.ranker.uses_similarity else None
        score = self.ranker.combine(rel, self.recency(ctx), ctx)
        b = self.breadth.on_score(ctx)
        if not (np.isscalar(b) and b == 1.0):
            score = score * b
        return score
