"""Declarative parameter validation for frozen policy and spec classes.

Each validated class lists ``_constraints``: field name -> constraint. The
check runs once, on construction (scikit-learn's pattern), and fails with one
uniform message::

    The 'half_life' parameter of HalfLifeDecay must be > 0. Got -3.0 instead.

Nothing is ever coerced: a value outside its range is refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import tomli_w

from memsim.core.paths import file_in_the_way
from memsim.core.errors import ConfigError, ParameterError

__all__ = [
    "as_path",
    "check_out_folder",
    "check_callable",
    "apply_override",
    "attribute_overrides",
    "key_text",
    "split_key",
    "override_text",
    "toml_plain",
    "Interval",
    "Options",
    "Validated",
    "fields_of",
    "describe_constraint",
    "did_you_mean",
    "check_keys",
    "short_repr",
]


@dataclass(frozen=True)
class Interval:
    """A real (or integer) interval; bounds are ``None`` for unbounded.

    ``closed`` is one of "both", "left", "right", "neither".
    """

    low: float | None
    high: float | None
    closed: str = "both"
    integer: bool = False

    def check(self, value: Any) -> bool:
        # NaN and +-inf are always refused: an infinite half-life is spelled as
        # the "none" decay, never as inf.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and not isinstance(value, numbers.Integral):
            return False
        v = float(value)
        if not math.isfinite(v):
            return False
        lo_closed = self.closed in ("both", "left")
        hi_closed = self.closed in ("both", "right")
        if self.low is not None and (v < self.low or (v == self.low and not lo_closed)):
            return False
        if self.high is not None and (v > self.high or (v == self.high and not hi_closed)):
            return False
        return True

    def __str__(self) -> str:
        kind = "an int" if self.integer else "a float"
        lo_op = ">=" if self.closed in ("both", "left") else ">"
        hi_op = "<=" if self.closed in ("both", "right") else "<"
        lo, hi = self._text(self.low), self._text(self.high)
        if self.low is not None and self.high is not None:
            lb = "[" if self.closed in ("both", "left") else "("
            rb = "]" if self.closed in ("both", "right") else ")"
            return f"{kind} in {lb}{lo}, {hi}{rb}"
        if self.low is not None:
            return f"{kind} {lo_op} {lo}"
        if self.high is not None:
            return f"{kind} {hi_op} {hi}"
        return f"a finite {'int' if self.integer else 'float'}"

    def _text(self, bound: float | None) -> str:
        # an integer bound is written out whole (4294967295, not 4.29497e+09)
        if bound is not None and self.integer and float(bound).is_integer():
            return str(int(bound))
        return "" if bound is None else f"{bound:g}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (strings, or bools)."""

    values: tuple

    def check(self, value: Any) -> bool:
        # the type too (True == 1), but numpy's integers are integers
        return any(value == v and (type(value) is type(v) or _both_integers(value, v))
                   for v in self.values)

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


def _both_integers(a: Any, b: Any) -> bool:
    return all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in (a, b))


