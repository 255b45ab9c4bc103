"""How numbers are printed: decimals from each metric's scale and interval,
and marks only on metrics that have a better direction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.evaluation.metrics import UNDIRECTED_METRICS
from memsim.reporting.stats import column_decimals, paired_tests


def _binary_queries(n: int = 60, seed: int = 3) -> pd.DataFrame:
    """Queries judged by 0/1 gains (as a trace's `used` events give): three
    policies, one of which never packs a stale note and one that matches the
    baseline exactly."""
    rng = np.random.default_rng(seed)
    rows = []
    base_u = rng.integers(0, 2, n).astype(float)
    better_u = np.where(rng.random(n) < 0.5, 1.0, base_u)
    harm = (rng.random(n) < 0.33).astype(float)
    for pol, u, h, tok in (("a", base_u, harm, 200.0), ("b", better_u, harm * 0, 290.0),
                           ("c", base_u, harm, 200.0)):
        for q in range(n):
            rows.append({"replicate": 0, "policy": pol, "budget": 300, "query_id": q,
                         "utility": u[q], "harm": h[q], "tokens_used": tok + q % 7,
                         "oracle_utility": 1.0})
    return pd.DataFrame(rows)


def test_decimals_ignore_a_row_that_never_moved():
    # harm of 0/1 gains: 0.3333 [0.0667, 0.6] beside a policy that packs
    # nothing stale (0 [0, 0]): two decimals, not 0 [0, 1]
    assert column_decimals("harm", [0.3333, 0.0], [0.0667, 0.0], [0.6, 0.0]) == 2
    # a difference of -0.40 [-1, 0] next to an identical policy (+0 [+0, +0])
    assert column_decimals("utility", [-0.4, 0.0], [-1.0, 0.0], [0.0, 0.0]) == 2
    # a non-zero mean without an interval still counts (three significant digits)
    assert column_decimals("utility", [12.5, 0.3], [np.nan, 0.2], [np.nan, 0.4]) == 1
    # nothing but zeros: whole numbers
    assert column_decimals("harm", [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]) == 0


def test_binary_gains_print_with_decimals_everywhere():
    cmp = memsim.compare(_binary_queries(), baseline="a")
    md = cmp.to_markdown()
    detail = cmp.to_markdown(detail=True)
    s = cmp.summary.set_index(["policy", "metric"])
    harm = s.loc[("a", "harm")]
    assert 0.2 < harm["mean"] < 0.5
    # the baseline's harm is printed with its decimals in every table
    assert f"{harm['mean']:.2f}" in md
    assert "| 0 [0, 1]" not in md and "| 0 [0, 1]" not in detail
    t = cmp.tests.set_index(["policy", "metric"])
    d = t.loc[("b", "utility")]
    assert d["diff"] > 0.1
    assert f"+{d['diff']:.2f}" in detail or f"+{d['diff']:.3f}" in detail


def test_a_metric_no_policy_changes_keeps_its_decimals_in_the_paired_table():
    # 'c' packs exactly what 'a' packs: every harm difference is 0 [0, 0], but
    # the baseline's harm (about a third) is still shown with its decimals
    q = _binary_queries()
    cmp = memsim.compare(q[q["policy"] != "b"], baseline="a")
    harm = cmp.summary.set_index(["policy", "metric"]).loc[("a", "harm"), "mean"]
    detail = cmp.detail_table()
    row = detail[(detail["policy"] == "c") & (detail["metric"] == "harm")].iloc[0]
    assert row["baseline"] == f"{harm:.2f}" and row["policy mean"] == f"{harm:.2f}"


def test_costs_get_no_mark():
    q = _binary_queries()
    t = paired_tests(q, baseline="a", metrics=["utility", "harm", "tokens_used"])
    tok = t[(t["policy"] == "b") & (t["metric"] == "tokens_used")].iloc[0]
    # 90 more tokens on every query: significant, but no verdict
    assert tok["significant"] and tok["direction"] == ""
    assert "tokens_used" in UNDIRECTED_METRICS
    cmp = memsim.compare(q, baseline="a")
    row = cmp.summary_table().loc[(300, "b"), "tokens_used"]
    assert "▲" not in row and "▼" not in row
    assert "no better direction" in cmp.headline_text()
    # a metric with a direction still gets its mark
    harm = t[(t["policy"] == "b") & (t["metric"] == "harm")].iloc[0]
    assert harm["significant"] and harm["direction"] == "better"


def test_report_names_per_query_budgets_from_the_stream(tmp_path):
    import json
    from pathlib import Path

    from memsim.data.importers.trace import import_trace
    from memsim.data.stream import write_stream

    example = Path(__file__).resolve().parents[1] / "experiments" / "traces" / "example.jsonl"
    lines = []
    for i, line in enumerate(example.read_text(encoding="utf-8").splitlines()):
        ev = json.loads(line)
        if ev.get("event") == "query":
            ev["budget"] = 200 + 100 * (i % 3)  # 200, 300 or 400 tokens
        lines.append(json.dumps(ev))
    trace = tmp_path / "budgets.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_stream(import_trace(trace), tmp_path / "stream")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "per-query", "replicates": 1, "seed": 1},
        "workload": {"source": str(tmp_path / "stream")},
        "policies": {"a": {"preset": "similarity-only"}, "b": {"preset": "hivemind"}}})
    res = memsim.run_experiment(exp, out=tmp_path / "runs")
    assert set(res.queries["budget"]) == {0}
    assert set(res.queries["budget_tokens"]) == {200, 300, 400}
    report = (res.path / "report.md").read_text(encoding="utf-8")
    assert "per-query budgets from the stream (min-median-max 200-300-400 tokens)" in report
    assert "budget 0 tokens" not in report
    # headers break after an underscore, never inside a word
    page = (res.path / "report.html").read_text(encoding="utf-8")
    assert "<th>utility_<wbr>share</th>" in page
    th = page[page.index("th{"):].split("}")[0]
    assert "anywhere" not in th and "break-all" not in th


def test_report_building_shows_its_progress(tmp_path, capsys):
    from memsim.cli import main

    exp = memsim.experiment_from_dict({
        "experiment": {"name": "progress", "replicates": 1, "seed": 3},
        "workload": {"horizon_days": 10, "backfill_days": 10, "queries_per_day": 3.0},
        "policies": {"a": {"preset": "similarity-only"}, "b": {"preset": "hivemind"}}})
    res = memsim.run_experiment(exp, out=tmp_path, report=False)
    capsys.readouterr()
    assert main(["report", str(res.path)]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    # a line per tenth of the work (tables, then each figure), the last at 100%
    assert lines[0].startswith("memsim report: 10% done")
    assert lines[-1].startswith("memsim report: 100% done") and len(lines) == 10
    assert captured.out.strip().endswith("report.html")


def _ordered(order_changes_answers: bool) -> pd.DataFrame:
    q = _binary_queries()
    q["recall"] = q["utility"]
    rng = np.random.default_rng(9)
    q["answer_prob"] = rng.uniform(0.3, 0.6, len(q))
    # 'c' packs what 'a' packs, in another order
    if order_changes_answers:
        q.loc[q["policy"] == "c", "answer_prob"] += 0.2
    else:
        q.loc[q["policy"] == "c", "answer_prob"] = q.loc[q["policy"] == "a",
                                                          "answer_prob"].to_numpy()
    return q


def test_headline_shows_answer_prob_when_policies_differ_only_in_order():
    text = memsim.compare(_ordered(True), baseline="a").headline_text(width=140)
    head = text.splitlines()[0]
    assert "answer prob" in head and "utility share" in head
    assert "differ only in that order" in text
    plain = memsim.compare(_ordered(False), baseline="a").headline_text(width=140)
    assert "answer prob" not in plain


def test_stream_description_names_versions_and_logged_notes():
    from pathlib import Path

    from memsim.data.importers.trace import import_trace
    from memsim.data.stream import describe_stream

    s = import_trace(Path(__file__).resolve().parents[1] / "experiments" / "traces"
                     / "example.jsonl")
    versions, logged = len(s.notes), s.notes["trace_id"].nunique()
    assert versions > logged  # the example trace updates some notes
    assert f"notes: {versions} (note versions, of {logged} logged notes)" in describe_stream(s)


def test_policies_listing_reads_right(capsys):
    from memsim.cli import main

    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    # a decimal point is no sentence end
    assert "weights 0.5 / 3 / 2, top 30 reset." in out
    # an integer bound written out whole; a bool says what it takes
    assert "an int in [0, 4294967295]" in out and "e+09" not in out
    assert "(any)" not in out and "use_scores = True  (true or false)" in out


def test_run_result_and_sweep_folder_read_back_in_a_notebook(tmp_path):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "nb", "replicates": 1, "seed": 2},
        "workload": {"horizon_days": 20, "backfill_days": 20, "queries_per_day": 4.0},
        "policies": {"hivemind": {"preset": "hivemind"},
                     "sim": {"preset": "similarity-only"}},
        "sweep": {"trials": 3, "params": {"policies.hivemind.candidates": {
            "type": "int", "low": 20, "high": 60}}}})
    res = memsim.run_experiment(exp, out=None)
    page = res._repr_html_()
    share = res.summary.set_index(["policy", "metric"]).loc[("hivemind", "utility_share"), "mean"]
    assert "memsim run nb" in page and "<table" in page and f"{share:.3g}" in page
    swept = memsim.run_sweep(exp, out=tmp_path, quiet=True, plots=False, report=False)
    back = memsim.load_sweep(swept.path)
    assert back.status == "completed" and len(back.trials) == 3
    assert back.best["number"] == swept.best_number
    study = back.study()
    assert study.study_name == swept.study_name and len(study.trials) == 3
    with pytest.raises(memsim.ConfigError, match="not a sweep run folder"):
        memsim.load_sweep(tmp_path)


def test_generated_stream_is_named_after_its_experiment(tmp_path, capsys):
    from pathlib import Path

    from memsim.cli import main
    from memsim.data.stream import read_stream

    exp = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml"
    assert main(["stream", "generate", str(exp), "--out", str(tmp_path / "s"), "--replicate", "1",
                 "--set", "workload.horizon_days=5", "--set", "workload.backfill_days=5"]) == 0
    s = read_stream(tmp_path / "s")
    assert s.name == "quickstart-replicate-1"


def test_report_labels_policies_that_read_hidden_labels(tmp_path):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "bounds", "replicates": 1, "seed": 4},
        "workload": {"horizon_days": 10, "backfill_days": 10, "queries_per_day": 3.0},
        "policies": {"sim": {"preset": "similarity-only"}, "oracle": {"preset": "oracle"}}})
    res = memsim.run_experiment(exp, out=tmp_path)
    md = (res.path / "report.md").read_text(encoding="utf-8")
    assert "'oracle' reads hidden labels: an upper bound, not achievable headroom" in md
    assert "'sim' reads hidden labels" not in md


def test_long_policy_names_stay_apart_and_the_baseline_keeps_its_tag():
    """Two names that differ at the end used to be cut to the same label,
    '(baseline)' cut off with them, so no one could tell the rows apart."""
    q = _binary_queries()
    stem = "similarity-only-with-skip-fill-packing-and-no-decay-variant-"
    q["policy"] = q["policy"].map({"a": stem + "A", "b": stem + "B", "c": stem + "C"})
    text = memsim.compare(q, baseline=stem + "A").headline_text(width=90)
    rows = [line for line in text.splitlines() if line.startswith("similarity")]
    labels = [line.split("  ")[0] for line in rows]
    assert len(labels) == 3 and len(set(labels)) == 3, labels
    assert labels[0].endswith("variant-A (baseline)") and "~" in labels[0]
    assert labels[1].endswith("variant-B") and labels[2].endswith("variant-C")
    assert max(len(line) for line in rows) <= 90


@pytest.mark.parametrize("budgets, head", [([300], "policy"), ([300, 16000], "at 16000 tokens")])
def test_the_first_columns_header_never_runs_into_the_next(budgets, head):
    q = pd.concat([_binary_queries().assign(budget=b) for b in budgets], ignore_index=True)
    q = q[q["policy"] == "a"].assign(policy="s")  # one short name: "s"
    lines = memsim.compare(q).headline_text(width=140).splitlines()
    header = next(line for line in lines if line.startswith(head))
    assert header[len(head):].startswith("  "), header
    # the values line up under their header
    row = lines[lines.index(header) + 1]
    assert header.index("utility share") == len(row) - len(row[len("s"):].lstrip())
