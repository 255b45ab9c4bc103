"""Printed results: the terminal headline, compare() and reports say what
the numbers are (which runs are paired, what a replayed stream's queries
count, at which budget a breakdown is, one precision per column)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from memsim.reporting.compare import compare


def _frame(policies: dict[str, dict[str, float]], *, replicates=(0, 1), n_q: int = 40,
           t_of=None, seed: int = 0) -> pd.DataFrame:
    """A queries table: per policy, constant metric values (plus a little
    per-query noise shared by every policy, so pairs tie)."""
    rng = np.random.default_rng(seed)
    rows = []
    for rep in replicates:
        noise = rng.random(n_q) * 0.01
        for pol, vals in policies.items():
            for q in range(n_q):
                rows.append({"replicate": rep, "policy": pol, "budget": 1500, "query_id": q,
                             "t": float(q if t_of is None else t_of(rep, q)),
                             "utility": vals["utility"] + noise[q], "oracle_utility": 1.0,
                             "recall": vals["recall"] + noise[q],
                             "tokens_used": 1000 + 100 * noise[q],
                             "answer_prob": vals["answer_prob"] + noise[q]})
    return pd.DataFrame(rows)


def test_headline_order_only_note_needs_a_tie_within_one_group():
    # two pairs of policies tie among themselves (a, a2) and (b, b2) with the
    # same answer_prob within each pair: no policy differs only in the order
    # of its notes, so answer_prob is not shown and the legend does not claim it
    q = _frame({"a": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                "a2": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                "b": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5},
                "b2": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5}})
    text = compare(q, baseline="a", n_boot=50).headline_text()
    assert "answer prob" not in text
    # a real order-only pair still gets it
    q2 = _frame({"a": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                 "a-edges": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.3}})
    assert "answer prob" in compare(q2, baseline="a", n_boot=50).headline_text()


def test_headline_of_unpaired_runs_claims_no_marks():
    a = _frame({"x": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2}}, seed=1)
    b = _frame({"x": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5}}, n_q=30, seed=2)
    cmp = compare([a, b], labels=["before", "after"], paired=False, n_boot=50)
    text = cmp.headline_text()
    assert "▲" not in text and "▼" not in text
    assert "over 0 comparisons" not in text
    assert "unpaired" in text


def test_headline_of_replayed_stream_says_so():
    # the same queries at the same times in every replicate: one stream
    # replayed, folded into one replicate; 6 replays are no "fewer than 5
    # replicates", and the report's legend says replayed, so must the headline
    q = _frame({"a": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                "b": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5}},
               replicates=range(6))
    cmp = compare(q, baseline="a", n_boot=50)
    assert cmp.replays == 6
    text = " ".join(cmp.headline_text(width=200).split())
    assert "fewer than 5 replicates" not in text
    assert "replayed in each of 6 replicates" in text


# --------------------------------------------------------------------------
# report.md sections and the notebook view
# --------------------------------------------------------------------------

from memsim.reporting import report as report_mod  # noqa: E402
from memsim.reporting.rundir import RunResult  # noqa: E402


def _arms(gini_by_policy: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for pol, vals in gini_by_policy.items():
        for rep, g in enumerate(vals):
            rows.append({"replicate": rep, "policy": pol, "budget": 1500, "recall_gini": g,
                         "evicted_notes": 0, "promoted_notes": 0})
    return pd.DataFrame(rows)


def test_per_run_table_has_one_number_of_decimals_per_column():
    # recall_gini is a share: 3 decimals in every row (metrics.md, "Printed
    # decimals"), whatever the width of each row's interval
    arms = _arms({"a": [0.40, 0.60, 0.50], "b": [0.5031, 0.5042, 0.5036]})
    table = report_mod._run_table(RunResult(arms=arms))
    cells = table.set_index("policy")["recall_gini"]
    for cell in cells:
        for number in cell.replace("[", "").replace("]", "").split(", ") + [cell.split()[0]]:
            number = number.split()[0]
            assert len(number.split(".")[1]) == 3, cells.tolist()


def test_breakdowns_name_the_budget_and_count_a_replayed_stream_once():
    q = _frame({"a": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                "b": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5}},
               replicates=range(3), n_q=20)
    q["category"] = np.where(q["query_id"] % 2 == 0, "even", "odd")
    q["actor"] = np.where(q["query_id"] % 4 < 2, "u1", "u2")
    q2 = q.assign(budget=250)
    run = RunResult(queries=pd.concat([q, q2], ignore_index=True),
                    config={"experiment": {"budget_tokens": 1500}})
    ctx = report_mod._context(run, n_boot=20, seed=0)
    assert ctx.cmp.replays == 3
    sections = dict(report_mod._breakdown_sections(ctx))
    cat_text, cat_table = sections["Per category"][0][1], sections["Per category"][1][1]
    assert "(at 1500 tokens)" in cat_text
    assert "(at 1500 tokens)" in sections["Per actor"][0][1]
    # 20 queries of one stream replayed 3 times: 10 per category, as the
    # opening sentence counts them ("20 queries"), not 30
    assert cat_table.set_index("category")["queries"].tolist() == [10, 10]
    assert " 20 queries" in report_mod._run_sentence(ctx)


def test_notebook_view_never_prints_scientific_notation():
    s = pd.DataFrame({"policy": ["a", "b"], "budget": [1500, 1500],
                      "metric": ["tokens_used", "tokens_used"], "mean": [1493.6, 1138.4],
                      "ci_low": [1493.5, 1132.6], "ci_high": [1493.7, 1144.6], "n": [10, 10],
                      "ci_over": ["queries"] * 2, "ci_method": ["bootstrap"] * 2})
    html = RunResult(summary=s)._repr_html_()
    assert "e+03" not in html
    assert "1493.6 [1493.5, 1493.7]" in html and "1138.4 [1132.6, 1144.6]" in html


def test_a_folder_without_arms_csv_says_why_per_run_measures_are_missing(tmp_path):
    """A run folder whose ``arms.csv`` is gone: the report says that the
    per-run measures are not shown and why, instead of leaving them out."""
    q = _frame({"a": {"utility": 0.3, "recall": 0.4, "answer_prob": 0.2},
                "b": {"utility": 0.6, "recall": 0.7, "answer_prob": 0.5}})
    run = RunResult(queries=q, config={"experiment": {"budget_tokens": 1500}}, path=tmp_path)
    ctx = report_mod._context(run, n_boot=20, seed=0)
    sections = dict(report_mod._table_sections(ctx))
    assert "no arms.csv" in sections["Per-run measures"][0][1]
    # in memory (no folder): nothing to say
    ctx = report_mod._context(RunResult(queries=q, config=run.config), n_boot=20, seed=0)
    assert "Per-run measures" not in dict(report_mod._table_sections(ctx))
