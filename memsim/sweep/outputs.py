"""What a sweep produces: the trials table, the best trial(s), files, plots.

Holds :func:`trials_table`, the choice of the best trial or the Pareto set
(:func:`best_trials`), the files of ``<run>/sweep/`` (:func:`write_outputs`)
and :class:`SweepResult`, what :func:`~memsim.sweep.run_sweep` returns.

Files (``<run>/sweep/``): ``trials.csv`` (one row per trial: ``number``,
``state``, ``values_<objective>``, one column per parameter named by its
dotted key, ``origin``, ``retry_of``, ``worker``, ``seconds``,
``datetime_start``, ``datetime_complete``, ``error``, ``<objective>_rep<r>``),
``best.toml`` (the resolved experiment with the best parameters applied,
runnable with ``memsim run``; with several objectives the Pareto member best
on the first objective, and ``pareto/trial_<n>.toml`` for every Pareto
member), ``robustness.csv`` (:func:`~memsim.sweep.robustness_check`),
``plateau.csv`` (:func:`~memsim.sweep.plateau_table`: each parameter's best
value, plateau and edge warning), ``importance.csv`` (:func:`importance_table`:
Optuna's fANOVA importance, seeded), ``summary.txt``
(:meth:`SweepResult.summary_text`, what ``memsim sweep`` prints, ending with
the ``optuna-dashboard`` command that opens the study) and the plots as PNG:
Optuna's ``history`` and ``pareto_front``, memsim's ``importance`` (the bars
of ``importance.csv``) and ``slice`` (one panel per parameter, log axes for
log ranges).

Trials that did not complete (PRUNED by ``sweep.pruner``, FAIL) keep their
row and their ``state`` in ``trials.csv``; a PRUNED trial's
``values_<objective>`` is its running value when it was stopped (the mean
over the replicates it ran, Optuna's last intermediate value) and its
``<objective>_rep<r>`` columns cover only those replicates. The best
trial(s), ``plateau.csv``, ``importance.csv``, the robustness candidates and
the plots use COMPLETE trials only.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from optuna.trial import TrialState

from memsim.reporting import plots as mplots
from memsim.runs.config import Experiment, dumps_toml
from memsim.reporting.report import study_access_lines
from memsim.reporting.rundir import write_atomic

from .plateau import plateau_lines
from .robustness import IN_SAMPLE_NOTE, NO_INTERVAL, SAME_NOTE
from .space import SweepSpec, format_value, apply_params
from .study import quiet_optuna


def trials_table(study, spec: SweepSpec) -> pd.DataFrame:
    """One row per trial: number, state, ``values_<objective>``, one column per
    parameter (its dotted key), then the user attributes."""
    rows = []
    rep_cols: list[str] = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"number": t.number, "state": t.state.name}
        vals = t.values if t.values is not None else [math.nan] * len(spec.objectives)
        for lab, v in zip(spec.labels, vals):
            row[f"values_{lab}"] = v
        for k in spec.keys:
            row[k] = t.params.get(k)
        ua = t.user_attrs
        row["origin"] = ua.get("origin", "retry" if "failed_trial" in t.system_attrs
                               else "sampler")
        row["retry_of"] = t.system_attrs.get("failed_trial")
        row["worker"] = ua.get("worker")
        row["seconds"] = ua.get("seconds")
        row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["datetime_complete"] = (t.datetime_complete.isoformat() if t.datetime_complete
                                    else None)
        row["error"] = ua.get("error") or ua.get("failed_reason") or (
            "surplus" if ua.get("surplus") else None)
        for k, v in ua.items():
            if re.search(r"_rep\d+$", k):
                row[k] = v
                if k not in rep_cols:
                    rep_cols.append(k)
        rows.append(row)
    base = (["number", "state"] + [f"values_{lab}" for lab in spec.labels] + spec.keys
            + ["origin", "retry_of", "worker", "seconds", "datetime_start", "datetime_complete",
               "error"])
    df = pd.DataFrame(rows, columns=base + sorted(rep_cols, key=_rep_sort))
    if len(df):
        df["retry_of"] = df["retry_of"].astype("Int64")
        for p in spec.params:
            # a trial without parameters (a surplus one) leaves None: an
            # integer or boolean parameter keeps its type around it
            kind = _column_kind(p)
            if kind is not None:
                df[p.key] = df[p.key].astype(kind)
    return df.sort_values("number").reset_index(drop=True)


def _column_kind(param) -> str | None:
    """The nullable pandas type of a parameter's column whose values are all
    integers ("Int64") or all booleans ("boolean"); None for the others."""
    values = param.choices if param.type == "categorical" else ()
    if param.type == "int" or (values and all(
            isinstance(v, int) and not isinstance(v, bool) for v in values)):
        return "Int64"
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    return None


def _rep_sort(col: str):
    """Sort key of a ``<objective>_rep<r>`` column: objective, then replicate
    as a number (``rep10`` after ``rep9``)."""
    m = re.match(r"^(.*)_rep(\d+)$", col)
    return (m.group(1), int(m.group(2))) if m else (col, 0)


def best_trials(study, spec: SweepSpec) -> list:
    """The best COMPLETE trial (one objective) or the Pareto set, best first
    on the first objective."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return []
    sign = [1.0 if d == "maximize" else -1.0 for d in spec.directions]
    if not spec.multi:
        # ties go to the lower trial number (trial 0, the experiment, first)
        return [max(done, key=lambda t: (sign[0] * t.values[0], -t.number))]
    pts = np.array([[s * v for s, v in zip(sign, t.values)] for t in done])
    front = []
    for i, p in enumerate(pts):
        dominated = np.any(np.all(pts >= p, axis=1) & np.any(pts > p, axis=1))
        if not dominated:
            front.append(done[i])
    front.sort(key=lambda t: (-sign[0] * t.values[0], t.number))
    return front


