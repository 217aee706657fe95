"""The vocabulary agreement: the stage before round 1 in which the parties settle on one vocabulary.

The server never opens a corpus; it learns the vocabulary from the parties (or from a
public file) in one of three modes, the run config's ``vocabulary``:

- ``union``, the gFedNTM paper's consensus: every node sends its candidate words with
  their exact document frequencies and its number of documents, so it publishes its
  vocabulary. A node sends only the words in at least ``min-party-df`` of its own documents
  (its node config, default 2: the server cannot lower it), so a word of one of its
  documents never leaves it; the server sums the counts, applies the global ``min-df`` /
  ``max-df`` / ``max-vocab`` and keeps every word of a curated list (an OCTIS folder's
  ``vocabulary.txt``, public: sent whole, without its document frequencies) as it is;
- ``private``: differentially private set union (Gopi et al., ICML 2020,
  :mod:`flower_topics.privacy.set_union`): each node bounds every document's contribution,
  perturbs its own counts with its secret randomness and releases only the words above the
  threshold; the server sums the noisy counts and applies ``min-df`` (as a count) and
  ``max-vocab``. The (eps, delta) per document enters the run's privacy report;
  With ``secure-aggregation=true`` the parties instead count over a public candidate list and
  the server sees only the sum, noised once with shared Skellam noise and cut once
  (:mod:`flower_topics.privacy.secure_vocabulary`);
- a path: a public vocabulary file (one word per line) every party is given; the server
  reads it, and no candidate leaves a party.

Then the server sends the vocabulary to every node (``query.vocabulary``); each maps its
documents onto it. What each mode reveals is listed in the README ("What leaves a party").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from flower_topics.run.config import parse_run_config
from flower_topics.run.json_values import plain_json
from flower_topics.data.prepare import preprocess_config
from flower_topics.data.vocabulary_file import read_vocabulary_file
from flower_topics.errors import UserInputError
from flower_topics.federation.grids import collect_replies
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.privacy.set_union import privacy_summary
from flower_topics.secure_sum.protocol import MASKED_KEY
from flower_topics.strategies.base import FederationError, error_reason, wait_for_nodes
from flower_topics.wire import agreement as wire
from flower_topics.wire.agreement import AgreementMode
from flower_topics.wire.protocol import (
    CONFIG,
    METRICS,
    ReplyError,
    payload_bytes,
    validate_reply,
    vocabulary_fingerprint,
)

logger = logging.getLogger("flower_topics")


@dataclass(frozen=True)
class Agreement:
    """The outcome of the agreement stage.

    Parameters
    ----------
    vocabulary : tuple of str
        The agreed words, in column order.
    mode : AgreementMode or str
        ``union``, ``private`` or ``file`` (a :class:`~flower_topics.wire.agreement.AgreementMode`; its text is read
        as one, and another text is refused with ValueError).
    nodes : int
        Nodes that took part.
    bytes_sent, bytes_received : int
        Payload bytes of the stage, all nodes together.
    seconds : float
        Wall time of the stage.
    excluded : dict
        Nodes that could not take part, with the reason.
    privacy : PrivacyReport or None
        What ``private`` spent (per document).
    node_corpora : int
        Nodes that said they read their own file (node config ``dataset``).
    shares : int
        Nodes that said they hold a simulated share of the run config's ``dataset``; nodes
        that said neither (another ClientApp) count in neither.
    """

    vocabulary: tuple[str, ...]
    mode: AgreementMode
    nodes: int
    bytes_sent: int
    bytes_received: int
    seconds: float
    excluded: dict[int, str] = field(default_factory=dict)
    privacy: PrivacyReport | None = None
    node_corpora: int = 0
    shares: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", AgreementMode(self.mode))

    def data_source(self, dataset: str) -> str:
        """Which corpus the run was trained on, as the parties said: ``dataset`` (the run config's)
        only if every node holds a simulated share of it; else the parties' own files."""
        if self.nodes and self.shares == self.nodes:
            return dataset
        if self.nodes and self.node_corpora == self.nodes:
            return "the parties' own files (node config)"
        others = self.nodes - self.node_corpora - self.shares
        parts = [f"{self.node_corpora} parties' own files (node config)" if self.node_corpora else "",
                 f"{self.shares} shares of {dataset}" if self.shares else "",
                 f"{others} unknown" if others else ""]
        return "mixed: " + ", ".join(p for p in parts if p)

    def simulated(self) -> bool:
        """Whether every node trained on a simulated share of the run config's dataset."""
        return bool(self.nodes) and self.shares == self.nodes

    def summary(self) -> dict[str, Any]:
        """The figures a run records (``metrics.jsonl``'s first line and the model's metadata)."""
        return {"mode": self.mode.value, "words": len(self.vocabulary), "nodes": self.nodes, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "seconds": round(self.seconds, 3),
                "fingerprint": vocabulary_fingerprint(self.vocabulary),
                "node_corpora": self.node_corpora, "shares": self.shares,
                "privacy": None if self.privacy is None else self.privacy.to_dict()}

    def state(self) -> dict[str, Any]:
        """Its fields as JSON values, for a checkpoint (the vocabulary travels separately)."""
        privacy = None if self.privacy is None else plain_json(dataclasses.asdict(self.privacy))
        return {"mode": self.mode.value, "nodes": self.nodes, "bytes_sent": self.bytes_sent,
                "bytes_received": self.bytes_received, "seconds": self.seconds,
                "excluded": {str(n): why for n, why in self.excluded.items()}, "privacy": privacy,
                "node_corpora": self.node_corpora, "shares": self.shares}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], vocabulary: Sequence[str]) -> "Agreement":
        """The agreement a checkpoint recorded (:meth:`state`)."""
        privacy = None if state["privacy"] is None else PrivacyReport(**state["privacy"])
        return cls(vocabulary=tuple(vocabulary), mode=state["mode"], nodes=int(state["nodes"]),
                   bytes_sent=int(state["bytes_sent"]), bytes_received=int(state["bytes_received"]),
                   seconds=float(state["seconds"]), excluded={int(n): why for n, why in state["excluded"].items()},
                   privacy=privacy, node_corpora=int(state["node_corpora"]), shares=int(state["shares"]))


