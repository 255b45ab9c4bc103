"""``compare()``: a policy comparison as a report object with tables.

::

    import memsim
    from memsim.reporting.compare import compare

    result = memsim.run_experiment("experiments/quickstart.toml", out=None)
    cmp = compare(result)                 # baseline from the experiment
    cmp                                    # a table in Jupyter
    print(cmp.to_markdown())               # summary: mean [95% CI] and marks
    print(cmp.to_markdown(detail=True))    # paired tests, effects, W/T/L
    cmp.to_dataframe()                     # every number, one row per cell

Each policy's mean and interval come from :func:`memsim.reporting.stats.summarise`; each
comparison with the baseline from :func:`memsim.reporting.stats.paired_tests`
(Wilcoxon signed-rank on the per-query pairs, Holm-adjusted over every
comparison of this object). A mark after a value reads:

* ``▲``: significantly better than the baseline (Holm-adjusted p < alpha),
* ``▼``: significantly worse,
* nothing: no significant difference.

"Better" follows the metric's direction (lower ``stale_rate`` is better).
"""

from __future__ import annotations

import html
import math
import os
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from memsim.core.errors import ConfigError
from memsim.evaluation.metrics import OLD_AGE_DAYS, OLD_RECALL_COLUMN, UNDIRECTED_METRICS
from memsim.reporting.rundir import (QUERY_KEY_COLUMNS, RunResult, column_problem, load_run,
                                     summary_rows)
from memsim.reporting.numbers import p_phrase
from memsim.reporting.stats import (HEADLINE_METRICS, MIN_REPLICATES, N_BOOT, RATIO_METRICS, SEED,
                    MissingColumnError, column_decimals, fold_replays, format_fixed, format_p, paired_tests,
                    summarise)

__all__ = ["compare", "Comparison", "MARKS", "ASCII_MARKS", "markdown_table", "header_html", "headline_text",
           "TERMINAL_METRICS", "UnknownPolicyError", "CompareTypeError"]

#: Marks after a value: significantly better / worse than the baseline.
MARKS = {"better": "▲", "worse": "▼", "": ""}
#: Marks for a terminal that cannot show ▲ / ▼.
ASCII_MARKS = {"better": "^", "worse": "v", "": ""}
#: The columns of :func:`headline_text`, with their headers.
TERMINAL_METRICS = {"utility_share": "utility share", "recall": "recall",
                    OLD_RECALL_COLUMN: f"recall >= {OLD_AGE_DAYS} d", "tokens_used": "tokens used"}
_LATEX_MARKS = {"better": r"$^{\blacktriangle}$", "worse": r"$^{\blacktriangledown}$", "": ""}


class UnknownPolicyError(ConfigError, KeyError):
    """A policy named (the ``baseline`` of :func:`compare`) is not in the run.

    A :class:`~memsim.core.errors.ConfigError` (the command line prints one
    line, exit code 2) and a :class:`KeyError`, which :func:`compare` has
    always raised for an unknown baseline.
    """

    def __str__(self) -> str:
        return Exception.__str__(self)  # the message, not KeyError's quoted repr


class CompareTypeError(ConfigError, TypeError):
    """An argument of :func:`compare` of a type it does not take (``data``
    that is not a run, ``metrics`` that is not a list of names...).

    A :class:`~memsim.core.errors.ConfigError` (the command line prints one
    line, exit code 2) and a :class:`TypeError`, which :func:`compare` has
    always raised for ``data`` of another type.
    """


