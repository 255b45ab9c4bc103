"""``--json`` on every command that prints a result, and ``--progress json``.

Each command's JSON holds the same numbers as its text (or its run folder),
parses as strict JSON (NaN written as null), and progress lines on stderr
are one JSON object each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from memsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
SMALL = ["--set", "experiment.replicates=1", "--set", "workload.horizon_days=8",
         "--set", "workload.backfill_days=8"]


def _strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_run_json_and_json_progress(tmp_path):
    proc = _cli("run", str(QUICKSTART), "--out", str(tmp_path), "--json", "--progress", "json",
                *SMALL)
    doc = _strict(proc.stdout)
    (run,) = doc["runs"]
    assert run["status"] == "completed" and run["name"] == "quickstart"
    summary = pd.read_csv(Path(run["path"]) / "summary.csv")
    got = pd.DataFrame(run["summary"])
    pd.testing.assert_series_equal(got["mean"], summary["mean"], check_exact=False, rtol=1e-12)
    assert list(got["policy"]) == list(summary["policy"])
    lines = [_strict(line) for line in proc.stderr.splitlines()]
    assert lines and all({"command", "phase", "done", "fraction", "elapsed_s"} <= set(x)
                         for x in lines)
    assert lines[0]["command"] == "memsim run" and lines[0]["done"] == "replicate 1/1"
    assert any(x["command"] == "memsim run: report" for x in lines)


@pytest.mark.slow
def test_sweep_and_audit_json(tmp_path):
    exp = ROOT / "experiments" / "sweep_hivemind.toml"
    proc = _cli("sweep", str(exp), "--trials", "3", "--out", str(tmp_path), "--json", "--quiet",
                "--no-report", *SMALL, "--set", "sweep.robustness.replicates=0")
    doc = _strict(proc.stdout)
    assert Path(doc["path"]).is_dir() and doc["study"]
    trials = pd.read_csv(Path(doc["path"]) / "sweep" / "trials.csv")
    assert doc["best"]["number"] in set(trials["number"])
    audit = _cli("audit", str(exp), "--queries", "40", "--no-params", "--json", "--quiet", *SMALL)
    adoc = _strict(audit.stdout)
    assert adoc["experiment"] and adoc["signals"] and {"signal", "policy"} <= set(adoc["signals"][0])
    # what the text says besides its tables: tiers scored, replays, closing remarks
    text = _cli("audit", str(exp), "--queries", "40", "--no-params", "--quiet", *SMALL).stdout
    assert adoc["replays"] is False and isinstance(adoc["remarks"], list)
    assert adoc["tiers"]  # the swept preset is per-tier
    for pol, tiers in adoc["tiers"].items():
        assert f"tiers scored by {pol}: " in text and sum(tiers.values()) == pytest.approx(1)


def test_policies_validate_curves_json(tmp_path, capsys):
    assert main(["policies", "--json"]) == 0
    doc = _strict(capsys.readouterr().out)
    names = {p["name"] for p in doc["presets"]}
    assert {"hivemind", "feather", "ai-memory"} <= names
    decays = {c["name"]: c for c in doc["components"]["decay"]}
    assert any(p["name"] == "half_life_days" for p in decays["half-life"]["params"])

    from memsim.data.importers.trace import import_trace
    from memsim.data.stream import write_stream
    write_stream(import_trace(ROOT / "experiments" / "traces" / "example.jsonl"), tmp_path / "s")
    assert main(["stream", "validate", str(tmp_path / "s"), "--json"]) == 0
    facts = _strict(capsys.readouterr().out)
    assert facts["valid"] is True and facts["notes"] == 211 and facts["queries"] == 64

    assert main(["curves", "hivemind", "feather", "--json"]) == 0
    curves = _strict(capsys.readouterr().out)["curves"]
    assert [c["preset"] for c in curves] == ["hivemind", "feather"]
    assert curves[0]["rec_0d"] == 1.0


@pytest.mark.slow
def test_verbose_logs_and_warnings_have_categories(tmp_path):
    import warnings

    import memsim
    from memsim.core.errors import MemsimWarning, SweepWarning

    quiet = _cli("run", str(QUICKSTART), "--out", str(tmp_path), "--quiet", "--no-report",
                 *SMALL)
    assert "memsim: info:" not in quiet.stderr
    loud = _cli("-v", "run", str(QUICKSTART), "--out", str(tmp_path), "--quiet", "--no-report",
                *SMALL)
    info = [ln for ln in loud.stderr.splitlines() if ln.startswith("memsim: info: ")]
    assert len(info) == 1 and "1 replicate(s) simulated" in info[0]
    assert "memsim: debug:" not in loud.stderr
    # -vv: DEBUG detail, where each replicate's time goes
    louder = _cli("-vv", "run", str(QUICKSTART), "--out", str(tmp_path), "--quiet",
                  "--no-report", *SMALL)
    debug = [ln for ln in louder.stderr.splitlines() if ln.startswith("memsim: debug: ")]
    assert debug and all(re.search(r"replicate 0: \d+ notes, \d+ queries .* replayed in", ln)
                         for ln in debug), louder.stderr

    exp = memsim.load_experiment(ROOT / "experiments" / "sweep_hivemind.toml",
                                 ["experiment.replicates=1", "workload.horizon_days=6",
                                  "workload.backfill_days=6", "sweep.trials=2",
                                  "sweep.pruner=median", "sweep.robustness.replicates=0"])
    with pytest.warns(SweepWarning, match="prunes nothing"):
        memsim.run_sweep(exp, out=None, quiet=True, plots=False)
    assert issubclass(SweepWarning, MemsimWarning)
    # a user can silence memsim's warnings by category
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=MemsimWarning)
        memsim.run_sweep(exp, out=None, quiet=True, plots=False)
    assert not [w for w in seen if issubclass(w.category, MemsimWarning)]


def test_optimum_json_progress():
    """``memsim optimum --progress json`` reports its simulations on stderr
    (it printed nothing: the command never made a progress reporter)."""
    proc = _cli("optimum", str(ROOT / "experiments" / "planted.toml"), "--json", "--progress",
                "json", "--set", "experiment.replicates=1", "--set", "workload.horizon_days=10",
                "--set", "workload.backfill_days=20")
    assert _strict(proc.stdout)
    lines = [_strict(line) for line in proc.stderr.splitlines()]
    assert lines and all(x["command"] == "memsim optimum" and x["phase"] == "simulations"
                         for x in lines)
    assert lines[-1]["fraction"] == 1.0
