"""Run one method three ways on the same partitions, to compare them.

- ``federated``: one SuperNode per partition, on Flower's simulation engine (``engine="flower"``,
  the default) or in this process (``engine="inprocess"``, below).
- ``centralized``: the method itself with one party holding all training documents.
- ``local``: the method on each partition alone (non-collaborative), one model each.

The centralized and local modes, and the federated mode with ``engine="inprocess"``, run the
ServerApp's :func:`~flower_topics.federation.server_app.run_server` and the package's ClientApp in this
process (:class:`~flower_topics.simulations.inprocess.InProcessGrid`): the same messages,
strategy and ClientApp as a federation, for every registered method, so that each paper's
single-party baseline is one command, and a federation fits in one process (no SuperLink,
no Ray: the parties answer one after another, in a fraction of the memory). Every mode writes the run-output contract (model.npz, topics.txt, metrics.jsonl,
plots) and is scored by the same ``benchmarks/scoring.py``; a results
table (``results.csv`` and ``results.md``) summarizes the final models.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any, Mapping

from flower_topics.run.config import parse_run_config, parse_run_options
from flower_topics.data.corpus import Corpus
from flower_topics.data.node_data import load_node_documents
from flower_topics.federation.preflight import check_public_inputs
from flower_topics.privacy.party_policy import POLICY_OPTIONS
from flower_topics.errors import RunFailed, UserInputError
from flower_topics.methods import BUILT_IN, METHODS
from flower_topics.topic_model.model_file import TopicModel, load_model
from flower_topics.run.outputs import check_output_dir, read_metrics
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.simulations.node_configs import check_party_files, node_config_text, party_node_configs

MODES = ("federated", "centralized", "local")
#: Where ``simulate`` keeps Flower's log of a federated run that failed (in the output directory).
RUN_LOG = "flower-run.log"
#: Where the federated mode's SuperNodes run: Flower's simulation engine, or this process.
ENGINES = ("flower", "inprocess")
#: (Ray 2.55.1, which flwr 1.41 pins and the simulation engine runs on, binds its own gRPC servers on all
#: interfaces whatever node address it is given: see docs/real-hosts.md.)
TABLE_COLUMNS = (
    "mode", "model", "documents", "tokens", "perplexity", "npmi", "umass", "diversity",
    "tss_normalized", "nmi", "purity", "macro_f1", "epsilon", "delta", "privacy_unit", "wall_time",
)

logger = logging.getLogger("flower_topics")


def simulate(
    run_config: Mapping[str, Any], *, mode: str, num_clients: int, out_dir: str | Path, engine: str = "flower",
    node_config: Mapping[str, Any] | None = None,
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
    engine : {"flower", "inprocess"}
        Federated mode: Flower's simulation engine through ``flwr run`` (default), or every
        SuperNode's ClientApp in this process (see the module docstring). The other modes
        always run in this process.
    node_config : Mapping, optional
        Node-config keys every party gets (``--node-set``; ``{partition}`` in a value becomes the party's
        partition id: :func:`~flower_topics.simulations.node_configs.party_node_configs`). Flower's simulation
        engine gives a party only its partition: with these, the ``flower`` engine runs the parties as
        SuperNodes of a local deployment SuperLink instead (one process each, as on real hosts). Each party's
        ``secure-tolerance`` is the run's ``secure-aggregation-tolerance`` unless set here (a secure run with a
        tolerance other than the node option's default also runs the parties as SuperNodes, to tell them).

    Returns
    -------
    list of dict
        One results row per trained model (columns :data:`TABLE_COLUMNS`).

    Raises
    ------
    UserInputError
        Before anything is started: a bad option, an output directory that already holds a
        run (unless it is the resumed one), or a corpus or partition that cannot be made.
    RunFailed
        When a federated run on Flower's engine did not complete.
    """
    if mode not in MODES:
        raise UserInputError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    if engine not in ENGINES:
        raise UserInputError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    if engine != "flower" and mode != "federated":
        raise UserInputError("--engine chooses where a federated run's SuperNodes run; the centralized and local "
                             "modes always run in this process")
    if num_clients < 1:
        raise UserInputError("--clients must be >= 1")
    method = str(run_config.get("method", "lda"))
    if method in METHODS and method not in BUILT_IN and mode == "federated" and engine == "flower":
        raise UserInputError(f"method {method!r} is registered in this process only (register_method), and Flower's "
                             "engine runs the parties in processes of their own: use engine='inprocess'")
    out_dir = Path(out_dir).expanduser().resolve()
    options = parse_run_options({**run_config, "output-dir": str(out_dir)})
    # before anything is read or started: an output directory that holds a run is refused (as the ServerApp would)
    for directory in [out_dir / f"client-{i}" for i in range(num_clients)] if mode == "local" else [out_dir]:
        check_output_dir(directory, str(options["resume"]) or None)
    nodes = party_node_configs(dict(node_config or {}), num_clients, options)
    check_party_files(nodes)
    # validates first (each party's training size only, so that this process does not hold the corpus during the
    # run), then what the ServerApp would refuse only after the vocabulary agreement
    documents = [load_node_documents(node, options) for node in nodes]
    shares = [_training_size(party.corpus) for party in documents]
    check_public_inputs(options, sorted(set().union(*(party.corpus.vocabulary for party in documents))))
    del documents
    config = parse_run_config({**run_config, "output-dir": str(out_dir)})  # last: calibrates the noise (dplda)
    if mode == "federated" and engine == "flower":
        told = node_config or (bool(config["secure-aggregation"])
                               and nodes[0]["secure-tolerance"] != POLICY_OPTIONS["secure-tolerance"].default)
        rows = [_federated(config, num_clients, out_dir, shares, nodes if told else None)]
        write_results_table(out_dir, rows)
        return rows
    if mode == "federated":
        rows = [_in_process(config, nodes, shares, out_dir, mode, "federated")]
    elif mode == "centralized":
        pooled = {**config, "partition": "iid", "partition-sizes": "", "label-groups": ""}
        (node,) = party_node_configs(dict(node_config or {}), 1, config)
        rows = [_in_process(pooled, [node], [_training_size(load_node_documents(node, pooled).corpus)], out_dir,
                            mode, "centralized")]
    else:
        rows = [_in_process(config, [node], [share], out_dir / f"client-{i}", mode, f"client-{i}")
                for i, (node, share) in enumerate(zip(nodes, shares))]
    write_results_table(out_dir, rows)
    return rows


