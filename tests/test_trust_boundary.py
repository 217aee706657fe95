"""The trust boundary: each party reads only its own file, the server never opens a corpus,
the parties agree on the vocabulary, the model is scored by federated sums equal to the
pooled evaluation, and privacy randomness is the party's secret."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flower_topics.federation.vocabulary_agreement import agree_vocabulary, merge_candidates
from flower_topics.cli.main import main
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import read_metrics
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.strategies.base import FederationError

TOPICS = {
    "pets": ["cat", "dog", "puppy", "kitten", "leash", "vet", "fur"],
    "money": ["bank", "loan", "stock", "bond", "cash", "rate", "fund"],
    "space": ["orbit", "rocket", "moon", "star", "planet", "launch", "comet"],
}


def write_corpus(path: Path, labels: list[str], n_docs: int, seed: int, extra: str = "") -> Path:
    """A raw-text JSONL corpus: each document ~14 words of its label's topic, in sentences."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n_docs):
            label = labels[i % len(labels)]
            words = rng.choice(TOPICS[label], size=14).tolist()
            text = " ".join(words[:7]).capitalize() + ". " + " ".join(words[7:]) + f". The {extra}".strip()
            fh.write(json.dumps({"text": text, "label": label}) + "\n")
    return path


BASE = {"num-topics": 3, "num-rounds": 3, "min-df": 1, "max-df": 1.0, "eval-iterations": 30,
        "dataset": "/nonexistent/the-server-has-no-corpus"}


def _grid(config, node_configs):
    return InProcessGrid(make_client_app(config), node_configs, config)


def test_each_party_reads_only_its_own_file_and_the_server_none(tmp_path, monkeypatch):
    a = write_corpus(tmp_path / "a.jsonl", ["pets", "money"], 60, seed=1)
    b = write_corpus(tmp_path / "b.jsonl", ["space", "money"], 60, seed=2)
    import flower_topics.data.readers as readers

    read = []
    real = readers.load_corpus
    monkeypatch.setattr(readers, "load_corpus", lambda path, **kw: read.append(str(path)) or real(path, **kw))
    import flower_topics.data.node_data as node_data

    monkeypatch.setattr(node_data, "load_corpus", readers.load_corpus)
    config = {**BASE, "output-dir": str(tmp_path / "run")}
    model = run_server(_grid(config, [{"dataset": str(a)}, {"dataset": str(b)}]), config)
    assert sorted(set(read)) == sorted([str(a), str(b)])  # never the run config's dataset
    assert {"cat", "orbit", "bank"} <= set(model.vocabulary)  # words only a has, only b has, and both
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["vocabulary_agreement"]["nodes"] == 2 and rows[0]["vocabulary_agreement"]["mode"] == "union"
    assert all(r["perplexity"] > 0 and "npmi" in r and "umass" in r for r in rows)


def test_union_sums_document_frequencies_over_parties():
    """A word in one document at each of two parties passes min-df 2; no party alone has it twice."""
    config = parse_run_config({"min-df": 2, "max-df": 1.0})
    one = (("apple", "pear"), np.array([1, 5]), 10, False)
    two = (("apple", "plum"), np.array([1, 1]), 10, False)
    assert merge_candidates([one, two], config) == ("apple", "pear")
    capped = parse_run_config({"min-df": 1, "max-df": 1.0, "max-vocab": 2})
    assert merge_candidates([one, two], capped) == ("apple", "pear")  # by document frequency, ties by word
    curated = (("zeta", "alpha"), np.array([0, 0]), 3, True)
    assert merge_candidates([curated, one], config)[:2] == ("zeta", "alpha")  # kept as listed, unfiltered


