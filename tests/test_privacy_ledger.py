"""A party's lifetime budget: its privacy ledger (flower_topics/privacy/ledger.py) and the ClientApp's use of it
(flower_topics/federation/party_ledger.py): exact composition with the accountant that calibrates dplda, a hostile
server that starts runs until the cap and one more, a resumed run counted once, a damaged ledger, the file's mode
and atomic replacement, and the bad node configs, each one line before round 1."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from flower_topics.cli.main import main
from flower_topics.errors import UserInputError
from flower_topics.federation import client_app
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.privacy import ledger
from flower_topics.privacy.accountants import PLDAccountant, SkellamAccountant
from flower_topics.privacy.ledger import (
    APPROX_DP,
    Entry,
    Release,
    compose,
    read_ledger,
    record,
)
from flower_topics.run.config import parse_run_config
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.base import FederationError
from flower_topics.privacy import dplda_calibration
from tests.test_method_contract import NEEDS, TINY

DELTA = 1e-5
#: A tiny dplda run: 2 parties of 40 synthetic documents, a public vocabulary file (no agreement release), 2 rounds.
RUN = {**TINY, **NEEDS["dplda"], "method": "dplda", "dplda.epsilon": 2.0, "dplda.delta": DELTA,
       "dplda.sample-rate": 0.5, "num-rounds": 2, "dplda.init": "random", "synthetic-docs-per-node": 40}


def _gaussian(sigma: float, q: float, steps: int = 1) -> Release:
    return Release("gaussian", sigma, q, steps=steps)


def _entries(run: int, releases: list[Release], documents: str = "sha256:abc", method: str = "dplda") -> list[Entry]:
    return [Entry(run, f"s{run}", i, method, documents, r) for i, r in enumerate(releases)]


# --- composition -------------------------------------------------------------------------------------------------


def test_runs_compose_in_the_pld_that_calibrates_dplda_not_by_adding_epsilons():
    runs = [[_gaussian(1.2, 0.2)] * 10, [_gaussian(1.2, 0.2)] * 5, [_gaussian(0.9, 0.5, steps=3)]]
    vocabulary = Release(APPROX_DP, epsilon=0.5, delta=1e-7)
    releases = [r for run in runs for r in run] + [vocabulary]
    direct = PLDAccountant()  # the accountant itself, told of the same releases
    direct.step(noise_multiplier=1.2, sample_rate=0.2, steps=15)
    direct.step(noise_multiplier=0.9, sample_rate=0.5, steps=3)
    direct.spend(0.5, 1e-7)
    assert compose(releases, DELTA) == direct.get_epsilon(DELTA)
    per_run = [compose(run, DELTA) for run in runs]
    assert compose(releases, DELTA) < 0.8 * (sum(per_run) + 0.5)  # far below the sum of the runs' epsilons
    assert compose(releases, DELTA) > max(per_run)
    # the order of the releases does not matter
    assert compose(releases[::-1], DELTA) == direct.get_epsilon(DELTA)


def test_secure_runs_compose_in_the_skellam_accountant_and_mixed_ones_by_basic_composition():
    sk = [Release("skellam", 2.0, 0.3, steps=4, sensitivity=512.0)]
    direct = SkellamAccountant(512.0)
    direct.step(noise_multiplier=2.0, sample_rate=0.3, steps=4)
    assert compose(sk, DELTA) == direct.get_epsilon(DELTA)
    gauss = [_gaussian(1.5, 0.2, steps=6)]
    vocabulary = Release(APPROX_DP, epsilon=0.25, delta=2e-6)
    pld = PLDAccountant()
    pld.step(noise_multiplier=1.5, sample_rate=0.2, steps=6)
    share = (DELTA - 2e-6) / 2  # the delta the vocabulary leaves, split between the two accountants
    assert compose(sk + gauss + [vocabulary], DELTA) == pytest.approx(
        0.25 + pld.steps_epsilon(share) + direct.steps_epsilon(share), rel=1e-12)
    assert compose([Release(APPROX_DP, epsilon=1.0, delta=DELTA)], DELTA) == 1.0
    assert compose([Release(APPROX_DP, epsilon=1.0, delta=DELTA)] + gauss, DELTA) == float("inf")


# --- the file ----------------------------------------------------------------------------------------------------


def test_record_checks_the_cap_counts_a_repeated_release_once_and_refuses_past_it(tmp_path):
    path = tmp_path / "ledger.json"
    one_run = _entries(1, [_gaussian(1.2, 0.2)] * 4)
    cap = compose([e.release for e in one_run] * 2, DELTA)  # exactly two such runs
    assert record(path, one_run, epsilon=cap, delta=DELTA) == compose([e.release for e in one_run], DELTA)
    before = path.read_bytes()
    # the same releases again (a message answered again after a restart): counted once, nothing written
    assert record(path, one_run[:2], epsilon=cap, delta=DELTA) == compose([e.release for e in one_run], DELTA)
    assert path.read_bytes() == before
    assert record(path, _entries(2, [_gaussian(1.2, 0.2)] * 4), epsilon=cap, delta=DELTA) == pytest.approx(cap)
    full = path.read_bytes()
    with pytest.raises(UserInputError, match="past the lifetime cap") as refused:
        record(path, _entries(3, [_gaussian(1.2, 0.2)]), epsilon=cap, delta=DELTA)
    assert "\n" not in str(refused.value)
    assert path.read_bytes() == full  # a refused release is not recorded
    # other documents have their own budget
    assert record(path, _entries(3, [_gaussian(1.2, 0.2)], documents="sha256:other"), epsilon=cap, delta=DELTA) \
        == compose([_gaussian(1.2, 0.2)], DELTA)
    assert len(read_ledger(path).entries) == 9


def test_the_file_is_its_owners_only_and_replaced_atomically(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    record(path, _entries(1, [_gaussian(1.0, 0.1)]), epsilon=10, delta=DELTA)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chmod(path, 0o644)
    old = path.read_bytes()
    seen = []
    real_fsync = os.fsync

    def fsync(fd):  # while the new content is being made durable, the ledger's path still holds the old file
        seen.append(path.read_bytes())
        return real_fsync(fd)

    monkeypatch.setattr(ledger.os, "fsync", fsync)
    record(path, _entries(2, [_gaussian(1.0, 0.1)]), epsilon=10, delta=DELTA)
    assert seen and seen[0] == old
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.setattr(ledger.os, "fsync", real_fsync)
    # a crash at the rename: the old ledger stays whole, no temporary file is left
    now = path.read_bytes()
    monkeypatch.setattr(ledger.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(UserInputError, match="cannot write it"):
        record(path, _entries(3, [_gaussian(1.0, 0.1)]), epsilon=10, delta=DELTA)
    assert path.read_bytes() == now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json", "ledger.json.lock"]


@pytest.mark.parametrize("damage", ["entry", "checksum", "truncated", "empty", "not-json"])
def test_a_damaged_ledger_refuses_every_release_and_is_never_reset(tmp_path, damage, capsys):
    path = tmp_path / "ledger.json"
    record(path, _entries(1, [_gaussian(1.0, 0.2)] * 3), epsilon=10, delta=DELTA)
    text = path.read_text()
    document = json.loads(text)
    if damage == "entry":
        document["entries"][1]["noise_multiplier"] = 100.0  # a smaller spend, written by hand
        text = json.dumps(document)
    elif damage == "checksum":
        document["checksum"] = "sha256:" + "0" * 64
        text = json.dumps(document)
    else:
        text = {"truncated": text[: len(text) // 2], "empty": "", "not-json": "spent nothing\n"}[damage]
    path.write_text(text)
    for run in (2, 3):  # every release, not just the first
        with pytest.raises(UserInputError, match="is damaged") as refused:
            record(path, _entries(run, [_gaussian(1.0, 0.2)]), epsilon=10, delta=DELTA)
        assert "never reset" in str(refused.value) and "\n" not in str(refused.value)
        assert path.read_text() == text
    assert main(["ledger", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "damaged" in err and len(err.splitlines()) == 1


# --- the party, in process ---------------------------------------------------------------------------------------


def _node_configs(tmp_path: Path, cap: float, **extra) -> list[dict]:
    return [{"partition-id": i, "num-partitions": 2, "privacy-ledger": str(tmp_path / f"ledger-{i}.json"),
             "lifetime-epsilon": cap, **extra} for i in range(2)]


class _Party:
    """The ClientApp, with every reply and every log line it gives kept."""

    def __init__(self, config, monkeypatch):
        self.app, self.replies, self.lines = make_client_app(config), [], []
        monkeypatch.setattr(client_app, "log", lambda level, fmt, *args: self.lines.append(fmt % args))

    def __call__(self, msg, context):
        reply = self.app(msg, context)
        self.replies.append(reply)
        return reply


def _run(tmp_path, config, nodes, run_id, party):
    grid = InProcessGrid(party, nodes, config)
    for context in grid.contexts.values():
        context.run_id = run_id  # a new run on the same SuperNodes: Flower gives it a new id and a fresh state
    return run_server(grid, {**config, "output-dir": str(tmp_path / f"run-{run_id}")})


def test_a_hostile_server_starting_runs_until_the_cap_and_one_more_is_refused(tmp_path, monkeypatch):
    config = parse_run_config(RUN)
    one_run = compose(dplda_calibration.planned_releases(config), DELTA)
    cap = compose(dplda_calibration.planned_releases(config) * 2, DELTA)  # two runs fit, composed
    assert cap < 2 * one_run
    nodes = _node_configs(tmp_path, cap)
    # the server tells the parties a run of one round at eps 0.1: the check before round 1 passes on its word
    lie = {**RUN, "num-rounds": 1, "dplda.epsilon": 0.1}
    party = _Party(lie, monkeypatch)
    for run_id in (1, 2):
        model = _run(tmp_path, RUN, nodes, run_id, party)
        assert model.metadata["privacy"]["epsilon"] == pytest.approx(one_run, rel=1e-9)
        for i in range(2):
            assert read_ledger(tmp_path / f"ledger-{i}.json").spent(_documents(tmp_path, i), DELTA) == \
                pytest.approx(compose(dplda_calibration.planned_releases(config) * run_id, DELTA), rel=1e-12)
    party.replies.clear()
    with pytest.raises(FederationError, match="past the lifetime cap"):
        _run(tmp_path, RUN, nodes, 3, party)
    errors = [r for r in party.replies if r.has_error()]
    assert len(errors) == 2 and all("past the lifetime cap" in r.error.reason for r in errors)
    assert all(r.error.reason.startswith("dplda: privacy-ledger") for r in errors)
    assert sum("past the lifetime cap" in line for line in party.lines) == 2  # one line per party
    # the cap, the spend of other runs and the ledger's path stay on the party: its log line has them, its reply not
    assert all("spent so far" not in r.error.reason and "ledger-" not in r.error.reason for r in errors)
    assert all("spent so far" in line for line in party.lines if "past the lifetime cap" in line)
    assert not any(r.has_content() and "update" in r.content for r in party.replies)  # nothing released
    for i in range(2):
        book = read_ledger(tmp_path / f"ledger-{i}.json")
        assert len(book.entries) == 4 and {e.run for e in book.entries} == {1, 2}
        assert book.spent(_documents(tmp_path, i), DELTA) <= cap * (1 + 1e-9)


def _documents(tmp_path: Path, i: int) -> str:
    return read_ledger(tmp_path / f"ledger-{i}.json").fingerprints()[0]


class _DiesAtRound(InProcessGrid):
    """A server that dies when it sends round ``r``'s training messages (none is delivered)."""

    dies_at = 0

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if any(m.metadata.message_type.startswith("train.") and int(m.content["config"]["server-round"])
               == self.dies_at for m in messages):
            raise KeyboardInterrupt("the server died")
        return super().send_and_receive(messages, timeout=timeout)


