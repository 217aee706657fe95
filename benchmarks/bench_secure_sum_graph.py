"""The secure sum's graph for n parties and tolerance T: degree k, threshold t and the bounds they meet.

    python benchmarks/bench_secure_sum_graph.py
    python benchmarks/bench_secure_sum_graph.py --parties 100 200 --tolerance 1 2 5

Prints a Markdown table (:func:`flower_topics.secure_sum.graph.design`): ``complete`` where
no sparse degree meets the bounds (SecAgg's complete graph, ``t = n - T``); the bounds are
log2 of the probability that the graph is bad for a server colluding with up to ``T``
parties and up to ``T`` dropouts (the honest survivors disconnected, or some party's
secrets open to the server), and that some party lacks ``t`` live holders (a failed round).
No timing: this is arithmetic.
"""

from __future__ import annotations

import argparse

from flower_topics.secure_sum.graph import design


def _bound(log2: float) -> str:
    return "0" if log2 == float("-inf") else f"2^{log2:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parties", type=int, nargs="+", default=[5, 50, 100, 200, 1000])
    parser.add_argument("--tolerance", type=int, nargs="+", default=[1, 10, 20])
    args = parser.parse_args()
    print("| n | T | graph | k | t | bad graph (leak) | too few live holders (failed round) |")
    print("|---|---|---|---|---|---|---|")
    for n in args.parties:
        for tolerance in args.tolerance:
            if 2 * tolerance >= n:
                continue
            plan = design(n, tolerance)
            kind = "complete" if plan.complete else "Harary"
            print(f"| {n} | {tolerance} | {kind} | {plan.degree} | {plan.threshold} | {_bound(plan.log2_insecure)} "
                  f"| {_bound(plan.log2_unrecoverable)} |")


if __name__ == "__main__":
    main()
