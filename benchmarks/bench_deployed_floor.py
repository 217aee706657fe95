"""Seconds per round on Flower's deployment engine: Flower's own floor beside the methods' rounds.

    python benchmarks/bench_deployed_floor.py --out runs/deployed-floor --methods lda fedlda --rounds 4

One deployment as on real hosts, all on 127.0.0.1: a SuperLink with TLS and SuperNode
authentication, ``--parties`` registered SuperNodes (5), each reading its own file (the
``--dataset`` JSONL, dealt line by line; by default ``debian_large`` of the benchmark
datasets, else ``embedded``). On it, one run after the other:

- **floor**: ``benchmarks/floor_app``, a ClientApp that does nothing but answer, with the
  messages of the method's rounds (``send-bytes`` / ``reply-bytes``: a round of the first
  method, each way, per party), one exchange a round, as a round of ``lda``;
- each of ``--methods`` (flower-topics' own ServerApp and ClientApp), ``--rounds`` rounds,
  the ``union`` vocabulary agreement first, no federated evaluation; with ``--eval-every N``
  (N > 0) each method runs twice, scored every N rounds: with ``eval-with-train=false``
  (an ``evaluate`` message to every party after each scored round) and with the default
  (a scored round other than the last scored by the next round's training messages).

Every SuperNode runs with ``FLOWER_TOPICS_TIMINGS`` set (:mod:`flower_topics.federation.message_timing`):
each ClientApp process writes how long it ran from its start to its reply (wall and CPU),
how long until its handler ran, and the handler's stages (data, compute, state).

Figures, medians over rounds 2 to ``--rounds``: **wall** (the round's seconds, from the
server's ``metrics.jsonl``); **slowest party** (the longest ClientApp process of the round's
training exchange, start to reply, wall) and its **CPU**; **critical path** = wall less, for each
exchange of the round (one; two under ``--secure-aggregation``: a secure-sum stage and the masked
reply), its slowest party's wall less that party's CPU: the round as separate hosts would see it,
where each party's process has its own core (the rest of the round, the server's work and the
messages' transfer, as measured here). The parties' own compute is the handler's ``compute``
stage. With ``--parties`` SuperNodes sharing the machine's cores, the wall time is the contended
one. **messages**: the ClientApp processes the run started (one a message a party received), from
the timing lines. ``--no-floor`` runs the methods only (long runs:
``--methods dplda --secure-aggregation --rounds 40 --vocabulary runs/lda-100/lda/vocabulary.txt``).
Writes ``results.md`` (and ``timings-<run>.jsonl``) into ``--out``. Every process binds
127.0.0.1 and is stopped by its PID.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmark_data import DATASETS

from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.federation.message_timing import TIMINGS_ENV
from flower_topics.simulations.local_superlink import submit, wait_for_run
from flower_topics.simulations.processes import stop
from tests.deployment import (
    make_certificates,
    make_node_keys,
    online_nodes,
    register_supernode,
    start_supernode,
    tls_superlink,
    write_tls_connection,
)

FLOOR_APP = Path(__file__).resolve().parent / "floor_app"


def party_files(source: Path, parties: int, folder: Path, limit: int) -> list[Path]:
    """``source`` (JSONL) dealt line by line into ``parties`` files (at most ``limit`` lines in all; 0 = every line)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"party-{i}.jsonl" for i in range(parties)]
    handles = [p.open("w", encoding="utf-8") for p in paths]
    try:
        with source.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if limit and n >= limit:
                    break
                handles[n % parties].write(line)
    finally:
        for handle in handles:
            handle.close()
    return paths


def app_copy(source: Path, target: Path) -> Path:
    """A copy of a Flower app folder with only what its FAB needs (``flwr run`` walks every file of the folder)."""
    target.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        if (source / name).exists():
            shutil.copy2(source / name, target / name)
    for package in [p for p in source.iterdir() if p.is_dir() and (p / "__init__.py").exists()]:
        shutil.copytree(package, target / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def config_items(config: dict) -> str:
    """A ``--run-config`` string (strings quoted)."""
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in config.items())


def take_timings(files: list[Path]) -> list[dict]:
    """Every timing line the SuperNodes' ClientApp processes wrote since the last call (the files are emptied)."""
    lines = []
    for node, path in enumerate(files):
        if path.exists():
            lines += [{**json.loads(line), "node": node} for line in path.read_text().splitlines() if line.strip()]
            path.write_text("")
    return sorted(lines, key=lambda row: row["time"])


