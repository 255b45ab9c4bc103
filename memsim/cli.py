"""The ``memsim`` command line: a thin layer over the Python API.

A user mistake (:class:`memsim.core.errors.MemsimError`) prints one line on stderr
and exits with code 2; a fault of the environment (an ``OSError``: disk full,
read-only folder, file-size limit) prints one line and exits with code 1;
Ctrl-C exits with code 130 and SIGTERM with 143 (128 + the signal's number,
the shells' convention); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

from memsim.data import datasets
from memsim.core import interrupt
from memsim.core.errors import ConfigError, MemsimError
from memsim.core.machine import default_jobs

__all__ = ["main"]


class Progress:
    """Progress of a long command on stderr, as a ``progress(frac)`` callable
    (``frac`` in [0, 1], the share of the current phase done).

    On a terminal, a tqdm bar labelled with the phase (``memsim run:
    replicates``), shown once the phase has run 2 seconds. Anywhere else (a
    pipe, a log file, a notebook cell running the command) one plain line per
    unit of work, ``memsim run: replicate 2/3 done (12.3 s, about 12 s
    left)``, or per tenth of the phase when it has no units. ``quiet``
    silences both. :meth:`phase` starts the next phase of the same command.

    ``units`` is a number of equal units, or a list of ``(frac, name)``: the
    unit ``name`` is done once ``frac`` reaches that value. With ``resumed``,
    the first call tells how much was done before (a resumed sweep), not
    what this command did.
    """

    def __init__(self, label: str, quiet: bool = False, *, phase: str = "",
                 units: int | list[tuple[float, str]] | None = None, unit: str = "step",
                 resumed: bool = False, then: str = "", stream=None, tty: bool | None = None,
                 json_lines: bool = False):
        self.label = label
        self.quiet = quiet
        self.stream = sys.stderr if stream is None else stream
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty()) and not json_lines
        self.tty = tty
        self.json_lines = json_lines
        self._bar = None
        self._start(phase, units, unit, resumed, then)

    def _start(self, phase, units, unit, resumed, then) -> None:
        self.phase_name = phase
        if isinstance(units, int) and not isinstance(units, bool):
            units = [((k + 1) / units, f"{unit} {k + 1}/{units}") for k in range(units)]
        self.units = list(units) if units else None
        self.unit = unit
        self.then = then
        self.resumed = resumed
        self.t0 = time.monotonic()
        self.frac0: float | None = None  # the first frac seen
        self.n_done = 0                  # units (or tenths) reported
        self.finished = False

    def phase(self, phase: str, units: int | list[tuple[float, str]] | None = None,
              unit: str = "step", then: str = "") -> Progress:
        """Close this phase and start the next one; returns ``self``."""
        self.close()
        self._start(phase, units, unit, False, then)
        return self

    def _title(self) -> str:
        return f"{self.label}: {self.phase_name}" if self.phase_name else self.label

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def __call__(self, frac: float) -> None:
        if self.quiet or self.finished:
            return
        frac = min(max(float(frac), 0.0), 1.0)
        first = self.frac0 is None
        if first:
            self.frac0 = frac if self.resumed else 0.0
        marks = self.units or [((k + 1) / 10, f"{10 * (k + 1)}%") for k in range(10)]
        done = self.n_done
        while done < len(marks) and frac >= marks[done][0] - 1e-9:
            done += 1
        if first and self.resumed:
            if done and not self.tty:
                before = f"{done}/{len(marks)} {self.unit}s done before"
                # --progress json: a record like the others, never a line of text
                self._write(self._json_line((marks[done - 1][0], before), before=True)
                            if self.json_lines else f"{self._title()}: {before}")
            self.n_done = done
        if self.tty:
            self._draw(frac, done, len(marks))
        else:
            for k in range(self.n_done, done):
                if self.json_lines:
                    self._write(self._json_line(marks[k]))
                else:
                    self._write(f"{self.label}: {marks[k][1]} done "
                                f"({self._timing(marks[k][0])})")
        self.n_done = done
        if frac >= 1.0:
            self.finished = True
            if self.then:
                self.close()
                # with --progress json, the next phase's records name it
                if not self.json_lines:
                    self._write(f"{self.label}: {self.then}")

    def _json_line(self, mark: tuple[float, str], before: bool = False) -> str:
        """One progress record of ``--progress json``: a JSON object per line
        (``before``: the units a resumed command found done, in no time and
        with no estimate of what is left)."""
        import json

        elapsed = 0.0 if before else time.monotonic() - self.t0
        share = mark[0] - (self.frac0 or 0.0)
        left = (elapsed * (1.0 - mark[0]) / share
                if mark[0] < 1.0 and share > 0 and not before else None)
        return json.dumps({"command": self.label, "phase": self.phase_name, "done": mark[1],
                           "fraction": round(mark[0], 6), "elapsed_s": round(elapsed, 3),
                           "left_s": None if left is None else round(left, 1)})

    def _timing(self, frac: float) -> str:
        elapsed = time.monotonic() - self.t0
        text = f"{elapsed:.1f} s"
        share = frac - (self.frac0 or 0.0)
        if frac < 1.0 and share > 0:
            text += f", about {elapsed * (1.0 - frac) / share:.0f} s left"
        return text

    def _draw(self, frac: float, done: int, total: int) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=1.0, file=self.stream, delay=2.0, leave=True,
                             desc=self._title(), initial=frac, dynamic_ncols=True,
                             bar_format="{desc}{percentage:3.0f}%|{bar}| "
                                        "[{elapsed}<{remaining}]")
        counted = f" {done}/{total} {self.unit}s" if self.units else ""
        self._bar.set_description_str(f"{self._title()}{counted} ", refresh=False)
        self._bar.update(frac - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _json_progress(args) -> bool:
    """``--progress json``: progress as JSON lines on stderr."""
    return getattr(args, "progress", "auto") == "json"


def _print_json(data) -> None:
    """A command's result as one JSON document on stdout (``--json``): NaN and
    infinities as null (JSON has neither), numpy scalars as numbers, frames as
    lists of records, paths as strings (:func:`memsim.reporting.rundir.jsonable`)."""
    import json

    from memsim.reporting.rundir import jsonable

    print(json.dumps(jsonable(data), indent=2, allow_nan=False))


def _cmd_run(args) -> int:
    from memsim.reporting.compare import headline_text
    from memsim.reporting.rundir import load_run
    from memsim.runs.config import load_experiment
    from memsim.runs.runner import run_many
    exps = [load_experiment(p, args.set) for p in args.experiments]
    if args.mlflow is not None:
        from memsim.adapters.tracking import quiet, require as require_mlflow
        quiet()
        require_mlflow(args.mlflow or None)
    phase, units = _run_units(exps, args.jobs)
    prog = Progress("memsim run", args.quiet, phase=phase, units=units, unit=phase[:-1],
                    json_lines=_json_progress(args))
    n = sum(e.n_runs() for e in exps)

    def report_progress(i: int):
        # each report is a phase of its own (its tables, then each figure)
        label = "memsim run: report" + (f" of run {i + 1}/{n}" if n > 1 else "")
        prog_i = Progress(label, args.quiet, json_lines=_json_progress(args))

        def say(frac: float) -> None:
            prog_i(frac)
            if frac >= 1:
                prog_i.close()
        return say
    try:
        paths = run_many(exps, out=args.out, jobs=args.jobs, report=not args.no_report,
                         progress=prog, argv=sys.argv, report_progress=report_progress)
    finally:
        prog.close()
    if args.mlflow is not None:
        from memsim.adapters.tracking import log_run
        # a grid's runs go to one MLflow experiment, the file's, side by side
        names = [e.name for e in exps for _ in range(e.n_runs())]
        for p, name in zip(paths, names):
            try:
                log_run(p, tracking_uri=args.mlflow or None, experiment=name)
            except MemsimError as exc:  # the runs are complete: say where they are
                exc.completed = list(paths)
                raise
    if args.json:
        runs = []
        for p in paths:
            run = load_run(p)
            runs.append({"path": str(p), "name": run.config.get("experiment", {}).get("name"),
                         "status": (run.manifest or {}).get("status"),
                         "summary": run.summary})
        _print_json({"runs": runs})
        return 0
    for p in paths:
        if not args.quiet:
            # the headline in plain text (it ends with a newline), so that the
            # terminal shows the result, then a blank line
            run = load_run(p)
            empty = run.queries is not None and len(run.queries) == 0
            print("The run has no queries: nothing to measure.\n" if empty
                  else headline_text(run, ascii=not _utf8_stdout()))
            _print_prefilter_overlap(p)
        print(p)
    return 0


def _print_prefilter_overlap(run_dir) -> None:
    """The recall loss of the run's approximate indexes (``arms.csv``), when it has one."""
    arms = Path(run_dir) / "arms.csv"
    if arms.is_file():
        import pandas as pd

        from memsim.reporting.report import prefilter_overlap_line
        line = prefilter_overlap_line(pd.read_csv(arms))
        if line:
            print(line + "\n")


