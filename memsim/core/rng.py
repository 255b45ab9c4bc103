"""Seeding: one seed per experiment, named child streams.

Every random draw in memsim comes from a :class:`numpy.random.Generator`
derived from the experiment's seed by a path of names, e.g.
``child(root, "replicate", 2, "workload", "notes")``. Adding a new consumer of
randomness never shifts the streams of the existing ones, because each stream
is keyed by its name rather than by the order of ``spawn`` calls.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["seed_sequence", "child", "child_seq"]


def _key(part: str | int) -> int:
    if isinstance(part, (int, np.integer)) and not isinstance(part, bool):
        return int(part)
    digest = hashlib.blake2b(str(part).encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def seed_sequence(seed: int) -> np.random.SeedSequence:
    """The root :class:`~numpy.random.SeedSequence` of an experiment."""
    return np.random.SeedSequence(int(seed))


def child_seq(root: np.random.SeedSequence, *path: str | int) -> np.random.SeedSequence:
    """The seed sequence at ``path`` below ``root`` (deterministic, order-free)."""
    return np.random.SeedSequence(
        entropy=root.entropy, spawn_key=tuple(root.spawn_key) + tuple(_key(p) for p in path)
    )


def child(root: np.random.SeedSequence, *path: str | int) -> np.random.Generator:
    """A fresh :class:`~numpy.random.Generator` for the stream named ``path``."""
    return np.random.Generator(np.random.PCG64(child_seq(root, *path)))
