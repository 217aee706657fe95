"""A party's documents' topics under the global model, kept on the party (node config ``theta-out``).

In a federated run a party whose node config sets ``theta-out`` writes its documents' topics
there at each ``evaluate`` message, against the global model it carries (the last one is the
final model: the last round is always scored by an ``evaluate`` message of its own; an
evaluation carried by a training message writes nothing). The file stays on the party: nothing
of it enters a reply.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from flower_topics.data.node_data import READING_KEYS, node_options, simulated_share
from flower_topics.errors import UserInputError
from flower_topics.evaluation.federated import received_model
from flower_topics.topic_model.document_topics import (READING_DEFAULTS, DocumentCounts, count_corpus, document_topics,
                                                 read_documents)
from flower_topics.wire.agreement import split_words
from flower_topics.wire.protocol import CONFIG

logger = logging.getLogger("flower_topics")

_PARTY_DOCUMENTS: dict[tuple[Any, ...], DocumentCounts] = {}


def keep_party_theta(msg: Any, context: Any, run_config: Mapping[str, Any]) -> Path | None:
    """On a party whose node config sets ``theta-out``: write its documents' topics under the evaluated model.

    Called after the party answered an ``evaluate`` message (its reply is already built and
    is not touched). The documents are the party's own: its node config's ``dataset`` read
    with its reading options (every document of the file, with its id), or in a simulation
    its share of the run's dataset (ids are indices within the share). The topics are the
    ``evaluate`` message's global ``topic_word`` over the vocabulary the party agreed to; the
    fold-in uses the message's ``eval-alpha`` and ``eval-iterations``. A failure (unwritable
    path, unreadable corpus) is logged on the party and sent nowhere.

    Returns
    -------
    Path or None
        The file written, or None when ``theta-out`` is not set or writing failed.
    """
    options = node_options(context.node_config)
    target = str(options.get("theta-out", "")).strip()
    if not target:
        return None
    try:
        vocabulary = split_words(str(context.state["vocabulary"]["words"]))
        phi = received_model(msg.content, len(vocabulary))
        request = msg.content[CONFIG]
        reading = {key: options.get(key, run_config.get(key, READING_DEFAULTS.get(key))) for key in READING_KEYS}
        if options.get("dataset"):
            path = Path(str(options["dataset"])).expanduser()
            key = (str(path), path.stat().st_mtime_ns, tuple(sorted(reading.items())), tuple(vocabulary))
            if key not in _PARTY_DOCUMENTS:  # read once a run, not at every evaluation
                _PARTY_DOCUMENTS.clear()
                _PARTY_DOCUMENTS[key] = read_documents(path, vocabulary, text_column=str(reading["text-column"]),
                                                       lowercase=bool(reading["lowercase"]),
                                                       stopwords=str(reading["stopwords"]))
            documents = _PARTY_DOCUMENTS[key]
        else:
            share = simulated_share(run_config, int(options["partition-id"]), int(options["num-partitions"])).corpus
            documents = count_corpus(share, vocabulary)
        topics = document_topics(phi, documents, alpha=float(request["eval-alpha"]),
                                 n_iter=int(request["eval-iterations"]))
        written = topics.to_csv(target)
    except (OSError, UserInputError, ValueError, KeyError) as exc:
        logger.error("flower-topics: theta-out: could not write %s: %s (kept on this node, nothing was sent)",
                     target, exc)
        return None
    logger.info("flower-topics: theta-out: wrote the topics of %d documents (%d without a word of the vocabulary) "
                "to %s on this node", len(topics.ids), int(topics.empty.sum()), written)
    return written
