"""Named presets: faithful configurations of real systems and baselines.

A preset is a partial policy table (slot -> component spec). In an experiment,
``preset = "NAME"`` starts from it and any other key of the policy table
overrides it. Each preset's text cites its source and says what memsim had to
design where the source is silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = ["Preset", "PRESETS", "add_preset", "preset_table"]


@dataclass(frozen=True)
class Preset:
    """A named, documented policy table."""

    name: str
    doc: str
    table: dict[str, Any] = field(default_factory=dict)


PRESETS: dict[str, Preset] = {}


def add_preset(name: str, doc: str, **table: Any) -> Preset:
    if name in PRESETS:
        raise RuntimeError(f"duplicate preset {name!r}")
    PRESETS[name] = Preset(name=name, doc=doc.strip(), table=table)
    return PRESETS[name]


def preset_table(name: str, where: str) -> dict[str, Any]:
    """A deep copy of a preset's table; a clear error for an unknown name."""
    if name not in PRESETS:
        from ..config import did_you_mean

        raise ConfigError(
            f"{where}: unknown preset {name!r}{did_you_mean(name, PRESETS)}; "
            f"allowed: {', '.join(sorted(PRESETS))}"
        )
    import copy

    return copy.deepcopy(PRESETS[name].table)


add_preset(
    "hivemind-2025-bug",
    """Hivemind before the fix (seed 000, "5% a Day Sounds Gentle"): score =
    cosine similarity x ``0.95 ** days`` on every tier, packed by sorting on
    score and filling from the top until the first note that does not fit
    (top-k with a cutoff), in score order. Notes are promoted to the longterm
    tier after 5 uses, but the decay ignores the tier: "the quiet one won".""",
    retriever="cosine",
    decay={"kind": "per-day", "rate": 0.05},
    ranker="product",
    packer="top-k-cutoff",
    orderer="score",
    feedback={"kind": "default", "touch": "packed", "promote_after": 5},
)

add_preset(
    "similarity-only",
    """A static vector store: score = cosine similarity; no decay, no use
    signal; skip-fill packing in score order.""",
    retriever="cosine",
    ranker="similarity",
    packer="skip-fill",
    orderer="score",
)
