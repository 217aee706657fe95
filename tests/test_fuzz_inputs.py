"""Hostile inputs, fuzzed: corpus files, node configs and run configs (issue 21, item 4).

Every reader, config parser and command that reads a corpus must answer a broken input with
ONE line (:class:`~flower_topics.errors.UserInputError`) naming the file, line or key: never
a traceback, never a raw ``UnicodeDecodeError``, ``KeyError``, ``csv.Error`` or
``RecursionError``, and never a half-written output file. The property-based tests draw
inputs with ``hypothesis`` (:data:`EXAMPLES` examples per reader); the named cases below
them are the hostile files a real host produces (wrong encodings, 50 MB single lines, a
CSV with embedded newlines and quotes, a JSONL line that is not an object). The last test
is a run: one of three parties holds a junk file, it is excluded with its reason in the
server's log, and the run goes on with the two others.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flower_topics.cli.main import main
from flower_topics.run.config import OPTIONS, parse_run_config
from flower_topics.data import load_corpus
from flower_topics.data.corpus import Corpus
from flower_topics.data.node_data import NODE_OPTIONS, load_node_documents, node_options
from flower_topics.data.readers import read_csv
from flower_topics.errors import UserInputError

#: Examples hypothesis tries per reader / parser (the fuzzing budget; docs/real-hosts.md).
EXAMPLES = {"jsonl": 150, "csv": 150, "csv-round-trip": 100, "txt-folder": 60, "octis": 100, "node-reading": 40,
            "run-config": 300, "node-config": 300, "cli-vocabulary": 15}
#: Longest error line we accept: one line a person reads, not the input echoed back.
MAX_LINE = 600
BIG = 50 * 2**20  # the 50 MB single line



def fuzz(reader: str) -> settings:
    """Settings of one fuzzed reader: its budget, no deadline (a loaded machine), a fixed sequence of examples."""
    return settings(max_examples=EXAMPLES[reader], deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def one_line(exc: BaseException, *names: str) -> str:
    """The message of ``exc``, checked: a UserInputError, one line, short, naming one of ``names``."""
    assert isinstance(exc, UserInputError), f"{type(exc).__name__} escaped: {exc!r}"[:500]
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, text[:500]
    assert len(text) <= MAX_LINE, text[:500]
    assert "Traceback" not in text
    if names:
        assert any(name in text for name in names), f"{text!r} names none of {names}"
    return text


def read_or_refuse(target: Path, *names: str, **options) -> Corpus | None:
    """``load_corpus(target)``: a corpus, or None after checking its error is one clear line."""
    try:
        corpus = load_corpus(target, **options)
    except Exception as exc:  # noqa: BLE001: anything but a one-line UserInputError fails the test
        one_line(exc, *names)
        return None
    assert isinstance(corpus, Corpus) and corpus.n_docs >= 1
    return corpus


class Scratch:
    """A fresh folder per hypothesis example (pytest's tmp_path is one per test, not per example)."""

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix="fuzz-"))
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


# ------------------------------------------------------------------ strategies
ENCODINGS = ("utf-8", "utf-8-sig", "latin-1", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "cp1252")
WORDS = st.sampled_from(["cat", "dog", "bank", "loan", "the", "stock", "café", "naïve", "日本語", "x", "42"])
#: Text as hostile hosts write it: words, control characters, quotes, separators, surrogate-free unicode.
TEXT = st.one_of(
    st.lists(WORDS, max_size=12).map(" ".join),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
    st.text(st.sampled_from(list(" \t\r\n,;\"'\\\x00\x0b\x0c\u2028\u00a0ab")), max_size=30),
)


