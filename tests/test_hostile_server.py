"""A hostile server against real parties: the package's ClientApp on the in-process grid, with a grid that rewrites
the server's messages before they reach the parties (adds party-side keys, removes records, sends extreme numbers,
names another method, repeats releases, lists fake participants). Each party refuses in one line or answers within
its own policy, whatever the message says."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from flower_topics import secure_sum
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.wire.protocol import CONFIG, UPDATE
from tests.test_prevalence_run import GROUP_A, GROUP_B, PARTIES, _party_file

Rewrite = Callable[[Message], Message]


class HostileGrid(InProcessGrid):
    """In-process parties behind a server whose messages of chosen types are rewritten before they arrive; every
    message a party received is kept with its reply (:attr:`log`)."""

    def __init__(self, client_app, node_configs, run_config, rewrite: dict[str, Rewrite] | None = None) -> None:
        super().__init__(client_app, node_configs, run_config)
        self.rewrite = rewrite or {}
        self.log: list[tuple[Message, Message]] = []

    def _deliver(self, messages: Iterable[Message]) -> list[Message]:
        replies = []
        for msg in messages:
            change = self.rewrite.get(msg.metadata.message_type)
            sent = change(msg) if change else msg
            for reply in super()._deliver([sent]):
                self.log.append((sent, reply))
                replies.append(reply)
        return replies

    def replies(self, kind: str) -> list[Message]:
        """The replies to every message of type ``kind``."""
        return [reply for msg, reply in self.log if msg.metadata.message_type == kind]

    def sent(self, kind: str) -> list[Message]:
        """Every message of type ``kind`` the parties received."""
        return [msg for msg, _ in self.log if msg.metadata.message_type == kind]

    def send(self, msg: Message, node_id: int, **config) -> Message:
        """``msg`` again, to ``node_id``, its config record changed by ``config``: the party's reply."""
        content = RecordDict({name: record for name, record in msg.content.items() if name != CONFIG})
        content[CONFIG] = ConfigRecord({**dict(msg.content[CONFIG]), **config})
        again = Message(content=content, dst_node_id=node_id, message_type=msg.metadata.message_type)
        return self.send_and_receive([again])[0]


def _with_config(**extra) -> Rewrite:
    def change(msg: Message) -> Message:
        msg.content[CONFIG] = ConfigRecord({**dict(msg.content[CONFIG]), **extra})
        return msg
    return change


def _without(record: str, **extra) -> Rewrite:
    def change(msg: Message) -> Message:
        if record in msg.content:
            del msg.content[record]
        return _with_config(**extra)(msg)
    return change


def _refused(reply: Message, *words: str) -> str:
    """The one-line reason of a refusal (asserting it is one, with ``words`` in it, and carries no update)."""
    assert reply.has_error(), "the party answered"
    assert not reply.has_content()
    reason = reply.error.reason
    assert "\n" not in reason and all(word in reason for word in words), reason
    return reason


@pytest.fixture
def parties(tmp_path):
    """Three parties' dated files and a public vocabulary file: ``(node configs, vocabulary path)``."""
    rng = np.random.default_rng(5)
    nodes = [{"dataset": _party_file(tmp_path, f"party{i}", rng, dated, undated), "date-column": "date",
              "num-partitions": len(PARTIES)} for i, (dated, undated) in enumerate(PARTIES)]
    words = tmp_path / "vocabulary.txt"
    words.write_text("\n".join(GROUP_A + GROUP_B) + "\n", encoding="utf-8")
    return nodes, str(words)


def _dplda(tmp_path, words: str, **extra) -> dict:
    return {"dataset": "party-files", "num-topics": 2, "min-df": 1, "stopwords": "none", "date-column": "date",
            "method": "dplda", "vocabulary": words, "federated-eval": False, "dplda.sample-rate": 0.5,
            "dplda.epsilon": 3.0, "num-rounds": 2, "dplda.init": "random", "output-dir": str(tmp_path / "run"),
            **extra}


