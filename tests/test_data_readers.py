"""Corpus readers, preprocessing and train/val/test splits."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from flower_topics.data import (
    PreprocessConfig,
    ensure_split,
    load_corpus,
    preprocess,
    read_split,
    test_corpus,
    training_corpus,
    write_split,
)
from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.errors import UserInputError

FIXTURES = Path(__file__).parent / "fixtures"


def all_words(corpus) -> list[list[str]]:
    return [corpus.words(d) for d in range(corpus.n_docs)]


# ---------------------------------------------------------------- OCTIS folders
def test_octis_keeps_vocabulary_order_split_and_labels():
    corpus = load_corpus(FIXTURES / "octis")
    assert corpus.vocabulary == ("zebra", "apple", "mango", "banana")
    # "unknownword" is not in vocabulary.txt: dropped, and the document it filled is gone
    assert all_words(corpus) == [
        ["apple", "zebra", "apple"], ["mango", "banana"], ["zebra", "zebra"], ["banana", "mango"],
    ]
    assert corpus.tokens[:3].tolist() == [1, 0, 1]
    assert corpus.split.tolist() == ["train", "train", "val", "test"]
    assert corpus.labels.tolist() == ["fruit", "fruit", "animal", "fruit"]


def test_octis_ignores_preprocess_config_and_accepts_the_tsv_path():
    corpus = load_corpus(FIXTURES / "octis" / "corpus.tsv", preprocess_config=PreprocessConfig(max_vocab=1))
    assert corpus.n_words == 4
    assert corpus.n_docs == 4


def _octis_rows(folder: Path) -> list[list[str]]:
    """corpus.tsv's lines split by hand: tokens, partition, label."""
    return [line.split("\t") for line in (folder / "corpus.tsv").read_text(encoding="utf-8").splitlines()]


def test_an_octis_dataset_of_real_text_loads_with_its_partition():
    """An OCTIS folder as OCTIS publishes them (tests/fixtures/make_octis.py: 96 Debian descriptions)."""
    folder = FIXTURES / "octis_debian"
    corpus = load_corpus(folder)
    metadata = json.loads((folder / "metadata.json").read_text())
    rows = _octis_rows(folder)
    words = (folder / "vocabulary.txt").read_text(encoding="utf-8").split()
    distinct = {w for row in rows for w in row[0].split()}
    assert (corpus.n_docs, corpus.n_words) == (len(rows), len(words)) == (96, len(distinct))  # 12 x 8 sections
    assert (metadata["total_documents"], metadata["vocabulary_length"]) == (96, len(distinct))
    assert corpus.vocabulary == tuple(words) != tuple(sorted(words))  # vocabulary.txt order, not alphabetical
    assert list(corpus.vocabulary[:3]) == list(dict.fromkeys(rows[0][0].split()))[:3]  # the first document's words
    assert set(corpus.labels) == set(metadata["labels"]) == {row[2] for row in rows}
    assert Counter(corpus.labels) == {label: 12 for label in metadata["labels"]}  # 12 of each of the 8 sections
    assert corpus.words(0) == rows[0][0].split()
    # Partitions are contiguous train, val, test blocks: 67 (70 % of 96, rounded), 14 and 15 documents
    split = corpus.split
    assert Counter(split) == {"train": 67, "val": 14, "test": 15}
    assert (split[:67] == "train").all() and (split[67:81] == "val").all() and (split[81:] == "test").all()
    assert (metadata["last-training-doc"], metadata["last-validation-doc"]) == (67, 81)
    assert corpus.n_tokens == sum(len(row[0].split()) for row in rows)
    assert corpus.n_tokens == pytest.approx(metadata["words_document_mean"] * 96, rel=1e-12)


def test_a_synthetic_octis_dataset_split_counts_match_metadata():
    folder = FIXTURES / "octis_synthetic"
    corpus = load_corpus(folder)
    metadata = json.loads((folder / "metadata.json").read_text())
    rows = _octis_rows(folder)
    assert len(rows) == corpus.n_docs == metadata["total_documents"] == 60  # 3 nodes of 20 documents
    assert corpus.n_words == len({w for row in rows for w in row[0].split()}) == metadata["vocabulary_length"]
    counts = Counter(corpus.split)
    assert counts == {"train": 36, "val": 12, "test": 12}  # 60 %, 20 %, 20 % of 60
    assert counts["train"] == metadata["last-training-doc"]
    assert counts["train"] + counts["val"] == metadata["last-validation-doc"]
    assert sorted(set(corpus.labels)) == ["node-0", "node-1", "node-2"] == metadata["labels"]


