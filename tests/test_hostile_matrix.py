"""A hostile server, systematically: every message type each method's ClientApp answers, recorded in an honest
in-process run with real parties, is replayed to the party in the state it was in when the honest message came,
after a mutation from a fixed list (a party-side key added, a record removed, each number replaced by an extreme,
negative or non-finite value, another method named, the same message twice, a stage repeated after the run).

For every case the party either refuses in one line (no newline, no path, none of its node-config values) or its
reply passes the wire audit for that message type (:mod:`tests.wire_audit`); a party that requires a
document-level guarantee lets nothing without one leave, records every release before it leaves and makes no
release twice."""

from __future__ import annotations

import copy
import math
import signal
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.supercore.task_identity import TaskIdentity

from flower_topics import secure_sum
from flower_topics.federation.client_app import (VOCABULARY_STATE, agreed_documents, data_config, make_client_app,
                                                 node_documents)
from flower_topics.federation.party_side import PARTY_KEYS, PARTY_PREFIXES, party_account
from flower_topics.federation.server_app import run_server
from flower_topics.methods import METHODS
from flower_topics.simulations.inprocess import SERVER_NODE_ID, InProcessGrid
from flower_topics.wire.protocol import BAD_INPUT, CONFIG
from tests.test_prevalence_run import GROUP_A, GROUP_B, PARTIES, _party_file
from tests.wire_audit import Audit, AuditError, party_sizes

#: The node config values a refusal must never send back (a cap, a lifetime cap; the paths are checked apart).
MAX_EPSILON, LIFETIME = 97.125, 987.375
COMMON = {"num-topics": 2, "min-df": 1, "stopwords": "none", "date-column": "date", "num-rounds": 2,
          "prevalence-period": "quarter", "prevalence-from": "2020", "prevalence-to": "2021-12",
          "eval-iterations": 5, "lda.local-sweeps": 2, "pctd.consistency": 0.0}
DPLDA = {"method": "dplda", "federated-eval": False, "dplda.sample-rate": 0.5, "dplda.epsilon": 3.0,
         "dplda.init": "random"}
#: Each recorded honest run: its run config (beyond COMMON), its parties' extra node config, and the message
#: types its parties answer (secure-sum messages by stage). lda agrees on a union vocabulary (query.candidates),
#: fedlda on a private one; the others read a public vocabulary file (no candidates). dplda runs without federated
#: evaluation (its sums carry no noise); the guaranteed dplda party also keeps a ledger and a cap.
SCENARIOS: dict[str, tuple[dict, dict, tuple[str, ...]]] = {
    "lda": ({"method": "lda", "vocabulary": "union"}, {},
            ("query.candidates", "query.vocabulary", "train.lda", "evaluate", "query.prevalence")),
    "fedlda": ({"method": "fedlda", "vocabulary": "private", "vocabulary-epsilon": 50.0}, {},
               ("query.candidates", "query.vocabulary", "train.fedlda", "evaluate", "query.prevalence")),
    "pctd": ({"method": "pctd", "vocabulary": "FILE"}, {},
             ("query.vocabulary", "train.pctd", "evaluate", "query.prevalence")),
    "ftm": ({"method": "ftm", "vocabulary": "FILE", "ftm.top-words": 5}, {},
            ("query.vocabulary", "train.ftm", "evaluate", "query.prevalence")),
    "ntm": ({"method": "ntm", "vocabulary": "FILE"}, {},
            ("query.vocabulary", "train.ntm", "evaluate", "query.prevalence")),
    "dplda": ({**DPLDA, "vocabulary": "FILE"}, {},
              ("query.vocabulary", "train.dplda", "query.prevalence")),
    "dplda-guarantee": ({**DPLDA, "vocabulary": "FILE"},
                        {"require-document-guarantee": True, "max-epsilon": MAX_EPSILON, "privacy-ledger": "LEDGER",
                         "lifetime-epsilon": LIFETIME},
                        ("query.vocabulary", "train.dplda", "query.prevalence")),
    "lda-secure": ({"method": "lda", "vocabulary": "FILE", "secure-aggregation": True, "federated-eval": False}, {},
                   ("query.vocabulary", "train.lda", "query.prevalence", "query.secure_sum:keys",
                    "query.secure_sum:shares", "query.secure_sum:check", "query.secure_sum:unmask")),
    "dplda-secure": ({**DPLDA, "vocabulary": "FILE", "secure-aggregation": True}, {},
                     ("query.vocabulary", "train.dplda", "query.prevalence", "query.secure_sum:keys",
                      "query.secure_sum:shares", "query.secure_sum:check", "query.secure_sum:unmask")),
}
#: A registered method without a scenario of its own above (a new method, or one added by ``register_method`` such as
#: the worked example of docs/adding-a-method.md) is recorded in the plain one: a public vocabulary file, and every
#: message type a party without a mechanism answers.
SCENARIOS.update({name: ({"method": name, "vocabulary": "FILE"}, {},
                         ("query.vocabulary", f"train.{name}", "evaluate", "query.prevalence"))
                  for name in METHODS if name not in SCENARIOS})
