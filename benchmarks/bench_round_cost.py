"""A federated run's cost against an earlier commit: whole processes, alternated in pairs, same model checked.

    python benchmarks/bench_round_cost.py --baseline REF --pairs 3
    python benchmarks/bench_round_cost.py --baseline REF --pairs 3 \\
        --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl --parties 5 --topics 100 --rounds 100

Checks the ``--baseline`` git ref out into a temporary worktree and runs, ``--pairs`` times, the same
``flower-topics simulate --method lda --mode federated`` (``--parties`` label partitions, ``--topics``,
``--rounds`` rounds of one sweep, federated evaluation off unless ``--federated-eval``, ``--engine``) once
with the baseline's code and once with this working tree's, each a whole process of its own (the
baseline's ``flower_topics`` on its ``PYTHONPATH``, this tree's on ours; the same virtual environment),
each with a fresh ``FLWR_HOME``, a fresh corpus cache (so both preprocess the corpus, as a first run does),
``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` and one thread. The order alternates from pair to pair
(baseline first, then ours first), so that a drift in the machine's load hits both alike.

For each pair it reports the run's own wall time (the last round's ``wall_time`` in ``metrics.jsonl``:
from the ServerApp's start of round 1 to the end of the last round), the whole process's (from the
command's start to its exit: imports, corpus, SuperLink and Ray start-up, outputs), their ratios
(ours / baseline), and whether the two models are the same (``model.npz``'s ``topic_word``, array
equal); then the medians over the pairs. Prints and writes ``round_cost.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from benchmark_data import DATASETS  # noqa: E402


def cli_module(tree: Path) -> str:
    """The module that runs ``flower-topics`` in checkout ``tree`` (the command line moved into a package)."""
    return "flower_topics.cli.main" if (tree / "flower_topics" / "cli" / "main.py").exists() else "flower_topics.cli"


def run_once(tree: Path, args: argparse.Namespace, work: Path) -> dict[str, float | str]:
    """One whole run with the code of ``tree`` in folder ``work``: its whole-process and own wall time."""
    work.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "FLWR_HOME": str(work / "flwr-home"),
           "FLOWER_TOPICS_CACHE_DIR": str(work / "corpus-cache"), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    out = work / "run"
    cmd = [sys.executable, "-m", cli_module(tree), "simulate", "--method", "lda", "--dataset", args.dataset,
           "--clients", str(args.parties), "--partition", "label", "--topics", str(args.topics), "--rounds",
           str(args.rounds), "--mode", "federated", "--engine", args.engine, "--seed", str(args.seed), "--out", str(out),
           *([] if args.federated_eval else ["--set", "federated-eval=false"])]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} (in {tree}) exited {done.returncode}:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"whole_seconds": seconds, "run_seconds": float(rows[-1]["wall_time"]), "model": str(out / "model.npz")}


def same_model(a: str, b: str) -> bool:
    """Whether two model files hold the same ``topic_word``, value for value."""
    with np.load(a) as x, np.load(b) as y:
        return bool(np.array_equal(x["topic_word"], y["topic_word"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git ref (commit, tag, branch) of the code to compare with")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--dataset", default=str(DATASETS / "debian_large" / "corpus.jsonl"))
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine", choices=("flower", "inprocess"), default="flower")
    parser.add_argument("--federated-eval", action="store_true", help="keep the default federated evaluation")
    parser.add_argument("--out", default="runs/bench-round-cost")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline), args.baseline],
                       check=True, capture_output=True)
        try:
            pairs = []
            for pair in range(args.pairs):
                order = ("baseline", "ours") if pair % 2 == 0 else ("ours", "baseline")
                runs = {name: run_once(baseline if name == "baseline" else ROOT, args, Path(tmp) / f"{pair}-{name}")
                        for name in order}
                row = {"first": order[0], **{f"{name}_{key}": round(float(value), 2) for name, run in runs.items()
                                             for key, value in run.items() if key != "model"},
                       "same_model": same_model(str(runs["baseline"]["model"]), str(runs["ours"]["model"]))}
                row["run_ratio"] = round(row["ours_run_seconds"] / row["baseline_run_seconds"], 3)
                row["whole_ratio"] = round(row["ours_whole_seconds"] / row["baseline_whole_seconds"], 3)
                pairs.append(row)
                print(json.dumps(row), flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=False,
                           capture_output=True)

    def median(key: str) -> float:
        return round(float(np.median([row[key] for row in pairs])), 3)

    result = {"baseline": args.baseline, "dataset": args.dataset, "parties": args.parties, "topics": args.topics,
              "rounds": args.rounds, "engine": args.engine, "federated_eval": args.federated_eval,
              "load_average": [round(x, 2) for x in os.getloadavg()], "pairs": pairs,
              **{f"median_{key}": median(key) for key in ("baseline_run_seconds", "ours_run_seconds", "run_ratio",
                                                         "baseline_whole_seconds", "ours_whole_seconds",
                                                         "whole_ratio")},
              "same_model": all(row["same_model"] for row in pairs)}
    (out / "round_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