def test_a_max_vocab_below_a_curated_vocabulary_says_it_does_not_cut_it(caplog):
    curated = (("zeta", "alpha", "beta"), np.array([0, 0, 0]), 3, True)
    with caplog.at_level("WARNING", logger="flower_topics"):
        words = merge_candidates([curated], parse_run_config({"max-vocab": 2}))
    assert words == ("zeta", "alpha", "beta")
    assert "max-vocab 2 does not cut the curated vocabulary of 3 words" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="flower_topics"):
        merge_candidates([curated], parse_run_config({"max-vocab": 3}))
    assert "max-vocab" not in caplog.text


def _candidates_sent(tmp_path, node_config, config=None):
    """The union candidates party a sends: 40 topic documents, 'smith' in one, 'jones' in two, 'brown' in three."""
    a = tmp_path / "rare.jsonl"
    if not a.exists():
        write_corpus(a, ["pets", "money"], 40, seed=1)
        with a.open("a", encoding="utf-8") as fh:
            for text in ("Smith Jones Brown cat.", "Jones Brown dog.", "Brown bank."):
                fh.write(json.dumps({"text": text, "label": "pets"}) + "\n")
    config = {**BASE, **(config or {})}
    grid = _grid(config, [{"dataset": str(a), **node_config}])
    sent = []
    app = grid.client_app
    grid.client_app = lambda msg, ctx: (lambda r: sent.append(r) or r)(app(msg, ctx)) if msg.metadata.message_type \
        == "query.candidates" else app(msg, ctx)
    vocabulary = agree_vocabulary(grid, config).vocabulary
    (reply,) = sent
    words = reply.content["config"]["words"].split("\n")
    return dict(zip(words, reply.content["update"]["doc-freq"].numpy().tolist())), vocabulary


def test_union_sends_no_word_of_fewer_than_min_party_df_of_the_partys_documents(tmp_path):
    """The party's floor applies before anything is sent: a word in one of its documents never leaves it,
    whatever the run config's min-df; the party can raise its floor, the server cannot lower it."""
    sent, vocabulary = _candidates_sent(tmp_path, {})
    assert "smith" not in sent and "smith" not in vocabulary
    assert sent["jones"] == 2 and sent["brown"] == 3 and min(sent.values()) >= 2
    raised, _ = _candidates_sent(tmp_path, {"min-party-df": 3})
    assert "jones" not in raised and raised["brown"] == 3 and min(raised.values()) >= 3
    assert set(raised) < set(sent)
    assert BASE["min-df"] == 1  # the server's own filter lets every word through: the party's floor held
    with pytest.raises(UserInputError, match="min-party-df is a node-config key"):
        _candidates_sent(tmp_path, {}, {"min-party-df": 1})  # not a run-config key: the server cannot set it
    everything, _ = _candidates_sent(tmp_path, {"min-party-df": 1})  # the party's own choice only
    assert everything["smith"] == 1


def test_a_curated_vocabulary_leaves_whole_without_its_document_frequencies():
    """An OCTIS vocabulary.txt or the generator's list is public: sent as it is, its counts are not."""
    from flower_topics.data.node_data import load_node_documents

    config = parse_run_config({"dataset": "synthetic", "synthetic-vocab-size": 40})
    documents = load_node_documents({"partition-id": 0, "num-partitions": 2}, config)
    candidates = documents.candidates(2)
    assert documents.curated and candidates.curated
    assert candidates.words == documents.corpus.vocabulary and not candidates.doc_freq.any()
    with pytest.raises(UserInputError, match="min-party-df"):
        documents.candidates(0)


def test_a_public_vocabulary_file_needs_no_candidates(tmp_path):
    a = write_corpus(tmp_path / "a.jsonl", ["pets"], 20, seed=1)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("cat\ndog\npuppy\nkitten\n")
    config = {**BASE, "vocabulary": str(vocab)}
    seen = []
    grid = _grid(config, [{"dataset": str(a)}])
    app = grid.client_app
    grid.client_app = lambda msg, ctx: seen.append(msg.metadata.message_type) or app(msg, ctx)
    agreement = agree_vocabulary(grid, config)
    assert agreement.vocabulary == ("cat", "dog", "puppy", "kitten") and agreement.mode == "file"
    assert seen == ["query.vocabulary"]