def _run_units(exps: list, jobs: int) -> tuple[str, list[tuple[float, str]]]:
    """The units :func:`memsim.runs.runner.run_many` reports progress in: its
    replicates, or its runs when they run in parallel (or are very many)."""
    n = sum(e.n_runs() for e in exps)
    if (jobs > 1 and n > 1) or n > 200:
        return "runs", [((k + 1) / n, f"run {k + 1}/{n}") for k in range(n)]
    units = []
    for i, e in enumerate(x for exp in exps for x in exp.expand()):
        r = e.settings.replicates
        for j in range(r):
            name = f"replicate {j + 1}/{r}" + (f" of run {i + 1}/{n}" if n > 1 else "")
            units.append(((i + (j + 1) / r) / n, name))
    return "replicates", units


def _jobs(text: str) -> int:
    """``--jobs``: a positive number of worker processes."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of processes, >= 1")
    return n


def _replicate(text: str) -> int:
    """``--replicate``: a replicate's number, >= 0 (it names the stream's
    seed, as ``memsim run`` numbers its replicates)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, >= 0")
    return n


def _utf8_stdout() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") == "utf8"


def _cmd_report(args) -> int:
    from memsim.runs.config import import_run_plugins
    from memsim.reporting.report import build_report
    import_run_plugins(args.run_dir)  # the report rebuilds the run's policies
    prog = Progress("memsim report", getattr(args, "quiet", False), phase="tables and figures",
                    json_lines=_json_progress(args))
    try:
        out = build_report(Path(args.run_dir), progress=prog)
    finally:
        prog.close()
    print(out)
    return 0


def _cmd_stream_generate(args) -> int:
    from memsim.runs.config import StreamSource, load_experiment
    from memsim.core.rng import child_seq, seed_sequence
    from memsim.data.stream import check_stream_dest, write_stream
    # a grid's runs that share a workload and seed share the stream
    exp = load_experiment(args.experiment, args.set).single(
        "memsim stream generate", same=lambda e: (e.seed, e.to_config()["workload"]))
    check_stream_dest(args.out)  # before the stream is generated
    if isinstance(exp.workload, StreamSource):
        raise MemsimError(f"{args.experiment}: the workload replays {exp.workload.path}; "
                          "there is nothing to generate")
    stream = exp.workload.generate(child_seq(seed_sequence(exp.seed), "replicate",
                                             args.replicate, "workload"))
    # named after the experiment it came from, not the generator
    stream.meta.update(name=f"{exp.name}-replicate-{args.replicate}",
                       experiment=str(args.experiment))
    write_stream(stream, Path(args.out))
    print(args.out)
    return 0


