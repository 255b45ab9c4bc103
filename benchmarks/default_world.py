"""How hard is the default world? Figures behind the workload defaults.

Prints, on the default synthetic workload (every knob at its default, 3
replicates, budget 1,500 tokens, 50 candidates):

* similarity-only recall within the budget, overall and by age bucket: the
  criterion the default ``retriever_noise`` is chosen by (DESIGN.md section 2;
  BM25 on LoCoMo packs 0.69 of the evidence within 1,500 tokens);
* the query-note cosine model of :meth:`SyntheticWorkload.similarity_model`
  against the cosines of a generated stream, and its slope ``beta``;
* with one packer for all (skip-fill), the utility of no decay (similarity
  only), ``0.95 ** days`` (Hivemind's old decay) and a 180-day half-life with
  floor 0.35 (Hivemind's fixed task tier), with paired 95% intervals of the
  differences.

A script, not a test: it prints figures and never fails::

    python benchmarks/default_world.py
    python benchmarks/default_world.py --set retriever_noise=1.2 --set slot_weight=0.8
    python benchmarks/default_world.py --horizon 120 --recall-only

``--set`` takes ``[workload]`` keys (dotted for classes, e.g.
``classes.project.share=0.4``) with TOML values; ``--horizon`` shortens the
query window (the backfill stays), to check that a short test horizon gives
the recall of the full year.
"""

from __future__ import annotations

import argparse
import time
import tomllib

import numpy as np
import pandas as pd

import memsim
from memsim.core.rng import child_seq, seed_sequence
from memsim.reporting.stats import paired_tests
from memsim.data.workload import SyntheticWorkload

SEED = 20261130
BUCKETS = ["recall_age_0_7", "recall_age_7_30", "recall_age_30_90", "recall_age_90_180",
           "recall_age_180_365", "recall_age_365_inf"]
SKIP_FILL = {"ranker": "product", "packer": "skip-fill", "orderer": "score"}
POLICIES = {
    "no-decay": {"preset": "similarity-only"},
    "per-day-5pct": {**SKIP_FILL, "decay": {"kind": "per-day", "rate": 0.05}},
    "half-life-180-floor": {**SKIP_FILL, "decay": {"kind": "half-life-floor",
                                                   "half_life_days": 180.0, "floor": 0.35}},
}


def _set(table: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        table = table.setdefault(key, {})
    table[last] = value


def workload_table(sets: list[str], horizon: float | None) -> dict:
    table: dict = {}
    for item in sets:
        key, _, text = item.partition("=")
        _set(table, key.strip(), tomllib.loads(f"v = {text.strip()}")["v"])
    if horizon is not None:
        table["horizon_days"] = horizon
    return table


def run(workload: dict, policies: dict, replicates: int, budget: int):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "default-world", "seed": SEED, "replicates": replicates,
                       "budget_tokens": budget, "candidates": 50},
        "workload": workload,
        "policies": policies,
    })
    return memsim.run_experiment(exp, out=None)


def _mean(res, policy: str, metric: str) -> tuple[float, float, float]:
    m = res.metric(metric)
    row = m[m["policy"] == policy].iloc[0]
    return float(row["mean"]), float(row["ci_low"]), float(row["ci_high"])


def print_recall(res, policy: str = "no-decay") -> None:
    mean, lo, hi = _mean(res, policy, "recall")
    print(f"similarity-only recall: {mean:.3f} [{lo:.3f}, {hi:.3f}]")
    q = res.queries[res.queries["policy"] == policy]
    per_rep = q.groupby("replicate")["recall"].mean()
    print("  per replicate: " + ", ".join(f"{v:.3f}" for v in per_rep))
    for b in BUCKETS:
        mean, lo, hi = _mean(res, policy, b)
        n = int(q[b].notna().sum())
        print(f"  {b:<20} {mean:.3f} [{lo:.3f}, {hi:.3f}]  ({n} queries)")
    for metric in ("mrr", "ndcg@10", "utility", "utility_share", "stale_rate"):
        m = res.metric(metric)
        if (m["policy"] == policy).any():
            mean, lo, hi = _mean(res, policy, metric)
            print(f"  {metric:<20} {mean:.3f} [{lo:.3f}, {hi:.3f}]")


