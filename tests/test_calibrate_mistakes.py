"""User mistakes given to ``memsim calibrate``: one line naming the option or
the file, exit code 2, nothing written.

An out-of-range ``--seed`` was reported as the internal key
``experiment.seed``, an oversized ``--budget`` as ``experiment.budget_tokens``
(after the stream was loaded), ``--steps 10**20`` ran, and ``calibrate revlog
--min-elapsed-days -1`` named a Python parameter. A log with no ground truth
gave a twin with "real recall nan" and a ``profile.json`` of bare NaN (not
JSON); ``profile.json`` held NaN for any undefined measure.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from memsim.cli import main
from memsim.core.errors import StreamError
from memsim.tuning import twin as twin_mod
from memsim.tuning.twin import fit_twin, load_any_stream, write_twin

SEED_RANGE = "from 0 to 9223372036854775806"


def write_trace(path: Path, *, used: bool = True, queries: int = 4, judgements=None) -> Path:
    """A tiny trace: six notes, ``queries`` queries a day apart, each (with
    ``used``) using one note: every query has one relevant note, so the mean
    gap between a query's relevant notes is undefined. ``judgements``: gains
    of ``judgement`` events of query 0 on notes 0, 1, ..."""
    events = [{"event": "header", "format": "memsim-trace", "version": 1, "time_unit": "day",
               "name": "mini"}]
    for i in range(6):
        events.append({"event": "note_added", "id": i, "t": 0.5 * i, "actor": "a",
                       "text": f"note number {i} about topic {i % 3} apples pears",
                       "tokens": 10 + i})
    for j in range(queries):
        events.append({"event": "query", "id": j, "t": 4 + j, "actor": "a",
                       "text": f"what about topic {j % 3}"})
        events.append({"event": "retrieved", "query": j, "notes": [j % 6, (j + 1) % 6]})
        if used:
            events.append({"event": "used", "query": j, "notes": [j % 6]})
    for k, gain in enumerate(judgements or []):
        events.append({"event": "judgement", "query": 0, "note": k, "gain": gain})
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def never_loaded(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the stream was loaded before the options were checked")
    monkeypatch.setattr(twin_mod, "load_any_stream", never)


# -- options -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "99999999999999999999999", str(2 ** 63 - 1)])
def test_a_seed_out_of_range_is_named_as_the_option(tmp_path, capsys, never_loaded, value):
    out = tmp_path / "o"
    assert main(["calibrate", "workload", str(tmp_path / "s.jsonl"), "--out", str(out),
                 "--seed", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memsim: error: --seed: give a whole number {SEED_RANGE}"), err
    assert err.endswith(f"got {value}\n") and err.count("\n") == 1
    assert "experiment.seed" not in err
    assert not out.exists()


@pytest.mark.parametrize("option, value, want", [
    ("--budget", str(2 ** 40 + 1), "--budget: give a whole number from 1 to 1099511627776"),
    ("--budget", "99999999999999999999999", "--budget: give a whole number from 1 to "),
    ("--steps", "99999999999999999999", "--steps: give a whole number from 0 to 64"),
])
def test_a_budget_or_steps_too_large_is_named_before_loading(tmp_path, capsys, never_loaded,
                                                             option, value, want):
    out = tmp_path / "o"
    assert main(["calibrate", "workload", str(tmp_path / "s.jsonl"), "--out", str(out),
                 option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memsim: error: {want}") and err.endswith(f"got {value}\n"), err
    assert "experiment." not in err
    assert not out.exists()


def test_the_largest_seed_is_accepted(tmp_path, capsys, never_loaded):
    """2**63 - 2 passes the check (twin.toml's seed, this + 1, is still an
    experiment's seed): the command goes on to load the stream."""
    with pytest.raises(AssertionError, match="loaded"):
        main(["calibrate", "workload", str(tmp_path / "s.jsonl"), "--out",
              str(tmp_path / "o"), "--seed", str(2 ** 63 - 2)])


def test_fit_twin_refuses_a_bad_seed_by_its_parameter_name():
    from memsim.core.errors import ConfigError
    with pytest.raises(ConfigError, match=rf"^seed: give a whole number {SEED_RANGE}"):
        fit_twin(None, seed=-1)  # refused before the stream is looked at


@pytest.mark.parametrize("value, shown", [("-1", "-1.0"), ("nan", "nan"), ("inf", "inf")])
def test_revlog_min_elapsed_days_is_named_as_the_option(tmp_path, capsys, value, shown):
    out = tmp_path / "o"
    assert main(["calibrate", "revlog", str(tmp_path / "log.csv"), "--out", str(out),
                 f"--min-elapsed-days={value}"]) == 2
    err = capsys.readouterr().err
    assert err == f"memsim: error: --min-elapsed-days: give a finite number >= 0, got {shown}\n"
    assert not out.exists()


# -- streams with nothing to fit ---------------------------------------------


NO_GROUND_TRUTH = ("nothing to measure: no query has a relevant note (no ground truth: a "
                   "trace's 'used' or 'judgement' events, a stream's qrels)")


@pytest.mark.parametrize("kwargs, why", [
    ({"used": False}, NO_GROUND_TRUTH),
    ({"used": False, "judgements": [-1.0, -2.0]},
     "nothing to measure: no query has a relevant note (all 2 judgements of the log have a "
     "negative gain"),
    ({"queries": 0}, "no query: nothing to fit a twin to"),
])
def test_a_log_with_nothing_to_fit_is_refused_naming_the_file(tmp_path, capsys, kwargs, why):
    trace = write_trace(tmp_path / "log.jsonl", **kwargs)
    out = tmp_path / "o"
    assert main(["calibrate", "workload", str(trace), "--out", str(out), "--steps", "0"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = [ln for ln in cap.err.splitlines() if not ln.startswith("memsim calibrate workload:")]
    assert len(lines) == 1 and lines[0].startswith(f"memsim: error: {trace}: {why}"), cap.err
    assert "nan" not in cap.err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [trace]  # no hidden half-written folder either


def test_fit_twin_refuses_a_stream_without_ground_truth(tmp_path):
    stream = load_any_stream(write_trace(tmp_path / "log.jsonl", used=False))
    with pytest.raises(StreamError, match=r"^stream 'mini': nothing to measure"):
        fit_twin(stream, steps=0)


# -- what is written ---------------------------------------------------------


@pytest.fixture(scope="module")
def small_twin(tmp_path_factory):
    trace = write_trace(tmp_path_factory.mktemp("t") / "log.jsonl")
    return fit_twin(load_any_stream(trace), steps=0)


def test_profile_json_is_strict_with_null_for_what_is_undefined(tmp_path, capsys):
    trace = write_trace(tmp_path / "log.jsonl")
    out = tmp_path / "o"
    assert main(["calibrate", "workload", str(trace), "--out", str(out), "--steps", "0",
                 "-q"]) == 0
    prof = strict_json((out / "profile.json").read_text(encoding="utf-8"))
    # one relevant note per query: no gap between a query's relevant notes
    assert prof["real"]["relevant_gap_days"] is None
    assert math.isfinite(prof["real"]["recall"])
    assert "nan" not in (out / "report.md").read_text(encoding="utf-8").lower().split()
    assert capsys.readouterr().out.splitlines()[-1] == str(out)


def test_a_failed_write_leaves_no_out_folder(small_twin, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full_disk)
    with pytest.raises(OSError):
        write_twin(small_twin, tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


def test_a_measure_that_cannot_be_json_is_null_not_nan(small_twin, tmp_path):
    tw = copy.deepcopy(small_twin)
    tw.real.scalars["sim_auc"] = math.inf
    tw.real.scalars["own_actor_share"] = math.nan
    out = write_twin(tw, tmp_path / "o")
    prof = strict_json((out / "profile.json").read_text(encoding="utf-8"))
    assert prof["real"]["sim_auc"] is None and prof["real"]["own_actor_share"] is None
