"""``flower-topics export``: gensim reads the dictionary and the topic-term matrix back; pyLDAvis prepares
the exported inputs, and its prepared data is what the export wrote."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flower_topics.cli.main import main
from flower_topics.federation.client_app import make_client_app
from flower_topics.topic_model.model_file import load_model
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from tests.test_trust_boundary import BASE, write_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exports")
    path = write_corpus(tmp / "all.jsonl", ["pets", "money", "space"], 90, seed=4)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": "The and of.", "label": "pets"}) + "\n")  # no word of the vocabulary
    config = {**BASE, "dataset": str(path), "partition": "label", "num-rounds": 4, "output-dir": str(tmp / "run")}
    run_server(InProcessGrid.partitions(make_client_app(config), 3, config), config)
    return tmp / "run", path


def test_gensim_reads_the_dictionary_and_the_topic_term_matrix(trained, tmp_path):
    from gensim.corpora import Dictionary

    run, corpus = trained
    model = load_model(run / "model.npz")
    assert main(["export", str(run), "--format", "gensim", "--out", str(tmp_path / "g"), "--corpus", str(corpus)]) == 0
    dictionary = Dictionary.load_from_text(str(tmp_path / "g" / "dictionary.txt"))
    assert [dictionary[i] for i in range(len(dictionary))] == list(model.vocabulary)
    assert dictionary.num_docs == 91
    np.testing.assert_array_equal(np.load(tmp_path / "g" / "topic_term.npy"), model.topic_word)
    # gensim's bag of words of each document is the one the model folds in, and its document frequencies add up
    documents = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    counts = model.read_documents(corpus)
    tokens = [[w for w in text.lower().replace(".", " ").split() if w in dictionary.token2id] for text in documents]
    for d, words in enumerate(tokens):
        assert sum(n for _, n in dictionary.doc2bow(words)) == counts.n_words[d]
    assert dictionary.dfs == {i: sum(1 for words in tokens if dictionary[i] in words) for i in dictionary.dfs}
    # without a corpus the model file has no counts: document frequencies are 0, said as such
    assert main(["export", str(run / "model.npz"), "--format", "gensim", "--out", str(tmp_path / "bare")]) == 0
    bare = Dictionary.load_from_text(str(tmp_path / "bare" / "dictionary.txt"))
    assert bare.num_docs == 0 and set(bare.dfs.values()) <= {0} and len(bare) == len(model.vocabulary)


def test_pyldavis_prepares_the_exported_inputs(trained, tmp_path):
    import pyLDAvis

    run, corpus = trained
    model = load_model(run / "model.npz")
    out = tmp_path / "p"
    assert main(["export", str(run), "--format", "pyldavis", "--out", str(out), "--corpus", str(corpus)]) == 0
    data = json.loads((out / "pyldavis_input.json").read_text())
    topics = model.read_documents(corpus)
    kept = ~topics.empty
    assert (~kept).sum() == 1 and json.loads((out / "export.json").read_text())["documents_without_words"] == 1
    np.testing.assert_allclose(data["doc_topic_dists"], topics.theta[kept])
    assert data["doc_lengths"] == topics.n_words[kept].tolist()
    used = [model.vocabulary.index(w) for w in data["vocab"]]
    phi = model.topic_word[:, used]
    np.testing.assert_allclose(data["topic_term_dists"], phi / phi.sum(axis=1, keepdims=True))
    assert sum(data["term_frequency"]) == int(topics.n_words.sum())
    prepared = pyLDAvis.prepare(**data, sort_topics=False, start_index=0)
    written = json.loads((out / "pyldavis_prepared.json").read_text())
    assert written == json.loads(prepared.to_json())
    assert len(written["mdsDat"]["topics"]) == model.n_topics
    assert set(written["tinfo"]["Term"]) <= set(model.vocabulary)


def test_pyldavis_without_a_corpus_says_why_in_one_line(trained, tmp_path, capsys):
    run, _ = trained
    assert main(["export", str(run), "--format", "pyldavis", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--corpus" in err
