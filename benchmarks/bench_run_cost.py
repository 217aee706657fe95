"""Whole-process cost of a run, side by side with tomotopy: seconds, evaluation's share and peak memory.

    python benchmarks/bench_run_cost.py --dataset ../shared/datasets/BBC_News --rounds 1000
    python benchmarks/bench_run_cost.py --dataset ../shared/datasets/debian_large/corpus.jsonl \\
        --parties 5 --topics 100 --rounds 10

Runs, one after the other on the same machine, as separate processes timed from start to
exit (imports, corpus reading, training, scoring, writing outputs), each with the peak
resident memory of its whole process tree (the sum of every descendant's RSS, read from
``/proc`` every 0.1 s; a simulation's SuperLink, Ray and ClientApp processes included):

Without ``--parties`` (one party, the centralized code path):

1. ``flower-topics simulate --method lda --mode centralized`` for ``--rounds`` rounds of one
   sweep, at the default evaluation cadence (``eval-every``);
2. the same with federated evaluation off (``federated-eval=false``): the difference is
   what scoring costs;
3. ``benchmarks/tomotopy_lda.py`` for as many iterations (one worker).

With ``--parties N``: ``flower-topics simulate --method lda --mode federated --clients N``
(Flower's simulation engine) with federated evaluation off, then tomotopy on the pooled
training documents for as many iterations. ``--corpus-cache`` sets
``FLOWER_TOPICS_CACHE_DIR`` for our run (default: a fresh empty folder, so that the run
preprocesses the corpus itself, as a first run does).

Prints and writes ``run_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def tree_rss(root: int) -> int:
    """Resident bytes of process ``root`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    seen, frontier, total = set(), [root], 0
    while frontier:
        pid = frontier.pop()
        if pid in seen:
            continue
        seen.add(pid)
        frontier += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def timed(cmd: list[str], extra_env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds of ``cmd`` and the peak RSS (bytes) of its process tree."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(extra_env or {})}
    started = time.perf_counter()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], tree_rss(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {process.returncode}:\n{err[-3000:]}")
    return seconds, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/datasets/BBC_News")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--parties", type=int, default=0, help="federated run of this many parties (0: centralized)")
    parser.add_argument("--corpus-cache", default="", help="FLOWER_TOPICS_CACHE_DIR of our run (default: fresh)")
    parser.add_argument("--out", default="runs/bench-run-cost")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cli = str(Path(sys.executable).with_name("flower-topics"))
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        tomotopy_cmd = [sys.executable, str(HERE / "tomotopy_lda.py"), "--dataset", args.dataset, "--topics",
                        str(args.topics), "--iterations", str(args.rounds), "--out", f"{tmp}/tomotopy"]
        if args.parties:
            cache = {"FLOWER_TOPICS_CACHE_DIR": args.corpus_cache or f"{tmp}/corpus-cache"}
            ours, ours_peak = timed([cli, "simulate", "--method", "lda", "--dataset", args.dataset, "--clients",
                                     str(args.parties), "--topics", str(args.topics), "--rounds", str(args.rounds),
                                     "--out", f"{tmp}/federated", "--set", "federated-eval=false"], cache)
            tomotopy, tomotopy_peak = timed(tomotopy_cmd)
            result = {"dataset": args.dataset, "parties": args.parties, "rounds": args.rounds, "topics": args.topics,
                      "ours_seconds": round(ours, 1), "ours_peak_mib": round(ours_peak / mib),
                      "tomotopy_seconds": round(tomotopy, 1), "tomotopy_peak_mib": round(tomotopy_peak / mib),
                      "ratio_seconds": round(ours / tomotopy, 2), "ratio_peak": round(ours_peak / tomotopy_peak, 2)}
        else:
            common = [cli, "simulate", "--method", "lda", "--dataset", args.dataset, "--clients", "1", "--topics",
                      str(args.topics), "--rounds", str(args.rounds), "--mode", "centralized"]
            ours, ours_peak = timed([*common, "--out", f"{tmp}/eval"])
            no_eval, _ = timed([*common, "--out", f"{tmp}/no-eval", "--set", "federated-eval=false"])
            tomotopy, tomotopy_peak = timed(tomotopy_cmd)
            evals = sum(1 for line in Path(f"{tmp}/eval/metrics.jsonl").read_text().splitlines()
                        if "perplexity" in json.loads(line))
            result = {"dataset": args.dataset, "rounds": args.rounds, "topics": args.topics,
                      "ours_seconds": round(ours, 1), "ours_without_evaluation_seconds": round(no_eval, 1),
                      "tomotopy_seconds": round(tomotopy, 1), "ratio_ours_to_tomotopy": round(ours / tomotopy, 2),
                      "evaluations": evals, "evaluation_share": round(max(ours - no_eval, 0.0) / ours, 3),
                      "ours_peak_mib": round(ours_peak / mib), "tomotopy_peak_mib": round(tomotopy_peak / mib)}
    (out / "run_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