def test_federated_metrics_equal_the_pooled_evaluate_command(tmp_path, capsys):
    path = write_corpus(tmp_path / "all.jsonl", ["pets", "money", "space"], 150, seed=3)
    config = {**BASE, "dataset": str(path), "partition": "label", "output-dir": str(tmp_path / "run"),
              "num-rounds": 4, "lda.local-sweeps": 3}
    run_server(InProcessGrid.partitions(make_client_app(config), 3, config), config)
    last = read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]
    assert last["eval_parties"] == 3
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "run" / "model.npz"), "--corpus", str(path), "--labels"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    for name in ("perplexity", "npmi", "umass", "nmi", "purity", "diversity", "n_eval_tokens"):
        assert last[name] == pytest.approx(pooled[name], rel=1e-9, abs=1e-12), name


def _first_release(tmp_path, method, node_config, name):
    """The first training reply of a one-node run (what the server receives)."""
    path = tmp_path / "one.jsonl"
    if not path.exists():
        write_corpus(path, ["pets", "money"], 40, seed=5)
    config = {**BASE, "method": method, "num-rounds": 1, "pctd.consistency": 0.0, "federated-eval": False,
              "output-dir": str(tmp_path / name)}
    grid = _grid(config, [{"dataset": str(path), **node_config}])
    released = []
    app = grid.client_app
    grid.client_app = lambda msg, ctx: (lambda r: released.append(r) or r)(app(msg, ctx)) if msg.metadata.message_type \
        .startswith("train") else app(msg, ctx)
    run_server(grid, config)
    (reply,) = released
    return {k: v.numpy() for k, v in reply.content["update"].items()}


@pytest.mark.parametrize("method", ["pctd", "fedlda"])
def test_privacy_randomness_is_the_partys_secret(tmp_path, method):
    """Same run config, same data: different releases, with or without a fixed secret seed (a fixed
    secret is mixed with a fresh nonce per run: two runs on changed data cannot be differenced)."""
    first = _first_release(tmp_path, method, {}, "a")
    second = _first_release(tmp_path, method, {}, "b")
    assert any(not np.array_equal(first[k], second[k]) for k in first)
    fixed = [_first_release(tmp_path, method, {"secret-seed": 1234}, name) for name in ("c", "d")]
    assert any(not np.array_equal(fixed[0][k], fixed[1][k]) for k in fixed[0])


def _context(node_id=101, run_seed=0, **node_config):
    from flwr.app import Context, RecordDict

    return Context(run_id=1, node_id=node_id, node_config=node_config, state=RecordDict(),
                   run_config={"seed": run_seed})


def test_a_secret_seed_is_stable_within_a_run_and_differs_between_runs():
    """One run's rounds derive from one (secret, nonce); another run with the same secret gets another nonce;
    the nonce stays in the node's state, and nothing the server knows (run config, node id) enters the seed."""
    from flower_topics.federation.client_app import NONCE_STATE, party_seed

    run = _context(**{"secret-seed": 1234})
    seed = party_seed(run, {"seed": 0}, private=True)
    assert all(party_seed(run, {"seed": 0}, private=True) == seed for _ in range(3))  # every round of the run
    assert party_seed(run, {"seed": 7}, private=True) == seed  # the run config does not enter it
    assert NONCE_STATE in run.state.config_records and seed != 1234
    again = _context(**{"secret-seed": 1234})
    assert party_seed(again, {"seed": 0}, private=True) != seed  # the next run, same secret: other noise
    same_nonce = _context(node_id=999, run_seed=5, **{"secret-seed": 1234})  # other node id and run seed
    same_nonce.state[NONCE_STATE] = run.state[NONCE_STATE]
    assert party_seed(same_nonce, {"seed": 5}, private=True) == seed
    other_secret = _context(**{"secret-seed": 99})
    other_secret.state[NONCE_STATE] = run.state[NONCE_STATE]
    assert party_seed(other_secret, {"seed": 0}, private=True) != seed  # the secret enters it
    fresh = _context()  # no secret: OS entropy at every call
    assert party_seed(fresh, {"seed": 0}, private=True) != party_seed(fresh, {"seed": 0}, private=True)