#: Columns of ``importance.csv`` / :func:`importance_table`.
IMPORTANCE_COLUMNS = ["objective", "param", "importance"]


def importance_table(study, spec: SweepSpec) -> pd.DataFrame:
    """Optuna's fANOVA importance of each parameter, per objective.

    :func:`optuna.importance.get_param_importances` with a
    :class:`~optuna.importance.FanovaImportanceEvaluator` seeded with the
    sweep's seed (so the same study gives the same numbers): a random forest
    is fitted to the COMPLETE trials and each parameter gets the share of
    the objective's variance it explains on its own, normalised to sum to 1
    per objective. It needs scikit-learn (Optuna's fANOVA fits its forest
    with it) and at least two COMPLETE trials.

    Returns
    -------
    DataFrame
        ``objective, param, importance``, most important first per objective.

    Raises
    ------
    ImportError
        Without scikit-learn.
    """
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2 or not spec.keys:
        return pd.DataFrame(columns=IMPORTANCE_COLUMNS)
    rows = []
    for i, lab in enumerate(spec.labels):
        with quiet_optuna():
            imp = get_param_importances(
                study, evaluator=FanovaImportanceEvaluator(seed=spec.seed),
                target=lambda t, i=i: t.values[i])
        rows += [(lab, k, float(v)) for k, v in imp.items()]
    return pd.DataFrame(rows, columns=IMPORTANCE_COLUMNS)


def _importance(study, spec: SweepSpec) -> tuple[pd.DataFrame, str]:
    """:func:`importance_table`, and "written" or why there is none."""
    empty = pd.DataFrame(columns=IMPORTANCE_COLUMNS)
    try:
        imp = importance_table(study, spec)
    except ImportError as exc:
        return empty, f"skipped: Optuna's fANOVA importance needs scikit-learn ({exc})"
    except Exception as exc:  # e.g. every trial has the same value: nothing to explain
        return empty, f"skipped: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return imp, "written" if len(imp) else "skipped: fewer than two COMPLETE trials"


#: Files of ``<run>/sweep/`` that describe the study as one session left it
#: (:func:`write_outputs`, and ``summary.txt``); the plots and ``pareto/``
#: are described by :data:`PLOT_STEMS` and :func:`clear_outputs`.
OUTPUT_FILES = ("trials.csv", "robustness.csv", "plateau.csv", "importance.csv", "best.toml",
                "summary.txt")
#: Stems of the sweep's plots (``history``, ``history_<objective>``, ...).
PLOT_STEMS = ("history", "importance", "slice", "pareto_front")
#: Files of the run folder built from ``sweep/``'s (:func:`memsim.reporting.report.build_report`).
REPORT_FILES = ("report.html", "report.md")


