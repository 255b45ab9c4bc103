"""Pluggable policy components, their registry, and named presets.

Importing this package registers every built-in component and preset.
"""

from __future__ import annotations

from . import breadth, decay, ordering, packing, rank, retention, retrieval, stickiness  # noqa: F401
from .base import (
    REGISTRY,
    SLOTS,
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
from .presets import PRESETS, Preset, add_preset, preset_table

__all__ = [
    "REGISTRY",
    "SLOTS",
    "PRESETS",
    "Preset",
    "add_preset",
    "preset_table",
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