def test_the_octis_fixtures_are_what_their_script_writes(tmp_path):
    """tests/fixtures/make_octis.py rebuilds both folders byte for byte (from the embedded and synthetic corpora)."""
    from tests.fixtures.make_octis import main as make_octis

    make_octis(tmp_path)
    for name in ("octis_debian", "octis_synthetic"):
        made = sorted(p.name for p in (tmp_path / name).iterdir())
        assert made == sorted(p.name for p in (FIXTURES / name).iterdir())
        for file in made:
            assert (tmp_path / name / file).read_bytes() == (FIXTURES / name / file).read_bytes(), (name, file)


# ------------------------------------------------------------- raw text formats
def test_jsonl_is_preprocessed_with_labels(caplog):
    with caplog.at_level(logging.INFO, logger="flower_topics"):
        corpus = load_corpus(FIXTURES / "docs.jsonl")
    assert corpus.vocabulary == (
        "barked", "cat", "cats", "closed", "dog", "dogs", "fell", "markets", "mat", "pets", "sat", "stocks",
    )
    # the 4th text is only stopwords: dropped and logged
    assert all_words(corpus) == [
        ["cat", "sat", "mat"],
        ["dogs", "cats", "pets", "dog", "barked"],
        ["stocks", "fell", "markets", "closed"],
    ]
    assert corpus.labels.tolist() == ["pets", "pets", "finance"]
    assert corpus.split is None
    assert any("dropped 1 of 4 documents" in r.getMessage() for r in caplog.records)


def test_jsonl_custom_columns_and_no_labels(tmp_path):
    path = tmp_path / "c.jsonl"
    # an unescaped line separator (U+2028) inside a string does not end the JSON line
    path.write_text('{"body": "Alpha beta"}\n{"body": "gamma\u2028delta", "kind": null}\n', encoding="utf-8")
    corpus = load_corpus(path, text_column="body", label_column="kind")
    assert corpus.labels is None
    assert corpus.n_docs == 2
    assert corpus.vocabulary == ("alpha", "beta", "delta", "gamma")


def test_the_embedded_debian_descriptions_load_with_labels():
    corpus = load_corpus(EMBEDDED_PATH)
    assert corpus.n_docs == 1346  # none is only stopwords
    assert sorted(set(corpus.labels)) == ["database", "fonts", "games", "graphics", "mail", "math", "science", "sound"]
    assert corpus.split is None
    # "Real-time strategy game of ancient warfare." (0ad's, the file's first line): "of" is a stopword
    assert corpus.words(0)[:6] == ["real", "time", "strategy", "game", "ancient", "warfare"]


def test_csv_with_label_handles_quoted_commas_and_newlines():
    corpus = load_corpus(FIXTURES / "docs.csv")
    assert all_words(corpus) == [
        ["rain", "wind", "snow", "hit", "coast"], ["sunny", "skies", "coast"], ["rates", "rise"],
    ]
    assert corpus.labels.tolist() == ["weather", "weather", "finance"]


def test_csv_without_label_column_has_no_labels():
    corpus = load_corpus(FIXTURES / "docs_nolabel.csv")
    assert corpus.labels is None
    assert all_words(corpus) == [["rain", "wind"], ["sunny", "skies"]]


def test_txt_folder_labels_come_from_subfolders():
    corpus = load_corpus(FIXTURES / "txt_labeled")
    # files in path order: sport/goal.txt, sport/match.txt, tech/chip.txt
    assert corpus.labels.tolist() == ["sport", "sport", "tech"]
    assert all_words(corpus) == [
        ["goal", "striker", "scored", "late", "goal"],
        ["match", "ended", "draw"],
        ["new", "chip", "doubles", "battery", "life"],
    ]


def test_flat_txt_folder_has_no_labels(tmp_path):
    (tmp_path / "a.txt").write_text("Orange juice")
    (tmp_path / "b.txt").write_text("Apple pie")
    corpus = load_corpus(tmp_path)
    assert corpus.labels is None
    assert all_words(corpus) == [["orange", "juice"], ["apple", "pie"]]