def _run(grid: HostileGrid, config: dict) -> None:
    """The run as far as the parties let it go (a refused round stops it: that is the point)."""
    try:
        run_server(grid, config)
    except Exception:  # noqa: BLE001 - the server's own failure once the parties refuse
        pass


def _grid(nodes, config, rewrite=None, **node_extra) -> HostileGrid:
    return HostileGrid(make_client_app(config), [{**node, **node_extra} for node in nodes], config, rewrite)


# row 1: a secure run's request stripped of its secure-sum round, with a tiny share of the noise in its settings
def test_a_secure_request_without_its_round_and_with_a_server_sent_noise_share_is_refused(tmp_path, parties):
    nodes, words = parties
    config = _dplda(tmp_path, words, **{"secure-aggregation": True})
    strip = _without(secure_sum.ROUND_RECORD, **{"secure-sum.noise-share": 1e-12})
    grid = _grid(nodes, config, {"train.dplda": strip})
    _run(grid, config)
    assert len(grid.replies("train.dplda")) == 3
    for reply in grid.replies("train.dplda"):
        _refused(reply, "secure-sum.noise-share")
    # the round removed alone: still refused, nothing unmasked leaves
    grid = _grid(nodes, config, {"train.dplda": _without(secure_sum.ROUND_RECORD)})
    _run(grid, config)
    for reply in grid.replies("train.dplda"):
        _refused(reply, "no secure-sum round")
    # the prevalence request of a secure run, stripped the same way
    prevalence = {**config, "prevalence-period": "quarter", "prevalence-from": "2020", "prevalence-to": "2021-12"}
    grid = _grid(nodes, prevalence, {"query.prevalence": strip})
    _run(grid, prevalence)
    assert len(grid.replies("query.prevalence")) == 3
    for reply in grid.replies("query.prevalence"):
        _refused(reply, "secure-sum.noise-share")


# row 2: the server tells the party what it has spent
@pytest.mark.parametrize("key, value", [("party.spent-epsilon", -1000.0), ("party.max-epsilon", 1000.0),
                                        ("party.spent-delta", -1.0), ("max-epsilon", 1000.0),
                                        ("secure-sum.entry-limit", 1 << 60)])
def test_a_party_side_key_in_the_servers_settings_is_refused_and_the_partys_cap_holds(tmp_path, parties, key,
                                                                                       value):
    nodes, words = parties
    config = _dplda(tmp_path, words)
    grid = _grid(nodes, config, {"train.dplda": _with_config(**{key: value})}, **{"max-epsilon": 0.5})
    _run(grid, config)
    assert len(grid.replies("train.dplda")) == 3
    for reply in grid.replies("train.dplda"):
        _refused(reply, repr(key))
    # honest settings: the party's own cap (0.5, below one release of this run) refuses the first round
    grid = _grid(nodes, config, **{"max-epsilon": 0.5})
    _run(grid, config)
    for reply in grid.replies("train.dplda"):
        _refused(reply, "over its privacy cap")


# row 3: the private vocabulary request again
def test_a_repeated_vocabulary_release_is_composed_with_fresh_draws_and_refused_under_a_guarantee(tmp_path, parties):
    from flower_topics.wire.agreement import DOC_FREQ

    nodes, _ = parties
    config = {"dataset": "party-files", "min-df": 1, "stopwords": "none", "vocabulary": "private",
              "vocabulary-epsilon": 50.0, "num-topics": 2}
    grid = _grid(nodes, config, **{"secret-seed": 7})
    agree_vocabulary(grid, config)
    request, honest = grid.sent("query.candidates")[0], grid.replies("query.candidates")[0]
    node = request.metadata.dst_node_id
    again = grid.send(request, node)  # the same request: a secret-seeded party draws new noise
    first, second = (reply.content[UPDATE][DOC_FREQ].numpy() for reply in (honest, again))
    assert first.size and second.size and not np.array_equal(first, second)
    from flower_topics.federation.party_side import party_account

    grid.send(request, node, epsilon=0.001)  # at any epsilon: every release is kept in the party's own account
    spent, delta = party_account(grid.contexts[node].state).vocabulary_spent
    assert spent == pytest.approx(50.0 + 50.0 + 0.001, rel=1e-12)
    assert delta == pytest.approx(3 * float(request.content[CONFIG]["delta"]))
    # a party that requires a document-level guarantee makes no release twice
    grid = _grid(nodes, config, **{"require-document-guarantee": True})
    agree_vocabulary(grid, config)
    request = grid.sent("query.candidates")[0]
    _refused(grid.send(request, request.metadata.dst_node_id, epsilon=0.001), "makes no release twice")


