"""Topics of a party's own documents: ``flower-topics infer``, the Python API, and the node config's
``theta-out`` (written on the party at each federated evaluation, never sent)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from flower_topics.cli.main import main
from flower_topics.federation.client_app import agreed_documents, data_config, make_client_app
from flower_topics.topic_model.model_file import TopicModel
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from tests.test_trust_boundary import BASE, TOPICS, write_corpus
from tests.wire_audit import CARRIED_KIND, Audit, party_sizes


def _read_csv(path):
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _train(tmp_path, name, node_extra=({}, {})):
    """A two-party lda run on files with ids; returns the model, the audit and the party files."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    a = write_corpus(tmp_path / "a.jsonl", ["pets", "money"], 50, seed=1)
    b = write_corpus(tmp_path / "b.jsonl", ["space", "money"], 40, seed=2)
    for path, prefix in ((a, "a"), (b, "b")):  # give every document an id, and one a text of unknown words only
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        rows.append({"text": "The and of. It is 42!", "label": "money"})  # stopwords only
        path.write_text("".join(json.dumps({"id": f"{prefix}-{i}", **r}) + "\n" for i, r in enumerate(rows)))
    config = {**BASE, "method": "lda", "num-rounds": 4, "output-dir": str(tmp_path / name)}
    app = make_client_app(config)
    audit = Audit()
    nodes = [{"dataset": str(a), **node_extra[0]}, {"dataset": str(b), **node_extra[1]}]
    model = run_server(InProcessGrid(audit.wrap(app), nodes, config), config)
    return model, audit, config, (a, b)


def test_theta_out_is_written_on_the_party_and_nothing_of_it_leaves(tmp_path):
    outs = [tmp_path / "party-a" / "theta.csv", tmp_path / "party-b" / "out" / "theta.csv"]
    model, audit, config, (a, b) = _train(tmp_path, "with", ({"theta-out": str(outs[0])}, {"theta-out": str(outs[1])}))
    # every reply is on the documented list (the wire audit)
    seen = audit.check(party_sizes(lambda context: agreed_documents(context, data_config(config))))
    assert seen["evaluate"] + seen[CARRIED_KIND] == 2 * 4  # every round: the last by its own message
    # and the replies are those of the same run without theta-out: the file changes nothing that is sent
    _, plain, _, _ = _train(tmp_path / "plain", "without")
    assert len(plain.sent) == len(audit.sent)
    for (req1, rep1, _), (req2, rep2, _) in zip(audit.sent, plain.sent):
        assert req1.metadata.message_type == req2.metadata.message_type
        assert set(rep1.content.keys()) == set(rep2.content.keys())
        for key, record in rep1.content.items():
            other = rep2.content[key]
            assert set(record.keys()) == set(other.keys())
            for field, value in record.items():
                if hasattr(value, "numpy"):
                    assert np.array_equal(value.numpy(), other[field].numpy()), (key, field)
                else:
                    assert value == other[field], (key, field)
    # the party's file: one row per document of its file, with its id, under the final model
    for out, corpus in zip(outs, (a, b)):
        rows = _read_csv(out)
        ids = [json.loads(line)["id"] for line in corpus.read_text().splitlines()]
        assert [r["id"] for r in rows] == ids
        theta = np.array([[float(r[f"topic_{k}"]) for k in range(3)] for r in rows[:-1]])
        np.testing.assert_allclose(theta.sum(axis=1), 1.0, atol=1e-5)
        assert rows[-1]["n_words"] == "0" and rows[-1]["top_topic"] == "" and rows[-1]["topic_0"] == ""
        # what `flower-topics infer` gives from the final model on the same file, on the same machine
        assert main(["infer", "--model", str(tmp_path / "with" / "model.npz"), "--corpus", str(corpus),
                     "--out", str(tmp_path / "infer.csv")]) == 0
        assert _read_csv(tmp_path / "infer.csv") == rows


def test_infer_round_trip_and_the_python_api(tmp_path, capsys):
    model, _, _, (a, _) = _train(tmp_path, "run")
    path = tmp_path / "run" / "model.npz"
    assert main(["infer", "--model", str(path), "--corpus", str(a), "--out", str(tmp_path / "theta.csv")]) == 0
    assert "1 have no word of the model's vocabulary" in capsys.readouterr().out
    rows = _read_csv(tmp_path / "theta.csv")
    loaded = TopicModel.load(path)
    topics = loaded.read_documents(a)
    assert [r["id"] for r in rows] == list(topics.ids)
    np.testing.assert_allclose(topics.theta.sum(axis=1), 1.0)
    assert topics.empty.tolist() == [False] * (len(rows) - 1) + [True]
    assert [int(r["top_topic"]) for r in rows[:-1]] == topics.top_topic[:-1].tolist()
    # transform of raw texts: each document labelled like the topic it was written from
    texts = [json.loads(line)["text"] for line in a.read_text().splitlines()][:-1]
    labels = [json.loads(line)["label"] for line in a.read_text().splitlines()][:-1]
    theta = loaded.transform(texts)
    np.testing.assert_allclose(theta, topics.theta[:-1])
    by_label = {label: {t for t, l in zip(theta.argmax(axis=1), labels) if l == label} for label in set(labels)}
    assert all(len(v) == 1 for v in by_label.values()) and len(set.union(*by_label.values())) == len(by_label)
    # a document made of one topic's top words gets that topic
    for k in range(loaded.n_topics):
        words = [w for w, _ in loaded.topic_terms(k, 4)]
        assert loaded.transform([" ".join(words * 3)]).argmax() == k
    # the documents of a topic: those whose top topic it is, largest share first
    for k in range(loaded.n_topics):
        members = topics.documents_of(k)
        assert set(members) == set(np.flatnonzero(topics.top_topic == k))
        assert np.all(np.diff(topics.theta[members, k]) <= 0)
    assert sum(len(topics.documents_of(k)) for k in range(loaded.n_topics)) == len(rows) - 1
    # words the run removed (stopwords) or never saw do not count; a text with none of its words is empty
    empty = loaded.document_topics(["The and of", "zzz"])
    assert empty.empty.tolist() == [True, True] and empty.top_topic.tolist() == [-1, -1]
    assert {w for w, _ in loaded.topic_terms(0, 3)} <= set().union(*map(set, TOPICS.values()))


def test_infer_bad_input_is_one_line(tmp_path, capsys):
    assert main(["infer", "--model", str(tmp_path / "none.npz"), "--corpus", str(tmp_path), "--out", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err


def test_theta_out_on_a_simulated_node_covers_its_share(tmp_path):
    path = write_corpus(tmp_path / "all.jsonl", ["pets", "money", "space"], 90, seed=3)
    config = {**BASE, "dataset": str(path), "partition": "label", "num-rounds": 2, "output-dir": str(tmp_path / "r")}
    grid = InProcessGrid.partitions(make_client_app(config), 3, config)
    for pid, context in enumerate(grid.contexts.values()):
        context.node_config["theta-out"] = str(tmp_path / f"theta-{pid}.csv")
    run_server(grid, config)
    total = sum(len(_read_csv(tmp_path / f"theta-{pid}.csv")) for pid in range(3))
    assert total == 90  # every document once, over the three shares
