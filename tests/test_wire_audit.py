"""Wire audit: everything each ClientApp sends in real runs of every method (agreement, training,
evaluation) is on the documented list of what may leave a party; a leaking client fails it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ConfigRecord, Message, MetricRecord, RecordDict

from flower_topics.evaluation import federated as evaluation
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import agreed_documents, data_config, make_client_app
from flower_topics.methods import METHODS
from flower_topics.metrics.coherence import coherence_word_ids
from flower_topics.metrics.pooled_sums import cooccurrence
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.wire import lda as lda_wire
from flower_topics.wire.protocol import BAD_INPUT, vocabulary_fingerprint
from tests.test_trust_boundary import BASE, TOPICS, write_corpus
from tests.wire_audit import CARRIED_KIND, Audit, AuditError, leaky, party_sizes


def _run(tmp_path, method, client=None, **extra):
    a = write_corpus(tmp_path / "a.jsonl", ["pets", "money"], 50, seed=1)
    b = write_corpus(tmp_path / "b.jsonl", ["space", "money"], 40, seed=2)
    if method == "dplda":  # only an accounted or public vocabulary (a public file: no candidates), no evaluation
        vocabulary = tmp_path / "vocabulary.txt"
        vocabulary.write_text("\n".join(w for label in ("pets", "money", "space") for w in TOPICS[label]))
        extra = {"vocabulary": str(vocabulary), "federated-eval": False, **extra}
    config = {**BASE, "method": method, "pctd.consistency": 0.0, "output-dir": str(tmp_path / method), **extra}
    app = make_client_app(config)
    audit = Audit()
    grid = InProcessGrid(audit.wrap(client(app) if client else app), [{"dataset": str(a)}, {"dataset": str(b)}],
                         config)
    try:
        run_server(grid, config)
    except RuntimeError:  # the strategy rejected every leaking reply; the audit still has the messages
        assert client is not None
    sizes = party_sizes(lambda context: agreed_documents(context, data_config(config)))
    return audit, sizes


def _documents(context):
    return agreed_documents(context, data_config({**BASE}))


@pytest.mark.parametrize("method", list(METHODS))
def test_every_message_a_party_sends_is_on_the_documented_list(tmp_path, method):
    audit, sizes = _run(tmp_path, method)
    seen = audit.check(sizes, _documents)
    stages = {"query.vocabulary": 2, f"train.{method}": 6}
    # 3 rounds scored: with evaluation_with_train, rounds 1 and 2 by the training messages of rounds 2 and 3 and
    # round 3 by its own message; without it, each round by its own message
    carried = METHODS[method].strategy_class().evaluation_with_train
    scored = {"evaluate": 2, CARRIED_KIND: 4} if carried else {"evaluate": 6}
    stages.update({} if method == "dplda" else {"query.candidates": 2, **scored})
    assert seen == stages


def test_the_audit_fails_on_a_party_that_sends_its_document_lengths(tmp_path):
    audit, sizes = _run(tmp_path, "lda", client=lambda app: leaky(app, "doc-lengths", np.arange(3)))
    with pytest.raises(AuditError, match="unexpected \\['doc-lengths'\\]"):
        audit.check(sizes)


def test_the_audit_fails_on_a_party_that_sends_words(tmp_path):
    audit, sizes = _run(tmp_path, "lda", client=lambda app: leaky(app, "sender", ConfigRecord(
        {"method": "lda", "note": "cat dog"})))
    with pytest.raises(AuditError, match="'note'"):
        audit.check(sizes)


def test_the_audit_fails_on_a_per_document_statistic(tmp_path):
    """Even under an allowed key, an array as long as the party's documents is refused (its shape)."""
    def per_document(app):
        def client(msg, context):
            reply = app(msg, context)
            if msg.metadata.message_type == "evaluate":
                n = agreed_documents(context, data_config({**BASE})).training.n_docs
                reply.content["update"]["doc-freq"] = type(reply.content["update"]["doc-freq"])(np.zeros(n, np.int64))
            return reply
        return client

    audit, sizes = _run(tmp_path, "lda", client=per_document)
    with pytest.raises(AuditError, match="'doc-freq' has shape"):
        audit.check(sizes)


