"""Load: many simulated parties for every method, and long runs without memory growth.

    # (a) 5, 100 and 1,000 simulated parties, every method, 3 rounds each
    python benchmarks/bench_load.py parties --parties 5 100 1000 --out runs/load
    # (b) long runs, 5 parties: lda for 2,000 rounds, ntm (Sync-Opt) for 5,000
    python benchmarks/bench_load.py long --method lda --rounds 2000 --out runs/load-long
    python benchmarks/bench_load.py long --method ntm --rounds 5000 --out runs/load-long

Every run is what a user types, on Flower's simulation engine:
``flower-topics-superlink --supernodes N flwr run . --stream --run-config "..."``, started
as a process of its own (``FLWR_HOME`` a fresh folder under /tmp, runtime dependency
installation off; everything binds 127.0.0.1), on the synthetic corpus
(``dataset='synthetic'``, one generated node per party, a few short documents each) with
tiny per-method settings (:data:`METHOD_SETTINGS`, printed with the results).

While a run goes, every 0.5 s the launcher's process tree is walked in ``/proc``
(:func:`flower_topics.simulations.processes.process_tree`) and two resident sizes are recorded: the
ServerApp's process (on the simulation engine Flower 1.41 runs the ServerApp in the
``flwr-simulation`` process, which also drives Ray; ``flwr-serverapp`` on the deployment
engine) and the sum of ``VmRSS`` over the whole tree (SuperLink, SuperExec, ServerApp,
Ray's daemons and ClientApp actors, the ``flwr`` CLI; pages shared between processes are
counted once per process, so the sum overstates the machine's use). The round reached
at each sample is the number of lines of the run's ``metrics.jsonl`` so far.

Reported per run: the final status (the launcher's exit status: 0 only when Flower's
final status is ``finished:completed``), seconds per round (differences of the
``wall_time`` of ``metrics.jsonl``, the first round from the end of the vocabulary
agreement), bytes sent and received per round (``metrics.jsonl``), the whole command's
seconds, and the peaks of both resident sizes. ``long`` also writes the samples
(``rss-<method>.csv``), a figure (RSS against the round) and the RSS at 10%, 50% and
100% of the run with the slope of a least-squares line over the second half (MB per
1,000 rounds). Results go to ``--out``: ``results.json`` and ``results.md`` (appended to
by later invocations with the same ``--out``).

Every process runs with ``OMP_NUM_THREADS=1`` (``--threads``): on this 2-core host, loaded,
torch's two intra-op threads made one ProdLDA step of a party 0.3 to 1.3 s instead of 0.01
to 0.08 s.

A run that goes past ``--timeout`` is stopped: every process of its tree, by PID
(SIGTERM, then SIGKILL), and reported as ``timeout``, with the round it reached.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flower_topics.simulations.processes import process_tree  # noqa: E402
from process_memory import resident_bytes  # noqa: E402

METHODS = ("lda", "fedlda", "pctd", "ftm", "ntm", "dplda")

#: The corpus every run uses: one synthetic node per party (``synthetic-nodes`` = parties).
CORPUS = {"dataset": "synthetic", "synthetic-docs-per-node": 10, "synthetic-vocab-size": 200,
          "synthetic-topics": 10, "synthetic-shared-topics": 10, "synthetic-doc-min-length": 20,
          "synthetic-doc-max-length": 40, "num-topics": 10, "federated-eval": False}

#: Per-method settings that keep a party's work tiny (on top of :data:`CORPUS`).
METHOD_SETTINGS: dict[str, dict[str, Any]] = {
    "lda": {},
    "fedlda": {},
    "pctd": {"pctd.consistency": 0.0},  # no embedding model: units from the party's own n-grams only
    "ftm": {"ftm.local-iterations": 10},
    "ntm": {"ntm.batch-size": 8, "ntm.dp": False},  # ProdLDA (hidden layers 100, 100: fixed), Sync-Opt (sync=minibatch)
    "dplda": {"dplda.init": "random"},  # + vocabulary=<the generator's words> (a public file)
}

MB = 1024.0 * 1024.0


def value(v: Any) -> str:
    """A run-config value as ``flwr run --run-config`` reads it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "'" + v + "'"
    return repr(v)