def print_top5(wl: SyntheticWorkload) -> None:
    """Share of answerable queries with all (any) of R+ in the cosine top 5.

    The figure BM25 reaches on LoCoMo (0.46 all, 0.56 any), on replicate 0's
    stream; R+ = positive-gain notes created by the query's time.
    """
    s = wl.generate(child_seq(seed_sequence(SEED), "replicate", 0, "workload"))
    created = s.notes["created_at"].to_numpy()
    t = s.queries["t"].to_numpy()
    pos = s.qrels[s.qrels["gain"] > 0]
    by_query = pos.groupby("query_id")["note_id"].apply(np.asarray)
    all_in = any_in = 0
    ids = by_query.index.to_numpy()
    for lo in range(0, ids.size, 512):
        chunk = ids[lo:lo + 512]
        score = s.query_embeddings[chunk] @ s.note_embeddings.T
        score[created[None, :] > t[chunk, None]] = -np.inf
        top = np.argpartition(-score, 5, axis=1)[:, :5]
        for row, qid in enumerate(chunk):
            hit = np.isin(by_query[qid], top[row])
            all_in += bool(hit.all())
            any_in += bool(hit.any())
    print(f"R+ in the cosine top 5 (LoCoMo BM25: all 0.46, any 0.56): all {all_in / ids.size:.3f},"
          f" any {any_in / ids.size:.3f} ({ids.size} queries)")


def print_similarity_model(wl: SyntheticWorkload) -> None:
    """Model against the cosines of replicate 0's stream."""
    s = wl.generate(child_seq(seed_sequence(SEED), "replicate", 0, "workload"))
    model = wl.similarity_model()
    q = s.queries
    rng = np.random.default_rng(0)
    cur = s.qrels[s.qrels["gain"] == wl.gain_current]
    on = np.einsum("ij,ij->i", s.query_embeddings[cur["query_id"]],
                   s.note_embeddings[cur["note_id"]])
    # random (query, note) pairs, classified by the note's slot and topic
    qi = rng.integers(0, len(q), 400_000)
    ni = rng.integers(0, len(s.notes), qi.size)
    cos = np.einsum("ij,ij->i", s.query_embeddings[qi], s.note_embeddings[ni])
    q_topic, q_slot = q["topic"].to_numpy()[qi], q["slot"].to_numpy()[qi]
    n_topic, n_slot = s.notes["topic"].to_numpy()[ni], s.notes["slot"].to_numpy()[ni]
    distractor = (s.notes["note_class"] == "distractor").to_numpy()[ni]
    same = (q_topic == n_topic) & (q_slot >= 0)
    groups = {
        "on_slot": on,
        "same_topic": cos[same & (n_slot != q_slot) & ~distractor],
        "other_topic": cos[(q_topic != n_topic) & (q_slot >= 0)],
        "distractor": cos[same & distractor],
    }
    print(f"similarity model (w = {wl.slot_weight:g}, s = {wl.retriever_noise:g}, "
          f"d = {wl.embedding_dim}): model mean/sd vs empirical mean/sd")
    for name, emp in groups.items():
        mu, sd = getattr(model, f"{name}_mean"), getattr(model, f"{name}_sd")
        print(f"  {name:<12} {mu:6.3f} {sd:5.3f}   {emp.mean():6.3f} {emp.std():5.3f}  "
              f"(n = {emp.size})")
    print(f"  beta = (mu_on - mu_same) / sd_same^2 = {model.beta:.2f}")


def print_comparison(res) -> None:
    print("utility, skip-fill for all (mean [95% CI])")
    for pol in POLICIES:
        u = _mean(res, pol, "utility")
        r = _mean(res, pol, "recall")
        st = _mean(res, pol, "stale_rate")
        print(f"  {pol:<20} utility {u[0]:.3f} [{u[1]:.3f}, {u[2]:.3f}]  recall {r[0]:.3f}  "
              f"stale_rate {st[0]:.3f}")
        print("  " + " " * 20 + " recall by age " + " ".join(
            f"{b[len('recall_age_'):]}: {_mean(res, pol, b)[0]:.3f}" for b in BUCKETS))
    print("paired differences (policy - baseline, 95% CI)")
    for base in ("no-decay", "per-day-5pct"):
        pt = paired_tests(res.queries, baseline=base, metrics=["utility", "recall"])
        for _, row in pt.iterrows():
            if row["policy"] == base or (base == "per-day-5pct" and row["policy"] == "no-decay"):
                continue
            print(f"  {row['policy']} - {base}: {row['metric']} {row['diff']:+.4f} "
                  f"[{row['diff_ci_low']:+.4f}, {row['diff_ci_high']:+.4f}] "
                  f"(p_holm {row['p_holm']:.2g}, wins/ties/losses "
                  f"{row['wins']}/{row['ties']}/{row['losses']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--horizon", type=float, default=None)
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--budget", type=int, default=1500)
    ap.add_argument("--recall-only", action="store_true",
                    help="only the similarity-only recall (and the similarity model)")
    args = ap.parse_args()
    table = workload_table(args.set, args.horizon)
    wl = SyntheticWorkload.from_config(table)
    print(f"workload overrides: {table or 'none (defaults)'}")
    start = time.perf_counter()
    policies = {"no-decay": POLICIES["no-decay"]} if args.recall_only else POLICIES
    res = run(table, policies, args.replicates, args.budget)
    print_recall(res)
    print_top5(wl)
    print_similarity_model(wl)
    if not args.recall_only:
        print_comparison(res)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    pd.set_option("display.width", 120)
    main()