def encoded(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace")


#: File content: binary junk, whitespace, or text in any of several encodings.
CONTENT = st.one_of(
    st.binary(max_size=400),
    st.text(st.sampled_from(" \t\r\n\x0b\x0c\u00a0\u3000"), max_size=40).map(lambda t: t.encode("utf-8")),
    st.builds(encoded, TEXT, st.sampled_from(ENCODINGS)),
)
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), TEXT)
JSON_VALUE = st.recursive(JSON_SCALAR, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def _jsonl_line(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


JSONL_LINE = st.one_of(
    st.fixed_dictionaries({"text": st.one_of(TEXT, JSON_VALUE)}, optional={"label": JSON_VALUE}).map(_jsonl_line),
    JSON_VALUE.map(_jsonl_line),  # not an object, or an object without 'text'
    TEXT,  # not JSON at all
    st.sampled_from(['{"text": "\\ud800 cat dog"}', "[" * 5000, '{"text": ' + "9" * 5000 + "}", "{", '{"text": NaN}',
                     '{"text": "cat dog", "label": "\\udfff"}', "\ufeff" + '{"text": "cat dog"}', ""]),
)


# ------------------------------------------------------------------ readers, fuzzed
@fuzz("jsonl")
@given(lines=st.lists(JSONL_LINE, max_size=6), encoding=st.sampled_from(("utf-8",) * 4 + ENCODINGS),
       junk=st.one_of(st.none(), st.binary(min_size=1, max_size=20)))
def test_jsonl_reader_reads_or_refuses_in_one_line(lines, encoding, junk):
    with Scratch() as tmp:
        path = tmp / "party.jsonl"
        data = encoded("\n".join(lines), encoding)
        if junk is not None:  # a burst of junk bytes in the middle of the file
            data = data[: len(data) // 2] + junk + data[len(data) // 2:]
        path.write_bytes(data)
        read_or_refuse(path, "party.jsonl")


#: A CSV field: the hostile ones have embedded newlines, quotes, commas and carriage returns.
CSV_FIELD = st.one_of(TEXT, st.text(st.sampled_from(list('ab ,"\n\r\'')), max_size=12))


@fuzz("csv")
@given(header=st.lists(st.one_of(st.sampled_from(["text", "label", " text ", "Text"]), CSV_FIELD), min_size=0,
                       max_size=4),
       rows=st.lists(st.lists(CSV_FIELD, max_size=5), max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 400)), encoding=st.sampled_from(("utf-8",) * 4 + ENCODINGS))
def test_csv_reader_reads_or_refuses_in_one_line(header, rows, cut, encoding):
    """Ragged rows, a missing text column, a quote cut off mid-field (``cut``), other encodings."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    text = buffer.getvalue()[:cut] if cut is not None else buffer.getvalue()
    with Scratch() as tmp:
        path = tmp / "party.csv"
        path.write_bytes(encoded(text, encoding))
        read_or_refuse(path, "party.csv")


@fuzz("csv-round-trip")
@given(texts=st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
                      min_size=1, max_size=8),
       labels=st.lists(st.text(st.sampled_from(list('ab ,"\n')), max_size=5), min_size=8, max_size=8))
def test_csv_with_embedded_newlines_quotes_and_commas_round_trips(texts, labels):
    """Whatever a CSV writer quotes (newlines, quotes, commas, carriage returns) is read back exactly."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(["id", "text", "label"])
    writer.writerows([i, t, labels[i]] for i, t in enumerate(texts))
    with Scratch() as tmp:
        path = tmp / "quoted.csv"
        path.write_bytes(buffer.getvalue().encode("utf-8"))
        got_texts, got_labels, _ = read_csv(path, text_column="text", label_column="label")
    assert got_texts == texts and got_labels == labels[: len(texts)]


@fuzz("txt-folder")
@given(files=st.lists(st.tuples(st.sampled_from(["", "a/", "b/", "a/deep/"]), CONTENT), min_size=1, max_size=4))
def test_txt_folder_reader_reads_or_refuses_in_one_line(files):
    with Scratch() as tmp:
        folder = tmp / "party-notes"
        for i, (sub, content) in enumerate(files):
            (folder / sub).mkdir(parents=True, exist_ok=True)
            (folder / sub / f"doc{i}.txt").write_bytes(content)
        read_or_refuse(folder, "party-notes")


OCTIS_LINE = st.one_of(
    st.tuples(st.lists(WORDS, max_size=5).map(" ".join), st.sampled_from(["train", "val", "test", "training", ""]),
              CSV_FIELD).map("\t".join),
    TEXT,
)


@fuzz("octis")
@given(lines=st.lists(OCTIS_LINE, max_size=6), vocabulary=st.one_of(st.none(), st.lists(st.one_of(WORDS, TEXT),
                                                                                        max_size=6)),
       junk=st.one_of(st.none(), CONTENT))
def test_octis_reader_reads_or_refuses_in_one_line(lines, vocabulary, junk):
    with Scratch() as tmp:
        folder = tmp / "party-octis"
        folder.mkdir()
        (folder / "corpus.tsv").write_bytes(junk if junk is not None else "\n".join(lines).encode("utf-8"))
        if vocabulary is not None:
            (folder / "vocabulary.txt").write_text("\n".join(vocabulary), encoding="utf-8")
        read_or_refuse(folder, "party-octis")


@fuzz("node-reading")
@given(content=st.one_of(CONTENT, st.lists(JSONL_LINE, max_size=4).map(lambda ls: "\n".join(ls).encode("utf-8"))),
       suffix=st.sampled_from([".jsonl", ".csv", ".txt", ""]),
       reading=st.fixed_dictionaries({}, optional={"text-column": st.sampled_from(["text", "body", ""]),
                                                   "lowercase": st.sampled_from([True, "no", "maybe"]),
                                                   "stopwords": st.sampled_from(["english", "none", "klingon"])}))
def test_a_party_reading_its_own_file_refuses_junk_in_one_line(content, suffix, reading):
    """What a SuperNode does with its node config's ``dataset``: read, split, its own candidate words."""
    with Scratch() as tmp:
        path = tmp / f"party{suffix}"
        path.write_bytes(content)
        try:
            documents = load_node_documents({"dataset": str(path), **reading}, parse_run_config({}))
            documents.candidates(1)
        except Exception as exc:  # noqa: BLE001
            one_line(exc, "party", "node-config")


# ------------------------------------------------------------------ configs, fuzzed
#: Values as TOML, the command line or a careless script give them.
VALUE = st.one_of(
    st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e309", "-0", "0", "1", "-1", "0.5", "1e3",
                     "true", "yes", "", " ", "None", "null", "[1]", "9" * 5000, "x" * 10_000, "a\nb", "\x00"]),
    st.integers(min_value=-(2**80), max_value=2**80), st.floats(), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=2), TEXT,
)
RUN_KEYS = st.one_of(st.sampled_from(sorted(OPTIONS)), st.sampled_from(sorted(OPTIONS)).map(lambda k: k.upper()),
                     st.text(max_size=20))