def write_app(app_dir: Path, run_config: Mapping[str, Any]) -> Path:
    """A Flower App folder whose components are the installed package's ServerApp and ClientApp.

    ``flwr run`` builds its FAB from this folder, so ``simulate`` works from an installed
    package as well as from a checkout; the run config travels as a TOML file beside it.

    Returns
    -------
    Path
        The run-config TOML file to pass as ``flwr run --run-config``.
    """
    import tomli_w

    from flower_topics.run.config import pyproject_tables

    app_dir.mkdir(parents=True, exist_ok=True)
    project = {
        "build-system": {"requires": ["setuptools>=69"], "build-backend": "setuptools.build_meta"},
        "project": {"name": "flower-topics-simulate", "version": "0.1.0", "license": "Apache-2.0",
                    "description": "flower-topics simulate: the package's apps on Flower's simulation engine"},
        "tool": {"flwr": {"app": {"publisher": "flower-topics",
                                  "components": {"serverapp": "flower_topics.federation.server_app:app",
                                                 "clientapp": "flower_topics.federation.client_app:app"},
                                  "config": pyproject_tables()}}},
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(project), encoding="utf-8")
    run_config_path = app_dir / "run-config.toml"
    registered_here = {name for name in METHODS if name not in BUILT_IN}  # their keys exist in this process only
    shared = {key: value for key, value in run_config.items() if key.partition(".")[0] not in registered_here}
    run_config_path.write_text(tomli_w.dumps(shared), encoding="utf-8")
    return run_config_path