def _recorded_lda_run(tmp_path, nodes, words) -> HostileGrid:
    """An honest lda run with federated evaluation and prevalence, every message recorded."""
    config = {"dataset": "party-files", "num-topics": 2, "min-df": 1, "stopwords": "none", "date-column": "date",
              "method": "lda", "vocabulary": words, "num-rounds": 1, "lda.local-sweeps": 2, "eval-iterations": 5,
              "prevalence-period": "quarter", "output-dir": str(tmp_path / "lda-run")}
    grid = _grid(nodes, config)
    run_server(grid, config)
    return grid


# row 4: another method's requests to a party set up for dplda, without a ledger
@pytest.mark.parametrize("policy", [{"require-document-guarantee": True}, {"accept-methods": "dplda"}])
def test_a_party_for_a_document_guarantee_refuses_other_methods_evaluation_and_plain_prevalence(tmp_path, parties,
                                                                                                policy):
    nodes, words = parties
    recorded = _recorded_lda_run(tmp_path, nodes, words)
    kinds = {msg.metadata.message_type for msg, _ in recorded.log}
    assert {"train.lda", "evaluate", "query.prevalence", "query.vocabulary"} <= kinds
    config = _dplda(tmp_path, words)
    grid = _grid(nodes, config, **policy)
    run_server(grid, config)  # an honest dplda run: answered
    assert not any(reply.has_error() for reply in grid.replies("train.dplda"))
    node = next(iter(grid.contexts))
    for kind, words_in_reason in (("train.lda", ()), ("evaluate", ("guarantee",)), ("query.prevalence", ())):
        msg = next(m for m in recorded.sent(kind) if m.metadata.dst_node_id == node)
        if kind == "evaluate" and "accept-methods" in policy:
            continue  # evaluation names no method: only a party that requires the guarantee refuses it
        reply = grid.send(msg, node, vocabulary=str(grid.contexts[node].state["vocabulary"]["fingerprint"]))
        _refused(reply, *words_in_reason)


# row 8: what a refusal tells the server
def test_refusals_tell_the_server_the_reason_only(tmp_path, parties):
    nodes, words = parties
    config = _dplda(tmp_path, words)
    ledger = {"privacy-ledger": str(tmp_path / "ledger.json"), "lifetime-epsilon": 0.4321}
    grid = _grid(nodes, config, **ledger)  # a lifetime cap below one run: refused at the first message
    _run(grid, config)
    reasons = [reply.error.reason for _, reply in grid.log if reply.has_error()]
    own = {"privacy-ledger": str(tmp_path / "ledger.json"), "lifetime-epsilon": 50.0, "max-epsilon": 0.1234}
    grid = _grid(nodes, config, **own)  # a round over the party's own cap
    _run(grid, config)
    reasons += [reply.error.reason for _, reply in grid.log if reply.has_error()]
    recorded = _recorded_lda_run(tmp_path, nodes, words)  # an unaccounted release asked of a party with a ledger
    node = next(iter(grid.contexts))
    for kind in ("evaluate", "train.lda"):
        msg = next(m for m in recorded.sent(kind) if m.metadata.dst_node_id == node)
        reasons.append(_refused(grid.send(msg, node), "no document-level accounting"))
    for reason in reasons:
        assert str(tmp_path) not in reason and "ledger.json" not in reason, reason  # no path of the party's
        assert "0.4321" not in reason and "0.1234" not in reason and "50" not in reason, reason  # no cap
        assert not re.search(r"\beps(ilon)?\b", reason), reason  # no spend, of this run or another
    assert any("lifetime" in r for r in reasons) and any("privacy cap" in r for r in reasons), reasons


