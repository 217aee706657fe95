"""Seconds and bytes per round of ``dplda`` (or ``ntm``) with and without secure aggregation, and the secure sum alone.

    python benchmarks/bench_secure_sum.py --out runs/secure-sum
    python benchmarks/bench_secure_sum.py --parties --alone-parties 100 200 --tolerance 10 --out runs/secure-sum-t10
    python benchmarks/bench_secure_sum.py --method ntm --parties 5 --out runs/secure-sum-ntm

``--method ntm``: gFedNTM (ProdLDA, Sync-Opt, batch 64) on the same corpus, with DP-SGD
(``--ntm-dp``, the default) or without (``--no-ntm-dp``); its reply is the ``P``-entry
gradient (P = 614,280 at V = 5,000, K = 20), and the secure sum alone is timed on ``P`` cells.

Simulation, in this process, through the package's ServerApp and ClientApp (the secure sum's
real key agreement, Shamir shares, encryption and AES masks; only the network is missing):
the synthetic LDA corpus (each party its own topics), one node per party (100 documents of 50-100 tokens each), K = 20,
V = 5,000 (a statistic of 100,000 cells, as debian_large's), a public vocabulary file,
tolerance ``--tolerance`` (default 1). The figures are the medians over rounds 2 to ``--rounds``
of ``metrics.jsonl`` (round 1 holds the parties' start-up); ``--parties`` with no value skips
these runs. In one process every party's work runs one after the other, so a second table
times the secure sum alone (100,000 cells) at ``--alone-parties`` (default 5, 50, 100, 200):
the graph's degree and threshold, the work of one party (keys, shares, masking, check, unmask; the
mean over the parties) and of the server (relay and unmasking), which on real hosts run in
parallel, in the round that agrees the keys and in a later round of the key epoch; each is
the fastest of ``--repeat`` (default 3) sums, as the machine may be shared. The secure runs
are repeated for each ``--epochs`` value (``secure-aggregation-epoch``; default 1 and 10).
Writes ``results.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from dplda_quality import train  # noqa: E402

from flower_topics.run.config import parse_run_config  # noqa: E402
from flower_topics.data.prepare import synthetic_config  # noqa: E402
from flower_topics.data.synthetic import make_synthetic_corpus  # noqa: E402


class _TimedGrid:
    """The parties of :mod:`flower_topics.secure_sum.party` in this process, each one's time kept apart."""

    def __init__(self, nodes):
        from flwr.app import RecordDict

        self.states = {n: RecordDict() for n in nodes}
        self.party_seconds = 0.0

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import ConfigRecord, Message, RecordDict
        from flwr.supercore.task_identity import TaskIdentity

        from flower_topics.secure_sum import party
        from flower_topics.wire.protocol import CONFIG

        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            started = time.perf_counter()
            answer = party.answer(self.states[node], node, msg.content[CONFIG])
            self.party_seconds += time.perf_counter() - started
            TaskIdentity.node_id = node
            replies.append(Message(content=RecordDict({CONFIG: ConfigRecord(answer)}), reply_to=msg))
            TaskIdentity.node_id = 0
        return replies