@fuzz("run-config")
@given(raw=st.dictionaries(RUN_KEYS, VALUE, max_size=4))
def test_run_config_values_are_accepted_typed_or_refused_in_one_line(raw):
    try:
        config = parse_run_config(raw)
    except Exception as exc:  # noqa: BLE001
        # the line names a key it was given (shown as given or escaped) or, for a bad method, the methods
        one_line(exc, *[str(k)[:20] for k in raw], *[repr(k)[1:20] for k in raw], "method", "synthetic-",
                 "partition")
        return
    assert set(config) >= set(OPTIONS)
    for key, value in config.items():
        assert type(value) is type(OPTIONS[key].default), key
        if isinstance(value, float):
            assert not math.isnan(value), key  # NaN never survives: every comparison with it is False
        if isinstance(value, int):
            assert -(2**63) <= value < 2**63, key
    for key in ("alpha", "beta", "eval-alpha", "dirichlet-alpha", "synthetic-eta", "synthetic-alpha"):
        assert math.isfinite(config[key]) and config[key] > 0, key


@fuzz("node-config")
@given(raw=st.dictionaries(st.one_of(st.sampled_from(sorted(NODE_OPTIONS)), st.text(max_size=12)), VALUE,
                           max_size=4))
def test_node_config_values_are_accepted_typed_or_refused_in_one_line(raw):
    try:
        options = node_options(raw)
    except Exception as exc:  # noqa: BLE001
        text = one_line(exc, *[str(k) for k in raw if k in NODE_OPTIONS])
        assert text.startswith("node-config '"), text  # a node's own setting, not the server's run config
        return
    assert set(options) == {k for k in raw if k in NODE_OPTIONS}
    for key, value in options.items():
        assert type(value) is type(NODE_OPTIONS[key].default)
    assert options.get("num-partitions", 1) >= 1 and options.get("partition-id", 0) >= 0
    assert options.get("min-party-df", 1) >= 1 and options.get("max-epsilon", 0.0) >= 0


