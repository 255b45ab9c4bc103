"""``memsim report RUN_DIR``: a self-contained HTML report (and Markdown) of a run.

The report is rebuilt from the run folder's files only (``config.toml``,
``manifest.json``, ``queries.parquet``, ``arms.csv``, ``store.parquet``,
``rankings.parquet``, ``sweep/trials.csv``), never from memory, so it can be
regenerated at any time and says exactly what the files say. It writes:

* ``report.html``: one file, every figure embedded as a base64 PNG, no script
  and no external resource (it opens offline and renders in a headless
  browser without console errors);
* ``report.md``: the same tables, figures referenced from ``figures/``;
* ``figures/*.png``.

Sections, each present only when the files support it:

1. the comparison with the baseline in a few sentences (numbers computed);
2. the summary table: each policy's mean and 95% interval per metric, with
   significance marks (see :mod:`memsim.reporting.compare`);
3. the paired tests: difference [95% CI], p-values (raw and Holm-adjusted),
   rank-biserial effect, win/tie/loss counts;
4. figures: recency curves over the same ages, wins/ties/losses, recall by age
   bucket, utility against the token budget (several budgets), per-query
   distributions, metrics over time, the feedback loop (concentration of use,
   recall Gini, store size);
5. a sweep's history, fANOVA parameter importance, slice plot, Pareto front, plateaus
   and how to open its study (``sweep/``), and
   any PNG figures Optuna left there;
6. provenance: manifest and resolved configuration.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
import shlex
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.reporting import plots
from memsim.reporting.compare import Comparison, compare, header_html, markdown_table
from memsim.core.errors import ConfigError, MemsimError, ReportWarning
from memsim.core.params import as_path
from memsim.policies import REGISTRY, SLOTS, assumptions, resolve_policy
from memsim.evaluation.metrics import (AGE_BUCKET_COLUMNS, AGE_BUCKETS, HIGHER_IS_BETTER, OLD_AGE_DAYS,
                      OLD_RECALL_COLUMN)
from memsim.reporting.rundir import RunResult, load_run, summary_rows, write_atomic
from memsim.reporting.stats import (N_BOOT, SEED, column_decimals, format_fixed, summarise,
                    utility_share, utility_share_by)

__all__ = ["build_report", "ReportFigure"]

_DPI = 110
#: Every figure is drawn twice: this wide (inches) and, for small screens,
#: this narrow, at the same dpi and text sizes (see the layout note at _CSS).
_WIDE_IN, _NARROW_IN = 7.5, 4.5
#: The widest screen (CSS px) that is shown the narrow renderings.
_NARROW_SCREEN_PX = 640


@dataclass
class ReportFigure:
    """A figure of the report: its file name, title, caption and PNG bytes.

    Figures are described while the report's content is built and drawn
    afterwards, all in one pass (:meth:`render`), so that building a report
    can say how many figures are left. Each is drawn ``size`` inches (``png``:
    wide screens, ``figures/``, report.md) and again 4.5 in wide, as tall as
    it needs (``narrow_png``: small screens, in report.html only); a PNG read
    from elsewhere has no narrow rendering.
    """

    name: str
    title: str
    caption: str
    png: bytes = b""
    error: str = ""
    draw: Callable[[Any], Any] | None = field(default=None, repr=False, compare=False)
    size: tuple[float, float] = (_WIDE_IN, 4.2)
    panels: bool = False
    narrow_png: bytes = b""

    def render(self) -> ReportFigure:
        """Draw the figure on a fresh Figure (no pyplot state), save it, make
        it narrow (:func:`_fit_narrow`) and save it again, keeping both PNGs'
        bytes; a figure that fails keeps its error and warns, and the rest of
        the report stands.

        A single-Axes figure is narrowed as it is, resized (its data are not
        computed twice); a figure of panels is drawn anew at the narrow width,
        which may arrange its panels otherwise (:func:`plots.plot_slice`).
        """
        if self.draw is None or self.png or self.error:
            return self
        try:
            wide = self._figure(self.size)
            png, height = _png(wide), _axes_height(wide)
            narrow = self._figure((_NARROW_IN, self.size[1])) if self.panels else wide
            narrow.set_size_inches(_NARROW_IN, self.size[1])
            narrow.set_dpi(_DPI)  # measured at the PNG's dpi: what is measured is saved
            _fit_narrow(narrow, height)
            self.png, self.narrow_png = png, _png(narrow, laid_out=True)
        except Exception as exc:  # one broken figure must not hide the rest of the report
            warnings.warn(f"report figure {self.name!r} failed: {type(exc).__name__}: {exc}",
                          ReportWarning, stacklevel=2)
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.draw = None
        return self

    def _figure(self, size: tuple[float, float]) -> Any:
        # matplotlib is imported on the first figure only: reading a run folder
        # (and importing memsim) must not pay for it
        from matplotlib.figure import Figure

        fig = Figure(figsize=size, layout="constrained")
        self.draw(fig if self.panels else fig.add_subplot())
        return fig


def _png(fig: Any, *, laid_out: bool = False) -> bytes:
    """The figure as PNG bytes at _DPI; ``laid_out``: the figure is at _DPI and
    laid out already (:func:`_fit_narrow`), so it is only rendered (savefig
    would lay it out again, which costs about as much as rendering it)."""
    buf = io.BytesIO()
    if laid_out:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig).print_png(buf)
    else:
        fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _axes_height(fig: Any) -> float:
    """Inches of plot: the heights of the figure's visible Axes, added up (as
    laid out by its last draw)."""
    return sum(ax.get_position().height for ax in fig.axes if ax.get_visible()) \
        * fig.get_figheight()


#: How matplotlib's constrained layout says a figure had no room for its Axes.
_COLLAPSED = "constrained_layout not applied"


def _fit_narrow(fig: Any, axes_height: float) -> None:
    """Fit a figure drawn for a wide screen to its narrow width, text sizes
    unchanged.

    Titles and axis labels wrap at spaces where they would stick out of the
    figure; a legend that is not inside its Axes goes below the figure
    (:func:`_legend_below`); overlapping x tick labels turn
    (:func:`_turn_tick_labels`); and the figure's height is set so that its
    plots have ``axes_height`` inches (the wide figure's) give or take a
    tenth, but never below its wide height, so that narrowing never squeezes
    a plot. The figure is left laid out, its layout engine off, to be
    rendered as it is. Each layout pass costs about as much as rendering the
    figure, so there are as few as can be: one when nothing needs changing.
    """
    for t in [*fig.texts, *(x for ax in fig.axes
                            for x in (ax.title, ax.xaxis.label, ax.yaxis.label))]:
        t.set_wrap(True)  # a text that fits stays on one line
    layout = fig.get_layout_engine().execute  # places everything, draws nothing
    with warnings.catch_warnings(record=True) as caught:
        # a legend beside the plot may leave the narrow figure no room for its
        # Axes; this pass measures the text, the legend goes below, and a
        # collapsed figure is laid out again below (which warns if it still is)
        warnings.simplefilter("always")
        layout(fig)
    collapsed = False
    for w in caught:
        if _COLLAPSED in str(w.message):
            collapsed = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    lowest, changed = fig.get_figheight(), collapsed
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and leg.get_visible() and _sticks_out(leg, ax.bbox):
            leg = _legend_below(fig, leg)
            # room for it before the next layout, which would collapse without
            fig.set_figheight(fig.get_figheight() + leg.get_window_extent().height / fig.dpi)
            changed = True
        changed = _turn_tick_labels(ax) or changed
    for _ in range(3):  # a layout short of room keeps the old positions: measure again
        if changed:
            layout(fig)
        height = max(lowest, fig.get_figheight() + axes_height - _axes_height(fig))
        if abs(height - fig.get_figheight()) <= 0.1 * axes_height:
            break  # near enough: another layout pass is not worth its time
        fig.set_figheight(height)
        changed = True
    else:
        layout(fig)
    fig.set_layout_engine("none")  # rendering keeps the positions of the last layout


def _sticks_out(artist: Any, frame: Any) -> bool:
    b = artist.get_window_extent()
    return b.x0 < frame.x0 + 1 or b.x1 > frame.x1 - 1 or b.y0 < frame.y0 + 1 \
        or b.y1 > frame.y1 - 1


def _legend_below(fig: Any, leg: Any) -> Any:
    """Move an Axes' legend below the figure: three entries a row, one if
    that is wider than the figure, its labels wrapped at spaces if one is
    still too wide (a legend's columns are fixed when it is made, so moving
    it is making it anew)."""
    handles, labels = leg.legend_handles, [t.get_text() for t in leg.texts]
    size = leg.texts[0].get_fontsize() if leg.texts else None
    room = fig.bbox.width - 4
    for ncols in (3, 1, 1):
        leg.remove()
        leg = fig.legend(handles, labels, loc="outside lower center",
                         ncols=min(len(labels), ncols), fontsize=size)
        width = leg.get_window_extent().width
        if width <= room:
            break
        if ncols == 1:
            text = max(t.get_window_extent().width for t in leg.texts)
            chars = max(len(x) for x in labels) * (room - width + text) / text
            labels = [textwrap.fill(x, max(12, int(chars)), break_long_words=False)
                      for x in labels]
    return leg


def _turn_tick_labels(ax: Any) -> bool:
    """Turn an Axes' x tick labels where they overlap: 30 degrees if that
    parts them, else upright; whether they overlapped."""
    boxes = sorted((lab.get_window_extent() for lab in ax.get_xticklabels()
                    if lab.get_visible() and lab.get_text().strip()), key=lambda b: b.x0)
    pairs = list(zip(boxes, boxes[1:]))
    if not any(a.x1 + 2 > b.x0 for a, b in pairs):
        return False
    step = min((b.x0 + b.x1 - a.x0 - a.x1) / 2 for a, b in pairs)
    # labels turned by an angle stand step * sin(angle) apart
    angle = 30 if step * 0.5 >= max(b.height for b in boxes) + 2 else 90
    ax.tick_params(axis="x", labelrotation=angle)
    for lab in ax.get_xticklabels():
        lab.set_horizontalalignment("right" if angle < 90 else "center")
        lab.set_rotation_mode("anchor" if angle < 90 else "default")
    return True


@dataclass
class _Report:
    title: str
    intro: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    sections: list[tuple[str, list[Any]]] = field(default_factory=list)


# --------------------------------------------------------------------------
# Drawing helpers
# --------------------------------------------------------------------------


def _draw(name: str, title: str, caption: str, draw: Callable[[Any], Any],
          size: tuple[float, float] = (7.5, 4.2), panels: bool = False) -> ReportFigure:
    """A figure to draw later (:meth:`ReportFigure.render`); ``draw`` gets the
    figure's one Axes, or the Figure itself with ``panels``."""
    return ReportFigure(name, title, caption, draw=draw, size=size, panels=panels)


# --------------------------------------------------------------------------
# Building the content
# --------------------------------------------------------------------------


class _Glance:
    """Formats a Comparison's numbers at one budget for the At a glance sentences,
    each at its table column's decimals."""

    def __init__(self, cmp: Comparison, budget: Any):
        self.cmp, self.budget = cmp, budget
        s = cmp.summary
        self.s = s[s["budget"] == budget].set_index(["policy", "metric"])
        self.dec = cmp.decimals()

    def has(self, metric: str) -> bool:
        return metric in self.cmp.metrics

    def mean(self, pol: str, metric: str) -> float:
        return float(self.s.loc[(pol, metric), "mean"]) if (pol, metric) in self.s.index \
            else float("nan")

    def value(self, pol: str, metric: str) -> str:
        """``mean [lo, hi]`` of a policy."""
        if (pol, metric) not in self.s.index:
            return "n/a"
        r = self.s.loc[(pol, metric)]
        return format_fixed(r["mean"], r["ci_low"], r["ci_high"], self.dec.get(metric, 3))

    def diff(self, pol: str, metric: str) -> float:
        r = self.cmp.test_row(pol, metric, self.budget)
        return float("nan") if r is None else float(r["diff"])

    def versus(self, pol: str, metric: str) -> str:
        """``pol``'s value against the baseline's, then the difference and
        how its interval and test read, in parentheses."""
        cmp = self.cmp
        text = (f"{self.value(pol, metric)} against {self.value(cmp.baseline, metric)} for "
                f"the baseline '{cmp.baseline}'")
        r = cmp.test_row(pol, metric, self.budget)
        if r is None or int(r["n_pairs"]) == 0:
            return text
        dec = self.diff_decimals(metric)
        diff = format_fixed(r["diff"], r["diff_ci_low"], r["diff_ci_high"], dec, signed=True)
        return f"{text} (difference {diff}; {cmp.significance(r)})"

    def diff_decimals(self, metric: str) -> int:
        """The decimals the paired differences of ``metric`` print with."""
        cmp = self.cmp
        t = cmp.tests[(cmp.tests["budget"] == self.budget) & (cmp.tests["metric"] == metric)]
        return column_decimals(metric, t["diff"], t["diff_ci_low"], t["diff_ci_high"],
                               default=self.dec.get(metric, 3))


def _glance_sentences(cmp: Comparison, budget: Any,
                      buckets: pd.DataFrame | None = None,
                      bounds: dict[str, str] | None = None) -> list[str]:
    """Two to four plain sentences a reader can act on, each with its numbers.

    1. which policy gets the most of the achievable utility (utility_share),
       with its paired difference to the baseline; policies whose means are
       exactly equal at the top are said to tie, not one of them to win;
    2. how it recalls the relevant notes at least 90 days old;
    3. the stale notes it packs (harm, stale_rate);
    4. with more than two policies, every policy's utility_share.

    Sentences 2 and 3 compare the best policy other than the baseline (the
    contender) with the baseline; an interval and a Holm-corrected test that
    disagree are both reported (:meth:`Comparison.significance`).
    ``buckets`` (summary rows of the old ``recall_age_*`` buckets at this
    budget) adds the recall of each old bucket to sentence 2.
    ``bounds`` (policy -> what its figures are, :func:`_reads_hidden_labels`)
    are the policies whose ranker reads hidden labels: no real system can run
    them, so they are never the winner or the contender; sentence 1 names them
    as a bound, and sentence 4 marks them.
    """
    g = _Glance(cmp, budget)
    base = cmp.baseline
    share = "utility_share" if g.has("utility_share") else None
    if len(cmp.policies) < 2:
        out = [f"Only one policy ('{base}'): nothing to compare against."]
        if share:
            out.append(f"It gets {g.value(base, share)} of the achievable utility "
                       "(utility_share: sum of utility / sum of the oracle's).")
        return out
    bounds = {p: w for p, w in (bounds or {}).items() if p in cmp.policies and p != base}
    others = [p for p in cmp.policies if p != base and p not in bounds]
    key = share or (cmp.metrics[0] if cmp.metrics else None)
    if key is None:
        return []
    sign = 1.0 if HIGHER_IS_BETTER.get(key, True) else -1.0

    def score(p: str) -> float:  # larger is better; a policy without a value comes last
        v = sign * g.mean(p, key)
        return v if math.isfinite(v) else -math.inf
    ranked = sorted(cmp.policies, key=score, reverse=True)  # stable: ties keep table order
    # the upper bounds are no candidates: a policy that reads hidden labels
    # would "win" every run it is in
    candidates = [p for p in ranked if p not in bounds]
    contender = max(others, key=score) if others else None
    what = "the most of the achievable utility" if share else f"the best {key}"
    measured = any(math.isfinite(g.mean(p, key)) for p in cmp.policies)
    top = [p for p in candidates if score(p) == score(candidates[0])]
    if not measured:
        # all n/a (no query with an achievable utility, e.g. a budget below
        # every note): ranking would name a winner that nothing supports
        first = (f"{key} is n/a for every policy"
                 + (": no query has an achievable utility (no relevant note fits the "
                    "budget), so no policy gives more of it." if share else
                    ": nothing to rank the policies by."))
    elif contender is None:
        first = (f"Every other policy reads hidden labels, so none is ranked against the "
                 f"baseline '{base}' ({key} {g.value(base, key)}).")
    elif len(top) > 1 and math.isfinite(score(top[0])):
        # an exact tie: naming one of them "the most" would be the table's order speaking
        names = [f"the baseline '{p}'" if p == base else f"'{p}'" for p in top]
        names_text = ", ".join(names[:-1]) + " and " + names[-1]
        each = format_fixed(g.mean(top[0], key), dec=g.dec.get(key, 3))
        first = (names_text[0].upper() + names_text[1:]
                 + f" tie for {what} ({key} {each} each): '{contender}' gets {key} "
                 + g.versus(contender, key) + ".")
    elif candidates[0] == base:
        first = (f"The baseline '{base}' gives {what}; the best other policy, '{contender}', "
                 f"gets {key} " + g.versus(contender, key) + ".")
    else:
        first = (f"'{contender}' gives {what}: {key} " + g.versus(contender, key) + ".")
    if measured and bounds:
        first += (" Left out of this choice, since "
                  + ("they read" if len(bounds) > 1 else "it reads")
                  + " hidden labels no real system has: "
                  + ", ".join(f"'{p}' ({w}, {key} {g.value(p, key)})"
                              for p, w in bounds.items()) + ".")
    if share and measured:
        first += (" utility_share = sum of utility / sum of the oracle's (the best packing "
                  "of the relevant notes), over the queries where a relevant note fits.")
    out = [first]
    if contender is None:
        return out
    if g.has(OLD_RECALL_COLUMN):
        sent = (f"Of the relevant notes at least {OLD_AGE_DAYS} days old, '{contender}' packs "
                + g.versus(contender, OLD_RECALL_COLUMN))
        if buckets is not None and len(buckets):
            b = buckets.set_index(["policy", "metric"])["mean"]
            parts = [f"{m.removeprefix('recall_age_').replace('_inf', '+').replace('_', '-')} d "
                     f"{format_fixed(b.get((contender, m), np.nan))} vs "
                     f"{format_fixed(b.get((base, m), np.nan))}"
                     for m in pd.unique(buckets["metric"])]
            sent += "; by age bucket, " + ", ".join(parts)
        out.append(sent + ".")
    elif g.has("recall"):
        out.append(f"No relevant note was {OLD_AGE_DAYS} days old or more, so the run says "
                   f"nothing about old notes; recall of '{contender}': "
                   + g.versus(contender, "recall") + ".")
    if g.has("harm"):
        # in words as the difference prints: +0.000 is as much, not more
        d = round(g.diff(contender, "harm"), g.diff_decimals("harm"))
        more = "more" if d > 0 else "less" if d < 0 else "as much"
        stale = (f"; share of packed notes that are stale {g.value(contender, 'stale_rate')} "
                 f"against {g.value(base, 'stale_rate')}" if g.has("stale_rate") else "")
        out.append(f"Stale notes: '{contender}' packs {more} stale content, harm (sum of "
                   "|gain| of the packed notes with negative gain, per query) "
                   + g.versus(contender, "harm") + stale + ".")
    if len(cmp.policies) > 2 and measured:
        out.append(f"Every policy by {key}: "
                   + ", ".join(f"'{p}' {format_fixed(g.mean(p, key), dec=g.dec.get(key, 3))}"
                               + (" (reads hidden labels)" if p in bounds else "")
                               for p in ranked) + ".")
    return out


def _after_colon(sentence: str) -> str:
    """A sentence as it reads after "At N tokens: ": its first word in lower
    case (a capital that only starts the sentence; "LoCoMo" keeps its own)."""
    if len(sentence) > 1 and sentence[0].isupper() and not sentence[1].isupper():
        return sentence[0].lower() + sentence[1:]
    return sentence


def _old_buckets(ctx: _Context) -> pd.DataFrame | None:
    """Summary rows (point estimates) of the recall_age buckets at or past
    90 days at the focus budget; None when the run has none of them."""
    cols = [c for c, (lo, _) in zip(AGE_BUCKET_COLUMNS, AGE_BUCKETS) if lo >= OLD_AGE_DAYS
            and c in ctx.q and np.isfinite(ctx.q[c].to_numpy(np.float64)).any()]
    if not cols or len(ctx.policies) < 2:
        return None
    q = ctx.q[ctx.q["budget"] == ctx.focus]
    # the summary's estimator (mean over replicates of per-replicate means);
    # only the point estimates are shown: summary.csv's, else no resampling
    stored = summary_rows(ctx.run.summary, q, cols)
    return stored if stored is not None else summarise(q, metrics=cols, n_boot=1,
                                                       seed=ctx.seed)


def _focus_budget(run: RunResult, budgets: list) -> Any:
    """The budget shown in single-budget figures: the experiment's default
    budget if it is among the budgets, else the middle one."""
    cfg = run.config.get("experiment", {})
    b = cfg.get("budget_tokens")
    if b in budgets:
        return b
    return sorted(budgets)[len(budgets) // 2] if budgets else None


#: what ``arms.csv``'s ``prefilter_overlap`` is, in the report and ``memsim run``
PREFILTER_OVERLAP_WORDS = (
    "prefilter_overlap: the share of the exact nearest-M candidates that the policy's "
    "approximate index (the hnsw or ivf retriever) returned, on up to 200 sampled queries per "
    "replicate (1: it lost none; a note tied with the M-th nearest counts as one of them); "
    "n/a for an exact retriever.")


def prefilter_overlap_line(arms: pd.DataFrame | None) -> str | None:
    """One line on the recall loss of the run's approximate prefilters
    (``arms.csv``'s ``prefilter_overlap``, averaged over replicates and
    budgets, per policy); None when no policy has one."""
    if arms is None or "prefilter_overlap" not in arms:
        return None
    got = arms[arms["prefilter_sampled"] > 0]
    if not len(got):
        return None
    means = got.groupby("policy", sort=False)["prefilter_overlap"].mean()
    return ("Approximate index (hnsw, ivf) vs the exact nearest M, share of the exact candidates "
            "returned (up to 200 sampled queries per replicate): "
            + ", ".join(f"{pol} {v:.3f}" for pol, v in means.items()) + ".")


def _run_table(run: RunResult, replays: bool = False) -> pd.DataFrame | None:
    """The per-run measures of ``arms.csv`` and the final store size, each
    ``mean [interval over replicates]``; with ``replays`` (the replicates
    replay one stream) the mean over the replays alone."""
    arms = run.arms
    if arms is None or len(arms) == 0:
        return None
    rows = []
    metrics = [m for m in ("recall_gini", "evicted_notes", "promoted_notes",
                           "prefilter_overlap") if m in arms]
    store = run.store
    if store is not None and len(store):
        last = store.sort_values("t").groupby(["replicate", "policy", "budget"]).last()
        arms = arms.merge(last[["store_notes", "store_tokens"]].reset_index(),
                          on=["replicate", "policy", "budget"], how="left")
        metrics += ["store_notes", "store_tokens"]
    for m in metrics:
        d = plots.run_metric_data(arms, m, replays=replays)
        # one number of decimals per column (3 for recall_gini, a share), as
        # in every other table (docs/contracts/metrics.md, "Printed decimals")
        dec = column_decimals(m, d["mean"], d["ci_low"], d["ci_high"])
        for _, r in d.iterrows():
            rows.append({"budget": r["budget"], "policy": r["policy"], "metric": m,
                         "value": format_fixed(r["mean"], r["ci_low"], r["ci_high"], dec)})
    if not rows:
        return None
    df = pd.DataFrame(rows)
    wide = df.pivot_table(index=["budget", "policy"], columns="metric", values="value",
                          aggfunc="first", sort=False).reset_index()
    wide.columns.name = None
    if wide["budget"].nunique() <= 1:
        wide = wide.drop(columns="budget")
    return wide[[c for c in ["budget", "policy"] + metrics if c in wide.columns]]


@dataclass
class _Context:
    """What the sections and figures about a run's queries share."""

    run: RunResult
    q: pd.DataFrame
    cmp: Comparison
    policies: list[str]
    budgets: list
    baseline: str
    focus: Any
    colors: dict[str, str]
    span: float  # simulated days from the first query to the last
    window: float
    n_boot: int
    seed: int
    #: the policies this environment cannot build, and why (:func:`_unresolved`)
    unresolved: dict[str, str]

    @property
    def at_focus(self) -> str:
        """" (at N tokens)" when the run has several budgets, else ""."""
        return f" (at {self.focus} tokens)" if len(self.budgets) > 1 else ""


def _context(run: RunResult, n_boot: int, seed: int) -> _Context:
    q = run.queries
    policies = [str(p) for p in pd.unique(q["policy"])]
    budgets = sorted(pd.unique(q["budget"]).tolist())
    baseline = run.baseline or policies[0]
    if baseline not in policies:
        baseline = policies[0]
    span = float(q["t"].max() - q["t"].min()) if "t" in q and len(q) else 0.0
    # the run folder's summary.csv holds the summary's intervals: not resampled again
    return _Context(run=run, q=q, cmp=compare(q, baseline=baseline, n_boot=n_boot, seed=seed,
                                              summary=run.summary),
                    policies=policies, budgets=budgets, baseline=baseline,
                    focus=_focus_budget(run, budgets), colors=plots.policy_colors(policies),
                    span=span, window=_window(span), n_boot=n_boot, seed=seed,
                    unresolved=_unresolved(run.policies))


def _run_sentence(ctx: _Context) -> str:
    """The report's opening sentence: policies, streams, queries, budgets."""
    q, budgets = ctx.q, ctx.budgets
    n = len(ctx.policies)
    per_rep = q.groupby("replicate")["query_id"].nunique()
    if ctx.cmp.replays:
        # replays of one stream are one workload: its own queries, counted once
        streams = (f"one stream replayed in each of {ctx.cmp.replays} replicates (every "
                   f"policy sees it: common random numbers), {int(per_rep.iloc[0])} queries")
    else:
        streams = (f"{int(q['replicate'].nunique())} replicate stream(s) (every policy sees "
                   f"the same stream: common random numbers), {per_rep.sum()} queries in all")
    return (f"{n} polic{'y' if n == 1 else 'ies'}, {streams}, "
            f"{_budget_words(q, budgets)}; baseline '{ctx.baseline}'.")


def _budget_words(q: pd.DataFrame, budgets: list) -> str:
    """The budgets as a reader should read them. An arm labelled budget 0 takes
    each query's own budget from the stream (``budget_tokens``): say so, with
    their spread, rather than "budget 0 tokens"."""
    words = []
    for b in budgets:
        real = q.loc[q["budget"] == b, "budget_tokens"] if "budget_tokens" in q else None
        if b == 0 and real is not None and len(real) and (real != 0).any():
            lo, mid, hi = (float(x) for x in np.nanpercentile(real, [0, 50, 100]))
            words.append(f"per-query budgets from the stream (min-median-max "
                         f"{lo:,.0f}-{mid:,.0f}-{hi:,.0f} tokens)")
        else:
            words.append(f"{b} tokens")
    if len(words) == 1:
        return "budget " + words[0] if not words[0].startswith("per-query") else words[0]
    return "budgets " + ", ".join(words)


def _breakdown_sections(ctx: _Context) -> list[tuple[str, list[Any]]]:
    """Utility share per query category, and the worst-served actor, at the
    focus budget: a mean over everything can hide who or what loses."""
    q = ctx.q[ctx.q["budget"] == ctx.focus] if "budget" in ctx.q else ctx.q
    out: list[tuple[str, list[Any]]] = []
    if "category" in q and q["category"].nunique() > 1 and "oracle_utility" in q:
        share = utility_share_by(q, ("category", "policy")).unstack("policy")
        share = share.reindex(columns=[p for p in ctx.policies if p in share.columns])
        first = q[q["policy"] == ctx.policies[0]]
        # queries as the opening sentence counts them: a replayed stream's once
        n = (first.groupby("category")["query_id"].nunique() if ctx.cmp.replays
             else first.groupby("category").size())
        table = share.map(lambda x: "n/a" if not np.isfinite(x) else f"{x:.3f}")
        table.insert(0, "queries", n.reindex(table.index).fillna(0).astype(int))
        out.append(("Per category", [
            ("p", "utility_share per query category (the trace's tag, the LoCoMo category or "
                  f"the synthetic class asked){ctx.at_focus}, over all replicates; n/a where "
                  "no relevant "
                  "note fits the budget (e.g. unanswerable questions)."),
            ("table", table.reset_index())]))
    if "actor" in q and q["actor"].nunique() > 1 and "oracle_utility" in q:
        per = utility_share_by(q, ("policy", "actor"))
        rows = []
        for pol in ctx.policies:
            if pol not in per.index.get_level_values(0):
                continue
            s = per.loc[pol].dropna()
            if len(s):
                mean = utility_share(q[q["policy"] == pol])
                rows.append({"policy": pol, "utility_share (all)": f"{mean:.3f}",
                             "worst actor": str(s.idxmin()), "its utility_share": f"{s.min():.3f}",
                             "best actor": str(s.idxmax()), "its share": f"{s.max():.3f}"})
        if rows:
            out.append(("Per actor", [
                ("p", "The actor each policy serves worst and best (utility_share over that "
                      f"actor's queries){ctx.at_focus}: a policy can win on average and fail "
                      "one user."),
                ("table", pd.DataFrame(rows))]))
    return out


def _reads_hidden_labels(tables: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's policies whose ranker reads what no real system knows, and
    what their figures are: the true gains bound every policy; the planted
    model (``bayes``) gives a ranking near the best, not a bound."""
    out = []
    for name, table in tables.items():
        try:
            ranker = resolve_policy(table, f"policies.{name}").ranker
        except MemsimError:  # a policy of a plugin not loaded here: nothing to say
            continue
        if ranker.needs_truth:
            out.append((name, "an upper bound"))
        elif getattr(ranker, "needs_planted", False):
            out.append((name, "a reference near the best ranking"))
    return out


def _unresolved(tables: dict[str, Any]) -> dict[str, str]:
    """The run's policies that cannot be built in this environment, each with
    why in words: a component that is not registered here (a plugin's, not
    installed in this environment), else the error itself."""
    out = {}
    for name, table in tables.items():
        try:
            resolve_policy(table, f"policies.{name}")
        except MemsimError as exc:
            out[name] = _why_unresolved(table, exc)
    return out


def _why_unresolved(table: Any, exc: Exception) -> str:
    """Why a policy table cannot be built here: the components it names that
    are not registered (REGISTRY, after resolve_policy has loaded the
    installed plugins), else the error's message."""
    missing = []
    if isinstance(table, dict):
        for slot in SLOTS:
            spec = table.get(slot)
            kind = spec.get("kind") if isinstance(spec, dict) else spec
            if isinstance(kind, str) and kind not in REGISTRY.get(slot, {}):
                missing.append(f"'{kind}' ({slot})")
    if not missing:
        return f"it cannot be built here ({exc})"
    return (f"its component{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"{'are' if len(missing) > 1 else 'is'} not registered in this environment (a "
            "plugin that is not installed here?)")


def _per_run_unit(ctx: _Context) -> str:
    """What the per-run table's intervals are: none over the replays of one
    stream, none with one replicate, else over the replicates."""
    cmp, arms = ctx.cmp, ctx.run.arms
    if cmp.replays > 0:
        # replays of one stream are not samples of anything: no interval over them
        return (f"Mean over the {cmp.replays} replays of one stream, with no interval "
                "(one replayed stream: its replicates differ at most by a policy's own "
                "randomness, not by the workload).")
    if arms is not None and "replicate" in arms and arms["replicate"].nunique() <= 1:
        return "One replicate: each value is that replicate's, with no interval."
    return "Intervals over replicates (Student t with fewer than 5)."


def _table_sections(ctx: _Context) -> list[tuple[str, list[Any]]]:
    """At a glance, the summary, the paired comparisons and the per-run measures."""
    cmp = ctx.cmp
    bounds = dict(_reads_hidden_labels(ctx.run.policies))
    glance = _glance_sentences(cmp, ctx.focus, _old_buckets(ctx), bounds)
    if len(ctx.budgets) > 1:
        glance = [f"At {ctx.focus} tokens: " + _after_colon(s) for s in glance]
    sections = [("At a glance", [("list", glance)] if glance else
                 [("p", "The queries table has no metric to summarise.")]),
                ("Summary", [("p", cmp.legend()), ("cmp", cmp)]
                 + [("p", f"'{name}' reads hidden labels: {what}, not achievable "
                          "headroom (the best a policy can reach is what `memsim advise` "
                          "finds).") for name, what in bounds.items()])]
    if len(cmp.tests):
        sections.append(("Paired comparisons with the baseline", [
            ("p", "Difference = policy - baseline on the same queries (paired on replicate "
                  "and query). p: two-sided Wilcoxon signed-rank test; p (Holm): adjusted "
                  "over every row of this table. Rank-biserial: +1 if the policy is higher "
                  "on every pair, -1 if lower; d_z: mean difference over its standard "
                  "deviation. Win/tie/loss count queries in the metric's own direction "
                  "(better/equal/worse); for a cost with no better direction, such as "
                  "tokens used, higher/equal/lower. "
                  "Baseline and policy mean are over the pairs, the queries where both "
                  "have a value: they may differ from the summary's means."),
            ("cmp-detail", cmp)]))
    sections += _breakdown_sections(ctx)
    sections += _hidden_section(ctx)
    run_tab = _run_table(ctx.run, cmp.replays > 0)
    if run_tab is not None:
        unit = _per_run_unit(ctx)
        sections.append(("Per-run measures", [
            ("p", "Measured once per replicate at the end of the run: recall_gini is the "
                  "Gini coefficient of recall counts over the notes that exist (1: all use "
                  "on one note; 0: even); store size after evictions. " + unit
                  + (" " + PREFILTER_OVERLAP_WORDS
                     if "prefilter_overlap" in run_tab.columns else "")),
            ("table", run_tab)]))
    elif ctx.run.path is not None and not (Path(ctx.run.path) / "arms.csv").is_file():
        sections.append(("Per-run measures", [
            ("p", "Not shown: the run folder has no arms.csv (recall_gini, evictions and "
                  "promotions per replicate), which these measures are read from.")]))
    # a policy this environment cannot build (a plugin's component, not
    # installed here) still has its results: only its assumptions are unknown
    unresolved = ctx.unresolved
    marks = [(name, key, why) for name, table in ctx.run.policies.items()
             if name not in unresolved for key, why in assumptions(table).items()]
    if marks or unresolved:
        sections.append(("Assumed parameters", [
            ("p", "Values the presets' sources do not give, which memsim supplied "
                  "(memsim.policies.assumptions). Results that depend on them are only as "
                  "good as these guesses.")]
            + ([("table", pd.DataFrame(marks, columns=["policy", "parameter", "why assumed"]))]
               if marks else [])
            + [("p", f"The assumptions of '{name}' cannot be listed: {why}.")
               for name, why in unresolved.items()]))
    return sections


def _hidden_section(ctx: _Context) -> list[tuple[str, list[Any]]]:
    """"What your decay hid": the oracle's notes each policy left out, by reason."""
    d = plots.hidden_data(ctx.q, ctx.focus)
    if not len(d) or not (d["oracle_per_query"] > 0).any():
        return []
    table = pd.DataFrame({"policy": d["policy"],
                          "oracle notes / query": d["oracle_per_query"].map(lambda x: f"{x:.2f}"),
                          "hidden": d["hidden"].map(_share)})
    labels = {"age": "by age (outranked)", "cut": "by cut (similarity)", "budget": "by budget",
              "evicted": "by eviction", "invalid": "by invalidation"}
    for reason in ("age", "cut", "budget", "evicted", "invalid"):
        table[labels[reason]] = d[f"hidden_{reason}"].map(_share)
    arms = ctx.run.arms
    unmarked = []
    if (arms is not None and len(arms) and "superseded_notes" in arms
            and (arms["superseded_notes"] == 0).all() and (arms["invalidated_notes"] > 0).any()):
        unmarked = [("p", "No note of this stream is marked as superseded (no superseded_at "
                          "column, no superseding class): an invalidation retention can only "
                          "over-fire here, and every note it invalidates is a false positive. "
                          "What it costs shows in the 'by invalidation' column.")]
    return [("What your decay hid", unmarked + [
        ("p", "Of the notes the oracle packs (the best subset of the relevant notes within "
              "the budget), the share each policy did not pack" + ctx.at_focus + ", by the "
              "first reason that holds: invalidated, evicted (or expired), a candidate the "
              "packer left out (budget), outranked by a less similar note (age: the score's "
              "recency or other terms pushed it below the top C), or less similar than "
              "every candidate (cut). Sums over every query and replicate; the per-query "
              "counts are the hidden_* columns of queries.parquet; with save_rankings = "
              "\"hidden\", rankings.parquet names each note with its reason."),
        ("table", table)])]


def _share(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.3f}"


def _comparison_figures(ctx: _Context) -> list[ReportFigure]:
    """Recency curves, wins/ties/losses and recall by age."""
    q, cmp, colors, config = ctx.q, ctx.cmp, ctx.colors, ctx.run.config
    figs = []
    if config.get("policies"):
        # a policy this environment cannot build has no curve to draw: the others do
        unresolved = ctx.unresolved
        drawn = {"policies": {n: t for n, t in ctx.run.policies.items() if n not in unresolved}}

        def _rec(ax):
            d = plots.recency_curve_data(drawn, max_age=_max_age(config, q))
            plots.plot_recency_curves(d, ax, colors)
        figs.append(_draw(
            "recency_curves", "Recency curves over the same ages",
            "The multiplier each policy applies to a never-used note as it ages, over the "
            "same ages for every policy (the legend gives the values at 30, 180 and 365 "
            "days)." + "".join(f" Not drawn: '{n}', {why}." for n, why in unresolved.items()),
            _rec))
    if len(ctx.policies) > 1 and len(cmp.tests):
        # at most ~40 bars: with many policies, fewer metrics per policy
        per = max(1, 40 // (len(ctx.policies) - 1))
        shown = [m for m in ("utility", "recall", OLD_RECALL_COLUMN, "harm", "stale_rate",
                             "answer_prob", "ndcg@10", "precision", "mrr")
                 if m in cmp.metrics][:per]
        wtl = plots.win_tie_loss_data(cmp.tests[cmp.tests["metric"].isin(shown)], ctx.focus)
        figs.append(_draw(
            "win_tie_loss", "Wins, ties and losses",
            f"Share of paired queries where each policy is better than, equal to or worse "
            f"than '{ctx.baseline}'" + ctx.at_focus
            + "; ▲/▼ mark significant differences after Holm's correction over the whole "
            "paired table.",
            lambda ax: plots.plot_win_tie_loss(wtl, ax),
            size=(7.5, max(2.5, 0.32 * len(wtl) + 1.4))))
    figs.append(_draw(
        "recall_by_age", "Recall by age of the relevant note",
        "Share of the relevant notes of each age that were packed, with 95% intervals"
        + ctx.at_focus + ". A benchmark whose notes all have age 0 only sees the first bucket.",
        lambda ax: plots.plot_age_recall(
            plots.age_recall_data(q, ctx.focus, n_boot=ctx.n_boot, seed=ctx.seed,
                                  summary=ctx.run.summary), ax,
            colors)))
    return figs


def _query_figures(ctx: _Context) -> list[ReportFigure]:
    """Budget curves, per-query distributions and metrics over time."""
    q, colors, focus, window = ctx.q, ctx.colors, ctx.focus, ctx.window
    figs = []
    if len(ctx.budgets) > 1:
        for metric in ("utility", "recall"):
            if metric in q:
                figs.append(_draw(
                    f"budget_{metric}", f"{metric} against the token budget",
                    f"Mean {metric} at each budget with its 95% band.",
                    lambda ax, m=metric: plots.plot_budget_curve(
                        plots.budget_curve_data(q, m, n_boot=ctx.n_boot, seed=ctx.seed), ax,
                        colors)))
    for metric in ("utility", "recall"):
        if metric in q and np.isfinite(q[metric].to_numpy(float)).any():
            figs.append(_draw(
                f"distribution_{metric}", f"Distribution of {metric} over queries",
                f"Empirical CDF of the per-query {metric}{ctx.at_focus} (dashed: the "
                "mean).",
                lambda ax, m=metric: plots.plot_distribution(
                    plots.distribution_data(q, m, focus), ax, colors)))
    for metric in ("recall", "stale_rate"):
        if metric in q and np.isfinite(q[metric].to_numpy(float)).any() and ctx.span > 0:
            figs.append(_draw(
                f"over_time_{metric}", f"{metric} over time",
                f"{metric}{ctx.at_focus} averaged over {window:g}-day windows of simulated "
                "time, each marked at the middle of the part of it the queries span (a "
                "first or last window the run covers in part is drawn within it); the band "
                "spans the replicates.",
                lambda ax, m=metric: plots.plot_over_time(
                    plots.over_time_data(q, m, window, focus), ax, colors)))
    return figs


def _feedback_figures(ctx: _Context) -> list[ReportFigure]:
    """The feedback loop (concentration of use, recall Gini) and the store size."""
    q, colors, focus, window = ctx.q, ctx.colors, ctx.focus, ctx.window
    rankings, arms, store = ctx.run.rankings, ctx.run.arms, ctx.run.store
    figs = []
    if rankings is not None and len(rankings) and "packed" in rankings:
        conc = None

        def _conc():
            nonlocal conc  # computed once, for the two figures that share it
            if conc is None:
                conc = plots.concentration_data(rankings, q, store, window_days=window,
                                                top=10, budget=focus)
            return conc
        figs.append(_draw(
            "feedback_top_share", "Feedback loop: share taken by the most-used notes",
            f"For each {window:g}-day window{ctx.at_focus}, the share of packed slots that "
            "went to the 10 notes packed most often before the window. Rising towards 1: "
            "the same notes keep winning.",
            lambda ax: plots.plot_concentration(_conc(), ax, colors, "top_share", top=10)))
        figs.append(_draw(
            "feedback_gini", "Feedback loop: concentration of use",
            "Gini coefficient of the cumulative number of times each note was packed"
            + ctx.at_focus + " (never-packed notes of the store count as zeros).",
            lambda ax: plots.plot_concentration(_conc(), ax, colors, "gini")))
    # replays of one stream: per-run values get no interval over the replays
    replays = ctx.cmp.replays > 0
    if arms is not None and "recall_gini" in arms and len(arms):
        # the focus budget's, as every other single-budget figure (not the
        # middle budget plot_run_metric would pick among several)
        gini_arms = arms[arms["budget"] == focus] if (arms["budget"] == focus).any() else arms
        one = "replicate" in arms and arms["replicate"].nunique() <= 1
        figs.append(_draw(
            "recall_gini", "Recall concentration at the end",
            "Gini coefficient of the recall counts over existing notes at the end of the "
            "run (the feedback loop's lock-in)" + ctx.at_focus + ", "
            + ("mean over the replays of one stream, with no interval." if replays
               else "one replicate's value, with no interval." if one
               else "mean over replicates with its interval."),
            lambda ax: plots.plot_run_metric(
                plots.run_metric_data(gini_arms, "recall_gini", replays=replays), ax, colors)))
    sup = plots.superseded_use_data(arms, focus, replays=replays)
    if len(sup):
        if replays:
            # each query of the stream once: the summary's harm and its interval
            s = ctx.cmp.summary
            harm = s[(s["metric"] == "harm") & (s["budget"] == focus)]
        else:
            harm = plots.run_metric_data(
                q[q["budget"] == focus].groupby(["replicate", "policy", "budget"], sort=False)
                ["harm"].mean().reset_index(), "harm") if "harm" in q else None

        def _stale(fig):
            top, bottom = fig.subplots(2, 1, height_ratios=[2, 3])
            plots.plot_run_metric(harm, top, colors)
            top.set_title("harm per query (95% CI over "
                          + ("the stream's queries)" if replays else "replicates)"))
            plots.plot_superseded_use(sup, bottom, colors)
            bottom.set_title("superseded notes still used D days after")
        figs.append(_draw(
            "superseded_use", "Wrong notes: harm and how long they keep being used"
            + ctx.at_focus,
            "Top: harm, the mean |gain| of stale notes packed per query. Bottom: of the "
            "notes a newer note superseded, the share whose last use came at least D days "
            "after (among those superseded at least D days before the last query); each "
            "use also raised the wrong note's recall count (stale_reinforced counts them "
            "per query). "
            + ("One stream replayed in each replicate: harm with its 95% interval over "
               "the stream's queries (each counted once), the shares the mean over the "
               "replays, with no interval." if replays
               else "Means over replicates with 95% intervals."),
            _stale, size=(7.5, 7.5), panels=True))
    if store is not None and len(store) and _store_differs(store):
        figs.append(_draw(
            "store_size", "Store size over time",
            "Live notes in the store" + ctx.at_focus + ", mean over replicates: each "
            "replicate's size is taken at the end of every day, carried forward from its "
            "last query (store sizes are recorded at queries, on days that differ by "
            "replicate), and the line starts on the first day every replicate has one. "
            "Policies that evict level off.",
            lambda ax: plots.plot_store_size(plots.store_size_data(store, focus), ax,
                                             colors)))
    return figs


def _provenance(run_dir: Path, manifest: dict) -> list[Any]:
    prov: list[Any] = [("table", _manifest_table(manifest, run_dir))]
    cfg_text = (run_dir / "config.toml").read_text(encoding="utf-8") \
        if (run_dir / "config.toml").exists() else ""
    if cfg_text:
        prov.append(("pre", ("Resolved configuration (config.toml)", cfg_text)))
    return prov


#: What each ``[workload] embedder`` is (memsim.data.embed), for the report's intro.
_EMBEDDERS = {"bm25": "exact BM25 over the text, per namespace",
              "wordllama": "WordLlama l2_supercat, 256-d dense vectors of the text",
              "vectors": "the vectors logged in the trace"}


def _embedder_sentence(config: dict) -> str:
    """Which vectors scored similarity, for a run on imported data (else "")."""
    wl = config.get("workload") or {}
    if not isinstance(wl, dict) or "source" not in wl:
        return ""
    name = wl.get("embedder")
    if name is None and wl.get("importer") == "locomo":
        name = "bm25"
    if name is None:
        return ("Embedder: the trace's logged vectors, else exact BM25 over the text."
                if wl.get("importer") == "trace" else
                "Embedder: the vectors stored in the stream folder.")
    return f"Embedder: {name} ({_EMBEDDERS.get(str(name), 'unknown')})."


def _content(run_dir: Path, run: RunResult, n_boot: int, seed: int) -> _Report:
    manifest = run.manifest or {}
    exp = run.config.get("experiment", {})
    name = exp.get("name") or manifest.get("name") or run_dir.name
    rep = _Report(title=f"memsim report: {name}")
    if exp.get("description"):
        rep.intro.append(f"What the experiment asks: {exp['description']}.".replace("..", "."))
    if _embedder_sentence(run.config):
        rep.intro.append(_embedder_sentence(run.config))
    if manifest.get("status") == "failed":
        rep.alerts.append(f"This run FAILED ({manifest.get('error', 'no error recorded')}); "
                          "the tables below use whatever files it left.")
    q = run.queries
    figs: list[ReportFigure] = []
    if q is not None and len(q):
        ctx = _context(run, n_boot, seed)
        rep.intro.append(_run_sentence(ctx))
        if prefilter_overlap_line(run.arms):
            rep.intro.append(prefilter_overlap_line(run.arms))
        rep.sections += _table_sections(ctx)
        figs = _comparison_figures(ctx) + _query_figures(ctx) + _feedback_figures(ctx)
    elif q is not None:
        rep.alerts.append("The run has no queries: nothing to compare.")
    elif not (run_dir / "sweep").is_dir():
        rep.alerts.append("The run folder has no queries.parquet (yet): nothing to compare.")
    if figs:
        rep.sections.append(("Figures", [("fig", f) for f in figs]))
    sweep_items = _sweep_section(run_dir, run.config, manifest)
    if sweep_items:
        rep.sections.append(("Sweep", sweep_items))
    rep.sections.append(("Provenance", _provenance(run_dir, manifest)))
    return rep


def _max_age(config: dict, q: pd.DataFrame) -> float:
    wl = config.get("workload", {}) or {}
    try:
        span = float(wl.get("horizon_days", 0)) + float(wl.get("backfill_days", 0))
    except (TypeError, ValueError):
        span = 0.0
    if not span and "max_relevant_age" in q:
        v = q["max_relevant_age"].to_numpy(float)
        span = float(np.nanmax(v)) if np.isfinite(v).any() else 0.0
    return float(max(365.0, min(span, 3650.0)))


def _window(span: float) -> float:
    """A window that gives about 12-40 points over the simulated span."""
    for w in (1, 7, 14, 30, 60, 90, 180, 365):
        if span / w <= 40:
            return float(w)
    return 365.0


def _store_differs(store: pd.DataFrame) -> bool:
    last = store.sort_values("t").groupby(["replicate", "policy", "budget"])["store_notes"].last()
    return last.groupby(level=["replicate", "budget"]).nunique().max() > 1


def _manifest_table(manifest: dict, run_dir: Path) -> pd.DataFrame:
    rows = [("run folder", run_dir.name)]
    for key in ("status", "started_utc", "finished_utc", "config_hash", "git_commit"):
        if manifest.get(key) is not None:
            rows.append((key, str(manifest[key])))
    for k, v in (manifest.get("versions") or {}).items():
        rows.append((f"version: {k}", str(v)))
    for k, v in (manifest.get("timings_s") or {}).items():
        if isinstance(v, (int, float)):
            rows.append((f"time: {k}", f"{v:.1f} s"))
    return pd.DataFrame(rows, columns=["item", "value"])


def _sweep_meta(config: dict, manifest: dict, trials: pd.DataFrame
                ) -> tuple[list[str], list[str], list[str], list[str] | None]:
    """(objective columns, labels, directions, parameter keys) of a sweep.

    From the sweep manifest (``memsim sweep`` records its objectives,
    directions and parameters), else the ``[sweep]`` table of config.toml,
    else the trials table alone (maximise, unless the objective is a metric
    where lower is better).
    """
    cols, _ = plots.trial_columns(trials)
    labels = [c[len("values_"):] if c.startswith("values_") else c for c in cols]
    rec = (manifest or {}).get("sweep") or {}
    sweep = (config or {}).get("sweep") or {}
    dirs: list[str] = []
    if isinstance(rec.get("directions"), list):
        dirs = [str(d) for d in rec["directions"]]
    elif isinstance(sweep.get("objectives"), list):
        dirs = [str(o.get("direction", "maximize")) for o in sweep["objectives"]
                if isinstance(o, dict)]
    else:
        d = sweep.get("directions", sweep.get("direction"))
        if isinstance(d, list):
            dirs = [str(x) for x in d]
        elif isinstance(d, str):
            dirs = [d] * len(cols)
    names = rec.get("objectives") if isinstance(rec.get("objectives"), list) else None
    if names is None and isinstance(sweep.get("metrics"), list):
        names = sweep["metrics"]
    if names is None and isinstance(sweep.get("metric"), str):
        names = [sweep["metric"]]
    if names and cols == ["value"]:
        labels = [str(names[0])]
    elif names and all(str(c).removeprefix("values_").isdigit() for c in cols):
        labels = [str(n) for n in names[:len(cols)]] + labels[len(names):]
    if len(dirs) < len(cols):
        dirs += ["maximize" if HIGHER_IS_BETTER.get(lab.split("@")[0], True) else "minimize"
                 for lab in labels[len(dirs):]]
    dirs = ["minimize" if str(d).lower().startswith("min") else "maximize"
            for d in dirs[:len(cols)]]
    params = rec.get("params") if isinstance(rec.get("params"), list) else None
    return cols, labels, dirs, params


def _fixed_column(values: pd.Series, metric: str = "", *, signed: bool = False,
                  keep: Any = None) -> list[str]:
    """A sweep table's column of numbers, each with the column's one number of
    decimals (:func:`~memsim.reporting.numbers.column_decimals` from the
    values alone, as metrics.md's "Printed decimals" says; 3 for a share
    ``metric``), never in scientific notation; ``n/a`` for NaN.

    A column that holds anything but numbers (a categorical parameter's
    choices, booleans) is shown as written, a missing value as "". A column
    of integers by type (an integer parameter) gets no decimals. ``keep`` (a
    boolean mask) leaves the rows where it is False empty, and out of the
    choice of decimals.
    """
    values = pd.Series(values).reset_index(drop=True)
    keep = np.ones(len(values), bool) if keep is None else np.asarray(keep, bool)
    if pd.api.types.is_bool_dtype(values.dtype) or not (
            pd.api.types.is_numeric_dtype(values.dtype)
            or pd.to_numeric(values, errors="coerce").notna().eq(values.notna()).all()):
        return ["" if not k or _isnan(x) else str(x) for x, k in zip(values, keep)]
    v = pd.to_numeric(values, errors="coerce").to_numpy(float)
    dec = 0 if pd.api.types.is_integer_dtype(values.dtype) else \
        column_decimals(metric.split("@")[0], v[keep & np.isfinite(v)])
    return [format_fixed(x, dec=dec, signed=signed) if k else "" for x, k in zip(v, keep)]


def _isnan(x: Any) -> bool:
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


#: Objectives that measure a cost (storage, evictions, context tokens): a
#: Pareto front of one of them against a utility puts the cost on the x axis.
COST_OBJECTIVES = ("store_tokens", "store_notes", "evicted_notes", "tokens_used")
#: Most rows of the table of non-dominated trials.
MAX_FRONT_ROWS = 30


def _front_order(labels: list[str]) -> list[int]:
    """Indices of the two objectives a Pareto front is drawn on, x first: a
    cost objective (:data:`COST_OBJECTIVES`) against the other one (utility
    against storage), else the first two in order."""
    first = [i for i in range(min(2, len(labels)))]
    cost = [i for i in first if labels[i].split("@")[0] in COST_OBJECTIVES]
    if len(cost) == 1:
        return [cost[0], 1 - cost[0]]
    return first


def _best_table(trials: pd.DataFrame, cols: list[str], labels: list[str], dirs: list[str],
                params: list[str]) -> pd.DataFrame:
    """The best trial (one objective) or the non-dominated trials on the first
    two objectives (several; at most :data:`MAX_FRONT_ROWS`, best first on the
    objective that is not a cost)."""
    done = plots._complete(trials)
    first = 0
    if len(cols) >= 2:
        front = plots.pareto_data(done, cols[:2], dirs[:2])
        numbers = front.loc[front["on_front"], "number"].tolist()
        rows = done[done["number"].isin(numbers)]
        first = _front_order(labels)[1]
        limit = MAX_FRONT_ROWS
    else:
        v = done[cols[0]].astype(float)
        if not v.notna().any():
            return pd.DataFrame()
        rows = done.loc[[v.idxmax() if dirs[0] == "maximize" else v.idxmin()]]
        limit = 1
    key = rows[cols[first]].astype(float)
    rows = rows.loc[key.sort_values(ascending=dirs[first] != "maximize").index][:limit]
    out = pd.DataFrame({"trial": rows["number"].astype(int).to_numpy()})
    for c, lab in zip(cols, labels):
        out[lab] = _fixed_column(rows[c], lab)
    for p in params:
        # a parameter is no metric: its decimals come from its own values
        out[p.removeprefix("params_")] = _fixed_column(rows[p])
    return out


def _robustness_table(path: Path, labels: list[str]) -> pd.DataFrame | None:
    try:
        rob = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if "check" in rob:
        # the paired rows (winner minus preset) get their own table
        rob = rob[rob["check"] != "vs-experiment"]
    if len(rob) == 0:
        return None
    keep = [c for c in ("number", "role", "check", "variant", "replicates") if c in rob]
    part = rob[keep].astype(object)
    out = part.where(part.notna(), "").rename(columns={"number": "trial"})
    checks = rob["check"].to_numpy() if "check" in rob else np.array([""] * len(rob))
    for lab in labels:
        if f"values_{lab}" in rob:
            out[lab] = _fixed_column(rob[f"values_{lab}"], lab)
        if f"change_{lab}" in rob:
            # the sweep's own rows are what the others change from: left empty
            out[f"change of {lab}"] = _fixed_column(rob[f"change_{lab}"], lab, signed=True,
                                                    keep=checks != "sweep")
    return out


def _paired_table(path: Path, labels: list[str]) -> pd.DataFrame | None:
    """The ``vs-experiment`` rows of ``sweep/robustness.csv``: each winner minus
    the experiment's own parameters on the same fresh replicates. Its
    ``attrs["replayed"]`` says whether an interval is over a replayed
    stream's queries (``ci_over_<objective>``) rather than over replicates."""
    try:
        rob = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if "check" not in rob:
        return None
    rob = rob[rob["check"] == "vs-experiment"]
    if len(rob) == 0:
        return None
    out = pd.DataFrame({
        "trial": rob["number"].to_numpy(), "role": rob["role"].to_numpy(),
        "on": ["fresh seeds" if not isinstance(v, str) or not v else f"variant {v}"
               for v in rob["variant"]],
        "replicates": rob["replicates"].astype(str).to_numpy()})
    for lab in labels:
        cols = [f"diff_{lab}", f"diff_ci_low_{lab}", f"diff_ci_high_{lab}", f"verdict_{lab}"]
        if not all(c in rob for c in cols):
            continue
        d, lo, hi = (pd.to_numeric(rob[c], errors="coerce").to_numpy(float)
                     for c in cols[:3])
        # one number of decimals for the column, from the widths of its
        # intervals (metrics.md, "Printed decimals")
        dec = column_decimals(lab.split("@")[0], d, lo, hi)
        out[f"{lab}: best - preset [95% CI]"] = [
            format_fixed(a, b, c, dec, signed=True) for a, b, c in zip(d, lo, hi)]
        out[f"{lab}: verdict"] = rob[cols[3]].fillna("").astype(str).to_numpy()
        over = rob.get(f"ci_over_{lab}")
        if over is not None and over.isin(["queries", "stream"]).any():
            out.attrs["replayed"] = True
    return out


def _plateau_items(path: Path) -> list[Any]:
    """The plateau table of ``sweep/plateau.csv`` and its edge warnings."""
    try:
        pl = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return []
    need = {"objective", "param", "best", "low", "high", "edge_warning"}
    if len(pl) == 0 or not need <= set(pl.columns):
        return []

    rows = [r for _, r in pl.iterrows()]
    decs = _plateau_decimals(pl)

    def number(x, dec: int) -> str:
        v = pd.to_numeric(pd.Series([x]), errors="coerce").iloc[0]
        return str(x) if pd.isna(v) and not _isnan(x) else format_fixed(v, dec=dec)

    def dec_of(r) -> int:  # a row without a parameter name: its own decimals
        return decs[r["param"]] if r["param"] in decs else column_decimals(
            "", [pd.to_numeric(r["best"], errors="coerce")], [r["low"]], [r["high"]])

    def plateau_of(r) -> str:
        if isinstance(r.get("choices"), str) and r["choices"].startswith("["):
            return r["choices"].strip("[]")  # a JSON list: its values as written
        if not (np.isfinite(r["low"]) and np.isfinite(r["high"])):
            return "not measured"
        return f"[{number(r['low'], dec_of(r))}, {number(r['high'], dec_of(r))}]"

    table = pd.DataFrame({
        "objective": [r["objective"] for r in rows], "parameter": [r["param"] for r in rows],
        "best": [number(r["best"], dec_of(r)) for r in rows],
        "plateau": [plateau_of(r) for r in rows],
        "trials on it": [f"{int(r['n_plateau'])} of {int(r['n_trials'])}"
                         if np.isfinite(r.get("n_plateau", np.nan)) else "" for r in rows],
        "edge": ["WARNING: " + str(r.get("edge", "")) if bool(r["edge_warning"]) else ""
                 for r in rows],
        "note": [r["note"] if isinstance(r.get("note"), str) else "" for r in rows]})
    items: list[Any] = [
        ("p", "How sure the sweep is of each best value. The plateau is the range of a "
              "parameter over the trials whose objective is within the replicate noise of "
              "the best (a paired bootstrap over replicates with the best recomputed in "
              "each resample; it contains the truly best trial with about 95% "
              "probability). A wide plateau means the objective hardly cares; a best "
              "value at an edge of its range means the optimum may lie beyond it."),
        ("table", table)]
    warns = [f"WARNING ({r['objective']}): {r['warning']}" for r in rows
             if bool(r["edge_warning"]) and isinstance(r.get("warning"), str)]
    items += [("warn", w) for w in warns]
    return items


def _plateau_decimals(pl: pd.DataFrame) -> dict[Any, int]:
    """Decimals of each parameter in the plateau table: its rows are
    parameters of different units (a half-life in days, a floor in [0, 1]),
    so no one number of decimals fits the column; each parameter gets one,
    the same for its best value and its plateau on every objective, chosen as
    metrics.md's "Printed decimals" chooses a column's: from the plateau's
    width (:func:`~memsim.reporting.numbers.column_decimals`, the best value
    as the mean and the plateau as its interval). An integer parameter
    (``type`` int) gets none."""
    out: dict[Any, int] = {}
    for param, g in pl.groupby("param", sort=False):
        if "type" in g and (g["type"].astype(str) == "int").all():
            out[param] = 0
            continue
        best, low, high = (pd.to_numeric(g[c], errors="coerce").to_numpy(float)
                           for c in ("best", "low", "high"))
        out[param] = column_decimals("", best, low, high)
    return out


def _draw_fig(name: str, title: str, caption: str, draw: Callable[[Any], Any],
              size: tuple[float, float]) -> ReportFigure:
    """Like :func:`_draw`, for a figure of several panels: ``draw`` gets the Figure."""
    return _draw(name, title, caption, draw, size, panels=True)


def _log_params(config: dict) -> dict[str, bool]:
    """Parameter -> searched on a log scale, from config.toml's ``[sweep.params]``."""
    pars = ((config or {}).get("sweep") or {}).get("params") or {}
    if not isinstance(pars, dict):
        return {}
    return {str(k): bool(v.get("log", False)) for k, v in pars.items() if isinstance(v, dict)}


#: One sentence on the importance the report shows (Optuna's fANOVA).
IMPORTANCE_SENTENCE = (
    "Optuna's fANOVA importance: a random forest is fitted to the completed trials and "
    "each parameter gets the share of the objective's variance it explains on its own "
    "(normalised to sum to 1, seeded with the sweep's seed), so it says which parameters "
    "the objective moved with inside the searched ranges, not in which direction.")


def _importance_items(sdir: Path, labels: list[str]) -> list[Any]:
    """Bars of ``sweep/importance.csv`` (Optuna's fANOVA, written by the sweep),
    one figure per objective (at most three)."""
    try:
        imp = pd.read_csv(sdir / "importance.csv")
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return []
    if not {"objective", "param", "importance"} <= set(imp.columns) or len(imp) == 0:
        return []
    items: list[Any] = []
    objectives = list(dict.fromkeys(imp["objective"].astype(str)))
    objectives.sort(key=lambda o: labels.index(o) if o in labels else len(labels))
    for i, lab in enumerate(objectives[:3]):
        part = imp[imp["objective"].astype(str) == lab]
        items.append(("fig", _draw(
            "sweep_importance" + (f"_{i}" if i else ""), f"Parameter importance for {lab}",
            IMPORTANCE_SENTENCE,
            lambda ax, part=part: plots.plot_param_importance(part, ax),
            size=(7.5, max(2.6, 0.5 * len(part) + 1.6)))))
    return items


def study_access_lines(storage: str, study_name: str, run_dir: Path | None = None,
                       absolute_sqlite: bool = True) -> list[str]:
    """How to open a sweep's study: the ``optuna-dashboard`` command and the
    Python that loads it, for a storage as memsim records it.

    ``journal:PATH`` (relative: to ``run_dir``) gives the journal file's
    absolute path, which optuna-dashboard opens directly (it reads an
    existing file as a journal) and Python opens as
    ``optuna.storages.JournalStorage(JournalFileBackend(PATH))``; an RDB URL
    is given as recorded, a relative SQLite path made absolute, a password
    masked as ``***``; ``memory`` has nothing to open.
    """
    if not storage or storage == "memory":
        return ["the study was kept in memory only (no run folder, no --storage): "
                "nothing to open with optuna-dashboard"]
    name = repr(study_name)
    if storage.startswith("journal:"):
        path = Path(storage[len("journal:"):])
        if not path.is_absolute() and run_dir is not None:
            path = Path(run_dir) / path
        path = path.absolute()
        py = (f"optuna.load_study(study_name={name}, storage=optuna.storages.JournalStorage("
              f"optuna.storages.journal.JournalFileBackend({str(path)!r})))")
        return [f"open the study: optuna-dashboard {shlex.quote(str(path))}   "
                "(pip install optuna-dashboard; it opens a journal file by its path)",
                f"in Python: {py}"]
    url = storage
    m = re.match(r"^(sqlite(?:\+\w+)?:///)(.+)$", url)
    if (absolute_sqlite and m and not m.group(2).startswith("/")
            and not m.group(2).startswith(":memory:")):
        url = m.group(1) + str(Path(m.group(2)).absolute())
    lines = [f"open the study: optuna-dashboard {shlex.quote(url)}   "
             "(pip install optuna-dashboard)",
             f"in Python: optuna.load_study(study_name={name}, storage={url!r})"]
    if "***" in url:
        lines.append("the password is masked: put it in place of *** in both")
    return lines


def _study_items(sdir: Path) -> list[Any]:
    """The report's lines on opening the study, from ``sweep/sweep.json``."""
    try:
        ident = json.loads((sdir / "sweep.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(ident, dict) or not ident.get("storage") or not ident.get("study"):
        return []
    # a relative SQLite path is relative to where the sweep ran, not to here
    lines = study_access_lines(str(ident["storage"]), str(ident["study"]), sdir.parent,
                               absolute_sqlite=False)
    items: list[Any] = [("p", f"Study {ident['study']} (identity {ident.get('identity', '?')}, "
                              "the hash in the run folder's name). Browse it in "
                              "optuna-dashboard or load it in Python:"),
                        ("list", lines)]
    if str(ident["storage"]).startswith("sqlite") and "sqlite:////" not in str(ident["storage"]):
        items.append(("p", "The SQLite path was given relative to the folder the sweep "
                           "was started in: run the command from there."))
    return items


def _sweep_section(run_dir: Path, config: dict, manifest: dict) -> list[Any]:
    """The sweep's section: its trials, how sure it is, and how to open it."""
    sdir = run_dir / "sweep"
    if not sdir.is_dir():
        return []
    items: list[Any] = []
    trials_file = sdir / "trials.csv"
    trials = None
    if trials_file.exists():
        try:
            trials = pd.read_csv(trials_file)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            items.append(("p", f"sweep/trials.csv could not be read: {exc}"))
    else:
        items.append(("p", "The sweep folder has no trials.csv."))
    labels: list[str] = []
    if trials is not None:
        cols, labels, dirs, pkeys = _sweep_meta(config, manifest, trials)
        items += _sweep_trial_items(sdir, config, trials, cols, labels, dirs, pkeys)
    items += _sweep_robustness_items(sdir / "robustness.csv", labels)
    items += _study_items(sdir)
    items += _optuna_pngs(sdir)
    return items


def _sweep_trial_items(sdir: Path, config: dict, trials: pd.DataFrame, cols: list[str],
                       labels: list[str], dirs: list[str], pkeys: list[str]) -> list[Any]:
    """The trials: the best (or the Pareto set), plateaus, history, importance,
    slices and the front."""
    _, params = plots.trial_columns(trials, pkeys)
    done = plots._complete(trials)
    if not cols:
        return [("p", f"{len(trials)} trials; no objective column.")]
    items: list[Any] = [("p", f"{len(trials)} trials, {len(done)} completed; objective"
                         f"{'s' if len(cols) > 1 else ''}: "
                         + ", ".join(f"{lab} ({d})" for lab, d in zip(labels, dirs))
                         + (f"; parameters: {', '.join(p.removeprefix('params_') for p in params)}"
                            if params else "") + ".")]
    best = _best_table(trials, cols, labels, dirs, params)
    if len(best):
        fx, fy = _front_order(labels)[:2] if len(cols) >= 2 else (0, 0)
        items.append(("p", "Best trial" if len(cols) == 1 else
                      f"Pareto set on {labels[fy]} and {labels[fx]}: the "
                      f"{len(best)} non-dominated trial{'s' if len(best) != 1 else ''} "
                      f"({labels[fy]} {dirs[fy]}, "
                      f"{labels[fx]} {dirs[fx]}): no other trial is at least as good "
                      f"on both and better on one. Best first on {labels[fy]}"
                      f"{f'; at most {MAX_FRONT_ROWS}' if len(best) >= MAX_FRONT_ROWS else ''}."))
        items.append(("table", best))
    if (sdir / "plateau.csv").exists():
        items += _plateau_items(sdir / "plateau.csv")
    for i, (c, lab, d) in enumerate(list(zip(cols, labels, dirs))[:3]):
        hist = plots.sweep_history_data(trials, c, d)
        items.append(("fig", _draw(
            f"sweep_history_{i}", f"Sweep history: {lab}",
            f"{lab} of each completed trial and the best so far ({d}).",
            lambda ax, h=hist, lab=lab: plots.plot_sweep_history(h, ax, lab))))
    items += _importance_items(sdir, labels)
    items += _slice_items(trials, cols, labels, dirs, params, _log_params(config))
    if len(cols) >= 2:
        items.append(_pareto_item(trials, cols, labels, dirs))
    return items


def _slice_items(trials, cols, labels, dirs, params, log) -> list[Any]:
    items: list[Any] = []
    for i, (c, lab, d) in enumerate(list(zip(cols, labels, dirs))[:3]):
        others = [(oc, od) for oc, od in zip(cols, dirs) if oc != c]
        sl = plots.slice_data(trials, c, params, log, d, others)
        if len(sl):
            n_par = len(pd.unique(sl["param"]))
            items.append(("fig", _draw_fig(
                f"sweep_slice_{i}", f"Slice plot: {lab}",
                f"{lab} of each completed trial against each parameter (darker: a "
                "later trial; red ring: the best). A parameter whose points form no "
                "pattern hardly matters within its range.",
                lambda fig, sl=sl, lab=lab: plots.plot_slice(sl, fig, lab),
                size=(7.5, 0.6 + 3.0 * math.ceil(n_par / 2)))))
    return items


def _pareto_item(trials, cols, labels, dirs) -> tuple[str, Any]:
    fx, fy = _front_order(labels)[:2]
    par = plots.pareto_data(trials, [cols[fx], cols[fy]], [dirs[fx], dirs[fy]])
    par.attrs["x"], par.attrs["y"] = labels[fx], labels[fy]
    cost = labels[fx].split("@")[0] in COST_OBJECTIVES
    return ("fig", _draw(
        "sweep_pareto", "Pareto front" + (f": {labels[fy]} against {labels[fx]}"
                                          if cost else ""),
        f"Every completed trial on {labels[fy]} ({dirs[fy]}) against "
        f"{labels[fx]} ({dirs[fx]}); red, joined: the non-dominated trials "
        "(the table above)."
        + (" Reading along the front gives the price of each saving: how much "
           f"{labels[fy]} a smaller {labels[fx]} costs." if cost else ""),
        lambda ax: plots.plot_pareto_front(par, ax)))


def _sweep_robustness_items(rob_file: Path, labels: list[str]) -> list[Any]:
    if not rob_file.exists():
        return []
    items: list[Any] = []
    rob = _robustness_table(rob_file, labels)
    if rob is not None:
        items.append(("p", "Robustness check: the best trial(s) and the experiment's own "
                      "parameters re-run on fresh replicate seeds the sweep never saw, and "
                      "on workload variants. A large drop on fresh seeds is overfitting to "
                      "the seeds; on a variant, overfitting to the workload."))
        items.append(("table", rob))
    paired = _paired_table(rob_file, labels)
    if paired is not None and paired.attrs.get("replayed"):
        # the fresh seeds replay one stream: no samples to make an interval over
        items.append(("p", "Does the best beat the published preset? Each winner minus "
                      "the experiment's own parameters on the same seeds (paired). The "
                      "workload is one stream replayed in every replicate, so the seeds "
                      "are replays, not samples: the 95% interval is a bootstrap over the "
                      "stream's queries, each counted once, and on the sweep's own stream "
                      "it is in-sample (the winner was chosen on it, which flatters it); "
                      "'better' or 'worse' when it excludes 0. An objective measured once "
                      "per run has no interval and no verdict."))
        items.append(("table", paired))
    elif paired is not None:
        items.append(("p", "Does the best beat the published preset? Each winner minus "
                      "the experiment's own parameters, replicate by replicate on the "
                      "same fresh seeds (paired), with a 95% Student t interval over "
                      "those replicates; 'better' or 'worse' when it excludes 0."))
        items.append(("table", paired))
    return items


def _optuna_pngs(sdir: Path) -> list[Any]:
    """Any other PNG left in sweep/ (the sweep's own ones are drawn above from
    its files)."""
    items: list[Any] = []
    for png in sorted(sdir.glob("*.png")):
        if png.stem.startswith(("history", "pareto_front", "importance", "slice")):
            continue
        data = png.read_bytes()
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            items.append(("fig", ReportFigure(f"sweep_optuna_{png.stem}",
                                              f"Optuna: {png.stem.replace('_', ' ')}",
                                              f"Drawn by Optuna during the sweep "
                                              f"(sweep/{png.name}).", data)))
    return items


# --------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------

# Layout: the body is at most 1240 px wide, so that the widest table (the
# paired tests, one column per statistic) fits at 1400 px; headers and cells
# wrap at spaces, and a table scrolls (inside its own box, never the page)
# only when the window is narrower than it. Figures are drawn 7.5 in wide
# (825 px) with text of at least 9 pt (plots.SMALLEST_PT, 13.75 px at 110 dpi):
# they are shown at their own size, shrunk to the page, but never below 560 px,
# where their smallest text is still 9 CSS px. A screen at most 640 px wide
# (where the page may be narrower than 560 px) gets each figure's narrow
# rendering instead (a <picture> source): 4.5 in (495 px), the same text sizes,
# shown at its own size or shrunk to the page, never below 330 px (text still
# 9 CSS px); so from 350 px up no figure scrolls sideways, and below that one
# scrolls inside its box. A PNG without a narrow rendering (Optuna's) is shrunk
# the same way on such a screen.
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1240px;padding:0 1em;color:#222;line-height:1.45;font-size:16px}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}
h1,h2,p,li,figcaption{overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.8em 0;font-size:.86em}
th,td{border:1px solid #ddd;padding:.3em .55em;text-align:right;white-space:normal;
vertical-align:top}
th{background:#f4f4f4;overflow-wrap:normal;word-break:normal;hyphens:none}
td:first-child,th:first-child{text-align:left}
table.cmp td:nth-child(-n+2){text-align:left}
.better{color:#1a7f37;font-weight:bold}.worse{color:#c62828;font-weight:bold}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.6em;margin:1em 0}
figure{margin:1.4em 0;overflow-x:auto}
figure picture{display:block}
figure img{display:block;box-sizing:border-box;width:auto;max-width:100%;min-width:560px;
height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#444;max-width:800px}
pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.8em}
.muted{color:#666;font-size:.88em}
.scroll{overflow-x:auto;max-width:100%}.ci{color:#555;font-size:.9em;white-space:nowrap}
@media (max-width:600px){body{margin:1em auto;padding:0 .6em}table{font-size:.8em}}
"""
_CSS += f"@media (max-width:{_NARROW_SCREEN_PX}px){{figure img{{min-width:330px}}}}\n"


def _df_html(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{header_html(c)}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in df.itertuples(index=False))
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def _to_html(rep: _Report) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(rep.title)}</title>",
           # an empty data: icon keeps the browser from asking for /favicon.ico
           '<link rel="icon" href="data:,">',
           f"<style>{_CSS}</style>", "</head>", "<body>", f"<h1>{html.escape(rep.title)}</h1>"]
    for w in rep.alerts:
        out.append(f'<div class="warn">{html.escape(w)}</div>')
    for p in rep.intro:
        out.append(f"<p>{html.escape(p)}</p>")
    for title, items in rep.sections:
        out.append(f"<h2>{html.escape(title)}</h2>")
        for kind, item in items:
            if kind == "p":
                out.append(f'<p class="muted">{html.escape(item)}</p>')
            elif kind == "warn":
                out.append(f'<div class="warn">{html.escape(item)}</div>')
            elif kind == "list":
                out.append("<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in item)
                           + "</ul>")
            elif kind == "cmp":
                out.append(item.to_html())
            elif kind == "cmp-detail":
                out.append(item.to_html(detail=True))
            elif kind == "table":
                out.append(_df_html(item))
            elif kind == "pre":
                label, text = item
                out.append(f"<details><summary>{html.escape(label)}</summary>"
                           f"<pre>{html.escape(text)}</pre></details>")
            elif kind == "fig":
                out.append(_fig_html(item))
    out += ['<p class="muted">Built by memsim report from the run folder\'s files.</p>',
            "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _fig_html(f: ReportFigure) -> str:
    if f.error or not f.png:
        return (f'<div class="warn">Figure "{html.escape(f.title)}" could not be drawn: '
                f"{html.escape(f.error or 'no image')}</div>")
    img = f'<img src="{_png_uri(f.png)}" alt="{html.escape(f.title)}">'
    if f.narrow_png:  # a small screen gets the narrow rendering (see _CSS)
        img = (f'<picture><source media="(max-width:{_NARROW_SCREEN_PX}px)" '
               f'srcset="{_png_uri(f.narrow_png)}">{img}</picture>')
    return (f'<figure id="fig-{html.escape(f.name)}">{img}<figcaption>'
            f"<b>{html.escape(f.title)}.</b> {html.escape(f.caption)}</figcaption></figure>")


def _png_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _to_markdown(rep: _Report) -> str:
    out = [f"# {rep.title}", ""]
    for w in rep.alerts:
        out += [f"> **Warning:** {w}", ""]
    for p in rep.intro:
        out += [p, ""]
    for title, items in rep.sections:
        out += [f"## {title}", ""]
        for kind, item in items:
            if kind == "p":
                out += [item, ""]
            elif kind == "warn":
                out += [f"> **Warning:** {item}", ""]
            elif kind == "list":
                out += [f"- {x}" for x in item] + [""]
            elif kind == "cmp":
                out += [item.to_markdown()]
            elif kind == "cmp-detail":
                out += [item.to_markdown(detail=True)]
            elif kind == "table":
                out += [markdown_table(item)]
            elif kind == "pre":
                label, text = item
                out += [f"<details><summary>{label}</summary>", "", "```toml", text.rstrip(),
                        "```", "", "</details>", ""]
            elif kind == "fig":
                if item.error or not item.png:
                    out += [f"> Figure \"{item.title}\" could not be drawn: {item.error}", ""]
                else:
                    out += [f"![{item.title}](figures/{item.name}.png)", "",
                            f"*{item.title}.* {item.caption}", ""]
    return "\n".join(out).rstrip() + "\n"


def _all_figures(rep: _Report) -> list[ReportFigure]:
    return [item for _, items in rep.sections for kind, item in items if kind == "fig"]


def _manifest_kind(run_dir: Path) -> str | None:
    """The ``kind`` a folder's ``manifest.json`` gives (None without one, or
    unreadable: the run folder's own checks name that)."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest.get("kind") if isinstance(manifest, dict) else None


def build_report(run_dir: str | Path, *, n_boot: int = N_BOOT, seed: int = SEED,
                 progress: Callable[[float], None] | None = None) -> Path:
    """(Re)build ``report.html``, ``report.md`` and ``figures/*.png`` of a run folder.

    Parameters
    ----------
    run_dir : path
        A run folder (it must hold ``manifest.json``).
    n_boot, seed : int
        Bootstrap resamples and seed of the intervals.
    progress : callable, optional
        Called with the share done (0 to 1): the tables first (a tenth),
        then once per figure drawn.

    Returns
    -------
    Path
        The path of ``report.html``.

    Raises
    ------
    ConfigError
        If ``run_dir`` is not a run folder, or one of its files is damaged
        (a :class:`~memsim.reporting.rundir.RunFolderError` naming the file,
        and the column and row at fault: a summary.csv or rankings.parquet
        that exists is checked as the other files are, never recomputed or
        skipped in silence; see :func:`~memsim.reporting.rundir.load_run`),
        or if it is the folder of ``memsim advise`` (it holds ``advice.json``).
    """
    run_dir = as_path(run_dir, "build_report(run_dir)")
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run folder")
    if (run_dir / "advice.json").is_file() or _manifest_kind(run_dir) == "advise":
        # an advice folder has no queries of its own: a report of it would be
        # empty, and it already holds its own report (advice.md)
        own = run_dir / "advice.md"
        where = (f"its report is {own}" if own.is_file() else
                 "it holds no advice.md (an advise that did not finish: run it again with "
                 f"memsim advise {run_dir / 'config.toml'})")
        raise ConfigError(f"{run_dir}: a folder of memsim advise, not a run folder; {where}. "
                          "memsim report takes the folder of memsim run or memsim sweep")
    say = progress or (lambda _frac: None)
    run = load_run(run_dir)
    rep = _content(run_dir, run, n_boot, seed)
    figures = _all_figures(rep)
    say(0.1)
    figdir = run_dir / "figures"
    figdir.mkdir(exist_ok=True)
    for k, f in enumerate(figures):
        if f.render().png:
            write_atomic(figdir / f"{f.name}.png", lambda p, data=f.png: p.write_bytes(data))
        say(0.1 + 0.9 * (k + 1) / len(figures))
    write_atomic(run_dir / "report.md",
                 lambda p: p.write_text(_to_markdown(rep), encoding="utf-8"))
    out = run_dir / "report.html"
    write_atomic(out, lambda p: p.write_text(_to_html(rep), encoding="utf-8"))
    return out
