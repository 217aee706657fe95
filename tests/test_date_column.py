"""The reading option ``date-column``: each document's date read from a .jsonl/.csv corpus, kept on
``Corpus.dates`` for exactly the documents that survive, through preprocessing, subsets, the corpus
cache, simulated shares, a party's own file and the agreed vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flower_topics.data import corpus_cache
from flower_topics.data.corpus import Corpus
from flower_topics.data.corpus_cache import cache_file, cache_key, cached_corpus, open_cache, source_identity, write_cache
from flower_topics.data.node_data import NodeDocuments, load_node_documents, share_indices, simulated_share, split_ratios
from flower_topics.data.periods import document_periods
from flower_topics.data.readers import load_corpus, read_csv, read_jsonl
from flower_topics.data.splits import ensure_split
from flower_topics.errors import UserInputError
from flower_topics.run.config import parse_run_config
from flower_topics.topic_model.document_topics import count_corpus, read_documents
from tests.test_corpus_cache import cache_in, clear  # noqa: F401 (each test's own cache folder, nothing read before)

READING = {"text-column": "text", "label-column": "label", "date-column": "date", "lowercase": True,
           "stopwords": "english"}


def write_jsonl(path: Path, records: list[dict | None]) -> Path:
    """One JSON object per line; None writes a blank line."""
    path.write_text("".join("\n" if r is None else json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# Mixed formats: YYYY-MM, an ISO date, an ISO date-time, a JSON number year, missing, null, blank.
RECORDS = [
    {"text": "apples oranges bananas", "date": "2024-03"},
    {"text": "apples pears grapes", "date": "2024-05-02"},
    {"text": "kiwi melon apples", "date": "2023-11-30T08:15:00+01:00"},
    {"text": "pears melon kiwi", "date": 2022},
    {"text": "bananas grapes kiwi"},
    {"text": "oranges apples melon", "date": None},
    {"text": "grapes pears oranges", "date": "   "},
]
EXPECTED = ["2024-03", "2024-05-02", "2023-11-30T08:15:00+01:00", "2022", "", "", ""]


def test_jsonl_dates_are_the_values_as_strings_and_no_date_is_empty(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    texts, labels, dates = read_jsonl(path, text_column="text", label_column="label", date_column="date")
    assert dates == EXPECTED and labels is None and len(texts) == len(RECORDS)
    corpus = load_corpus(path, date_column="date")
    assert corpus.dates.dtype == object and corpus.dates.tolist() == EXPECTED
    periods, index = document_periods(corpus.dates, "year")
    assert periods == ("2022", "2023", "2024") and index.tolist() == [2, 2, 1, 0, -1, -1, -1]


def test_without_date_column_there_are_no_dates(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    assert read_jsonl(path, text_column="text", label_column="label")[2] is None
    assert load_corpus(path).dates is None


def test_csv_dates_and_blank_cells(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('text,date,label\napples oranges,2024-03,a\n"pears\nmelon",,b\nkiwi grapes,2021,a\n',
                    encoding="utf-8")
    texts, labels, dates = read_csv(path, text_column="text", label_column="label", date_column="date")
    assert dates == ["2024-03", "", "2021"] and labels == ["a", "b", "a"] and texts[1] == "pears\nmelon"
    corpus = load_corpus(path, date_column="date")
    assert corpus.dates.tolist() == ["2024-03", "", "2021"] and corpus.labels.tolist() == ["a", "b", "a"]


def test_a_date_column_no_document_has_is_one_line_naming_the_fields(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "apples", "year": 2020}, {"text": "pears", "label": "x"}])
    with pytest.raises(UserInputError) as refused:
        load_corpus(path, date_column="date")
    message = str(refused.value)
    assert "\n" not in message and "'date'" in message and "text, year, label" in message
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("text,when\napples,2020\n", encoding="utf-8")
    with pytest.raises(UserInputError) as refused:
        load_corpus(csv_path, date_column="date")
    assert "\n" not in str(refused.value) and "'date'" in str(refused.value) and "text, when" in str(refused.value)


def test_a_bad_date_is_refused_with_its_line(tmp_path):
    # blank lines are skipped but counted: the bad value sits on line 4 of the file
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "apples", "date": "2024-01"}, None,
                                              {"text": "pears"}, {"text": "kiwi", "date": "2024-13"}])
    with pytest.raises(UserInputError, match=r"c\.jsonl, line 4: date '2024-13' is not a date"):
        load_corpus(path, date_column="date")
    csv_path = tmp_path / "c.csv"  # a quoted text over two lines: the third row starts on line 4
    csv_path.write_text('text,date\n"apples\npears",2024\nkiwi,March 2024\n', encoding="utf-8")
    with pytest.raises(UserInputError, match=r"c\.csv, line 4: date 'March 2024' is not a date"):
        read_csv(csv_path, text_column="text", label_column="label", date_column="date")


def test_formats_without_columns_refuse_a_date_column(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("apples pears", encoding="utf-8")
    with pytest.raises(UserInputError, match="folder of .txt files.*date-column applies to .jsonl and .csv"):
        load_corpus(folder, date_column="date")
    assert load_corpus(folder).dates is None


def test_dates_follow_the_documents_preprocessing_keeps(tmp_path):
    # the second and fourth documents are stopwords only: dropped, and their dates with them
    records = [{"text": "apples pears", "date": "2020"}, {"text": "the of and", "date": "2021"},
               {"text": "kiwi melon", "date": "2022"}, {"text": "is it", "date": "2023"},
               {"text": "grapes kiwi"}]
    corpus = load_corpus(write_jsonl(tmp_path / "c.jsonl", records), date_column="date")
    assert corpus.n_docs == 3 and corpus.dates.tolist() == ["2020", "2022", ""]
    assert [corpus.words(d) for d in range(3)] == [["apples", "pears"], ["kiwi", "melon"], ["grapes", "kiwi"]]


def test_corpus_checks_and_carries_dates():
    corpus = Corpus.from_documents([[0, 1], [1], [0]], ("a", "b"), dates=["2020", None, "2021-02"])
    assert corpus.dates.tolist() == ["2020", "", "2021-02"]
    assert corpus.subset([2, 0]).dates.tolist() == ["2021-02", "2020"]
    assert corpus.subset([]).dates.shape == (0,)
    with pytest.raises(ValueError, match="dates must have one entry per document"):
        Corpus.from_documents([[0], [1]], ("a", "b"), dates=["2020"])


def test_corpus_cache_round_trip_keeps_dates(tmp_path, cache_in):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    read = load_corpus(path, date_column="date", preprocess_config=corpus_cache.preprocess_config(READING))
    cached = cached_corpus(path, READING)
    assert cached.dates.tolist() == read.dates.tolist() == EXPECTED
    again = cached_corpus(path, READING)  # from the file now
    assert again.corpus().dates.tolist() == EXPECTED
    assert again.subset([6, 0, 3]).dates.tolist() == [EXPECTED[6], EXPECTED[0], EXPECTED[3]]
    without = cached_corpus(path, {**READING, "date-column": ""})  # another reading: another file, no dates
    assert without.dates is None
    assert cache_file(cache_in, cache_key(path, READING)) != cache_file(cache_in, cache_key(path, {**READING,
                                                                                                 "date-column": ""}))


def test_an_older_cache_file_is_rebuilt_not_misread(tmp_path, cache_in, monkeypatch, caplog):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    target = cache_file(cache_in, cache_key(path, READING))
    no_dates = corpus_cache.read_source(path, {**READING, "date-column": ""})
    current = corpus_cache.FORMAT_VERSION
    monkeypatch.setattr(corpus_cache, "FORMAT_VERSION", 2)  # a file of the layout before dates, at this name
    write_cache(target, no_dates, curated=False, identity=source_identity(path), key=cache_key(path, READING))
    monkeypatch.setattr(corpus_cache, "FORMAT_VERSION", current)
    assert open_cache(target, identity=source_identity(path), key=cache_key(path, READING)) == (None, "outdated")
    with caplog.at_level("WARNING", logger="flower_topics"):
        cached = cached_corpus(path, READING)
    assert "older format" in caplog.text and cached.dates.tolist() == EXPECTED


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_simulated_share_carries_the_dates_of_its_documents(tmp_path, cache_in, monkeypatch, cache):
    rng = np.random.default_rng(3)
    words = ["apples", "pears", "kiwi", "melon", "grapes", "bananas", "oranges", "plums"]
    records = [{"text": " ".join(rng.choice(words, 5)), "date": f"20{10 + i % 12}-{1 + i % 12:02d}"}
               for i in range(60)]
    for i in range(0, 60, 7):
        del records[i]["date"]
    path = write_jsonl(tmp_path / "c.jsonl", records)
    if cache == "off":
        monkeypatch.setenv(corpus_cache.CACHE_ENV, "off")
    config = parse_run_config({"dataset": str(path), "date-column": "date", "partition": "iid", "seed": 5})
    whole = ensure_split(load_corpus(path, date_column="date", preprocess_config=corpus_cache.preprocess_config(
        config)), seed=5, ratios=split_ratios(float(config["heldout-fraction"])))
    parts = share_indices(whole, config, 3)
    for pid in range(3):
        share = simulated_share(config, pid, 3).corpus
        assert share.dates.tolist() == whole.dates[parts[pid]].tolist()
        assert np.array_equal(share.tokens, whole.subset(parts[pid]).tokens)
    assert sorted(np.concatenate(parts).tolist()) == list(range(60))


def test_a_partys_own_file_with_its_date_column(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": r["text"], "when": r.get("date")} for r in RECORDS])
    run_config = parse_run_config({"partition": "iid"})
    node = load_node_documents({"dataset": str(path), "date-column": "when"}, run_config)
    assert node.corpus.dates.tolist() == EXPECTED
    cached = load_node_documents({"dataset": str(path), "date-column": "when", "corpus-cache": str(tmp_path / "pc")},
                                 run_config)
    assert cached.corpus.dates.tolist() == EXPECTED


def test_on_vocabulary_keeps_dates_aligned_when_it_drops_documents(tmp_path):
    corpus = ensure_split(load_corpus(write_jsonl(tmp_path / "c.jsonl", RECORDS), date_column="date"), seed=0)
    agreed = NodeDocuments(corpus, False, "test").on_vocabulary(("kiwi", "melon"))
    # documents with kiwi or melon: 2 (kiwi melon apples), 3 (pears melon kiwi), 4 (bananas grapes kiwi), 5
    assert agreed.n_docs == 4 and agreed.dates.tolist() == [EXPECTED[2], EXPECTED[3], EXPECTED[4], EXPECTED[5]]
    assert agreed.split.tolist() == corpus.split[[2, 3, 4, 5]].tolist()


def test_read_documents_and_count_corpus_carry_dates(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{**r, "id": f"d{i}"} for i, r in enumerate(RECORDS)])
    counted = read_documents(path, ("apples", "kiwi"), date_column="date")
    assert counted.ids == tuple(f"d{i}" for i in range(7)) and counted.dates.tolist() == EXPECTED
    assert read_documents(path, ("apples", "kiwi")).dates is None
    corpus = load_corpus(path, date_column="date")
    assert count_corpus(corpus, ("apples",)).dates.tolist() == EXPECTED
    with pytest.raises(UserInputError, match="line 1: date"):
        read_documents(write_jsonl(tmp_path / "bad.jsonl", [{"text": "a", "date": "soon"}]), ("a",),
                       date_column="date")
