"""The ``flower-topics`` command and its seven subcommands (:data:`DESCRIPTION`).

Bad input ends with one line on stderr saying what is wrong and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from flower_topics.run.config import PARTITION_SCHEMES, parse_assignments
from flower_topics.errors import RunFailed, UserInputError
from flower_topics.methods import METHODS
from flower_topics.simulations.runner import ENGINES, MODES


#: What ``flower-topics --help`` says the command is (plain text: argparse prints it as it is).
DESCRIPTION = ("Federated topic modeling on Flower, and the tools around a run. Seven commands: simulate (train), "
               "evaluate (score a model), vocabulary (a public vocabulary file), infer (documents' topics), "
               "report (a run's HTML page), export (gensim, pyLDAvis), ledger (a party's privacy ledger).")


class _Given(argparse.Action):
    """Stores the value and notes that the option was given (``--resume`` keeps the checkpoint's value otherwise)."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flower-topics", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser(
        "simulate",
        help="train a method federated (Flower simulation), centralized or per client",
        description="Train a method federated (Flower simulation engine), centralized (the method with one party "
        "holding all training documents) or local (the method on each client alone) on the same partitions; "
        "writes the run outputs and results.csv/.md.",
    )
    sim.add_argument("--method", help=f"one of the registered methods: {', '.join(METHODS)} (required unless --resume)")
    sim.add_argument("--dataset", default=None,
                     help="a corpus path, 'embedded' (the default: real text shipped with the package) or 'synthetic'")
    sim.add_argument("--clients", type=int, required=True, help="number of clients (partitions)")
    sim.add_argument("--partition", choices=PARTITION_SCHEMES, default="label", action=_Given)
    sim.add_argument("--topics", type=int, help="number of topics K (required unless --resume)")
    sim.add_argument("--rounds", type=int,
                     help="number of rounds (required unless --resume, which continues to the checkpoint's total "
                          "or to this larger one)")
    sim.add_argument("--seed", type=int, default=0, action=_Given)
    sim.add_argument("--mode", choices=MODES, default="federated",
                     help="federated (default: Flower's simulation engine through flwr run), centralized or local")
    sim.add_argument("--engine", choices=ENGINES, default="flower",
                     help="federated mode: where the SuperNodes run: flower (Flower's simulation engine, the "
                          "default) or inprocess (every party's ClientApp in this process, one after another: "
                          "the same messages, no SuperLink or Ray, a fraction of the memory)")
    sim.add_argument("--out", help="output directory (must not hold a run yet; required unless --resume, which "
                     "continues in the resumed directory by default)")
    sim.add_argument("--resume", metavar="DIR",
                     help="continue the interrupted (or finished) run whose output directory is DIR from its last "
                          "complete round, with its run config; only --rounds, --out, --verbose and "
                          "--set eval-every may differ (federated and centralized modes)")
    sim.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                     help="any run-config key, e.g. --set alpha=0.1 --set fedlda.epsilon=5 --set lda.local-sweeps=10")
    sim.add_argument("--node-set", action="append", metavar="KEY=VALUE", default=[],
                     help="a node-config key every party gets, e.g. --node-set privacy-ledger=runs/ledger-{partition}."
                          "json --node-set lifetime-epsilon=8; {partition} becomes the party's partition id (a "
                          "party's own file: privacy-ledger, theta-out, prevalence-out and state-dir need it). The "
                          "flower engine then runs the parties as SuperNodes of a local deployment")
    sim.add_argument("--verbose", action="store_true",
                     help="also Flower's own log lines and every record (default: one line a round and a summary)")

    ev = sub.add_parser(
        "evaluate", help="score a topic-word model on a corpus; prints one JSON object",
        description="Score a model.npz (a run's, or any export with topic_word and vocabulary) on a corpus read as "
        "the parties read theirs: held-out perplexity by document completion, NPMI and UMass on the training "
        "documents, diversity; with --labels NMI, purity and macro-F1. Options a model's run config holds "
        "(reading options, seed, held-out fraction, evaluation settings) are taken from it; a model without "
        "one gets the defaults (seed 0, held-out fraction 0.1, fold-in alpha 0.01 and 100 iterations).")
    ev.add_argument("--model", required=True, help="model.npz: topic_word (K x V) and vocabulary, metadata optional")
    ev.add_argument("--corpus", required=True,
                    help="corpus path (OCTIS folder, .jsonl, .csv, .txt folder), or 'synthetic' to regenerate "
                    "the synthetic corpus of the model's run")
    ev.add_argument("--text-column", help="text column of a .jsonl/.csv corpus (default: the run's, else 'text')")
    ev.add_argument("--label-column", help="label column of a .jsonl/.csv corpus (default: the run's, else 'label')")
    ev.add_argument("--stopwords", choices=("english", "none"), help="stopword list for raw text (default: the run's)")
    ev.add_argument("--no-lowercase", action="store_true", help="do not lowercase raw text")
    ev.add_argument("--labels", action="store_true", help="also NMI, purity and macro-F1 of theta")
    ev.add_argument("--truth", help="truth.npz with the true topic_word and vocabulary (synthetic corpora)")
    ev.add_argument("--seed", type=int, default=None,
                    help="seed of the held-out split and of the document-completion halves (default: the run's)")
    ev.add_argument("--heldout-fraction", type=float, default=None,
                    help="held-out share of a corpus without its own split (default: the run's, else 0.1)")
    ev.add_argument("--eval-alpha", type=float, default=None,
                    help="Dirichlet alpha of the held-out fold-in (default: the run's eval-alpha, else 0.01; "
                         "0.1 is the literature's usual document-completion setting)")
    ev.add_argument("--min-coverage", type=float, default=0.5,
                    help="refuse a corpus of whose tokens the model's vocabulary covers less than this share")
    voc = sub.add_parser(
        "vocabulary", help="write a public vocabulary file (one word per line) from a corpus you may publish",
        description="Write the vocabulary of a corpus you may publish (a related public corpus, never the parties' "
        "private documents) as a file every party and the server can be given: vocabulary='PATH' in the run config. "
        "It costs no privacy and sends no candidates; dplda needs it (or the accounted 'private' agreement).")
    voc.add_argument("--corpus", required=True, help="a public corpus: OCTIS folder, .jsonl, .csv or .txt folder")
    voc.add_argument("--out", required=True, help="the vocabulary file to write (must not exist)")
    voc.add_argument("--max-words", type=int, default=5000, help="keep the words in most documents (0 = all)")
    voc.add_argument("--min-df", type=float, default=2.0, help="drop words in fewer documents")
    voc.add_argument("--max-df", type=float, default=0.5, help="drop words in more documents (fraction or count)")
    voc.add_argument("--text-column", default="text", help="text column of a .jsonl/.csv corpus")
    voc.add_argument("--stopwords", choices=("english", "none"), default="english")
    from flower_topics.cli.model_commands import add_commands

    add_commands(sub)  # infer, report, export
    from flower_topics.cli.ledger_command import add_command

    add_command(sub)  # ledger
    return parser


