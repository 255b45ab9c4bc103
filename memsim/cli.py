"""The ``memsim`` command line: a thin layer over the Python API.

A user mistake (:class:`memsim.errors.MemsimError`) prints one line on stderr
and exits with code 2; a fault of the environment (an ``OSError``: disk full,
read-only folder, file-size limit) prints one line and exits with code 1;
Ctrl-C and SIGTERM exit with code 130; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .audit import audit
from .calibrate import calibrate_revlog, format_calibration
from .compare import headline_text
from .config import StreamSource, load_experiment, parse_override
from .curves import curves_table, format_curves
from .errors import MemsimError
from .feather_check import main as feather_main
from .importers.locomo import cli_import_locomo
from .importers.trace import cli_import_trace
from .optimum import optimum
from .policies import PRESETS, REGISTRY, assumptions
from .report import build_report
from .rng import child_seq, seed_sequence
from .runner import run_many
from .stream import describe_stream, read_stream, write_stream

__all__ = ["main"]


class Progress:
    """A one-line progress bar on stderr, shown once a job has run 2 seconds
    (on a terminal only)."""

    def __init__(self, label: str, quiet: bool = False):
        self.label = label
        # a bar redrawn with carriage returns only makes sense on a terminal
        self.quiet = quiet or not sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.shown = False
        self.last = 0.0

    def __call__(self, frac: float) -> None:
        now = time.monotonic()
        if self.quiet or now - self.t0 < 2.0 or (now - self.last < 0.2 and frac < 1):
            return
        self.last = now
        width = 30
        fill = int(round(width * min(max(frac, 0.0), 1.0)))
        bar = "#" * fill + "-" * (width - fill)
        eta = (now - self.t0) * (1 - frac) / frac if frac > 0 else float("nan")
        end = "\n" if frac >= 1 else ""
        sys.stderr.write(f"\r{self.label} [{bar}] {100 * frac:5.1f}%  eta {eta:5.0f}s{end}")
        sys.stderr.flush()
        self.shown = frac < 1

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            self.shown = False


def _cmd_run(args) -> int:
    exps = [load_experiment(p, args.set) for p in args.experiments]
    prog = Progress("memsim run", args.quiet)
    try:
        paths = run_many(exps, out=args.out, jobs=args.jobs, report=not args.no_report,
                         progress=prog, argv=sys.argv)
    finally:
        prog.close()
    for p in paths:
        if not args.quiet:
            # the headline in plain text, so that the terminal shows the result
            print(headline_text(p, ascii=not _utf8_stdout()))
            print()
        print(p)
    return 0


def _utf8_stdout() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") == "utf8"


def _cmd_report(args) -> int:
    print(build_report(Path(args.run_dir)))
    return 0


def _cmd_stream_generate(args) -> int:
    exp = load_experiment(args.experiment, args.set)
    if isinstance(exp.workload, StreamSource):
        raise MemsimError(f"{args.experiment}: the workload replays {exp.workload.path}; "
                          "there is nothing to generate")
    stream = exp.workload.generate(child_seq(seed_sequence(exp.seed), "replicate",
                                             args.replicate, "workload"))
    write_stream(stream, Path(args.out))
    print(args.out)
    return 0


def _cmd_stream_validate(args) -> int:
    stream = read_stream(Path(args.path))
    print(describe_stream(stream))
    print("valid")
    return 0


def _cmd_policies(args) -> int:
    for slot, table in REGISTRY.items():
        print(f"[{slot}]")
        for name, cls in sorted(table.items()):
            doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            print(f"  {name}: {doc}")
            for pname, default, allowed in cls.describe():
                print(f"      {pname} = {default!r}  ({allowed})")
    print("[presets]")
    for name, preset in sorted(PRESETS.items()):
        first = preset.doc.split(".")[0].replace("\n", " ")
        print(f"  {name}: {' '.join(first.split())}.")
        for key, why in assumptions(name).items():
            print(f"      assumed {key}: {why}")
    return 0


def _overrides(pairs: list[str]) -> dict:
    return dict(parse_override(o) for o in pairs)


def _cmd_curves(args) -> int:
    df = curves_table(args.presets, overrides=_overrides(args.set), s=args.s, delta=args.delta)
    print(format_curves(df))
    return 0


def _cmd_stream_import(args) -> int:
    if args.format == "trace":
        cli_import_trace(Path(args.path), Path(args.out))
        print(args.out)
        return 0
    if args.format != "locomo":  # argparse restricts choices; kept for clarity
        raise MemsimError(f"unknown import format {args.format!r}")
    cli_import_locomo(Path(args.path), Path(args.out), notes=args.notes, captions=args.captions)
    print(args.out)
    return 0


def _cmd_calibrate(args) -> int:
    out = None if args.out is None else Path(args.out)
    result = calibrate_revlog(Path(args.path), out, min_elapsed_days=args.min_elapsed_days)
    print(format_calibration(result))
    if out is not None:
        print(out)
    return 0


def _cmd_sweep(args) -> int:
    # imported here: memsim.sweep loads Optuna, which only this command needs
    from .sweep import run_sweep

    if args.experiment is None and args.resume is None:
        raise MemsimError("memsim sweep: give an EXPERIMENT.toml or --resume RUN_DIR")
    prog = Progress("memsim sweep", args.quiet)
    try:
        res = run_sweep(args.experiment, trials=args.trials, storage=args.storage,
                        study_name=args.study, workers=args.workers, out=args.out,
                        overrides=args.set, quiet=True, resume=args.resume, progress=prog,
                        report=not args.no_report, argv=sys.argv)
    finally:
        prog.close()
    if not args.quiet:
        print(res.summary_text())
    print(res.path if res.path is not None else res.study_name)
    return 0


def _cmd_audit(args) -> int:
    exp = load_experiment(args.experiment, args.set)
    prog = Progress("memsim audit", args.quiet)
    try:
        report = audit(exp, replicate=args.replicate, max_queries=args.queries,
                       params=not args.no_params, replicates=args.param_replicates,
                       progress=prog)
    finally:
        prog.close()
    print(report.to_text())
    if args.out is not None:
        print(report.save(Path(args.out)))
    return 0


def _cmd_optimum(args) -> int:
    exp = load_experiment(args.experiment, args.set)
    rep = optimum(exp, simulate=not args.no_simulate)
    print(rep.to_json() if args.json else rep.to_text())
    return 0


def _cmd_feather_check(args) -> int:
    return feather_main([args.config] + (["--csv", args.csv] if args.csv else []))


def _cmd_engine_check(args) -> int:
    argv = [args.config] + (["--csv", args.csv] if args.csv else [])
    if args.engine == "feather":
        return feather_main(argv)
    from .langchain_check import main as langchain_main

    return langchain_main(argv)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memsim", description="Simulate and sweep the ranking, retention and packing "
        "policies of AI memory layers.")
    sub = p.add_subparsers(dest="command", required=True)

    # A parent parser shares its action objects with every child, so --out,
    # whose default differs between commands, is added per command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a dotted config key (repeatable)")
    common.add_argument("--quiet", action="store_true", help="no progress bar")

    def add_out(parser, default="results", text="parent folder of run folders"):
        parser.add_argument("--out", default=default, help=text)

    r = sub.add_parser("run", parents=[common], help="run experiments, write run folders")
    add_out(r)
    r.add_argument("experiments", nargs="+", metavar="EXPERIMENT.toml")
    r.add_argument("--jobs", type=int, default=1, help="worker processes for grids/batches")
    r.add_argument("--no-report", action="store_true", help="skip report.html")
    # --quiet (from the common options) also keeps the headline table off:
    # only the run folders are printed
    r.set_defaults(func=_cmd_run)

    sw = sub.add_parser("sweep", parents=[common],
                        help="Optuna sweep of an experiment's [sweep] table (resumable)")
    add_out(sw)
    sw.add_argument("experiment", nargs="?", default=None, metavar="EXPERIMENT.toml")
    sw.add_argument("--trials", type=int, default=None,
                    help="COMPLETE trials the study must end with (default: sweep.trials)")
    sw.add_argument("--storage", default=None, metavar="URL",
                    help="sqlite:///FILE.db, postgresql://USER:PW@HOST/DB or journal:FILE "
                         "(default: a journal file in the run folder)")
    sw.add_argument("--study", default=None, metavar="NAME",
                    help="study name (default: <name>-<hash8>); the same command with the "
                         "same name resumes or joins it")
    sw.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    sw.add_argument("--resume", default=None, metavar="RUN_DIR",
                    help="continue the sweep of this run folder")
    sw.add_argument("--no-report", action="store_true", help="skip report.html")
    sw.set_defaults(func=_cmd_sweep)

    au = sub.add_parser("audit", parents=[common],
                        help="which signals vary and which swept parameters the workload can test")
    add_out(au, None, "folder to save signals.csv, params.csv, reach.csv and audit.txt in")
    au.add_argument("experiment", metavar="EXPERIMENT.toml")
    au.add_argument("--replicate", type=int, default=0, help="replicate stream to audit")
    au.add_argument("--queries", type=int, default=300,
                    help="queries sampled for the signal spreads")
    au.add_argument("--no-params", action="store_true",
                    help="skip evaluating the swept parameters (signals only)")
    au.add_argument("--param-replicates", type=int, default=None, metavar="N",
                    help="replicates each probe value is evaluated on "
                         "(default: the experiment's, at least 3)")
    au.set_defaults(func=_cmd_audit)

    op = sub.add_parser("optimum", parents=[common],
                        help="the optimal parameters that follow from a planted workload")
    op.add_argument("experiment", metavar="EXPERIMENT.toml")
    op.add_argument("--json", action="store_true", help="print JSON instead of text")
    op.add_argument("--no-simulate", action="store_true",
                    help="skip simulating each policy beside its bayes twin")
    op.set_defaults(func=_cmd_optimum)

    rep = sub.add_parser("report", help="(re)build report.html from a run folder")
    rep.add_argument("run_dir")
    rep.set_defaults(func=_cmd_report)

    s = sub.add_parser("stream", help="generate, validate or import streams")
    ssub = s.add_subparsers(dest="stream_command", required=True)
    g = ssub.add_parser("generate", help="write an experiment's synthetic stream")
    g.add_argument("experiment")
    g.add_argument("--out", required=True, help="stream folder to create")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    g.add_argument("--replicate", type=int, default=0, help="which replicate's stream")
    g.set_defaults(func=_cmd_stream_generate)
    v = ssub.add_parser("validate", help="check a stream folder and summarise it")
    v.add_argument("path")
    v.set_defaults(func=_cmd_stream_validate)

    imp = ssub.add_parser("import", help="import a real trace into a stream folder")
    imp.add_argument("format", choices=["locomo", "trace"])
    imp.add_argument("path", help="locomo10.zip or locomo10.json; a trace: FILE.jsonl "
                     "(memory-layer log, format in memsim/importers/trace.py)")
    imp.add_argument("--out", required=True, help="stream folder to create")
    imp.add_argument("--notes", choices=["turns", "observations", "summaries"], default="turns",
                     help="what becomes a note (default: turns)")
    imp.add_argument("--captions", action="store_true",
                     help="append image captions to the turns they belong to")
    imp.set_defaults(func=_cmd_stream_import)

    pol = sub.add_parser("policies", help="list registered components and presets")
    pol.set_defaults(func=_cmd_policies)

    cur = sub.add_parser("curves", help="recency multipliers, half-lives and crossover ages")
    cur.add_argument("presets", nargs="+", metavar="PRESET")
    cur.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a preset parameter, e.g. decay.half_life_days=90")
    cur.add_argument("--s", type=float, default=0.8, help="similarity of the old note")
    cur.add_argument("--delta", type=float, default=0.1,
                     help="similarity advantage of the old note over a fresh one")
    cur.set_defaults(func=_cmd_curves)

    fc = sub.add_parser("feather-check",
                        help="compare the feather preset with the real feather-db engine")
    fc.add_argument("config", help="TOML file (see experiments/feather_check.toml)")
    fc.add_argument("--csv", metavar="PREFIX", help="write PREFIX_<search>.csv per search")
    fc.set_defaults(func=_cmd_feather_check)

    ec = sub.add_parser("engine-check",
                        help="replay a stream through a real engine and its memsim preset")
    ec.add_argument("engine", choices=["feather", "langchain"])
    ec.add_argument("config", help="TOML file (experiments/feather_check.toml, "
                    "experiments/langchain_check.toml)")
    ec.add_argument("--csv", metavar="PREFIX", help="write the per-query tables as CSV")
    ec.set_defaults(func=_cmd_engine_check)

    cal = sub.add_parser("calibrate", help="fit decay families to real recall data")
    csub = cal.add_subparsers(dest="calibrate_command", required=True)
    rv = csub.add_parser("revlog", help="a spaced-repetition review log (CSV)")
    rv.add_argument("path", help="a review-log CSV or a folder of them")
    rv.add_argument("--out", default=None, help="folder for the plot and TOML fragment")
    rv.add_argument("--min-elapsed-days", type=float, default=0.0,
                    help="ignore reviews sooner than this after the previous one "
                         "(same-session re-drills)")
    rv.set_defaults(func=_cmd_calibrate)
    return p


def _terminate(signum, frame):  # pragma: no cover - exercised in a subprocess test
    # SIGTERM unwinds like Ctrl-C, so a run marks its folder failed on the way out.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        # explicit: a process started with SIGINT ignored (`memsim run ... &` from a
        # script) would otherwise keep ignoring Ctrl-C and `kill -INT`
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return int(args.func(args) or 0)
    except MemsimError as exc:
        print(f"memsim: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`memsim policies | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:
        # the environment failed us (disk full, read-only, file-size limit)
        print(f"memsim: error: {_one_line(_describe_os_error(exc))}", file=sys.stderr)
        return 1


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
