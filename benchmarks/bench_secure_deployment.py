"""Seconds and bytes per round of ``dplda`` and ``lda`` with and without secure aggregation, deployment engine.

    python benchmarks/bench_secure_deployment.py --out runs/secure-deployment --parties 5 20

A real deployment on 127.0.0.1: one SuperLink (``flower-superlink --insecure``, deployment
engine) and one ``flower-supernode`` process per party, each with its partition of the
synthetic LDA corpus of ``bench_secure_sum.py`` (100 documents of 50-100 tokens per party,
V = 5,000, K = 20: a statistic of 100,000 cells); the run is submitted with ``flwr run``
and its final status checked. Figures: medians over rounds 2 to ``--rounds`` of the run's
``metrics.jsonl`` (wall time between rounds, payload bytes the strategy counted), the peak
resident memory of the SuperLink's and the SuperNodes' process trees (sampled every 0.5 s),
and the whole run's seconds. Every process binds 127.0.0.1 and is stopped by its PID.
Writes ``results.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flower_topics.run.config import parse_run_config  # noqa: E402
from flower_topics.data.prepare import synthetic_config  # noqa: E402
from flower_topics.data.synthetic import make_synthetic_corpus  # noqa: E402
from flower_topics.simulations.local_superlink import (  # noqa: E402
    submit, superlink, supernode, wait_for_run, write_connection)
from flower_topics.simulations.processes import process_tree  # noqa: E402
from process_memory import resident_bytes


def tree_rss(pids: list[int]) -> int:
    """Resident bytes of the processes ``pids`` and all their descendants (from /proc)."""
    return resident_bytes(sorted({p for pid in pids for p in process_tree(pid)}))


def run_config(config: dict) -> list[str]:
    """``--run-config`` items of a dict (strings quoted, TOML style)."""
    items = []
    for key, value in config.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, str):
            value = f"'{value}'"
        items.append(f"{key}={value}")
    return [" ".join(items)]


def deploy(config: dict, parties: int, out: Path, timeout: float) -> dict:
    """One run on a fresh deployment of ``parties`` SuperNodes; its figures."""
    home = Path(tempfile.mkdtemp(prefix="flwr-home-"))
    logs = out / "logs"
    peak, pids, done = [0], [], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], tree_rss(pids))

    try:
        with ExitStack() as stack:
            port = stack.enter_context(superlink(home, simulation=False, log_path=logs / "superlink.log"))
            write_connection(home, f"127.0.0.1:{port}")  # Flower 1.41 serves every API on one port
            for i in range(parties):
                pids.append(stack.enter_context(supernode(
                    home, port, f"partition-id={i} num-partitions={parties}", log_path=logs / f"node{i}.log")))
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            started = time.time()
            run_id = submit(ROOT, home, run_config(config))
            status = wait_for_run(ROOT, home, run_id, timeout)
            seconds = time.time() - started
            done.set()
            if status != "finished:completed":
                raise RuntimeError(f"run {run_id}: {status}")
    finally:
        done.set()
        shutil.rmtree(home, ignore_errors=True)
    rows = [json.loads(line) for line in (Path(config["output-dir"]) / "metrics.jsonl").open()]
    return {"seconds": seconds, "peak": peak[0],
            "round": float(np.median(np.diff([row["wall_time"] for row in rows])[1:])),
            "sent": float(np.median([row["bytes_sent"] for row in rows[1:]])),
            "received": float(np.median([row["bytes_received"] for row in rows[1:]]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--parties", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--methods", nargs="+", default=["dplda", "lda"])
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| method | parties | secure aggregation | s / round | MB sent / round | MB received / round | "
             "peak memory, all processes (GB) | whole run (s) |", "|---|---|---|---|---|---|---|---|"]
    for parties in args.parties:
        base = {"dataset": "synthetic", "synthetic-nodes": parties, "synthetic-topics": parties * -(-20 // parties),
                "synthetic-shared-topics": 0, "synthetic-vocab-size": 5000, "synthetic-docs-per-node": 100,
                "synthetic-doc-min-length": 50, "synthetic-doc-max-length": 100, "num-topics": 20,
                "federated-eval": False, "num-rounds": args.rounds, "seed": 0, "min-nodes": parties,
                "round-timeout": 600.0}
        vocabulary = out / f"vocabulary-{parties}.txt"
        corpus = make_synthetic_corpus(synthetic_config(parse_run_config({**base, "method": "lda"})), seed=0).corpus
        vocabulary.write_text("\n".join(corpus.vocabulary) + "\n")
        for method in args.methods:
            extra = {"dplda.epsilon": 4.0, "dplda.init": "random"} if method == "dplda" else {}
            for secure in (False, True):
                name = f"{method}-p{parties}-{'secure' if secure else 'plain'}"
                if (out / name).exists():
                    shutil.rmtree(out / name)
                config = {**base, **extra, "method": method, "vocabulary": str(vocabulary),
                          "secure-aggregation": secure, "output-dir": str(out / name)}
                r = deploy(config, parties, out / name, args.timeout)
                lines.append(f"| {method} | {parties} | {'yes' if secure else 'no'} | {r['round']:.2f} | "
                             f"{r['sent'] / 1e6:.1f} | {r['received'] / 1e6:.1f} | {r['peak'] / 1e9:.1f} | "
                             f"{r['seconds']:.0f} |")
                print(lines[-1], flush=True)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
