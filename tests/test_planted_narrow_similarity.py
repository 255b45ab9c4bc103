"""The planted posterior at the edges of the similarity knobs and in age_mode zero.

``retriever_noise = 0`` (a perfect retriever) makes the on-slot cosine law a
point mass; a large ``embedding_dim`` makes every law narrow. The ``bayes``
ranker must still score every note with a finite posterior, and the number
of askable slots it assumes must be the one the generator plants.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import memsim
from memsim.data.planted import PlantedModel
from memsim.data.workload import CLASS_NAMES, SyntheticWorkload

PROJECT = CLASS_NAMES.index("project")


def gains(workload: SyntheticWorkload, cos) -> np.ndarray:
    cos = np.atleast_2d(np.asarray(cos, dtype=np.float64))
    model = PlantedModel.from_workload(workload)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow or 0 / 0 is a bug here
        return model.expected_gain(cos, np.full(cos.shape[1], 5.0),
                                   np.full(cos.shape[1], PROJECT), np.array([10.0]))


def test_a_noiseless_retriever_gets_a_finite_posterior_that_prefers_its_slot():
    # on slot the cosine is 1 (up to float32 rounding), elsewhere far below
    g = gains(SyntheticWorkload(retriever_noise=0.0), [1.0, np.float32(0.99999994), 0.6, 0.3])
    assert np.isfinite(g).all()
    assert g[0, 0] > 0.5 and g[0, 1] > 0.5
    assert g[0, 2] < 1e-6 and g[0, 3] < 1e-6


def test_no_slot_direction_and_no_noise_gives_a_finite_posterior():
    # every note of the topic is then the query's own vector: similarity says nothing
    g = gains(SyntheticWorkload(retriever_noise=0.0, slot_weight=0.0), [1.0, 0.5, 0.0])
    assert np.isfinite(g).all()


@pytest.mark.parametrize("dim", [16384, 65536])
def test_narrow_cosine_laws_of_a_large_embedding_dim_do_not_overflow_to_nan(dim):
    wl = SyntheticWorkload(embedding_dim=dim)
    law = wl.query_similarity_model()
    on = law.on_slot_mean + law.on_slot_sd * np.array([-2.0, 0.0, 2.0])
    g = gains(wl, np.r_[on, law.same_topic_mean])
    assert np.isfinite(g).all()
    assert (g[0, :3] > 0.5).all()  # an on-slot cosine is on the slot for sure
    assert g[0, 3] < 1e-6


def test_a_run_of_the_bayes_ranker_with_a_perfect_retriever():
    table = {
        "experiment": {"name": "perfect", "seed": 5, "replicates": 1, "budget_tokens": 600},
        "workload": {"horizon_days": 6, "backfill_days": 6, "notes_per_day": 8.0,
                     "queries_per_day": 5.0, "retriever_noise": 0.0},
        "policies": {"bayes": {"ranker": "bayes", "packer": "skip-fill"},
                     "similarity": {"preset": "similarity-only"}},
    }
    res = memsim.run_experiment(memsim.experiment_from_dict(table), out=None)
    u = res.queries.groupby("policy")["utility"].mean()
    assert np.isfinite(u).all()
    assert u["bayes"] >= u["similarity"] - 0.05


def measured_askable(stream, name: str, actor: str, t: float) -> int:
    """Slots of class ``name`` with a note valid at ``t`` that ``actor`` may ask about."""
    n = stream.notes
    live = n[(n["note_class"] == name) & (n["created_at"] <= t) & (n["valid_until"] > t)]
    return int(live.loc[(live["scope"] == "team") | (live["actor"] == actor), "slot"].nunique())


@pytest.mark.parametrize("name", ["project", "scratch"])
def test_in_age_mode_zero_every_slot_of_the_window_is_askable(name):
    # every note exists at t = 0 and none has expired yet: the expiring
    # classes' slots do not close after a lifetime as they do in natural time
    wl = SyntheticWorkload(age_mode="zero", horizon_days=100, backfill_days=100,
                           notes_per_day=20.0, queries_per_day=1.0)
    stream = wl.generate(5)
    actual = np.mean([measured_askable(stream, name, a, 0.0) for a in wl.actor_names()])
    model = float(PlantedModel.from_workload(wl).askable_slots(name, np.array([0.0]))[0])
    assert model == pytest.approx(actual, rel=0.3)