@dataclass
class Comparison:
    """The result of :func:`compare`: summary and paired tables.

    Attributes
    ----------
    summary : DataFrame
        Per (budget, policy, metric): ``mean, ci_low, ci_high, n, ci_over``.
    tests : DataFrame
        Per (budget, policy != baseline, metric): the paired comparison with
        the baseline (see :func:`memsim.reporting.stats.paired_tests`).
    baseline : str
    metrics : list of str
    alpha, level : float
    """

    summary: pd.DataFrame
    tests: pd.DataFrame
    baseline: str
    metrics: list[str]
    alpha: float = 0.05
    level: float = 0.95
    policies: list[str] = field(default_factory=list)
    budgets: list[Any] = field(default_factory=list)
    #: False for runs compared unpaired (``compare([...], paired=False)``): no tests
    paired: bool = True
    #: the replicates that replay one stream, folded into one
    #: (:func:`~memsim.reporting.stats.fold_replays`); 0 when the run's
    #: replicates are streams of their own
    replays: int = 0

    # ------------------------------------------------------------------
    def to_dataframe(self) -> pd.DataFrame:
        """One row per (budget, policy, metric): the policy's mean and
        interval, then (for non-baseline policies) the paired comparison.

        Columns: ``budget, policy, metric, is_baseline, mean, ci_low, ci_high,
        n, ci_over, diff, diff_ci_low, diff_ci_high, p_value, p_holm,
        significant, direction, rank_biserial, cohen_dz, wins, ties, losses,
        n_pairs``.
        """
        s = self.summary
        keep = ["budget", "policy", "metric", "mean", "ci_low", "ci_high", "n", "ci_over"]
        s = s[keep].copy()
        t = self.tests[["budget", "policy", "metric", "diff", "diff_ci_low", "diff_ci_high",
                        "p_value", "p_holm", "significant", "direction", "rank_biserial",
                        "cohen_dz", "wins", "ties", "losses", "n_pairs"]]
        out = s.merge(t, on=["budget", "policy", "metric"], how="left")
        out.insert(3, "is_baseline", out["policy"] == self.baseline)
        out["significant"] = out["significant"].fillna(False).astype(bool)
        out["direction"] = out["direction"].fillna("").astype(str)
        for c in ("wins", "ties", "losses", "n_pairs"):
            out[c] = out[c].astype("Int64")
        order = {p: i for i, p in enumerate(self.policies)}
        morder = {m: i for i, m in enumerate(self.metrics)}
        out = out.sort_values(["budget", "policy", "metric"],
                              key=lambda c: c.map(order) if c.name == "policy" else (
                                  c.map(morder) if c.name == "metric" else c),
                              kind="stable").reset_index(drop=True)
        return out

    # ------------------------------------------------------------------
    @property
    def n_comparisons(self) -> int:
        """Size of the Holm family: the comparisons that were tested."""
        return int(np.isfinite(pd.to_numeric(self.tests["p_value"], errors="coerce")).sum()) \
            if len(self.tests) else 0

    def decimals(self) -> dict[str, int]:
        """Decimals of each metric's column (:func:`memsim.reporting.stats.column_decimals`)."""
        s = self.summary
        return {m: column_decimals(m, g["mean"], g["ci_low"], g["ci_high"])
                for m, g in s.groupby("metric", sort=False)}

    def summary_table(self, marks: dict[str, str] | None = None) -> pd.DataFrame:
        """Wide table of strings: rows (budget, policy), columns metrics,
        cells ``mean [lo, hi]`` with significance marks; one number of
        decimals per column (3 for shares and ratios)."""
        marks = MARKS if marks is None else marks
        df = self.to_dataframe()
        if len(df) == 0:
            return pd.DataFrame()
        dec = self.decimals()
        df["cell"] = [
            (format_fixed(r.mean, r.ci_low, r.ci_high, dec[r.metric]) + " "
             + ("" if r.is_baseline else marks.get(str(r.direction), ""))).rstrip()
            for r in df.itertuples(index=False)]
        wide = df.pivot_table(index=["budget", "policy"], columns="metric", values="cell",
                              aggfunc="first", sort=False)
        wide = wide[[m for m in self.metrics if m in wide.columns]]
        wide.columns.name = None
        return wide

    def detail_table(self) -> pd.DataFrame:
        """Long table of strings, one row per comparison with the baseline."""
        t = self.tests
        # one precision per metric: that of the differences' intervals (3
        # decimals for shares and ratios), the means shown at the same place
        # (differences that are all exactly 0 fix no place: the summary's then)
        means = self.decimals()
        dec = {m: column_decimals(m, g["diff"], g["diff_ci_low"], g["diff_ci_high"],
                                  default=means.get(m, 0))
               for m, g in t.groupby("metric", sort=False)}
        rows = []
        for _, r in t.iterrows():
            d = dec[r["metric"]]
            rows.append({
                "budget": r["budget"],
                "policy": r["policy"],
                "metric": r["metric"],
                "baseline": _fixed(r["baseline_mean"], d),
                "policy mean": _fixed(r["policy_mean"], d),
                "difference [95% CI]": format_fixed(r["diff"], r["diff_ci_low"],
                                                    r["diff_ci_high"], d, signed=True),
                "p": format_p(r["p_value"]),
                "p (Holm)": format_p(r["p_holm"]),
                "": MARKS[r["direction"]],
                "rank-biserial": _num(r["rank_biserial"], 2),
                "d_z": _num(r["cohen_dz"], 2),
                "win/tie/loss": f"{r['wins']}/{r['ties']}/{r['losses']}",
                "pairs": int(r["n_pairs"]),
            })
        return pd.DataFrame(rows)

    # ------------------------------------------------------------------
    def legend(self) -> str:
        """One paragraph explaining the marks and the intervals."""
        over = sorted(set(self.summary["ci_over"])) if len(self.summary) else []
        unit = " and ".join(over) or "replicates"
        few = ""
        if self.replays:
            few = (f" One stream is replayed in each of the {self.replays} replicates: each "
                   "query counts once (its mean over the replays), and the intervals "
                   "resample the stream's queries; they leave out the variation between "
                   "workloads and are too narrow for claims about other workloads.")
        elif "queries" in over:
            few = (f" With fewer than {MIN_REPLICATES} replicates the intervals resample "
                   "queries within each replicate; they leave out the variation between "
                   "workloads and are too narrow for claims about other workloads.")
        share = ""
        if any(m in RATIO_METRICS for m in self.metrics):
            share = (" utility_share = sum of utility / sum of the oracle's utility over the "
                     "queries where some relevant note fits the budget (pooled over "
                     "replicates; its interval resamples the ratio of sums).")
        head = (f"Mean [{self.level:.0%} bootstrap interval over {unit}].{few}{share} "
                "Each column has one number of decimals (3 for shares and ratios).")
        if len(self.policies) < 2:
            return head + f" Only one policy ('{self.baseline}'): nothing to compare against."
        if not self.paired:
            return (head + " Runs compared unpaired (their queries differ): each run's "
                    "intervals come from its own queries; no paired test, no marks.")
        test = "two-sided Wilcoxon signed-rank test on the per-query pairs"
        if any(m in RATIO_METRICS for m in self.metrics):
            test += ("; for utility_share a z-test of the difference of the pooled shares "
                     "with a delta-method standard error over the same pairs")
        return (f"{head} ▲ / ▼: significantly better / worse than the baseline "
                f"'{self.baseline}' ({test}; Holm-adjusted over the {self.n_comparisons} "
                f"comparisons of this table, p < {self.alpha:g}).{_no_verdict(self.metrics)}")

    def to_markdown(self, detail: bool = False) -> str:
        """A GitHub-flavoured Markdown table: the summary (default) or the
        paired comparisons (``detail=True``)."""
        table = self._display(detail)
        return markdown_table(table) if len(table) else "_(nothing to compare)_\n"

    def to_latex(self, detail: bool = False, caption: str | None = None,
                 label: str | None = None) -> str:
        """A LaTeX ``table`` (booktabs rules; marks need ``amssymb``)."""
        if detail:
            table = self._display(True).replace(MARKS["better"], _LATEX_MARKS["better"]) \
                .replace(MARKS["worse"], _LATEX_MARKS["worse"])
        else:
            table = self.summary_table(_LATEX_MARKS)
            table = table.reset_index() if len(table) else table
            if len(self.budgets) <= 1 and "budget" in table:
                table = table.drop(columns="budget")
        return _latex(table, caption or self.legend().replace("▲", r"$\blacktriangle$")
                      .replace("▼", r"$\blacktriangledown$"), label)

    def to_html(self, detail: bool = False) -> str:
        """An HTML ``<table>`` (no scripts, no external resources); in the
        summary the interval goes under the mean, so that wide tables fit."""
        table = self._display(detail)
        return _html(table, split_ci=not detail)

    def _display(self, detail: bool) -> pd.DataFrame:
        if detail:
            t = self.detail_table()
        else:
            t = self.summary_table()
            t = t.reset_index() if len(t) else t
        if len(self.budgets) <= 1 and "budget" in t:
            t = t.drop(columns="budget")
        return t

    def _repr_html_(self) -> str:
        return (f"<p><b>Comparison with baseline '{html.escape(self.baseline)}'</b></p>"
                + self.to_html() + f"<p><small>{html.escape(self.legend())}</small></p>")

    def __repr__(self) -> str:
        return (f"Comparison(baseline={self.baseline!r}, policies={self.policies}, "
                f"budgets={self.budgets}, metrics={self.metrics})\n" + self.to_markdown())

    # ------------------------------------------------------------------
    def test_row(self, policy: str, metric: str, budget: Any = None) -> pd.Series | None:
        """The paired comparison of ``policy`` with the baseline on ``metric``
        (at ``budget``, default the first), or None when there is none."""
        t = self.tests
        if len(t) == 0:
            return None
        budget = self.budgets[0] if budget is None else budget
        r = t[(t["budget"] == budget) & (t["policy"] == policy) & (t["metric"] == metric)]
        return None if len(r) == 0 else r.iloc[0]

    def significance(self, row: pd.Series) -> str:
        """How the interval and the Holm-adjusted test of a comparison read.

        The interval is per comparison; the test is corrected for the whole
        table, so the two can disagree, and then the sentence says that the
        correction decides, e.g. "the 95% CI excludes 0, but after Holm
        correction over 30 comparisons p = 0.07: not significant".
        """
        n = self.n_comparisons
        lo, hi = float(row["diff_ci_low"]), float(row["diff_ci_high"])
        p = float(row["p_holm"])
        ci = f"{self.level:.0%} CI"
        holm_p = f"after Holm correction over {n} comparisons {p_phrase(p)}"
        if not math.isfinite(p):
            return "not tested: the policies never differ on these queries"
        sig = p < self.alpha
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return f"{'significant' if sig else 'not significant'} ({holm_p})"
        excludes = lo > 0 or hi < 0
        if sig and excludes:
            return f"significant: the {ci} excludes 0 and {holm_p}"
        if not sig and not excludes:
            return f"not significant: the {ci} includes 0 and {holm_p}"
        if excludes:
            return f"the {ci} excludes 0, but {holm_p}: not significant"
        return f"the {ci} includes 0, but {holm_p}: significant by the test"

    def headline_text(self, width: int = 100, ascii: bool = False) -> str:
        """The headline as plain text for a terminal (see :func:`headline_text`)."""
        return _terminal_table(self, width, ASCII_MARKS if ascii else MARKS)