#: Each number of a message is replaced, one at a time, by each of these. Left out: huge positive values (2**62,
#: 1e308). A server's huge iteration count (an ``evaluate`` message's ``eval-iterations`` = 2**62) keeps the party
#: computing in compiled code that no in-test timeout can stop (a hole: reported, not testable in-process).
EXTREMES = {"-1": -1, "0": 0, "-1e308": -1e308, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: Every party-side key, and one of each party-side prefix the party does not itself use.
SIDE_KEYS = sorted(PARTY_KEYS) + [f"{prefix}anything" for prefix in PARTY_PREFIXES]
MUTATIONS = ([f"party-key:{key}" for key in SIDE_KEYS] + ["party-key-in-a-record-of-its-own", "remove-each-record"]
             + [f"numbers={name}" for name in EXTREMES] + ["another-method", "twice", "again-after-the-run"]
             + ["fake-participants", "another-dropout-list"])
#: 96 participants that do not exist.
FAKES = [str(1000 + i) for i in range(96)]


@dataclass
class Recorded:
    """An honest run: every message each party got, its reply, and the party's state just before it came."""

    config: dict
    node_configs: list[dict]
    paths: list[str]
    messages: list[tuple[Message, Message, int, RecordDict]] = field(default_factory=list)
    after: dict[int, RecordDict] = field(default_factory=dict)
    grid: InProcessGrid | None = None  # the parties the hostile messages go to (their state set per case)


def kind_of(msg: Message) -> str:
    kind = msg.metadata.message_type
    return f"{kind}:{msg.content[CONFIG]['stage']}" if kind == secure_sum.MESSAGE_TYPE else kind


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-matrix")
    rng = np.random.default_rng(5)
    datasets = [_party_file(root, f"party{i}", rng, dated, undated) for i, (dated, undated) in enumerate(PARTIES)]
    words = root / "vocabulary.txt"
    words.write_text("\n".join(GROUP_A + GROUP_B) + "\n", encoding="utf-8")
    return root, datasets, str(words)


@pytest.fixture(scope="module")
def recorded(files):
    """The honest run of a scenario, recorded once for the module."""
    root, datasets, words = files
    _RUNS: dict[str, Recorded] = {}

    def get(name: str) -> Recorded:
        if name in _RUNS:
            return _RUNS[name]
        extra, node_extra, _ = SCENARIOS[name]
        config = {**COMMON, **extra, "dataset": "party-files", "output-dir": str(root / f"run-{name}")}
        config["vocabulary"] = words if config["vocabulary"] == "FILE" else config["vocabulary"]
        nodes = [{"dataset": path, "date-column": "date", "num-partitions": len(datasets),
                  **{k: (str(root / f"ledger-{name}-{i}.json") if v == "LEDGER" else v) for k, v in node_extra.items()}}
                 for i, path in enumerate(datasets)]
        run = Recorded(config, nodes, [*datasets, str(root)])
        app = make_client_app(config)

        def recording(msg: Message, context: Context) -> Message:
            before = copy.deepcopy(context.state)
            reply = app(msg, context)
            run.messages.append((msg, reply, context.node_id, before))
            return reply

        grid = InProcessGrid(recording, nodes, config)
        run_server(grid, config)
        run.after = {node: copy.deepcopy(context.state) for node, context in grid.contexts.items()}
        _RUNS[name] = run
        return run

    return get


CASES = [(name, kind, mutation) for name, (_, _, kinds) in SCENARIOS.items() for kind in kinds
         for mutation in MUTATIONS]
# Excluded explicitly: "another-method" only where a message names a method (train.<method> by its type, the
# prevalence request by its "method" setting); the agreement, evaluation and secure-sum messages name none.
CASES = [case for case in CASES if case[2] != "another-method" or case[1].startswith(("train.", "query.prevalence"))]
# Excluded explicitly: "fake-participants" only where a message lists participants (every secure-sum stage), and
# "another-dropout-list" only where it lists the alive and the dropped parties (the check and unmask stages).
CASES = [case for case in CASES if case[2] != "fake-participants" or case[1].startswith(secure_sum.MESSAGE_TYPE)]
CASES = [case for case in CASES
         if case[2] != "another-dropout-list" or case[1].endswith((":check", ":unmask"))]
#: Excluded explicitly: "numbers=" where the honest message carries no number at all (checked by
#: test_the_messages_without_numbers_carry_none).
NO_NUMBERS = {("lda", "query.candidates")} | {(name, "query.vocabulary") for name in SCENARIOS}
CASES = [case for case in CASES if not (case[2].startswith("numbers=") and case[:2] in NO_NUMBERS)]

#: Holes: cases where the party answers outside its policy, marked strict xfail while open (none is).
HOLES: dict[tuple[str, str, str], str] = {}  # (run, message type, mutation) -> the hole, while one is open
CASES = [pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=HOLES[case])) if case in HOLES else case
         for case in CASES]
