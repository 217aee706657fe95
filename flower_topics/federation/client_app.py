"""ClientApp: this party's documents, the vocabulary agreement, and one ``train.<method>``
handler per registered method.

The party reads only its own documents (:mod:`flower_topics.data.node_data`): the file its
node config names (``dataset``, with its reading options), or in a simulation its share of
the run config's dataset (``partition-id`` / ``num-partitions``). Before round 1 it answers
the agreement stage (``query.candidates``, ``query.vocabulary``; :mod:`flower_topics.federation.vocabulary_agreement`)
and keeps the agreed vocabulary in its state; every training message names the
vocabulary's fingerprint, and the party trains on its documents over that vocabulary.

A ``train.<method>`` message runs that method's local step
(:meth:`~flower_topics.methods.MethodSpec.local_step`), whatever the run config's
``method``: the strategy decides what a round is, and sends the method's settings in the
message. The node reads only the data options of the run config (which corpus, how to
read it, its partition); other keys are not its concern, so the ClientApp also serves a
ServerApp of your own with keys of its own.

The server's message is a request: every handler first refuses one that carries a key only the
party sets, or a secure request without its secure-sum round, and a local step gets the party's
own side (its policy from the node config, its account of the run's releases, its secure-sum
facts; :mod:`flower_topics.federation.party_side`) beside the request, never merged into it.

Local state lives in ``context.state`` between rounds and never leaves the node; with
``state-dir`` in the node config it is also kept on the party's disk, so that a SuperNode
restarted with the same identity rejoins its run (:mod:`flower_topics.federation.party_state`). A private
method's randomness is the party's secret (:func:`party_seed`): OS entropy, or its
``secret-seed`` mixed with a nonce drawn once per run.

A node that cannot take part (its data cannot be read, the server's vocabulary is not
its own) replies with an error of code :data:`~flower_topics.wire.protocol.BAD_INPUT`
naming the problem; the strategy then stops sampling it.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from logging import ERROR, INFO
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import log

from flower_topics import secure_sum
from flower_topics.federation import message_timing, party_ledger, party_side, party_state
from flower_topics.run.config import OPTIONS, parse_run_config
from flower_topics.clients.state import load_state, save_state
from flower_topics.data.corpus import Corpus
from flower_topics.data.node_data import NODE_OPTIONS, NodeDocuments, load_node_documents, node_options
from flower_topics.data.prepare import is_data_key
from flower_topics.errors import UserInputError
from flower_topics.methods import METHODS, MethodSpec, all_node_options
from flower_topics.options import coerce
from flower_topics.privacy.ledger import APPROX_DP, Release
from flower_topics.privacy.party_policy import PREVALENCE, ROUND, VOCABULARY, AccountedRelease, PartyFacts
from flower_topics.wire import agreement
from flower_topics.wire.agreement import split_words
from flower_topics.wire.protocol import (ARRAYS, BAD_INPUT, CARRIED, CONFIG, METRICS, SENDER, UPDATE,
                                         vocabulary_fingerprint)

if TYPE_CHECKING:
    from flower_topics.evaluation.federated import PartyScorer

PARTITION_KEYS = ("partition", "dirichlet-alpha", "partition-sizes", "label-groups")
#: Where a node keeps the agreed vocabulary in ``context.state``.
VOCABULARY_STATE = "vocabulary"
#: Where a node keeps its run nonce (OS entropy, drawn once per run, mixed with ``secret-seed``).
NONCE_STATE = "secret-nonce"
#: Mixed into a vocabulary release's randomness: a stream no round's seed takes.
VOCABULARY_STREAM = 0x766F6362


def data_config(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The validated data and partitioning options of a run config (other keys are ignored)."""
    wanted = {k: v for k, v in run_config.items() if k in OPTIONS and (is_data_key(k) or k in PARTITION_KEYS)}
    return parse_run_config(wanted)


def node_documents(context: Context, config: Mapping[str, Any]) -> NodeDocuments:
    """This party's documents over its own words (its file, or its simulated share), once every node-config key
    it sets is valid (:func:`check_node_config`)."""
    check_node_config(context.node_config)
    with message_timing.stage("data"):
        return load_node_documents(context.node_config, config)