def test_a_resumed_run_is_counted_once(tmp_path, monkeypatch):
    config = {**RUN, "num-rounds": 4, "output-dir": str(tmp_path / "run")}
    nodes = _node_configs(tmp_path, 100.0)
    grid = _DiesAtRound(make_client_app(config), nodes, config)
    grid.dies_at = 3
    with pytest.raises(KeyboardInterrupt):
        run_server(grid, config)
    resumed = {**config, "resume": str(tmp_path / "run")}
    grid = InProcessGrid(make_client_app(resumed), nodes, resumed)
    for context in grid.contexts.values():
        context.run_id = 2  # a resume is a new run
    run_server(grid, resumed)
    planned = dplda_calibration.planned_releases(parse_run_config(config))  # one whole run: 4 rounds
    for i in range(2):
        book = read_ledger(tmp_path / f"ledger-{i}.json")
        assert [(e.run, e.number) for e in book.entries] == [(1, 0), (1, 1), (2, 0), (2, 1)]
        assert book.spent(book.fingerprints()[0], DELTA) == pytest.approx(compose(planned, DELTA), rel=1e-12)


def test_a_message_answered_again_after_a_restart_is_one_release(tmp_path, monkeypatch):
    """A party that recorded a release and crashed before its state reached its state-dir answers the same
    message again from its saved state: the same entry, counted once."""
    config = {**RUN, "num-rounds": 1}
    nodes = _node_configs(tmp_path, 100.0)
    sent = []

    class Keep(InProcessGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            sent.extend(m for m in messages if m.metadata.message_type.startswith("train."))
            return super().send_and_receive(messages, timeout=timeout)

    grid = Keep(make_client_app(config), nodes, config)
    saved = {}
    app = grid.client_app

    def party(msg, context):  # keep the state each party had before its training message
        if msg.metadata.message_type.startswith("train.") and context.node_id not in saved:
            saved[context.node_id] = copy.deepcopy(context.state)
        return app(msg, context)

    grid.client_app = party
    run_server(grid, {**config, "output-dir": str(tmp_path / "run")})
    before = [read_ledger(tmp_path / f"ledger-{i}.json") for i in range(2)]
    node = sent[0].metadata.dst_node_id
    context = grid.contexts[node]
    context.state = saved[node]  # the party restarted from its state-dir, written before this message
    reply = app(sent[0], context)
    assert not reply.has_error()
    after = [read_ledger(tmp_path / f"ledger-{i}.json") for i in range(2)]
    assert after == before


@pytest.mark.parametrize("secure", [False, True])
def test_every_release_of_a_run_is_recorded_as_the_runs_own_accountant_composes_it(tmp_path, monkeypatch, secure):
    """Every round (Gaussian, or Skellam under secure aggregation) and the private vocabulary (its eps, delta; the
    plain run): the ledger's total after one run is the run's own report, to the last digits."""
    vocabulary = {} if secure else {"vocabulary": "private", "vocabulary-epsilon": 4.0, "vocabulary-delta": 1e-6,
                                    "vocabulary-max-words": 3}
    config = {**RUN, **vocabulary, "synthetic-docs-per-node": 200, "dplda.epsilon": 10.0, "secure-aggregation": secure}
    parties = 3 if secure else 2
    nodes = [{"partition-id": i, "num-partitions": parties, "privacy-ledger": str(tmp_path / f"ledger-{i}.json"),
              "lifetime-epsilon": 100.0} for i in range(parties)]
    model = _run(tmp_path, config, nodes, 1, _Party(config, monkeypatch))
    report = model.metadata["privacy"]
    for i in range(parties):
        book = read_ledger(tmp_path / f"ledger-{i}.json")
        rounds = [e for e in book.entries if e.method == "dplda"]
        assert [e.release.mechanism for e in rounds] == ["skellam" if secure else "gaussian"] * 2
        if secure:
            assert rounds[0].release.sensitivity == 2.0 * 256.0  # C x quantum
        else:
            assert [e.release for e in book.entries if e.method == "vocabulary"] == [
                Release(APPROX_DP, epsilon=4.0, delta=1e-6)]
        assert book.spent(book.fingerprints()[0], DELTA) == pytest.approx(report["epsilon"], rel=1e-9)


def test_ntm_with_dp_declares_its_dp_sgd_steps_and_without_dp_nothing():
    from flower_topics.clients import ntm
    from flower_topics.data.corpus import Corpus
    from flower_topics.wire.ntm import NTMSettings

    corpus = Corpus(np.arange(50, dtype=np.int32) % 5, np.arange(0, 51, 5, dtype=np.int64), tuple("abcde"))
    base = parse_run_config({"method": "ntm", "ntm.batch-size": 4, "ntm.noise-multiplier": 1.3})
    record = NTMSettings.from_record({**base, "server-round": 1}).to_record()
    assert ntm.STEP.accounted(record, corpus) == (Release("gaussian", 1.3, 0.4),)  # q = 4 / 10 documents
    local = {**record, "ntm.sync": "local", "ntm.local-steps": 7}
    assert ntm.STEP.accounted(local, corpus) == (Release("gaussian", 1.3, 0.4, steps=7),)
    assert ntm.STEP.accounted({**record, "ntm.dp": False}, corpus) is None


def test_a_ledger_path_that_cannot_be_written_is_one_line_before_round_1(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for path, why in ((blocker / "ledger.json", "does not exist"), (tmp_path, "it is a folder")):
        nodes = [{**n, "privacy-ledger": str(path)} for n in _node_configs(tmp_path, 10.0)]
        party = _Party(RUN, monkeypatch)
        with pytest.raises(FederationError, match="cannot write its ledger"):
            _run(tmp_path, RUN, nodes, 1, party)
        refusals = [r.error.reason for r in party.replies if r.has_error()]
        assert refusals and all(r == "vocabulary agreement: privacy-ledger: this party cannot write its ledger"
                                for r in refusals)  # why (and where) stays in the party's own log
        assert not any(m.startswith("train") for m in _answered(party))  # before round 1


def _answered(party: _Party) -> list[str]:
    return [r.metadata.message_type for r in party.replies]


def test_a_lifetime_epsilon_below_one_run_is_one_line_before_round_1(tmp_path, monkeypatch):
    one_run = compose(dplda_calibration.planned_releases(parse_run_config(RUN)), DELTA)
    party = _Party(RUN, monkeypatch)
    with pytest.raises(FederationError, match="below what one run of dplda"):
        _run(tmp_path, RUN, _node_configs(tmp_path, one_run * 0.9), 1, party)
    refusals = [r.error.reason for r in party.replies if r.has_error()]
    assert len(refusals) == 2 and all("lifetime privacy cap is below" in r for r in refusals)
    assert not any(f"{one_run:.4g}" in r or f"{one_run * 0.9:g}" in r for r in refusals)  # the cap stays on the party
    assert not any(m.startswith("train") for m in _answered(party))
    assert not (tmp_path / "ledger-0.json").exists()
    from flower_topics.federation.party_ledger import ledger_settings

    with pytest.raises(UserInputError, match="needs lifetime-epsilon > 0"):
        ledger_settings({"privacy-ledger": str(tmp_path / "l.json")})
    for key, value, why in (("lifetime-epsilon", "nan", "is not a number"), ("lifetime-delta", "0", "must be in")):
        with pytest.raises(UserInputError, match=f"node-config '{key}' = '{value}' {why}"):
            ledger_settings({"privacy-ledger": str(tmp_path / "l.json"), "lifetime-epsilon": 1.0, key: value})


def test_a_party_with_a_ledger_refuses_a_release_without_document_level_accounting(tmp_path, monkeypatch):
    config = {**TINY, "method": "lda", "num-rounds": 1, "vocabulary": RUN["vocabulary"], "federated-eval": False}
    party = _Party(config, monkeypatch)
    with pytest.raises(FederationError, match="no document-level accounting"):
        _run(tmp_path, config, _node_configs(tmp_path, 10.0), 1, party)
    assert all("lda round has no document-level accounting" in r.error.reason
               for r in party.replies if r.has_error())
    assert not any(r.has_content() and "update" in r.content for r in party.replies)


def test_the_ledger_command_prints_each_run_and_the_total(tmp_path, capsys):
    path = tmp_path / "ledger.json"
    run1, run2 = [_gaussian(1.2, 0.2)] * 4, [_gaussian(1.2, 0.2)] * 4 + [Release(APPROX_DP, epsilon=0.5, delta=1e-7)]
    record(path, _entries(1, run1), epsilon=9, delta=DELTA)
    record(path, _entries(2, run2), epsilon=9, delta=DELTA)
    assert main(["ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"run 1 (session s1) dplda: eps {compose(run1, DELTA):.4g}" in out
    assert f"run 2 (session s2) dplda: eps {compose(run2, DELTA):.4g}" in out
    assert f"total: eps {compose(run1 + run2, DELTA):.4g} over 2 runs" in out
    assert "sha256:abc" in out and "cap eps 9" in out
    assert np.isfinite(compose(run1 + run2, DELTA))
    assert main(["ledger", str(tmp_path / "typo.json")]) == 2  # a wrong path is not an empty ledger
    assert "no ledger there" in capsys.readouterr().err


# --- the deployment engine ---------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_on_the_deployment_engine_a_second_run_past_the_cap_is_refused_by_the_party(tmp_path):
    """A SuperLink and one SuperNode on 127.0.0.1 (its own file and ledger), two one-round dplda runs (``flwr run``)
    against a cap that allows one: the second is refused by the party at its release, the reason in its log and in
    the run's, and the ledger holds the first run only."""
    from flower_topics.simulations.local_superlink import (
        submit,
        superlink,
        supernode,
        wait_for_run,
        write_connection,
    )
    from tests.test_trust_boundary import TOPICS, write_corpus

    root = Path(__file__).resolve().parents[1]
    corpus = write_corpus(tmp_path / "notes.jsonl", ["pets", "money", "space"], 60, seed=3)
    vocabulary = tmp_path / "vocabulary.txt"
    vocabulary.write_text("\n".join(sorted({w for words in TOPICS.values() for w in words})) + "\n")
    settings = {"method": "dplda", "num-topics": 3, "num-rounds": 1, "min-nodes": 1, "vocabulary": str(vocabulary),
                "federated-eval": False, "dplda.epsilon": 2.0, "dplda.sample-rate": 0.5, "dplda.init": "random",
                "verbose": True}
    planned = dplda_calibration.planned_releases(parse_run_config(settings))
    one, two = compose(planned, DELTA), compose(planned * 2, DELTA)
    cap = (one + two) / 2  # one run fits, two do not
    book = tmp_path / "party" / "ledger.json"
    book.parent.mkdir()
    home, logs = tmp_path / "flwr-home", tmp_path / "logs"
    node_config = f"dataset='{corpus}' privacy-ledger='{book}' lifetime-epsilon={cap!r}"

    def run_config(name: str) -> list[str]:
        items = {**settings, "output-dir": str(tmp_path / name)}
        return [" ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={str(v).lower()}" if isinstance(v, bool)
                         else f"{k}={v}" for k, v in items.items())]

    with superlink(home, simulation=False, log_path=logs / "superlink.log") as port:
        write_connection(home, f"127.0.0.1:{port}")
        with supernode(home, port, node_config, log_path=logs / "supernode.log"):
            first = submit(root, home, run_config("first"))
            assert wait_for_run(root, home, first, timeout=240).startswith("finished:completed")
            assert [e.run for e in read_ledger(book).entries] == [first]
            second = submit(root, home, run_config("second"))
            status = wait_for_run(root, home, second, timeout=240)
    assert not status.startswith("finished:completed"), status
    party_log = (logs / "supernode.log").read_text(errors="replace")
    refusals = [line for line in party_log.splitlines() if "past the lifetime cap" in line]
    assert refusals and all(f"lifetime cap {cap:g}" in line for line in refusals)
    entries = read_ledger(book).entries
    assert [e.run for e in entries] == [first] and entries[0].method == "dplda"
    assert read_ledger(book).spent(entries[0].documents, DELTA) == pytest.approx(one, rel=1e-12)
    assert stat.S_IMODE(book.stat().st_mode) == 0o600