def _simulate(args: argparse.Namespace) -> int:
    from flower_topics.federation import console
    from flower_topics.run.config import defaults
    from flower_topics.simulations import simulate

    overrides = parse_assignments(args.set)
    if args.verbose:
        overrides["verbose"] = "true"
    console.install(verbose=args.verbose or overrides.get("verbose", "").lower() == "true")
    clashes = sorted(set(overrides) & {"method", "dataset", "partition", "num-topics", "num-rounds", "seed",
                                       "resume"})
    if clashes:
        raise UserInputError(f"--set {', '.join(clashes)} duplicates a dedicated option; use that option instead")
    given = getattr(args, "given", set())
    dedicated = {"method": args.method, "dataset": args.dataset,
                 "partition": args.partition if "partition" in given or not args.resume else None,
                 "num-topics": args.topics, "num-rounds": args.rounds,
                 "seed": args.seed if "seed" in given or not args.resume else None}
    if args.resume:
        run_config, out = _resume_config(args, overrides, dedicated)
    else:
        missing = [flag for flag, value in (("--method", args.method), ("--topics", args.topics),
                                            ("--rounds", args.rounds), ("--out", args.out)) if value is None]
        if missing:
            raise UserInputError(f"simulate needs {', '.join(missing)} (or --resume DIR to continue a run)")
        run_config = {**overrides, **{k: defaults()[k] if v is None else v for k, v in dedicated.items()}}
        out = args.out
    rows = simulate(run_config, mode=args.mode, num_clients=args.clients, out_dir=out, engine=args.engine,
                    node_config=parse_assignments(args.node_set))
    print((Path(out) / "results.md").read_text(encoding="utf-8"), end="")
    return 0 if rows else 1


def _resume_config(args: argparse.Namespace, overrides: dict[str, str], dedicated: dict[str, object]
                   ) -> tuple[dict[str, object], str]:
    """The run config of ``simulate --resume DIR``: the checkpoint's, with what the command line gives laid over
    it (the ServerApp refuses any change a resume may not make), and the output directory (DIR by default)."""
    from flower_topics.run.checkpoint import load_checkpoint

    if args.mode == "local":
        raise UserInputError("--resume continues one run: use it with --mode federated or centralized")
    saved = load_checkpoint(args.resume).config
    out = args.out or args.resume
    run_config = {k: v for k, v in saved.items() if k not in ("output-dir", "resume")}
    run_config.update(overrides)
    run_config.update({k: v for k, v in dedicated.items() if v is not None})
    run_config["resume"] = str(Path(args.resume).expanduser().resolve())
    from flower_topics.run.config import parse_run_config
    from flower_topics.federation.server_app import resume_checkpoint

    resume_checkpoint(parse_run_config({**run_config, "output-dir": str(out)}))  # a refusal: one line, nothing started
    return run_config, out