#: Releases a party makes (the vocabulary candidates, each round, the prevalence table).
RELEASES = ("query.candidates", "train.", "query.prevalence")


#: How long a party may compute on one message of these tiny corpora (honest: well under a second).
PATIENCE_S = 3.0


class Hung(BaseException):
    """The party was still computing after :data:`PATIENCE_S` (not an ``Exception``: the grid must not turn it into
    an error reply)."""


@contextmanager
def _patience(what: str):
    def stop(*_):
        raise Hung(f"{what}: the party still computed after {PATIENCE_S:g} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, PATIENCE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _copy(msg: Message, content: RecordDict | None = None, kind: str | None = None) -> Message:
    return Message(content=copy.deepcopy(msg.content) if content is None else content,
                   dst_node_id=msg.metadata.dst_node_id, message_type=kind or msg.metadata.message_type)


def _with(msg: Message, record: str, **values) -> Message:
    content = copy.deepcopy(msg.content)
    content[record] = ConfigRecord({**dict(content[record]), **values})
    return _copy(msg, content)


def _variants(run: Recorded, msg: Message, mutation: str) -> list[list[Message]]:
    """The hostile sequences of ``mutation`` for ``msg``: each is sent, in order, to the party as it was when
    ``msg`` came (``again-after-the-run``: as it was after the run)."""
    if mutation.startswith("party-key:"):
        return [[_with(msg, CONFIG, **{mutation.split(":", 1)[1]: 1e-12})]]
    if mutation == "party-key-in-a-record-of-its-own":
        content = copy.deepcopy(msg.content)
        content["extra"] = ConfigRecord({"party.spent-epsilon": -1000.0})
        return [[_copy(msg, content)]]
    if mutation == "remove-each-record":
        out = []
        for name in msg.content.keys():
            content = copy.deepcopy(msg.content)
            del content[name]
            out.append([_copy(msg, content)])
        return out
    if mutation.startswith("numbers="):
        value = EXTREMES[mutation.split("=", 1)[1]]
        return [[_with(msg, name, **{key: value})] for name, record in msg.content.config_records.items()
                for key, old in sorted(record.items()) if isinstance(old, (int, float)) and not isinstance(old, bool)]
    if mutation == "another-method":
        kind = msg.metadata.message_type
        if kind.startswith("train."):
            return [[_copy(msg, kind=f"train.{other}")] for other in METHODS if f"train.{other}" != kind]
        own = str(msg.content[CONFIG]["method"])
        return [[_with(msg, CONFIG, method=other)] for other in METHODS if other != own]
    if mutation == "fake-participants":  # every list of node ids, with 96 fake ones added
        lists = [key for key, value in msg.content[CONFIG].items()
                 if key in ("participants", "nodes", "alive", "dropped", "signers")]
        return [[_with(msg, CONFIG, **{key: [*msg.content[CONFIG][key], *FAKES]})] for key in lists]
    if mutation == "another-dropout-list":  # a peer the others were told is alive, told to this party as dropped
        config = msg.content[CONFIG]
        alive = [node for node in config["alive"] if node != str(msg.metadata.dst_node_id)]
        return [[_with(msg, CONFIG, alive=[n for n in config["alive"] if n != peer],
                       dropped=[*config["dropped"], peer])] for peer in alive]
    if mutation in ("twice", "again-after-the-run"):
        return [[_copy(msg), _copy(msg)]] if mutation == "twice" else [[_copy(msg)]]
    raise AssertionError(mutation)


def _grid(run: Recorded) -> InProcessGrid:
    if run.grid is None:
        run.grid = InProcessGrid(make_client_app(run.config), run.node_configs, run.config)
    return run.grid


def _deliver(grid: InProcessGrid, msg: Message) -> Message:
    """``msg`` to its party, as a SuperNode hands it over (an exception becomes an error reply with its text); not
    through :meth:`InProcessGrid.send_and_receive`, which reads the message's server round for its own bookkeeping."""
    msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
    TaskIdentity.node_id = msg.metadata.dst_node_id
    try:
        return grid.client_app(msg, grid.contexts[msg.metadata.dst_node_id])
    except Exception as exc:  # noqa: BLE001 - as a SuperNode does
        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(exc)}:<'{exc}'>"), reply_to=msg)
    finally:
        TaskIdentity.node_id = SERVER_NODE_ID