def test_an_undocumented_free_axis_as_long_as_the_documents_fails_the_audit(tmp_path, monkeypatch):
    """A protocol that leaves an axis free without documenting it: per-document lengths there are caught."""
    import tests.wire_audit as wire_audit

    monkeypatch.setattr(wire_audit, "DOCUMENTED_FREE_AXES", {})  # FedLDA's tuple count, undocumented
    audit, _ = _run(tmp_path, "fedlda")
    with pytest.raises(AuditError, match="as many as the party's documents or tokens"):
        audit.check(lambda context: {len_ for len_ in _tuple_counts(audit)})


def _tuple_counts(audit):
    return [reply.content["update"]["tuples"].numpy().shape[0] for request, reply, _ in audit.sent
            if request.metadata.message_type == "train.fedlda"]


# ----------------------------------------------------------------------------- a hostile server


def _hostile_setup(tmp_path):
    """Two parties after the agreement; party a (node 101) has a rare word, 'smith', in two documents."""
    a = write_corpus(tmp_path / "a.jsonl", ["pets", "money"], 50, seed=1)
    with a.open("a", encoding="utf-8") as fh:
        for text in ("Mrs Smith took a loan.", "The vet saw Mrs Smith."):
            fh.write(json.dumps({"text": text, "label": "pets"}) + "\n")
    b = write_corpus(tmp_path / "b.jsonl", ["space", "money"], 40, seed=2)
    config = {**BASE, "output-dir": str(tmp_path / "hostile")}
    audit = Audit()
    grid = InProcessGrid(audit.wrap(make_client_app(config)), [{"dataset": str(a)}, {"dataset": str(b)}], config)
    vocabulary = agree_vocabulary(grid, config).vocabulary
    assert "smith" in vocabulary
    return grid, audit, vocabulary, config


def _honest_phi(vocabulary):
    """One topic over the pets words (a model a server could have trained), smoothed: a valid distribution."""
    phi = np.full((1, len(vocabulary)), 1e-3)
    for word in ("cat", "dog", "puppy", "kitten", "leash", "vet", "fur", "bank", "loan", "cash"):
        phi[0, vocabulary.index(word)] = 1.0
    return phi / phi.sum(axis=1, keepdims=True)


def _crafted_request(vocabulary, phi, word_ids=None):
    settings = evaluation.EvaluationSettings(every=1, num_rounds=1, n_iter=5)
    content = evaluation.request(_honest_phi(vocabulary), settings, vocabulary_fingerprint(vocabulary), 1)
    content["arrays"][evaluation.PHI_KEY] = Array(np.asarray(phi))  # as the server crafted it, not normalized
    if word_ids is not None:  # what the server used to send beside phi, here chosen by the server
        content["arrays"]["word-ids"] = Array(np.asarray(word_ids, dtype=np.int64))
    return content


def _evaluate(grid, vocabulary, phi, word_ids=None):
    (reply,) = grid.send_and_receive([Message(content=_crafted_request(vocabulary, phi, word_ids),
                                              message_type=evaluation.MESSAGE_TYPE, dst_node_id=101)])
    return reply


def _train_carrying(grid, vocabulary, phi, word_ids=None):
    """An honest ``train.lda`` message of round 2 that carries the crafted evaluation request."""
    settings = lda_wire.LDASettings(n_topics=1, alpha=0.1, beta=0.01, local_sweeps=1)
    content = RecordDict({
        "config": ConfigRecord({**settings.to_record(), "vocabulary": vocabulary_fingerprint(vocabulary),
                                "server-round": 2, "last-applied-round": 0}),
        "arrays": lda_wire.counts_arrays(np.zeros((1, len(vocabulary)), dtype=np.int64)),
    })
    evaluation.carry_request(content, _crafted_request(vocabulary, phi, word_ids))
    (reply,) = grid.send_and_receive([Message(content=content, message_type="train.lda", dst_node_id=101)])
    assert not reply.has_error(), reply.error.reason  # the party trains whatever the evaluation request is
    return reply


