"""The memory estimate of a synthetic workload (config.estimate_stream_bytes)
against the peak measured while generating and replaying its stream."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memsim.runs.config import PROCESS_BYTES, estimate_stream_bytes
from memsim.data.workload import SyntheticWorkload

# A store of 300k notes and two days of 50 queries: the notes and the busiest
# tick's query x note matrices outweigh the interpreter, as at scale.
KNOBS = {"horizon_days": 2.0, "backfill_days": 298.0, "notes_per_day": 1000.0,
         "queries_per_day": 50.0}

SCRIPT = """
import json, resource, sys
import numpy as np
from memsim.engine import Arm, SimSettings, simulate
from memsim.policies import resolve_policy
from memsim.data.workload import SyntheticWorkload

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

def hwm():
    # this process image's peak RSS: ru_maxrss would also count the parent's
    # (a child forked from a large pytest process inherits its high-water mark)
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))

wl = SyntheticWorkload(**json.loads(sys.argv[1]))
policy = resolve_policy({"preset": "hivemind", "retention": {"kind": "ai-memory"}}, "policies.a")
base = rss()
stream = wl.generate(np.random.SeedSequence(1))
gen_peak = hwm()
simulate(stream, [Arm("a", policy)], SimSettings(candidates=50), np.random.SeedSequence(0))
peak = hwm()
print(json.dumps({"base": base, "gen_peak": gen_peak, "peak": peak, "notes": stream.n_notes}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_estimate_is_close_to_the_measured_peak_of_generating_and_replaying():
    wl = SyntheticWorkload(**KNOBS)
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(KNOBS)], check=True,
                         capture_output=True, text=True, timeout=600)
    got = json.loads(out.stdout)
    assert got["notes"] > 250_000
    # what the stream and its replay added to a process with the libraries loaded
    measured = got["peak"] - got["base"]
    estimated = estimate_stream_bytes(wl) - PROCESS_BYTES
    assert measured > 0.5 * (got["gen_peak"] - got["base"])
    assert estimated / 1.6 <= measured <= estimated * 1.25, (measured / 2**20, estimated / 2**20)