def secure_sum_alone(parties: int, cells: int = 100_000, tolerance: int = 1, epoch: int = 10
                     ) -> tuple[list[tuple[float, float]], tuple[str, int]]:
    """Seconds of one party and of the server for two secure sums of ``cells`` integers over ``parties`` in one
    key epoch of ``epoch`` rounds (the first agrees the keys, the second continues; with ``epoch`` 1 both agree),
    and the graph's ``(k, t)``."""
    from flower_topics.secure_sum import party
    from flower_topics.secure_sum.protocol import SecureSumSettings
    from flower_topics.secure_sum.server import SecureRound
    from flower_topics.simulations.inprocess import as_server

    as_server()
    nodes = list(range(101, 101 + parties))
    grid = _TimedGrid(nodes)
    settings, key_epoch, timings = SecureSumSettings(bits=32, tolerance=tolerance, epoch=epoch), None, []
    for server_round in (1, 2):
        grid.party_seconds = 0.0
        started = time.perf_counter()
        secure = SecureRound(grid, nodes, settings, server_round=server_round, timeout=60, epoch=key_epoch)
        records = secure.setup()
        key_epoch = secure.epoch
        masked = {}
        for node, record in records.items():
            values = np.random.default_rng(node).integers(-1000, 1000, size=cells)
            t0 = time.perf_counter()
            masked[node] = party.mask_update(grid.states[node], node, record, values)
            grid.party_seconds += time.perf_counter() - t0
        summed = secure.unmask(masked)
        total = time.perf_counter() - started
        expected = sum(np.random.default_rng(node).integers(-1000, 1000, size=cells) for node in nodes)
        if not np.array_equal(summed, expected):
            raise AssertionError("the secure sum is not the parties' sum")
        timings.append((grid.party_seconds / parties, total - grid.party_seconds))
    graph = secure.graph
    degree = f"{graph.design.degree} (complete)" if graph.design.complete else str(graph.design.degree)
    return timings, (degree, graph.threshold)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--parties", type=int, nargs="*", default=[5, 50])
    parser.add_argument("--alone-parties", type=int, nargs="*", default=[5, 50, 100, 200])
    parser.add_argument("--tolerance", type=int, default=1)
    parser.add_argument("--epochs", type=int, nargs="+", default=[1, 10],
                        help="secure-aggregation-epoch values to run (1: keys every round)")
    parser.add_argument("--repeat", type=int, default=3, help="secure sums alone per party count (the fastest is kept)")
    parser.add_argument("--method", choices=["dplda", "ntm"], default="dplda")
    parser.add_argument("--ntm-dp", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| parties | secure aggregation | key epoch R | s / round | MB sent / round | MB received / round |",
             "|---|---|---|---|---|---|"]
    for parties in args.parties:
        base = {"dataset": "synthetic", "synthetic-nodes": parties, "synthetic-topics": parties * -(-20 // parties),
                "synthetic-shared-topics": 0, "synthetic-vocab-size": 5000, "synthetic-docs-per-node": 100,
                "synthetic-doc-min-length": 50, "synthetic-doc-max-length": 100, "num-topics": 20,
                "method": "dplda", "dplda.epsilon": 4.0, "dplda.init": "random", "federated-eval": False,
                "num-rounds": args.rounds, "seed": 0, "secure-aggregation-tolerance": args.tolerance}
        if args.method == "ntm":
            base = {**base, "method": "ntm", "ntm.dp": args.ntm_dp}
        vocabulary = out / f"vocabulary-{parties}.txt"
        corpus = make_synthetic_corpus(synthetic_config(parse_run_config({**base, "method": "lda"})), seed=0).corpus
        vocabulary.write_text("\n".join(corpus.vocabulary) + "\n")
        for secure, epoch in [(False, 1)] + [(True, e) for e in args.epochs]:
            name = f"p{parties}-{f'secure-r{epoch}' if secure else 'plain'}"
            started = time.time()
            train({**base, "vocabulary": str(vocabulary), "secure-aggregation": secure,
                   "secure-aggregation-epoch": epoch}, out / name, parties)
            rows = [json.loads(line) for line in (out / name / "metrics.jsonl").open()]
            seconds = float(np.median(np.diff([row["wall_time"] for row in rows])[1:]))
            sent = float(np.median([row["bytes_sent"] for row in rows[1:]])) / 1e6
            received = float(np.median([row["bytes_received"] for row in rows[1:]])) / 1e6
            lines.append(f"| {parties} | {'yes' if secure else 'no'} | {epoch if secure else '-'} | {seconds:.2f} | "
                         f"{sent:.1f} | {received:.1f} |")
            print(lines[-1], f"(whole run {time.time() - started:.0f} s)", flush=True)
    cells = 100_000
    if args.method == "ntm":
        from flower_topics.wire.ntm import n_parameters

        cells = n_parameters("prodlda", 5000, 20)
    epoch = max(args.epochs)
    lines += ["", (f"The secure sum alone ({cells:,} cells, T = {args.tolerance}, key epoch of {epoch} rounds; "
                   "seconds of the round that agrees the keys / of a later round):"), "",
              "| parties | degree k | threshold t | one party's seconds | server's seconds |", "|---|---|---|---|---|"]
    for parties in args.alone_parties:
        runs = [secure_sum_alone(parties, cells, args.tolerance, epoch) for _ in range(args.repeat)]
        best = [[min(run[0][r][who] for run in runs) for who in (0, 1)] for r in (0, 1)]
        degree, threshold = runs[0][1]
        lines.append(f"| {parties} | {degree} | {threshold} | {best[0][0]:.3f} / {best[1][0]:.3f} | "
                     f"{best[0][1]:.2f} / {best[1][1]:.2f} |")
        print(lines[-1], flush=True)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
