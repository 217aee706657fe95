"""The corpus cache: a simulated party's share from the memory-mapped cache is the share it read before,
the corpus is read once (not once per party), and a damaged or stale cache file is rebuilt."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from flower_topics.federation import client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data import corpus_cache, node_data
from flower_topics.data.corpus_cache import (cache_file, cache_key, cached_corpus, read_cache,
                                             source_identity, write_cache)
from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.data.node_data import load_node_documents, simulated_share
from flower_topics.errors import UserInputError

FIXTURES = Path(__file__).parent / "fixtures"
READING = {"text-column": "text", "label-column": "label", "lowercase": True, "stopwords": "english"}


@pytest.fixture(autouse=True)
def cache_in(tmp_path, monkeypatch):
    """Each test a cache folder of its own, and no share left over from another test in this process."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(corpus_cache.CACHE_ENV, str(folder))
    clear()
    yield folder
    clear()


def clear() -> None:
    """Forget what this process read, as a fresh process would."""
    for cached in (node_data._cached, node_data._cached_shares, node_data._shares, node_data._read,
                   node_data._read_through_cache):
        cached.cache_clear()
    client_app._AGREED.clear()


def embedded_subset(tmp_path: Path, n_docs: int) -> Path:
    """The first ``n_docs`` documents of the embedded corpus as a .jsonl file (labelled, real text)."""
    path = tmp_path / "subset.jsonl"
    path.write_text("".join(EMBEDDED_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[:n_docs]),
                    encoding="utf-8")
    return path


def header_of(path: Path) -> dict:
    """The JSON header of a cache file."""
    data = path.read_bytes()
    size = int.from_bytes(data[8:16], "little")
    return json.loads(data[16:16 + size])


def assert_same_corpus(a, b) -> None:
    assert a.vocabulary == b.vocabulary
    for name in ("tokens", "doc_ptr", "labels", "split", "sentence_start"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert np.array_equal(x, y), name


def shares_both_ways(config, parties, monkeypatch):
    """Every share from the cache, then with the cache off (the whole corpus read in this process)."""
    cached = [simulated_share(config, i, parties) for i in range(parties)]
    clear()
    monkeypatch.setenv(corpus_cache.CACHE_ENV, "off")
    read = [simulated_share(config, i, parties) for i in range(parties)]
    return cached, read


@pytest.mark.parametrize(("dataset", "parties", "extra"), [
    ("embedded", 5, {"partition": "iid"}),
    ("embedded", 4, {"partition": "label"}),
    ("embedded", 3, {"partition": "dirichlet", "dirichlet-alpha": 0.3, "seed": 7}),
    ("embedded", 3, {"partition": "sizes", "partition-sizes": "0.2,0.3,0.5", "heldout-fraction": 0.2}),
    ("embedded", 2, {"lowercase": False, "stopwords": "none"}),
    (str(FIXTURES / "octis"), 2, {"partition": "iid"}),
    (str(FIXTURES / "txt_labeled"), 2, {"partition": "label"}),
    (str(FIXTURES / "docs.csv"), 2, {"partition": "iid"}),
])
def test_a_share_from_the_cache_is_the_share_read_in_memory(dataset, parties, extra, monkeypatch, cache_in):
    config = parse_run_config({"dataset": dataset, **extra})
    cached, read = shares_both_ways(config, parties, monkeypatch)
    assert len(list(cache_in.glob("corpus-*.bin"))) == 1
    for mine, theirs in zip(cached, read):
        assert_same_corpus(mine.corpus, theirs.corpus)
        assert (mine.curated, mine.source) == (theirs.curated, theirs.source)


def test_each_process_reads_the_corpus_file_once_and_the_next_process_not_at_all(tmp_path, monkeypatch, cache_in):
    path = embedded_subset(tmp_path, 300)
    reads = []
    real = corpus_cache.load_corpus
    monkeypatch.setattr(corpus_cache, "load_corpus", lambda *a, **k: reads.append(a) or real(*a, **k))
    config = parse_run_config({"dataset": str(path), "partition": "label"})
    first = [simulated_share(config, i, 5).corpus for i in range(5)]
    assert len(reads) == 1
    clear()  # another process: a simulated party's ClientApp, or the next run
    again = [simulated_share(config, i, 5).corpus for i in range(5)]
    assert len(reads) == 1
    for a, b in zip(first, again):
        assert_same_corpus(a, b)
    assert sum(s.n_docs for s in first) == 300


def test_token_ids_and_offsets_are_stored_in_the_smallest_integer_type(tmp_path, cache_in):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"text": f"alpha beta gamma word{chr(97 + i % 26)}"}) + "\n"
                             for i in range(50)), encoding="utf-8")
    for path, tokens_type in ((small, np.uint8), (EMBEDDED_PATH, np.uint16)):
        cached = cached_corpus(path, READING)
        assert cached.tokens.dtype == tokens_type and isinstance(cached.tokens, np.memmap)
        layout = header_of(cache_file(cache_in, cache_key(path, READING)))["arrays"]
        assert np.dtype(layout["tokens"][1]) == tokens_type
        assert np.dtype(layout["doc_ptr"][1]) == np.min_scalar_type(cached.tokens.size)
        assert len(cached.vocabulary) - 1 <= np.iinfo(tokens_type).max