def _cmd_stream_validate(args) -> int:
    from memsim.data.stream import describe_stream, read_stream
    stream = read_stream(Path(args.path))
    if args.json:
        from memsim.data.stream import stream_facts
        _print_json({"valid": True, **stream_facts(stream)})
        return 0
    print(describe_stream(stream))
    print("valid")
    return 0


def _cmd_schema(args) -> int:
    if args.format == "trace":
        from importlib import resources
        sys.stdout.write(resources.files("memsim").joinpath("schemas", "trace-v1.json")
                         .read_text("utf-8"))
        return 0
    from memsim.schema import schema_text
    _load_entry_points()  # the installed packages' components too
    sys.stdout.write(schema_text())
    return 0


def _load_entry_points() -> None:
    """The installed packages' components, each entry point that cannot be
    loaded a warning (the others are listed)."""
    from memsim.policies.plugins import load_entry_points
    for why in load_entry_points():
        logging.getLogger("memsim").warning("%s", why)


def _cmd_policies(args) -> int:
    from memsim.policies import PRESETS, REGISTRY, assumptions
    from memsim.policies.catalogue import SOURCES
    _load_entry_points()  # the installed packages' components too
    if getattr(args, "markdown", False):
        from memsim.policies.catalogue import catalogue_markdown

        print(catalogue_markdown())
        return 0
    if args.json:
        _print_json({
            "components": {slot: [
                {"name": name, "doc": _plain_text(_first_paragraph(cls.__doc__)),
                 "params": [{"name": n, "default": d, "allowed": a}
                            for n, d, a in cls.describe()]}
                for name, cls in sorted(table.items())] for slot, table in REGISTRY.items()},
            "presets": [{"name": name, "doc": _plain_text(_first_paragraph(preset.doc)),
                         "source": SOURCES.get(name),
                         "assumed": {k: _plain_text(v) for k, v in assumptions(name).items()}}
                        for name, preset in sorted(PRESETS.items())]})
        return 0
    for slot, table in REGISTRY.items():
        print(f"[{slot}]")
        for name, cls in sorted(table.items()):
            doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            print(f"  {name}: {_plain_text(doc)}")
            for pname, default, allowed in cls.describe():
                print(f"      {pname} = {default!r}  ({allowed})")
    print("[presets]")
    for name, preset in sorted(PRESETS.items()):
        # the first sentence: a period followed by a space or the end ("weights 0.5"
        # is not a sentence end)
        first = re.split(r"\.(?=\s|$)", preset.doc.strip(), maxsplit=1)[0].replace("\n", " ")
        print(f"  {name}: {_plain_text(' '.join(first.split()))}.")
        if name in SOURCES:
            print(f"      source: {SOURCES[name]}")
        for key, why in assumptions(name).items():
            print(f"      assumed {key}: {_plain_text(why)}")
    return 0


