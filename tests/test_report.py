"""Reports: compare(), figures, report.html / report.md (the notebooks are
run by tests/test_notebooks.py).

The HTML report must be self-contained, every embedded figure a decodable
PNG, and it must render in headless Chromium without console errors (checked
when ``chromium`` is on PATH: .ci/run installs Debian's package).
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

import memsim  # noqa: E402
from memsim.reporting import plots  # noqa: E402
from memsim.cli import main as cli_main  # noqa: E402
from memsim.reporting.compare import MARKS, Comparison, compare, headline_text  # noqa: E402
from memsim.reporting.report import build_report  # noqa: E402
from memsim.reporting.rundir import load_run  # noqa: E402
from memsim.runs.runner import run_experiment  # noqa: E402
from memsim.reporting.stats import holm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
#: A small year-less version of the quickstart: a few seconds per run.
SMALL = {"workload.horizon_days": 40, "workload.backfill_days": 80,
         "workload.notes_per_day": 8, "workload.queries_per_day": 8}
IMG_RE = re.compile(r'<img[^>]*\ssrc="([^"]*)"')


# ---------------------------------------------------------------------------
# Run folders (module-scoped: each costs a few seconds)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """`memsim run` path: the runner builds the report at the end."""
    out = tmp_path_factory.mktemp("plain")
    return run_experiment(QUICKSTART, overrides={**SMALL, "experiment.replicates": 2,
                                                 "experiment.save_rankings": True}, out=out)


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("budgets")
    res = run_experiment(QUICKSTART, overrides={**SMALL, "experiment.replicates": 1,
                                                "experiment.budgets": [300, 1500, 4000]},
                         out=out, report=False)
    build_report(res.path)
    return res


def _fake_trials(n: int = 30, seed: int = 0) -> pd.DataFrame:
    """An Optuna-style trials table (study.trials_dataframe()) with two
    objectives; the objective depends on half_life only."""
    rng = np.random.default_rng(seed)
    hl = rng.uniform(5, 400, n)
    floor = rng.uniform(0, 0.6, n)
    packer = rng.choice(["skip-fill", "greedy"], n)
    util = np.log(hl) / 6 + rng.normal(0, 0.01, n)
    tokens = 800 + 2 * hl + rng.normal(0, 5, n)
    state = np.where(np.arange(n) == 3, "FAIL", "COMPLETE")
    util[3] = np.nan
    return pd.DataFrame({
        "number": np.arange(n), "values_0": util, "values_1": tokens,
        "params_policies.fix.decay.half_life_days": hl,
        "params_policies.fix.decay.floor": floor,
        "params_policies.fix.packer": packer, "state": state})


def _sweep_png(path: Path) -> None:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    fig.savefig(path)
    plt.close(fig)


@pytest.fixture(scope="module")
def sweep_run(plain_run, tmp_path_factory):
    """A run folder with a sweep/ subfolder (trials and an Optuna figure)."""
    dst = tmp_path_factory.mktemp("sweep") / plain_run.path.name
    shutil.copytree(plain_run.path, dst)
    for f in ("report.html", "report.md"):
        (dst / f).unlink()
    shutil.rmtree(dst / "figures")
    cfg = (dst / "config.toml").read_text()
    (dst / "config.toml").write_text(
        cfg + '\n[sweep]\nmetrics = ["utility", "tokens_used"]\n'
              'directions = ["maximize", "minimize"]\n')
    (dst / "sweep").mkdir()
    _fake_trials().to_csv(dst / "sweep" / "trials.csv", index=False)
    _sweep_png(dst / "sweep" / "contour.png")
    _sweep_png(dst / "sweep" / "history.png")  # drawn again by the report: not embedded
    build_report(dst)
    return dst


@pytest.fixture(scope="module")
def sweep_only_run(tmp_path_factory):
    """A folder as `memsim sweep` writes it: no queries, parameters named by
    their dotted keys, objectives in the manifest, a robustness table."""
    d = tmp_path_factory.mktemp("sweeponly") / "20260101T000000Z_s_00000000"
    (d / "sweep").mkdir(parents=True)
    t = _fake_trials(20, seed=1).drop(columns="values_1").rename(
        columns={"values_0": "values_utility"})
    t.columns = [c.removeprefix("params_") for c in t.columns]
    params = [c for c in t.columns if c.startswith("policies.")]
    t["origin"] = "sampler"
    t["worker"] = "host:1"
    t["utility_rep0"] = t["values_utility"]
    t.to_csv(d / "sweep" / "trials.csv", index=False)
    (d / "manifest.json").write_text(json.dumps({
        "status": "completed", "name": "s", "kind": "sweep",
        "sweep": {"objectives": ["utility"], "directions": ["maximize"], "params": params}}))
    (d / "config.toml").write_text('[experiment]\nname = "s"\n')
    pd.DataFrame({"number": [7, 7, 7], "role": "best",
                  "check": ["sweep", "fresh-seeds", "variant"],
                  "variant": ["", "", "noisy"], "replicates": ["0-1", "2-3", "2-3"],
                  "values_utility": [0.9, 0.8, 0.7], "change_utility": [0.0, -0.1, -0.2],
                  "per_replicate_utility": ["[0.9]", "[0.8]", "[0.7]"]}
                 ).to_csv(d / "sweep" / "robustness.csv", index=False)
    build_report(d)
    return d


ALL_RUNS = ["plain", "budgets", "sweep", "sweep_only"]


@pytest.fixture
def run_dir(request, plain_run, budget_run, sweep_run, sweep_only_run) -> Path:
    return {"plain": plain_run.path, "budgets": budget_run.path, "sweep": sweep_run,
            "sweep_only": sweep_only_run}[request.param]


# ---------------------------------------------------------------------------
# The report files
# ---------------------------------------------------------------------------


def test_memsim_run_writes_the_report_at_the_end(plain_run):
    p = plain_run.path
    assert (p / "report.html").is_file() and (p / "report.md").is_file()
    assert any((p / "figures").glob("*.png"))
    assert json.loads((p / "manifest.json").read_text())["status"] == "completed"
    assert "report" in plain_run.timings


def test_run_without_report(budget_run, tmp_path):
    res = run_experiment(QUICKSTART, overrides={**SMALL, "workload.horizon_days": 10,
                                                "experiment.replicates": 1},
                         out=tmp_path, report=False)
    assert not (res.path / "report.html").exists()


@pytest.mark.parametrize("run_dir", ALL_RUNS, indirect=True)
def test_report_html_is_self_contained(run_dir):
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in text
    assert "<script" not in text.lower()
    # no resource from outside the file: every src / srcset / href is a data: URI
    for attr in re.findall(r'\s(?:src|srcset|href)="([^"]*)"', text):
        assert attr.startswith("data:"), attr
    assert "could not be drawn" not in text


def _embedded_images(text: str) -> list[np.ndarray]:
    out = []
    for src in IMG_RE.findall(text):
        assert src.startswith("data:image/png;base64,"), src[:40]
        raw = base64.b64decode(src.split(",", 1)[1], validate=True)
        out.append(mpimg.imread(io.BytesIO(raw), format="png"))
    return out


@pytest.mark.parametrize("run_dir", ALL_RUNS, indirect=True)
def test_every_embedded_figure_is_a_decodable_image(run_dir):
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    images = _embedded_images(text)
    assert images, "the report embeds no figure"
    for img in images:
        assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
        assert img.shape[2] in (3, 4)
        assert np.ptp(img[..., :3]) > 0  # not a blank canvas
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    refs = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert len(refs) == len(images)
    for ref in refs:  # the Markdown's figures exist and decode too
        assert mpimg.imread(run_dir / ref).ndim == 3


@pytest.mark.parametrize("run_dir", ALL_RUNS, indirect=True)
def test_every_drawn_figure_has_a_narrow_rendering_for_small_screens(run_dir):
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    figures = dict(re.findall(r'<figure id="fig-([^"]+)">(.*?)<figcaption>', text))
    drawn = {n: body for n, body in figures.items() if not n.startswith("sweep_optuna_")}
    assert drawn, "the report draws no figure"
    for name, body in drawn.items():
        m = re.fullmatch(r'<picture><source media="\(max-width:\d+px\)" '
                         r'srcset="data:image/png;base64,([^"]+)">'
                         r'<img src="data:image/png;base64,([^"]+)" alt="[^"]*"></picture>', body)
        assert m, f"{name}: {body[:200]}"
        narrow, wide = (mpimg.imread(io.BytesIO(base64.b64decode(b))) for b in m.groups())
        # 4.5 and 7.5 in at 110 dpi
        assert (narrow.shape[1], wide.shape[1]) == (495, 825), name
        assert np.ptp(narrow[..., :3]) > 0, name
        # figures/ (and report.md) hold the wide rendering only
        assert mpimg.imread(run_dir / "figures" / f"{name}.png").shape == wide.shape, name
    # a PNG that memsim did not draw has no narrow rendering
    for name, body in figures.items():
        if name.startswith("sweep_optuna_"):
            assert body.startswith("<img ") and "srcset" not in body, name


def test_a_figure_that_fails_at_the_narrow_width_is_reported_as_failed():
    from memsim.core.errors import ReportWarning
    from memsim.reporting.report import ReportFigure

    def draw(fig):  # a figure of panels is drawn anew at the narrow width
        fig.add_subplot().plot([0, 1], [0, 1])
        if fig.get_figwidth() < 6:
            raise ValueError("too narrow")

    with pytest.warns(ReportWarning, match="too narrow"):
        f = ReportFigure("x", "X", "caption", draw=draw, panels=True).render()
    assert f.error == "ValueError: too narrow"
    assert f.png == b"" and f.narrow_png == b"" and f.draw is None


def _crowded(ax):
    """A plot that does not fit 4.5 in as drawn for 7.5 in: a long title, a
    legend of long entries inside the Axes, long category labels."""
    x = np.arange(12)
    for k in range(4):
        ax.plot(x, np.sin(x / (k + 2)), label=f"policy-with-a-long-name-{k} (30 d: 0.21, "
                                              "180 d: 1e-04, 365 d: 7e-09)")
    ax.legend(fontsize=plots.SMALLEST_PT)
    ax.set_xticks(x)
    ax.set_xticklabels([f"bucket {k}-{k + 1} d" for k in x], fontsize=plots.SMALLEST_PT)
    ax.set_title("A title long enough to run off a narrow figure on both its sides at once")


def test_a_narrow_figure_keeps_its_text_inside_and_its_plot_as_tall(monkeypatch):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend
    from matplotlib.text import Text
    from memsim.reporting.report import ReportFigure

    wide = Figure(figsize=(7.5, 4.2), layout="constrained")
    _crowded(wide.add_subplot())
    wide.draw_without_rendering()
    wide_plot = wide.axes[0].get_position().height * 4.2
    printed = []
    draw = FigureCanvasAgg.draw

    def keep(canvas):
        printed.append(canvas.figure)  # the wide figure, then the narrow one
        return draw(canvas)

    monkeypatch.setattr(FigureCanvasAgg, "draw", keep)
    f = ReportFigure("crowded", "Crowded", "caption", draw=_crowded).render()
    assert f.error == "" and f.narrow_png
    fig = printed[-1]
    assert fig.get_figwidth() == 4.5 and fig.get_figheight() >= 4.2
    # as drawn, it did not fit: the title and the legend were wider than the plot
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.findobj(Legend)) == 1
    box = fig.bbox
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip():
            b = t.get_window_extent()
            assert box.x0 - 1 <= b.x0 and b.x1 <= box.x1 + 1, t.get_text()
            assert box.y0 - 1 <= b.y0 and b.y1 <= box.y1 + 1, t.get_text()
    labels = sorted((lab.get_window_extent() for lab in ax.get_xticklabels()), key=lambda b: b.x0)
    assert not any(a.overlaps(b) for a, b in zip(labels, labels[1:]))
    # the figure grew: its plot is as tall as the wide one's, give or take a tenth
    assert ax.get_position().height * fig.get_figheight() >= 0.9 * wide_plot
    png = mpimg.imread(io.BytesIO(f.narrow_png))
    assert png.shape[1] == 495 and png.shape[0] == round(fig.get_figheight() * 110)


def test_a_legend_beside_the_plot_is_moved_below_without_a_layout_warning():
    """Seventeen policies' legend beside the plot leaves a 4.5 in figure no
    room for its Axes: the first narrow layout collapses (matplotlib warns),
    the legend goes below and the figure is laid out again, so the user sees
    no warning and gets a plot as tall as the wide one's."""
    from memsim.reporting.report import ReportFigure

    def draw(ax):
        x = np.linspace(0, 720, 50)
        for k in range(17):
            ax.plot(x, np.exp(-x / (10 + 40 * k)), label=f"policy-number-{k}-with-a-long-name "
                                                        "(30 d: 0.21, 180 d: 1e-04, 365 d: 7e-09)")
        plots._legend(ax, 17)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning fails render(), which keeps it as error
        f = ReportFigure("many", "Many", "caption", draw=draw).render()
    assert f.error == "" and f.narrow_png
    png = mpimg.imread(io.BytesIO(f.narrow_png))
    assert png.shape[1] == 495 and png.shape[0] > 4.2 * 110