def _refusal_is_one_line(run: Recorded, reason: str, context: Context) -> None:
    assert "\n" not in reason and "\r" not in reason, reason
    for path in run.paths + [str(v) for v in context.node_config.values() if isinstance(v, str) and "/" in v]:
        assert path not in reason, reason  # no path of the party's
    assert "ledger-" not in reason, reason
    for value in (MAX_EPSILON, LIFETIME):
        assert f"{value:g}" not in reason and str(value) not in reason, reason  # none of its caps


def _audited(run: Recorded, sent: Message, honest: Message, reply: Message, context: Context) -> None:
    """The reply passes the wire audit for its message type: as an answer to what was sent, or (when what was sent
    lacks what the audit reads, e.g. a removed record) to the honest message of the type."""
    config = data_config(run.config)
    documents = lambda ctx: agreed_documents(ctx, config)  # noqa: E731

    def sizes(ctx: Context) -> set[int]:
        if VOCABULARY_STATE in ctx.state.config_records:
            return party_sizes(documents)(ctx)
        corpus = node_documents(ctx, config).corpus  # before the agreement: its whole file
        return {corpus.n_docs, corpus.n_tokens}

    if sent.metadata.message_type == "query.prevalence" and str(sent.content[CONFIG]["method"]) != "dplda":
        sent = _copy(sent)  # another method named: the party answers under that method's release rule, not dplda's
        sent.content[CONFIG] = ConfigRecord({k: v for k, v in sent.content[CONFIG].items()
                                             if k != "dplda.prevalence-noise"})
    for request in (sent, honest):
        audit = Audit([(request, reply, context)])
        try:
            audit.check(sizes, documents if VOCABULARY_STATE in context.state.config_records else None)
            return
        except AuditError:
            raise
        except Exception:  # noqa: BLE001 - the audit cannot read the mutated request: audit against the honest one
            if request is honest:
                raise