def _first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    import inspect

    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?(?:[^`<]*<)?([^`>]+)>?`")


def _plain_text(text: str) -> str:
    """Docstring text without its reST markup: ``code``, :class:`~a.B`,
    **bold**, *emphasis*, `title`."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0)
                     else m.group(1), text)
    text = re.sub(r"``(.+?)``", r"\1", text)
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", text)
    return re.sub(r"`([^`]+)`_?", r"\1", text)


def _overrides(pairs: list[str]) -> dict:
    from memsim.runs.config import parse_override
    return dict(parse_override(o) for o in pairs)


def _cmd_curves(args) -> int:
    from memsim.reporting.curves import curves_table, format_curves
    df = curves_table(args.presets, overrides=_overrides(args.set), s=args.s, delta=args.delta)
    if args.json:
        # JSON writes inf and NaN alike as null: say which, as the table does
        # ('always' / 'never' against n/a)
        import numpy as np

        cross, evict = df["crossover_days"].astype(float), df["evict_after_days"].astype(float)
        _print_json({"curves": df.assign(crossover_always=np.isposinf(cross),
                                         evicted_never=np.isposinf(evict))})
        return 0
    print(format_curves(df))
    return 0


def _data_or_path(text: str) -> Path:
    """A command's file argument: a path, or ``data:NAME`` from the data cache."""
    return datasets.resolve(text) if text.startswith(datasets.DATA_PREFIX) else Path(text)


def _cmd_data_get(args) -> int:
    if args.source is not None and args.url is not None:
        raise MemsimError("--from and --url: give one (--from registers a copy you have, "
                          "--url downloads from a mirror)")
    datasets.check_folder(args.name, args.to)  # before a download
    if args.source is not None:
        path = datasets.register(args.name, args.source, to=args.to)
    else:
        path = datasets.get(args.name, to=args.to, url=args.url, announce=lambda src: print(
            f"memsim data get: downloading {args.name} from {src}", file=sys.stderr))
    print(datasets.describe(args.name))
    to = Path(args.to).expanduser().absolute() if args.to is not None else None
    if to is not None and to != datasets.cache_dir():
        print(f"note: data:{args.name} reads the cache ({datasets.cache_dir()}); to use this "
              f"copy, set {datasets.CACHE_ENV}={to}")
    print(path)
    return 0


def _cmd_data_list(args) -> int:
    print(datasets.listing())
    return 0


def _cmd_stream_check(args) -> int:
    from memsim.data.importers.trace import check_trace
    if args.limit < 0:
        raise MemsimError(f"--limit: must be 0 or more (0 lists no error, only their count), "
                          f"got {args.limit}")
    errors, more = check_trace(_data_or_path(args.path), limit=args.limit, qrels=args.qrels)
    for line in errors:
        print(line)
    if more:
        print(f"... and {more} more" if errors else
              f"{more} error{'s' if more != 1 else ''} not listed (--limit 0)")
    count = len(errors) + more
    if count:  # (--limit 0 lists none: the count still says the trace is not valid)
        # (the errors name their own file: the trace's or --qrels')
        what = args.path + (f" with --qrels {args.qrels}" if args.qrels else "")
        print(f"memsim: error: {what}: {count} error{'s' if count != 1 else ''}",
              file=sys.stderr)
        return 2
    print(f"{args.path}: a valid trace (format version 1)")
    return 0


def _cmd_stream_import(args) -> int:
    from memsim.data.importers.locomo import cli_import_locomo
    from memsim.data.importers.trace import cli_import_trace
    from memsim.data.stream import check_stream_dest
    args.path = str(_data_or_path(args.path))
    check_stream_dest(args.out)  # before the import's work
    if args.format == "trace":
        cli_import_trace(Path(args.path), Path(args.out), embedder=args.embedder,
                         qrels=args.qrels)
        print(args.out)
        return 0
    if args.format != "locomo":  # argparse restricts choices; kept for clarity
        raise MemsimError(f"unknown import format {args.format!r}")
    if args.qrels is not None:
        raise MemsimError("--qrels: only a trace takes a TREC qrels file (LoCoMo has its own)")
    cli_import_locomo(Path(args.path), Path(args.out), notes=args.notes, captions=args.captions,
                      embedder=args.embedder or "bm25")
    print(args.out)
    return 0


def _cmd_calibrate(args) -> int:
    import math

    from memsim.tuning.calibrate import calibrate_revlog, format_calibration
    days = args.min_elapsed_days
    if not (math.isfinite(days) and days >= 0):  # named as the option, not the parameter
        raise ConfigError(f"--min-elapsed-days: give a finite number >= 0, got {days!r}")
    out = None if args.out is None else Path(args.out)
    result = calibrate_revlog(_data_or_path(args.path), out, min_elapsed_days=args.min_elapsed_days)
    print(format_calibration(result))
    if out is not None:
        print(out)
    return 0


def _cmd_calibrate_workload(args) -> int:
    from memsim.tuning.twin import calibrate_workload, format_twin
    say = None if args.quiet else (
        lambda m: print(f"memsim calibrate workload: {m}", file=sys.stderr))
    twin = calibrate_workload(_data_or_path(args.stream), Path(args.out), budget=args.budget,
                              seed=args.seed, steps=args.steps, progress=say)
    print(format_twin(twin))
    print(args.out)
    return 0


def _cmd_sweep(args) -> int:
    # imported here: memsim.sweep loads Optuna, which only this command needs
    from memsim.sweep import run_sweep

    if args.experiment is None and args.resume is None:
        raise MemsimError("memsim sweep: give an EXPERIMENT.toml or --resume RUN_DIR")
    if args.mlflow is not None:
        from memsim.adapters.tracking import quiet, require as require_mlflow
        quiet()
        require_mlflow(args.mlflow or None)
    prog = Progress("memsim sweep", args.quiet, phase="trials", units=_sweep_trials(args),
                    unit="trial", resumed=True, json_lines=_json_progress(args),
                    then="trials done; robustness check on fresh seeds, plateaus"
                         + ("" if args.no_report else ", report"))
    try:
        res = run_sweep(args.experiment, trials=args.trials, storage=args.storage,
                        study_name=args.study, workers=args.workers, out=args.out,
                        overrides=args.set, quiet=True, resume=args.resume, progress=prog,
                        report=not args.no_report, argv=sys.argv, batch=args.batch,
                        pruner=args.pruner, cache_mb=args.cache_mb)
    finally:
        prog.close()
    if args.mlflow is not None:
        from memsim.adapters.tracking import log_sweep
        try:
            log_sweep(res, tracking_uri=args.mlflow or None)
        except MemsimError as exc:  # the sweep is complete: say where it is
            exc.completed = [] if res.path is None else [res.path]
            raise
    if args.json:
        _print_json({"path": None if res.path is None else str(res.path),
                     "study": res.study_name, "storage": res.storage,
                     "best": {"number": res.best_number, "values": res.best_values,
                              "params": res.best_params},
                     "pareto": res.pareto, "plateau": res.plateau,
                     "robustness": res.robustness, "notes": list(res.notes)})
        return 0
    if not args.quiet:
        print(res.summary_text())
    print(res.path if res.path is not None else res.study_name)
    return 0


def _sweep_trials(args) -> int | None:
    """How many COMPLETE trials the sweep asks for (for progress lines), or
    None when that is not known before the sweep loads its experiment."""
    from memsim.runs.config import load_experiment
    if args.trials is not None:
        return args.trials if isinstance(args.trials, int) and args.trials > 0 else None
    from memsim.sweep.space import SweepSpec

    path = args.experiment
    if path is None and args.resume is not None:
        path = Path(args.resume) / "config.toml"
    if path is None:
        return None
    try:
        exp = load_experiment(path, args.set)
        return SweepSpec.from_config(exp.sweep, exp).trials if exp.sweep else None
    except MemsimError:
        return None  # run_sweep says what is wrong


def _cmd_audit(args) -> int:
    from memsim.tuning.audit import audit, check_out_folder
    from memsim.runs.config import load_experiment
    if args.no_params and args.param_replicates is not None:
        raise ConfigError("--param-replicates: the replicates of the parameter probes, which "
                          "--no-params skips; give one or the other")
    if args.out is not None:  # before the audit's work, not after it
        check_out_folder(args.out)
    exp = load_experiment(args.experiment, args.set)
    prog = Progress("memsim audit", args.quiet, phase="signals and parameters",
                    json_lines=_json_progress(args))
    try:
        report = audit(exp, replicate=args.replicate, max_queries=args.queries,
                       params=not args.no_params, replicates=args.param_replicates,
                       progress=prog, jobs=args.jobs)
    finally:
        prog.close()
    saved = report.save(Path(args.out)) if args.out is not None else None
    if args.json:
        _print_json({"experiment": report.experiment, "replicate": report.replicate,
                     "queries": report.n_queries, "notes": report.n_notes,
                     "replicates": report.replicates, "signals": report.signals,
                     "params": report.params, "reach": report.reach, "flags": report.flags,
                     "untestable": report.untestable(), "tiers": report.tiers,
                     "replays": report.replays, "remarks": report.notes, "out": saved})
        return 0
    print(report.to_text())
    if saved is not None:
        print(saved)
    return 0


def _cmd_optimum(args) -> int:
    from memsim.runs.config import load_experiment
    from memsim.tuning.optimum import optimum
    exp = load_experiment(args.experiment, args.set)
    prog = Progress("memsim optimum", args.quiet, phase="simulations",
                    json_lines=_json_progress(args))
    try:
        rep = optimum(exp, simulate=not args.no_simulate, progress=prog)
    finally:
        prog.close()
    print(rep.to_json() if args.json else rep.to_text())
    return 0


def _cmd_advise(args) -> int:
    from memsim.tuning.advice import advise, print_progress

    # --progress json: the progress printer of the other commands, one JSON
    # object per batch of trials; else a line of text per batch (none with
    # --json or --quiet)
    prog = lines = None
    if _json_progress(args):
        prog = Progress("memsim advise", args.quiet, phase="trials", units=_advise_units(args),
                        unit="trial", json_lines=True)
    elif not (args.quiet or args.json):
        lines = print_progress
    try:
        # advise() loads the file with the overrides: its [advise] mistakes
        # name the file, and the --set or --current that set the key
        advice = advise(args.experiment, overrides=args.set, current=args.current,
                        out=args.out, argv=sys.argv, progress=lines, progress_fraction=prog)
    finally:
        if prog is not None:
            prog.close()
    if args.json:
        print(advice.to_json())
        return 0
    if not args.quiet:
        print(advice.to_text())
    if advice.path is not None:
        print(advice.path)
    return 0


def _advise_units(args) -> list[tuple[float, str]] | None:
    """The batches of trials ``memsim advise`` reports progress in
    (``trials 10/30``), or None when the [advise] table does not parse
    (advise then says what is wrong)."""
    from memsim.runs.config import load_experiment
    from memsim.tuning.advice import AdviseSpec
    try:
        exp = load_experiment(args.experiment, args.set)
        spec = AdviseSpec.from_table(exp.advise, exp, args.current)
    except MemsimError:
        return None
    ends = list(range(spec.batch, spec.trials, spec.batch)) + [spec.trials]
    return [(k / spec.trials, f"trials {k}/{spec.trials}") for k in ends]


def _cmd_feather_check(args) -> int:
    from memsim.checks.feather_check import main as feather_main
    prog = Progress("memsim feather-check", args.quiet, json_lines=_json_progress(args))
    try:
        return feather_main([args.config] + (["--csv", args.csv] if args.csv else [])
                            + (["--json"] if args.json else []), progress=prog)
    finally:
        prog.close()


def _cmd_engine_check(args) -> int:
    from memsim.checks.feather_check import main as feather_main
    argv = ([args.config] + (["--csv", args.csv] if args.csv else [])
            + (["--json"] if args.json else []))
    if args.engine == "feather":
        prog = Progress("memsim engine-check feather", args.quiet,
                        json_lines=_json_progress(args))
        try:
            return feather_main(argv, progress=prog)
        finally:
            prog.close()
    if args.engine != "langchain":  # a framework's scoring function (memsim.checks.framework_check)
        from memsim.checks.framework_check import main as framework_main

        return framework_main(args.engine, argv)
    from memsim.checks.langchain_check import main as langchain_main

    return langchain_main(argv)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' line breaks, and appends ``(default: X)`` to an
    option's help when it has a default worth saying and the help does not
    already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, [], argparse.SUPPRESS)
                or not action.option_strings or isinstance(default, bool)):
            return text
        return text + " (default: %(default)s)"


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _package_version() -> str:
    import importlib.metadata  # 60 ms: read only when --version is asked for

    try:
        return importlib.metadata.version("memsim")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        from memsim import __version__

        return __version__