def clear_outputs(run_dir: Path) -> None:
    """Remove what an earlier session wrote about the study from a sweep's
    run folder: the files of :data:`OUTPUT_FILES`, the plots, ``pareto/``
    and the report.

    Called when a session starts on a folder: the study is about to change,
    so they would describe a study that no longer is. A session that is
    interrupted then leaves none of them (or those it wrote, all of the
    study as it left it), never a mix of two sessions': ``memsim.load_sweep``
    gives empty frames for the files missing, and the manifest says
    ``failed``. The study itself (its storage) is never touched.

    Parameters
    ----------
    run_dir : Path
        The sweep's run folder.
    """
    sdir = run_dir / "sweep"
    for name in OUTPUT_FILES:
        (sdir / name).unlink(missing_ok=True)
    if sdir.is_dir():
        for png in sdir.glob("*.png"):
            if any(png.stem == s or png.stem.startswith(f"{s}_") for s in PLOT_STEMS):
                png.unlink(missing_ok=True)
    _clear_pareto(sdir)
    for name in REPORT_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _clear_pareto(sdir: Path) -> None:
    """Remove ``pareto/trial_<n>.toml`` (and the folder, once empty)."""
    pdir = sdir / "pareto"
    if not pdir.is_dir():
        return
    for f in pdir.glob("trial_*.toml"):
        f.unlink(missing_ok=True)
    try:
        pdir.rmdir()
    except OSError:  # files of the user's own: the folder stays
        pass


def write_outputs(study, exp: Experiment, spec: SweepSpec, table: pd.DataFrame,
                   robust: pd.DataFrame, best: list, sdir: Path, timings: dict, quiet: bool,
                   want_plots: bool, plateau: pd.DataFrame | None = None,
                   ) -> tuple[dict[str, str], pd.DataFrame]:
    """Write ``trials.csv``, ``robustness.csv``, ``plateau.csv``,
    ``importance.csv``, the best configuration(s) and the plots into
    ``sdir``; returns (plot name -> "written" or why skipped, the
    importance table)."""
    sdir.mkdir(exist_ok=True)
    write_atomic(sdir / "trials.csv", lambda p: table.to_csv(p, index=False))
    write_atomic(sdir / "robustness.csv", lambda p: robust.to_csv(p, index=False))
    if plateau is not None:
        write_atomic(sdir / "plateau.csv", lambda p: plateau.to_csv(p, index=False))
    t0 = time.perf_counter()
    importance, imp_status = _importance(study, spec)
    timings["importance"] = time.perf_counter() - t0
    if len(importance):
        write_atomic(sdir / "importance.csv", lambda p: importance.to_csv(p, index=False))
    else:  # none now: an earlier session's would describe another study
        (sdir / "importance.csv").unlink(missing_ok=True)
    # the Pareto set of this study only: an earlier member may be dominated now
    _clear_pareto(sdir)
    if best:
        _write_best(exp, spec, best, sdir)
    else:
        (sdir / "best.toml").unlink(missing_ok=True)
    t1 = time.perf_counter()
    plots = _write_plots(study, spec, sdir, table, importance) if want_plots else {}
    if want_plots and imp_status != "written":
        for lab in spec.labels:
            safe = re.sub(r"[^A-Za-z0-9_.@-]+", "-", lab)
            plots[f"importance_{safe}" if spec.multi else "importance"] = imp_status
    timings["plots"] = time.perf_counter() - t1
    skipped = {k: v for k, v in plots.items() if v != "written"}
    if skipped and not quiet:
        for k, v in skipped.items():
            print(f"memsim sweep: plot {k} {v}", file=sys.stderr)
    return plots, importance