def check_node_config(node_config: Mapping[str, Any]) -> None:
    """Refuse, in one line, a node config with a bad value of any key a party may set: the data and federation
    keys and every method's own (:func:`flower_topics.methods.all_node_options`), whichever method the run is."""
    table = all_node_options()
    for key, value in node_config.items():
        if key in table:
            coerce(key, value, table[key], source="node-config")


@dataclass(frozen=True)
class AgreedDocuments:
    """A party's documents over the vocabulary it agreed to, split once.

    Parameters
    ----------
    training : Corpus
        The documents it trains on (its ``train`` and ``val`` documents).
    heldout : Corpus
        Its held-out (``test``) documents, scored by federated evaluation.
    """

    training: Corpus
    heldout: Corpus

    @functools.cached_property
    def scorer(self) -> PartyScorer:
        """Federated evaluation's scorer of these documents (prepared at its first message, then kept)."""
        # imported by an evaluation message only: a training round needs none of it
        from flower_topics.evaluation import federated

        return federated.PartyScorer(self.training, self.heldout)


_AGREED: dict[tuple[Any, ...], AgreedDocuments] = {}


def agreed_documents(context: Context, config: Mapping[str, Any], fingerprint: str | None = None) -> AgreedDocuments:
    """This party's training and held-out documents over the vocabulary it agreed to (cached per process).

    Raises
    ------
    UserInputError
        When the node has no agreed vocabulary (it joined after the agreement stage), or
        ``fingerprint`` (the server's vocabulary) is not the one it agreed to.
    """
    if VOCABULARY_STATE not in context.state.config_records:
        raise UserInputError("this node has no agreed vocabulary (it joined after the vocabulary agreement, its "
                             "SuperNode restarted without a state-dir in its node config, or the ServerApp skipped "
                             "it: run flower_topics.federation.vocabulary_agreement.agree_vocabulary first)")
    record = context.state[VOCABULARY_STATE]
    agreed = str(record["fingerprint"])
    if fingerprint is not None and fingerprint != agreed:
        raise UserInputError(f"the server's vocabulary (fingerprint {fingerprint}) is not the one this node agreed "
                             f"to ({agreed}); build the strategy with the vocabulary of agree_vocabulary")
    # every option that decides the documents (the node's file or share, seed, split, synthetic generator,
    # partition): two runs in one process over the same file or generator must not share documents; the
    # documents are read only when they are not here yet (a share took a few ms a message to materialize)
    decided_by = sorted((str(k), str(v)) for k, v in config.items() if is_data_key(k) or k in PARTITION_KEYS)
    node = sorted((str(k), str(v)) for k, v in context.node_config.items())
    key = (agreed, tuple(decided_by), tuple(node))
    if key not in _AGREED:
        if len(_AGREED) >= 8:
            _AGREED.pop(next(iter(_AGREED)))
        documents = node_documents(context, config)
        with message_timing.stage("data"):
            corpus = documents.on_vocabulary(split_words(str(record["words"])), int(config["min-doc-length"]))
            _AGREED[key] = AgreedDocuments(corpus.select_split("train", "val"), corpus.select_split("test"))
    return _AGREED[key]


def client_seed(config: Mapping[str, Any], partition_id: int) -> int:
    """A public seed from the run seed and a node label: reproducible, and known to the server."""
    return int(np.random.SeedSequence([int(config["seed"]), partition_id]).generate_state(1)[0])


def run_nonce(context: Context) -> int:
    """This node's nonce for the run: 63 bits of OS entropy drawn at its first use in the run, kept in
    ``context.state`` (a new run starts with a new state, so it gets a new nonce); never sent."""
    if NONCE_STATE not in context.state.config_records:
        context.state[NONCE_STATE] = ConfigRecord({"nonce": secrets.randbits(63)})
    return int(context.state[NONCE_STATE]["nonce"])


