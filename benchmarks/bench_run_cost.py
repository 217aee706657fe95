"""Whole-process cost of a run, side by side with tomotopy: seconds, evaluation's share and peak memory.

    python benchmarks/bench_run_cost.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --rounds 1000
    python benchmarks/bench_run_cost.py --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl \\
        --parties 5 --topics 100 --rounds 10

Runs, one after the other on the same machine, as separate processes timed from start to
exit (imports, corpus reading, training, scoring, writing outputs), each with the peak
resident memory of its whole process tree (the sum of every descendant's RSS, read from
``/proc/<pid>/smaps_rollup`` every 0.1 s; a simulation's SuperLink, Ray and ClientApp processes
included) and, with ``--parties``, the peak of the summed PSS too (shared pages, such as
the libraries every Python process maps, counted once):

Without ``--parties`` (one party, the centralized code path):

1. ``flower-topics simulate --method lda --mode centralized`` for ``--rounds`` sweeps (rounds of
   ``--sweeps-per-round`` sweeps, default 1), at the default evaluation cadence (``eval-every``);
2. the same with federated evaluation off (``federated-eval=false``): the difference is
   what scoring costs;
3. ``benchmarks/tomotopy_lda.py`` for as many iterations (one worker).

With ``--parties N``: ``flower-topics simulate --method lda --mode federated --clients N``
(Flower's simulation engine, or ``--engine inprocess``: every party in one process) with federated evaluation off
(``--federated-eval``: on, at the default cadence; evaluation's share is then the evaluation rounds' time over
the median plain round, summed, against the rounds' wall time), then tomotopy on the pooled
training documents for as many iterations. ``--corpus-cache`` sets
``FLOWER_TOPICS_CACHE_DIR`` for our run (default: a fresh empty folder, so that the run
preprocesses the corpus itself, as a first run does).

Prints and writes ``run_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmark_data import DATASETS  # noqa: E402
from flower_topics.simulations.processes import process_tree  # noqa: E402


#: Roles of a simulation's processes, by a part of their command line (first match).
ROLES = (("ClientAppActor", "ClientApp (Ray actor)"), ("flwr-simulation", "ServerApp (flwr-simulation)"),
         ("flower-superlink", "SuperLink"), ("flower-superexec", "SuperExec"), ("corpus_cache", "corpus cache build"),
         ("bin/flower-topics ", "flower-topics simulate"), ("tomotopy_lda", "tomotopy_lda.py"), ("ray", "Ray daemons"),
         ("flwr", "flwr CLI"))


def role(pid: int) -> str:
    """The role of process ``pid`` in :data:`ROLES` (``other`` when none)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    return next((name for part, name in ROLES if part in command), "other")


def tree_memory(root: int) -> tuple[int, int, dict[int, int]]:
    """Resident bytes (RSS) and proportional set size (PSS: a page shared by n processes counts 1/n) of
    process ``root`` and all its descendants, summed (from /proc), and the RSS of each."""
    rss, pss, each = 0, 0, {}
    for pid in process_tree(root):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    each[pid] = int(line.split()[1]) * 1024
                    rss += each[pid]
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except OSError:
            continue
    return rss, pss, each


