"""Vocabulary agreement: words kept, bytes, seconds, and what the private mode costs in quality.

    python benchmarks/agreement_cost.py --out runs/agreement

For each corpus (BBC_News and debian_descriptions, 5 nodes split by label, in-process
Flower grid, the package's ClientApp): the ``union`` agreement and the ``private`` one (DP
set union per party) at a few (epsilon, Delta_0); words kept, bytes each way, seconds.
Then federated LDA (K=20, ``--rounds`` rounds of 5 sweeps) on each vocabulary, scored by
federated evaluation: held-out perplexity (over each run's own vocabulary, so only
comparable with that caveat), NPMI, and the share of held-out tokens the vocabulary covers.
Writes ``agreement.csv`` and prints a Markdown table.

    python benchmarks/agreement_cost.py --floors 1,2,3,5 --out runs/agreement-floors

The ``union`` agreement alone (no training) on BBC_News and debian_large, 5 nodes split by
label, at each party floor ``min-party-df`` (node config: a word leaves a party only if it
is in at least that many of the party's own documents): words agreed (run config defaults,
``min-df`` 2 summed over parties, ``max-df`` 0.5), words sent by all parties, bytes to the
server. Writes ``floors.csv`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from benchmark_data import DATASETS
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import make_client_app
from flower_topics.errors import UserInputError
from flower_topics.run.outputs import read_metrics
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

CORPORA = {"BBC_News": str(DATASETS / "BBC_News"),
           "debian": str(DATASETS / "debian_descriptions/corpus.jsonl")}
PRIVATE = [(1.0, 20), (4.0, 20), (4.0, 5), (8.0, 5)]
FLOOR_CORPORA = {"BBC_News": str(DATASETS / "BBC_News"), "debian_large": str(DATASETS / "debian_large/corpus.jsonl")}


def floors(values: list[int], nodes: int, out: Path) -> None:
    """The union agreement at each party floor (see the module docstring)."""
    rows = []
    for name, path in FLOOR_CORPORA.items():
        config = {"dataset": path, "partition": "label", "num-topics": 20, "num-rounds": 1}
        for floor in values:
            parties = [{"partition-id": i, "num-partitions": nodes, "min-party-df": floor} for i in range(nodes)]
            sent: list[int] = []
            app = make_client_app(config)

            def client(msg, context, app=app, sent=sent):
                reply = app(msg, context)
                if msg.metadata.message_type == "query.candidates" and not reply.has_error():
                    sent.append(reply.content["update"]["doc-freq"].numpy().size)
                return reply

            agreement = agree_vocabulary(InProcessGrid(client, parties, config), config)
            rows.append({"corpus": name, "min_party_df": floor, "words_agreed": len(agreement.vocabulary),
                         "words_sent": sum(sent), "bytes_to_server": agreement.bytes_received,
                         "seconds": round(agreement.seconds, 2)})
            print(rows[-1], flush=True)
    write_table(out / "floors.csv", rows, list(rows[0]))



def write_table(path: Path, rows: list[dict], fields: list[str]) -> None:
    """Write ``rows`` to a CSV file and print them as a Markdown table."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print("| " + " | ".join(fields) + " |\n|" + "---|" * len(fields))
    for row in rows:
        print("| " + " | ".join(str(row.get(f, "")) for f in fields) + " |")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/agreement")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--floors", default="", help="comma-separated min-party-df values: the union agreement "
                        "alone at each (BBC_News, debian_large), no training")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.floors:
        floors([int(v) for v in args.floors.split(",")], args.nodes, out)
        return
    print("privacy randomness: OS entropy (no node secret set); numbers vary run to run for 'private'")
    rows = []
    for name, path in CORPORA.items():
        settings = [("union", {})] + [(f"private eps={e:g} Delta0={d}", {"vocabulary": "private",
                                       "vocabulary-epsilon": e, "vocabulary-max-words": d}) for e, d in PRIVATE]
        for label, extra in settings:
            config = {"dataset": path, "partition": "label", "num-topics": 20, "num-rounds": args.rounds,
                      "lda.local-sweeps": 5, "eval-every": args.rounds, "eval-labels": False, **extra}
            run_dir = out / f"{name}-{label.replace(' ', '_').replace('=', '')}"
            row = {"corpus": name, "mode": label}
            try:
                model = run_server(InProcessGrid.partitions(make_client_app(config), args.nodes, config),
                                   {**config, "output-dir": str(run_dir)})
            except UserInputError as exc:  # the private agreement released no word
                rows.append({**row, "words": 0, "note": str(exc)[:60]})
                print(rows[-1], flush=True)
                continue
            agreement = model.metadata["vocabulary_agreement"]
            last = read_metrics(run_dir / "metrics.jsonl")[-1]
            row.update(words=agreement["words"], seconds=agreement["seconds"],
                       bytes_to_server=agreement["bytes_received"], bytes_to_nodes=agreement["bytes_sent"],
                       perplexity=round(last["perplexity"], 1), npmi=round(last["npmi"], 3),
                       heldout_tokens=last["n_eval_tokens"], eval_bytes=last["eval_bytes_received"])
            rows.append(row)
            print(row, flush=True)
    fields = ["corpus", "mode", "words", "seconds", "bytes_to_server", "bytes_to_nodes", "perplexity", "npmi",
              "heldout_tokens", "eval_bytes", "note"]
    write_table(out / "agreement.csv", rows, fields)


if __name__ == "__main__":
    main()