def test_plain_report_content(plain_run):
    p = plain_run.path
    md = (p / "report.md").read_text(encoding="utf-8")
    names = {f.stem for f in (p / "figures").glob("*.png")}
    assert {"recency_curves", "recall_by_age", "win_tie_loss", "distribution_utility",
            "over_time_recall", "feedback_top_share", "feedback_gini",
            "recall_gini"} <= names
    # the report's tables are exactly what compare() returns
    cmp = compare(load_run(p))
    assert cmp.to_markdown() in md
    assert cmp.to_markdown(detail=True) in md
    for pol in plain_run.experiment.policies:
        assert pol in md
    assert "## Provenance" in md and "config.toml" in md


def test_budget_report_has_budget_curves(budget_run):
    p = budget_run.path
    names = {f.stem for f in (p / "figures").glob("*.png")}
    assert {"budget_utility", "budget_recall"} <= names
    md = (p / "report.md").read_text(encoding="utf-8")
    assert "| budget | policy |" in md  # the tables are per budget
    assert "At 1500 tokens:" in md       # single-budget figures use the experiment's budget


def test_sweep_report(sweep_run, sweep_only_run):
    names = {f.stem for f in (sweep_run / "figures").glob("*.png")}
    # no importance.csv (written by memsim sweep from the study): no importance figure
    assert names >= {"sweep_history_0", "sweep_history_1", "sweep_slice_0", "sweep_pareto",
                     "sweep_optuna_contour"}
    assert "sweep_importance" not in names
    assert "sweep_optuna_history" not in names
    md = (sweep_run / "report.md").read_text(encoding="utf-8")
    assert "## Sweep" in md and "utility (maximize), tokens_used (minimize)" in md
    assert "30 trials, 29 completed" in md
    assert "Pareto set on utility and tokens_used" in md
    only = (sweep_only_run / "report.md").read_text(encoding="utf-8")
    assert "## Sweep" in only and "## Summary" not in only
    assert "20 trials, 19 completed; objective: utility (maximize); parameters: " \
           "policies.fix.decay.half_life_days" in only
    assert "| trial | role | check | variant |" in only and "-0.2" in only
    assert {f.stem for f in (sweep_only_run / "figures").glob("*.png")} == {
        "sweep_history_0", "sweep_slice_0"}