# ---------------------------------------------------------------- preprocessing
TEXTS = ["apple banana apple", "banana cherry", "banana date cherry", "eggplant"]
# document frequencies: apple 1, banana 3, cherry 2, date 1, eggplant 1


@pytest.mark.parametrize(
    ("options", "vocabulary", "n_dropped"),
    [
        ({}, ("apple", "banana", "cherry", "date", "eggplant"), 0),
        ({"min_df": 2}, ("banana", "cherry"), 1),
        ({"min_df": 0.5}, ("banana", "cherry"), 1),  # fraction of the 4 texts: >= 2 documents
        ({"max_df": 0.5}, ("apple", "cherry", "date", "eggplant"), 0),
        ({"max_df": 2}, ("apple", "cherry", "date", "eggplant"), 0),  # a count: <= 2 documents
        ({"max_vocab": 2}, ("banana", "cherry"), 1),
        ({"max_vocab": 3}, ("apple", "banana", "cherry"), 1),  # df ties (apple, date, eggplant) go alphabetically
    ],
)
def test_vocabulary_filters(options, vocabulary, n_dropped):
    corpus, report = preprocess(TEXTS, PreprocessConfig(**options))
    assert corpus.vocabulary == vocabulary
    assert report.n_dropped_empty == n_dropped
    assert report.n_input_docs == 4
    assert report.vocabulary_size == len(vocabulary)
    assert report.n_tokens == corpus.n_tokens


def test_filtering_keeps_word_order_and_labels_of_surviving_documents():
    corpus, _ = preprocess(TEXTS, PreprocessConfig(min_df=2), labels=["a", "b", "c", "d"])
    assert all_words(corpus) == [["banana"], ["banana", "cherry"], ["banana", "cherry"]]
    assert corpus.labels.tolist() == ["a", "b", "c"]


def test_stopwords_case_and_token_pattern():
    texts = ["The Cat and THE dog", "A cat 42 x-ray"]
    corpus, _ = preprocess(texts, PreprocessConfig())
    assert all_words(corpus) == [["cat", "dog"], ["cat", "ray"]]
    corpus, _ = preprocess(texts, PreprocessConfig(stopwords=None))
    assert all_words(corpus) == [["the", "cat", "and", "the", "dog"], ["cat", "ray"]]
    corpus, _ = preprocess(texts, PreprocessConfig(lowercase=False))
    assert all_words(corpus) == [["Cat", "dog"], ["cat", "ray"]]  # stopwords match in any case
    corpus, _ = preprocess(texts, PreprocessConfig(token_pattern=r"\S+", stopwords=None, lowercase=False))
    assert corpus.words(1) == ["A", "cat", "42", "x-ray"]


def test_min_doc_length_drops_short_documents_and_their_words():
    corpus, report = preprocess(["red green blue", "cyan pink", "gold"], PreprocessConfig(min_doc_length=3))
    assert report.n_dropped_empty == 2
    assert corpus.vocabulary == ("blue", "green", "red")  # no word is left that occurs nowhere


def test_nothing_left_after_preprocessing_is_an_error():
    with pytest.raises(UserInputError, match="no documents after preprocessing"):
        preprocess(["the and of", "a an"], PreprocessConfig())


@pytest.mark.parametrize(
    "options",
    [
        {"min_df": 0}, {"min_df": 1.5}, {"min_df": -1}, {"max_df": 0}, {"max_df": 2.5}, {"max_df": float("nan")},
        {"max_vocab": 0}, {"min_doc_length": 0}, {"stopwords": "klingon"}, {"token_pattern": "("},
        {"token_pattern": r"(a)(b)"},
    ],
)
def test_bad_preprocess_options_are_user_errors(options):
    with pytest.raises(UserInputError):
        PreprocessConfig(**options)


def test_max_df_below_min_df_is_a_user_error():
    with pytest.raises(UserInputError, match="max-df"):
        preprocess(TEXTS, PreprocessConfig(min_df=3, max_df=2))


