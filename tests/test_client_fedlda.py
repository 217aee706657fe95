"""FedLDA client (Algorithm 1, without Flower): what leaves the client, padding, perturbation, rollback."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.clients.fedlda import FedLDAClientState, train_round
from flower_topics.wire.fedlda import FedLDASettings
from flower_topics.data.corpus import Corpus
from flower_topics.models.update_tuples import Tuples, apply_tuples

K, V = 3, 12


def _corpus(seed: int = 0, n_docs: int = 10) -> Corpus:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, V, size=rng.integers(5, 20)) for _ in range(n_docs)]
    return Corpus.from_documents(docs, [f"w{i}" for i in range(V)])


def _phi(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(V), K)


def _run(corpus, state, r, applied, **settings):
    return train_round(corpus, _phi(), state, server_round=r, last_applied_round=applied,
                       settings=FedLDASettings(n_topics=K, alpha=0.1, **settings), seed=3)


def _counts(view, corpus):
    counts = np.zeros((K, V), dtype=np.int64)
    keep = view < K
    np.add.at(counts, (view[keep], corpus.tokens[keep]), 1)
    return counts


def _open_dummies(state) -> np.ndarray:
    """The count change of the cancelling dummies not reversed yet: -1 at (a, w), +1 at (b, w)."""
    change = np.zeros((K, V), dtype=np.int64)
    if state.pending_dummies is not None and len(state.pending_dummies):
        _, w, a, b = np.asarray(state.pending_dummies).T
        np.subtract.at(change, (a, w), 1)
        np.add.at(change, (b, w), 1)
    return change


@pytest.mark.parametrize("dummies", ["noop", "cancelling"])
def test_without_perturbation_the_servers_counts_are_the_clients_server_view(dummies):
    """Unsampled changes stay pending: after any number of rounds the applied tuples sum
    to the counts of the topics the client says the server holds, plus, with cancelling
    dummies, the moves of the dummies it has not reversed yet (exactly, up to the tuples
    the server skipped)."""
    corpus = _corpus()
    state = FedLDAClientState()
    counts = np.zeros((K, V), dtype=np.int64)
    skipped = sent = 0
    for r in range(1, 8):
        update = _run(corpus, state, r, r - 1, mechanism="none", sample_ratio=0.5, dummies=dummies)
        if r == 1:
            assert np.all(update.tuples[:, 1] == K)  # every word enters the counts
        skipped += apply_tuples(counts, Tuples.from_rows(update.tuples))
        sent += update.tuples.shape[0]
        drift = np.abs(counts - _counts(state.pending, corpus) - _open_dummies(state)).sum()
        assert drift <= 2 * skipped  # a tuple the server skipped moves its view of one word, nothing else
    if dummies == "noop":
        assert skipped == 0
    else:  # new dummies leave only cells the party's own counts back; on 12 words a few still collide
        assert skipped <= 0.02 * sent
    assert counts.sum() < corpus.n_tokens or np.all(state.pending < K)
    pending = np.mean(state.pending != state.z)
    assert pending < 0.5  # most changes reach the server within a few rounds


def test_every_document_sends_l_tuples_and_the_reply_is_shuffled():
    corpus = _corpus()
    lengths = np.diff(corpus.doc_ptr)
    update = _run(corpus, FedLDAClientState(), 1, 0, sample_ratio=0.7)
    assert update.tuples.shape[0] == int(np.maximum(1, np.floor(0.7 * lengths + 1e-9)).sum())
    assert update.n_docs == corpus.n_docs and update.max_tuples_per_doc == int(np.floor(0.7 * lengths.max() + 1e-9))
    public = _run(corpus, FedLDAClientState(), 1, 0, pad_length=30, sample_ratio=0.5)
    assert public.tuples.shape[0] == 15 * corpus.n_docs and public.max_tuples_per_doc == 15  # lengths hidden
    # shuffled: the entering tuples (k_old = K) are not grouped first, they are spread over the reply
    first_round = public.tuples
    real_positions = np.flatnonzero(first_round[:, 1] == K)
    assert 0 < real_positions.size < first_round.shape[0]
    assert real_positions.mean() == pytest.approx((first_round.shape[0] - 1) / 2, rel=0.25)


def test_rrp_changes_about_eta_of_the_words_and_nothing_else():
    corpus = _corpus(n_docs=200)
    plain = _run(corpus, FedLDAClientState(), 1, 0, mechanism="none", sample_ratio=1.0)
    noisy = _run(corpus, FedLDAClientState(), 1, 0, mechanism="rrp", epsilon=1.0, delta=0.1, gamma=1.0,
                 sample_ratio=1.0)
    # same seed, same sampling: the tuples' topics agree as multisets; only words may differ
    assert sorted(map(tuple, plain.tuples[:, 1:])) == sorted(map(tuple, noisy.tuples[:, 1:]))
    changed = 1 - np.mean(np.sort(plain.tuples[:, 0]) == np.sort(noisy.tuples[:, 0]))
    assert changed > 0  # some words replaced


@pytest.mark.parametrize("dummies", ["noop", "cancelling"])
def test_a_lost_reply_rolls_back_the_server_view_only(dummies):
    """Round 2's reply is lost: the client's server view and its open dummies roll back to
    round 1's, and the server's counts stay those of the applied replies."""
    corpus = _corpus()
    state = FedLDAClientState()
    counts = np.zeros((K, V), dtype=np.int64)
    skipped = 0
    for r, applied, keep in [(1, 0, True), (2, 1, False), (3, 1, True), (4, 3, True)]:
        update = _run(corpus, state, r, applied, mechanism="none", dummies=dummies)
        if keep:  # round 2's reply is lost: the server applies rounds 1, 3, 4
            skipped += apply_tuples(counts, Tuples.from_rows(update.tuples))
    drift = np.abs(counts - _counts(state.pending, corpus) - _open_dummies(state)).sum()
    assert drift <= 2 * skipped and skipped <= 3
    _run(corpus, state, 5, 0)  # the server applied nothing of this client: start over
    assert np.all(state.applied == K)


def test_bad_phi_shape_is_refused():
    with pytest.raises(ValueError, match="phi has shape"):
        train_round(_corpus(), np.ones((K, V + 1)) / (V + 1), FedLDAClientState(), server_round=1,
                    last_applied_round=0, settings=FedLDASettings(n_topics=K, alpha=0.1), seed=0)


@pytest.mark.parametrize("resend", [True, False])
def test_a_move_whose_word_was_replaced_stays_pending_when_resend_replaced(resend):
    """kRR at eps 0.5 over 12 words keeps a word with probability 0.13. Entries are never resent
    (round 1 enters every token once, whatever its word became); in round 2, with resend-replaced,
    only the moves that reached the server with their true word advance the client's server view."""
    corpus = _corpus()
    state = FedLDAClientState()
    settings = dict(mechanism="krr", epsilon=0.5, sample_ratio=1.0, resend_replaced=resend, dummies="noop")
    first = _run(corpus, state, 1, 0, **settings)
    assert np.all(first.tuples[:, 1] == K) and first.tuples.shape[0] == corpus.n_tokens
    second = _run(corpus, state, 2, 1, **settings)
    assert np.all(state.applied < K)  # every token entered once
    moves = int(np.sum(second.tuples[:, 1] != second.tuples[:, 2]))  # no-op dummies have k_old == k_new
    advanced = int(np.sum(state.pending != state.applied))
    assert moves > 20
    if resend:
        assert 0 < advanced < 0.4 * moves
    else:
        assert advanced == moves
