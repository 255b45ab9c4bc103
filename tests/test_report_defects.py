"""The report's figures and sentences say what they show: the store size on a
common time grid, the focus budget named and drawn, isolated windows
visible, a run folder of the wrong shape refused in one line, a policy of a
plugin not installed here, upper bounds left out of "the most", ties, one
number of decimals per sweep column, and what one replicate's per-run table
shows.

Every test works on small frames built here (no simulation), except the
command-line ones, which write a few files by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from memsim.cli import main as cli_main  # noqa: E402
from memsim.evaluation.metrics import SUPERSEDED_USE_COLUMNS  # noqa: E402
from memsim.policies import resolve_policy  # noqa: E402
from memsim.reporting import plots  # noqa: E402
from memsim.reporting import report as report_mod  # noqa: E402
from memsim.reporting.compare import compare  # noqa: E402
from memsim.reporting.rundir import RunResult  # noqa: E402


def _queries(policies: dict[str, float], *, budgets=(1500,), replicates=(0, 1), n_q: int = 30,
             seed: int = 0, span: float = 29.0) -> pd.DataFrame:
    """A queries table: per policy a level of utility and recall, with
    per-query noise shared by every policy; each replicate draws its own
    query times (so the replicates are not replays of one stream)."""
    rng = np.random.default_rng(seed)
    parts = []
    for rep in replicates:
        t = np.sort(rng.uniform(0, span, n_q))
        noise = rng.random(n_q) * 0.2
        for b in budgets:
            for pol, level in policies.items():
                parts.append(pd.DataFrame({
                    "replicate": rep, "policy": pol, "budget": b,
                    "query_id": np.arange(n_q) + 1000 * rep, "t": t,
                    "utility": level + noise, "oracle_utility": 1.0,
                    "recall": np.clip(level + noise, 0, 1), "tokens_used": 900 + 100 * noise,
                    "harm": noise * (pol != "oracle"), "stale_rate": noise / 4}))
    return pd.concat(parts, ignore_index=True)


def _table(preset: str) -> dict:
    """A policy table as a run folder's config.toml holds it (resolved)."""
    return resolve_policy({"preset": preset}, "policies.x").to_config()


# --------------------------------------------------------------------------
# 1. Store size: in time order, a mean of every replicate on each day
# --------------------------------------------------------------------------