@pytest.mark.parametrize("name, kind, mutation", CASES)
def test_a_hostile_message_is_refused_in_one_line_or_answered_within_policy(recorded, name, kind, mutation):
    run = recorded(name)
    guaranteed = bool(SCENARIOS[name][1].get("require-document-guarantee"))
    msg, _, node, before = next(entry for entry in run.messages if kind_of(entry[0]) == kind)
    grid = _grid(run)
    context = grid.contexts[node]
    variants = _variants(run, msg, mutation)
    assert variants, (name, kind, mutation)
    for number, sequence in enumerate(variants):
        try:
            _check_sequence(run, grid, context, msg, before, node, kind, mutation, guaranteed, sequence)
        except AssertionError as exc:
            changed = _changed(msg, sequence[0])
            raise AssertionError(f"variant {number} ({changed}): {exc}") from exc


def _changed(honest: Message, sent: Message) -> str:
    """What a variant changed: its message type, or the records and settings that differ from the honest message."""
    if sent.metadata.message_type != honest.metadata.message_type:
        return sent.metadata.message_type
    out = [f"-{name}" for name in honest.content.keys() if name not in sent.content]
    for name, record in sent.content.config_records.items():
        old = honest.content.config_records.get(name, ConfigRecord())
        out += [f"{name}.{key}={value!r}" for key, value in record.items() if key not in old or old[key] != value]
    return ", ".join(out) or "unchanged"


def _check_sequence(run: Recorded, grid: InProcessGrid, context: Context, msg: Message, before: RecordDict,
                    node: int, kind: str, mutation: str, guaranteed: bool, sequence: list[Message]) -> None:
    """Send ``sequence`` to the party as it was (before ``msg``, or after the run) and check each reply."""
    context.state = copy.deepcopy(run.after[node] if mutation == "again-after-the-run" else before)
    answered = []
    for sent in sequence:
        made = len(party_account(context.state).releases)
        try:
            with _patience(sent.metadata.message_type):
                reply = _deliver(grid, sent)
        except Hung as exc:
            pytest.fail(str(exc))
        if mutation == "another-dropout-list" and kind.endswith(":unmask"):
            # the signed alive set differs from the one shown: revealing a live peer's mask key unmasks it
            assert reply.has_error(), "unmask answered for a dropout list the parties did not sign"
        if reply.has_error():
            _refusal_is_one_line(run, reply.error.reason, context)
            if mutation.startswith("party-key"):
                assert reply.error.code == BAD_INPUT and "a key only this party sets" in reply.error.reason
            continue
        assert not mutation.startswith("party-key"), f"{sent.metadata.message_type} with a party-side key answered"
        _audited(run, sent, msg, reply, context)
        answered.append(sent)
        if guaranteed:  # nothing without a document-level guarantee leaves, every release accounted before
            out = sent.metadata.message_type
            assert out in ("train.dplda", "query.prevalence", "query.vocabulary", secure_sum.MESSAGE_TYPE), out
            if out == "query.prevalence":
                assert str(sent.content[CONFIG]["method"]) == "dplda"
            if out.startswith(RELEASES):
                assert len(party_account(context.state).releases) > made, f"{out}: not in the party's account"
    if mutation == "twice" and (kind.startswith(secure_sum.MESSAGE_TYPE) or guaranteed and kind.startswith(RELEASES)):
        assert len(answered) <= 1, f"{kind}: the same stage or release answered twice"


def test_every_recorded_run_has_exactly_the_message_types_of_its_cases(recorded):
    """Every message type each scenario's parties answered is a case (none left out), and every case's type was
    answered in the honest run (none invented)."""
    for name, (_, _, kinds) in SCENARIOS.items():
        run = recorded(name)
        assert {kind_of(msg) for msg, _, _, _ in run.messages} == set(kinds), name
        assert not any(reply.has_error() for _, reply, _, _ in run.messages), name


def test_the_messages_without_numbers_carry_none(recorded):
    for name, kind in NO_NUMBERS:
        msg = next(m for m, _, _, _ in recorded(name).messages if kind_of(m) == kind)
        assert not [key for record in msg.content.config_records.values() for key, value in record.items()
                    if isinstance(value, (int, float)) and not isinstance(value, bool)]