def _plot_jobs(study, spec: SweepSpec, table: pd.DataFrame,
               importance: pd.DataFrame | None) -> list[tuple[str, Callable]]:
    """(file name, function drawing the plot and returning its Axes or
    Figure) for each plot of the sweep: Optuna's history and Pareto front,
    memsim's importance bars (of :func:`importance_table`) and slice panels."""
    # matplotlib is heavy and only the run folder's plots need it: load on use
    import optuna.visualization.matplotlib as ovm
    from matplotlib.figure import Figure

    imp = importance if importance is not None else pd.DataFrame(columns=IMPORTANCE_COLUMNS)
    log = {p.key: bool(p.log) for p in spec.params}

    def importance_of(lab: str):
        part = imp[imp["objective"] == lab]
        fig = Figure(figsize=(7.5, max(2.6, 0.5 * len(part) + 1.6)), layout="constrained")
        return mplots.plot_param_importance(part, fig.add_subplot())

    def slice_of(col: str, lab: str, direction: str):
        others = [(f"values_{o}", d) for o, d in zip(spec.labels, spec.directions)
                  if f"values_{o}" != col]
        data = mplots.slice_data(table, col, spec.keys, log, direction, others)
        fig = Figure(figsize=(7.5, 0.6 + 3.0 * math.ceil(max(1, len(spec.keys)) / 2)),
                     layout="constrained")
        mplots.plot_slice(data, fig, lab)
        return fig

    jobs: list[tuple[str, Callable]] = []
    multi = spec.multi
    for i, (lab, d) in enumerate(zip(spec.labels, spec.directions)):
        safe = re.sub(r"[^A-Za-z0-9_.@-]+", "-", lab)
        sfx = f"_{safe}" if multi else ""
        if multi:
            def tgt(t, i=i):
                return t.values[i]
            jobs.append((f"history{sfx}", lambda tgt=tgt, lab=lab: ovm.plot_optimization_history(
                study, target=tgt, target_name=lab)))
        else:
            jobs.append(("history", lambda lab=lab: ovm.plot_optimization_history(
                study, target_name=lab)))
        if len(imp):  # without a table, write_outputs says why there is no plot
            jobs.append((f"importance{sfx}", lambda lab=lab: importance_of(lab)))
        jobs.append((f"slice{sfx}", lambda lab=lab, d=d: slice_of(f"values_{lab}", lab, d)))
    if multi and len(spec.objectives) in (2, 3):
        jobs.append(("pareto_front", lambda: ovm.plot_pareto_front(
            study, target_names=spec.labels)))
    return jobs


def _write_plots(study, spec: SweepSpec, sdir: Path, table: pd.DataFrame,
                 importance: pd.DataFrame | None = None) -> dict[str, str]:
    """The sweep's plots as PNG; returns name -> "written" or why skipped."""
    # matplotlib is heavy and only the run folder's plots need it: load on use
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    status: dict[str, str] = {}
    jobs = _plot_jobs(study, spec, table, importance)
    with matplotlib.rc_context({"figure.max_open_warning": 0}):
        for name, make in jobs:
            try:
                with quiet_optuna():
                    drawn = make()
                if isinstance(drawn, Figure):
                    fig = drawn
                else:
                    fig = np.asarray(drawn, dtype=object).ravel()[0].figure
                    fig.set_size_inches(max(fig.get_size_inches()[0], 6.4),
                                        max(fig.get_size_inches()[1], 4.2))
                write_atomic(sdir / f"{name}.png",
                             lambda p, fig=fig: fig.savefig(p, format="png", dpi=110,
                                                            bbox_inches="tight"))
                plt.close(fig)
                status[name] = "written"
            except Exception as exc:  # a plot that cannot be made must not fail the sweep
                status[name] = f"skipped: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                plt.close("all")
    return status


def _write_best(exp: Experiment, spec: SweepSpec, best: list, sdir: Path) -> None:
    """``best.toml`` and, with several objectives, ``pareto/trial_<n>.toml``."""
    def config_of(t) -> str:
        e = apply_params(exp, dict(t.params))
        table = e.to_config()
        table.pop("sweep", None)
        vals = ", ".join(f"{lab} = {v:.6g}" for lab, v in zip(spec.labels, t.values))
        params = "\n".join(f"#   {k} = {format_value(v)}" for k, v in t.params.items())
        head = (f"# Best configuration of the sweep of {exp.name}: trial {t.number} "
                f"({vals}).\n# Parameters:\n{params}\n# Run it with: memsim run best.toml\n")
        return head + dumps_toml(table)

    write_atomic(sdir / "best.toml", lambda p: p.write_text(config_of(best[0]),
                                                            encoding="utf-8"))
    if spec.multi:
        pdir = sdir / "pareto"
        pdir.mkdir(exist_ok=True)
        for t in best:
            write_atomic(pdir / f"trial_{t.number}.toml",
                         lambda p, t=t: p.write_text(config_of(t), encoding="utf-8"))