def _answers(reply):
    """An ``evaluate`` reply, or the evaluation a training reply carries, as (error line or None, update)."""
    if reply.metadata.message_type == evaluation.MESSAGE_TYPE:
        return (reply.error.reason if reply.has_error() else None), (None if reply.has_error()
                                                                     else reply.content["update"])
    carried = evaluation.split_carried(reply.content)[1]
    if evaluation.ERROR_RECORD in carried.config_records:
        assert set(carried.keys()) == {evaluation.ERROR_RECORD}  # the reason only, no counts
        return str(carried[evaluation.ERROR_RECORD]["reason"]), None
    return None, carried["update"]


SEND = {"evaluate": _evaluate, "with training": _train_carrying}


@pytest.mark.parametrize("send", list(SEND))
def test_a_hostile_server_naming_rare_word_ids_does_not_get_their_co_document_counts(tmp_path, send):
    """The server sends a valid model but names other word ids (the rare 'smith' among them), in an ``evaluate``
    message or carried by a training message: the party answers only the counts of that model's own top words, or
    refuses; never the named words' counts."""
    grid, audit, vocabulary, config = _hostile_setup(tmp_path)
    phi = _honest_phi(vocabulary)
    top = coherence_word_ids(phi, 10)[1]
    others = np.setdiff1d(np.arange(len(vocabulary)), top)
    smith = vocabulary.index("smith")
    rare = np.sort(np.concatenate([[smith], others[others != smith][: top.size - 1]]))
    assert smith in rare and rare.size == top.size  # the same shape as an honest reply
    reply = SEND[send](grid, vocabulary, phi, rare)
    training = _documents(grid.contexts[101]).training
    error, update = _answers(reply)
    if error is not None:
        assert "\n" not in error and (send != "evaluate" or reply.error.code == BAD_INPUT)
    else:
        sent = update[evaluation.DOC_FREQ].numpy()
        np.testing.assert_array_equal(sent, cooccurrence(training, top).doc_freq)
    audit.check(party_sizes(_documents), _documents)  # every reply, the agreement's included, passes the audit


@pytest.mark.parametrize("craft, why", [
    (lambda phi: phi * 3.0, "rows do not sum to 1"),
    (lambda phi: np.where(np.arange(phi.shape[1]) == 0, -0.1, phi), "negative"),
    (lambda phi: np.where(np.arange(phi.shape[1]) == 0, np.nan, phi), "finite"),
    (lambda phi: np.hstack([phi, np.zeros((1, 1))]), "columns"),
    (lambda phi: phi[0], "K x V"),
])
@pytest.mark.parametrize("send", list(SEND))
def test_a_party_refuses_a_model_that_is_not_a_topic_word_matrix_over_its_vocabulary(tmp_path, craft, why, send):
    """A crafted phi (unnormalized rows that put rare words on top, negative or NaN entries, another V): one
    BAD_INPUT line, no counts; carried by a training message, one line in the (valid) training reply, no counts."""
    grid, audit, vocabulary, _ = _hostile_setup(tmp_path)
    reply = SEND[send](grid, vocabulary, craft(_honest_phi(vocabulary)))
    error, update = _answers(reply)
    assert error is not None and update is None, reply
    assert why in error and "\n" not in error
    assert send != "evaluate" or reply.error.code == BAD_INPUT
    audit.check(party_sizes(_documents), _documents)


