"""Run one method three ways on the same partitions, to compare them.

- ``federated``: Flower's simulation engine, one SuperNode per partition.
- ``centralized``: all partitions pooled, trained without Flower.
- ``local``: every partition trained alone (non-collaborative), one model each.

Every mode writes the run-output contract (model.npz, topics.txt, metrics.jsonl,
plots) and is scored by the same :func:`flower_topics.scoring.score`; a results
table (``results.csv`` and ``results.md``) summarizes the final models.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any, Mapping

from flower_topics.config import parse_run_config
from flower_topics.data.corpus import Corpus
from flower_topics.data.prepare import RunData, all_partitions, load_run_data
from flower_topics.errors import UserInputError
from flower_topics.model_file import TopicModel, load_model
from flower_topics.models.lda import CollapsedGibbs, topic_word_distribution
from flower_topics.outputs import RunOutputs, read_metrics
from flower_topics.scoring import is_eval_round, score

MODES = ("federated", "centralized", "local")
TABLE_COLUMNS = (
    "mode", "model", "documents", "tokens", "perplexity", "npmi", "umass", "diversity",
    "tss_normalized", "nmi", "purity", "macro_f1", "wall_time",
)

logger = logging.getLogger("flower_topics")


def simulate(
    run_config: Mapping[str, Any], *, mode: str, num_clients: int, out_dir: str | Path
) -> list[dict[str, Any]]:
    """Train a method federated, centralized or per client, and tabulate the results.

    Parameters
    ----------
    run_config : Mapping
        Run-config keys (as in ``pyproject.toml``); ``output-dir`` is replaced by
        ``out_dir``.
    mode : {"federated", "centralized", "local"}
        How to train (see the module docstring).
    num_clients : int
        Number of partitions (SuperNodes); the same partitions in every mode.
    out_dir : str or Path
        Output directory; ``local`` writes one subfolder per client.

    Returns
    -------
    list of dict
        One results row per trained model (columns :data:`TABLE_COLUMNS`).
    """
    if mode not in MODES:
        raise UserInputError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if num_clients < 1:
        raise UserInputError("--clients must be >= 1")
    out_dir = Path(out_dir).expanduser().resolve()
    config = parse_run_config({**run_config, "output-dir": str(out_dir)})
    if mode != "federated" and config["method"] != "lda":
        raise UserInputError(
            f"--mode {mode} trains plain LDA without Flower; method '{config['method']}' runs only with "
            "--mode federated (compare it with --method lda in the other modes)"
        )
    data = load_run_data(config)
    partitions = all_partitions(config, num_clients)  # validates the partitioning before any work
    if mode == "federated":
        rows = [_federated(config, num_clients, out_dir)]
    elif mode == "centralized":
        train = data.train
        rows = [_pooled(config, data, train, out_dir, mode, "centralized")]
    else:
        rows = [
            _pooled(config, data, part, out_dir / f"client-{i}", mode, f"client-{i}")
            for i, part in enumerate(partitions)
        ]
    write_results_table(out_dir, rows)
    return rows


def _federated(config: dict[str, Any], num_clients: int, out_dir: Path) -> dict[str, Any]:
    from flwr.simulation import run_simulation

    from flower_topics.client_app import make_client_app
    from flower_topics.server_app import make_server_app

    RunOutputs(out_dir)  # fail early, before the simulation engine starts, if out_dir holds a run
    started = time.time()
    run_simulation(
        server_app=make_server_app(config),
        client_app=make_client_app(config),
        num_supernodes=num_clients,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"log_to_driver": True}},
    )
    model_path = out_dir / "model.npz"
    if not model_path.exists():
        raise RuntimeError(f"the federated run wrote no model to {model_path}: see the log above for the error")
    model = load_model(model_path)
    train = load_run_data(config).train
    return _row("federated", "federated", train, out_dir, time.time() - started, model)


def _pooled(
    config: Mapping[str, Any], data: RunData, corpus: Corpus, out_dir: Path, mode: str, name: str
) -> dict[str, Any]:
    """Train on ``corpus`` alone, recording each round like the ServerApp does.

    One round = ``local-sweeps`` Gibbs sweeps, so that rounds are comparable with
    the federated run.
    """
    outputs = RunOutputs(out_dir)
    outputs.write_inputs(data)
    started = time.time()
    k, beta = int(config["num-topics"]), float(config["beta"])
    sampler = CollapsedGibbs(corpus, k, float(config["alpha"]), beta, seed=int(config["seed"]))
    counts = sampler.topic_word_counts()
    num_rounds = int(config["num-rounds"])
    for server_round in range(1, num_rounds + 1):
        sampler.sweep(counts, n_sweeps=int(config["local-sweeps"]))
        row: dict[str, Any] = {"round": server_round, "wall_time": time.time() - started,
                               "bytes_sent": 0, "bytes_received": 0,
                               "privacy": {"epsilon": None, "delta": None, "accountant": "none (no privacy mechanism)"}}
        if is_eval_round(server_round, config):
            row.update(score(TopicModel(topic_word_distribution(counts, beta), corpus.vocabulary), data, config))
        outputs.append_metrics(row)
        logger.info("%s %s round %d/%d", mode, name, server_round, num_rounds)
    model = TopicModel(
        topic_word_distribution(counts, beta),
        corpus.vocabulary,
        metadata={"method": config["method"], "run_config": dict(config), "rounds": num_rounds,
                  "privacy": {"epsilon": None, "delta": None, "accountant": "none (no privacy mechanism)"},
                  "wall_time": time.time() - started, "engine": mode, "documents": corpus.n_docs},
    )
    outputs.write_model(model)
    outputs.plot()
    return _row(mode, name, corpus, out_dir, time.time() - started, model)


def _row(mode: str, name: str, corpus: Corpus, out_dir: Path, wall: float, model: TopicModel) -> dict[str, Any]:
    last = read_metrics(out_dir / "metrics.jsonl")[-1]
    row: dict[str, Any] = {"mode": mode, "model": name, "documents": corpus.n_docs, "tokens": corpus.n_tokens}
    row.update({c: last.get(c) for c in TABLE_COLUMNS if c in last and c not in row})
    row["wall_time"] = round(wall, 2)
    return row


def write_results_table(out_dir: str | Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``results.md`` (one row per model)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = [c for c in TABLE_COLUMNS if any(row.get(c) is not None for row in rows)]
    csv_path, md_path = out_dir / "results.csv", out_dir / "results.md"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |" for row in rows]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv_path, md_path


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


__all__ = ["MODES", "TABLE_COLUMNS", "simulate", "write_results_table"]