def test_a_stale_cache_file_is_rebuilt_when_the_corpus_changes(tmp_path, cache_in):
    path = tmp_path / "notes.jsonl"
    path.write_text('{"text": "apples and pears"}\n{"text": "pears and plums"}\n', encoding="utf-8")
    before = cached_corpus(path, READING)
    assert before.vocabulary == ("apples", "pears", "plums")
    path.write_text('{"text": "cherries and pears"}\n{"text": "pears and plums"}\n', encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    after = cached_corpus(path, READING)
    assert after.vocabulary == ("cherries", "pears", "plums")
    assert len(list(cache_in.glob("corpus-*"))) == 1  # replaced, not a second file


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "other-options"])
def test_a_damaged_cache_file_is_never_used_and_is_rebuilt(tmp_path, cache_in, damage):
    path = embedded_subset(tmp_path, 120)
    good = cached_corpus(path, READING).corpus()
    target = cache_file(cache_in, cache_key(path, READING))
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "flip":
        data[-200] ^= 0x10
    elif damage == "garbage":
        data[:40] = b"x" * 40
    elif damage == "empty":
        data = bytearray()
    else:  # a file for other reading options under this name (a hash collision, or a hand-copied file)
        other = {**READING, "stopwords": "none"}
        write_cache(target, corpus_cache.read_source(path, other), curated=False, identity=source_identity(path),
                    key=cache_key(path, other))
        data = bytearray(target.read_bytes())
    target.write_bytes(bytes(data))
    assert read_cache(target, identity=source_identity(path), key=cache_key(path, READING)) is None
    assert_same_corpus(cached_corpus(path, READING).corpus(), good)
    assert read_cache(target, identity=source_identity(path), key=cache_key(path, READING)) is not None