def test_store_size_is_in_time_order_and_averages_every_replicate_on_a_common_grid():
    # as store.parquet is written: replicate by replicate, rows at query
    # times, on days that differ by replicate
    times = {0: [0.5, 2.5, 5.2], 1: [1.1, 3.3, 5.9]}
    sizes = {0: [10, 20, 30], 1: [100, 200, 300]}
    store = pd.DataFrame([{"replicate": r, "policy": p, "budget": 800, "t": t,
                           "store_notes": n, "store_tokens": 10 * n}
                          for r in (0, 1) for t, n in zip(times[r], sizes[r])
                          for p in ("a", "b")])
    d = plots.store_size_data(store)
    for _, g in d.groupby("policy"):
        assert g["t"].is_monotonic_increasing
        # from the first day both replicates have a size (day 1) to the last (day 5),
        # each replicate carried forward to every day
        assert g["t"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert g["store_notes"].tolist() == [55.0, 60.0, 110.0, 110.0, 165.0]
        assert (g["n_replicates"] == 2).all()
    fig = Figure()
    ax = plots.plot_store_size(d, fig.add_subplot())
    for line in ax.lines:
        assert np.all(np.diff(line.get_xdata()) > 0)


# --------------------------------------------------------------------------
# 2. Several budgets: every single-budget figure shows and names the focus
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def budgets_ctx():
    budgets = (300, 800, 2000)
    q = _queries({"bug": 0.3, "plain": 0.6}, budgets=budgets)
    arms = pd.DataFrame([
        {"replicate": r, "policy": p, "budget": b,
         "recall_gini": {300: 0.8, 800: 0.5, 2000: 0.2}[b] + (0.05 if p == "plain" else 0),
         "evicted_notes": 0, "promoted_notes": 0, "superseded_notes": 4,
         **{c: 0.5 for c in SUPERSEDED_USE_COLUMNS}}
        for r in (0, 1) for p in ("bug", "plain") for b in budgets])
    store = pd.DataFrame([{"replicate": r, "policy": p, "budget": b, "t": float(t),
                           "store_notes": 100 + t * (2 if p == "bug" else 1),
                           "store_tokens": 1000} for r in (0, 1) for p in ("bug", "plain")
                          for b in budgets for t in range(10)])
    run = RunResult(queries=q, arms=arms, store=store,
                    config={"experiment": {"budget_tokens": 300, "baseline": "bug"}})
    return report_mod._context(run, n_boot=20, seed=0)


def test_recall_gini_figure_shows_the_focus_budget_and_names_it(budgets_ctx):
    ctx = budgets_ctx
    assert ctx.focus == 300  # not the middle budget, 800
    fig = next(f for f in report_mod._feedback_figures(ctx) if f.name == "recall_gini")
    assert "(at 300 tokens)" in fig.caption
    ax = Figure().add_subplot()
    fig.draw(ax)
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == [0.8, 0.85]  # the focus budget's, not 800's 0.5 and 0.55
    # plot_run_metric alone, given several budgets, says which it drew
    ax = plots.plot_run_metric(plots.run_metric_data(ctx.run.arms, "recall_gini"),
                               Figure().add_subplot())
    assert "at 800 tokens" in ax.get_title()


def test_every_single_budget_figure_names_the_focus_budget(budgets_ctx):
    ctx = budgets_ctx
    figs = {f.name: f for f in report_mod._query_figures(ctx)
            + report_mod._feedback_figures(ctx)}
    for name in ("distribution_utility", "distribution_recall", "over_time_recall",
                 "superseded_use", "store_size", "recall_gini"):
        assert "(at 300 tokens)" in figs[name].title + " " + figs[name].caption, name


# --------------------------------------------------------------------------
# 3. Over time: isolated windows visible, no point past the data
# --------------------------------------------------------------------------


def test_over_time_marks_each_window_and_keeps_the_last_one_within_the_run():
    # a 365-day run in 7-day windows: the last window, days 364 to 371, holds
    # the queries of day 364 only
    t = np.r_[np.arange(0.5, 364.0, 3.0), 364.5]
    q = pd.DataFrame({"replicate": 0, "policy": "a", "budget": 1500, "t": t,
                      "recall": np.where(np.arange(len(t)) % 7 == 3, 0.5, np.nan)})
    d = plots.over_time_data(q, "recall", 7.0)
    assert d["t"].max() <= 364.5 and d["t"].iloc[-1] > 364.0
    whole = d["t"].iloc[1:-1].to_numpy()  # whole windows keep their middle
    assert np.allclose((whole - 3.5) % 7.0, 0.0)
    # windows with a value between windows without one: a line alone would
    # draw them with no length
    v = d["mean"].to_numpy()
    isolated = [i for i in range(1, len(v) - 1) if np.isfinite(v[i])
                and not np.isfinite(v[i - 1]) and not np.isfinite(v[i + 1])]
    assert isolated
    ax = plots.plot_over_time(d, Figure().add_subplot())
    assert ax.lines[0].get_marker() not in (None, "", "None", " ")


# --------------------------------------------------------------------------
# 4. A run folder of the wrong shape: one line naming the file and the key
# --------------------------------------------------------------------------


def _sweep_folder(root: Path, manifest: dict | None = None, config: str | None = None) -> Path:
    """A folder as `memsim sweep` writes it, by hand: no queries, a few trials."""
    d = root / "20260101T000000Z_s_00000000"
    (d / "sweep").mkdir(parents=True)
    pd.DataFrame({"number": [0, 1, 2], "state": "COMPLETE",
                  "values_utility": [0.61, 0.65, 0.7],
                  "policies.a.decay.half_life_days": [12.3456, 456.789, 88.1]}
                 ).to_csv(d / "sweep" / "trials.csv", index=False)
    (d / "manifest.json").write_text(json.dumps(manifest or {
        "status": "completed", "name": "s", "kind": "sweep",
        "sweep": {"objectives": ["utility"], "directions": ["maximize"],
                  "params": ["policies.a.decay.half_life_days"]}}))
    (d / "config.toml").write_text(config or '[experiment]\nname = "s"\n')
    return d


@pytest.mark.parametrize("how,file,key", [
    ("manifest-sweep", "manifest.json", "sweep"),
    ("manifest-versions", "manifest.json", "versions"),
    ("manifest-timings", "manifest.json", "timings_s"),
    ("config-experiment", "config.toml", "experiment")])
def test_a_folder_of_the_wrong_shape_is_one_line_naming_file_and_key(tmp_path, capsys, how,
                                                                     file, key):
    manifest = {"status": "completed", "name": "s", "kind": "sweep"}
    config = None
    if how == "manifest-sweep":
        manifest["sweep"] = 5
    elif how == "manifest-versions":
        manifest["versions"] = 5
    elif how == "manifest-timings":
        manifest["timings_s"] = "abc"
    else:
        config = "experiment = 5\n"
    d = _sweep_folder(tmp_path, manifest, config)
    capsys.readouterr()
    assert cli_main(["report", "-q", str(d)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memsim: error: "), err
    assert str(d / file) in lines[0] and key in lines[0] and "Traceback" not in err
    assert not (d / "report.html").exists()


# --------------------------------------------------------------------------
# 5. A policy whose component is not registered here (a plugin's)
# --------------------------------------------------------------------------


def test_a_policy_of_an_unregistered_component_still_gets_its_report():
    plugin = _table("hivemind")
    plugin["decay"] = {"kind": "my-plugin-decay", "half_life_days": 30.0}
    run = RunResult(queries=_queries({"sim": 0.4, "feather": 0.6}),
                    config={"experiment": {"budget_tokens": 1500, "baseline": "sim"},
                            "policies": {"sim": _table("similarity-only"),
                                         "feather": plugin}})
    ctx = report_mod._context(run, n_boot=20, seed=0)
    sections = dict(report_mod._table_sections(ctx))
    texts = [item for kind, item in sections["Assumed parameters"] if kind == "p"]
    assert any("'feather'" in t and "cannot be listed" in t and "'my-plugin-decay'" in t
               and "not registered in this environment" in t for t in texts), texts
    # the recency curves draw the policies that can be built, and say which is not
    rec = next(f for f in report_mod._comparison_figures(ctx) if f.name == "recency_curves")
    assert "'feather'" in rec.caption and "my-plugin-decay" in rec.caption
    assert rec.render().png and not rec.error


# --------------------------------------------------------------------------
# 6. At a glance: no upper bound wins, ties are ties, no capital after a colon
# --------------------------------------------------------------------------


def test_at_a_glance_leaves_policies_that_read_hidden_labels_out_of_the_choice():
    run = RunResult(queries=_queries({"sim": 0.5, "hm": 0.45, "oracle": 0.9}),
                    config={"experiment": {"budget_tokens": 1500, "baseline": "sim"},
                            "policies": {"sim": _table("similarity-only"),
                                         "hm": _table("hivemind"),
                                         "oracle": _table("oracle")}})
    ctx = report_mod._context(run, n_boot=20, seed=0)
    glance = dict(report_mod._table_sections(ctx))["At a glance"][0][1]
    assert "'oracle' gives the most" not in glance[0]
    assert glance[0].startswith("The baseline 'sim' gives the most of the achievable utility")
    assert "'oracle' (an upper bound" in glance[0]  # still named, as a bound
    stale = next(s for s in glance if s.startswith("Stale notes"))
    assert "'hm'" in stale and "'oracle'" not in stale


def test_at_a_glance_says_an_exact_tie_is_a_tie():
    cmp = compare(_queries({"today": 0.5, "sim": 0.5}), baseline="today", n_boot=20)
    first = report_mod._glance_sentences(cmp, 1500)[0]
    assert "gives the most" not in first
    assert first.startswith("The baseline 'today' and 'sim' tie for the most of the "
                            "achievable utility")


def test_at_a_glance_says_more_or_less_stale_content_as_the_difference_prints():
    """A harm difference of 1e-9 printed +0.000 beside "packs less stale content"."""
    q = _queries({"today": 0.5, "sim": 0.6})
    q.loc[q["policy"] == "sim", "harm"] -= 1e-9
    cmp = compare(q, baseline="today", n_boot=20)
    stale = [s for s in report_mod._glance_sentences(cmp, 1500) if s.startswith("Stale")][0]
    assert "packs as much stale content" in stale and "difference +0.000" in stale, stale
    q.loc[q["policy"] == "sim", "harm"] -= 0.05
    stale = [s for s in report_mod._glance_sentences(compare(q, baseline="today", n_boot=20),
                                                      1500) if s.startswith("Stale")][0]
    assert "packs less stale content" in stale, stale


def test_at_a_glance_after_the_budget_goes_on_in_lower_case(budgets_ctx):
    glance = dict(report_mod._table_sections(budgets_ctx))["At a glance"][0][1]
    assert all(s.startswith("At 300 tokens: ") for s in glance)
    assert not [s for s in glance if re.match(r"At 300 tokens: [A-Z][a-z]", s)], glance


# --------------------------------------------------------------------------
# 7. Sweep tables: one number of decimals per column, never scientific
# --------------------------------------------------------------------------


def _decimals(cell: str) -> set[int]:
    return {len(m.group(1)) for m in re.finditer(r"\d\.(\d+)", cell)} or (
        {0} if re.search(r"\d", cell) else set())


def test_sweep_tables_print_one_number_of_decimals_per_column(tmp_path):
    d = _sweep_folder(tmp_path)
    rob = d / "sweep" / "robustness.csv"
    pd.DataFrame({
        "number": [3, 3, 3, 3], "role": "best",
        "check": ["sweep", "fresh-seeds", "vs-experiment", "vs-experiment"],
        "variant": ["", "", "", "noisy"], "replicates": ["0-1", "2-3", "2-3", "2-3"],
        "values_utility": [0.6887, 0.66, np.nan, np.nan],
        "change_utility": [0.0, -0.0226, np.nan, np.nan],
        "diff_utility": [np.nan, np.nan, -1.6001e-05, 0.00102407],
        "diff_ci_low_utility": [np.nan, np.nan, -0.02543, -0.0371986],
        "diff_ci_high_utility": [np.nan, np.nan, 0.025398, 0.0392468],
        "verdict_utility": ["", "", "no difference shown", "no difference shown"],
        "ci_over_utility": ["", "", "replicates", "replicates"]}).to_csv(rob, index=False)
    tables = [report_mod._robustness_table(rob, ["utility"]),
              report_mod._paired_table(rob, ["utility"])]
    trials = pd.read_csv(d / "sweep" / "trials.csv")
    tables.append(report_mod._best_table(trials, ["values_utility"], ["utility"], ["maximize"],
                                         ["policies.a.decay.half_life_days"]))
    for table in tables:
        for col in table.columns:
            cells = [str(c) for c in table[col] if str(c) not in ("", "n/a")]
            assert not any(re.search(r"\de[-+]\d", c) for c in cells), (col, cells)
            if col in ("trial", "role", "check", "variant", "replicates", "on")\
                    or col.endswith("verdict"):
                continue
            decs = set().union(*(_decimals(c) for c in cells)) if cells else set()
            assert len(decs) <= 1, (col, cells)
    paired = tables[1]["utility: best - preset [95% CI]"].tolist()
    assert paired[0] == "+0.000 [-0.025, +0.025]", paired
    # the plateau table: a parameter's best value and its plateau share their decimals
    pd.DataFrame({"objective": ["utility"] * 2,
                  "param": ["policies.a.decay.half_life_days", "policies.a.decay.floor"],
                  "type": ["float", "float"], "best": [67.2815, 0.48939],
                  "low": [18.2417, 0.35], "high": [243.3796, 0.734888],
                  "n_trials": [6, 6], "n_plateau": [5, 5], "edge_warning": [False, False]}
                 ).to_csv(d / "sweep" / "plateau.csv", index=False)
    items = report_mod._plateau_items(d / "sweep" / "plateau.csv")
    plateau = next(item for kind, item in items if kind == "table")
    for best, span in zip(plateau["best"], plateau["plateau"]):
        assert _decimals(best) == _decimals(span) and "e" not in best + span
    assert plateau["plateau"].tolist() == ["[18, 243]", "[0.35, 0.73]"]


# --------------------------------------------------------------------------
# 8. One replicate: the per-run caption says that no interval is shown
# --------------------------------------------------------------------------


def test_one_replicate_per_run_caption_says_what_is_shown():
    arms = pd.DataFrame({"replicate": 0, "policy": ["a", "b"], "budget": 1500,
                         "recall_gini": [0.4, 0.5], "evicted_notes": 0, "promoted_notes": 0})
    run = RunResult(queries=_queries({"a": 0.4, "b": 0.6}, replicates=(0,)), arms=arms,
                    config={"experiment": {"budget_tokens": 1500}})
    ctx = report_mod._context(run, n_boot=20, seed=0)
    caption = dict(report_mod._table_sections(ctx))["Per-run measures"][0][1]
    assert "Intervals over replicates" not in caption
    assert "One replicate" in caption and "no interval" in caption
    fig = next(f for f in report_mod._feedback_figures(ctx) if f.name == "recall_gini")
    assert "with its interval" not in fig.caption
    ax = Figure().add_subplot()
    fig.draw(ax)
    assert "95% CI" not in ax.get_title()


def test_the_per_run_tables_intervals_stay_within_the_measures_values():
    """Two replicates: recall_gini 0.745 [0.122, 1.368] and a superseded share
    above 1 were printed."""
    arms = pd.DataFrame({"replicate": [0, 1], "policy": "a", "budget": 1500,
                         "recall_gini": [0.696, 0.794], "evicted_notes": [10, 3000],
                         "superseded_notes": [4, 5], "superseded_used_7d": [0.9, 1.0]})
    g = plots.run_metric_data(arms, "recall_gini").iloc[0]
    assert g["ci_method"] == "t" and 0.12 < g["ci_low"] and g["ci_high"] == 1.0
    assert plots.run_metric_data(arms, "evicted_notes").iloc[0]["ci_low"] == 0.0
    sup = plots.superseded_use_data(arms, 1500)
    assert (sup["ci_high"] <= 1.0).all() and (sup["ci_low"] >= 0.0).all()