@dataclass
class SweepResult:
    """What a sweep produced; the frames are also in ``<path>/sweep/``.

    Attributes
    ----------
    trials : DataFrame
        :func:`trials_table` of the study.
    best_params : dict
        Dotted key -> value of the best trial (with several objectives, the
        Pareto member best on the first objective).
    best_values : dict
        Objective label -> value of that trial.
    best_number : int
    pareto : list of int
        Trial numbers of the Pareto set (the best trial alone with one objective).
    robustness : DataFrame
        :func:`robustness_check` of the best trial(s) and the experiment,
        with the paired difference best - experiment (``vs-experiment`` rows).
    plateau : DataFrame
        :func:`~memsim.sweep.plateau_table`: per objective and parameter,
        ``best``, the plateau ``low``/``high`` (or ``choices``), ``n_trials``,
        ``edge_warning`` and ``note``.
    importance : DataFrame
        :func:`importance_table` (Optuna's fANOVA, seeded), written with the
        run folder's files; empty without a run folder (call
        ``importance_table(result.study, result.spec)``).
    study : optuna.Study
    path : Path or None
        The run folder.
    storage : str
        Where the study lives (a password masked, a SQLite path absolute).
    plots : dict
        Plot name -> "written" or the reason it was skipped.
    notes : list of str
        What the sweep wants its user to know about how it ran (e.g. that
        ``sweep.batch`` could not batch trials), printed after the first
        line of :meth:`summary_text`.
    """

    experiment: Experiment
    spec: SweepSpec
    study: Any
    trials: pd.DataFrame
    best_params: dict
    best_values: dict
    best_number: int | None
    pareto: list[int]
    robustness: pd.DataFrame
    path: Path | None = None
    study_name: str = ""
    storage: str = ""
    plots: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    plateau: pd.DataFrame = field(default_factory=pd.DataFrame)
    importance: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list = field(default_factory=list)

    @property
    def best_value(self) -> float:
        """Value of the first objective for the best trial."""
        return next(iter(self.best_values.values())) if self.best_values else math.nan

    def summary_text(self) -> str:
        """A few lines for the console: best trial, Pareto set, each
        parameter's plateau, a ``WARNING`` line per best value at an edge of
        its range, the parameter importance (fANOVA), the robustness
        re-check, whether the best beats the experiment's preset, and last
        how to open the study: the ``optuna-dashboard`` command and the
        Python that loads it (:func:`memsim.reporting.report.study_access_lines`)."""
        n_done = int((self.trials["state"] == "COMPLETE").sum()) if len(self.trials) else 0
        n_pruned = int((self.trials["state"] == "PRUNED").sum()) if len(self.trials) else 0
        lines = [f"study {self.study_name}: {n_done} COMPLETE trials of {len(self.trials)}"
                 + (f" ({n_pruned} PRUNED)" if n_pruned else "")]
        lines += [f"note: {n}" for n in self.notes]
        if self.spec.multi and self.pareto:
            by_number = self.trials.set_index("number") if "number" in self.trials else None
            lines.append(_pareto_headline(self.pareto, by_number, self.spec.labels))
            for n in self.pareto:
                lines.append(f"  trial {n}: " + _trial_values(by_number, n, self.spec.labels))
        elif self.best_number is not None:
            vals = ", ".join(f"{k} = {_value(v)}" for k, v in self.best_values.items())
            lines.append(f"best: trial {self.best_number} ({vals})")
            for k, v in self.best_params.items():
                lines.append(f"  {k} = {format_value(v)}")
        lines += plateau_lines(self.plateau)
        if len(self.robustness):
            lab = self.spec.labels[0]
            for _, r in self.robustness.iterrows():
                if r["check"] in ("sweep", "vs-experiment"):
                    continue
                what = "fresh seeds" if r["check"] == "fresh-seeds" else f"variant {r['variant']}"
                lines.append(f"robustness: trial {r['number']} ({r['role']}) on {what} "
                             f"(replicates {r['replicates']}): {lab} = "
                             f"{_value(r[f'values_{lab}'])} ({r[f'change_{lab}']:+.4g})")
            lines += _paired_lines(self.robustness, self.spec)
        lines += _importance_lines(self.importance)
        if self.study_name:
            lines += study_access_lines(self.storage, self.study_name, self.path)
        return "\n".join(lines)

    def best_experiment(self) -> Experiment:
        """The experiment with the best parameters applied (sweep table removed)."""
        e = apply_params(self.experiment, self.best_params)
        return dataclasses.replace(e, sweep=None)