def did_you_mean(key: str, allowed) -> str:
    """`` (did you mean 'x'?)`` when a close match exists, else ``""``."""
    match = difflib.get_close_matches(str(key), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def short_repr(value: Any, n: int = 60) -> str:
    """``repr(value)``, cut to ``n`` characters (and ``...``) for a message."""
    text = repr(value)
    return text if len(text) <= n else text[:n] + "..."


def check_keys(keys, allowed, where: str) -> None:
    """Refuse every one of ``keys`` not in ``allowed``, one message each
    (:attr:`ConfigError.errors`):
    ``WHERE.KEY: unknown key (did you mean 'x'?); allowed: a, b``."""
    allowed = list(allowed)
    unknown = [key for key in keys if key not in allowed]
    if unknown:
        raise ConfigError(errors=[
            f"{f'{where}.{key}' if where else str(key)}: unknown key"
            f"{did_you_mean(key, allowed)}; allowed: {', '.join(str(a) for a in allowed)}"
            for key in unknown])


def describe_constraint(c: Any) -> str:
    """Human text of a constraint (or a tuple of alternatives)."""
    if isinstance(c, (list, tuple)):
        return " or ".join(str(x) for x in c)
    return str(c)


#: the annotations of a float parameter (``from __future__ import annotations``: text)
_FLOAT_TYPES = ("float", "float | None", float)
#: whole numbers a float holds exactly
_EXACT_FLOAT_INT = 2 ** 53


class Validated:
    """Mixin for frozen dataclasses: validates ``_constraints`` on construction.

    Subclasses may add cross-field checks in ``_check()``, raising through
    :meth:`_fail`.
    """

    _constraints: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        for name, constraint in self._all_constraints().items():
            value = getattr(self, name)
            alternatives = constraint if isinstance(constraint, (list, tuple)) else (constraint,)
            if not any(c.check(value) for c in alternatives):
                self._fail(name, describe_constraint(constraint), value)
        # a whole number given for a float parameter is that float: 180 and
        # 180.0 are one parameter value, one resolved config and one hash
        # (after the checks, whose messages show the value as written)
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if (f.type in _FLOAT_TYPES and type(value) is int
                    and abs(value) <= _EXACT_FLOAT_INT):
                object.__setattr__(self, f.name, float(value))
        self._check()

    @classmethod
    def _all_constraints(cls) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            merged.update(klass.__dict__.get("_constraints", {}))
        return merged

    def _check(self) -> None:
        """Cross-field validation hook."""

    def _fail(self, name: str, allowed: str, value: Any) -> None:
        raise ParameterError(
            f"The {name!r} parameter of {type(self).__name__} must be {allowed}. "
            f"Got {value!r} instead."
        )

    def params(self) -> dict[str, Any]:
        """The constructor parameters as a plain dict (nested components as dicts)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if not f.init:
                continue
            v = getattr(self, f.name)
            out[f.name] = v.to_config() if hasattr(v, "to_config") else v
        return out


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    """Init fields of a dataclass by name."""
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def apply_override(table: dict, key: str, value: Any) -> None:
    """Set dotted ``key`` in a nested dict, creating tables; a component given
    by name (``decay = "half-life"``) becomes ``{kind = "half-life"}`` when a
    parameter below it is set. A quoted part (``sweep.params."a.b".high``)
    is one name, as in TOML (:func:`split_key`)."""
    parts = split_key(key)
    node = table
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        elif isinstance(nxt, str) and i >= 2 and parts[0] == "policies":
            nxt = node[part] = {"kind": nxt}
        elif not isinstance(nxt, dict):
            above = (key_text(parts[: i + 1]) if '"' in key or "'" in key
                     else ".".join(parts[: i + 1]))
            raise ConfigError(f"{above}: is a value, not a table; "
                              f"cannot set {key}")
        node = nxt
    node[parts[-1]] = value


#: One part of a dotted key as TOML writes it: bare, "basic" or 'literal'.
_KEY_PART = re.compile(r"""[ \t]*(?:([A-Za-z0-9_\-]+)|"((?:[^"\\\n]|\\.)*)"|'([^'\n]*)')[ \t]*""")
_BARE_PART = re.compile(r"^[A-Za-z0-9_\-]+$")


def split_key(key: str) -> list[str]:
    """The parts of a dotted key, read as TOML reads one:
    ``sweep.params."a.b".high`` is ``["sweep", "params", "a.b", "high"]``.
    A key without quotes is split at every dot.

    Raises
    ------
    ConfigError
        A quoted part that is not closed, or not followed by ``.`` or the end.
    """
    if '"' not in key and "'" not in key:
        return [part.strip(" \t") for part in key.split(".")]  # TOML allows "a . b"
    parts: list[str] = []
    pos = 0
    while True:
        m = _KEY_PART.match(key, pos)
        if m is None:
            break
        bare, basic, literal = m.groups()
        parts.append(bare if bare is not None else literal if literal is not None
                     else _unescape(basic))
        pos = m.end()
        if pos == len(key):
            return parts
        if key[pos] != ".":
            break
        pos += 1
    raise ConfigError(f"{key}: not a dotted key: write its parts joined by '.', each a bare "
                      "name (letters, digits, '_', '-') or a quoted one (\"a.b\")")


def _unescape(basic: str) -> str:
    """The text of a TOML basic string's body (its escapes read)."""
    try:
        return json.loads(f'"{basic}"')
    except ValueError:
        return basic


def key_text(parts) -> str:
    """Parts of a dotted key written as TOML would: a part that is not a bare
    name quoted (``["sweep", "params", "a.b"]`` -> ``sweep.params."a.b"``)."""
    return ".".join(p if _BARE_PART.match(p) else json.dumps(p, ensure_ascii=False)
                    for p in parts)


def _plain_key(key: str) -> str:
    """``key`` with its quoted parts read and every part joined by ``.``
    (``sweep.params."a.b"`` -> ``sweep.params.a.b``): the spellings TOML
    nests alike compare equal. A key that is not dotted stays as it is."""
    try:
        return ".".join(split_key(key))
    except ConfigError:
        return key


