"""Seconds and bytes per round of ``dplda`` and ``lda`` (one local sweep) on debian_large, 5 parties, K=20.

    python benchmarks/bench_dplda_round.py --out runs/dplda-round

Both run in this process through the package's ServerApp and ClientApp (5 label parties, the
same 5,000-word vocabulary file, federated evaluation off, 8 rounds); the figure is the median
of rounds 2 to 8 of ``metrics.jsonl`` (the first round holds the parties' start-up), and of the second half
of the rounds. ``--repeats`` alternates the two methods that many times; ``--threads`` caps the
threads dplda's E-step splits a party's documents over (numba's count; default all cores); the
Gibbs sampler of ``lda`` uses one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from benchmark_data import DATASETS  # noqa: E402
from dplda_quality import public_vocabulary, train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "debian_large/corpus.jsonl"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        numba.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocabulary = public_vocabulary(args.dataset, 5000, out / "vocabulary.txt")
    base = {"dataset": args.dataset, "num-topics": 20, "vocabulary": str(vocabulary), "federated-eval": False,
            "seed": 0, "num-rounds": args.rounds}
    runs = [(method, extra, repeat) for repeat in range(args.repeats)
            for method, extra in (("lda", {}), ("dplda", {"dplda.epsilon": 4.0, "dplda.init": "random"}))]
    for method, extra, repeat in runs:
        run_dir = out / (method if args.repeats == 1 else f"{method}-{repeat}")
        train({**base, "method": method, **extra}, run_dir)
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
        seconds = np.diff([row["wall_time"] for row in rows])[1:]
        late = seconds[len(seconds) // 2:]
        print(f"{method}: {np.median(seconds):.3f} s per round (median of rounds 2-{args.rounds}), "
              f"{np.median(late):.3f} s (median of rounds {args.rounds - late.size + 1}-{args.rounds}), "
              f"{rows[-1]['bytes_sent']} bytes sent and {rows[-1]['bytes_received']} received per round", flush=True)


if __name__ == "__main__":
    main()
