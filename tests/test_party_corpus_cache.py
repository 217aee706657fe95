"""A deployed party's own corpus cache (node config ``corpus-cache``): prepared once on the party's disk,
memory-mapped by every later process, keyed by the file's content and the reading options, and rebuilt (said
in one line, once) when the file changes or the cache file is damaged."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from flower_topics.data import corpus_cache, node_data
from flower_topics.data.corpus_cache import cache_file, cache_key
from flower_topics.data.embedded import EMBEDDED_PATH
from flower_topics.data.node_data import load_node_documents
from flower_topics.federation import client_app
from flower_topics.run.config import parse_run_config

READING = {"text-column": "text", "label-column": "label", "lowercase": True, "stopwords": "english"}


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No corpus left over in this process from another test; the shared simulation cache off (the party's
    folder is the only cache in play)."""
    monkeypatch.setenv(corpus_cache.CACHE_ENV, "off")
    clear()
    yield
    clear()


def clear() -> None:
    """Forget what this process read, as the next message's fresh process would."""
    for cached in (node_data._read, node_data._read_through_cache):
        cached.cache_clear()
    client_app._AGREED.clear()


def party_file(tmp_path: Path, first: int, n_docs: int) -> Path:
    """Documents ``first`` to ``first + n_docs`` of the embedded corpus, as the party's own .jsonl file."""
    path = tmp_path / "party.jsonl"
    lines = EMBEDDED_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[first:first + n_docs]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def documents(path: Path, folder: Path | None, **reading):
    config = {"dataset": str(path), **reading}
    if folder is not None:
        config["corpus-cache"] = str(folder)
    return load_node_documents(config, parse_run_config({}))


def assert_same(a, b) -> None:
    assert a.curated == b.curated
    a, b = a.corpus, b.corpus
    assert a.vocabulary == b.vocabulary
    for name in ("tokens", "doc_ptr", "labels", "split"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.tokens.dtype == b.tokens.dtype and a.doc_ptr.dtype == b.doc_ptr.dtype


def package_lines(caplog) -> list[str]:
    """The package's own log lines (a run earlier in this process may also forward them to Flower's logger)."""
    return [r.getMessage() for r in caplog.records if r.name == "flower_topics"]


def rebuild_lines(caplog) -> list[str]:
    return [line for line in package_lines(caplog) if "rebuilding" in line]


def test_a_cached_corpus_is_the_corpus_read_from_the_file_and_later_processes_never_read_the_file(
        tmp_path, monkeypatch):
    path, folder = party_file(tmp_path, 0, 150), tmp_path / "party-cache"
    read = documents(path, None)
    clear()
    first = documents(path, folder)  # the first message builds the cache
    assert_same(first, read)
    assert [p.name for p in folder.glob("corpus-*.bin")] == [cache_file(folder, cache_key(path, READING)).name]

    def no_reading(*args, **kwargs):
        raise AssertionError("the party's file was read again")

    monkeypatch.setattr(corpus_cache, "load_corpus", no_reading)
    monkeypatch.setattr(node_data, "load_corpus", no_reading)
    for _ in range(2):  # every later message's process: from the memory map
        clear()
        assert_same(documents(path, folder), read)


def test_other_reading_options_get_a_cache_file_of_their_own(tmp_path):
    path, folder = party_file(tmp_path, 0, 80), tmp_path / "party-cache"
    kept = documents(path, folder, stopwords="none")
    clear()
    dropped = documents(path, folder)
    assert "the" in kept.corpus.vocabulary and "the" not in dropped.corpus.vocabulary
    assert len(list(folder.glob("corpus-*.bin"))) == 2
    clear()
    assert_same(documents(path, folder, stopwords="none"), kept)


def test_a_file_changed_with_its_size_and_time_kept_is_rebuilt_and_said_once(tmp_path, caplog):
    path, folder = party_file(tmp_path, 0, 100), tmp_path / "party-cache"
    first = documents(path, folder)
    before = path.stat()
    text = path.read_text(encoding="utf-8")
    changed = text.replace("game", "gxme")  # same length, other words
    assert changed != text and len(changed.encode()) == len(text.encode())
    path.write_text(changed, encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the time a copy with -p would keep
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size
    clear()
    with caplog.at_level(logging.WARNING, logger="flower_topics"):
        after = documents(path, folder)
        for _ in range(2):  # later processes: the rebuilt file, nothing said
            clear()
            assert_same(documents(path, folder), after)
    assert after.corpus.vocabulary != first.corpus.vocabulary
    assert any("gxme" in word for word in after.corpus.vocabulary)
    lines = rebuild_lines(caplog)
    assert len(lines) == 1 and f"{path} changed since this cache file was built" in lines[0], lines
    clear()
    assert_same(after, documents(path, None))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_damaged_cache_file_is_rebuilt_never_trusted_and_said_once(tmp_path, caplog, damage):
    path, folder = party_file(tmp_path, 200, 120), tmp_path / "party-cache"
    good = documents(path, folder)
    target = cache_file(folder, cache_key(path, READING))
    data = bytearray(target.read_bytes())
    if damage == "flip":  # one bit of a token id: only the CRC-32 can tell
        data[-100] ^= 0x01
    elif damage == "truncate":
        data = data[:-64]
    else:
        data[:16] = b"\0" * 16
    target.write_bytes(bytes(data))
    clear()
    with caplog.at_level(logging.WARNING, logger="flower_topics"):
        rebuilt = documents(path, folder)
        clear()
        again = documents(path, folder)
    assert_same(rebuilt, good)
    assert_same(again, good)
    lines = rebuild_lines(caplog)
    assert len(lines) == 1 and "damaged" in lines[0] and str(target) in lines[0], lines


def test_a_cache_folder_that_cannot_be_made_is_one_line_and_the_file_is_read_as_without_one(tmp_path, caplog):
    path = party_file(tmp_path, 0, 60)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="flower_topics"):
        got = documents(path, blocker / "cache")
    lines = package_lines(caplog)
    assert len(lines) == 1 and "cannot be used" in lines[0] and str(blocker / "cache") in lines[0], lines
    assert "\n" not in lines[0]
    clear()
    assert_same(got, documents(path, None))
