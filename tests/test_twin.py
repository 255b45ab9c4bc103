"""The synthetic twin (memsim.tuning.twin): knobs fitted to a stream, checked
against it.

On a stream generated with known knobs the fit recovers ``retriever_noise``
within 0.25 (the search and the source share the generator, but the twin's
class laws are counted, not known, and the recall of one stream is noisy)
and the note and query rates within 10%. On LoCoMo (skipped without the
data) the twin's similarity-only recall (on the stream of replicate 0 of its
twin.toml) is within 0.05 of
the real stream's.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from memsim.tuning.twin import (NEVER_TOLERANCE, fit_twin, ks_statistic, load_any_stream,
                                profile_stream, write_twin)
from memsim.data.workload import SyntheticWorkload

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.zip"
NOISE = 1.8


def test_ks_statistic_is_zero_for_equal_samples_and_one_for_disjoint():
    assert ks_statistic([1, 2, 3], [1, 2, 3]) == 0.0
    assert ks_statistic([1, 2], [5, 6]) == 1.0
    assert ks_statistic([0, 2], [1, 3]) == pytest.approx(0.5)
    assert math.isnan(ks_statistic([], [1.0]))


@pytest.fixture(scope="module")
def known():
    wl = SyntheticWorkload(horizon_days=60, backfill_days=60, notes_per_day=15.0,
                           queries_per_day=10.0, retriever_noise=NOISE, n_actors=3)
    return wl, wl.generate(5)


@pytest.fixture(scope="module")
def twin(known):
    return fit_twin(known[1], budget=600, seed=0, steps=8)


def test_the_twin_recovers_the_noise_and_the_rates(known, twin):
    wl, _ = known
    assert abs(twin.workload.retriever_noise - NOISE) <= 0.25, twin.noise_search
    assert twin.workload.notes_per_day == pytest.approx(wl.notes_per_day, rel=0.10)
    assert twin.workload.queries_per_day == pytest.approx(wl.queries_per_day, rel=0.10)
    assert twin.workload.n_actors == wl.n_actors
    assert twin.workload.embedding_dim == wl.embedding_dim
    r, s = twin.real.scalars["recall"], twin.synthetic.scalars["recall"]
    assert abs(r - s) <= 0.05
    assert twin.ks()["tokens"] < 0.1


def test_the_twin_folder_is_a_runnable_experiment_and_a_report(twin, tmp_path):
    import memsim

    out = write_twin(twin, tmp_path / "twin")
    for f in ("twin.toml", "report.md", "profile.json", "figures/tokens.png",
              "figures/relevant_ages.png", "figures/query_rate.png", "figures/noise_search.png"):
        assert (out / f).is_file(), f
    exp = memsim.load_experiment(out / "twin.toml")
    assert list(exp.policies) == ["similarity-only"]
    assert exp.workload.retriever_noise == pytest.approx(twin.workload.retriever_noise)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Two-sample KS statistics" in md and "Similarity-only recall" in md
    prof = json.loads((out / "profile.json").read_text(encoding="utf-8"))
    assert set(prof["ks"]) == {"tokens", "relevant_ages", "query_times"}


def test_the_example_trace_has_a_profile():
    s = load_any_stream(ROOT / "experiments" / "traces" / "example.jsonl")
    p = profile_stream(s)
    assert p.scalars["n_queries"] == s.n_queries and p.relevant_ages.size > 0
    # its updates come after the last query: notes no query could see are left out
    assert p.classes is None and p.scalars["n_notes"] < s.n_notes
    assert p.scalars["updated_share"] == 0.0


@pytest.mark.skipif(not LOCOMO.exists(), reason=f"LoCoMo data absent ({LOCOMO})")
def test_locomo_twin_reproduces_similarity_only_recall():
    from memsim.data.importers.locomo import import_locomo

    tw = fit_twin(import_locomo(LOCOMO), budget=1500, seed=0, steps=8)
    r, s = tw.real.scalars["recall"], tw.synthetic.scalars["recall"]
    assert abs(s - r) <= 0.05, (r, s)
    assert tw.ks()["relevant_ages"] < 0.2
    # the distractor share is fitted to the share of notes never relevant
    # (0.757 real; 0.686 when fitted as if distractors took no query away)
    never = [p.scalars["never_relevant_share"] for p in (tw.real, tw.synthetic)]
    assert abs(never[1] - never[0]) <= NEVER_TOLERANCE, never
    assert not any("never relevant" in n for n in tw.notes)


def test_a_twin_without_classes_fits_the_share_of_notes_never_relevant(known):
    # the classes unknown (no note_class): the distractor share is fitted
    stream = dataclasses.replace(known[1], notes=known[1].notes.drop(columns=["note_class"]))
    tw = fit_twin(stream, budget=600, seed=0, steps=8)
    assert tw.real.classes is None and "distractor share" in tw.fitted["classes"]
    never = [p.scalars["never_relevant_share"] for p in (tw.real, tw.synthetic)]
    assert abs(never[1] - never[0]) <= NEVER_TOLERANCE, never


@pytest.mark.parametrize("option, value, least", [("--steps", "-3", 0), ("--budget", "0", 1),
                                                  ("--budget", "-5", 1)])
def test_cli_refuses_bad_steps_and_budget_before_loading(tmp_path, capsys, monkeypatch,
                                                         option, value, least):
    """``--steps -3`` ran no bisection (silently zero steps) and ``--budget 0``
    was caught only after loading, as ``experiment.budget_tokens``. Zero
    steps is a valid search (interpolation between the ends of the noise
    range), so steps must be >= 0 and the budget >= 1."""
    from memsim.cli import main
    from memsim.tuning import twin

    def never(*args, **kwargs):
        raise AssertionError("the stream was loaded before the options were checked")

    monkeypatch.setattr(twin, "load_any_stream", never)
    assert main(["calibrate", "workload", str(tmp_path / "s.jsonl"), "--out",
                 str(tmp_path / "o"), option, value]) == 2
    err = capsys.readouterr().err
    assert err == f"memsim: error: {option}: give a whole number >= {least}, got {int(value)}\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("steps, budget", [(True, 1500), (1.5, 1500), (2, False), (2, 0)])
def test_fit_twin_refuses_bad_steps_and_budget(known, steps, budget):
    from memsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^(steps|budget): give a whole number"):
        fit_twin(known[1], steps=steps, budget=budget)


def test_cli_out_that_is_a_file_is_refused_as_a_file(tmp_path, capsys, monkeypatch):
    from memsim.cli import main
    from memsim.tuning import twin

    monkeypatch.setattr(twin, "load_any_stream", lambda *a, **k: pytest.fail("loaded"))
    (tmp_path / "f.txt").write_text("x")
    for out in (tmp_path / "f.txt", tmp_path / "f.txt" / "sub"):
        assert main(["calibrate", "workload", str(tmp_path / "s.jsonl"), "--out",
                     str(out)]) == 2
        assert f"--out {out}: not a folder" in capsys.readouterr().err


def test_the_twins_recall_is_what_its_file_gives_on_replicate_0(twin, tmp_path):
    """The recall the header of twin.toml and the report give for the twin is
    measured on the stream the file's replicate 0 replays: running the file
    with one replicate prints the same figure."""
    import memsim

    out = write_twin(twin, tmp_path / "twin")
    head = (out / "twin.toml").read_text(encoding="utf-8").splitlines()[:3]
    said = f"twin {twin.synthetic.scalars['recall']:.3f}"
    assert any(said in line for line in head), head
    res = memsim.run_experiment(out / "twin.toml", overrides=["experiment.replicates=1"],
                                out=None)
    s = res.summary
    got = s[(s["metric"] == "recall") & (s["policy"] == "similarity-only")]["mean"].iloc[0]
    assert got == pytest.approx(twin.synthetic.scalars["recall"], abs=1e-12)