class _Version(argparse.Action):
    """``--version``, with the installed package's version looked up only when asked."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"memsim {_package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memsim", description="Simulate and sweep the ranking, retention and packing "
        "policies of AI memory layers.", formatter_class=_HelpFormatter,
        epilog=_examples("memsim run experiments/quickstart.toml", "memsim policies",
                         "memsim curves hivemind feather", "memsim run --help")
        + "\n\nEvery command has --help with its options and examples.")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show the installed version and exit")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="say what memsim is doing on stderr (-vv: debugging detail)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="what to do (COMMAND --help says more)")

    def add(parent, name: str, help: str, examples: tuple[str, ...] = (), **kw):
        return parent.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".",
                                 formatter_class=_HelpFormatter,
                                 epilog=_examples(*examples) if examples else None, **kw)

    # A parent parser shares its action objects with every child, so --out,
    # whose default differs between commands, is added per command.
    # -q and --progress: every command that shows progress
    progress = argparse.ArgumentParser(add_help=False)
    progress.add_argument("-q", "--quiet", action="store_true",
                          help="no progress bar or progress lines on stderr; run, sweep and "
                               "advise also print only the run folder (no headline table, "
                               "summary or advice)")
    progress.add_argument("--progress", choices=["auto", "json"], default="auto",
                          help="progress on stderr: a bar on a terminal and lines elsewhere "
                               "(auto), or one JSON object per line (json)")
    common = argparse.ArgumentParser(add_help=False, parents=[progress])
    common.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a dotted config key (repeatable)")
    # --json: the command's result as one JSON document on stdout
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true",
                         help="print the result as one JSON document on stdout instead of "
                              "text (NaN as null)")

    def add_out(parser, default="results", text="parent folder of run folders"):
        parser.add_argument("--out", default=default, metavar="DIR", help=text)

    r = add(sub, "run", "run experiments, write run folders", (
        "memsim run experiments/quickstart.toml",
        "memsim run experiments/quickstart.toml "
        "--set policies.half-life-180-floor.decay.floor=0.2",
        "memsim run experiments/quickstart.toml experiments/packing.toml --jobs 2",
        "memsim run experiments/quickstart.toml --json --progress json"),
        parents=[common, as_json])
    add_out(r)
    r.add_argument("experiments", nargs="+", metavar="EXPERIMENT.toml",
                   help="experiment files (a [grid] table expands into one run per "
                        "combination)")
    r.add_argument("--jobs", type=_jobs, default=default_jobs(), metavar="N",
                   help="worker processes, one per core unless given: several runs at once, "
                        "or a single run's replicates (a last round of replicates that "
                        "would leave workers idle shares its arms among them); results "
                        "do not depend on it")
    r.add_argument("--no-report", action="store_true", help="skip report.html")
    r.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                   help="export each run to MLflow (params, metrics, report): to URI, or "
                        "MLflow's default without one; off unless given (the [mlflow] extra)")
    # --quiet (from the common options) also keeps the headline table off:
    # only the run folders are printed
    r.set_defaults(func=_cmd_run)

    sw = add(sub, "sweep", "Optuna sweep of an experiment's [sweep] table (resumable)", (
        "memsim sweep experiments/sweep_hivemind.toml --trials 100 --workers 2",
        "memsim sweep experiments/sweep_hivemind.toml --trials 20 --batch 10 --pruner median"),
        parents=[common, as_json])
    add_out(sw)
    sw.add_argument("experiment", nargs="?", default=None, metavar="EXPERIMENT.toml",
                    help="experiment file with a [sweep] table (optional with --resume)")
    sw.add_argument("--trials", type=int, default=None,
                    help="COMPLETE trials the study must end with (default: sweep.trials)")
    sw.add_argument("--storage", default=None, metavar="URL",
                    help="sqlite:///FILE.db, postgresql://USER:PW@HOST/DB or journal:FILE "
                         "(default: a journal file in the run folder)")
    sw.add_argument("--study", default=None, metavar="NAME",
                    help="study name (default: <name>-<hash8>); the same command with the "
                         "same name resumes or joins it")
    sw.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    sw.add_argument("--batch", type=int, default=None, metavar="N",
                    help="trials simulated together as the arms of one replay (default: "
                         "sweep.batch, 1); same values, less time when only policies.* keys "
                         "are swept")
    sw.add_argument("--pruner", default=None, metavar="NAME",
                    help="stop unpromising trials between replicates: none, median, hyperband "
                         "or successive-halving (default: sweep.pruner, none)")
    sw.add_argument("--cache-mb", type=int, default=None, metavar="MB",
                    help="megabytes of similarity work each worker keeps between batches "
                         "(default: sweep.cache_mb, else a quarter of the memory shared by "
                         "the workers, at most 2048; 0: none); same values")
    sw.add_argument("--resume", default=None, metavar="RUN_DIR",
                    help="continue the sweep of this run folder")
    sw.add_argument("--no-report", action="store_true", help="skip report.html")
    sw.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                    help="export the sweep to MLflow (a run, one nested run per trial): to "
                         "URI, or MLflow's default without one; off unless given (the [mlflow] "
                         "extra)")
    sw.set_defaults(func=_cmd_sweep)

    au = add(sub, "audit",
             "which signals vary and which swept parameters the workload can test",
             ("memsim audit experiments/sweep_hivemind.toml --queries 100",),
             parents=[common, as_json])
    add_out(au, None, "folder to save signals.csv, params.csv, reach.csv and audit.txt in "
            "(default: print only)")
    au.add_argument("experiment", metavar="EXPERIMENT.toml",
                    help="experiment file (its [sweep] table names the parameters to probe)")
    au.add_argument("--replicate", type=int, default=0, help="replicate stream to audit")
    au.add_argument("--queries", type=int, default=300,
                    help="queries sampled for the signal spreads")
    au.add_argument("--no-params", action="store_true",
                    help="skip evaluating the swept parameters (signals only)")
    au.add_argument("--param-replicates", type=int, default=None, metavar="N",
                    help="replicates each probe value is evaluated on "
                         "(default: the experiment's, at least 3)")
    au.add_argument("--jobs", type=_jobs, default=default_jobs(), metavar="N",
                    help="worker processes the replays run in, one per core unless given; "
                         "the report does not depend on it")
    au.set_defaults(func=_cmd_audit)

    op = add(sub, "optimum", "the optimal parameters that follow from a planted workload",
             parents=[common])
    op.add_argument("experiment", metavar="EXPERIMENT.toml",
                    help="experiment on a synthetic workload whose validity has one "
                         "exponential law")
    op.add_argument("--json", action="store_true", help="print JSON instead of text")
    op.add_argument("--no-simulate", action="store_true",
                    help="skip the simulations (each policy, its derived optimum, the bayes "
                         "twins; a value packer's derived pair is then not checked, so not "
                         "answered)")
    op.set_defaults(func=_cmd_optimum)

    adv = add(sub, "advise", "tune ranking, cut, packing and retention against today's "
              "setting; test the gain on held-out queries", (
                  "memsim advise experiments/advise.toml",
                  "memsim advise experiments/advise.toml --current similarity-only "
                  "--set advise.trials=10",
              ), parents=[common, as_json])
    adv.add_argument("experiment", metavar="EXPERIMENT.toml",
                     help="experiment with an [advise] table (current = today's policy)")
    adv.add_argument("--current", default=None, metavar="POLICY",
                     help="today's setting (overrides advise.current): a policy of the "
                          "experiment, a preset, or as-logged")
    add_out(adv, text="parent folder of the run folder (advice.md, advice.json)")
    adv.set_defaults(func=_cmd_advise)

    rep = add(sub, "report", "(re)build report.html from a run folder")
    rep.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    rep.add_argument("--progress", choices=["auto", "json"], default="auto",
                     help="progress on stderr: lines or a bar (auto), or JSON lines (json)")
    rep.add_argument("run_dir", metavar="RUN_DIR",
                     help="a run folder (the path `memsim run` printed last)")
    rep.set_defaults(func=_cmd_report)

    s = add(sub, "stream", "generate, validate or import streams")
    ssub = s.add_subparsers(dest="stream_command", required=True, metavar="SUBCOMMAND",
                            help="what to do with streams")
    g = add(ssub, "generate", "write an experiment's synthetic stream")
    g.add_argument("experiment", metavar="EXPERIMENT.toml",
                   help="experiment file whose [workload] is generated")
    g.add_argument("--out", required=True, help="stream folder to create")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted config key (repeatable)")
    g.add_argument("--replicate", type=_replicate, default=0,
                   help="which replicate's stream (0, 1, ...)")
    g.set_defaults(func=_cmd_stream_generate)
    v = add(ssub, "validate", "check a stream folder and summarise it", parents=[as_json])
    v.add_argument("path", metavar="DIR", help="stream folder")
    v.set_defaults(func=_cmd_stream_validate)

    imp = add(ssub, "import", "import a real trace into a stream folder", (
        "memsim stream import trace experiments/traces/example.jsonl --out /tmp/mine",
        "memsim stream import locomo data:locomo --out /tmp/locomo"))
    imp.add_argument("format", choices=["locomo", "trace"],
                     help="locomo: the LoCoMo conversations; trace: a memory-layer log")
    imp.add_argument("path", help="locomo10.zip, locomo10.json or data:locomo; a trace: "
                     "FILE.jsonl (memory-layer log, format in memsim/data/importers/trace.py)")
    imp.add_argument("--out", required=True, help="stream folder to create")
    imp.add_argument("--notes", choices=["turns", "observations", "summaries"], default="turns",
                     help="what becomes a note (LoCoMo)")
    imp.add_argument("--captions", action="store_true",
                     help="append image captions to the turns they belong to")
    imp.add_argument("--embedder", choices=["bm25", "wordllama", "vectors"], default=None,
                     help="how text becomes vectors: bm25 (LoCoMo's default), wordllama (dense, "
                     "offline; the [embed] extra) or vectors (a trace's logged ones; a trace's "
                     "default when it logs them, else bm25)")
    imp.add_argument("--qrels", metavar="FILE", default=None,
                     help="a TREC qrels file of the trace's ids: judgements beside the "
                          "trace's own (trace)")
    imp.set_defaults(func=_cmd_stream_import)

    chk = add(ssub, "check", "validate a trace and list every error (writes nothing)", (
        "memsim stream check trace experiments/traces/example.jsonl",))
    chk.add_argument("format", choices=["trace"], help="trace: a memory-layer log (JSON Lines)")
    chk.add_argument("path", help="FILE.jsonl (format: memsim/schemas/trace-v1.json)")
    chk.add_argument("--limit", type=int, default=50,
                     help="list at most this many errors, then count the rest")
    chk.add_argument("--qrels", metavar="FILE", default=None,
                     help="a TREC qrels file of the trace's ids, checked with it")
    chk.set_defaults(func=_cmd_stream_check)

    dat = add(sub, "data", "fetch public data sets into the data cache (never implicit)")
    dsub = dat.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND",
                              help="what to do with data sets")
    dg = add(dsub, "get", "download a data set, check its pinned SHA-256 and cache it; "
             "experiments then name it data:NAME", (
                 "memsim data get locomo",
                 "memsim data get locomo --from FILE",
                 "memsim data get fsrs-revlog --to DIR"))
    dg.add_argument("name", choices=list(datasets.DATASETS), help="the data set")
    dg.add_argument("--from", dest="source", metavar="FILE", default=None,
                    help="register a copy you already have instead of downloading "
                         "(checksum checked)")
    dg.add_argument("--to", metavar="DIR", default=None,
                    help=f"data folder to write to (default: ${datasets.CACHE_ENV}, else "
                         "~/.cache/memsim)")
    dg.add_argument("--url", default=None,
                    help="a mirror of the same file (the checksum is still checked)")
    dg.set_defaults(func=_cmd_data_get)
    dl = add(dsub, "list", "list the known data sets and whether they are cached",
             ("memsim data list",))
    dl.set_defaults(func=_cmd_data_list)

    pol = add(sub, "policies", "list registered components and presets",
              ("memsim policies", "memsim policies --json", "memsim policies --markdown"),
              parents=[as_json])
    pol.add_argument("--markdown", action="store_true",
                     help="print the preset catalogue (source, half-life, eviction, "
                          "engine-check) as a Markdown table")
    pol.set_defaults(func=_cmd_policies)

    sch = add(sub, "schema", "print the JSON Schema of a file format (for editors and "
              "validators)", ("memsim schema experiment",
                              "memsim schema trace"))
    sch.add_argument("format", choices=["experiment", "trace"],
                     help="experiment: an experiment TOML file (generated from memsim's "
                          "definitions and the installed components); trace: a line of a "
                          "trace (format version 1)")
    sch.set_defaults(func=_cmd_schema)

    cur = add(sub, "curves", "recency multipliers, half-lives and crossover ages", (
        "memsim curves hivemind feather",
        "memsim curves hivemind feather --set policies.feather.decay.half_life_days=90",
        "memsim curves feather feather-v0.16 --set decay.half_life_days=90"), parents=[as_json])
    cur.add_argument("presets", nargs="+", metavar="PRESET",
                     help="preset names (`memsim policies` lists them)")
    cur.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a parameter of every preset given (decay.half_life_days=90)"
                          " or of one (policies.feather.decay.half_life_days=90); repeatable")
    cur.add_argument("--s", type=float, default=0.8,
                     help="similarity of the old note, at most 1")
    cur.add_argument("--delta", type=float, default=0.1,
                     help="similarity advantage of the old note over a fresh one, > 0 "
                          "(s - delta >= -1)")
    cur.set_defaults(func=_cmd_curves)

    fc = add(sub, "feather-check",
             "compare the feather preset with the real feather-db engine",
             ("memsim feather-check experiments/feather_check.toml",),
             parents=[as_json, progress])
    fc.add_argument("config", metavar="EXPERIMENT.toml",
                    help="TOML file (see experiments/feather_check.toml)")
    fc.add_argument("--csv", metavar="PREFIX", help="write PREFIX_<search>.csv per search")
    fc.set_defaults(func=_cmd_feather_check)

    ec = add(sub, "engine-check",
             "replay a stream through a real engine and its memsim preset",
             ("memsim engine-check feather experiments/feather_check.toml",
              "memsim engine-check langchain experiments/langchain_check.toml",
              "memsim engine-check llamaindex experiments/framework_check.toml"),
             parents=[as_json, progress])
    ec.add_argument("engine", choices=["feather", "langchain", "llamaindex", "crewai", "redis",
                                       "mem0", "openmemory", "memoripy", "autogen",
                                       "langgraph"],
                    help="the real engine (needs pip install -e \".[feather]\", "
                         "\".[langchain]\" or the framework's package, see the README)")
    ec.add_argument("config", metavar="EXPERIMENT.toml",
                    help="TOML file (experiments/feather_check.toml, "
                         "experiments/langchain_check.toml, experiments/framework_check.toml)")
    ec.add_argument("--csv", metavar="PREFIX", help="write the per-query tables as CSV")
    ec.set_defaults(func=_cmd_engine_check)

    cal = add(sub, "calibrate", "fit models to real data: decay families (revlog), the "
              "workload generator (workload)")
    csub = cal.add_subparsers(dest="calibrate_command", required=True, metavar="SOURCE",
                            help="the kind of real data")
    rv = add(csub, "revlog", "a spaced-repetition review log (CSV)",
             ("memsim calibrate revlog data:fsrs-revlog --out /tmp/calibration",))
    rv.add_argument("path", help="a review-log CSV, a folder of them, or data:fsrs-revlog")
    rv.add_argument("--out", default=None,
                    help="folder for the plot and TOML fragment (default: print only)")
    rv.add_argument("--min-elapsed-days", type=float, default=0.0,
                    help="ignore reviews sooner than this after the previous one "
                         "(same-session re-drills)")
    rv.set_defaults(func=_cmd_calibrate)
    tw = add(csub, "workload", "fit the synthetic generator's knobs to a real stream (a twin)",
             ("memsim calibrate workload experiments/traces/example.jsonl --out /tmp/twin "
              "--steps 4",))
    tw.add_argument("stream", help="a stream folder, a trace (.jsonl) or LoCoMo (.zip, .json)")
    tw.add_argument("--out", required=True, help="folder for twin.toml, report.md, figures/")
    tw.add_argument("--budget", type=int, default=1500,
                    help="token budget of the similarity-only recall the noise is fitted to")
    tw.add_argument("--seed", type=int, default=0, help="seed of the twin's streams")
    tw.add_argument("--steps", type=int, default=10, help="bisection steps of the noise search")
    tw.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    tw.set_defaults(func=_cmd_calibrate_workload)
    return p


class _OneLine(logging.Formatter):
    """``memsim: warning: ...``: the command line's form of a log record."""

    def format(self, record: logging.LogRecord) -> str:
        return f"memsim: {record.levelname.lower()}: {record.getMessage()}"


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr (no source line): memsim's own as
    ``memsim: warning: ...``, others with their category."""
    from memsim.core.errors import MemsimWarning

    what = "" if issubclass(category, MemsimWarning) else f"{category.__name__}: "
    print(f"memsim: warning: {what}{_one_line(message)}", file=sys.stderr if file is None
          else file)


def _logging(verbose: int) -> None:
    """The ``memsim`` logger on stderr: warnings by default, ``-v`` adds what
    memsim is doing, ``-vv`` its debugging detail; warnings as one line."""
    log = logging.getLogger("memsim")
    if not any(isinstance(h.formatter, _OneLine) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine())
        log.addHandler(handler)
    log.setLevel(logging.WARNING - 10 * min(verbose, 2))
    log.propagate = False
    warnings.showwarning = _show_warning


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _logging(getattr(args, "verbose", 0))
    if threading.current_thread() is threading.main_thread():
        # SIGTERM unwinds like Ctrl-C (a KeyboardInterrupt, a Terminated naming
        # the signal), so a run marks its folder failed and a sweep gives its
        # trials back on the way out. Set for SIGINT too: a process started
        # with SIGINT ignored (`memsim run ... &` from a script) would
        # otherwise keep ignoring Ctrl-C and `kill -INT`.
        interrupt.install(interrupt.on_signal)
    interrupt.forget()
    try:
        return int(args.func(args) or 0)
    except MemsimError as exc:
        # a config with several mistakes reports each on its own line
        for message in getattr(exc, "errors", None) or [exc]:
            print(f"memsim: error: {_one_line(message)}", file=sys.stderr)
        for path in getattr(exc, "completed", None) or ():  # complete before it, and kept
            print(f"memsim: completed before the error: {path}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM (a Terminated): 128 + the signal's number
        signum = getattr(exc, "signum", signal.SIGINT)
        print("memsim: interrupted" + ("" if signum == signal.SIGINT else f" ({exc})"),
              file=sys.stderr)
        return 128 + int(signum)
    except BrokenPipeError:
        # the reader went away (`memsim policies | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        # the environment failed us (disk full, read-only, file-size limit)
        print(f"memsim: error: {_one_line(_describe_os_error(exc))}", file=sys.stderr)
        return 1
    finally:
        interrupt.forget()  # handled: a process that goes on (a notebook's) is not stopping


def _describe_os_error(exc: OSError) -> str:
    text = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        text = f"{exc.filename}: {text}"
    if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        text += " (disk full or a file-size limit)"
    return text


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