# row 5: fake participants under secure aggregation
@pytest.mark.parametrize("told, share_of", [({}, lambda tolerance: 1 / (3 - tolerance)),  # num-partitions=3
                                            ({"federation-size": 3}, lambda tolerance: 1 / (3 - tolerance)),
                                            ({"num-partitions": None}, lambda tolerance: 1.0)])  # told nothing
def test_fake_participants_do_not_lower_a_partys_noise_share(tmp_path, parties, monkeypatch, told, share_of):
    from flower_topics.clients import dplda as client

    nodes, words = parties
    config = _dplda(tmp_path, words, **{"secure-aggregation": True, "num-rounds": 1})
    recorded = _grid(nodes, config)
    run_server(recorded, config)
    node_configs = [{k: v for k, v in {**node, **told}.items() if v is not None} for node in nodes]
    grid = HostileGrid(make_client_app(config), node_configs, config)
    node = next(iter(grid.contexts))
    first = {kind: next(m for m in recorded.sent(kind) if m.metadata.dst_node_id == node)
             for kind in ("query.vocabulary", "train.dplda")}
    keys = next(m for m in recorded.sent("query.secure_sum")
                if m.metadata.dst_node_id == node and m.content[CONFIG]["stage"] == "keys")
    shares: list[float] = []
    real = client.secure_release
    monkeypatch.setattr(client, "secure_release", lambda *a: shares.append(a[-1]) or real(*a))
    assert not grid.send(first["query.vocabulary"], node).has_error()
    fake = [str(1000 + i) for i in range(96)]
    assert not grid.send(keys, node, participants=[*keys.content[CONFIG]["participants"], *fake]).has_error()
    grid.send(first["train.dplda"], node)  # its mask is refused later (no shares stage): its noise is computed first
    tolerance = int(keys.content[CONFIG]["tolerance"])
    assert shares == [pytest.approx(share_of(tolerance), rel=1e-12)]


def _keys_tolerance(tolerance: int) -> Rewrite:
    """The secure sum's ``keys`` stage announcing ``tolerance``."""
    def change(msg: Message) -> Message:
        return _with_config(tolerance=tolerance)(msg) if str(msg.content[CONFIG]["stage"]) == "keys" else msg
    return change


# the collusion bound under secure aggregation: a party's own, never the server's
@pytest.mark.parametrize("rewrite, run_tolerance, own", [
    ({"query.secure_sum": _keys_tolerance(0)}, 1, {}),  # the keys stage rewritten; own T = the simulation's 1
    (None, 0, {"secure-tolerance": 1})])  # a run config of T = 0 against a party's own node config of 1
def test_a_keys_stage_below_the_partys_own_tolerance_is_refused_and_releases_nothing(tmp_path, parties, monkeypatch,
                                                                                    rewrite, run_tolerance, own):
    from flower_topics.clients import dplda as client

    nodes, words = parties
    config = _dplda(tmp_path, words, **{"secure-aggregation": True, "secure-aggregation-tolerance": run_tolerance,
                                        "num-rounds": 1})
    shares: list[float] = []
    real = client.secure_release
    monkeypatch.setattr(client, "secure_release", lambda *a: shares.append(a[-1]) or real(*a))
    grid = _grid(nodes, config, rewrite, **own)
    _run(grid, config)
    keys = [(msg, reply) for msg, reply in grid.log
            if msg.metadata.message_type == "query.secure_sum" and str(msg.content[CONFIG]["stage"]) == "keys"]
    assert len(keys) == 3
    for msg, reply in keys:
        assert int(msg.content[CONFIG]["tolerance"]) == 0
        _refused(reply, "tolerance 0", "secure-tolerance")
    assert shares == [] and not any(reply.has_content() for reply in grid.replies("train.dplda"))