def exchanges(timings: list[dict], parties: int) -> list[list[dict]]:
    """The timing lines grouped by exchange: in reply order, ``parties`` lines each (every party answers every
    message of a run here, and the server sends the next message only once it has every reply)."""
    groups = [timings[i:i + parties] for i in range(0, len(timings) - parties + 1, parties)]
    mixed = [i for i, group in enumerate(groups) if len({row["message"] for row in group}) > 1]
    if mixed or len(timings) % parties:
        raise ValueError(f"the timing lines do not split into exchanges of {parties} parties (exchange {mixed[:1]})")
    return groups


def round_figures(metrics: list[dict], timings: list[dict], message: str, parties: int) -> dict:
    """Medians over rounds 2.. of the round's wall time, its slowest party (wall, CPU), critical path and compute.

    A round's exchanges are those after the previous round's ``message`` exchange up to its own (with secure
    aggregation a round has the secure sum's stages besides it); the critical path is the round's wall time less,
    for each of them, its slowest party's wall time less that party's CPU time.
    """
    walls = [b["wall_time"] - a["wall_time"] for a, b in itertools.pairwise(metrics)]
    groups = exchanges(timings, parties)
    ends = [i for i, group in enumerate(groups) if group[0]["message"] == message]
    per_round = [groups[i] for i in ends][1:]
    excess = [sum(max(g, key=lambda row: row["since_start"])["since_start"]
                  - max(g, key=lambda row: row["since_start"])["cpu"] for g in groups[a + 1:b + 1])
              for a, b in itertools.pairwise(ends)]
    slowest = [max(rows, key=lambda row: row["since_start"]) for rows in per_round]
    n = min(len(walls), len(slowest))
    walls, slowest = walls[:n], slowest[:n]
    critical = [w - e for w, e in zip(walls, excess[:n])]
    med = statistics.median
    return {
        "rounds": n, "wall": med(walls), "critical": med(critical),
        "exchanges": med([b - a for a, b in itertools.pairwise(ends)]),
        "slowest": med([s["since_start"] for s in slowest]), "slowest_cpu": med([s["cpu"] for s in slowest]),
        "before_handler": med([s["before_handler"] for s in slowest]),
        "compute": med([max(r["stages"].get("compute", 0.0) for r in rows) for rows in per_round[:n]]),
        "data": med([max(r["stages"].get("data", 0.0) for r in rows) for rows in per_round[:n]]),
        "state": med([max(r["stages"].get("state", 0.0) for r in rows) for rows in per_round[:n]]),
    }