@pytest.mark.parametrize(("node_config", "fragment"), [
    ({}, "this node has no corpus"),
    ({"datset": "/srv/notes.jsonl"}, "did you mean 'datset' -> 'dataset'"),
    ({"dataset": "~no-such-user-here/notes.jsonl"}, "does not exist"),  # Path.expanduser raised RuntimeError
    ({"dataset": "/tmp/" + "n" * 5000 + ".jsonl"}, "does not exist"),  # exists() raised 'File name too long'
    ({"dataset": "/srv/a\x00b.jsonl"}, "does not exist"),
    ({"partition-id": 3, "num-partitions": 2}, "partition-id 3 is outside [0, 2)"),
    ({"partition-id": 0, "num-partitions": 0}, "node-config 'num-partitions' = 0 must be >= 1"),
    ({"dataset": "/srv/notes.jsonl", "min-party-df": "nan"}, "node-config 'min-party-df' = 'nan' is not a valid int"),
])
def test_bad_node_configs_are_one_line(node_config, fragment):
    with pytest.raises(UserInputError) as error:
        load_node_documents(node_config, parse_run_config({}))
    assert fragment in one_line(error.value)


@pytest.mark.parametrize(("node_config", "fragment"), [
    ({"dataset": "/srv/notes.jsonl", "max-epsilon": "-inf"}, "node-config 'max-epsilon' = '-inf' must be >= 0"),
    ({"dataset": "/srv/notes.jsonl", "max-epsilon": "nan"}, "node-config 'max-epsilon' = 'nan' is not a number"),
    ({"dataset": "/srv/notes.jsonl", "local-topics": "-1"}, "node-config 'local-topics' = '-1' must be >= 0"),
])
def test_bad_method_node_options_are_one_line_whatever_the_method(node_config, fragment):
    """A party reading its documents checks every method's node options (a method's own, e.g. dplda's max-epsilon),
    before any method runs."""
    from flwr.app import Context, RecordDict

    from flower_topics.federation.client_app import node_documents

    context = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})
    with pytest.raises(UserInputError) as error:
        node_documents(context, parse_run_config({"method": "lda"}))
    assert fragment in one_line(error.value)


@pytest.mark.parametrize(("raw", "fragment"), [
    ({1: "x"}, "unknown run-config key(s) 1"),  # a non-string key raised TypeError in sorted()
    ({"a\nb": 1}, r"unknown run-config key(s) 'a\nb'"),
    ({"x" * 10_000: 1}, "characters)"),
    ({"alpha": "inf"}, "'alpha' = 'inf' must be > 0 and finite"),
    ({"beta": float("inf")}, "'beta' = inf must be > 0 and finite"),
    ({"alpha": "nan"}, "'alpha' = 'nan' is not a number"),
    ({"fedlda.epsilon": "NaN"}, "'fedlda.epsilon' = 'NaN' is not a number"),
    ({"num-topics": 10**30}, "'num-topics' = 1000000000000000000000000000000 is out of the 64-bit integer range"),
    ({"seed": "9" * 5000}, "'seed' = '99999"),  # int() of 5000 digits raised ValueError outside the checks
    ({"num-topics": "1e309"}, "'num-topics' = '1e309' is not a valid int"),
    ({"num-topics": float("inf")}, "'num-topics' = inf is not a valid int"),
    ({"min-df": 1e309}, "'min-df' = inf must be"),
    ({"alpha": "x" * 10_000}, "characters) is not a valid float"),
    ({"method": "lda\nrm -rf"}, r"unknown method 'lda\nrm -rf'"),
])
def test_bad_run_configs_are_one_line(raw, fragment):
    with pytest.raises(UserInputError) as error:
        parse_run_config(raw)
    assert fragment in one_line(error.value)


