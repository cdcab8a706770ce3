#!/usr/bin/env python3
"""Backend parity of two kvbench databases of the same sweep (e.g. --device cpu and --device cuda).

Prints the share of (cell, sample) rows whose predictions are identical, and per (policy, budget,
task) the mean score of each database and the difference, flagging differences over --max-diff
points. Usage: compare_predictions.py REFERENCE.db CANDIDATE.db [--max-diff 5]
"""
import argparse
import sqlite3
import sys


def rows(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    query = """SELECT c.cell_key, c.policy, c.budget, c.benchmark, c.task, c.length,
                      r.sample_index, r.prediction, r.score
               FROM results r JOIN cells c USING (cell_id)"""
    return {(row[0], row[6]): row for row in db.execute(query)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("candidate")
    parser.add_argument("--max-diff", type=float, default=5.0)
    args = parser.parse_args()
    ref, cand = rows(args.reference), rows(args.candidate)
    common = sorted(set(ref) & set(cand))
    if not common:
        sys.exit("no (cell, sample) rows in common")
    same = sum(ref[k][7] == cand[k][7] for k in common)
    print(f"rows in common: {len(common)} (reference {len(ref)}, candidate {len(cand)})")
    print(f"identical predictions: {same}/{len(common)} = {100.0 * same / len(common):.1f}%")
    groups = {}
    for k in common:
        _, policy, budget, bench, task, _, _, _, _ = ref[k]
        g = groups.setdefault((policy, budget or "full", f"{bench}/{task}"), [[], []])
        g[0].append(ref[k][8])
        g[1].append(cand[k][8])
    worst = 0.0
    print(f"{'policy':14} {'budget':6} {'task':28} {'n':>3} {'ref':>6} {'cand':>6} {'diff':>6}")
    for (policy, budget, task), (a, b) in sorted(groups.items()):
        ma, mb = 100.0 * sum(a) / len(a), 100.0 * sum(b) / len(b)
        worst = max(worst, abs(mb - ma))
        flag = "  <-- over" if abs(mb - ma) > args.max_diff else ""
        print(f"{policy:14} {budget:6} {task:28} {len(a):3d} {ma:6.1f} {mb:6.1f} {mb - ma:+6.1f}{flag}")
    print(f"largest |difference|: {worst:.1f} points")


if __name__ == "__main__":
    main()