def agree_vocabulary(grid: Grid, run_config: Mapping[str, Any], timeout: float | None = None) -> Agreement:
    """Run the agreement stage on ``grid`` for a run config (a :class:`~flower_topics.run.config.RunConfig`, or a
    raw one, validated here).

    Raises
    ------
    FederationError
        When fewer than ``min-nodes`` nodes can take part.
    UserInputError
        For an unreadable vocabulary file, or when no word passes the filters.
    """
    config = parse_run_config(run_config)
    started = time.time()
    source = str(config["vocabulary"])
    mode = AgreementMode.of(source)
    nodes = sorted(wait_for_nodes(grid, int(config["min-nodes"])))
    excluded: dict[int, str] = {}
    sent = received = 0
    privacy = None
    if mode is AgreementMode.PRIVATE and bool(config["secure-aggregation"]):
        vocabulary, privacy, nodes, stage_sent, stage_received = _secure_private(grid, config, nodes, excluded, timeout)
        sent, received = sent + stage_sent, received + stage_received
    elif mode is not AgreementMode.FILE:
        private = mode is AgreementMode.PRIVATE
        settings = _candidate_settings(config) if private else {}
        messages = [Message(RecordDict({CONFIG: ConfigRecord({"mode": mode.value, **settings})}), dst_node_id=n,
                            message_type=wire.CANDIDATES) for n in nodes]
        sent += sum(payload_bytes(m.content) for m in messages)
        parsed, stage_received = collect_replies(grid, messages, timeout, excluded, "candidates",
                                          lambda reply: _candidates_of(reply, private))
        received += stage_received
        candidates = list(parsed.values())
        nodes = sorted(parsed)
        _enough(nodes, excluded, int(config["min-nodes"]))
        vocabulary = merge_candidates(candidates, config, private=private)
        if private:
            privacy = PrivacyReport(**privacy_summary(
                float(config["vocabulary-epsilon"]), float(config["vocabulary-delta"]),
                int(config["vocabulary-max-words"]), str(config["vocabulary-noise"])))
    else:
        vocabulary = read_vocabulary_file(source)
    if len(vocabulary) < 2 and mode is AgreementMode.PRIVATE:
        raise UserInputError(f"the private vocabulary agreement released {len(vocabulary)} word(s): too few words "
                             "are in enough of one party's documents to clear its noise threshold; raise "
                             "vocabulary-epsilon or lower vocabulary-max-words (or use union or a public file)")
    if len(vocabulary) < 2:
        raise UserInputError(f"{len(vocabulary)} word(s) pass the vocabulary filters (min-df, max-df, max-vocab); "
                             "a topic model needs at least 2: relax them")
    words = wire.join_words(vocabulary)
    messages = [Message(RecordDict({CONFIG: ConfigRecord({wire.WORDS: words,
                                                          "vocabulary": vocabulary_fingerprint(vocabulary)})}),
                        dst_node_id=n, message_type=wire.VOCABULARY) for n in nodes]
    sent += sum(payload_bytes(m.content) for m in messages)
    answered: dict[int, float | None] = {}  # node -> its NODE_CORPUS flag (None: it sent none)
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            excluded[reply.metadata.src_node_id] = error_reason(reply)
        else:
            answered[reply.metadata.src_node_id] = _node_corpus(reply)
            received += payload_bytes(reply.content)
    nodes = [n for n in nodes if n in answered]
    _enough(nodes, excluded, int(config["min-nodes"]))
    for node, why in excluded.items():
        logger.warning("vocabulary agreement: node %d cannot take part: %s", node, why)
    flags = [answered[n] for n in nodes]
    agreement = Agreement(vocabulary, mode, len(nodes), sent, received, time.time() - started, excluded, privacy,
                          node_corpora=flags.count(1.0), shares=flags.count(0.0))
    logger.info("vocabulary agreement (%s): %d words from %d node(s), %d bytes sent, %d received, %.2f s",
                mode.value, len(vocabulary), len(nodes), sent, received, agreement.seconds)
    return agreement