def test_a_partys_noise_share_is_one_over_n_minus_the_tolerance_it_accepted(tmp_path, parties, monkeypatch):
    """3 parties, each run's T announced by the server: 1 / (3 - T) of the noise, and T = 0 (a third each: one
    colluding party leaves less than the target's noise) only from a party whose own bound is 0."""
    from flower_topics.clients import dplda as client

    nodes, words = parties
    shares: list[float] = []
    real = client.secure_release
    monkeypatch.setattr(client, "secure_release", lambda *a: shares.append(a[-1]) or real(*a))
    found = {}
    for own in (0, 1):
        for tolerance in (0, 1):
            config = _dplda(tmp_path, words, **{"secure-aggregation": True, "secure-aggregation-tolerance": tolerance,
                                                "num-rounds": 1, "output-dir": str(tmp_path / f"run-{own}-{tolerance}")})
            shares.clear()
            _run(_grid(nodes, config, **{"secure-tolerance": own}), config)
            found[own, tolerance] = list(shares)
    assert found == {(0, 0): [pytest.approx(1 / 3, rel=1e-12)] * 3, (0, 1): [pytest.approx(1 / 2, rel=1e-12)] * 3,
                     (1, 0): [], (1, 1): [pytest.approx(1 / 2, rel=1e-12)] * 3}


# row 7: a mid-run change of noise, quantum or plain and secure; a quantum below 1
def test_a_quantum_below_one_is_refused(tmp_path, parties):
    nodes, words = parties
    config = _dplda(tmp_path, words)
    grid = _grid(nodes, config, {"train.dplda": _with_config(**{"dplda.quantum": 0.5})})
    _run(grid, config)
    assert len(grid.replies("train.dplda")) == 3
    for reply in grid.replies("train.dplda"):
        _refused(reply, "dplda.quantum")


