"""The ``flower-topics`` commands that use a trained model: ``infer``, ``report`` and ``export``."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from flower_topics.errors import UserInputError

#: What ``--corpus`` takes (the corpora training takes).
CORPUS_HELP = ("a corpus path (OCTIS folder, .jsonl, .csv or .txt folder), 'embedded' (the corpus shipped with the "
               "package) or 'synthetic' (the synthetic corpus of the model's run, regenerated from its run config)")


def _reading(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text-column", help="text field of a .jsonl/.csv corpus (default: the run's, else 'text')")
    parser.add_argument("--id-column", default="id",
                        help="id field of a .jsonl/.csv corpus (default 'id'; without it, the 0-based index)")
    parser.add_argument("--stopwords", choices=("english", "none"), help="stopword list (default: the run's)")
    parser.add_argument("--no-lowercase", action="store_true", help="do not lowercase raw text (default: the run's)")


def add_commands(sub: Any) -> None:
    """Add ``infer``, ``report`` and ``export`` to the ``flower-topics`` subparsers ``sub``."""
    infer = sub.add_parser(
        "infer", help="topic mixture of each document of a corpus (on the machine that holds it); writes a CSV",
        description="Fold in the topic mixture (theta) of every document of a corpus against a model, reading the "
        "documents with the run's own preprocessing (from the model's metadata). Writes one row per document: "
        "id, top_topic, top_share, n_words (tokens the model knows), n_oov, topic_0..topic_K-1. A document with "
        "no word of the model's vocabulary keeps its row, with n_words 0 and empty topic cells.")
    infer.add_argument("--model", required=True, help="model.npz of a run (or any file with topic_word, vocabulary)")
    infer.add_argument("--corpus", required=True, help=CORPUS_HELP)
    infer.add_argument("--out", required=True, help="CSV file to write")
    _reading(infer)

    report = sub.add_parser(
        "report", help="one self-contained HTML page about a run (topics, topic map, metrics, privacy, config)",
        description="Write RUN/report.html: each topic's top words with their weights, topic sizes, a 2-D map of "
        "the topics' Jensen-Shannon distances, the metrics and the privacy spent per round, the run config. "
        "The page needs no network to be viewed.")
    report.add_argument("run", help="a run's output directory (or its model.npz)")
    report.add_argument("--out", help="HTML file to write (default RUN/report.html)")
    report.add_argument("--corpus",
                        help="documents you hold: topic sizes become their expected share of them; " + CORPUS_HELP)
    _reading(report)

    export = sub.add_parser(
        "export", help="write a model for gensim or pyLDAvis",
        description="gensim: dictionary.txt (Dictionary.save_as_text format) and topic_term.npy (K x V, the "
        "layout of LdaModel.get_topics()). pyldavis: pyLDAvis.prepare's arguments as JSON, and its prepared data "
        "when pyLDAvis is installed; needs --corpus (document lengths, term frequencies and theta are not in a "
        "model file).")
    export.add_argument("run", help="a run's output directory (or its model.npz)")
    export.add_argument("--format", required=True, choices=("gensim", "pyldavis"))
    export.add_argument("--out", required=True, help="folder to write into")
    export.add_argument("--corpus", help="documents you hold, for document frequencies (gensim) or pyLDAvis' inputs; "
                        + CORPUS_HELP)
    _reading(export)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"text_column": args.text_column, "id_column": args.id_column, "stopwords": args.stopwords,
            "lowercase": False if args.no_lowercase else None}


def _infer(args: argparse.Namespace) -> int:
    from flower_topics.topic_model.model_file import load_model

    model = load_model(args.model)
    topics = model.read_documents(args.corpus, **_options(args))
    path = topics.to_csv(args.out)
    known, unknown = int(topics.n_words.sum()), int(topics.n_oov.sum())
    coverage = known / max(known + unknown, 1)
    print(f"wrote the topics of {len(topics.ids)} documents to {path}; {int(topics.empty.sum())} have no word of the "
          f"model's vocabulary (no top topic); the vocabulary covers {coverage:.1%} of the corpus' tokens")
    if coverage < 0.5:
        print("note: under half of the tokens are known to the model; is this the kind of corpus it was trained on, "
              "read with the same options (--text-column, --stopwords, --no-lowercase)?")
    return 0


def _report(args: argparse.Namespace) -> int:
    from flower_topics.run.report_page import write_report

    path = write_report(args.run, args.out, corpus=args.corpus, reading=_options(args))
    print(f"wrote {path}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from flower_topics.run.exports import export
    from flower_topics.topic_model.model_file import load_model
    from flower_topics.run.report_page import run_paths
    from flower_topics.topic_model.document_topics import model_documents

    model = load_model(run_paths(args.run)[1])
    documents = model_documents(model, args.corpus, model.vocabulary, **_options(args)) if args.corpus else None
    for path in export(model, args.format, args.out, documents):
        print(f"wrote {path}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"infer": _infer, "report": _report, "export": _export}


def run(args: argparse.Namespace) -> int:
    """Run the command ``args.command`` (one of :data:`COMMANDS`)."""
    if args.command not in COMMANDS:
        raise UserInputError(f"unknown command {args.command!r}")
    return COMMANDS[args.command](args)