# --------------------------------------------------------------------------
# Overrides (``--set KEY=VALUE``) named in the errors they cause
# --------------------------------------------------------------------------


def toml_plain(v: Any) -> Any:
    """``v`` with the types tomli-w writes: paths as strings, tuples as lists,
    numpy scalars as Python ones."""
    if isinstance(v, dict):
        return {str(k): toml_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [toml_plain(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item"):  # numpy scalar
        return toml_plain(v.item())
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def override_text(value: Any) -> str:
    """``value`` as an inline TOML value, for an override given as a dict."""
    if isinstance(value, dict):
        items = [f"{k if re.match(r'^[A-Za-z0-9_-]+$', str(k)) else json.dumps(str(k))} = "
                 f"{override_text(v)}" for k, v in value.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(override_text(v) for v in value) + "]"
    try:
        return tomli_w.dumps({"v": toml_plain(value)}).strip()[len("v = "):]
    except (TypeError, ValueError):
        return repr(value)


#: The dotted key in front of a message (``policies.a.decay: ...``, with
#: quoted parts: ``sweep.params."a.b": ...``) and the parameter a
#: component's or a knob group's message names.
_MESSAGE_KEY = re.compile(r'^((?:[A-Za-z0-9_\-.]|"(?:[^"\\]|\\.)*")+): ')
_MESSAGE_PARAM = re.compile(r"^The '(\w+)' parameter of ")


def _message_key(message: str) -> str | None:
    """The dotted key a validation message is about, down to the parameter
    when the message names one (``policies.a.decay.floor``); None when it
    names no key."""
    m = _MESSAGE_KEY.match(message)
    if m is None:
        return None
    key = _plain_key(m.group(1).rstrip("."))
    p = _MESSAGE_PARAM.match(message[m.end():])
    if p is not None and not key.endswith(f".{p.group(1)}"):
        key = f"{key}.{p.group(1)}"
    return key


def attribute_overrides(exc: ConfigError, overrides: list[str] | dict | None) -> ConfigError:
    """``exc`` (same type) with each message about a key that one of
    ``overrides`` set ending in ``(from --set KEY=VALUE)``: for the checks
    that run after :func:`load_experiment` (``[sweep]``, ``[advise]``)."""
    if isinstance(overrides, dict):
        applied = [(k, f"{k}={override_text(v)}") for k, v in overrides.items()]
    else:
        applied = [(t.split("=", 1)[0].strip(), t.strip()) for t in overrides or [] if "=" in t]
    return exc.with_messages([m if "(from --set " in m else m + attribution(m, applied)
                              for m in exc.errors])


def attribution(message: str, applied: list[tuple[str, str]]) -> str:
    """`` (from --set KEY=VALUE)`` when an applied override set the key of
    ``message``, a table above it or a key below it; ``""`` otherwise (a
    mistake of the file itself)."""
    key = _message_key(message)
    if key is None:
        return ""
    # a key given twice: the later value is the one checked
    plain = list({_plain_key(k): text for k, text in applied}.items())
    hits = [text for k, text in plain
            if k == key or k.startswith(key + ".") or key.startswith(k + ".")]
    # a long value (a 5000-character name) is cut: the line names the key
    hits = [t if len(t) <= 80 else t[:77] + "..." for t in hits]
    return f" (from {', '.join(f'--set {t}' for t in hits)})" if hits else ""


def check_callable(value: Any, what: str) -> None:
    """Refuse a ``value`` that is neither None nor callable (a progress
    callback given as a number), naming ``what``, before any work."""
    if value is not None and not callable(value):
        raise ConfigError(f"{what}: expected a function (or None), got "
                          f"{type(value).__name__} {short_repr(value)}")


def as_path(value: Any, what: str) -> Path:
    """``value``, a ``str`` or an ``os.PathLike``, as a :class:`Path`;
    anything else is the caller's mistake, said in one line naming ``what``
    (a function's argument), not a ``TypeError`` from :mod:`pathlib`."""
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise ConfigError(f"{what}: expected a path (a str or an os.PathLike), got "
                      f"{type(value).__name__}")


def check_out_folder(path: Path, what: str) -> None:
    """Refuse a folder to write in that is a file or lies under one (``what``
    names the option, e.g. ``--out``), before any work; a ConfigError naming
    the file in the way."""
    p = file_in_the_way(path)
    if p is not None:
        where = "" if p == path else f" ({p} is a file)"
        raise ConfigError(f"{what} {path}: not a folder{where}; give a folder, new or "
                          "existing")
