"""gFedNTM section 4.1 / Fig. 3 on the package's synthetic generator: local vs centralized vs federated.

    python benchmarks/ntm_synthetic.py --seeds 0 1 --steps 350 --out runs/ntm-synthetic

Runs no longer reproduce bit for bit: each node's secret-seed is mixed with a fresh per-run nonce.

The gFedNTM paper (Calvo-Bartolomé and Arenas-García, section 4.1) generates LDA corpora for
``L = 5`` nodes with ``K = 50`` true topics, ``K'`` of them shared by every node and
``(K - K') / L`` private to each, and compares ProdLDA trained per node (non-collaborative)
with ProdLDA trained on the pooled corpus (centralized; the paper says gFedNTM gives the
same results). Setting A varies ``K' in {5, 10, 15, 30, 40}`` at ``eta = 0.01``; setting B
varies ``eta in {0.01, 0.02, 0.03, 0.04, 0.08, 1}`` at ``K' = 10`` (the shared point
``K' = 10, eta = 0.01`` is trained once and reported in both). This runs both settings for
every seed of ``--seeds`` and three modes, all through the package's real path
(``run_server`` on an :class:`~flower_topics.simulations.inprocess.InProcessGrid` of the
package's ClientApp: vocabulary agreement, ``train.ntm`` messages, validation, Sync-Opt on
the server), method ``ntm``, ProdLDA, ``K = 50`` model topics, ``norm="layer"``, Adam lr 2e-3,
no DP, one torch thread:

- ``local`` (non-collaborative): each node alone (node ``p``'s share of the 5-way ``label``
  partition on a one-node grid), batch 64, ``--steps`` server steps: one model per node;
- ``centralized``: one node holding every training document (``partition="iid"``, one
  share), batch ``5 x 64 = 320``, ``--steps`` steps;
- ``federated``: 5 nodes, one generator node each (``partition="label"``),
  ``sync="minibatch"`` (the paper's Sync-Opt: every round one batch-64 gradient per node,
  their weighted average, one server Adam step), ``--steps`` rounds.

Every mode thus takes the same number of optimizer steps and the same number of passes
over each node's documents (``steps x 64 / (documents of a node)`` epochs).

The corpus of a (``K'``, ``eta``, seed) point is the run config's ``dataset="synthetic"``
(:func:`flower_topics.data.synthetic.make_synthetic_corpus` with the run's seed), so every
mode trains on exactly the documents the benchmark regenerates to score it. The package
holds out ``heldout-fraction`` (0.1) of the documents at random (``test`` split, never
trained on); those held-out documents are the paper's validation documents.

Scored (against the generator's truth)
--------------------------------------
- ``TSS`` (eq. 6, :func:`flower_topics.metrics.similarity.topic_similarity_score`): the sum
  over the 50 true topics of ``max_k' [1 - H^2(beta_k^true, beta_k'^model)]``, with the
  model's ``beta`` the decoder's word distribution of a one-topic document
  (``models.ntm.topic_word``); in ``[0, 50]``, larger is better. ``TSS prior`` is the
  paper's baseline: the TSS of an independent draw of 50 topics from the same
  ``Dirichlet(eta)`` prior (what an uninformed model gets).
- ``DSS`` (eqs. 4-5, :func:`flower_topics.metrics.document_similarity.document_similarity_score`):
  on all held-out documents of the network (``D`` about ``0.1 x 5 x docs-per-node``),
  ``(1/D) sum_i sum_{j != i} |w_ij^true - w_ij^model|`` with ``w_ij = sqrt(theta_i)^T
  sqrt(theta_j)``; ``theta^true`` are the generator's document-topic proportions
  (``SyntheticCorpus.doc_topic``), ``theta^model`` the trained encoder's ``softmax(mu)``
  (``models.ntm.infer_theta``, posterior mean). Smaller is better. The network is the one the run
  wrote (``NTM.load_network`` of its output directory: ``state.npz`` and ``model.npz``),
  checked against the written ``topic_word``.
- ``local`` is scored as the paper scores the non-collaborative scenario: each node's model
  against the whole truth (all 50 topics, all held-out documents of the network), then the
  mean over the 5 nodes. ``DSS own`` also reports, per model, the DSS on the held-out
  documents of a single node, averaged over nodes (a local model on its own node's
  documents; a global model on each node's documents in turn). ``DSS const`` is the DSS of a
  model that gives every document the same proportions (``w_ij = 1`` for every pair), the
  score of a collapsed encoder: a model at this value has learned nothing about documents.

Scaled down from the paper (its values in brackets) to run on one CPU core in about
25 minutes for 2 seeds: vocabulary ``V = 1000`` [5000]; 1000 documents per node [10 000
training + 1000 validation], of which about 10 % held out [1000 per node] and the rest
trained on; document lengths 150-250 tokens [same]; ``alpha = 50 / K = 1`` [same];
``--steps 350`` optimizer steps (about 25 epochs of batch 64 over a node's ~900 training
documents) with no early stopping [ProdLDA defaults: up to 100 epochs, early stopping on a
75:25 split]; 2 seeds [10 runs]. ProdLDA uses LayerNorm instead of the CTM library's
BatchNorm (the package's federated default, see ``flower_topics/models/ntm.py``).

Writes one row per (setting point, seed, mode) to ``results.jsonl`` (local rows also list
the per-node scores), and prints a Markdown table of the means over seeds (with the
standard deviation over seeds where there are several). Runtime on this machine (one torch
thread, the other core busy with another process, ``--steps 350``, 2 seeds): 1438 s (24 min;
about 70 s per point and seed: 30 s for the 5 local models, 15 s centralized, 23 s
federated). ``--report-only`` re-prints the table of an existing ``results.jsonl``
(``report.md``) without training.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

import flower_topics.federation.server_app as server_app
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.node_data import split_ratios
from flower_topics.data.prepare import synthetic_config
from flower_topics.data.splits import ensure_split
from flower_topics.data.synthetic import make_synthetic_corpus
from flower_topics.metrics.document_similarity import document_similarity_score
from flower_topics.metrics.similarity import align_topics, topic_similarity_score
from flower_topics.models.ntm import infer_theta, topic_word
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.ntm import NTM

NODES = 5
TRUE_TOPICS = 50
BATCH = 64
SETTING_A = [(kp, 0.01) for kp in (5, 10, 15, 30, 40)]
SETTING_B = [(10, eta) for eta in (0.01, 0.02, 0.03, 0.04, 0.08, 1.0)]
MODES = ("local", "centralized", "federated")

def base_config(args: argparse.Namespace, k_shared: int, eta: float, seed: int) -> dict:
    return {
        "dataset": "synthetic", "method": "ntm", "num-topics": TRUE_TOPICS, "num-rounds": args.steps,
        "seed": seed, "eval-every": args.steps, "federated-eval": False, "heldout-fraction": args.heldout,
        "ntm.model": "prodlda", "ntm.dp": False, "ntm.norm": "layer", "ntm.batch-size": BATCH,
        "synthetic-nodes": NODES, "synthetic-topics": TRUE_TOPICS, "synthetic-shared-topics": k_shared,
        "synthetic-vocab-size": args.vocab, "synthetic-docs-per-node": args.docs_per_node,
        "synthetic-doc-min-length": args.doc_length[0], "synthetic-doc-max-length": args.doc_length[1],
        "synthetic-eta": eta, "synthetic-alpha": 50.0 / TRUE_TOPICS,  # the paper: alpha = 50 / K = 1
    }


def train(config: dict, nodes: list[dict], out: Path):
    """One ``run_server`` on an in-process grid; returns the final network and the written model."""
    if out.exists():
        shutil.rmtree(out)
    config = {**config, "output-dir": str(out)}
    model = server_app.run_server(InProcessGrid(make_client_app(config), nodes, config), config)
    network = NTM.load_network(out)  # the final weights the run wrote (state.npz)
    if not np.allclose(topic_word(network), model.topic_word, atol=1e-6):
        raise RuntimeError("the loaded network is not the written model")
    return network, model


def scores(network, model, truth, bow, true_theta, doc_nodes) -> dict:
    vocabulary = truth.corpus.vocabulary
    if tuple(model.vocabulary) != tuple(vocabulary):
        raise RuntimeError("the agreed vocabulary is not the generator's (synthetic words are a curated list)")
    tss = topic_similarity_score(align_topics(truth.topic_word, vocabulary, model.vocabulary), model.topic_word)
    theta = infer_theta(network, bow)
    own = [document_similarity_score(true_theta[doc_nodes == p], theta[doc_nodes == p]) for p in range(NODES)]
    return {"tss": tss.score, "dss": document_similarity_score(true_theta, theta), "dss_own_nodes": own}


def heldout_truth(args: argparse.Namespace, k_shared: int, eta: float, seed: int):
    """The run config of a point, its generated corpus and the ids of its held-out (scored) documents."""
    config = parse_run_config(base_config(args, k_shared, eta, seed))
    truth = make_synthetic_corpus(synthetic_config(config), seed=seed)
    split = ensure_split(truth.corpus, seed=seed, ratios=split_ratios(float(config["heldout-fraction"])))
    return config, truth, np.flatnonzero(split.split == "test")


def run_point(args: argparse.Namespace, k_shared: int, eta: float, seed: int, modes) -> list[dict]:
    config, truth, test_ids = heldout_truth(args, k_shared, eta, seed)
    bow = sp.csr_matrix(truth.corpus.subset(test_ids).doc_term_matrix(), dtype=np.float32)
    true_theta = truth.doc_topic[test_ids]
    doc_nodes = test_ids // args.docs_per_node  # the generator writes node 0's documents first, then node 1's, ...
    prior_topics = np.random.default_rng([seed, 99]).dirichlet(np.full(args.vocab, eta), size=TRUE_TOPICS)
    tss_prior = topic_similarity_score(truth.topic_word, prior_topics).score
    folder = args.out / "runs" / f"kp{k_shared}-eta{eta:g}-seed{seed}"
    dss_constant = document_similarity_score(true_theta, np.ones((test_ids.size, 1)))  # every theta the same
    common = {"k_shared": k_shared, "eta": eta, "seed": seed, "steps": args.steps, "vocab": args.vocab,
              "docs_per_node": args.docs_per_node, "test_docs": int(test_ids.size), "tss_prior": tss_prior,
              "dss_constant": dss_constant}
    rows = []
    for mode in modes:
        started = time.time()
        if mode == "federated":
            nodes = [{"partition-id": i, "num-partitions": NODES, "secret-seed": 1000 * seed + i + 1}
                     for i in range(NODES)]
            per = [scores(*train({**config, "partition": "label"}, nodes, folder / mode), truth, bow, true_theta,
                          doc_nodes)]
        elif mode == "centralized":
            pooled = {**config, "partition": "iid", "partition-sizes": "", "label-groups": "",
                      "ntm.batch-size": NODES * BATCH}
            nodes = [{"partition-id": 0, "num-partitions": 1, "secret-seed": 1000 * seed + 1}]
            per = [scores(*train(pooled, nodes, folder / mode), truth, bow, true_theta, doc_nodes)]
        else:
            per = []
            for i in range(NODES):
                nodes = [{"partition-id": i, "num-partitions": NODES, "secret-seed": 1000 * seed + i + 1}]
                result = scores(*train({**config, "partition": "label"}, nodes, folder / f"local-{i}"), truth, bow,
                                true_theta, doc_nodes)
                result["dss_own_nodes"] = [result["dss_own_nodes"][i]]  # a local model on its own node's documents
                per.append(result)
        row = {**common, "mode": mode, "models": len(per),
               "tss": float(np.mean([r["tss"] for r in per])),
               "dss": float(np.mean([r["dss"] for r in per])),
               "dss_own": float(np.mean([d for r in per for d in r["dss_own_nodes"]])),
               "wall_s": round(time.time() - started, 1)}
        if len(per) > 1:
            row.update(tss_nodes=[r["tss"] for r in per], dss_nodes=[r["dss"] for r in per])
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(args.out / "results.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
    return rows


def _cell(values: list[float], digits: int) -> str:
    if not values:
        return ""
    mean = float(np.mean(values))
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {float(np.std(values, ddof=1)):.{digits}f}"


def table(rows: list[dict], points, modes) -> list[str]:
    head = ["setting", "K'", "eta"] + [f"TSS {m}" for m in modes] + ["TSS prior"] + [f"DSS {m}" for m in modes] + \
        ["DSS const"] + [f"DSS own {m}" for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for setting, kp, eta in points:
        def pick(mode, key):
            return [r[key] for r in rows if r["k_shared"] == kp and r["eta"] == eta and r["mode"] == mode]
        prior, constant = pick(modes[0], "tss_prior"), pick(modes[0], "dss_constant")
        cells = [setting, str(kp), f"{eta:g}"] + [_cell(pick(m, "tss"), 2) for m in modes] + [_cell(prior, 2)] + \
            [_cell(pick(m, "dss"), 1) for m in modes] + [_cell(constant, 1)] + \
            [_cell(pick(m, "dss_own"), 2) for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=350, help="optimizer steps (= rounds) of every model")
    parser.add_argument("--settings", nargs="+", default=["A", "B"], choices=["A", "B"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--docs-per-node", type=int, default=1000)
    parser.add_argument("--doc-length", type=int, nargs=2, default=[150, 250])
    parser.add_argument("--heldout", type=float, default=0.1, help="heldout-fraction: the scored documents")
    parser.add_argument("--out", type=Path, default=Path("runs/ntm-synthetic"))
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: print the table of the existing --out/results.jsonl (run with the same "
                             "corpus options)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in ("flwr", "flower_topics"):
        logging.getLogger(name).setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    points: list[tuple[str, int, float]] = []
    for setting in args.settings:
        for kp, eta in (SETTING_A if setting == "A" else SETTING_B):
            if not any(p[1:] == (kp, eta) for p in points):
                points.append((setting, kp, eta))
    started = time.time()
    rows = []
    if args.report_only:
        rows = [json.loads(line) for line in open(args.out / "results.jsonl")]
        for row in rows:
            if "dss_constant" not in row:  # rows written before the column existed
                _, truth, test_ids = heldout_truth(args, row["k_shared"], row["eta"], row["seed"])
                row["dss_constant"] = document_similarity_score(truth.doc_topic[test_ids], np.ones((test_ids.size, 1)))
        args.seeds = sorted({r["seed"] for r in rows})
        args.steps = rows[0]["steps"]
    else:
        for seed in args.seeds:  # every point for one seed first: a cut-short run still covers the figure
            for _, kp, eta in points:
                rows += run_point(args, kp, eta, seed, args.modes)
    total = time.time() - started
    labelled = []
    for setting in args.settings:
        for kp, eta in (SETTING_A if setting == "A" else SETTING_B):
            labelled.append((setting, kp, eta))
    lines = table(rows, labelled, args.modes)
    lines.append("")
    lines.append(f"seeds {args.seeds}, steps {args.steps}, V {args.vocab}, {args.docs_per_node} documents per node, "
                 f"total_s {total:.0f}, training wall s (sum over rows) {sum(r['wall_s'] for r in rows):.0f}")
    (args.out / ("report.md" if args.report_only else "results.md")).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