def test_releases_are_composed_as_they_were_made_whatever_todays_settings():
    """40 secure releases at 2 integer units per count, then one at today's 512: composed at 2 units (as made),
    the 41st is over the target; at today's units all 41 would fit, which is what keeping only sigma and q gave."""
    from flwr.app import Array, ArrayRecord

    from flower_topics.clients import dplda as client
    from flower_topics.data.corpus import Corpus
    from flower_topics.errors import UserInputError
    from flower_topics.privacy.ledger import Release, compose
    from flower_topics.privacy.party_policy import PartyFacts, SecureFacts
    from flower_topics.privacy import dplda_calibration as calibration
    from flower_topics.wire import dplda as wire

    base = {"dplda.clip": 2.0, "secure-aggregation": True, "dplda.epsilon": 3.0, "dplda.delta": 1e-5,
            "vocabulary": "file", "vocabulary-epsilon": 0.0, "vocabulary-delta": 0.0, "dplda.sample-rate": 0.2,
            "num-rounds": 41}
    sigma = calibration.noise_multiplier({**base, "dplda.quantum": 256.0})
    today = wire.DPLDASettings(n_topics=2, alpha=0.1, sample_rate=0.2, clip=2.0, noise_multiplier=sigma,
                               epsilon=3.0, delta=1e-5, secure=True, quantum=256.0)
    coarse = wire.DPLDASettings(**{**today.__dict__, "quantum": 1.0})  # 2 units per count
    at_today = compose([Release("skellam", sigma, 0.2, steps=41, sensitivity=512.0)], 1e-5)
    as_made = compose([Release("skellam", sigma, 0.2, steps=40, sensitivity=2.0),
                       Release("skellam", sigma, 0.2, sensitivity=512.0)], 1e-5)
    assert at_today <= 3.0 < as_made
    corpus = Corpus(np.array([0, 1, 1, 2, 0, 2] * 10, np.int32), np.arange(0, 61, 3, dtype=np.int64),
                    ("a", "b", "c"))
    arrays = ArrayRecord({wire.LAMBDA_KEY: Array(np.ones((2, 3), np.float32))})
    party = PartyFacts(secure=SecureFacts(noise_share=1.0, entry_limit=1 << 40))
    state = client.DPLDAClientState()
    client.local_step(arrays, ConfigRecord(coarse.to_record()), corpus, state, 1, party)
    assert state.releases.tolist() == [[sigma, 0.2, 2.0, 1.0]]  # kept with its units and secure, as made
    state.releases = np.tile(state.releases, (40, 1))  # 40 such releases
    with pytest.raises(UserInputError, match="after 40 releases"):
        client.local_step(arrays, ConfigRecord(today.to_record()), corpus, state, 1, party)
    state.releases = np.tile([[sigma, 0.2, 512.0, 1.0]], (40, 1))  # the same 40 at today's units: the 41st fits
    client.local_step(arrays, ConfigRecord(today.to_record()), corpus, state, 1, party)
    # plain and secure mixed: each composed in its own accountant (a Gaussian PLD, a Skellam RDP), as made
    plain = wire.DPLDASettings(**{**today.__dict__, "secure": False})
    state = client.DPLDAClientState()
    client.local_step(arrays, ConfigRecord(plain.to_record()), corpus, state, 1)
    assert state.releases.tolist() == [[sigma, 0.2, 0.0, 0.0]]
    rows = np.vstack([np.tile(client.release_row(plain, sigma, 0.2), (20, 1)), [client.release_row(today, sigma, 0.2)]])
    mixed = compose([Release("gaussian", sigma, 0.2, steps=20), Release("skellam", sigma, 0.2, sensitivity=512.0)],
                    1e-5)
    assert client.spending_over_cap(rows, today, 0.0, 0.0, cap=1e-9) == pytest.approx(mixed, rel=1e-12)


def test_a_simulation_sets_the_parties_policy(tmp_path):
    from flower_topics.errors import UserInputError
    from flower_topics.simulations import simulate
    from tests.test_method_contract import TINY

    config = {**TINY, "method": "lda", "num-rounds": 1}
    with pytest.raises(UserInputError, match="every release without|document-level guarantee"):
        simulate(config, mode="federated", num_clients=2, out_dir=tmp_path / "a", engine="inprocess",
                 node_config={"require-document-guarantee": "true"})  # lda's union agreement: refused by every party
    with pytest.raises(UserInputError, match="lifetime-epsilonn': not a node-config key"):
        simulate(config, mode="federated", num_clients=2, out_dir=tmp_path / "c", engine="inprocess",
                 node_config={"lifetime-epsilonn": "1"})


def test_a_fault_on_the_party_tells_the_server_its_kind_only(tmp_path, parties, monkeypatch):
    """An exception in a party's step (not a refusal) reaches the server as its kind only: the exception's text,
    which may hold the party's values or paths, stays in the party's log."""
    from flower_topics.federation import client_app

    def fails(msg, context, config):
        raise ValueError("/srv/party-a/notes.jsonl holds 1234 documents")

    monkeypatch.setattr(client_app, "accept_vocabulary", fails)
    nodes, words = parties
    grid = _grid(nodes, _dplda(tmp_path, words))
    _run(grid, _dplda(tmp_path, words))
    replies = grid.replies("query.vocabulary")
    assert replies and all(reply.has_error() for reply in replies)
    for reply in replies:
        assert "ValueError" in reply.error.reason and "on this party" in reply.error.reason
        assert "/srv" not in reply.error.reason and "1234" not in reply.error.reason, reply.error.reason