def _value(v: float) -> str:
    """An objective's value for the console: large values (token counts,
    stored tokens) in full with thousands separators, others to 4 digits."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return str(v)
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    if abs(v) >= 1e3:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def _pareto_headline(pareto: list[int], by_number: pd.DataFrame | None, labels) -> str:
    """The line above the Pareto set's trials: whether its objectives trade
    off. One member is at least as good as every other trial on every
    objective (each other trial is dominated by it), so it is a single best;
    members that all have the same values are tied, not a trade-off."""
    n = len(pareto)
    if n == 1:
        return ("Pareto set (1 trial: at least as good as every other trial on every "
                "objective, so it is the single best):")
    cols = [f"values_{lab}" for lab in labels]
    tied = (by_number is not None and all(c in by_number.columns for c in cols)
            and all(t in by_number.index for t in pareto)
            and len({tuple(float(by_number.at[t, c]) for c in cols) for t in pareto}) == 1)
    if tied:
        return (f"Pareto set ({n} trials, tied: the same value on every objective, so no "
                "trade-off between them):")
    return f"Pareto set ({n} trials; no single best, the objectives trade off):"


def _trial_values(by_number: pd.DataFrame | None, number: int, labels) -> str:
    """``label = value, ...`` of one trial of the trials table."""
    if by_number is None or number not in by_number.index:
        return "(values not in the trials table)"
    row = by_number.loc[number]
    cols = [f"values_{lab}" if f"values_{lab}" in row.index else "value" for lab in labels]
    return ", ".join(f"{lab} = {_value(row[c])}" for lab, c in zip(labels, cols) if c in row.index)


def _importance_lines(importance: pd.DataFrame) -> list[str]:
    """One line per objective: the parameters by fANOVA importance."""
    if importance is None or not len(importance):
        return []
    return [f"importance (fANOVA, {lab}): "
            + ", ".join(f"{r['param']} {r['importance']:.2f}" for _, r in g.iterrows())
            for lab, g in importance.groupby("objective", sort=False)]


def _paired_lines(robust: pd.DataFrame, spec: SweepSpec) -> list[str]:
    """One line per ``vs-experiment`` row of the robustness table and objective:
    the paired difference winner - preset, its interval and the verdict."""
    lines = []
    if "check" not in robust:
        return lines
    for _, r in robust[robust["check"] == "vs-experiment"].iterrows():
        what = "fresh seeds" if not r["variant"] else f"variant {r['variant']}"
        for lab in spec.labels:
            d, lo, hi = r[f"diff_{lab}"], r[f"diff_ci_low_{lab}"], r[f"diff_ci_high_{lab}"]
            verdict = r[f"verdict_{lab}"]
            # a replayed stream's interval is over its queries (robustness_check)
            over = r.get(f"ci_over_{lab}", "replicates")
            if verdict == NO_INTERVAL:
                ci = "no interval (measured once per run, and the replicates replay one stream)"
            elif verdict == "not measured":
                ci = ("no interval from one replicate" if over != "queries" else
                      "no interval: fewer than two of the stream's queries pair")
            else:
                kind = ("bootstrap interval over the replayed stream's queries"
                        if over == "queries" else "t-interval")
                ci = (f"95% paired {kind} [{lo:+.4g}, {hi:+.4g}] "
                      f"{'excludes' if r[f'excludes_0_{lab}'] else 'includes'} 0")
            says = {"better": "beats the experiment's preset",
                    "worse": "is worse than the experiment's preset",
                    "no difference shown": "not shown to beat the experiment's preset",
                    "not measured": "not measured",
                    NO_INTERVAL: "no verdict"}.get(verdict, verdict)
            note = r.get("note") if isinstance(r.get("note"), str) else ""
            if IN_SAMPLE_NOTE in note and verdict in ("better", "worse"):
                says += " (in-sample: on the stream the sweep chose it on)"
            same = " (it is the preset)" if note.startswith(SAME_NOTE) else ""
            lines.append(f"vs preset: trial {r['number']} ({r['role']}){same} on {what} "
                         f"(replicates {r['replicates']}): {lab} {d:+.4g} minus preset, {ci}: "
                         f"{says}")
    return lines