def merge_candidates(candidates: Sequence[tuple[tuple[str, ...], np.ndarray, int, bool]], config: Mapping[str, Any],
                     private: bool = False) -> tuple[str, ...]:
    """The vocabulary from the nodes' candidates.

    Parameters
    ----------
    candidates : sequence of (words, counts, n_docs, curated)
        Each node's words, their (noisy, for ``private``) document frequencies, its number of
        documents (0 for ``private``) and whether the words are a curated list.
    config : Mapping
        The run config (``min-df``, ``max-df``, ``max-vocab``).
    private : bool
        Noisy counts: ``min-df`` applies as a count, ``max-df`` only as a count (a fraction
        would need the parties' document counts, which ``private`` does not release).

    Returns
    -------
    tuple of str
        Curated words in the order first seen, then the other words that pass the filters,
        sorted.
    """
    curated: dict[str, None] = {}
    totals: dict[str, float] = {}
    n_docs = 0
    for words, counts, docs, is_curated in candidates:
        n_docs += docs
        if is_curated and not private:
            curated.update(dict.fromkeys(words))
            continue
        for word, count in zip(words, counts.tolist()):
            totals[word] = totals.get(word, 0.0) + count
    prep = preprocess_config(config)
    if private:
        low = float(prep.min_df) if prep.min_df >= 1 else 1.0
        high = float(prep.max_df) if prep.max_df > 1 else float("inf")
        if prep.min_df < 1 or prep.max_df < 1:
            logger.warning("vocabulary agreement (private): document-count fractions of min-df/max-df are not "
                           "applied (private mode releases no document counts); set them as counts")
    else:
        low, high = prep.document_count_bounds(n_docs)
    kept = [w for w, c in totals.items() if low <= c <= high and w not in curated]
    if curated and prep.max_vocab is not None and len(curated) > prep.max_vocab:
        logger.warning("vocabulary agreement: max-vocab %d does not cut the curated vocabulary of %d words (an OCTIS "
                       "folder's vocabulary.txt is kept as it is); to use fewer words, give a vocabulary file",
                       prep.max_vocab, len(curated))
    if prep.max_vocab is not None and len(kept) > prep.max_vocab:
        kept = sorted(kept, key=lambda w: (-totals[w], w))[: prep.max_vocab]
    return tuple(curated) + tuple(sorted(kept))