class Timing(NamedTuple):
    """One timed command: wall and CPU seconds, peak RSS and PSS (bytes) of its process tree, and the RSS
    of each role (:data:`ROLES`, MiB) at the RSS peak. ``cpu``: user + system seconds of the command and
    of the descendants it waited for (all of a centralized run; a simulation's Ray processes may escape it)."""

    seconds: float
    cpu: float
    peak: int
    pss: int
    roles: dict[str, int]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], extra_env: dict[str, str] | None = None) -> Timing:
    """Run ``cmd`` to its end and measure it (:class:`Timing`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(extra_env or {})}
    cpu_before = _children_cpu()
    started = time.perf_counter()
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak, done, at_peak = [0, 0], threading.Event(), {}

    def sample() -> None:
        while not done.wait(0.1):
            rss, pss, each = tree_memory(process.pid)
            if rss > peak[0]:
                at_peak.clear()
                at_peak.update({pid: (size, role(pid)) for pid, size in each.items()})
            peak[:] = max(peak[0], rss), max(peak[1], pss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = process.communicate()
    seconds = time.perf_counter() - started
    cpu = _children_cpu() - cpu_before
    done.set()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {process.returncode}:\n{err[-3000:]}")
    roles: dict[str, int] = {}
    for rss, name in at_peak.values():
        roles[name] = roles.get(name, 0) + rss
    return Timing(seconds, cpu, peak[0], peak[1],
                  {k: round(v / (1 << 20)) for k, v in sorted(roles.items(), key=lambda x: -x[1])})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--rounds", type=int, default=1000,
                        help="sweeps of ours (rounds x --sweeps-per-round) and tomotopy's iterations")
    parser.add_argument("--sweeps-per-round", type=int, default=1,
                        help="centralized: lda.local-sweeps of our run, which then has rounds / this many rounds")
    parser.add_argument("--threads", type=int, default=1,
                        help="with --parties: NUMBA_NUM_THREADS of our run (the evaluation's fold-in splits the "
                        "documents over them; training is one thread); tomotopy keeps one worker")
    parser.add_argument("--engine", choices=("flower", "inprocess"), default="flower",
                        help="with --parties: where our run's SuperNodes run (simulate --engine)")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--parties", type=int, default=0, help="federated run of this many parties (0: centralized)")
    parser.add_argument("--corpus-cache", default="", help="FLOWER_TOPICS_CACHE_DIR of our run (default: fresh)")
    parser.add_argument("--federated-eval", action="store_true",
                        help="with --parties: keep the default federated evaluation (off otherwise)")
    parser.add_argument("--quality", action="store_true",
                        help="with --parties: score both models (flower-topics evaluate, fold-in alpha 0.01 and 0.1)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="centralized: alternate ours, ours without evaluation and tomotopy this many times "
                             "(best and median reported)")
    parser.add_argument("--out", default="runs/bench-run-cost")
    args = parser.parse_args()
    if args.sweeps_per_round < 1 or args.rounds % args.sweeps_per_round:
        parser.error("--rounds must be a multiple of --sweeps-per-round")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cli = str(Path(sys.executable).with_name("flower-topics"))
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        tomotopy_cmd = [sys.executable, str(HERE / "tomotopy_lda.py"), "--dataset", args.dataset, "--topics",
                        str(args.topics), "--iterations", str(args.rounds), "--out", f"{tmp}/tomotopy"]
        if args.parties:
            cache = {"FLOWER_TOPICS_CACHE_DIR": args.corpus_cache or f"{tmp}/corpus-cache",
                     "NUMBA_NUM_THREADS": str(args.threads)}
            evaluation = [] if args.federated_eval else ["--set", "federated-eval=false"]
            ours = timed([cli, "simulate", "--method", "lda", "--dataset", args.dataset, "--clients",
                          str(args.parties), "--topics", str(args.topics), "--rounds", str(args.rounds),
                          "--engine", args.engine, "--out", f"{tmp}/federated", *evaluation], cache)
            tomotopy = timed(tomotopy_cmd)
            rows = [json.loads(line) for line in Path(f"{tmp}/federated/metrics.jsonl").read_text().splitlines()]
            per_round = np.diff([float(r["wall_time"]) for r in rows])  # rounds 2.. (round 1 holds the start-up)
            result = {"dataset": args.dataset, "parties": args.parties, "rounds": args.rounds, "topics": args.topics,
                      "engine": args.engine, "federated_eval": args.federated_eval, "threads": args.threads,
                      "evaluations": sum(1 for r in rows if "perplexity" in r),
                      "ours_seconds": round(ours.seconds, 1), "ours_peak_mib": round(ours.peak / mib),
                      "tomotopy_seconds": round(tomotopy.seconds, 1), "tomotopy_peak_mib": round(tomotopy.peak / mib),
                      "ratio_seconds": round(ours.seconds / tomotopy.seconds, 2),
                      "ratio_peak": round(ours.peak / tomotopy.peak, 2),
                      "ours_peak_pss_mib": round(ours.pss / mib), "tomotopy_peak_pss_mib": round(tomotopy.pss / mib),
                      "ratio_peak_pss": round(ours.pss / tomotopy.pss, 2), "ours_rss_mib_at_peak": ours.roles,
                      "ours_first_round_end_seconds": round(float(rows[0]["wall_time"]), 1),
                      "ours_seconds_per_round_median": round(float(np.median(per_round)), 3) if per_round.size else None,
                      "ours_bytes_sent_per_round_median": int(np.median([r["bytes_sent"] for r in rows])),
                      "ours_bytes_received_per_round_median": int(np.median([r["bytes_received"] for r in rows]))}
            if args.federated_eval and per_round.size:  # an evaluation round's time over a plain round's median
                evaluated = np.array(["perplexity" in r for r in rows[1:]])
                extra = float((per_round[evaluated] - np.median(per_round[~evaluated])).sum())
                result.update(evaluation_seconds=round(extra, 1),
                              evaluation_share=round(extra / float(rows[-1]["wall_time"]), 3))
            if args.quality:
                for name, model in (("ours", f"{tmp}/federated/model.npz"), ("tomotopy", f"{tmp}/tomotopy/model.npz")):
                    for alpha in (0.01, 0.1):
                        scored = subprocess.run([cli, "evaluate", "--model", model, "--corpus", args.dataset,
                                                 "--eval-alpha", str(alpha)], capture_output=True, text=True,
                                                env={**os.environ, **cache}, check=True)
                        metrics = json.loads(scored.stdout.strip().splitlines()[-1])
                        result[f"{name}_perplexity_alpha_{alpha}"] = round(float(metrics["perplexity"]), 1)
                        result[f"{name}_npmi"] = round(float(metrics["npmi"]), 4)
        else:
            common = [cli, "simulate", "--method", "lda", "--dataset", args.dataset, "--clients", "1", "--topics",
                      str(args.topics), "--rounds", str(args.rounds // args.sweeps_per_round), "--mode", "centralized",
                      "--set", f"lda.local-sweeps={args.sweeps_per_round}"]
            runs: dict[str, list[Timing]] = {"ours": [], "ours_without_evaluation": [], "tomotopy": []}
            for repeat in range(args.repeats):  # alternating, so that the machine's load hits all three alike
                runs["ours"].append(timed([*common, "--out", f"{tmp}/eval-{repeat}"]))
                runs["ours_without_evaluation"].append(
                    timed([*common, "--out", f"{tmp}/no-eval-{repeat}", "--set", "federated-eval=false"]))
                runs["tomotopy"].append(timed(tomotopy_cmd))
            evals = sum(1 for line in Path(f"{tmp}/eval-0/metrics.jsonl").read_text().splitlines()
                        if "perplexity" in json.loads(line))
            best = {name: min(t.seconds for t in timings) for name, timings in runs.items()}
            median = {name: float(np.median([t.seconds for t in timings])) for name, timings in runs.items()}
            cpu = {name: min(t.cpu for t in timings) for name, timings in runs.items()}
            result = {"dataset": args.dataset, "sweeps": args.rounds, "sweeps_per_round": args.sweeps_per_round,
                      "topics": args.topics, "repeats": args.repeats,
                      **{f"{name}_seconds_best": round(v, 1) for name, v in best.items()},
                      **{f"{name}_seconds_median": round(v, 1) for name, v in median.items()},
                      **{f"{name}_cpu_seconds_best": round(v, 1) for name, v in cpu.items()},
                      "ratio_ours_to_tomotopy_best": round(best["ours"] / best["tomotopy"], 2),
                      "ratio_ours_to_tomotopy_median": round(median["ours"] / median["tomotopy"], 2),
                      "ratio_ours_to_tomotopy_cpu": round(cpu["ours"] / cpu["tomotopy"], 2),
                      "evaluations": evals,
                      "evaluation_share": round(max(best["ours"] - best["ours_without_evaluation"], 0.0) / best["ours"], 3),
                      "ours_peak_mib": round(max(t.peak for t in runs["ours"]) / mib),
                      "tomotopy_peak_mib": round(max(t.peak for t in runs["tomotopy"]) / mib)}
    (out / "run_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
