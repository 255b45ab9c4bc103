"""Pluggable policy components, their registry, and named presets.

Importing this package registers every built-in component and preset.
"""

from __future__ import annotations

from . import breadth, decay, ordering, packing, rank, retention, retrieval, stickiness  # noqa: F401
from . import frameworks  # noqa: F401  (components of agent frameworks' memory layers)
from .base import (
    REGISTRY,
    SLOTS,
    ArrayContext,
    Breadth,
    Component,
    Decay,
    Feedback,
    Orderer,
    Packer,
    Policy,
    Ranker,
    Retention,
    Retriever,
    ScoringContext,
    Stickiness,
    build_component,
    register,
)
from .context import MEMORY_TYPE_CODES, TIER_CODES
from .presets import (
    PRESETS,
    Preset,
    add_preset,
    assumptions,
    parameter_paths,
    preset_of,
    preset_table,
    resolve_policy,
)
from . import framework_presets  # noqa: F401,E402  (registers the framework presets)

__all__ = [
    "REGISTRY",
    "TIER_CODES",
    "MEMORY_TYPE_CODES",
    "ArrayContext",
    "SLOTS",
    "PRESETS",
    "Preset",
    "add_preset",
    "assumptions",
    "parameter_paths",
    "preset_of",
    "preset_table",
    "resolve_policy",
    "Breadth",
    "Component",
    "Decay",
    "Feedback",
    "Orderer",
    "Packer",
    "Policy",
    "Ranker",
    "Retention",
    "Retriever",
    "ScoringContext",
    "Stickiness",
    "build_component",
    "register",
]