#: Run-config keys of a model's metadata that ``evaluate`` reuses (how its run read and scored data).
EVALUATION_KEYS = ("text-column", "label-column", "lowercase", "stopwords", "min-doc-length", "seed",
                   "heldout-fraction", "eval-alpha", "eval-iterations")


def _evaluate(args: argparse.Namespace) -> int:
    from flower_topics.run.config import parse_run_config
    from flower_topics.data import load_truth
    from flower_topics.data.node_data import simulated_share
    from flower_topics.evaluation import evaluate_model
    from flower_topics.topic_model.model_file import load_model
    from flower_topics.federation.server_app import synthetic_truth

    model = load_model(args.model)
    trained = model.metadata.get("run_config", {})
    known = {k: v for k, v in trained.items() if k in EVALUATION_KEYS or k.startswith("synthetic-")}
    flags = {"text-column": args.text_column, "label-column": args.label_column, "stopwords": args.stopwords,
             "seed": args.seed, "heldout-fraction": args.heldout_fraction, "eval-alpha": args.eval_alpha,
             "lowercase": False if args.no_lowercase else None}
    config = parse_run_config({**known, **{k: v for k, v in flags.items() if v is not None}, "dataset": args.corpus,
                               "partition": "iid"})
    documents = simulated_share(config, 0, 1)  # every document, read and split as the parties read theirs
    in_vocabulary = np.isin(np.asarray(documents.corpus.vocabulary, dtype=object),
                            np.asarray(model.vocabulary, dtype=object))
    covered, total = int(in_vocabulary[documents.corpus.tokens].sum()), documents.corpus.n_tokens
    if total == 0 or covered / total < args.min_coverage:
        raise UserInputError(
            f"the model's vocabulary covers {covered / max(total, 1):.1%} of the corpus' tokens ({covered} of {total}); "
            "is this the corpus it was trained on, read with the same options (--text-column, --stopwords, "
            f"--no-lowercase)? --min-coverage below {args.min_coverage} scores it anyway"
        )
    corpus = documents.on_vocabulary(model.vocabulary, int(config["min-doc-length"]))
    if args.labels and corpus.labels is None:
        raise UserInputError(f"--labels given but corpus {args.corpus!r} has no labels")
    truth = load_truth(args.truth) if args.truth else synthetic_truth(config)
    metrics = evaluate_model(model, corpus, truth=truth, use_labels=args.labels, seed=int(config["seed"]),
                             alpha=float(config["eval-alpha"]), n_iter=int(config["eval-iterations"]))
    metrics["coverage"] = covered / total
    print(json.dumps(metrics))
    return 0


def _vocabulary(args: argparse.Namespace) -> int:
    from flower_topics.run.config import parse_run_config
    from flower_topics.data.prepare import load_run_data

    out = Path(args.out)
    if out.exists():
        raise UserInputError(f"{out} exists; choose a new file")
    config = parse_run_config({"dataset": args.corpus, "max-vocab": args.max_words, "min-df": args.min_df,
                               "max-df": args.max_df, "text-column": args.text_column, "stopwords": args.stopwords})
    corpus = load_run_data(config).corpus
    words = corpus.vocabulary
    if 0 < args.max_words < len(words):  # a curated vocabulary (OCTIS) is read whole: keep the words in most documents
        doc_freq = np.asarray((corpus.doc_term_matrix() > 0).sum(axis=0)).ravel()
        words = tuple(words[i] for i in sorted(np.argsort(-doc_freq, kind="stable")[:args.max_words]))
    from flower_topics.topic_model.document_topics import _write_atomic

    try:  # a temporary file renamed into place: an interrupted write never leaves half a vocabulary
        _write_atomic(out, "\n".join(words) + "\n")
    except OSError as exc:
        raise UserInputError(f"cannot write {out} ({exc.strerror}); check the path and its permissions") from None
    print(f"wrote {len(words)} words to {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flower-topics`` command."""
    args = _parser().parse_args(argv)
    if getattr(args, "verbose", False):
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command in ("infer", "report", "export"):
            from flower_topics.cli.model_commands import run

            return run(args)
        if args.command == "vocabulary":
            return _vocabulary(args)
        if args.command == "ledger":
            from flower_topics.cli.ledger_command import run as ledger

            return ledger(args)
        return _simulate(args) if args.command == "simulate" else _evaluate(args)
    except UserInputError as exc:
        print(f"flower-topics: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        if str(exc):  # else the command that ran it has said why
            print(f"flower-topics: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flower-topics: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