def test_sweep_folder_without_trials(tmp_path):
    d = tmp_path / "run"
    (d / "sweep").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": "running"}))
    build_report(d)
    assert "no trials.csv" in (d / "report.md").read_text()


def test_failed_run_is_flagged(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"status": "failed", "error": "Boom: x"}))
    build_report(d)
    text = (d / "report.html").read_text()
    assert "FAILED" in text and "Boom: x" in text


def test_report_is_reproducible(budget_run):
    p = budget_run.path
    before = (p / "report.html").read_bytes()
    build_report(p)
    assert (p / "report.html").read_bytes() == before


def test_cli_report(budget_run, tmp_path, capsys):
    assert cli_main(["report", str(budget_run.path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(
        budget_run.path / "report.html")
    assert cli_main(["report", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Headless Chromium
# ---------------------------------------------------------------------------

# Injected at the top of <head> of a copy of the report: records script
# errors, console.error / console.warn calls and failed resource loads (the
# capture-phase "error" event), then, once loaded, how many images decoded.
_CHECKER = """<script>
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(e.message || ("resource: " + ((e.target && (e.target.src || e.target.href))
                                               || "?").slice(0, 60)));
  }, true);
  ["error", "warn"].forEach(function (k) {
    var orig = console[k];
    console[k] = function () { errors.push(k + ": " + Array.from(arguments).join(" "));
                               return orig.apply(console, arguments); };
  });
  window.addEventListener("load", function () {
    var imgs = Array.prototype.slice.call(document.images);
    var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
    var b = document.body;
    b.setAttribute("data-check-images", imgs.length);
    b.setAttribute("data-check-decoded", ok.length);
    b.setAttribute("data-check-errors", errors.length);
    b.setAttribute("data-check-messages", errors.join(" | ").slice(0, 500));
  });
})();
</script>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _render(html_file: Path, profile: Path) -> tuple[str, str]:
    """(dumped DOM, stderr) of headless Chromium loading a file."""
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=5000", "--dump-dom", html_file.resolve().as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout, res.stderr


def _console_lines(stderr: str) -> list[str]:
    # Chromium logs page console messages as "...:INFO:CONSOLE:<line>] "msg", source: ..."
    # (D-Bus and GPU noise of a headless container is not from the page)
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln]


def _checked_copy(src: Path, dst: Path) -> Path:
    text = src.read_text(encoding="utf-8")
    dst.write_text(text.replace("<head>", "<head>" + _CHECKER, 1), encoding="utf-8")
    return dst


def _attrs(dom: str) -> dict[str, str]:
    m = re.search(r"<body([^>]*)>", dom)
    assert m, "no <body> in the dumped DOM"
    return dict(re.findall(r'data-check-([a-z]+)="([^"]*)"', m.group(1)))


needs_chromium = pytest.mark.skipif(
    _chromium() is None,
    reason="chromium is not on PATH (Debian: apt-get install chromium; .ci/run installs it)")


@needs_chromium
def test_chromium_check_detects_problems(tmp_path):
    # the check itself must fail on a broken image and on a console error
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><title>x</title></head>'
                   '<body><img src="data:image/png;base64,AAAA" alt="x">'
                   '<script>console.error("boom")</script></body></html>')
    dom, err = _render(bad, tmp_path / "p1")
    assert any('"boom"' in ln for ln in _console_lines(err))
    dom, _ = _render(_checked_copy(bad, tmp_path / "bad_checked.html"), tmp_path / "p2")
    a = _attrs(dom)
    assert a["images"] == "1" and a["decoded"] == "0" and int(a["errors"]) >= 1


@needs_chromium
@pytest.mark.parametrize("run_dir", ["plain", "sweep"], indirect=True)
def test_report_renders_in_headless_chromium(run_dir, tmp_path):
    html_file = run_dir / "report.html"
    n_images = len(IMG_RE.findall(html_file.read_text(encoding="utf-8")))
    dom, err = _render(html_file, tmp_path / "profile")
    assert "</html>" in dom
    assert _console_lines(err) == []
    dom, _ = _render(_checked_copy(html_file, tmp_path / "checked.html"),
                     tmp_path / "profile2")
    a = _attrs(dom)
    assert a.get("images") == str(n_images), a
    assert a.get("decoded") == str(n_images), a
    assert a.get("errors") == "0", a.get("messages")


# ---------------------------------------------------------------------------
# compare()
# ---------------------------------------------------------------------------


def test_compare_accepts_results_frames_and_folders(plain_run):
    base = plain_run.experiment.settings.baseline
    a = compare(plain_run)
    b = compare(plain_run.path)
    c = compare(plain_run.queries, baseline=base)
    assert isinstance(a, Comparison) and a.baseline == base == b.baseline
    pd.testing.assert_frame_equal(a.to_dataframe(), b.to_dataframe())
    pd.testing.assert_frame_equal(a.to_dataframe(), c.to_dataframe())
    # without a baseline a frame is compared with its first policy
    first = str(plain_run.queries["policy"].iloc[0])
    assert compare(plain_run.queries).baseline == first


def test_compare_tables(plain_run):
    cmp = compare(plain_run, metrics=["utility", "recall", "stale_rate"])
    df = cmp.to_dataframe()
    pols = list(plain_run.experiment.policies)
    assert len(df) == len(pols) * 3
    assert set(df.columns) >= {"budget", "policy", "metric", "is_baseline", "mean", "ci_low",
                               "ci_high", "n", "ci_over", "diff", "diff_ci_low",
                               "diff_ci_high", "p_value", "p_holm", "significant",
                               "direction", "rank_biserial", "cohen_dz", "wins", "ties",
                               "losses", "n_pairs"}
    assert df.loc[df["is_baseline"], "p_value"].isna().all()
    other = df[~df["is_baseline"]]
    assert other["p_holm"].to_numpy() == pytest.approx(holm(other["p_value"].to_numpy()),
                                                       nan_ok=True)
    md = cmp.to_markdown()
    lines = md.strip().splitlines()
    assert lines[0] == "| policy | utility | recall | stale_rate |"
    assert len(lines) == 2 + len(pols)
    assert lines[2].startswith(f"| {cmp.baseline} |")
    detail = cmp.to_markdown(detail=True)
    assert "difference [95% CI]" in detail and "win/tie/loss" in detail
    tex = cmp.to_latex(label="tab:cmp")
    assert tex.startswith(r"\begin{table}") and r"\label{tab:cmp}" in tex
    assert r"stale\_rate" in tex and tex.count(r"\\") == 1 + len(pols)
    assert "<table" in cmp._repr_html_()
    # marks agree with the tests
    for _, r in other.iterrows():
        row = next(ln for ln in lines if ln.startswith(f"| {r['policy']} |"))
        cell = row.split("|")[2 + cmp.metrics.index(r["metric"])]
        assert ("▲" in cell) == (r["direction"] == "better")
        assert ("▼" in cell) == (r["direction"] == "worse")


def test_at_a_glance_leads_with_utility_share_old_recall_and_stale_notes(plain_run):
    md = (plain_run.path / "report.md").read_text(encoding="utf-8")
    glance = md.split("## At a glance", 1)[1].split("## ", 1)[0]
    items = [ln for ln in glance.splitlines() if ln.startswith("- ")]
    assert 2 <= len(items) <= 4
    assert "gives the most of the achievable utility: utility_share" in items[0]
    assert "days old" in items[1] and "harm" in items[2]
    for it in items[:3]:  # each with its number, interval and reading of the test
        assert re.search(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", it), it
        assert "Holm correction over" in it or "not tested" in it


def test_significance_says_which_correction_decides(plain_run):
    cmp = compare(plain_run)
    row = cmp.tests.iloc[0].copy()
    row["diff_ci_low"], row["diff_ci_high"], row["p_holm"] = 0.01, 0.05, 0.07
    text = cmp.significance(row)
    assert text == (f"the 95% CI excludes 0, but after Holm correction over "
                    f"{cmp.n_comparisons} comparisons p = 0.07: not significant")
    row["p_holm"] = 0.0001
    assert cmp.significance(row).startswith("significant: the 95% CI excludes 0")
    assert "p < 0.001" in cmp.significance(row)


def test_summary_columns_have_one_number_of_decimals(plain_run):
    table = compare(plain_run).summary_table()
    for m in table.columns:
        decs = {len(x.group(1)) for cell in table[m]
                for x in re.finditer(r"\d\.(\d+)", cell)}
        assert len(decs) <= 1, (m, decs)
        if m in ("utility_share", "recall", "stale_rate"):
            assert decs == {3}, m


def test_headline_text_fits_a_terminal(plain_run):
    cmp = compare(plain_run)
    text = headline_text(cmp)
    assert text == headline_text(plain_run.path)  # from a folder: the same numbers
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 100
    assert lines[0].split()[:3] == ["policy", "utility", "share"]
    assert "tokens used" in lines[0] and "recall" in lines[0]
    for pol in plain_run.experiment.policies:
        assert any(ln.startswith(pol) for ln in lines)
    # the mark of a policy follows the paired test of utility_share
    for pol in cmp.policies[1:]:
        value, after = next(ln for ln in lines if ln.startswith(pol))[len(pol):].split()[:2]
        mark = MARKS[cmp.test_row(pol, "utility_share")["direction"]]
        assert float(value) >= 0 and (after == mark if mark else after not in ("▲", "▼"))
    assert "Holm-adjusted" in text
    narrow = headline_text(cmp, width=80, ascii=True)
    assert max(len(ln) for ln in narrow.splitlines()) <= 80
    assert narrow.isascii()


@pytest.fixture(scope="module")
def one_policy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    exp = out / "one.toml"
    exp.write_text('[experiment]\nreplicates = 1\n[workload]\nhorizon_days = 20\n'
                   'backfill_days = 10\n[policies.a]\npreset = "hivemind"\n')
    assert cli_main(["run", str(exp), "--out", str(out / "runs")]) == 0
    return next((out / "runs").iterdir())


def test_a_single_policy_run_reports_nothing_to_compare(one_policy_run, capsys):
    md = (one_policy_run / "report.md").read_text(encoding="utf-8")
    assert "nothing to compare against" in md
    assert "| a | " in md and "utility_share" in md
    text = headline_text(one_policy_run)
    assert "nothing to compare against" in text and "(baseline)" not in text
    cmp = compare(one_policy_run)
    assert len(cmp.tests) == 0 and cmp.n_comparisons == 0
    assert cmp.tests["p_value"].dtype == np.float64
    assert cli_main(["report", str(one_policy_run)]) == 0


def _damage(folder: Path, how: str) -> tuple[str, str]:
    """Damage a copy of a run folder; return the name of the damaged file and
    what else the error must name ("" if nothing)."""
    if how == "manifest-list":
        (folder / "manifest.json").write_text("[1, 2]")
        return "manifest.json", ""
    if how == "config-garbage":
        (folder / "config.toml").write_bytes(b"\x00\xff[[[ not = toml =\n")
        return "config.toml", ""
    if how == "store-columns":
        pd.DataFrame({"x": [1]}).to_parquet(folder / "store.parquet")
        return "store.parquet", "'t'"
    if how == "arms-columns":
        (folder / "arms.csv").write_text("x,y\n1,2\n")
        return "arms.csv", "'replicate'"
    if how == "arms-companion":  # a prefilter's overlap without its sample count
        arms = pd.read_csv(folder / "arms.csv").assign(prefilter_overlap=0.9)
        arms.to_csv(folder / "arms.csv", index=False)
        return "arms.csv", "'prefilter_sampled'"
    q = folder / "queries.parquet"
    if how == "queries-truncated":
        q.write_bytes(q.read_bytes()[: q.stat().st_size // 2])
    elif how == "queries-columns":
        pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(q)
    elif how == "queries-metric":  # one metric column gone: the ratio's numerator
        pd.read_parquet(q).drop(columns=["utility"]).to_parquet(q)
        return "queries.parquet", "'utility'"
    elif how == "queries-deleted":  # from a folder whose manifest says completed
        q.unlink()
        return "queries.parquet", "completed"
    return "queries.parquet", ""


@pytest.mark.parametrize("how", ["manifest-list", "config-garbage", "queries-truncated",
                                 "queries-columns", "queries-metric", "queries-deleted",
                                 "store-columns", "arms-columns", "arms-companion"])
def test_cli_report_on_a_damaged_folder_prints_one_line(one_policy_run, tmp_path, capsys, how):
    folder = tmp_path / "run"
    shutil.copytree(one_policy_run, folder)
    name, also = _damage(folder, how)
    capsys.readouterr()
    assert cli_main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memsim: error: "), err
    assert str(folder / name) in lines[0] and also in lines[0] and "Traceback" not in err


def test_the_loader_requires_the_columns_every_run_writes(one_policy_run):
    """load_run refuses a file without a column its readers need: every
    metric, and the columns every run writes (so no fresh folder is refused)."""
    from memsim.evaluation.metrics import METRIC_COLUMNS, SUPERSEDED_USE_COLUMNS
    from memsim.reporting.rundir import REQUIRED_COLUMNS

    assert set(METRIC_COLUMNS) <= set(REQUIRED_COLUMNS["queries.parquet"])
    assert set(SUPERSEDED_USE_COLUMNS) <= set(REQUIRED_COLUMNS["arms.csv"])
    run = load_run(one_policy_run)
    for name, frame in (("queries.parquet", run.queries), ("store.parquet", run.store),
                        ("arms.csv", run.arms)):
        assert set(REQUIRED_COLUMNS[name]) <= set(frame.columns), name


def test_only_a_completed_run_must_hold_its_queries(one_policy_run, tmp_path):
    """A completed run without queries.parquet is damaged (load_run names the
    file); a running or failed one says it has none yet."""
    from memsim.reporting.rundir import RunFolderError

    for status in ("completed", "running", "failed"):
        folder = tmp_path / status
        shutil.copytree(one_policy_run, folder)
        (folder / "queries.parquet").unlink()
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest.update(status=status, pid=os.getpid())  # a live writer: still running
        (folder / "manifest.json").write_text(json.dumps(manifest))
        if status == "completed":
            with pytest.raises(RunFolderError, match=re.escape(str(folder / "queries.parquet"))):
                load_run(folder)
            continue
        assert load_run(folder).queries is None
        build_report(folder)
        assert "no queries.parquet (yet)" in (folder / "report.md").read_text()
    # memsim advise's folder is completed and has none of its own: not a
    # run folder (its advice is advice.json), as memsim report says too
    advised = tmp_path / "completed"
    (advised / "advice.json").write_text("{}")
    with pytest.raises(RunFolderError, match="a folder of memsim advise, not a run folder"):
        load_run(advised)


def test_a_queries_table_without_a_ratio_column_is_a_memsim_error(plain_run):
    """utility_share's missing column: one line on the command line (a
    MemsimError), still the KeyError that utility_share documents."""
    from memsim.core.errors import MemsimError
    from memsim.reporting.stats import utility_share, utility_share_by

    q = plain_run.queries.drop(columns=["utility"])
    for share in (utility_share, utility_share_by):
        with pytest.raises(MemsimError) as info:
            share(q)
        assert isinstance(info.value, KeyError)
        assert str(info.value).startswith("utility_share needs the column 'utility'")


def test_compare_errors(plain_run):
    with pytest.raises(KeyError, match="baseline 'nope'"):
        compare(plain_run, baseline="nope")
    with pytest.raises(KeyError, match="no metric column"):
        compare(plain_run, metrics=["utility", "nope"])
    with pytest.raises(TypeError):
        compare(42)


# ---------------------------------------------------------------------------
# Figures: data preparation by hand, drawing returns the Axes
# ---------------------------------------------------------------------------


def test_recency_curves_same_ages_both_curves(plain_run):
    d = plots.recency_curve_data(plain_run.experiment, ages=[0, 13.5, 365])
    bug = d[d["policy"] == "bug-5pct-per-day"].set_index("age_days")["recency"]
    fix = d[d["policy"] == "half-life-180-floor"].set_index("age_days")["recency"]
    assert bug[365] == pytest.approx(0.95 ** 365)
    assert bug[13.5] == pytest.approx(0.95 ** 13.5)
    assert fix[365] == pytest.approx(0.35 + 0.65 * 0.5 ** (365 / 180))
    # the same from the resolved config of the run folder
    d2 = plots.recency_curve_data(load_run(plain_run.path), ages=[0, 13.5, 365])
    pd.testing.assert_frame_equal(d, d2)
    ax = plots.plot_recency_curves(plots.recency_curve_data(plain_run.experiment))
    assert isinstance(ax, Axes)
    assert "365 d: 7e-09" in ax.get_legend().get_texts()[0].get_text()
    plt.close("all")


def test_concentration_by_hand():
    # one policy, one replicate; windows of 10 days
    q = pd.DataFrame({"replicate": 0, "policy": "p", "budget": 100,
                      "query_id": [1, 2, 3, 4], "t": [1.0, 2.0, 11.0, 12.0]})
    r = pd.DataFrame({"replicate": 0, "policy": "p", "budget": 100,
                      "query_id": [1, 1, 2, 3, 3, 4, 4],
                      "note_id": [7, 8, 7, 7, 9, 7, 8],
                      "packed": True})
    d = plots.concentration_data(r, q, window_days=10, top=1)
    assert list(d["t"]) == [10.0, 20.0]
    assert math.isnan(d["top_share"].iloc[0])  # nothing used before the first window
    # before window 2 note 7 was used twice (the top-1); window 2 packs 7, 9, 7, 8
    assert d["top_share"].iloc[1] == pytest.approx(0.5)
    # counts after window 2: note 7: 4, note 8: 2, note 9: 1
    from memsim.evaluation.metrics import gini
    assert d["gini"].iloc[1] == pytest.approx(gini(np.array([4, 2, 1])))
    store = pd.DataFrame({"replicate": 0, "policy": "p", "budget": 100,
                          "t": [0.0, 30.0], "store_notes": [5, 5], "store_tokens": [1, 1]})
    d = plots.concentration_data(r, q, store, window_days=10, top=1)
    assert d["gini"].iloc[1] == pytest.approx(gini(np.array([4, 2, 1, 0, 0])))
    assert isinstance(plots.plot_concentration(d), Axes)
    plt.close("all")


def test_pareto_front_by_hand():
    t = pd.DataFrame({"number": [0, 1, 2, 3, 4], "values_0": [1.0, 2.0, 3.0, 2.0, 1.0],
                      "values_1": [1.0, 2.0, 5.0, 1.0, 0.5], "state": "COMPLETE"})
    # maximise values_0, minimise values_1: 0 is dominated by 3 (2 >= 1, 1 <= 1)
    d = plots.pareto_data(t, directions=["maximize", "minimize"])
    assert d.set_index("number")["on_front"].to_dict() == {
        0: False, 1: False, 2: True, 3: True, 4: True}
    assert isinstance(plots.plot_pareto_front(d), Axes)
    plt.close("all")


def test_sweep_history_and_importance():
    t = _fake_trials()
    h = plots.sweep_history_data(t, "values_0", "maximize")
    assert len(h) == 29  # the failed trial is left out
    assert np.all(np.diff(h["best"]) >= 0)
    assert h["best"].iloc[-1] == pytest.approx(np.nanmax(t["values_0"]))
    imp = pd.DataFrame({"objective": "0", "param": ["policies.fix.decay.floor",
                                                    "policies.fix.decay.half_life_days"],
                        "importance": [0.1, 0.9]})
    assert not hasattr(plots, "param_importance_data")  # one importance: the sweep's fANOVA
    assert isinstance(plots.plot_sweep_history(h), Axes)
    assert isinstance(plots.plot_param_importance(imp), Axes)
    plt.close("all")


def test_figure_functions_return_axes(budget_run, plain_run):
    q = budget_run.queries
    fig, ax = plt.subplots()
    assert plots.plot_budget_curve(plots.budget_curve_data(q, "utility"), ax) is ax
    d = plots.age_recall_data(q, 1500)
    assert set(d["budget"]) == {1500} and (d["ci_low"] <= d["mean"]).all()
    assert isinstance(plots.plot_age_recall(d), Axes)
    dist = plots.distribution_data(q, "recall", 1500)
    assert np.isfinite(dist["value"]).all()
    assert isinstance(plots.plot_distribution(dist), Axes)
    ot = plots.over_time_data(plain_run.queries, "recall", 10.0)
    assert (ot["low"] <= ot["mean"] + 1e-12).all() and (ot["mean"] <= ot["high"] + 1e-12).all()
    assert isinstance(plots.plot_over_time(ot), Axes)
    wtl = plots.win_tie_loss_data(compare(plain_run).tests)
    assert np.allclose(wtl[["win", "tie", "loss"]].sum(axis=1), 1.0)
    assert isinstance(plots.plot_win_tie_loss(wtl), Axes)
    rm = plots.run_metric_data(plain_run.arms, "recall_gini")
    assert isinstance(plots.plot_run_metric(rm), Axes)
    assert isinstance(plots.plot_store_size(plots.store_size_data(plain_run.store)), Axes)
    # empty frames draw a message instead of failing
    assert isinstance(plots.plot_concentration(plots.concentration_data(None, q)), Axes)
    plt.close("all")


# ---------------------------------------------------------------------------
# Layout: no horizontal overflow at 1400 px; at 420 px figures fit, text still 9 px
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_sweep_run(sweep_only_run, tmp_path_factory):
    """The sweep-only folder with every table a real sweep writes: the
    paired rows, a plateau with a long note, fANOVA importance, sweep.json."""
    d = tmp_path_factory.mktemp("fullsweep") / sweep_only_run.name
    shutil.copytree(sweep_only_run, d)
    shutil.rmtree(d / "figures")
    rob = pd.read_csv(d / "sweep" / "robustness.csv")
    paired = pd.DataFrame({
        "number": [7, 7], "role": "best", "check": "vs-experiment",
        "variant": ["", "a-rather-long-variant-name"], "replicates": "2-3",
        "diff_utility": [0.031, -0.012], "diff_ci_low_utility": [-0.3276, -0.41],
        "diff_ci_high_utility": [0.3893, 0.39], "excludes_0_utility": False,
        "verdict_utility": "no difference shown"})
    pd.concat([rob, paired], ignore_index=True).to_csv(d / "sweep" / "robustness.csv",
                                                        index=False)
    keys = ["policies.fix.decay.half_life_days", "policies.fix.decay.floor",
            "policies.fix.packer"]
    pd.DataFrame({"objective": "utility", "param": keys, "importance": [0.8, 0.15, 0.05]}
                 ).to_csv(d / "sweep" / "importance.csv", index=False)
    pd.DataFrame({"objective": "utility", "param": keys[:2], "best": [120.0, 0.3],
                  "low": [20.0, 0.0], "high": [400.0, 0.6], "choices": "", "n_plateau": 12,
                  "n_trials": 19, "edge_warning": [True, False], "edge": ["high", ""],
                  "warning": ["best policies.fix.decay.half_life_days = 120 lies in the top "
                              "5% of its range", ""],
                  "note": ["the plateau spans the range: the objective hardly depends on this "
                           "parameter within the replicate noise", ""]}
                 ).to_csv(d / "sweep" / "plateau.csv", index=False)
    (d / "sweep" / "sweep.json").write_text(json.dumps({
        "study": "s-00000000", "identity": "00000000", "storage": "journal:sweep/journal.log"}))
    build_report(d)
    return d


_LAYOUT = """<script>
window.addEventListener("load", function () {
  var w = window.innerWidth, wide = [], clipped = [], scales = [], shown = [];
  function scrolls(e) {  // inside a box that scrolls sideways on its own
    for (var p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") return true;
    }
    return false;
  }
  var els = document.body.getElementsByTagName("*");
  for (var i = 0; i < els.length; i++) {
    var r = els[i].getBoundingClientRect();
    if ((r.width > w + 0.5 || r.right > w + 0.5) && (STRICT || !scrolls(els[i])))
      wide.push(els[i].tagName + ":" + Math.round(r.width));
  }
  var boxes = document.querySelectorAll(".scroll, figure");
  for (var j = 0; j < boxes.length; j++)
    if (boxes[j].scrollWidth > boxes[j].clientWidth + 1) clipped.push(boxes[j].tagName);
  for (var k = 0; k < document.images.length; k++) {
    var im = document.images[k];
    scales.push((im.getBoundingClientRect().width / im.naturalWidth).toFixed(4));
  }
  var figs = document.querySelectorAll("figure");  // PNG px : shown px : its box's px
  for (var f = 0; f < figs.length; f++) {
    var fi = figs[f].querySelector("img");
    if (fi) shown.push(fi.naturalWidth + ":" + fi.getBoundingClientRect().width.toFixed(1)
                       + ":" + figs[f].clientWidth);
  }
  REPORT("inner=" + w + "|scroll=" + document.documentElement.scrollWidth + "|wide="
         + wide.join(",") + "|clipped=" + clipped.join(",") + "|scales=" + scales.join(",")
         + "|figures=" + shown.join(",")REPORTED);
});
</script>"""


def _layout(report: Path, tmp: Path, width: int) -> dict[str, str]:
    """Render ``report`` ``width`` CSS px wide in headless Chromium and measure it.

    At 1400 px the window is that wide. Chromium keeps a headless window at
    least 500 px wide, so a narrower width is an iframe of that width in a
    page (the report posts its measures to the page, which Chromium dumps).
    """
    tmp.mkdir(parents=True, exist_ok=True)
    page = tmp / "report.html"
    if width >= 500:
        script = _LAYOUT.replace("STRICT", "true").replace(
            "REPORT(", 'document.body.setAttribute("data-layout", ')
        script = script.replace("REPORTED", "")
        page.write_text(report.read_text(encoding="utf-8").replace("<head>", "<head>" + script,
                                                                    1), encoding="utf-8")
        target, size = page, f"{width},1000"
    else:
        script = _LAYOUT.replace("STRICT", "false").replace("REPORT(",
                                                            'parent.postMessage("*" + ')
        script = script.replace("REPORTED", ', "*"')
        page.write_text(report.read_text(encoding="utf-8").replace("<head>", "<head>" + script,
                                                                    1), encoding="utf-8")
        target, size = tmp / "frame.html", "1000,1000"
        target.write_text(
            '<!DOCTYPE html><html><head><meta charset="utf-8"><title>frame</title></head><body>'
            f'<iframe src="report.html" style="width:{width}px;height:900px;border:0"></iframe>'
            '<script>window.addEventListener("message", function (e) {'
            'document.body.setAttribute("data-layout", String(e.data).slice(1)); });</script>'
            "</body></html>", encoding="utf-8")
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={tmp / 'profile'}", f"--window-size={size}",
           "--hide-scrollbars", "--virtual-time-budget=5000", "--dump-dom", target.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'data-layout="([^"]*)"', res.stdout)
    assert m, res.stdout[-1000:]
    import html

    return dict(part.split("=", 1) for part in html.unescape(m.group(1)).split("|"))


@needs_chromium
@pytest.mark.parametrize("run_dir", ["plain", "full_sweep"])
def test_report_at_1400px_has_no_horizontal_overflow(run_dir, plain_run, full_sweep_run,
                                                     tmp_path):
    report = (plain_run.path if run_dir == "plain" else full_sweep_run) / "report.html"
    m = _layout(report, tmp_path, 1400)
    assert m["inner"] == "1400"
    assert int(m["scroll"]) <= 1400, m
    assert m["wide"] == "", f"elements wider than the 1400 px viewport: {m['wide']}"
    # no table (the paired tests, the plateau) hidden behind its own scrollbar
    assert m["clipped"] == "", m
    # figures at their own size (825 px for 7.5 in at 110 dpi), not stretched
    assert all(abs(float(s) - 1.0) < 0.01 for s in m["scales"].split(",")), m
    assert all(f.split(":")[0] == str(round(7.5 * 110)) for f in m["figures"].split(",")), m


@needs_chromium
@pytest.mark.parametrize("run_dir", ["plain", "full_sweep"])
def test_report_at_420px_keeps_figure_text_at_9px(run_dir, plain_run, full_sweep_run, tmp_path):
    report = (plain_run.path if run_dir == "plain" else full_sweep_run) / "report.html"
    m = _layout(report, tmp_path, 420)
    assert m["inner"] == "420"
    assert int(m["scroll"]) <= 420, m  # the page itself never scrolls sideways
    assert m["wide"] == "", m          # only boxes that scroll on their own may be wider
    # the smallest text is plots.SMALLEST_PT points at 110 dpi in the PNG
    smallest_px = plots.SMALLEST_PT * 110 / 72
    for s in m["scales"].split(","):
        assert float(s) * smallest_px >= 9.0, m["scales"]
    # each figure is its narrow PNG (4.5 in at 110 dpi), shown whole: no figure
    # box scrolls sideways
    figures = [tuple(map(float, f.split(":"))) for f in m["figures"].split(",")]
    assert figures, m
    for natural, shown, box in figures:
        assert shown <= box + 0.5, m["figures"]
        assert natural == round(4.5 * 110), m["figures"]
        assert shown / natural * smallest_px >= 9.0, m["figures"]


def test_figure_text_is_never_smaller_than_9pt(plain_run, full_sweep_run, tmp_path,
                                               monkeypatch):
    """Every text of every figure the report draws (wide and narrow) is at
    least SMALLEST_PT."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    sizes: dict[str, float] = {}
    save = Figure.draw  # savefig and a render without savefig both draw

    def recording(fig, *a, **kw):
        out = save(fig, *a, **kw)
        for t in fig.findobj(Text):
            if t.get_visible() and t.get_text().strip():
                sizes[t.get_text()] = t.get_fontsize()
        return out

    monkeypatch.setattr(Figure, "draw", recording)
    for src in (plain_run.path, full_sweep_run):
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        build_report(dst)
    assert len(sizes) > 50
    small = {t: s for t, s in sizes.items() if s < plots.SMALLEST_PT}
    assert small == {}


def test_sweep_report_shows_one_importance_the_slice_and_how_to_open_the_study(full_sweep_run):
    md = (full_sweep_run / "report.md").read_text(encoding="utf-8")
    names = {f.stem for f in (full_sweep_run / "figures").glob("*.png")}
    assert {"sweep_importance", "sweep_slice_0"} <= names
    assert "fANOVA" in md and "Spearman" not in md and "eta squared" not in md
    assert md.count("![Parameter importance") == 1  # one importance figure
    journal = (full_sweep_run / "sweep" / "journal.log").absolute()
    assert f"optuna-dashboard {journal}" in md
    assert f"JournalFileBackend('{journal}')" in md
    assert "identity 00000000" in md


def test_slice_plot_log_axis_has_plain_ticks_and_one_panel_per_parameter():
    t = _fake_trials()
    d = plots.slice_data(t, "values_0", log={"policies.fix.decay.half_life_days": True})
    assert set(d["param"]) == {"policies.fix.decay.half_life_days", "policies.fix.decay.floor",
                               "policies.fix.packer"}
    assert d.attrs["kind"]["policies.fix.packer"] == "categorical"
    assert d["best"].sum() == 3  # one best trial, in each of the three panels
    fig = plt.figure(figsize=(7.5, 6.6), layout="constrained")
    axes = plots.plot_slice(d, fig)
    assert len(axes) == 3
    log_ax = axes[0]
    assert log_ax.get_xscale() == "log"
    labels = [lab.get_text() for lab in log_ax.get_xticklabels()]
    assert labels and all(re.fullmatch(r"[0-9.]+", lab) for lab in labels), labels
    assert 2 <= len(labels) <= 6
    fig.canvas.draw()
    # no two tick labels of a panel overlap
    for ax in axes:
        boxes = [lab.get_window_extent() for lab in ax.get_xticklabels() if lab.get_text()]
        for a, b in zip(boxes, boxes[1:]):
            assert not a.overlaps(b), [lab.get_text() for lab in ax.get_xticklabels()]
    plt.close("all")


def test_report_breaks_utility_down_by_category_and_actor(tmp_path):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "cat", "replicates": 1},
        "workload": {"horizon_days": 15.0, "backfill_days": 15.0},
        "policies": {"a": {"preset": "hivemind"}, "b": {"preset": "similarity-only"}}})
    res = memsim.run_experiment(exp, out=tmp_path)
    md = (res.path / "report.md").read_text()
    q = res.queries
    assert "## Per category" in md and "## Per actor" in md
    # each category's row holds that category's pooled share
    from memsim.reporting.stats import utility_share
    cat = q["category"].dropna().iloc[0]
    mine = q[(q["category"] == cat) & (q["policy"] == "a")]
    assert f"| {cat} | {len(mine)} | {utility_share(mine):.3f} |" in md


def test_a_run_where_no_note_fits_the_budget_shows_n_a_and_ends_normally(tmp_path, capsys):
    """A budget below every note: utility_share is NaN for every policy. The
    headline shows n/a (it once raised a KeyError: pivot_table dropped the
    all-NaN column), the command prints the run folder, the report's first
    sentence names no winner."""
    exp = tmp_path / "tiny_budget.toml"
    trace = ROOT / "experiments" / "traces" / "example.jsonl"
    exp.write_text(f'[experiment]\nname = "tiny-budget"\nreplicates = 1\nbudget_tokens = 10\n'
                   f'candidates = 20\n[workload]\nsource = "{trace.as_posix()}"\n'
                   'importer = "trace"\n[policies.today]\npreset = "as-logged"\n'
                   '[policies.sim]\npreset = "similarity-only"\n')
    capsys.readouterr()
    assert cli_main(["run", str(exp), "--out", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out.splitlines()
    folder = Path(out[-1])
    assert folder.is_dir()
    cmp = compare(folder)
    assert "answer_prob" in cmp.metrics  # the order-only check looks at the table
    assert cmp.summary.loc[cmp.summary["metric"] == "utility_share", "mean"].isna().all()
    sim = next(line for line in out if line.startswith("sim"))
    assert sim.split()[1] == "n/a"  # the utility share column
    assert "n/a" in headline_text(cmp) and "n/a" in cmp.to_markdown()
    md = (folder / "report.md").read_text(encoding="utf-8")
    assert "- utility_share is n/a for every policy: no query has an achievable utility" in md
    assert "gives the most of the achievable utility" not in md
    assert cli_main(["report", str(folder)]) == 0