def test_a_method_without_a_mechanism_reproduces_from_the_run_seed(tmp_path):
    assert all(np.array_equal(x, y) for x, y in zip(_first_release(tmp_path, "lda", {}, "a").values(),
                                                      _first_release(tmp_path, "lda", {}, "b").values()))


def test_bad_party_files_are_named_and_the_others_go_on(tmp_path, caplog):
    good = write_corpus(tmp_path / "good.jsonl", ["pets", "money"], 40, seed=1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    nodes = [{"dataset": str(good)}, {"dataset": str(tmp_path / "missing.jsonl")}, {"dataset": str(empty)},
             {"dataset": str(binary)}]
    config = {**BASE, "output-dir": str(tmp_path / "run")}
    grid = _grid(config, nodes)
    agreement = agree_vocabulary(grid, config)
    assert agreement.nodes == 1 and sorted(agreement.excluded) == [102, 103, 104]
    assert "does not exist" in agreement.excluded[102] and "empty" in agreement.excluded[103]
    assert "UTF-8" in agreement.excluded[104] or "utf-8" in agreement.excluded[104]
    model = run_server(_grid(config, nodes), config)  # the run goes on with the one good party
    assert model.topic_word.shape[0] == 3
    strict = {**config, "min-nodes": 2, "output-dir": str(tmp_path / "strict")}
    with pytest.raises(FederationError) as err:
        run_server(_grid(strict, nodes), strict)
    assert str(err.value).startswith("the vocabulary agreement: 1 node(s) can take part, min-nodes is 2 (node 102:")
    assert "\n" not in str(err.value) and not (tmp_path / "strict" / "model.npz").exists()


def test_a_party_with_no_word_of_the_vocabulary_is_dropped(tmp_path):
    pets = write_corpus(tmp_path / "pets.jsonl", ["pets"], 20, seed=1)
    space = write_corpus(tmp_path / "space.jsonl", ["space"], 20, seed=2)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("cat\ndog\n")
    config = {**BASE, "vocabulary": str(vocab)}
    agreement = agree_vocabulary(_grid(config, [{"dataset": str(pets)}, {"dataset": str(space)}]), config)
    assert agreement.nodes == 1 and "has 1 or more words of the agreed vocabulary" in agreement.excluded[102]


def test_private_vocabulary_releases_frequent_words_and_reports_its_budget(tmp_path):
    a = write_corpus(tmp_path / "a.jsonl", ["pets", "money"], 120, seed=1)
    b = write_corpus(tmp_path / "b.jsonl", ["space", "money"], 120, seed=2)
    nodes = [{"dataset": str(a)}, {"dataset": str(b)}]
    private = {**BASE, "vocabulary": "private", "vocabulary-epsilon": 4.0, "vocabulary-delta": 1e-6,
               "vocabulary-max-words": 5, "output-dir": str(tmp_path / "run")}
    union = agree_vocabulary(_grid(BASE, nodes), BASE).vocabulary
    model = run_server(_grid(private, nodes), private)
    assert 0 < len(model.vocabulary) <= len(union) and set(model.vocabulary) <= set(union)
    report = model.metadata["privacy"]  # lda has no mechanism of its own: the run spent what the agreement did
    assert report["epsilon"] == 4.0 and report["delta"] == 1e-6 and report["unit"] == "document"
    assert model.metadata["vocabulary_agreement"]["mode"] == "private"
