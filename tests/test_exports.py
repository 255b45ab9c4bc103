"""RunResult's tables computed from a run's per-query rows alone
(memsim.reporting.rundir): they match what the summary computes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memsim.reporting.rundir import RunResult
from memsim.reporting.stats import MIN_REPLICATES, summarise

AGES = ["recall_age_0_7", "recall_age_7_30", "recall_age_30_90", "recall_age_90_180",
        "recall_age_180_365", "recall_age_365_inf"]


def _queries(sizes: list[int], seed: int = 0) -> pd.DataFrame:
    """Two policies, one budget, replicates of ``sizes`` queries whose
    recalls differ by replicate (so pooling and averaging replicates differ)."""
    rng = np.random.default_rng(seed)
    parts = []
    for rep, n in enumerate(sizes):
        for pol in ("a", "b"):
            values = {c: np.where(rng.random(n) < 0.3, np.nan,
                                  np.clip(rng.normal(0.2 + 0.15 * rep, 0.1, n), 0, 1))
                      for c in AGES}
            values["recall_age_365_inf"] = np.full(n, np.nan)   # a bucket nobody reached
            parts.append(pd.DataFrame({"replicate": rep, "policy": pol, "budget": 800,
                                       "query_id": np.arange(n), **values}))
    return pd.concat(parts, ignore_index=True)


# fewer replicates than MIN_REPLICATES (n counts queries), and as many (n counts replicates)
@pytest.mark.parametrize("sizes", [[40, 120], [10, 30, 50, 70, 90]])
def test_recall_by_age_without_a_summary_is_the_summarys_mean(sizes):
    """With unequal replicates the summary's mean (over replicates, of each
    replicate's mean) is not the pooled mean of the queries; the fallback
    from queries.parquet computes the summary's, and its ``n``."""
    q = _queries(sizes)
    bare = RunResult(queries=q).recall_by_age()
    full = RunResult(queries=q, summary=summarise(q, metrics=AGES, n_boot=50)).recall_by_age()
    cols = ["policy", "budget", "bucket", "low_days", "high_days", "recall", "n"]
    pd.testing.assert_frame_equal(bare[cols], full[cols])
    assert bare["ci_low"].isna().all() and bare["ci_high"].isna().all()
    one = q[q["policy"] == "a"]
    want = one.groupby("replicate")["recall_age_0_7"].mean().mean()
    got = bare[(bare["policy"] == "a") & (bare["bucket"] == "0-7")].iloc[0]
    assert got["recall"] == pytest.approx(want, rel=1e-12)
    assert abs(got["recall"] - one["recall_age_0_7"].mean()) > 1e-3   # not the pooled mean
    n_finite = int(one["recall_age_0_7"].notna().sum())
    assert got["n"] == (len(sizes) if len(sizes) >= MIN_REPLICATES else n_finite)
    last = bare[bare["bucket"] == "365+"]
    assert (last["n"] == 0).all() and last["recall"].isna().all()