def one_run(app: Path, home: Path, config: dict, timeout: float) -> list[dict]:
    """Submit a run, wait for it, return its ``metrics.jsonl`` rows."""
    run_id = submit(app, home, [config_items(config)])
    status = wait_for_run(app, home, run_id, timeout)
    if status != "finished:completed":
        raise RuntimeError(f"run {run_id} ({config.get('method', 'floor')}): {status}")
    path = Path(config["output-dir"]) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--methods", nargs="+", default=["lda"])
    parser.add_argument("--dataset", default=str(DATASETS / "debian_large" / "corpus.jsonl"))
    parser.add_argument("--documents", type=int, default=0, help="documents of --dataset in all (0 = every one)")
    parser.add_argument("--num-topics", type=int, default=20)
    parser.add_argument("--corpus-cache", action="store_true", help="give each party a corpus-cache folder")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--eval-every", type=int, default=0,
                        help="score every N rounds, each method with and without eval-with-train (0 = no evaluation)")
    parser.add_argument("--secure-aggregation", action="store_true", help="the methods' runs with secure aggregation")
    parser.add_argument("--vocabulary", help="the agreed vocabulary fedlda and dplda use (default: the lda run's)")
    parser.add_argument("--no-floor", action="store_true", help="the methods' runs only (no floor run)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dataset = Path(args.dataset) if Path(args.dataset).exists() else Path(EMBEDDED_PATH)
    work = Path(tempfile.mkdtemp(prefix="deployed-floor-"))
    home, logs = work / "flwr-home", out / "logs"
    files = party_files(dataset, args.parties, work / "data", args.documents)
    timing_files = [out / f"timings-node-{i}.jsonl" for i in range(args.parties)]  # kept if a run fails
    apps = {"floor": app_copy(FLOOR_APP, work / "floor-app"), "topics": app_copy(ROOT, work / "topics-app")}
    certs = make_certificates(work / "certs")
    rows: dict[str, dict] = {}
    try:
        with ExitStack() as stack:
            port, link = stack.enter_context(tls_superlink(home, certs, log_path=logs / "superlink.log"))
            write_tls_connection(home, f"127.0.0.1:{port}", certs.ca)
            nodes = []
            for i, path in enumerate(files):
                keys = make_node_keys(work / "keys", f"party-{i}")
                register_supernode(home, keys.public, work, name=f"party-{i}")
                cache = f" corpus-cache='{work / f'cache-{i}'}'" if args.corpus_cache else ""
                os.environ[TIMINGS_ENV] = str(timing_files[i])  # inherited by its ClientApp processes
                node = start_supernode(home, port, f"dataset='{path}'{cache}", log_path=logs / f"node-{i}.log",
                                       certs=certs, keys=keys)
                stack.callback(stop, node)
                nodes.append(node)
            os.environ.pop(TIMINGS_ENV, None)
            deadline = time.monotonic() + 120
            while len(online_nodes(home, work)) < args.parties and time.monotonic() < deadline:
                time.sleep(1.0)
            base = {"num-rounds": args.rounds, "min-nodes": args.parties}
            sizes: tuple[int, int] | None = None
            evaluations = ([("", {"federated-eval": False})] if args.eval_every <= 0 else
                           [(", evaluate messages", {"eval-every": args.eval_every, "eval-with-train": False}),
                            (", evaluation with training", {"eval-every": args.eval_every})])
            lda_out = out / "lda"  # the first lda run's: fedlda and dplda use its vocabulary
            for method, (variant, evaluation) in itertools.product(args.methods, evaluations):
                name = f"{method}{variant}"
                config = {**base, "method": method, "num-topics": args.num_topics, **evaluation,
                          "dataset": "/nonexistent/the-server-reads-no-corpus", "seed": 0,
                          "output-dir": str(out / name.replace(", ", "-").replace(" ", "-")),
                          "secure-aggregation": args.secure_aggregation}
                if method in ("fedlda", "dplda"):
                    config["vocabulary"] = args.vocabulary or str(lda_out / "vocabulary.txt")
                if method == "dplda":
                    config.update({"dplda.init": "random"})
                started = time.time()
                metrics = one_run(apps["topics"], home, config, args.timeout)
                if method == "lda" and lda_out == out / "lda":
                    lda_out = Path(config["output-dir"])
                timings = take_timings(timing_files)
                (out / f"timings-{Path(config['output-dir']).name}.jsonl").write_text(
                    "".join(json.dumps(t) + "\n" for t in timings))
                rows[name] = {**round_figures(metrics, timings, method, args.parties),
                              "run": time.time() - started, "messages": len(timings)}
                if sizes is None:
                    last = metrics[-1]
                    sizes = (int(last["bytes_sent"]) // args.parties, int(last["bytes_received"]) // args.parties)
                print(name, json.dumps(rows[name]), flush=True)
            assert sizes is not None
            if not args.no_floor:
                started = time.time()
                config = {**base, "send-bytes": sizes[0], "reply-bytes": sizes[1], "output-dir": str(out / "floor")}
                metrics = one_run(apps["floor"], home, config, args.timeout)
                timings = take_timings(timing_files)
                (out / "timings-floor.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timings))
                rows["floor"] = {**round_figures(metrics, timings, "floor", args.parties),
                                 "run": time.time() - started, "messages": len(timings)}
                print("floor", json.dumps(rows["floor"]), flush=True)
            assert link.poll() is None and all(node.poll() is None for node in nodes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    floor = rows.get("floor")
    lines = [(f"{args.parties} SuperNodes (TLS, authenticated) on one machine of {os.cpu_count()} cores; "
             f"{dataset.name}, {f'{args.documents} documents' if args.documents else 'every document'} dealt among "
             "the parties; "
             f"{'secure aggregation; ' if args.secure_aggregation else ''}"
             f"messages {sizes[0] / 1e6:.2f} MB to each party, {sizes[1] / 1e6:.2f} MB back; "
             f"medians over rounds 2-{args.rounds}"),
             "", ("| run | s / round (wall) | critical path (s) | exchanges / round | slowest party: start to reply (s) | "
                  "its CPU (s) | its start to handler (s) | data (s) | compute (s) | state (s) | "
                  "1.3 x (floor + compute): wall, critical | messages | whole run (s) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        target = "" if name == "floor" or floor is None else (f"{1.3 * (floor['wall'] + r['compute']):.2f}, "
                                                               f"{1.3 * (floor['critical'] + r['compute']):.2f}")
        lines.append(f"| {name} | {r['wall']:.2f} | {r['critical']:.2f} | {r['exchanges']:g} | {r['slowest']:.2f} | "
                     f"{r['slowest_cpu']:.2f} | {r['before_handler']:.2f} | {r['data']:.2f} | {r['compute']:.2f} | "
                     f"{r['state']:.3f} | {target} | {r['messages']} | {r['run']:.0f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