def _secure_private(grid: Grid, config: Mapping[str, Any], nodes: list[int], excluded: dict[int, str],
                    timeout: float | None) -> tuple[tuple[str, ...], PrivacyReport, list[int], int, int]:
    """``private`` under secure aggregation: the masked sum of the parties' bounded document frequencies over
    the public candidates, Skellam noise shared, one central cut (:mod:`flower_topics.privacy.secure_vocabulary`).

    Returns the vocabulary, its privacy report, the nodes whose counts are in the sum, and the bytes sent and
    received.
    """
    from flower_topics.privacy import secure_vocabulary
    from flower_topics.secure_sum.protocol import ROUND_RECORD, SecureSumSettings, masked_spec
    from flower_topics.secure_sum.server import SecureRound, SecureRoundFailed
    from flower_topics.wire.protocol import ArraySpec, ReplySpec

    candidates = secure_vocabulary.public_candidates(str(config["vocabulary-candidates"]))
    settings = SecureSumSettings.from_config(config)
    problem = settings.check_parties(len(nodes))
    if problem:
        raise UserInputError(f"vocabulary agreement: {problem}")
    epsilon, delta = float(config["vocabulary-epsilon"]), float(config["vocabulary-delta"])
    max_words = int(config["vocabulary-max-words"])
    secure = SecureRound(grid, nodes, settings, server_round=0, timeout=600.0 if timeout is None else timeout)
    spec = masked_spec(ReplySpec(wire.METHOD, {"counts": ArraySpec("integer", (len(candidates),))}), settings)
    request = {"mode": "private", **_candidate_settings(config), "candidates": wire.join_words(candidates)}
    sent = 0
    try:
        records = secure.setup()
        messages = [Message(RecordDict({CONFIG: ConfigRecord(request), ROUND_RECORD: record}), dst_node_id=node,
                            message_type=wire.CANDIDATES) for node, record in records.items()]
        sent = sum(payload_bytes(m.content) for m in messages)
        masked, received = collect_replies(grid, messages, timeout, excluded, "masked counts",
                                    lambda reply: validate_reply(reply.content, spec)[0][MASKED_KEY])
        noisy = secure.unmask(masked)
    except SecureRoundFailed as exc:
        raise FederationError(f"vocabulary agreement: {exc}") from None
    prep = preprocess_config(config)
    variance = len(masked) * secure_vocabulary.noise_variance(epsilon, delta, max_words) / settings.threshold(len(nodes))
    vocabulary = secure_vocabulary.kept_words(
        candidates, noisy, variance, min_df=float(prep.min_df) if prep.min_df >= 1 else 1.0,
        max_df=float(prep.max_df) if prep.max_df > 1 else float("inf"), max_vocab=prep.max_vocab)
    privacy = PrivacyReport(**secure_vocabulary.privacy_summary(epsilon, delta, max_words, len(candidates)))
    return (vocabulary, privacy, sorted(masked), sent + secure.bytes_sent,
            received + secure.bytes_received)


def _candidate_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"epsilon": float(config["vocabulary-epsilon"]), "delta": float(config["vocabulary-delta"]),
            "max-words": int(config["vocabulary-max-words"]), "noise": str(config["vocabulary-noise"])}


def _candidates_of(reply: Message, private: bool) -> tuple[tuple[str, ...], np.ndarray, int, bool]:
    arrays, metrics = validate_reply(reply.content, wire.candidates_spec(private))
    record = reply.content[CONFIG]
    words = wire.split_words(str(record[wire.WORDS]))
    counts = arrays[wire.DOC_FREQ]
    if len(words) != counts.size:
        raise ReplyError(f"{len(words)} words but {counts.size} counts")
    if len(set(words)) != len(words) or any(not w or w != w.strip() for w in words):
        raise ReplyError("words must be distinct, non-empty and without white space")
    return words, counts.astype(np.float64), int(metrics.get("num-documents", 0)), bool(record["curated"])


def _node_corpus(reply: Message) -> float | None:
    """The vocabulary reply's :data:`~flower_topics.wire.agreement.NODE_CORPUS` flag (1 or 0), or None."""
    try:
        value = float(reply.content[METRICS][wire.NODE_CORPUS])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value in (0.0, 1.0) else None


def _enough(nodes: list[int], excluded: Mapping[int, str], min_nodes: int) -> None:
    if len(nodes) < min_nodes:
        raise FederationError.too_few("the vocabulary agreement", len(nodes), min_nodes, excluded)


def send_vocabulary(grid: Grid, vocabulary: Sequence[str], min_nodes: int, timeout: float | None = None
                    ) -> dict[int, str]:
    """Send the checkpointed vocabulary to every node (the agreement's last message, ``query.vocabulary``).

    The parties of a new Flower run hold no vocabulary; the agreed words are already known
    to every party, so sending them again releases nothing, and no candidate is asked for
    (the agreement's privacy is not spent again). A party that kept its state maps its
    documents onto the same words again (nothing changes).

    Returns
    -------
    dict
        The nodes that could not take the vocabulary, with the reason.
    """
    nodes = sorted(wait_for_nodes(grid, min_nodes))
    record = ConfigRecord({wire.WORDS: wire.join_words(tuple(vocabulary)),
                           "vocabulary": vocabulary_fingerprint(tuple(vocabulary))})
    messages = [Message(RecordDict({CONFIG: record}), dst_node_id=n, message_type=wire.VOCABULARY) for n in nodes]
    excluded = {reply.metadata.src_node_id: error_reason(reply)
                for reply in grid.send_and_receive(messages, timeout=timeout) if reply.has_error()}
    if len(nodes) - len(excluded) < min_nodes:
        raise FederationError.too_few("resume (the vocabulary to the parties)", len(nodes) - len(excluded),
                                      min_nodes, excluded)
    return excluded
