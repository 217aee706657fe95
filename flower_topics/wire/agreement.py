"""Wire protocol of the vocabulary agreement, the stage before round 1.

1. ``query.candidates`` (server to every node; config: the mode and, for ``private``, the
   mechanism's settings). A node replies with its candidate words and their document
   frequencies (``union``: its words in at least ``min-party-df`` of its documents, its node
   config's floor; a curated list whole, with zero counts), or with the words and noisy counts that survive its
   differentially private set union (``private``), and its number of documents
   (``union`` only):

   - ``config`` ConfigRecord: ``words`` (the words joined by newlines), ``curated``
     (an OCTIS ``vocabulary.txt`` or the synthetic generator's list, kept as it is);
   - :data:`UPDATE` ArrayRecord: ``doc-freq`` (int64 for ``union``, float64 noisy counts
     for ``private``), one per word;
   - :data:`METRICS` MetricRecord: ``num-documents`` (``union``; absent for ``private``).

2. ``query.vocabulary`` (server to every node): the agreed words (``words``, joined by
   newlines, in column order) and their fingerprint. A node maps its documents onto them,
   keeps the vocabulary in its state and replies with a MetricRecord of one flag,
   :data:`NODE_CORPUS` (1: it reads its own file, its node config's ``dataset``; 0: a
   simulated share of the run config's ``dataset``), so that the run records which corpus
   it was trained on; or with an error when none of its documents keeps a word.

With a public vocabulary file there is no ``query.candidates``: the server reads the file
and sends it with ``query.vocabulary``.
"""

from __future__ import annotations

import enum

from flwr.app import MessageType

from flower_topics.wire.protocol import ArraySpec, ReplySpec

CANDIDATES = f"{MessageType.QUERY}.candidates"
VOCABULARY = f"{MessageType.QUERY}.vocabulary"
METHOD = "agreement"
WORDS = "words"
DOC_FREQ = "doc-freq"
#: The vocabulary reply's one flag: 1 if the node reads its own file (node config), 0 if a simulated share.
NODE_CORPUS = "node-corpus"


class AgreementMode(enum.StrEnum):
    """How a run's vocabulary was agreed (the run config's ``vocabulary``: a mode, or a vocabulary file's path)."""

    #: Every party's frequent words with their exact document frequencies.
    UNION = "union"
    #: A differentially private set union of the parties' words (accounted per document).
    PRIVATE = "private"
    #: A public vocabulary file the server reads: nothing leaves a party.
    FILE = "file"

    @classmethod
    def of(cls, vocabulary: str) -> "AgreementMode":
        """The mode of a run config's ``vocabulary``: ``union``, ``private``, or any other text (a file's path)."""
        return cls(vocabulary) if vocabulary in MODES else cls.FILE


#: The agreement modes besides a vocabulary file's path.
MODES = (AgreementMode.UNION.value, AgreementMode.PRIVATE.value)
#: Largest candidate reply accepted (words and counts), in bytes.
MAX_CANDIDATE_BYTES = 256 << 20


def join_words(words: tuple[str, ...] | list[str]) -> str:
    """Words as they travel: one string, newline-separated (a word never holds white space)."""
    return "\n".join(words)


def split_words(text: str) -> tuple[str, ...]:
    """The inverse of :func:`join_words`."""
    return tuple(text.split("\n")) if text else ()


def candidates_spec(private: bool) -> ReplySpec:
    """A valid candidates reply: one count per word (checked against the words by the server)."""
    counts = ArraySpec("floating" if private else "integer", (None,), low=0, what="document frequencies")
    return ReplySpec(METHOD, {DOC_FREQ: counts}, metrics=() if private else ("num-documents",),
                     max_bytes=MAX_CANDIDATE_BYTES, config=(WORDS, "curated"))