def _informative(queries: pd.DataFrame, m: str) -> bool:
    """Whether metric ``m`` has at least one finite value in ``queries``."""
    cols = RATIO_METRICS.get(m, (m,))
    return all(c in queries.columns and np.isfinite(queries[c].to_numpy(np.float64)).any()
               for c in cols)


def _fixed(x: float, dec: int, signed: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    x = round(float(x), dec)
    x = 0.0 if x == 0 else x
    return f"{x:+.{max(dec, 0)}f}" if signed else f"{x:.{max(dec, 0)}f}"


def _num(x: float, dec: int) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.{dec}f}"


# --------------------------------------------------------------------------
# Table writers (no optional dependency: pandas' to_markdown needs tabulate)
# --------------------------------------------------------------------------


def markdown_table(df: pd.DataFrame) -> str:
    """A frame as a Markdown table: label columns left-aligned, numbers right-aligned."""
    cols = [str(c) for c in df.columns]
    body = [[str(v) for v in row] for row in df.itertuples(index=False)]

    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in cols) + " |",
             "|" + "|".join("---" if _is_label(c, df.iloc[:, i]) else "--:"
                            for i, c in enumerate(cols)) + "|"]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


# label columns are left-aligned, numbers right-aligned
_LABELS = ("budget", "policy", "metric")
_NUMBER = re.compile(r"^\s*([+-]?(\d|\.\d)|n/a$|<0\.|$)")


def _is_label(name: str, values: pd.Series) -> bool:
    if name in _LABELS:
        return True
    return not all(_NUMBER.match(str(v)) for v in values)


_LATEX_ESC = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
              "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
              "\\": r"\textbackslash{}", "<": r"\textless{}", ">": r"\textgreater{}"}


