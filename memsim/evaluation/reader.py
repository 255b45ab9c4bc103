"""Reader models: how likely the model is to use what was packed.

A packer decides *what* enters the context and an orderer *where*; a reader
model turns that into ``answer_prob``, the probability that the answer is used
(``docs/contracts/metrics.md``). It is deliberately simple and parametric, so that its
assumptions can be swept like any policy parameter.

Readers live in their own small registry, :data:`READERS` (they are a property
of the experiment, not of a policy), and are built from the experiment's
``[reader]`` table by :func:`reader_from_config`::

    [reader]
    kind = "positional"      # or "none"
    depth = 0.2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from memsim.core.errors import ConfigError
from memsim.core.params import Interval, Validated
from memsim.policies.base import build_from_spec, construct

__all__ = ["Reader", "PositionalReader", "NullReader", "READERS", "reader_from_config"]


@dataclass(frozen=True, kw_only=True)
class Reader(Validated):
    """Base of reader models. Subclasses set ``name`` and ``answer_prob``."""

    name: ClassVar[str] = ""

    def answer_prob(self, position: np.ndarray, gains: np.ndarray,
                    n_packed: np.ndarray) -> np.ndarray:
        """Probability (Q,) that the answer is used.

        ``position`` (Q, C) int: context position of each candidate, 0 first,
        -1 where not packed; ``gains`` (Q, C): the true gain of each candidate
        (> 0 relevant, < 0 stale, 0 irrelevant); ``n_packed`` (Q,): packed
        notes per query.
        """
        raise NotImplementedError

    def to_config(self) -> dict[str, Any]:
        """``{"kind": name, **params}``: the resolved ``[reader]`` table."""
        return {"kind": self.name, **self.params()}

    @classmethod
    def from_config(cls, table: dict[str, Any] | None, where: str = "reader") -> Reader:
        """Build from a table of parameters (``kind`` optional, must match).

        Raises :class:`~memsim.core.errors.ConfigError` naming the offending key,
        e.g. ``reader.depth: The 'depth' parameter of PositionalReader must be
        a float in [0, 1]. Got 1.5 instead.``
        """
        table = {} if table is None else table
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table, got {table!r}")
        kind = table.get("kind", cls.name)
        if kind != cls.name:
            raise ConfigError(f"{where}.kind: expected {cls.name!r}, got {kind!r}")
        params = {k: v for k, v in table.items() if k != "kind"}
        # the routine every config-built object shares; the uniform message
        # names the parameter, so its dotted key goes in front
        return construct(cls, params, what=f"reader {cls.name!r}", where=where,
                         key_names_param=True)


@dataclass(frozen=True, kw_only=True)
class PositionalReader(Reader):
    r"""U-shaped use curve over context positions, with a length penalty.

    Each packed note is *used* independently with probability

    .. math::

        p(x, n) = \operatorname{clip}\big(c(x)\, L(n),\ 0,\ 1\big),\qquad
        c(x) = p_{first} + (p_{last} - p_{first})\,x
               - \mathrm{depth}\,\big(1 - |2x - 1|^{\mathrm{shape}}\big),

    .. math::

        L(n) = \frac{1 + \lambda\,(n_{ref} - 1)}{1 + \lambda\,(n - 1)},

    where ``x = position / (n - 1)`` is the relative position of the note among
    the ``n`` packed notes (``x = 0`` when ``n = 1``). ``c`` runs linearly from
    ``p_first`` at the start to ``p_last`` at the end, minus a trough of
    ``depth`` at the middle; ``shape`` sets its width (larger: flatter bottom,
    steeper edges; 2 is a parabola). ``L`` decreases with ``n`` (``lambda`` =
    ``length_penalty``) and equals 1 at ``n = n_ref``, so ``p_first``,
    ``p_last`` and ``depth`` read directly as the curve at ``n_ref`` notes.

    Combination over the notes of a query: the answer is used when at least one
    relevant note (gain > 0) is used and the model is not misled by a stale
    note (gain < 0) it also used, which happens with probability
    ``stale_weight`` (a conflict between an old and a current fact)::

        answer_prob = (1 - prod_{relevant} (1 - p)) * (1 - stale_weight * (1 - prod_{stale} (1 - p)))

    Gains' magnitudes are not used (any relevant note can carry the answer);
    irrelevant notes act only through ``n`` (the length penalty) and by pushing
    relevant ones towards the middle. The result is 0 when no relevant note is
    packed; the engine reports NaN for queries with no relevant note at all.

    Default (approximate). Liu et al., "Lost in the Middle: How Language Models
    Use Long Contexts", TACL 2024 (arXiv 2307.03172), multi-document QA with 20
    documents: accuracy is highest with the evidence first, nearly as high with
    it last, and roughly 20 points lower with it in the middle. The defaults
    give, at ``n = 20``: 0.76 first, 0.72 last, 0.54 in the middle (gaps of 22
    and 18 points), and a mild decline with more notes (``L(10) = 1.05``,
    ``L(30) = 0.96``, in line with the paper's small drop from 10 to 30
    documents). These are a hand fit to the published curves' shape, not a
    regression; ``stale_weight = 0.5`` (a coin flip between conflicting facts)
    is memsim's assumption.

    Parameters
    ----------
    p_first, p_last : float in [0, 1]
        Use probability of the first and of the last note at ``n = n_ref``.
    depth : float in [0, 1]
        Depth of the mid-context trough below the line from first to last.
    shape : float > 0
        Width of the trough (exponent of ``|2x - 1|``).
    n_ref : int >= 1
        Number of notes at which the curve is calibrated (``L = 1``).
    length_penalty : float >= 0
        ``lambda`` of the length factor ``L(n)``; 0 = no length effect.
    stale_weight : float in [0, 1]
        Probability that a used stale note overrides the relevant ones.
    """

    name: ClassVar[str] = "positional"
    p_first: float = 0.76
    p_last: float = 0.72
    depth: float = 0.20
    shape: float = 3.0
    n_ref: int = 20
    length_penalty: float = 0.005
    stale_weight: float = 0.5
    _constraints: ClassVar[dict] = {
        "p_first": Interval(0, 1),
        "p_last": Interval(0, 1),
        "depth": Interval(0, 1),
        "shape": Interval(0, None, closed="neither"),
        "n_ref": Interval(1, None, integer=True),
        "length_penalty": Interval(0, None),
        "stale_weight": Interval(0, 1),
    }

    def curve(self, x: np.ndarray | float, n: np.ndarray | int) -> np.ndarray:
        """Use probability ``p(x, n)`` at relative position ``x`` in [0, 1]
        with ``n`` packed notes (broadcasts)."""
        x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
        n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
        c = (self.p_first + (self.p_last - self.p_first) * x
             - self.depth * (1.0 - np.abs(2.0 * x - 1.0) ** self.shape))
        lam = self.length_penalty
        length = (1.0 + lam * (self.n_ref - 1)) / (1.0 + lam * (n - 1.0))
        return np.clip(c * length, 0.0, 1.0)

    def p_use(self, position: np.ndarray, n_packed: np.ndarray) -> np.ndarray:
        """Use probability (Q, C) of each candidate; 0 where not packed."""
        position = np.asarray(position)
        n = np.asarray(n_packed, dtype=np.float64).reshape(-1, 1)
        x = np.where(n > 1, position / np.maximum(n - 1.0, 1.0), 0.0)
        return np.where(position >= 0, self.curve(x, n), 0.0)

    def answer_prob(self, position, gains, n_packed):
        position = np.asarray(position)
        gains = np.asarray(gains, dtype=np.float64)
        p = self.p_use(position, n_packed)
        packed = position >= 0
        rel = packed & (gains > 0)  # NaN gains count as irrelevant
        stale = packed & (gains < 0)
        used_rel = 1.0 - np.prod(np.where(rel, 1.0 - p, 1.0), axis=1)
        used_stale = 1.0 - np.prod(np.where(stale, 1.0 - p, 1.0), axis=1)
        return np.clip(used_rel * (1.0 - self.stale_weight * used_stale), 0.0, 1.0)


@dataclass(frozen=True, kw_only=True)
class NullReader(Reader):
    """No reader model: ``answer_prob`` is NaN for every query."""

    name: ClassVar[str] = "none"

    def answer_prob(self, position, gains, n_packed):
        return np.full(np.asarray(position).shape[0], np.nan)


#: kind -> reader class (not part of the policy REGISTRY).
READERS: dict[str, type[Reader]] = {"positional": PositionalReader, "none": NullReader}


def reader_from_config(spec: Any = None, where: str = "reader") -> Reader:
    """Build a reader from the ``[reader]`` table, a kind name, or a reader.

    An empty or missing table gives the default :class:`PositionalReader`.
    """
    return build_from_spec(spec, READERS, what="reader", where=where, base=Reader,
                           default_kind="positional", key_names_param=True)