# ------------------------------------------------------------------ bad inputs
def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "does not exist"),
        ("corpus.xml", "<doc/>", "unknown format"),
        ("empty.jsonl", "", "empty"),
        ("bad.jsonl", '{"text": "ok"}\n{"text": \n', "line 2 is not valid JSON"),
        ("list.jsonl", '["text"]\n', "not an object"),
        ("notext.jsonl", '{"body": "hello world"}\n', "no 'text' field .*body"),
        ("nulltext.jsonl", '{"text": null}\n', "not text"),
        ("partial.jsonl", '{"text": "hello world", "label": "x"}\n{"text": "more words"}\n', "line 2 has no 'label'"),
        ("empty.csv", "", "empty"),
        ("notext.csv", "body,label\nhello world,x\n", r"no 'text' column \(columns: body, label\)"),
        ("header_only.csv", "text,label\n", "no rows"),
        ("ragged.csv", "text,label\nhello, world,x\n", "row 2 has 3 fields"),
        ("latin1.jsonl", '{"text": "caf\xe9"}\n'.encode("latin-1"), "not UTF-8"),
        ("octis/corpus.tsv", "", "empty"),
        ("octis_partition/corpus.tsv", "a b\ttraining\tx\n", "partition 'training'"),
        ("octis_ragged/corpus.tsv", "a b\ttrain\tx\na\ttrain\n", "line 2 has 2 tab-separated columns"),
        ("octis_unknown/corpus.tsv", "a b\ttrain\tx\n", "no document with a word of its vocabulary"),
        ("octis_dup/corpus.tsv", "a b\ttrain\tx\n", "more than once"),
        ("no_txt/readme.md", "nothing here", "neither corpus.tsv nor .txt"),
        ("mixed/top.txt", "top level text", "both at its top level and in subfolders"),
    ],
)
def test_bad_corpora_are_user_errors(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        _write(path, content)
    if name.startswith("octis_unknown"):
        _write(path.parent / "vocabulary.txt", "zzz\n")
    if name.startswith("octis_dup"):
        _write(path.parent / "vocabulary.txt", "a\nb\na\n")
    if name.startswith("mixed"):
        _write(path.parent / "sub" / "nested.txt", "nested text")
    target = path.parent if name.startswith(("octis", "no_txt", "mixed")) else path
    with pytest.raises(UserInputError, match=message) as error:
        load_corpus(target)
    assert "\n" not in str(error.value)


# ----------------------------------------------------------------------- splits
def _unsplit(n_docs: int):
    texts = [f"word{'x' * (d % 7)} common" for d in range(n_docs)]
    return preprocess(texts, PreprocessConfig(token_pattern=r"\w+"))[0]


def test_ensure_split_is_deterministic_with_exact_ratios():
    corpus = _unsplit(1000)
    a, b, c = ensure_split(corpus, seed=3), ensure_split(corpus, seed=3), ensure_split(corpus, seed=4)
    assert Counter(a.split) == {"train": 800, "val": 100, "test": 100}
    assert a.split.tolist() == b.split.tolist()
    assert a.split.tolist() != c.split.tolist()
    assert np.array_equal(a.tokens, corpus.tokens)  # documents keep their order
    halves = ensure_split(corpus, seed=3, ratios=(0.5, 0.25, 0.25))
    assert Counter(halves.split) == {"train": 500, "val": 250, "test": 250}


def test_ensure_split_keeps_an_existing_split_and_gives_tiny_corpora_a_test_document():
    octis = load_corpus(FIXTURES / "octis")
    assert ensure_split(octis, seed=0) is octis
    assert Counter(ensure_split(_unsplit(5), seed=0).split) == {"train": 3, "val": 1, "test": 1}


def test_bad_split_ratios_are_user_errors():
    with pytest.raises(UserInputError, match="ratios"):
        ensure_split(_unsplit(10), seed=0, ratios=(0.8, 0.3, 0.1))


def test_split_round_trips_through_a_file(tmp_path):
    corpus = ensure_split(_unsplit(50), seed=1)
    path = write_split(tmp_path / "run" / "split.txt", corpus)
    assert read_split(path).tolist() == corpus.split.tolist()
    (tmp_path / "bad.txt").write_text("train\ntrian\n")
    with pytest.raises(UserInputError, match="line 2"):
        read_split(tmp_path / "bad.txt")
    with pytest.raises(UserInputError, match="does not exist"):
        read_split(tmp_path / "none.txt")


def test_training_and_test_corpora():
    corpus = load_corpus(FIXTURES / "octis")
    assert all_words(training_corpus(corpus)) == [["apple", "zebra", "apple"], ["mango", "banana"], ["zebra", "zebra"]]
    assert all_words(test_corpus(corpus)) == [["banana", "mango"]]