@pytest.mark.parametrize("kind", ["evaluate", "train.lda"])
def test_the_audit_fails_on_a_party_that_answers_counts_of_other_words(tmp_path, kind):
    """Same shapes, other words, in an ``evaluate`` reply or the evaluation a training reply carries: only
    recomputing the counts from the party's documents catches it."""
    record = "update" if kind == "evaluate" else f"{evaluation.CARRIED}update"

    def other_words(app):
        def client(msg, context):
            reply = app(msg, context)
            if msg.metadata.message_type == kind and not reply.has_error() and record in reply.content:
                training = _documents(context).training
                n = reply.content[record][evaluation.DOC_FREQ].numpy().size
                n_pairs = reply.content[record][evaluation.CO_DOC_FREQ].numpy().size
                co = cooccurrence(training, np.arange(training.n_words)[::-1][:n])
                first, second = np.triu_indices(n, 1)
                reply.content[record][evaluation.DOC_FREQ] = Array(co.doc_freq)
                reply.content[record][evaluation.CO_DOC_FREQ] = Array(co.co_doc_freq[first, second][:n_pairs])
            return reply
        return client

    audit, sizes = _run(tmp_path, "lda", client=other_words)
    audit.check(sizes)  # keys, dtypes and shapes are all as documented
    with pytest.raises(AuditError, match="not the top words of the model it was sent"):
        audit.check(sizes, _documents)


def test_the_audit_fails_on_evaluation_sums_a_training_message_did_not_ask_for(tmp_path):
    """A party that adds evaluation records to a training reply whose message carried no evaluation (round 1)."""
    def unasked(app):
        def client(msg, context):
            reply = app(msg, context)
            if msg.metadata.message_type == "train.lda" and int(msg.content["config"]["server-round"]) == 1:
                reply.content[f"{evaluation.CARRIED}metrics"] = MetricRecord({"n-docs": 50})
            return reply
        return client

    audit, sizes = _run(tmp_path, "lda", client=unasked)
    with pytest.raises(AuditError, match="without one"):
        audit.check(sizes)


@pytest.mark.parametrize("method, epoch", [("dplda", 10), ("lda", 10), ("dplda", 1)])
def test_under_secure_aggregation_a_party_sends_only_keys_ciphertexts_shares_and_masked_sums(tmp_path, method, epoch):
    """3 rounds, 2 parties: with a key epoch of 10 rounds, 'keys' and 'shares' in round 1 only ('check' and
    'unmask' every round: 2 x 2 + 3 x 2 x 2 secure-sum messages); with 1, every round (3 x 4 x 2)."""
    audit, sizes = _run(tmp_path, method, **{"secure-aggregation": True, "secure-aggregation-tolerance": 0,
                                             "federated-eval": False, "secure-aggregation-epoch": epoch})
    seen = audit.check(sizes, _documents)
    agreement = {"query.candidates": 2} if method == "lda" else {}  # lda: the union agreement's two stages
    assert seen == {**agreement, "query.vocabulary": 2, f"train.{method}": 6,
                    "query.secure_sum": 16 if epoch > 1 else 24}
    stages: dict[int, list[str]] = {}
    for request, _, _ in audit.sent:
        if request.metadata.message_type == "query.secure_sum":
            config = request.content["config"]
            stages.setdefault(int(config["round"]), []).append(str(config["stage"]))
    first, later = sorted(["keys", "shares", "check", "unmask"] * 2), sorted(["check", "unmask"] * 2)
    assert {r: sorted(s) for r, s in stages.items()} == {1: first, 2: first if epoch == 1 else later,
                                                         3: first if epoch == 1 else later}
    for request, reply, _ in audit.sent:
        if request.metadata.message_type == f"train.{method}":
            (masked,) = reply.content["update"].values()
            assert masked.numpy().dtype == np.uint32 and dict(reply.content["metrics"]) == {}


def test_the_audit_fails_on_a_party_that_reveals_both_shares_of_a_peer(tmp_path):
    def both(app):
        def client(msg, context):
            reply = app(msg, context)
            if msg.metadata.message_type == "query.secure_sum" and str(msg.content["config"]["stage"]) == "unmask":
                record = reply.content["config"]
                record["key-shares"] = [s or b"x" for s in record["key-shares"]]
            return reply
        return client

    audit, sizes = _run(tmp_path, "dplda", client=both,
                        **{"secure-aggregation": True, "secure-aggregation-tolerance": 0})
    with pytest.raises(AuditError, match="wrong shares"):
        audit.check(sizes)