def _latex_escape(s: str) -> str:
    # marks are already LaTeX: keep the $...$ pieces verbatim
    out, i = [], 0
    while i < len(s):
        if s[i] == "$":
            j = s.find("$", i + 1)
            if j > i:
                out.append(s[i:j + 1])
                i = j + 1
                continue
        out.append(_LATEX_ESC.get(s[i], s[i]))
        i += 1
    return "".join(out)


def _latex(df: pd.DataFrame, caption: str, label: str | None) -> str:
    cols = [str(c) for c in df.columns]
    align = "".join("l" if c in _LABELS else "r" for c in cols)
    lines = [r"\begin{table}[ht]", r"\centering", r"\small",
             rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(_latex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(_latex_escape(str(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{_latex_escape(caption)}}}"]
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


# "mean [lo, hi] mark" -> "mean mark" over a smaller "[lo, hi]"
_CI_RE = re.compile(r" (\[[^\]]*\])( [▲▼])?")


def _html(df: pd.DataFrame, split_ci: bool = False) -> str:
    if len(df) == 0:
        return "<p><em>(nothing to compare)</em></p>"
    head = "".join(f"<th>{header_html(c)}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            s = html.escape(str(v))
            if split_ci:
                s = _CI_RE.sub(r'\2<br><span class="ci">\1</span>', s)
            s = s.replace("▲", '<span class="better" title="significantly better">▲</span>')
            s = s.replace("▼", '<span class="worse" title="significantly worse">▼</span>')
            cells.append(f"<td>{s}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return ('<div class="scroll"><table class="cmp"><thead><tr>' + head
            + "</tr></thead><tbody>" + "".join(body) + "</tbody></table></div>")


# --------------------------------------------------------------------------
# compare()
# --------------------------------------------------------------------------


def _queries_and_baseline(data: Any, where: str = "compare(): data"
                          ) -> tuple[pd.DataFrame, str | None]:
    """Accept a queries frame, a RunResult, a run folder or a dict of its tables.

    ``where`` names the argument in messages (``compare(): data[1]`` for the
    second run of a list).

    Raises
    ------
    CompareTypeError
        If ``data`` is none of these, or its queries are not a DataFrame.
    RunFolderError
        If ``data`` is a path that is not a readable run folder.
    """
    if isinstance(data, pd.DataFrame):
        return data, None
    if isinstance(data, (str, os.PathLike)):
        data = load_run(data)
    if isinstance(data, RunResult):
        if data.queries is None:
            raise ConfigError(f"{data.path or 'the run'}: has no queries table")
        return _table(data.queries, where), data.baseline
    if isinstance(data, dict):
        q = data.get("queries")
        if q is None:
            raise ConfigError(f"{data.get('path', 'the run')}: has no queries table")
        base = (data.get("config") or {}).get("experiment", {}).get("baseline") or None
        return _table(q, where), base
    q = getattr(data, "queries", None)
    if isinstance(q, pd.DataFrame):
        exp = getattr(data, "experiment", None)
        base = getattr(getattr(exp, "settings", None), "baseline", None) or None
        return q, base
    raise CompareTypeError(f"{where}: expected a queries DataFrame, a RunResult, a run folder "
                           f"or a list of them, got {type(data).__name__}")


def _table(q: Any, where: str) -> pd.DataFrame:
    """``q``, a run's queries, refused unless a DataFrame (a dict or a
    RunResult built by hand may hold anything)."""
    if not isinstance(q, pd.DataFrame):
        raise CompareTypeError(f"{where}: its queries must be a DataFrame, got "
                               f"{type(q).__name__}")
    return q


def _check_numbers(queries: pd.DataFrame, metrics: list[str] | None, where: str) -> None:
    """Refuse a queries table whose columns of ``metrics`` (default: the
    headline metrics it has) hold a value that is not a number: named here,
    with its row, rather than failing deep in a bootstrap."""
    names = HEADLINE_METRICS if metrics is None else metrics
    cols = [c for m in names for c in RATIO_METRICS.get(m, (m,)) if c in queries.columns]
    problem = column_problem(queries, list(dict.fromkeys(cols)))
    if problem:
        raise ConfigError(f"{where}: {problem}")


#: Columns that are the same for a query whatever the policy: two runs whose
#: rows with the same (replicate, query_id) differ in one of them ask
#: different queries under the same ids.
_QUERY_FINGERPRINT = ("t", "n_relevant")


def _run_labels(runs: list[Any], labels: Sequence[str] | None) -> list[str]:
    """A short, unique name per run: the given labels, else the experiments'
    names, else the run folders' names, else ``run1``, ``run2`` ..."""
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(runs) or len(set(labels)) != len(labels) or not all(labels):
            raise ConfigError(f"compare(): labels must be {len(runs)} distinct non-empty names, "
                              f"one per run; got {labels}")
        return labels
    names = [(((getattr(r, "config", None) or {}).get("experiment") or {}).get("name") or "")
             if isinstance(r, RunResult) else "" for r in runs]
    if all(names) and len(set(names)) == len(names):
        return names
    folders = [(r.path.name if isinstance(r, RunResult) and r.path is not None else "")
               for r in runs]
    if all(folders) and len(set(folders)) == len(folders):
        return folders
    return [f"run{i + 1}" for i in range(len(runs))]


def _pairing_problem(frames: list[pd.DataFrame], labels: list[str]) -> str | None:
    """Why the runs' queries cannot be paired query by query (None if they can)."""
    def shape(q: pd.DataFrame) -> str:
        reps = q["replicate"].nunique()
        ids = q[["replicate", "query_id"]].drop_duplicates().shape[0]
        return (f"{reps} replicate{'s' if reps != 1 else ''}, {ids:,} "
                f"quer{'ies' if ids != 1 else 'y'}")

    def keys(q: pd.DataFrame) -> pd.DataFrame:
        cols = ["replicate", "query_id", *[c for c in _QUERY_FINGERPRINT if c in q.columns]]
        return q[cols].drop_duplicates(["replicate", "query_id"]).set_index(
            ["replicate", "query_id"]).sort_index()

    first = keys(frames[0])
    for label, q in zip(labels[1:], frames[1:]):
        other = keys(q)
        if not first.index.equals(other.index):
            return (f"cannot pair run {labels[0]!r} ({shape(frames[0])}) with run {label!r} "
                    f"({shape(q)}): a paired test needs the same replicates and query ids "
                    "in every run (the same [experiment] seed and replicates and the same "
                    "[workload])")
        for col in (c for c in _QUERY_FINGERPRINT if c in first.columns and c in other.columns):
            a, b = first[col].to_numpy(np.float64), other[col].to_numpy(np.float64)
            differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
            if differ.any():
                rep, qid = first.index[int(np.flatnonzero(differ)[0])]
                return (f"cannot pair run {labels[0]!r} with run {label!r}: they ask different "
                        f"queries under the same ids (replicate {rep}, query_id {qid}: {col} = "
                        f"{a[differ][0]:g} in {labels[0]!r}, {b[differ][0]:g} in {label!r}), "
                        "so their workloads differ (another seed or [workload])")
    return None


def _combine(data: Sequence[Any], labels: Sequence[str] | None, paired: bool,
             metrics: list[str] | None = None
             ) -> tuple[pd.DataFrame, str | None, list[pd.DataFrame]]:
    """The queries of several runs as one table, with a ``run`` column.

    Policy names that occur in more than one run become ``<run>/<policy>``.
    Returns the table, the default baseline (the first run's, renamed as its
    policy was) and the renamed per-run tables. Each run's columns of
    ``metrics`` are checked on its own table, so that a message's row is
    that run's.
    """
    runs = [load_run(d) if isinstance(d, (str, os.PathLike)) else d for d in data]
    names = _run_labels(runs, labels)
    parts = [_queries_and_baseline(r, f"compare(): data[{i}]") for i, r in enumerate(runs)]
    for label, (q, _) in zip(names, parts):
        for col in ("replicate", "policy", "budget", "query_id"):
            if col not in q.columns:
                raise MissingColumnError(f"run {label!r}: the queries table has no {col!r} "
                                         "column")
        _check_numbers(q, metrics, f"compare(): run {label!r}: the queries table")
    seen: dict[str, int] = {}
    for q, _ in parts:
        for p in pd.unique(q["policy"]).tolist():
            seen[str(p)] = seen.get(str(p), 0) + 1
    frames, base = [], None
    for i, (label, (q, b)) in enumerate(zip(names, parts)):
        rename = {p: f"{label}/{p}" if seen[str(p)] > 1 else str(p)
                  for p in pd.unique(q["policy"]).tolist()}
        q = q.assign(policy=q["policy"].map(rename), run=label)
        frames.append(q)
        if i == 0:
            pols = list(rename)
            b = b if b in rename else (pols[0] if pols else None)
            base = rename.get(b) if b is not None else None
    if paired:
        problem = _pairing_problem(frames, names)
        if problem:
            raise ConfigError(problem + "; compare(..., paired=False) shows each run's "
                              "intervals side by side without paired tests")
    return pd.concat(frames, ignore_index=True), base, frames


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_args(alpha: Any, level: Any, n_boot: Any, seed: Any = SEED,
                min_replicates: Any = MIN_REPLICATES, paired: Any = True,
                labels: Any = None, summary: Any = None) -> None:
    """Refuse the arguments of :func:`compare` that are out of range or of a
    type it does not take (before any run is read)."""
    for name, x in (("alpha", alpha), ("level", level)):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                or not 0 < float(x) < 1:
            raise ConfigError(f"compare(): {name} must be a number strictly between 0 and 1, "
                              f"got {x!r}")
    if not _is_int(n_boot) or n_boot < 1:
        raise ConfigError(f"compare(): n_boot (bootstrap resamples) must be an integer >= 1, "
                          f"got {n_boot!r}")
    for name, x in (("seed", seed), ("min_replicates", min_replicates)):
        if not _is_int(x):
            raise CompareTypeError(f"compare(): {name} must be an integer, got {x!r}")
    if seed < 0:  # numpy's seeds are >= 0
        raise ConfigError(f"compare(): seed must be an integer >= 0, got {seed!r}")
    # a truthy string ("no") would silently ask for the paired comparison
    if not isinstance(paired, (bool, np.bool_)):
        raise CompareTypeError(f"compare(): paired must be True or False, got {paired!r}")
    if labels is not None and (isinstance(labels, (str, bytes))
                               or not isinstance(labels, (list, tuple))):
        raise CompareTypeError(f"compare(): labels must be a list of names, one per run, got "
                               f"{labels!r}")
    if summary is not None and not isinstance(summary, pd.DataFrame):
        raise CompareTypeError("compare(): summary must be a DataFrame (a run's summary.csv), "
                               f"got {type(summary).__name__}")


def compare(data: Any, baseline: str | None = None, metrics: Iterable[str] | None = None, *,
            budget: Any = None, alpha: float = 0.05, level: float = 0.95,
            n_boot: int = N_BOOT, seed: int = SEED,
            min_replicates: int = MIN_REPLICATES, paired: bool = True,
            labels: Sequence[str] | None = None,
            summary: pd.DataFrame | None = None) -> Comparison:
    """Compare every policy of a run, or of several runs, with a baseline.

    Parameters
    ----------
    data : DataFrame, RunResult, dict, path, or a list or tuple of them
        The per-query table (columns ``replicate, policy, budget, query_id``
        and metric columns), a :class:`~memsim.reporting.rundir.RunResult` (of
        :func:`~memsim.runs.runner.run_experiment` or :func:`~memsim.reporting.rundir.load_run`),
        a run folder, or a dict with ``queries`` (and ``config``). A list of
        runs is compared as one table (their queries concatenated, with a
        ``run`` column); a policy name that occurs in more than one run becomes ``<run>/<policy>`` (the run
        labelled by ``labels``, else by its experiment's name, else by its
        folder's name, else ``run1``, ``run2`` ...).
    baseline : str, optional
        Policy compared against; default the experiment's ``baseline`` (of
        the first run), else the first policy of the table.
    metrics : iterable of str, optional
        Default: the :data:`memsim.reporting.stats.HEADLINE_METRICS` of the table that
        have at least one finite value.
    budget : int or list of int, optional
        Keep only these budgets (default: every budget of the table).
    alpha : float
        Significance level of the Holm-adjusted p-values, strictly between 0
        and 1.
    level : float
        Confidence level of the intervals, strictly between 0 and 1.
    n_boot, seed : int
        Bootstrap resamples (at least 1) and seed (fixed: the same data give
        the same report).
    min_replicates : int
        Fewest replicates for intervals over replicates (else over queries).
    paired : bool
        Several runs only. True (default): the runs must ask the same queries
        (the same replicates and query ids, with the same query times), so
        that each query is paired across runs; otherwise :class:`ConfigError`
        says which runs differ and how. False: an unpaired comparison, each
        run's intervals computed on its own queries, with no paired tests
        and no marks.
    labels : sequence of str, optional
        A list of runs only: one distinct name per run (refused with one run
        given alone, which it could not name).
    summary : DataFrame, optional
        One run only: its ``summary.csv`` (:func:`~memsim.reporting.rundir.summary_rows`),
        whose rows are the comparison's summary at the default ``level``,
        ``n_boot``, ``seed`` and ``min_replicates``, instead of resampling
        again. Default: the summary of a RunResult or run folder given as
        ``data``. Rows it lacks, or other parameters: computed. Refused with a
        list of runs.

    Returns
    -------
    Comparison
        With ``to_dataframe()``, ``to_markdown()``, ``to_latex()`` and
        ``to_html()``; rendered as a table in Jupyter.

    Raises
    ------
    ConfigError
        Runs whose queries cannot be paired (different replicate counts,
        query ids or workloads), unless ``paired=False``; an empty list of
        runs; a queries table with no rows (a run without queries);
        ``budget`` with no rows; ``metrics`` given as one string; ``alpha`` or ``level`` not strictly
        between 0 and 1; ``n_boot`` not an integer >= 1; ``labels`` with one
        run (not a list), or not one distinct name per run; ``summary`` with
        several runs, or without a column of summary.csv; a metric column
        with a value that is not a number (named with its row). A
        ``ConfigError`` is also a :class:`ValueError`.
    CompareTypeError
        ``data`` (or a run of a list) that is not a queries DataFrame, a
        RunResult, a run folder or a dict with a ``queries`` DataFrame;
        ``metrics``, ``labels``, ``summary``, ``seed``, ``min_replicates``
        or ``paired`` of another type. Also a :class:`ConfigError` and a
        :class:`TypeError`.
    RunFolderError
        A path given that is not a run folder, or a run folder with a
        damaged file (:func:`~memsim.reporting.rundir.load_run`): the message
        names the file, and the column and row where one is at fault.
    MissingColumnError
        A metric of ``metrics``, or a column the table needs, is not in the
        queries table (also a :class:`KeyError`).
    UnknownPolicyError
        ``baseline`` is not a policy of the table (also a :class:`KeyError`).

    Notes
    -----
    The Holm family is every (budget, policy, metric) comparison of this
    object: asking for more metrics makes each test more conservative.
    """
    _check_args(alpha, level, n_boot, seed, min_replicates, paired, labels, summary)
    if metrics is not None:
        if isinstance(metrics, str):
            raise ConfigError(f"compare(): metrics is a list of metric names, not one string: "
                              f"write metrics=[{metrics!r}]")
        if isinstance(metrics, Iterable):
            metrics = list(metrics)
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise CompareTypeError("compare(): metrics must be a list of metric names, got "
                                   f"{metrics!r}")
        keys = [m for m in metrics if m in (*QUERY_KEY_COLUMNS, "t")]
        if keys:  # a query's key or time: compared, they would read as measures
            raise ConfigError(f"compare(): metrics: {keys[0]!r} is a column that names or "
                              "times a query, not a measure of it")
    frames = None
    if labels is not None and not isinstance(data, (list, tuple)):
        raise ConfigError("compare(): labels name the runs of a list of runs; data is one run "
                          f"({type(data).__name__}), so labels={list(labels)!r} would be ignored")
    if isinstance(data, (list, tuple)):
        if not data:
            raise ConfigError("compare(): data: an empty list of runs")
        if len(data) == 1 and labels is None:
            data = data[0]
        else:
            queries, default_base, frames = _combine(data, labels, paired, metrics)
            paired = paired or len(frames) == 1
    if frames is None:
        if isinstance(data, (str, os.PathLike)):
            data = load_run(data)
        if summary is None and isinstance(data, RunResult):
            summary = data.summary
        queries, default_base = _queries_and_baseline(data)
        paired = True
    elif summary is not None:
        # several runs: their queries are renamed and concatenated, summaries computed
        raise ConfigError("compare(): summary is one run's summary.csv; with a list of runs it "
                          "would be ignored (their summaries are computed)")
    for col in ("replicate", "policy", "budget", "query_id"):
        if col not in queries.columns:
            raise MissingColumnError(f"compare(): the queries table has no {col!r} column")
    if frames is None:  # (several runs: each checked on its own table)
        _check_numbers(queries, metrics, "compare(): the queries table")
    if len(queries) == 0:
        # a run over a stream without queries is valid, but has nothing to compare
        raise ConfigError("compare(): the queries table has no rows (a run without queries): "
                          "nothing to compare")
    if budget is not None:
        wanted = list(budget if isinstance(budget, (list, tuple, set)) else [budget])
        have = sorted(pd.unique(queries["budget"]).tolist())
        queries = queries[queries["budget"].isin(wanted)]
        if len(queries) == 0:
            raise ConfigError(f"compare(): budget: no rows at budget {budget!r}; the run has "
                              f"budgets {', '.join(map(str, have))}")
        if frames is not None:
            frames = [f[f["budget"].isin(wanted)] for f in frames]
    if metrics is None:
        # a metric that is NaN everywhere (answer_prob without a reader) says nothing
        metrics = [m for m in HEADLINE_METRICS if _informative(queries, m)]
    else:
        for m in metrics:
            if not all(c in queries.columns for c in RATIO_METRICS.get(m, (m,))):
                raise MissingColumnError(f"compare(): metrics: no metric column {m!r} in the "
                                         "queries table")
    policies = [str(p) for p in pd.unique(queries["policy"])]
    baseline = baseline or default_base or (policies[0] if policies else "")
    if baseline not in policies:
        raise UnknownPolicyError(f"compare(): baseline {baseline!r} is not a policy of the "
                                 f"run; policies: {', '.join(policies)}")
    # baseline first in every table
    policies = [baseline] + [p for p in policies if p != baseline]
    # once here, not in each of summarise and paired_tests (which fold too)
    queries = fold_replays(queries) if paired else queries
    if paired:
        stored = None
        if (level, n_boot, seed, min_replicates) == (0.95, N_BOOT, SEED, MIN_REPLICATES):
            stored = summary_rows(summary, queries, metrics)
        summary = stored if stored is not None else summarise(
            queries, level=level, metrics=metrics, n_boot=n_boot, seed=seed,
            min_replicates=min_replicates)
        tests = paired_tests(queries, baseline, metrics, level=level, alpha=alpha,
                             n_boot=n_boot, seed=seed, min_replicates=min_replicates)
    else:
        # each run's intervals on its own queries and replicates; nothing is paired
        summary = pd.concat([summarise(f, level=level, metrics=metrics, n_boot=n_boot,
                                       seed=seed, min_replicates=min_replicates)
                             for f in frames if len(f)], ignore_index=True)
        tests = paired_tests(queries.iloc[:0], baseline, metrics)
    budgets = sorted(pd.unique(queries["budget"]).tolist())
    replays = int(queries.attrs.get("folded_replays", 0))
    return Comparison(summary=summary, tests=tests, baseline=baseline, metrics=list(metrics),
                      alpha=alpha, level=level, policies=policies, budgets=budgets,
                      paired=paired, replays=replays)


# --------------------------------------------------------------------------
# The headline for a terminal
# --------------------------------------------------------------------------


def headline_text(data: Any, baseline: str | None = None, *, width: int = 100,
                  ascii: bool = False, n_boot: int = N_BOOT, seed: int = SEED) -> str:
    """A plain-text headline table of a run, at most ``width`` columns wide.

    Per budget and policy: utility_share, recall, recall of the relevant
    notes at least 90 days old (``recall_age_90_inf``) and tokens used, each
    as its mean with the 95% bootstrap interval on the line below, and the
    mark of its paired comparison with the baseline (▲ / ▼, Holm-adjusted
    over the same family as :func:`compare` and the report). A short legend
    follows. Columns the run lacks are left out.

    Parameters
    ----------
    data : Comparison, RunResult, DataFrame, dict or path
        A :class:`Comparison` (nothing recomputed), or anything
        :func:`compare` takes.
    baseline : str, optional
        As in :func:`compare` (ignored for a Comparison).
    width : int
        Widest line: long policy names are shortened with "~" to fit. The
        four metric columns alone take about 65 characters, so a width below
        about 75 is exceeded rather than wrapping the table.
    ascii : bool
        ``^`` / ``v`` and no non-ASCII character, for consoles without UTF-8.
    n_boot, seed : int
        As in :func:`compare`.

    Returns
    -------
    str
        Lines joined by newlines, with a final newline.
    """
    cmp = data if isinstance(data, Comparison) else compare(data, baseline, n_boot=n_boot,
                                                              seed=seed)
    return cmp.headline_text(width=width, ascii=ascii)


def _row_labels(policies: Sequence[str], baseline: str | None, n: int) -> dict[str, str]:
    """Each policy's row label of at most ``n`` characters where it can be:
    a long name loses its middle (``similarity-on~variant-A``), so that names
    that differ at the end stay apart, and the baseline keeps its
    ``(baseline)``. Names that would still read alike are not shortened."""
    def cut(name: str, room: int) -> str:
        if len(name) <= room or room < 5:
            return name
        tail = (room - 1) // 2
        return name[:room - 1 - tail] + "~" + name[len(name) - tail:]

    suffix = {p: " (baseline)" if p == baseline and len(policies) > 1 else "" for p in policies}
    short = {p: cut(p, n - len(suffix[p])) for p in policies}
    if len(set(short.values())) < len(short):
        short = {p: p for p in policies}
    return {p: short[p] + suffix[p] for p in policies}


def header_html(name: object) -> str:
    """A column header for HTML: escaped, and breakable only after an
    underscore or at a space (``utility_<wbr>share``), never inside a word."""
    return html.escape(str(name)).replace("_", "_<wbr>")


def _no_verdict(metrics) -> str:
    """The legend's note on the metrics shown without a mark (costs such as
    tokens used have no better direction)."""
    shown = [TERMINAL_METRICS.get(m, m) for m in metrics if m in UNDIRECTED_METRICS]
    return (f" {', '.join(shown)}: no better direction, shown without a mark."
            if shown else "")


def _order_only(cmp: Comparison, metrics: list[str]) -> bool:
    """Whether two policies tie on every headline metric at some budget while
    their ``answer_prob`` differs: policies that differ only in the order of the
    packed notes (an orderer), which only the reader model tells apart."""
    if "answer_prob" not in cmp.metrics or not metrics:
        return False
    # pivot_table drops a metric that is NaN everywhere (utility_share when no
    # note fits the budget): put its column back, all NaN
    s = cmp.summary.pivot_table(index=["budget", "policy"], columns="metric", values="mean",
                                sort=False).reindex(columns=cmp.metrics)
    for _, g in s.groupby(level="budget", sort=False):
        # policies tie on the headline metrics: within each group of ties
        # (not across two groups that tie among themselves), does answer_prob differ?
        key = g[metrics].round(12)
        per_tie = g["answer_prob"].round(12).groupby([key[m] for m in metrics],
                                                     dropna=False).nunique()
        if (per_tie > 1).any():
            return True
    return False


def _terminal_table(cmp: Comparison, width: int, marks: dict[str, str]) -> str:
    metrics = [m for m in TERMINAL_METRICS if m in cmp.metrics]
    if _order_only(cmp, metrics):
        metrics.append("answer_prob")
    if not metrics or len(cmp.summary) == 0:
        return "(no metric to show)\n"
    df = cmp.to_dataframe()
    dec = cmp.decimals()
    cells: dict[tuple, tuple[str, str]] = {}
    for r in df[df["metric"].isin(metrics)].itertuples(index=False):
        d = dec[r.metric]
        mark = "" if r.is_baseline else marks.get(str(r.direction), "")
        ci = format_fixed(r.ci_low, dec=d) + ", " + format_fixed(r.ci_high, dec=d) \
            if math.isfinite(r.ci_low) and math.isfinite(r.ci_high) else ""
        cells[r.budget, r.policy, r.metric] = (
            f"{format_fixed(r.mean, dec=d)} {mark}".rstrip(), f"[{ci}]" if ci else "")
    heads = [TERMINAL_METRICS.get(m, m.replace("_", " ")) for m in metrics]
    colw = [max([len(h)] + [len(c[i]) for k, c in cells.items() if k[2] == m
                            for i in (0, 1)]) + 2 for m, h in zip(metrics, heads)]
    heads_first = {bud: f"at {bud} tokens" if len(cmp.budgets) > 1 else "policy"
                   for bud in cmp.budgets}
    room = max(width - sum(colw), 8)
    labels = _row_labels(cmp.policies, cmp.baseline, room - 2)
    # the first column holds its header too ("at 16000 tokens")
    namew = max([len(v) for v in labels.values()] + [len(h) for h in heads_first.values()])
    lines = []
    for bud in cmp.budgets:
        head = heads_first[bud].ljust(namew + 2)
        lines.append((head + "".join(h.ljust(w) for h, w in zip(heads, colw))).rstrip())
        for pol in cmp.policies:
            if not any((bud, pol, m) in cells for m in metrics):
                continue
            vals = [cells.get((bud, pol, m), ("n/a", "")) for m in metrics]
            lines.append((labels[pol].ljust(namew + 2)
                          + "".join(v[0].ljust(w) for v, w in zip(vals, colw))).rstrip())
            if any(v[1] for v in vals):
                lines.append((" " * (namew + 2)
                              + "".join(v[1].ljust(w) for v, w in zip(vals, colw))).rstrip())
    over = set(cmp.summary["ci_over"])
    if cmp.replays:
        unit = (f"the queries of one stream, replayed in each of {cmp.replays} replicates "
                "(each query counts once: too narrow for other workloads)")
    elif "queries" in over:
        unit = ("queries, resampled within each replicate (fewer than "
                f"{MIN_REPLICATES} replicates: too narrow for other workloads)")
    else:
        unit = "replicates"
    legend = (f"Mean and [{cmp.level:.0%} bootstrap interval over {unit}]. utility share: sum "
              "of utility / sum of the best achievable (oracle) utility.")
    if OLD_RECALL_COLUMN in metrics:
        legend += (f" recall >= {OLD_AGE_DAYS} d: recall of relevant notes at least "
                   f"{OLD_AGE_DAYS} days old.")
    if "answer_prob" in metrics:
        legend += (" answer prob: the reader model's chance of answering, which the order "
                   "of the packed notes changes (shown because some policies differ only "
                   "in that order).")
    if len(cmp.policies) > 1 and not cmp.paired:
        legend += " Runs compared unpaired (their queries differ): no paired test, no marks."
    elif len(cmp.policies) > 1:
        legend += (f" {marks['better']} / {marks['worse']}: significantly better / worse than "
                   f"'{cmp.baseline}' (Holm-adjusted p < {cmp.alpha:g} over "
                   f"{cmp.n_comparisons} comparisons).{_no_verdict(metrics)}")
    else:
        legend += " Only one policy: nothing to compare against."
    lines += [""] + textwrap.wrap(legend, width=width)
    return "\n".join(lines) + "\n"
