"""gFedNTM section 4.2 on BBC News: does the federated model cover each party's topics better than the others' local models?

    python benchmarks/ntm_coverage.py --seeds 0 1 2 --steps 300 --centralized --out runs/ntm-coverage

Runs no longer reproduce bit for bit: each node's secret-seed is mixed with a fresh per-run nonce.

The gFedNTM paper (Calvo-Bartolomé and Arenas-García, section 4.2, eq. 7, Fig. 4) gives each
of 5 parties the documents of one field, trains a non-collaborative model at every party
and a federated one, and measures how well a model covers the topics of party ``l`` by the
Average Minimum Word Mover's Distance from the topics of ``l``'s own (local) model to the
evaluated model's topics. Here, with BBC News (``$FLOWER_TOPICS_DATASETS/BBC_News``, OCTIS
split) and ``partition="label"`` (party ``p`` holds the training documents of the ``p``-th
label in sorted order: business, entertainment, politics, sport, tech), every model goes
through the package's real path (``run_server`` on an
:class:`~flower_topics.simulations.inprocess.InProcessGrid` of the package's ClientApp:
vocabulary agreement, ``train.ntm`` messages, Sync-Opt on the server), method ``ntm``,
ProdLDA, ``norm="layer"``, Adam lr 2e-3, no DP, one torch thread, for every seed of
``--seeds``:

- ``local p`` (non-collaborative): party ``p`` alone (its share of the 5-way ``label``
  partition on a one-node grid), ``K = --topics`` (10), batch 64, ``--steps`` steps;
- ``federated K``: the 5 parties, ``sync="minibatch"`` (Sync-Opt: one batch-64 gradient per
  party per round, one server Adam step), ``--steps`` rounds, for every ``K`` of
  ``--federated-topics`` (10 and 25, as the paper's two federated models);
- ``centralized`` (only with ``--centralized``): one party with every training document,
  ``K = --topics``, batch 320, ``--steps`` steps.

Every party's model sees its documents for the same number of epochs in the local and the
federated runs (``--steps`` batches of 64). Every model gets its own run-config seed
(``100 x seed + 0..4`` for the local models, ``+ 10, 11`` for the federated ones, ``+ 20``
centralized), which seeds its initial weights ``W^(0)``: models started from the same
``W^(0)`` keep similar topics after training (a 3-step smoke run had the federated model
far closer to every party's model than the other parties' models, from the shared
initialization alone), which would bias the distances. With BBC's own OCTIS split and one
label per party, the seed changes nothing else a model is trained on.

The distance (what is scored)
-----------------------------
A topic's description ``TD_k`` is its ``--top-n`` (10) most probable words (the model's
``topic_word``). Every word is embedded on its own by the offline all-MiniLM-L6-v2
(:func:`flower_topics.models.word_similarity.embed_vocabulary`, ``HF_HUB_OFFLINE=1``; nothing
is downloaded) and unit-normalized. The distance of two descriptions is their Word Mover's
Distance (Kusner et al. 2015) with each description a uniform distribution over its
words and the Euclidean distance of the unit word vectors as the ground cost. With
uniform weights over the same number ``n`` of words, the optimal transport plan is a
permutation (Birkhoff), so the WMD is computed exactly as
``WMD(A, B) = min over one-to-one matchings s of (1/n) sum_i ||u_{a_i} - u_{b_s(i)}||``
(``scipy.optimize.linear_sum_assignment``); it is 0 for equal descriptions and at most 2.

Coverage of party ``p``'s topics by a model ``M`` (eq. 7, averaged rather than summed over
the reference topics so that models with different ``K`` compare):

    AMWMD(p, M) = (1 / K_p) sum_{k = 1..K_p} min_{k'} WMD(TD_k^(local p), TD_k'^(M)),

with ``TD^(local p)`` the topics of party ``p``'s own local model (as in the paper). Lower
means ``M`` has, for each of ``p``'s topics, a closer topic. ``AMWMD(p, local p) = 0``. For
each party the table gives ``AMWMD(p, federated K)`` for each ``K``, the mean over the four
other parties ``q`` of ``AMWMD(p, local q)`` and the smallest of them (the best other
party's model), and, with two or more seeds, ``AMWMD(p, local p trained with another
seed)``: how far a model trained on ``p``'s own documents lands from ``p``'s reference
topics (a noise floor). Numbers are means over seeds (and over the other seeds for the
noise floor).

Writes ``results.jsonl`` (one row per seed, party and evaluated model, and the top words of
every model) and prints a Markdown table. Runtime on this machine (one torch thread,
``--steps 300``, 3 seeds, ``--centralized``): 234 s (about 80 s per seed: 28 s for the five
local models, 18 s federated K=10, 20 s federated K=25, 11 s centralized; the word
embeddings a few seconds). The footer's per-model seconds are sums over the seeds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from benchmark_data import DATASETS
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.node_data import simulated_share
from flower_topics.models.word_similarity import embed_vocabulary
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

DATASET = str(DATASETS / "BBC_News")
PARTIES = 5
BATCH = 64


def train(config: dict, nodes: list[dict], out: Path, top_n: int) -> list[list[str]]:
    """One ``run_server`` on an in-process grid of the package's ClientApp; the model's topic descriptions."""
    if out.exists():
        shutil.rmtree(out)
    config = {**config, "output-dir": str(out)}
    model = run_server(InProcessGrid(make_client_app(config), nodes, config), config)
    return model.top_words(top_n)


def wmd(a: list[str], b: list[str], vectors: dict[str, np.ndarray]) -> float:
    """Exact WMD of two equal-length uniform word lists: the cheapest one-to-one matching, mean Euclidean cost."""
    if len(a) != len(b):
        raise ValueError("topic descriptions must have the same number of words")
    ua = np.stack([vectors[w] for w in a])
    ub = np.stack([vectors[w] for w in b])
    cost = np.sqrt(np.maximum(((ua[:, None, :] - ub[None, :, :]) ** 2).sum(axis=2), 0.0))
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def amwmd(reference: list[list[str]], evaluated: list[list[str]], vectors: dict[str, np.ndarray]) -> float:
    """Mean over the reference topics of the smallest WMD to a topic of the evaluated model (eq. 7, averaged)."""
    return float(np.mean([min(wmd(ref, ev, vectors) for ev in evaluated) for ref in reference]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (= rounds) of every model")
    parser.add_argument("--topics", type=int, default=10, help="K of the local (reference) models")
    parser.add_argument("--federated-topics", type=int, nargs="+", default=[10, 25])
    parser.add_argument("--centralized", action="store_true", help="also a centralized model with K = --topics")
    parser.add_argument("--top-n", type=int, default=10, help="words of a topic description")
    parser.add_argument("--out", type=Path, default=Path("runs/ntm-coverage"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    for name in ("flwr", "flower_topics"):
        logging.getLogger(name).setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    results.unlink(missing_ok=True)
    started = time.time()

    base = {"dataset": DATASET, "method": "ntm", "num-rounds": args.steps, "eval-every": args.steps,
            "federated-eval": False, "partition": "label", "ntm.model": "prodlda", "ntm.dp": False,
            "ntm.norm": "layer", "ntm.batch-size": BATCH}
    labels = []
    for p in range(PARTIES):
        share = simulated_share(parse_run_config({**base, "seed": args.seeds[0]}), p, PARTIES).corpus
        labels.append("+".join(sorted(set(share.select_split("train", "val").labels))))

    topics: dict[tuple[int, str], list[list[str]]] = {}  # (seed, model name) -> descriptions
    timing: dict[str, float] = {}
    for seed in args.seeds:
        folder = args.out / "runs" / f"seed{seed}"
        for p in range(PARTIES):
            t = time.time()
            nodes = [{"partition-id": p, "num-partitions": PARTIES, "secret-seed": 1000 * seed + p + 1}]
            topics[seed, f"local {p}"] = train({**base, "seed": 100 * seed + p, "num-topics": args.topics}, nodes,
                                               folder / f"local-{p}", args.top_n)
            timing[f"local {p}"] = timing.get(f"local {p}", 0.0) + time.time() - t
        for i, k in enumerate(args.federated_topics):
            t = time.time()
            nodes = [{"partition-id": p, "num-partitions": PARTIES, "secret-seed": 1000 * seed + p + 1}
                     for p in range(PARTIES)]
            topics[seed, f"federated {k}"] = train({**base, "seed": 100 * seed + 10 + i, "num-topics": k}, nodes,
                                                   folder / f"federated-{k}", args.top_n)
            timing[f"federated {k}"] = timing.get(f"federated {k}", 0.0) + time.time() - t
        if args.centralized:
            t = time.time()
            pooled = {**base, "seed": 100 * seed + 20, "num-topics": args.topics, "partition": "iid", "partition-sizes": "",
                      "label-groups": "", "ntm.batch-size": PARTIES * BATCH}
            topics[seed, "centralized"] = train(pooled, [{"partition-id": 0, "num-partitions": 1,
                                                          "secret-seed": 1000 * seed + 1}], folder / "centralized",
                                           args.top_n)
            timing["centralized"] = timing.get("centralized", 0.0) + time.time() - t
        print(f"seed {seed} trained, {time.time() - started:.0f} s", flush=True)
    train_s = time.time() - started

    words = sorted({w for descriptions in topics.values() for topic in descriptions for w in topic})
    embeddings = embed_vocabulary(words, cache_dir=args.out / "cache")
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    vectors = dict(zip(words, unit.astype(np.float64)))

    with results.open("a") as fh:
        for (seed, name), descriptions in topics.items():
            fh.write(json.dumps({"kind": "topics", "seed": seed, "model": name, "top_words": descriptions}) + "\n")
    global_models = [f"federated {k}" for k in args.federated_topics] + (["centralized"] if args.centralized else [])
    rows = []
    for seed in args.seeds:
        for p in range(PARTIES):
            reference = topics[seed, f"local {p}"]
            scored = {m: amwmd(reference, topics[seed, m], vectors) for m in global_models}
            for q in range(PARTIES):
                if q != p:
                    scored[f"local {q}"] = amwmd(reference, topics[seed, f"local {q}"], vectors)
            others = [scored[f"local {q}"] for q in range(PARTIES) if q != p]
            floor = [amwmd(reference, topics[s, f"local {p}"], vectors) for s in args.seeds if s != seed]
            row = {"kind": "coverage", "seed": seed, "party": p, "label": labels[p], "steps": args.steps,
                   "topics": args.topics, "amwmd": scored, "others_mean": float(np.mean(others)),
                   "others_min": float(np.min(others)), "same_party_other_seed": float(np.mean(floor)) if floor
                   else None}
            rows.append(row)
            with results.open("a") as fh:
                fh.write(json.dumps(row) + "\n")

    head = ["party", "label"] + [f"{m} -> p" for m in global_models] + \
        ["others' local -> p (mean)", "best other local -> p"]
    if len(args.seeds) > 1:
        head.append("local p, other seed -> p")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def mean(values):
        return f"{float(np.mean(values)):.3f}"

    for p in list(range(PARTIES)) + ["mean"]:
        mine = [r for r in rows if p == "mean" or r["party"] == p]
        cells = [str(p), labels[p] if p != "mean" else "all"]
        cells += [mean([r["amwmd"][m] for r in mine]) for m in global_models]
        cells += [mean([r["others_mean"] for r in mine]), mean([r["others_min"] for r in mine])]
        if len(args.seeds) > 1:
            cells.append(mean([r["same_party_other_seed"] for r in mine]))
        lines.append("| " + " | ".join(cells) + " |")
    total = time.time() - started
    lines.append("")
    lines.append(f"AMWMD (lower = p's topics better covered); seeds {args.seeds}, steps {args.steps}, local K "
                 f"{args.topics}, top {args.top_n} words; train_s {train_s:.0f}, total_s {total:.0f}; "
                 "wall s per model over seeds: " + ", ".join(f"{k} {v:.0f}" for k, v in timing.items()))
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
