"""gFedNTM (method ``ntm``) on BBC News: federated Sync-Opt vs centralized, FedAvg, and DP-SGD.

    python benchmarks/ntm_federated.py --steps 300 --out runs/bench-ntm-federated

Runs no longer reproduce bit for bit: each node's secret-seed is mixed with a fresh per-run nonce.

Every run goes through the package's real path (``run_server`` on an in-process grid of the
package's ClientApp: vocabulary agreement, ``train.ntm`` messages, validation, federated
evaluation), ProdLDA, K=20, ``norm="layer"``, batch 64, Adam lr 2e-3, one torch thread:

- ``federated``: 5 parties, one BBC label each (``partition="label"``), ``sync="minibatch"``,
  no DP, ``--steps`` rounds = server optimizer steps (effective batch 5 x 64);
- ``centralized``: the same method with one party holding every training document
  (what ``flower-topics simulate --mode centralized`` runs), the same number of steps, batch
  64 (and ``centralized-320``: batch 320, the federated effective batch);
- ``local``: 5 parties, ``sync="local"``, ``local-steps`` 10, ``--steps / 10`` rounds (the same
  number of party steps);
- ``dp``: as ``federated`` with DP-SGD (noise multiplier ``--noise``, C = 1, delta 1e-5).

Scores are the federated evaluation of the last round (document-completion perplexity on
the parties' test documents, NPMI on their documents; :mod:`flower_topics.evaluation.federated`).
Seconds per round: wall time between the first and the last round over the rounds in
between; bytes per round: payload sent plus received (``metrics.jsonl``). Writes
``results.jsonl`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmark_data import DATASETS
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.outputs import read_metrics
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

DATASET = str(DATASETS / "BBC_News")


def run(name: str, out: Path, parties: int, extra: dict, rounds: int) -> dict:
    config = {"dataset": DATASET, "method": "ntm", "num-topics": 20, "num-rounds": rounds, "seed": 0,
              "eval-every": rounds, "output-dir": str(out / name), "ntm.dp": False, **extra}
    if parties == 1:
        config.update({"partition": "iid", "partition-sizes": "", "label-groups": ""})
        nodes = [{"partition-id": 0, "num-partitions": 1, "secret-seed": 1}]
    else:
        config["partition"] = "label"
        nodes = [{"partition-id": i, "num-partitions": parties, "secret-seed": i + 1} for i in range(parties)]
    grid = InProcessGrid(make_client_app(config), nodes, config)
    started = time.time()
    model = run_server(grid, config)
    wall = time.time() - started
    rows = read_metrics(out / name / "metrics.jsonl")
    last = rows[-1]
    times = [r["wall_time"] for r in rows]
    per_round = (times[-2] - times[0]) / max(len(times) - 2, 1) if len(times) > 2 else times[-1]
    result = {"run": name, "parties": parties, "rounds": rounds, "wall_s": round(wall, 1),
              "sec_per_round": round(per_round, 4),
              "bytes_per_round": rows[0]["bytes_sent"] + rows[0]["bytes_received"],
              "npmi": last.get("npmi"), "perplexity": last.get("perplexity"), "diversity": last.get("diversity"),
              "epsilon": last["privacy"].get("epsilon"), "vocab": len(model.vocabulary), **extra}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--runs", nargs="+", default=["federated", "centralized", "centralized-320", "local", "dp"])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-ntm-federated"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    plans = {
        "federated": (5, {}, args.steps),
        "centralized": (1, {}, args.steps),
        "centralized-320": (1, {"ntm.batch-size": 320}, args.steps),
        "local": (5, {"ntm.sync": "local", "ntm.local-steps": 10}, max(1, args.steps // 10)),
        "dp": (5, {"ntm.dp": True, "ntm.noise-multiplier": args.noise}, args.steps),
    }
    results = []
    for name in args.runs:
        parties, extra, rounds = plans[name]
        results.append(run(name, args.out, parties, extra, rounds))
        with open(args.out / "results.jsonl", "a") as f:
            f.write(json.dumps(results[-1]) + "\n")
    print("| run | parties | rounds | s/round | bytes/round | NPMI | perplexity | diversity | epsilon |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['run']} | {r['parties']} | {r['rounds']} | {r['sec_per_round']:.3f} | {r['bytes_per_round']} | "
              f"{r['npmi']} | {r['perplexity']} | {r['diversity']} | {r['epsilon']} |")


if __name__ == "__main__":
    main()
