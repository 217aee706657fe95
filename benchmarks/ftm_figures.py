"""FTM (Jiang et al., CIKM 2019): the paper's experiments on our corpora, one command.

    python benchmarks/ftm_figures.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --out runs/ftm-figures/bbc

Three parties split by label with sizes in the ratio 1:2:3 (non-IID and unbalanced, the
paper's data-scarcity setting), K=20 (every party's K_p), the package's ServerApp and
ClientApp in one process (the deployed code path, no Flower engine), privacy randomness
from node secrets (``secret-seed`` 1, 2, 3). Scores are
federated evaluation's: held-out perplexity by document completion and NPMI.
The runs no longer reproduce bit for bit: a secret-seed is mixed with a fresh per-run nonce.

- ``parties``: Fig. 4, data scarcity: FTM (eps 11, tau 0.2) against each party's own LDA
  (``simulate --mode local``, 300 sweeps) and pooled LDA (``--mode centralized``).
- ``privacy``: Fig. 5, eps in {8, 9, 10, 11} x tau in {0.1, 0.2, 0.3}.
- ``rounds``: Fig. 6, quality per communication round of FTM and of conventional
  distributed LDA (``lda``, one sweep per round, 300 rounds).
- ``merge``: a sweep of xi and L (the paper gives no values), without noise (eps 1e6,
  tau 0.5: every token's vector is its one-hot vector), so that the merge is judged on its
  own; the noisy runs collapse whatever xi and L.

Each finished run is cached in ``runs.jsonl`` (rerunning resumes). Writes CSVs and PNGs.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark_data import DATASETS  # noqa: E402
from flower_topics.federation.client_app import make_client_app  # noqa: E402
from flower_topics.run.outputs import read_metrics  # noqa: E402
from flower_topics.federation.server_app import run_server  # noqa: E402
from flower_topics.simulations.inprocess import InProcessGrid  # noqa: E402

SPLIT = "0.166667,0.333333,0.5"
SCORES = ("perplexity", "npmi", "umass")


class Runs:
    """Runs keyed by their settings, cached in ``runs.jsonl``."""

    def __init__(self, out: Path, base: dict):
        self.out, self.base = out, base
        self.path = out / "runs.jsonl"
        self.done = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                row = json.loads(line)
                self.done[row["key"]] = row

    def get(self, nodes: list[dict], **settings) -> dict:
        config = {**self.base, **settings}
        key = json.dumps({"config": config, "nodes": nodes}, sort_keys=True)
        if key not in self.done:
            number = len(self.done)
            while (self.out / f"run-{number:03d}").exists():  # a run cut short leaves its folder
                number += 1
            run_dir = self.out / f"run-{number:03d}"
            started = time.time()
            run_server(InProcessGrid(make_client_app(config), nodes, config), {**config, "output-dir": str(run_dir)})
            rows = read_metrics(run_dir / "metrics.jsonl")
            curve = [(r["round"], r["perplexity"], r.get("npmi")) for r in rows if "perplexity" in r]
            row = {"key": key, **settings, "parties": len(nodes), "curve": curve,
                   **{s: rows[-1].get(s) for s in SCORES}, "global_topics": rows[-1].get("global_topics"),
                   "seconds": round(time.time() - started, 1)}
            with self.path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            self.done[key] = row
            print({k: v for k, v in row.items() if k not in ("key", "curve")}, flush=True)
        return self.done[key]


def write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=5, help="FTM global rounds")
    parser.add_argument("--local-iterations", type=int, default=50)
    parser.add_argument("--lda-sweeps", type=int, default=300)
    parser.add_argument("--only", nargs="*", default=["parties", "privacy", "rounds", "merge"])
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("privacy randomness: node secrets (secret-seed 1, 2, 3) mixed with a fresh nonce per run (no "
          "bit-for-bit reproduction)", flush=True)
    base = {"dataset": args.dataset, "partition": "sizes", "partition-sizes": SPLIT, "num-topics": 20,
            "eval-labels": False, "eval-every": 0}
    parties = [{"partition-id": i, "num-partitions": 3, "secret-seed": i + 1} for i in range(3)]
    runs = Runs(out, base)
    ftm = dict(method="ftm", **{"num-rounds": args.rounds, "ftm.local-iterations": args.local_iterations})
    rows = []
    noiseless = {"ftm.epsilon": 1e6, "ftm.tau": 0.5}
    if "parties" in args.only:
        rows.append({"model": "FTM eps 11 tau 0.2 (3 parties)", **runs.get(parties, **ftm)})
        rows.append({"model": "FTM without noise (3 parties)", **runs.get(parties, **ftm, **noiseless)})
        lda = {"method": "lda", "num-rounds": args.lda_sweeps}
        for i, party in enumerate(parties):
            rows.append({"model": f"party {i + 1} alone (LDA)", **runs.get([party], **lda)})
        pooled = [{"partition-id": 0, "num-partitions": 1}]
        rows.append({"model": "pooled LDA", **runs.get(pooled, **lda, partition="iid", **{"partition-sizes": ""})})
        write_csv(out / "parties.csv", rows, ["model", *SCORES, "global_topics", "seconds"])
    if "privacy" in args.only:
        grid = [{"epsilon": e, "tau": t, **runs.get(parties, **ftm, **{"ftm.epsilon": e, "ftm.tau": t})}
                for e in (8.0, 9.0, 10.0, 11.0) for t in (0.1, 0.2, 0.3)]
        write_csv(out / "privacy.csv", grid, ["epsilon", "tau", *SCORES, "global_topics"])
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for t in (0.1, 0.2, 0.3):
            sel = [r for r in grid if r["tau"] == t]
            ax.plot([r["epsilon"] for r in sel], [r["perplexity"] for r in sel], marker="o", label=f"tau {t}")
        ax.set(xlabel="epsilon", ylabel="held-out perplexity", title=f"FTM privacy (Fig. 5), {Path(args.dataset).name}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "privacy.png", dpi=120)
    if "rounds" in args.only:
        ftm_run = runs.get(parties, **ftm)
        lda_run = runs.get(parties, method="lda", **{"num-rounds": args.lda_sweeps})
        curves = [{"model": name, "round": rd, "perplexity": p} for name, run in (("FTM", ftm_run), ("LDA", lda_run))
                  for rd, p, _ in run["curve"]]
        write_csv(out / "rounds.csv", curves, ["model", "round", "perplexity"])
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for name, run in (("FTM (50 local iterations a round)", ftm_run), ("distributed LDA (1 sweep a round)", lda_run)):
            ax.plot(*zip(*[(rd, p) for rd, p, _ in run["curve"]]), marker=".", label=name)
        ax.set(xscale="log", xlabel="communication round", ylabel="held-out perplexity",
               title=f"Rounds (Fig. 6), {Path(args.dataset).name}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "rounds.png", dpi=120)
    if "merge" in args.only:
        settings = [(0.3, 20), (0.5, 20), (0.7, 20), (0.5, 10), (0.5, 50)]
        sweep = [{"xi": xi, "L": top, **runs.get(parties, **ftm, **noiseless, **{"ftm.xi": xi, "ftm.top-words": top})}
                 for xi, top in settings]
        write_csv(out / "merge.csv", sweep, ["xi", "L", *SCORES, "global_topics"])


if __name__ == "__main__":
    sys.exit(main())
