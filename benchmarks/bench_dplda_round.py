"""Seconds and bytes per round of ``dplda`` and ``lda`` (one local sweep) on debian_large, 5 parties, K=20.

    python benchmarks/bench_dplda_round.py --out runs/dplda-round

Both run in this process through the package's ServerApp and ClientApp (5 label parties, the
same 5,000-word vocabulary file, federated evaluation off, 8 rounds); the figure is the median
of rounds 2 to 8 of ``metrics.jsonl`` (the first round holds the parties' start-up), and of the second half
of the rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from dplda_quality import public_vocabulary, train  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/datasets/debian_large/corpus.jsonl")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocabulary = public_vocabulary(args.dataset, 5000, out / "vocabulary.txt")
    base = {"dataset": args.dataset, "num-topics": 20, "vocabulary": str(vocabulary), "federated-eval": False,
            "seed": 0, "num-rounds": args.rounds}
    for method, extra in (("lda", {}), ("dplda", {"dplda.epsilon": 4.0, "dplda.init": "random"})):
        train({**base, "method": method, **extra}, out / method)
        rows = [json.loads(line) for line in (out / method / "metrics.jsonl").open()]
        seconds = np.diff([row["wall_time"] for row in rows])[1:]
        late = seconds[len(seconds) // 2:]
        print(f"{method}: {np.median(seconds):.3f} s per round (median of rounds 2-{args.rounds}), "
              f"{np.median(late):.3f} s (median of rounds {args.rounds - late.size + 1}-{args.rounds}), "
              f"{rows[-1]['bytes_sent']} bytes sent and {rows[-1]['bytes_received']} received per round", flush=True)


if __name__ == "__main__":
    main()