def test_a_failed_write_leaves_neither_a_cache_file_nor_a_temporary_one(tmp_path, cache_in, monkeypatch):
    path = embedded_subset(tmp_path, 50)
    corpus = corpus_cache.read_source(path, READING)
    target = cache_file(cache_in, cache_key(path, READING))

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(corpus_cache.os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_cache(target, corpus, curated=False, identity=source_identity(path), key=cache_key(path, READING))
    assert list(cache_in.iterdir()) == []


def test_a_large_corpus_is_preprocessed_in_a_child_process(tmp_path, cache_in, monkeypatch):
    path = embedded_subset(tmp_path, 200)
    reads = []
    real = corpus_cache.load_corpus
    monkeypatch.setattr(corpus_cache, "load_corpus", lambda *a, **k: reads.append(a) or real(*a, **k))
    child = cached_corpus(path, READING, child_bytes=0)
    assert reads == []  # not read in this process
    assert_same_corpus(child.corpus(), real(path, preprocess_config=corpus_cache.preprocess_config(READING)))


def test_a_child_process_reports_a_bad_corpus_in_one_line(tmp_path, cache_in):
    path = tmp_path / "notes.jsonl"
    path.write_text('{"body": "no text field here"}\n', encoding="utf-8")
    with pytest.raises(UserInputError, match=r"line 1 has no 'text' field") as error:
        cached_corpus(path, READING, child_bytes=0)
    assert "\n" not in str(error.value) and "Traceback" not in str(error.value)
    assert list(cache_in.glob("corpus-*")) == []


def test_with_the_cache_off_or_unwritable_shares_are_read_in_memory(tmp_path, monkeypatch, caplog):
    config = parse_run_config({"dataset": str(embedded_subset(tmp_path, 100)), "partition": "iid"})
    monkeypatch.setenv(corpus_cache.CACHE_ENV, "off")
    off = [simulated_share(config, i, 2).corpus for i in range(2)]
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    clear()
    monkeypatch.setenv(corpus_cache.CACHE_ENV, str(blocked))
    with caplog.at_level("WARNING", logger="flower_topics"):
        unwritable = [simulated_share(config, i, 2).corpus for i in range(2)]
    assert "cannot be used" in caplog.text
    for a, b in zip(off, unwritable):
        assert_same_corpus(a, b)


def test_a_party_reading_its_own_file_writes_no_cache(tmp_path, cache_in):
    path = embedded_subset(tmp_path, 60)
    documents = load_node_documents({"dataset": str(path)}, parse_run_config({}))
    assert documents.corpus.n_docs == 60 and documents.source == f"this node's corpus {path}"
    assert not cache_in.exists()


def test_a_missing_dataset_is_one_line(tmp_path):
    config = parse_run_config({"dataset": str(tmp_path / "nowhere.jsonl")})
    with pytest.raises(UserInputError, match="does not exist"):
        simulated_share(config, 0, 2)


def test_a_run_gives_the_same_model_from_the_cache_as_reading_in_memory(tmp_path, monkeypatch):
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from tests.flower_harness import LoopbackGrid

    path = embedded_subset(tmp_path, 400)
    models = []
    for cache in (str(tmp_path / "cache"), "off"):
        clear()
        monkeypatch.setenv(corpus_cache.CACHE_ENV, cache)
        config = {"dataset": str(path), "partition": "label", "num-topics": 5, "num-rounds": 3,
                  "lda.local-sweeps": 2, "federated-eval": False, "output-dir": str(tmp_path / f"run-{len(models)}")}
        models.append(run_server(LoopbackGrid(make_client_app(config), 3, config), config))
    assert models[0].vocabulary == models[1].vocabulary
    assert np.array_equal(models[0].topic_word, models[1].topic_word)


def test_a_process_that_finds_the_file_being_built_waits_and_reads_it_instead_of_building_it_again(tmp_path,
                                                                                                     cache_in):
    """A simulation's parties may start while `flower-topics simulate` still builds the cache file."""
    import subprocess
    import sys
    import time

    path = embedded_subset(tmp_path, 50)
    target = cache_file(cache_in, cache_key(path, READING))
    cache_in.mkdir(parents=True, exist_ok=True)
    reader = ("import sys, os; from pathlib import Path; from flower_topics.data.corpus_cache import cached_corpus; "
              f"c = cached_corpus({str(path)!r}, {READING!r}); print(c.n_docs, os.stat({str(target)!r}).st_ino)")
    with corpus_cache._building(target):  # this process is building it
        waiting = subprocess.Popen([sys.executable, "-c", reader], stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, corpus_cache.CACHE_ENV: str(cache_in)})
        time.sleep(2.0)
        assert waiting.poll() is None  # it waits for the lock, it does not build its own
        corpus_cache.build(path, READING, target)
        built = os.stat(target)
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0
    assert out.split() == ["50", str(built.st_ino)]  # it read the file this process wrote
    assert os.stat(target).st_mtime_ns == built.st_mtime_ns  # and did not write it again