def party_seed(context: Context, config: Mapping[str, Any], private: bool) -> int:
    """The seed of this party's local step.

    For a method with a privacy mechanism it is secret and only the party's: with a
    ``secret-seed`` in its node config, that secret mixed with the run's nonce
    (:func:`run_nonce`), the same for every round of one run (the steps mix in their round or
    release counter) and different in every run, so a fixed secret never gives the same noise
    twice and two runs on changed data cannot be differenced; without one, fresh OS entropy
    at each call. Nothing the server knows (the run config, the round, node ids) enters it.
    A method without a mechanism gets a public seed from the run seed and the node's
    partition id (or node id), so its runs reproduce from the run config.
    """
    options = node_options(context.node_config)
    if private:
        secret = int(options.get("secret-seed", -1))
        if secret < 0:
            return secrets.randbits(63)
        mixed = np.random.SeedSequence([secret, run_nonce(context)]).generate_state(1, np.uint64)[0]
        return int(mixed >> np.uint64(1))
    return client_seed(config, int(options.get("partition-id", context.node_id)))


def local_round(spec: MethodSpec, msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """Run ``spec``'s local step on this node's training documents, keep its state, and reply with its update.

    The step gets the server's settings as they came and, beside them, this party's own side
    (:func:`~flower_topics.federation.party_side.party_facts`); what it releases is added to the party's
    account before it leaves."""
    train_config = msg.content[CONFIG]
    secure = msg.content.config_records.get(secure_sum.ROUND_RECORD)
    party = party_side.party_facts(spec, msg, context)
    step = spec.local_step()
    corpus = agreed_documents(context, config, str(train_config["vocabulary"])).training
    releases = step.accounted(train_config, corpus)
    party_side.check_policy(party.policy, spec.name, releases is not None, f"a {spec.name} round")
    party_side.check_released_round(context.state, party.policy, spec.name, int(train_config.get("server-round", 0)))
    scored = carried_evaluation(msg, context, config)  # the model it receives, before the local step
    state_name = f"{spec.name}-state"
    with message_timing.stage("state"):
        state = load_state(context, state_name, step.state())
    seed = party_seed(context, config, private=spec.private)
    with message_timing.stage("compute"):
        arrays, metrics = step.train(msg.content[ARRAYS], train_config, corpus, state, seed, party)
    share = party.secure.noise_share if party.secure is not None else 1.0
    for release in releases or ():  # before it leaves
        party_side.record_release(context.state, AccountedRelease(ROUND, spec.name, release, secure is not None, share))
    party_ledger.record_round(context, config, spec.name, releases)
    if secure is not None:
        from flower_topics.secure_sum import party as secure_party

        order = spec.reply_spec(train_config, corpus.n_words).arrays
        vector = np.concatenate([np.asarray(arrays[key]).ravel() for key in order])
        arrays = {secure_sum.MASKED_KEY: secure_party.mask_update(context.state, context.node_id, secure, vector)}
        metrics = {}
    with message_timing.stage("state"):
        save_state(context, state_name, state)
    content = RecordDict({
        UPDATE: ArrayRecord({key: Array(value) for key, value in arrays.items()}),
        METRICS: MetricRecord(metrics),
        SENDER: ConfigRecord({"method": spec.name}),
    })
    if scored is not None:
        from flower_topics.evaluation.federated import carry_reply

        carry_reply(content, *scored)
    return Message(content=content, reply_to=msg)


def carried_evaluation(msg: Message, context: Context, config: Mapping[str, Any]
                       ) -> tuple[RecordDict | None, str] | None:
    """The evaluation a training message carries (:mod:`flower_topics.evaluation.federated`), scored as an
    ``evaluate`` message is: ``(sums, "")``; None when it carries none. A party that does not score it (a
    model it refuses, a privacy ledger that refuses an unaccounted release) returns ``(None, reason)`` and
    trains all the same, as it answers an ``evaluate`` message it refuses with an error and the next round."""
    if not any(name.startswith(CARRIED) for name in msg.content):
        return None
    from flower_topics.evaluation.federated import split_carried

    request = split_carried(msg.content)[1]
    try:
        party_side.check_policy(party_side.party_policy(context.node_config), None, False, "federated evaluation")
        party_ledger.record_round(context, config, "evaluation", None, "federated evaluation (its sums carry no noise)")
        with message_timing.stage("evaluation"):
            documents = agreed_documents(context, config, str(request[CONFIG]["vocabulary"]))
            return documents.scorer.scores(request), ""
    except UserInputError as exc:
        log(ERROR, "flower-topics: evaluation: %s", exc)
        return None, f"evaluation: {party_side.server_reason(exc, context.node_config)}"
    except (KeyError, TypeError, ValueError) as exc:  # not an evaluate request (a record or key missing)
        log(ERROR, "flower-topics: evaluation: a malformed request (%s: %s)", type(exc).__name__, exc)
        return None, "evaluation: a malformed request"


def secure_sum_stage(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """A stage of the secure sum (:mod:`flower_topics.secure_sum.party`): keys, shares or unmask."""
    from flower_topics.secure_sum import party as secure_party

    policy = party_side.party_policy(context.node_config)
    answer = secure_party.answer(context.state, context.node_id, msg.content[CONFIG], policy.tolerance)
    return Message(content=RecordDict({CONFIG: ConfigRecord(answer)}), reply_to=msg)


def send_candidates(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """The agreement stage's first message: this party's candidate words (see :mod:`flower_topics.federation.vocabulary_agreement`)."""
    request = msg.content[CONFIG]
    private = str(request["mode"]) == "private"
    party = party_side.party_facts(None, msg, context)
    party_side.check_policy(party.policy, None, private, "the union vocabulary agreement (exact document frequencies)")
    party_side.check_once(party, VOCABULARY, "vocabulary agreement", "its vocabulary")
    documents = node_documents(context, config)
    if private and party.secure is not None:
        return send_secure_counts(msg, context, config, documents, party)
    if private:
        from flower_topics.privacy.set_union import release_vocabulary

        rng = vocabulary_rng(context, config, party)
        epsilon, delta = float(request["epsilon"]), float(request["delta"])
        party_side.record_release(context.state, AccountedRelease(VOCABULARY, party_ledger.VOCABULARY,
                                                                  Release(APPROX_DP, epsilon=epsilon, delta=delta)))
        ids, counts = release_vocabulary(documents.corpus.doc_term_matrix(), epsilon, delta,
                                         int(request["max-words"]), rng, noise=str(request["noise"]))
        words, metrics, curated = tuple(documents.corpus.vocabulary[i] for i in ids), {}, False
    else:
        floor = int(node_options(context.node_config).get("min-party-df", NODE_OPTIONS["min-party-df"].default))
        candidates = documents.candidates(floor)  # the party's own floor, before anything leaves it
        words, counts, curated = candidates.words, candidates.doc_freq, candidates.curated
        metrics = {"num-documents": candidates.n_docs}
    return Message(content=RecordDict({
        UPDATE: ArrayRecord({agreement.DOC_FREQ: Array(np.asarray(counts))}),
        METRICS: MetricRecord(metrics),
        SENDER: ConfigRecord({"method": agreement.METHOD}),
        CONFIG: ConfigRecord({agreement.WORDS: agreement.join_words(words), "curated": bool(curated)}),
    }), reply_to=msg)


def vocabulary_rng(context: Context, config: Mapping[str, Any], party: PartyFacts) -> np.random.Generator:
    """The randomness of this party's next vocabulary release: a stream of its own, and a fresh one for each
    vocabulary release it has made (``party``'s account), so a secret seed never repeats a draw."""
    made = len(party.account.of_kind(VOCABULARY))
    return np.random.default_rng(np.random.SeedSequence([party_seed(context, config, private=True),
                                                         VOCABULARY_STREAM, made]))


def send_secure_counts(msg: Message, context: Context, config: Mapping[str, Any], documents: NodeDocuments,
                       party: PartyFacts) -> Message:
    """``private`` under secure aggregation: this party's bounded document frequencies over the public
    candidates, plus its share of the Skellam noise, masked (:mod:`flower_topics.privacy.secure_vocabulary`)."""
    from flower_topics.privacy import secure_vocabulary
    from flower_topics.privacy.skellam_mechanism import largest_entry, skellam_noise
    from flower_topics.secure_sum import party as secure_party

    request, record = msg.content[CONFIG], msg.content[secure_sum.ROUND_RECORD]
    facts = party.secure
    epsilon, delta, max_words = float(request["epsilon"]), float(request["delta"]), int(request["max-words"])
    variance = facts.noise_share * secure_vocabulary.noise_variance(epsilon, delta, max_words)
    largest = largest_entry(documents.corpus.n_docs, variance ** 0.5)
    if largest > facts.entry_limit:
        raise UserInputError(f"secure sum: a document frequency of this party's could reach {largest:.3g}, over "
                             f"{facts.entry_limit}; use a larger secure-aggregation-bits")
    rng = vocabulary_rng(context, config, party)
    counts = secure_vocabulary.party_counts(documents.corpus.doc_term_matrix(), documents.corpus.vocabulary,
                                            split_words(str(request["candidates"])), max_words, rng)
    noisy = counts + skellam_noise(counts.shape, variance, rng)
    party_side.record_release(context.state, AccountedRelease(VOCABULARY, party_ledger.VOCABULARY,
                                                              Release(APPROX_DP, epsilon=epsilon, delta=delta),
                                                              secure=True, noise_share=facts.noise_share))
    masked = secure_party.mask_update(context.state, context.node_id, record, noisy)
    return Message(content=RecordDict({
        UPDATE: ArrayRecord({secure_sum.MASKED_KEY: Array(masked)}),
        METRICS: MetricRecord({}),
        SENDER: ConfigRecord({"method": agreement.METHOD}),
    }), reply_to=msg)


def accept_vocabulary(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """The agreement stage's second message: map this party's documents onto the agreed vocabulary."""
    request = msg.content[CONFIG]
    words = split_words(str(request[agreement.WORDS]))
    fingerprint = vocabulary_fingerprint(words)
    if fingerprint != str(request["vocabulary"]):
        raise UserInputError("the vocabulary message is corrupt: its words do not match its fingerprint")
    context.state[VOCABULARY_STATE] = ConfigRecord({"words": str(request[agreement.WORDS]), "fingerprint": fingerprint})
    agreed_documents(context, config, fingerprint)  # fails here, with the reason, if no document keeps a word
    own = bool(node_options(context.node_config).get("dataset"))  # its own file, or a share of the run's dataset
    return Message(content=RecordDict({METRICS: MetricRecord({agreement.NODE_CORPUS: int(own)})}), reply_to=msg)


def score_model(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """Federated evaluation: this party's sums over its own documents (:mod:`flower_topics.evaluation.federated`);
    refused by a party that requires a document-level guarantee (the sums carry no noise)."""
    party_side.check_policy(party_side.party_policy(context.node_config), None, False, "federated evaluation")
    documents = agreed_documents(context, config, str(msg.content[CONFIG]["vocabulary"]))
    sums = documents.scorer.scores(msg.content)
    return Message(content=sums, reply_to=msg)


def score_model_keeping_theta(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """:func:`score_model`; then, if the node config sets ``theta-out``, this party's documents' topics are
    written there, on the party (:func:`flower_topics.federation.party_theta.keep_party_theta`); the reply is unchanged."""
    reply = score_model(msg, context, config)
    if node_options(context.node_config).get("theta-out"):
        from flower_topics.federation.party_theta import keep_party_theta

        keep_party_theta(msg, context, config)
    return reply


def send_prevalence(msg: Message, context: Context, config: Mapping[str, Any]) -> Message:
    """The stage after the last round: this party's topic prevalence by period, under its method's release rule
    (:mod:`flower_topics.federation.party_prevalence`); the method's local state (its releases) is kept."""
    from flower_topics.federation import party_prevalence

    if VOCABULARY_STATE not in context.state.config_records:
        raise UserInputError("prevalence: this node has no agreed vocabulary (it did not take part in the run)")
    spec = METHODS.get(str(msg.content[CONFIG]["method"]))
    if spec is None:
        raise UserInputError(f"prevalence: unknown method {str(msg.content[CONFIG]['method'])!r}")
    party = party_side.party_facts(spec, msg, context)
    party_side.check_policy(party.policy, spec.name, True, "prevalence")  # its release rule's accounting: answer
    party_side.check_once(party, PREVALENCE, "prevalence", "its topic prevalence")
    documents = node_documents(context, config)
    state_name = f"{spec.name}-state"
    state = load_state(context, state_name, spec.local_step().state())
    seed = party_seed(context, config, private=spec.private)
    with message_timing.stage("compute"):
        reply, state = party_prevalence.answer(msg, context, config, spec, documents, msg.content[CONFIG], party,
                                               state, seed)
    save_state(context, state_name, state)
    return reply


@dataclass(frozen=True)
class Handler:
    """One message type's handler: refuses a request with a party-side key, restores and keeps this party's state
    around ``step``, and turns a refusal into an error reply with its reason only.

    A module-level class rather than a closure: Flower's simulation engine pickles the ClientApp with every
    message, and an instance of it travels as a reference to this class and its fields, not as code.

    Parameters
    ----------
    name : str
        What the handler serves, in its log lines and error replies.
    step : callable
        ``step(msg, context, config)``, the reply.
    keeps_state : bool
        Whether this party's state is kept (``party_state.persist``) after the step.
    run_config : Mapping, optional
        A fixed run config (:func:`make_client_app`); by default the run's.
    """

    name: str
    step: Callable[..., Message]
    keeps_state: bool = True
    run_config: Mapping[str, Any] | None = None

    def __call__(self, msg: Message, context: Context) -> Message:
        name, step, run_config = self.name, self.step, self.run_config
        started = message_timing.begin()
        try:
            party_side.check_request(msg)  # before anything else: no party-side key, no secure request unmasked
            raw = context.run_config if run_config is None else run_config
            config = data_config(raw)
            with message_timing.stage("state"):
                if party_state.restore(context):  # a restarted SuperNode's state, from its state-dir
                    log(INFO, "flower-topics: restored this party's state of run %d from its state-dir",
                        context.run_id)
            reply = party_ledger.guarded(step, msg, context, config, raw)
            if self.keeps_state:
                with message_timing.stage("state"):
                    party_state.persist(context)
            return reply
        except UserInputError as exc:
            log(ERROR, "flower-topics: %s: %s", name, exc)
            reason = party_side.server_reason(exc, context.node_config)  # the reason only: no path, cap or spend
            return Message(error=Error(code=BAD_INPUT, reason=f"{name}: {reason}"), reply_to=msg)
        except Exception as exc:  # a fault: the party's log keeps it; its text (values, paths) stays here
            log(ERROR, "flower-topics: %s: %s: %s", name, type(exc).__name__, exc, exc_info=exc)
            raise RuntimeError(f"{name}: {type(exc).__name__} on this party (its log has the details)") from None
        finally:
            message_timing.record(name, started)


def make_client_app(run_config: Mapping[str, Any] | None = None) -> ClientApp:
    """A ClientApp with a ``train.<method>`` handler for every registered method.

    Parameters
    ----------
    run_config : Mapping, optional
        A fixed run config, for ``flwr.simulation.run_simulation`` (which passes an
        empty one); by default the config of the run is used.
    """
    client = ClientApp()
    handler = functools.partial(Handler, run_config=run_config)
    for spec in METHODS.values():
        client.train(spec.name)(handler(spec.name, functools.partial(local_round, spec)))
    client.query("candidates")(handler("vocabulary agreement", send_candidates))
    client.query("secure_sum")(handler("secure sum", secure_sum_stage, keeps_state=False))
    client.query("vocabulary")(handler("vocabulary agreement", accept_vocabulary))
    client.evaluate()(handler("evaluation", score_model_keeping_theta))
    client.query("prevalence")(handler("prevalence", send_prevalence))
    return client


app = make_client_app()