def _federated(config: dict[str, Any], num_clients: int, out_dir: Path, shares: list[tuple[int, int]],
               nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The federation through ``flwr run`` on a private simulation SuperLink (Flower's supported path).

    Before Flower starts, :func:`simulate` has checked the output directory and made the shares (``shares``: their
    training documents and tokens; reading the corpus into the corpus cache, :mod:`~flower_topics.data.corpus_cache`,
    which the parties then memory-map): a corpus the parties could not read is one line there, not one error per
    party after the engine started; the launcher then checks the run config's keys only. With ``nodes`` (each
    party's node config) the parties are SuperNodes of a local deployment SuperLink, each with its node config
    (Flower's simulation engine gives a party none but its partition). A run that fails keeps Flower's log of it in
    ``out_dir/flower-run.log``.

    Raises
    ------
    UserInputError
        For a corpus or partition that cannot be made.
    RunFailed
        When the run did not complete (the launcher has said why, and where its log is).
    """
    import tempfile

    from flower_topics.simulations.local_superlink import with_superlink

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="flower-topics-app-") as tmp:
        app_dir = Path(tmp) / "app"
        run_config = write_app(app_dir, config)
        code = with_superlink(["flwr", "run", ".", "--stream", "--run-config", str(run_config)],
                              num_supernodes=num_clients, app_dir=app_dir, verbose=bool(config.get("verbose")),
                              flwr_home=Path(tmp) / "flwr-home", run_log=out_dir / RUN_LOG, data_checked=True,
                              node_configs=None if nodes is None else [node_config_text(node) for node in nodes])
    model_path = out_dir / "model.npz"
    if code != 0:
        raise RunFailed("")  # the launcher has said why (the run's own error line and its status), once
    if not model_path.exists():
        raise RunFailed(f"the federated run wrote no model to {out_dir}")
    model = load_model(model_path)
    return _row("federated", "federated", shares, out_dir, time.time() - started, model)


def _in_process(config: Mapping[str, Any], node_configs: list[dict[str, Any]], sizes: list[tuple[int, int]],
                out_dir: Path, mode: str, name: str) -> dict[str, Any]:
    """The method on in-process nodes (one per node config; their training documents and tokens: ``sizes``),
    written to ``out_dir``."""
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server

    run_config = {**config, "output-dir": str(out_dir)}
    started = time.time()
    model = run_server(InProcessGrid(make_client_app(run_config), node_configs, run_config), run_config)
    logger.info("%s %s: %d documents, %d rounds", mode, name, sum(size[0] for size in sizes),
                int(config["num-rounds"]))
    return _row(mode, name, sizes, out_dir, time.time() - started, model)


def _training_size(share: Corpus) -> tuple[int, int]:
    """The number of training (``train`` and ``val``) documents and tokens of a share."""
    training = share.select_split("train", "val")
    return training.n_docs, training.n_tokens


def _row(mode: str, name: str, shares: list[tuple[int, int]], out_dir: Path, wall: float, model: TopicModel
         ) -> dict[str, Any]:
    """The results row of one model: its training documents and tokens (before the vocabulary), last metrics."""
    last = read_metrics(out_dir / "metrics.jsonl")[-1]
    row: dict[str, Any] = {"mode": mode, "model": name, "documents": sum(docs for docs, _ in shares),
                           "tokens": sum(tokens for _, tokens in shares)}
    row.update({c: last.get(c) for c in TABLE_COLUMNS if c in last and c not in row})
    privacy = last.get("privacy") or {}
    row.update(epsilon=privacy.get("epsilon"), delta=privacy.get("delta"), privacy_unit=privacy.get("unit"))
    # the run's own time, as its console summary and report say it (from its first round); else the caller's
    recorded = model.metadata.get("wall_time")
    row["wall_time"] = round(float(recorded) if isinstance(recorded, (int, float)) else wall, 2)
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