def test_infinity_stays_valid_where_it_means_something():
    """``inf`` is refused for priors, not where the method gives it a meaning (fedlda's gamma, ftm's epsilon)."""
    config = parse_run_config({"fedlda.gamma": "inf", "ftm.epsilon": "inf", "round-timeout": "inf"})
    assert math.isinf(config["fedlda.gamma"]) and math.isinf(config["ftm.epsilon"])


# ------------------------------------------------------------------ named hostile files
def _csv_rows(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().encode("utf-8")


HOSTILE = [  # (file name, content, what the line must say)
    ("junk.jsonl", bytes(range(256)) * 8, "not UTF-8 text"),
    ("junk.csv", bytes(range(255, -1, -1)) * 8, "not UTF-8 text"),
    ("empty.jsonl", b"", "is empty"),
    ("blank.jsonl", b" \n\t\n\r\n   ", "is empty"),
    ("blank.csv", b"  \n\t\n", "empty header row"),
    ("latin1.jsonl", '{"text": "café crème brûlée"}\n'.encode("latin-1"), "not UTF-8 text (invalid continuation"),
    ("latin1.csv", "text\ncafé crème\n".encode("latin-1"), "line 2"),
    ("utf16bom.jsonl", '{"text": "cat dog"}\n'.encode("utf-16"), "looks like UTF-16"),
    ("utf16le.csv", "text\ncat dog\n".encode("utf-16-le"), "holds a NUL character"),
    ("invalid.jsonl", b'{"text": "cat \xc3\x28 dog"}\n', "at byte 14, line 1"),
    ("late.csv", b"text\n" + b"cat dog\n" * 20_000 + b"\xff\n", "line 20002"),  # past the decoder's first chunk
    ("unterminated.csv", b'text,label\n"cat dog, "x"\n', "is not valid CSV"),
    ("ragged.csv", _csv_rows([["text", "label"], ["cat", "x", "extra"]]), "row 2 has 3 fields"),
    ("nocolumn.csv", _csv_rows([["body", "la\nbel"], ["cat dog", "x"]]), r"columns: body, 'la\nbel'"),
    ("array.jsonl", b'{"text": "cat dog"}\n["cat", "dog"]\n', "line 2 is a JSON list, not an object"),
    ("string.jsonl", b'"cat dog"\n', "line 1 is a JSON str, not an object"),
    ("null.jsonl", b"null\n", "line 1 is a JSON NoneType, not an object"),
    ("notext.jsonl", b'{"body": "cat dog"}\n', "line 1 has no 'text' field (fields: body)"),
    ("numbertext.jsonl", b'{"text": "cat dog"}\n{"text": 42}\n', "line 2: 'text' is int, not text"),
    ("listtext.jsonl", b'{"text": ["cat", "dog"]}\n', "line 1: 'text' is list, not text"),
    ("deep.jsonl", b"[" * 200_000, "line 1 nests JSON too deeply"),
    ("bigint.jsonl", b'{"text": "cat", "label": ' + b"7" * 5000 + b"}", "line 1 is not usable JSON"),
    ("surrogate.jsonl", b'{"text": "cat \\ud800 dog"}\n', r"line 1: 'text' holds an unpaired UTF-16 surrogate"),
    ("stopwords.jsonl", b'{"text": "the and of"}\n{"text": "  "}\n', "no documents after preprocessing"),
]


@pytest.mark.parametrize(("name", "content", "fragment"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_one_line_naming_file_and_line(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserInputError) as error:
        load_corpus(path)
    assert fragment in one_line(error.value, name)


def test_a_fifo_or_a_device_is_refused_not_read_forever(tmp_path):
    import os

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer that never comes
    (tmp_path / "zero.csv").symlink_to("/dev/zero")  # reading it would never end
    for path in (fifo, tmp_path / "zero.csv"):
        with pytest.raises(UserInputError) as error:
            load_corpus(path)
        assert "is not a regular file or a folder" in one_line(error.value, path.name)


def test_a_missing_column_names_the_columns_and_the_label_column_stays_optional(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(_csv_rows([["id", "body"], ["1", "cat dog"]]))
    with pytest.raises(UserInputError) as error:
        load_corpus(path)
    assert "no 'text' column (columns: id, body)" in one_line(error.value, "c.csv")
    assert load_corpus(path, text_column="body").labels is None


BIG_CASES = [  # a 50 MB single line (no line break anywhere)
    ("big-junk.jsonl", lambda: np.random.default_rng(0).integers(128, 256, BIG, dtype=np.uint8).tobytes(),
     "not UTF-8 text"),
    ("big-nonjson.jsonl", lambda: b"x" * BIG, "line 1 is not valid JSON"),
    ("big-string.jsonl", lambda: b'"' + b"cat " * (BIG // 4) + b'"', "line 1 is a JSON str, not an object"),
    ("big-header.csv", lambda: b"y" * BIG, "no 'text' column (columns: 'yyy"),
    ("big-quote.csv", lambda: b'text\n"' + b"cat dog " * (BIG // 8), "not valid CSV"),
]


@pytest.mark.parametrize(("name", "make", "fragment"), BIG_CASES, ids=[c[0] for c in BIG_CASES])
def test_a_50_mb_single_line_is_refused_in_one_short_line(tmp_path, name, make, fragment):
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(UserInputError) as error:
        load_corpus(path)
    assert fragment in one_line(error.value, name)  # one_line also bounds its length: the 50 MB is not echoed


# ------------------------------------------------------------------ commands that write files
JUNK_CORPORA = {"junk.jsonl": b"\x00\xff" * 500, "utf16.csv": "text\ncat dog\n".encode("utf-16"),
                "array.jsonl": b"[1, 2]\n", "nocolumn.csv": b"body\ncat dog\n"}


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("name", sorted(JUNK_CORPORA))
def test_commands_refuse_a_junk_corpus_in_one_line_and_write_nothing(tmp_path, capsys, name):
    corpus = tmp_path / name
    corpus.write_bytes(JUNK_CORPORA[name])
    out = tmp_path / "out"
    out.mkdir()
    np.savez(tmp_path / "m.npz", topic_word=np.full((2, 3), 1 / 3), vocabulary=np.array(["cat", "dog", "bank"]))
    commands = [
        ["vocabulary", "--corpus", str(corpus), "--out", str(out / "vocab.txt")],
        ["infer", "--model", str(tmp_path / "m.npz"), "--corpus", str(corpus), "--out", str(out / "theta.csv")],
        ["evaluate", "--model", str(tmp_path / "m.npz"), "--corpus", str(corpus)],
        ["simulate", "--method", "lda", "--clients", "2", "--topics", "2", "--rounds", "1", "--mode", "centralized",
         "--dataset", str(corpus), "--out", str(out / "run")],
    ]
    for argv in commands:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("flower-topics: error: ") and name in err[0], (argv, err)
        assert "Traceback" not in captured.err + captured.out
        assert _listing(out) == [], (argv, _listing(out))  # no partial file, no temporary left behind


@fuzz("cli-vocabulary")
@given(content=CONTENT, suffix=st.sampled_from([".jsonl", ".csv"]))
def test_vocabulary_command_writes_a_whole_file_or_nothing(content, suffix):
    with Scratch() as tmp:
        corpus = tmp / f"public{suffix}"
        corpus.write_bytes(content)
        out = tmp / "out"
        out.mkdir()
        code = main(["vocabulary", "--corpus", str(corpus), "--out", str(out / "vocab.txt"), "--min-df", "1",
                     "--max-df", "1.0"])
        if code == 0:
            words = (out / "vocab.txt").read_text(encoding="utf-8").split("\n")
            assert words[-1] == "" and all(words[:-1]) and _listing(out) == ["vocab.txt"]
        else:
            assert code == 2 and _listing(out) == []


def test_an_unwritable_vocabulary_out_is_one_line(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": "cat dog bank loan"}) for _ in range(3)) + "\n")
    (tmp_path / "file").write_text("x")
    assert main(["vocabulary", "--corpus", str(corpus), "--out", str(tmp_path / "file" / "v.txt"), "--min-df", "1",
                 "--max-df", "1.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write" in err[0]


# ------------------------------------------------------------------ a federation with one junk party
def _party(path: Path, words: list[str], seed: int) -> str:
    rng = np.random.default_rng(seed)
    path.write_text("".join(json.dumps({"text": " ".join(rng.choice(words, 12).tolist())}) + "\n"
                            for _ in range(30)), encoding="utf-8")
    return str(path)


def _federate(tmp_path: Path, min_nodes: int) -> tuple[Path, list[str]]:
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.console import FLOWER_LOGGER
    from flower_topics.federation.server_app import run_server
    from flower_topics.simulations.inprocess import InProcessGrid

    words = ["cat", "dog", "puppy", "kitten", "leash", "bank", "loan", "stock", "bond", "cash"]
    junk = tmp_path / "party-c.jsonl"
    junk.write_bytes(b'{"text": "cat dog"}\n' + bytes(range(128, 256)) + b"\n")  # invalid UTF-8 on line 2
    node_configs = [{"dataset": _party(tmp_path / "party-a.jsonl", words, 1)},
                    {"dataset": _party(tmp_path / "party-b.jsonl", words, 2)},
                    {"dataset": str(junk)}]
    config = {"num-topics": 2, "num-rounds": 2, "eval-every": 2, "min-df": 1, "max-df": 1.0, "min-nodes": min_nodes,
              "output-dir": str(tmp_path / "run")}
    lines: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    loggers = [FLOWER_LOGGER, logging.getLogger("flower_topics")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        run_server(InProcessGrid(make_client_app(config), node_configs, config), config)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    return tmp_path / "run", lines


def test_a_party_with_a_junk_file_is_excluded_with_its_reason_and_the_run_goes_on(tmp_path):
    from flower_topics.topic_model.model_file import load_model
    from flower_topics.run.outputs import read_metrics

    out, lines = _federate(tmp_path, min_nodes=2)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2]
    assert rows[0]["vocabulary_agreement"]["nodes"] == 2  # the two readable parties agreed the vocabulary
    assert all(r["replies_applied"] == 2 for r in rows)
    assert load_model(out / "model.npz").topic_word.shape[0] == 2
    excluded = sorted({line for line in lines if "cannot take part" in line})  # Flower's logger and the package's
    assert len(excluded) == 1 and excluded[0].startswith("vocabulary agreement: node 103 cannot take part"), lines
    assert "is not UTF-8 text" in excluded[0] and "line 2" in excluded[0]  # the server says why
    assert "party-c.jsonl" not in excluded[0]  # but not where: the party's paths stay in its own log


def test_too_few_readable_parties_stop_the_run_in_one_line_saying_what_is_wrong_with_the_junk_file(tmp_path):
    from flower_topics.strategies.base import FederationError

    with pytest.raises(FederationError) as error:
        _federate(tmp_path, min_nodes=3)
    text = one_line(error.value, "is not UTF-8 text")
    assert "2 node(s) can take part, min-nodes is 3" in text and "party-c.jsonl" not in text
    assert not (tmp_path / "run" / "model.npz").exists()