def synthetic_vocabulary(out: Path, config: dict[str, Any]) -> Path:
    """Write the synthetic generator's vocabulary (public: its words are ``w000`` ...) for ``dplda``."""
    from flower_topics.run.config import parse_run_config
    from flower_topics.data.prepare import synthetic_config
    from flower_topics.data.synthetic import make_synthetic_corpus

    import tomllib
    from flwr.common.config import flatten_dict

    defaults = flatten_dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    full = parse_run_config({**defaults, **config, "method": "lda", "synthetic-nodes": 1, "synthetic-docs-per-node": 1})
    words = make_synthetic_corpus(synthetic_config(full), seed=int(full["seed"])).corpus.vocabulary
    path = out / "synthetic-vocabulary.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def run_config(method: str, parties: int, rounds: int, output_dir: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """The run config of one load run."""
    config = {"method": method, **CORPUS, "synthetic-nodes": parties, "num-rounds": rounds,
              "round-timeout": 3000.0, **METHOD_SETTINGS[method], **extra, "output-dir": str(output_dir)}
    return config


def cmdline(pid: int) -> bytes:
    """The command line of ``pid`` (NUL-separated), or b"" when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def server_pids(pids: list[int]) -> list[int]:
    """The ServerApp processes among ``pids``: ``flwr-simulation`` (simulation engine) or ``flwr-serverapp``,
    not the Ray processes below them (their command lines name neither)."""
    return [pid for pid in pids if any(m in cmdline(pid) for m in (b"flwr-simulation", b"flwr-serverapp"))]


class Sampler(threading.Thread):
    """Every ``interval`` s: the round reached, the ServerApp's RSS and the process tree's RSS."""

    def __init__(self, root_pid: int, metrics: Path, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.metrics, self.interval = root_pid, metrics, interval
        self.samples: list[tuple[float, int, int, int]] = []  # (seconds, round, server bytes, tree bytes)
        self.stop_event = threading.Event()
        self.started = time.monotonic()
        self._offset, self._lines = 0, 0
        self.tree: list[int] = [root_pid]

    def rounds(self) -> int:
        """Lines of metrics.jsonl so far (read incrementally)."""
        try:
            with self.metrics.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return self._lines
        self._offset += len(chunk)
        self._lines += chunk.count(b"\n")
        return self._lines

    def run(self) -> None:
        while not self.stop_event.is_set():
            pids = process_tree(self.root_pid)
            self.tree = pids
            # the ServerApp process, not its Ray children (whose command lines do not name it)
            server = resident_bytes(server_pids(pids)[:1])
            self.samples.append((time.monotonic() - self.started, self.rounds(), server, resident_bytes(pids)))
            self.stop_event.wait(self.interval)


def kill_tree(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL, each of ``pids`` (children first)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in reversed(pids):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(5 if sig == signal.SIGTERM else 0)


def one_run(method: str, parties: int, rounds: int, out: Path, timeout: float,
            extra: dict[str, Any] | None = None, tag: str | None = None, threads: int = 1) -> dict[str, Any]:
    """One ``flower-topics-superlink ... flwr run .`` run, sampled; its figures."""
    tag = tag or f"{method}-{parties}p-{rounds}r"
    output_dir = out / "runs" / tag
    if output_dir.exists():
        raise SystemExit(f"{output_dir} exists: choose a new --out")
    config = run_config(method, parties, rounds, output_dir, extra or {})
    if method == "dplda":
        config["vocabulary"] = str(synthetic_vocabulary(out, config))
    items = " ".join(f"{k}={value(v)}" for k, v in config.items())
    command = [str(Path(sys.executable).with_name("flower-topics-superlink")), "--supernodes", str(parties),
               "--timeout", str(int(timeout)), "flwr", "run", ".", "--stream", "--run-config", items]
    shown = (f"OMP_NUM_THREADS={threads} " if threads else "") + (
             "flower-topics-superlink --supernodes %d flwr run . --stream --run-config %s"
             % (parties, '"' + items.replace(str(output_dir), f"$OUT/runs/{tag}") + '"'))
    home = Path(tempfile.mkdtemp(prefix=f"bench-load-{tag}-", dir="/tmp"))
    env = dict(os.environ, FLWR_HOME=str(home / "flwr-home"), FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    log_path = out / "logs" / f"{tag}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"[{time.strftime('%H:%M:%S')}] {tag}: {shown}", flush=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    sampler = Sampler(process.pid, output_dir / "metrics.jsonl")
    sampler.start()
    status = "finished:completed"
    try:
        code = process.wait(timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        code = None
        status = "timeout"
        kill_tree(process_tree(process.pid))
        process.wait(timeout=30)
    seconds = time.monotonic() - started
    sampler.stop_event.set()
    sampler.join(timeout=10)
    text = log_path.read_text(errors="replace")
    if code not in (0, None):
        failed = [line for line in text.splitlines() if "FAILED" in line or "error" in line.lower()]
        status = f"failed (exit {code}): " + (failed[-1].strip()[:300] if failed else "see " + str(log_path))
    rows = []
    if (output_dir / "metrics.jsonl").exists():
        rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    walls = [float(r["wall_time"]) for r in rows]
    per_round = np.diff([0.0] + walls) if walls else np.array([])
    agreement = rows[0].get("vocabulary_agreement", {}) if rows else {}
    samples = np.array(sampler.samples, dtype=float).reshape(-1, 4)
    result = {
        "method": method, "parties": parties, "rounds": rounds, "rounds_done": len(rows), "status": status,
        "command": shown, "settings": {k: v for k, v in config.items() if k != "output-dir"},
        "seconds_total": round(seconds, 1),
        "agreement_seconds": agreement.get("seconds"),
        "seconds_per_round_median": float(np.median(per_round)) if per_round.size else None,
        "seconds_per_round": [round(float(s), 3) for s in per_round],
        "bytes_sent_per_round": float(np.median([r["bytes_sent"] for r in rows])) if rows else None,
        "bytes_received_per_round": float(np.median([r["bytes_received"] for r in rows])) if rows else None,
        "replies_applied": [r.get("replies_applied") for r in rows],
        "server_rss_peak_mb": float(samples[:, 2].max() / MB) if len(samples) else None,
        "tree_rss_peak_mb": float(samples[:, 3].max() / MB) if len(samples) else None,
        "samples": len(samples), "omp_num_threads": threads or "unset",
        "log": str(log_path),
    }
    np.savetxt(out / f"rss-{tag}.csv", samples, delimiter=",", fmt=["%.2f", "%d", "%d", "%d"],
               header="seconds,round,server_rss_bytes,tree_rss_bytes", comments="")
    print(f"[{time.strftime('%H:%M:%S')}] {tag}: {status}; {len(rows)}/{rounds} rounds, "
          f"{result['seconds_per_round_median']} s/round, server peak {result['server_rss_peak_mb']} MB, "
          f"tree peak {result['tree_rss_peak_mb']} MB, {seconds:.0f} s", flush=True)
    return result


def training_samples(samples: np.ndarray) -> np.ndarray:
    """The samples taken while rounds ran: from round 1 to the first sample at the last round reached
    (after it the ServerApp writes its outputs and the processes exit, which is not growth over rounds),
    the ServerApp process alive."""
    done = samples[(samples[:, 1] >= 1) & (samples[:, 2] > 0)]  # a round reached, the ServerApp alive
    if not len(done):
        return done
    last = done[:, 1].max()
    return done[: int(np.argmax(done[:, 1] == last)) + 1]


def growth(samples: np.ndarray) -> dict[str, Any]:
    """RSS at 10%, 50% and 100% of the rounds reached, and the slope of a least-squares line over the
    second half (MB per 1,000 rounds), from the samples taken while rounds ran."""
    done = training_samples(samples)
    out: dict[str, Any] = {}
    last = int(done[:, 1].max()) if len(done) else 0
    for share in (0.1, 0.5, 1.0):
        target = max(1, int(round(share * last)))
        row = done[np.argmin(np.abs(done[:, 1] - target))]
        out[f"at_{int(share * 100)}pct"] = {"round": int(row[1]), "server_mb": row[2] / MB, "tree_mb": row[3] / MB}
    half = done[done[:, 1] >= last / 2]
    for col, name in ((2, "server"), (3, "tree")):
        slope = np.polyfit(half[:, 1], half[:, col] / MB, 1)[0] if len(half) > 2 else float("nan")
        out[f"{name}_slope_mb_per_1000_rounds"] = float(slope * 1000)
    out["rounds_reached"] = last
    return out


def plot(samples: np.ndarray, title: str, path: Path) -> None:
    """RSS of the ServerApp process and of the process tree against the round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = training_samples(samples)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, col, name in ((axes[0], 2, "ServerApp process (flwr-simulation)"), (axes[1], 3, "whole process tree")):
        ax.plot(done[:, 1], done[:, col] / MB, lw=1)
        ax.set_xlabel("round")
        ax.set_ylabel("RSS (MB)")
        ax.set_title(name, fontsize=10)
        ax.set_ylim(0, done[:, col].max() / MB * 1.1)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def settings_line(method: str) -> str:
    extra = " ".join(f"{k}={value(v)}" for k, v in METHOD_SETTINGS[method].items())
    return extra or "(defaults)"


def write_results(out: Path, results: list[dict[str, Any]]) -> None:
    """Append to ``results.json`` and rewrite ``results.md``."""
    path = out / "results.json"
    previous = json.loads(path.read_text()) if path.exists() else []
    everything = previous + results
    path.write_text(json.dumps(everything, indent=1) + "\n")
    lines = ["# Load benchmark (benchmarks/bench_load.py)", "",
             "Corpus (every run): " + " ".join(f"{k}={value(v)}" for k, v in CORPUS.items())
             + ", synthetic-nodes = parties"]
    if any(r.get("kind") not in ("long", "deployment") for r in everything):
        lines += ["", "| method | parties | rounds | status | s/round (median) | bytes sent/round | bytes received/round "
                  "| ServerApp peak RSS (MB) | tree peak RSS (MB) | whole command (s) | settings |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in everything:
        if r.get("kind") in ("long", "deployment"):
            continue
        spr = "-" if r["seconds_per_round_median"] is None else f"{r['seconds_per_round_median']:.2f}"
        sent = "-" if r["bytes_sent_per_round"] is None else f"{r['bytes_sent_per_round']:,.0f}"
        recv = "-" if r["bytes_received_per_round"] is None else f"{r['bytes_received_per_round']:,.0f}"
        lines.append(f"| {r['method']} | {r['parties']} | {r['rounds_done']}/{r['rounds']} | {r['status']} | {spr} | "
                     f"{sent} | {recv} | {r['server_rss_peak_mb']:.0f} | {r['tree_rss_peak_mb']:.0f} | "
                     f"{r['seconds_total']:.0f} | {settings_line(r['method'])} |")
    longs = [r for r in everything if r.get("kind") == "long"]
    if longs:
        lines += ["", "| method | parties | rounds | status | s/round (median) | ServerApp RSS MB at 10% / 50% / 100% "
                  "| tree RSS MB at 10% / 50% / 100% | slope, 2nd half (MB / 1,000 rounds) server, tree | figure |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in longs:
            g = r["growth"]
            at = [g[f"at_{p}pct"] for p in (10, 50, 100)]
            lines.append(
                f"| {r['method']} | {r['parties']} | {r['rounds_done']}/{r['rounds']} | {r['status']} | "
                f"{r['seconds_per_round_median']:.3f} | " + " / ".join(f"{a['server_mb']:.0f}" for a in at) + " | "
                + " / ".join(f"{a['tree_mb']:.0f}" for a in at) + f" | {g['server_slope_mb_per_1000_rounds']:+.1f}, "
                f"{g['tree_slope_mb_per_1000_rounds']:+.1f} | {r['figure']} |")
    deployed = [r for r in everything if r.get("kind") == "deployment"]
    if deployed:
        lines += ["", "| deployment engine: method | SuperNodes | rounds | status | s/round | peak RSS of each SuperNode's "
                  "tree (MB) | most flwr-clientapp processes at once | ServerApp (flwr-serverapp) peak RSS (MB) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in deployed:
            lines.append(f"| {r['method']} | {r['parties']} | {r['rounds_done']}/{r['rounds']} | {r['status']} | "
                         f"{r['seconds_per_round_median']:.2f} | {', '.join(str(v) for v in r['supernode_tree_peak_mb'])}"
                         f" | {r['flwr_clientapp_processes_at_once_max']} | {r['server_rss_peak_mb']:.0f} |")
    lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in everything]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def deployment(method: str, parties: int, rounds: int, out: Path, timeout: float) -> dict[str, Any]:
    """Peak RSS of each SuperNode's process tree and of the ServerApp on the deployment engine (127.0.0.1).

    One ``flower-superlink`` (deployment engine) and ``parties`` ``flower-supernode``
    processes, each with its synthetic share (``partition-id`` / ``num-partitions``); the
    run is submitted with ``flwr run``. Each SuperNode's tree holds its SuperExec and the
    ``flwr-clientapp`` process it starts for every message; the ``flwr-serverapp`` process
    is found under this process's tree.
    """
    from contextlib import ExitStack

    from flower_topics.simulations.local_superlink import submit, superlink, supernode, wait_for_run, write_connection

    home = Path(tempfile.mkdtemp(prefix="bench-load-deploy-", dir="/tmp"))
    tag = f"deploy-{method}-{parties}p-{rounds}r"
    output_dir = out / "runs" / tag
    config = run_config(method, parties, rounds, output_dir, {})
    if method == "dplda":
        config["vocabulary"] = str(synthetic_vocabulary(out, config))
    items = " ".join(f"{k}={value(v)}" for k, v in config.items())
    logs = out / "logs" / tag
    node_peaks: dict[int, int] = {}
    node_peak_clientapps = [0]
    server_peak = [0]
    done = threading.Event()
    pids: list[int] = []

    def sample() -> None:
        while not done.wait(0.5):
            for pid in list(pids):
                tree = process_tree(pid)
                node_peaks[pid] = max(node_peaks.get(pid, 0), resident_bytes(tree))
                apps = [q for q in tree if b"flwr-clientapp" in cmdline(q)]
                node_peak_clientapps[0] = max(node_peak_clientapps[0], len(apps))
            server = server_pids(process_tree(os.getpid()))
            server_peak[0] = max(server_peak[0], resident_bytes(server[:1]))

    print(f"[{time.strftime('%H:%M:%S')}] {tag}: deployment engine, {parties} SuperNode(s)", flush=True)
    started = time.monotonic()
    with ExitStack() as stack:
        port = stack.enter_context(superlink(home, simulation=False, log_path=logs / "superlink.log"))
        write_connection(home, f"127.0.0.1:{port}")
        for i in range(parties):
            pids.append(stack.enter_context(supernode(home, port, f"partition-id={i} num-partitions={parties}",
                                                      log_path=logs / f"node{i}.log")))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        run_id = submit(ROOT, home, [items])
        status = wait_for_run(ROOT, home, run_id, timeout)
        done.set()
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    per_round = np.diff([0.0] + [float(r["wall_time"]) for r in rows])
    result = {"kind": "deployment", "method": method, "parties": parties, "rounds": rounds, "rounds_done": len(rows),
              "status": status, "seconds_total": round(time.monotonic() - started, 1),
              "seconds_per_round_median": float(np.median(per_round)),
              "seconds_per_round": [round(float(v), 2) for v in per_round],
              "bytes_sent_per_round": [int(r.get("bytes_sent", 0)) for r in rows],
              "bytes_received_per_round": [int(r.get("bytes_received", 0)) for r in rows],
              "supernode_tree_peak_mb": [round(v / MB, 1) for v in node_peaks.values()],
              "flwr_clientapp_processes_at_once_max": node_peak_clientapps[0],
              "server_rss_peak_mb": server_peak[0] / MB,
              "command": f"python benchmarks/bench_load.py deployment --method {method} --parties {parties} "
                         f"--rounds {rounds} --out $OUT"}
    print(f"[{time.strftime('%H:%M:%S')}] {tag}: {status}; {json.dumps(result)}", flush=True)
    return result


def ftm_merge_cost(parties: list[int], out: Path, seed: int = 0) -> list[dict[str, Any]]:
    """Seconds and peak RSS of FTM's server merge (Algorithm 2, ``integrate_local_models``) in this process,
    and of the composition that follows it in ``FTM.aggregate`` (Algorithm 3, ``compose_local_models``).

    Each party's 10 local topics over 200 words are drawn from Dirichlet(0.05): like a tiny
    party's topics, they rarely reach the merge threshold (xi = 0.5 on the top 20 words), so the
    global model keeps about 10 topics a party, as the 100-party run did (963-976 of 1,000).
    """
    import resource

    from flower_topics.models.ftm_merge import compose_local_models, integrate_local_models

    rng = np.random.default_rng(seed)
    results = []
    for n in parties:
        models = [rng.dirichlet(np.full(200, 0.05), size=10) for _ in range(n)]
        started = time.perf_counter()
        merged = integrate_local_models(models, [300.0] * n, xi=0.5, top_l=20)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        compose_local_models(merged, models, xi=0.5, top_l=20)
        compose_seconds = time.perf_counter() - started
        result = {"kind": "ftm-merge", "parties": n, "global_topics": merged.n_topics, "seconds": round(seconds, 2),
                  "compose_seconds": round(compose_seconds, 2),
                  "process_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                  "command": f"python benchmarks/bench_load.py ftm-merge --parties {' '.join(map(str, parties))} "
                             "--out $OUT"}
        print(json.dumps(result), flush=True)
        results.append(result)
    (out / "ftm-merge.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_load.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("parties", help="every method at each number of parties")
    p.add_argument("--parties", type=int, nargs="+", default=[5, 100, 1000])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run before it is stopped")
    p.add_argument("--out", type=Path, required=True)
    q = sub.add_parser("long", help="one long run, RSS against the round, plotted")
    q.add_argument("--method", choices=METHODS, required=True)
    q.add_argument("--rounds", type=int, required=True)
    q.add_argument("--parties", type=int, default=5)
    q.add_argument("--timeout", type=float, default=1800.0)
    q.add_argument("--figure", type=Path, default=None, help="PNG (default <out>/load-<method>-long.png)")
    q.add_argument("--out", type=Path, required=True)
    d = sub.add_parser("deployment", help="peak RSS of each SuperNode's process tree, deployment engine")
    d.add_argument("--method", choices=METHODS, default="lda")
    d.add_argument("--parties", type=int, default=2)
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--timeout", type=float, default=900.0)
    d.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("ftm-merge", help="FTM's server merge alone, in this process, against the number of parties")
    f.add_argument("--parties", type=int, nargs="+", default=[100, 200])
    f.add_argument("--out", type=Path, required=True)
    for p_ in (p, q):
        p_.add_argument("--threads", type=int, default=1,
                        help="OMP_NUM_THREADS / MKL_NUM_THREADS of every process (torch's intra-op threads; 0 = leave "
                        "unset). On a small shared host, unset, each ClientApp's torch spins 2 threads per step")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    if args.mode == "parties":
        for parties in args.parties:
            for method in args.methods:
                results.append(one_run(method, parties, args.rounds, out, args.timeout, threads=args.threads))
                write_results(out, [results[-1]])
    elif args.mode == "ftm-merge":
        ftm_merge_cost(args.parties, out)
    elif args.mode == "deployment":
        write_results(out, [deployment(args.method, args.parties, args.rounds, out, args.timeout)])
    else:
        extra = {"eval-every": max(1, args.rounds // 10)}
        r = one_run(args.method, args.parties, args.rounds, out, args.timeout, extra,
                    tag=f"long-{args.method}-{args.parties}p-{args.rounds}r", threads=args.threads)
        samples = np.loadtxt(out / f"rss-long-{args.method}-{args.parties}p-{args.rounds}r.csv", delimiter=",",
                             skiprows=1, ndmin=2)
        figure = (args.figure or out / f"load-{args.method}-long.png").resolve()
        plot(samples, f"{args.method}, {args.parties} parties, {r['rounds_done']} rounds "
             f"(simulation engine): resident memory against the round", figure)
        r.update(kind="long", growth=growth(samples), figure=str(figure))
        print(json.dumps(r["growth"], indent=1))
        write_results(out, [r])
    return 0


if __name__ == "__main__":
    sys.exit(main())
