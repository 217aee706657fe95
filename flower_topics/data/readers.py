"""Corpus readers: OCTIS folders, JSON lines, CSV and folders of text files.

:func:`load_corpus` detects the format from the path. OCTIS folders are already
preprocessed and are used as they are; raw text goes through :func:`preprocess`.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from flower_topics.data.corpus import SPLITS, Corpus
from flower_topics.data.periods import document_periods
from flower_topics.data.preprocessing import PreprocessConfig, preprocess
from flower_topics.errors import UserInputError
from flower_topics.options import shown

logger = logging.getLogger("flower_topics")

OCTIS_CORPUS = "corpus.tsv"
OCTIS_VOCABULARY = "vocabulary.txt"
#: What the ``date-column`` reading option does (node config and run config).
DATE_COLUMN_HELP = ("date column of a .jsonl/.csv corpus, for topic prevalence over time: YYYY, YYYY-MM or an ISO "
                    "8601 date; a blank or missing value = no date ('' = read no dates)")
FORMATS_HINT = "an OCTIS folder (corpus.tsv + vocabulary.txt), a .jsonl file, a .csv file or a folder of .txt files"


def load_corpus(
    path: str | os.PathLike[str],
    *,
    text_column: str = "text",
    label_column: str = "label",
    date_column: str = "",
    preprocess_config: PreprocessConfig | None = None,
) -> Corpus:
    """Read a corpus, detecting its format from ``path``.

    Formats:

    - a folder with ``corpus.tsv`` (or that file itself): an OCTIS corpus, used as it
      is (``preprocess_config`` is ignored). ``vocabulary.txt`` gives the vocabulary and
      its column order; without it the vocabulary is the corpus' words, sorted. Words
      missing from the vocabulary are dropped, and so are documents left empty. The
      partition column becomes ``split`` and the label column ``labels``.
    - a ``.jsonl`` file: one JSON object per line, the text under ``text_column`` and
      optionally a label under ``label_column`` and a date under ``date_column``.
    - a ``.csv`` file with a header row naming ``text_column`` and optionally
      ``label_column`` and ``date_column``.
    - a folder of ``.txt`` files (searched recursively), one document each; when the
      files sit in subfolders, the subfolder path (relative to ``path``) is the label.

    Parameters
    ----------
    path : str or path-like
        The corpus file or folder.
    text_column : str
        Field holding the text (``.jsonl`` and ``.csv``).
    label_column : str
        Field holding the label (``.jsonl`` and ``.csv``); when no row has it the
        corpus has no labels.
    date_column : str
        Field holding each document's date (``.jsonl`` and ``.csv``; see :func:`read_jsonl`),
        kept as ``Corpus.dates``; ``""`` (the default) reads no dates.
    preprocess_config : PreprocessConfig, optional
        Preprocessing of raw text formats; ``PreprocessConfig()`` when omitted.

    Returns
    -------
    Corpus
        The documents, with labels when the source has them, dates when ``date_column``
        is set, and a split for OCTIS.

    Raises
    ------
    UserInputError
        If the path does not exist, its format is unknown, or its content is malformed
        or empty; if ``date_column`` is set for a format without columns, no document has
        it, or a value is not a date.
    """
    path = expand_path(path)
    if not path_exists(path):
        raise UserInputError(f"corpus path {shown(str(path), 200)} does not exist; pass {FORMATS_HINT}")
    if path.is_file() and path.name == OCTIS_CORPUS:
        path = path.parent
    if path.is_dir() and (path / OCTIS_CORPUS).is_file():
        _no_dates(path, "an OCTIS folder", date_column)
        return read_octis(path)
    if not path.is_dir() and not path.is_file():  # a FIFO or a device (a link to /dev/zero) would never end
        raise UserInputError(f"corpus {path} is not a regular file or a folder; pass {FORMATS_HINT}")
    config = preprocess_config or PreprocessConfig()
    dates = None
    if path.is_dir():
        _no_dates(path, "a folder of .txt files", date_column)
        texts, labels = read_text_folder(path)
    elif path.suffix.lower() == ".jsonl":
        texts, labels, dates = read_jsonl(path, text_column=text_column, label_column=label_column,
                                          date_column=date_column)
    elif path.suffix.lower() == ".csv":
        texts, labels, dates = read_csv(path, text_column=text_column, label_column=label_column,
                                        date_column=date_column)
    else:
        raise UserInputError(f"corpus {str(path)!r} has an unknown format; pass {FORMATS_HINT}")
    try:
        corpus, report = preprocess(texts, config, labels=labels, dates=dates)
    except UserInputError as exc:  # say which file: "no documents after preprocessing" alone names none
        raise UserInputError(f"corpus {path}: {exc}") from None
    logger.info(
        "loaded %s: %d documents, %d words, %d tokens",
        path, corpus.n_docs, report.vocabulary_size, report.n_tokens,
    )
    return corpus


def expand_path(path: str | os.PathLike[str]) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded where that user exists (``Path.expanduser``
    raises RuntimeError for an unknown user; then the path is kept as written)."""
    return Path(os.path.expanduser(os.fspath(path)))


def path_exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an existing file or folder; False, not an exception, for a path the system
    cannot even look up (a name too long, a NUL character, a loop of links)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def read_octis(folder: str | os.PathLike[str]) -> Corpus:
    """Read an OCTIS corpus folder (``corpus.tsv`` and ``vocabulary.txt``).

    Parameters
    ----------
    folder : str or path-like
        Folder holding ``corpus.tsv``; ``vocabulary.txt`` is optional.

    Returns
    -------
    Corpus
        Documents over the vocabulary in ``vocabulary.txt`` order, with the partition
        column (if any) as ``split`` and the label column (if any) as ``labels``.
    """
    folder = Path(folder)
    corpus_path = folder / OCTIS_CORPUS
    rows = [line.split("\t") for line in _lines(_read_text(corpus_path))]
    if not rows:
        raise UserInputError(
            f"{corpus_path} is empty; it needs one document per line: tokens<TAB>partition<TAB>label"
        )
    n_columns = len(rows[0])
    if n_columns > 3:
        raise UserInputError(
            f"{corpus_path} line 1 has {n_columns} tab-separated columns; expected tokens, partition, label"
        )
    for number, row in enumerate(rows, start=1):
        if len(row) != n_columns:
            raise UserInputError(
                f"{corpus_path} line {number} has {len(row)} tab-separated columns but line 1 has {n_columns}; "
                "every line needs the same columns"
            )
    token_lists = [row[0].split() for row in rows]

    vocabulary_path = folder / OCTIS_VOCABULARY
    if vocabulary_path.is_file():
        vocabulary = [w for w in (line.strip() for line in _lines(_read_text(vocabulary_path))) if w]
        if not vocabulary:
            raise UserInputError(f"{vocabulary_path} is empty; it needs one word per line")
    else:
        vocabulary = sorted({w for tokens in token_lists for w in tokens})
    word_index = {w: i for i, w in enumerate(vocabulary)}
    if len(word_index) != len(vocabulary):
        duplicates = sorted(w for w, count in Counter(vocabulary).items() if count > 1)[:5]
        raise UserInputError(
            f"{vocabulary_path} lists some words more than once ({', '.join(map(shown, duplicates))}); "
            "remove the duplicates"
        )

    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    lookup = word_index.get
    ids = np.fromiter(
        (lookup(w, -1) for tokens in token_lists for w in tokens), dtype=np.int64, count=int(lengths.sum())
    )
    doc_ids = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    known = ids >= 0
    kept_lengths = np.bincount(doc_ids[known], minlength=len(rows))
    keep_doc = kept_lengths > 0
    n_dropped = int(len(rows) - keep_doc.sum())
    if not keep_doc.any():
        raise UserInputError(
            f"{corpus_path} has no document with a word of its vocabulary; check corpus.tsv and vocabulary.txt"
        )
    if n_dropped:
        logger.info("dropped %d documents of %s with no word in the vocabulary", n_dropped, corpus_path)

    split = labels = None
    if n_columns >= 2:
        split = np.asarray([row[1].strip() for row in rows], dtype=object)
        bad = np.flatnonzero(~np.isin(split, SPLITS))
        if bad.size:
            raise UserInputError(
                f"{corpus_path} line {bad[0] + 1} has partition {shown(split[bad[0]])}; use one of {', '.join(SPLITS)}"
            )
        split = split[keep_doc]
    if n_columns == 3:
        labels = np.asarray([row[2].strip() for row in rows], dtype=object)[keep_doc]
    doc_ptr = np.zeros(int(keep_doc.sum()) + 1, dtype=np.int64)
    np.cumsum(kept_lengths[keep_doc], out=doc_ptr[1:])
    return Corpus(tokens=ids[known], doc_ptr=doc_ptr, vocabulary=tuple(vocabulary), labels=labels, split=split)


def read_jsonl(
    path: str | os.PathLike[str], *, text_column: str, label_column: str, date_column: str = ""
) -> tuple[list[str], list[str] | None, list[str] | None]:
    """Texts, labels and dates of a JSON-lines file.

    Parameters
    ----------
    path : str or path-like
        The ``.jsonl`` file; blank lines are skipped.
    text_column, label_column : str
        Keys of the text and the label in each object.
    date_column : str
        Key of each document's date; ``""`` reads no dates. A value is kept as a string (a
        JSON number ``2024`` is ``"2024"``); an object without the key, or with null or a
        blank string, has no date (``""``). The dates are checked here (each must be one
        :func:`~flower_topics.data.periods.document_periods` reads), so a bad one is refused
        with its line.

    Returns
    -------
    texts : list of str
    labels : list of str or None
        None when no object has ``label_column``.
    dates : list of str or None
        One per text (``""``: no date); None when ``date_column`` is ``""``.

    Raises
    ------
    UserInputError
        For a malformed file, a missing text, or a ``date_column`` that no object has or
        whose value on some line is not a date.
    """
    path = Path(path)
    records: list[tuple[int, dict]] = []
    for number, line in enumerate(_lines(_read_text(path)), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserInputError(
                f"{path} line {number} is not valid JSON ({exc.msg}); write one JSON object per line"
            ) from None
        except RecursionError:  # "[[[[..." deeper than the interpreter's stack
            raise UserInputError(f"{path} line {number} nests JSON too deeply; write one flat JSON object per line"
                                 ) from None
        except ValueError as exc:  # a number too long to convert (Python's 4300-digit limit)
            raise UserInputError(f"{path} line {number} is not usable JSON ({shown(str(exc))}); write one JSON "
                                 "object per line") from None
        if not isinstance(record, dict):
            raise UserInputError(
                f"{path} line {number} is a JSON {type(record).__name__}, not an object; write one object per line"
            )
        records.append((number, record))
    if not records:
        raise UserInputError(f"{path} is empty; it needs one JSON object per line with a {text_column!r} field")
    texts = []
    for number, record in records:
        if text_column not in record:
            raise UserInputError(
                f"{path} line {number} has no {text_column!r} field (fields: {_names(record)}); "
                "set text-column to the field holding the text"
            )
        text = record[text_column]
        if not isinstance(text, str):
            raise UserInputError(f"{path} line {number}: {text_column!r} is {type(text).__name__}, not text")
        _check_encodable(path, number, text_column, text)
        texts.append(text)
    dates = _jsonl_dates(path, records, date_column) if date_column else None
    has_label = [record.get(label_column) is not None for _, record in records]
    if not any(has_label):
        return texts, None, dates
    if not all(has_label):
        number = records[has_label.index(False)][0]
        raise UserInputError(
            f"{path} line {number} has no {label_column!r} but other lines do; give every line a label "
            "or set label-column to a field no line has"
        )
    labels = [str(record[label_column]) for _, record in records]
    for (number, _), label in zip(records, labels):
        _check_encodable(path, number, label_column, label)
    return texts, labels, dates


def _jsonl_dates(path: Path, records: list[tuple[int, dict]], date_column: str) -> list[str]:
    """Each record's ``date_column`` value as a string (``""`` without one), checked to be a date."""
    if not any(date_column in record for _, record in records):
        fields = dict.fromkeys(key for _, record in records for key in record)
        raise UserInputError(f"{path} has no {shown(date_column, 60)} field on any line (fields: {_names(fields)}); "
                             "set date-column to the field holding each document's date, or '' for none")
    dates = [_date_text(record.get(date_column)) for _, record in records]
    _check_dates(path, dates, date_column, [number for number, _ in records])
    return dates


def _date_text(value: object) -> str:
    """A date field's value as a string: ``""`` for null or a blank string, a JSON number as written."""
    return "" if value is None else str(value).strip()


def _check_dates(path: Path, dates: list[str], date_column: str, lines: list[int]) -> None:
    """A UserInputError naming the first line whose date is not one :func:`document_periods` reads."""
    document_periods(dates, "month", source=str(path), column=date_column, lines=lines)


def _no_dates(path: Path, kind: str, date_column: str) -> None:
    """A UserInputError when ``date_column`` is set for a corpus format without columns."""
    if date_column:
        raise UserInputError(f"corpus {path} is {kind}, which has no {shown(date_column, 60)} column; date-column "
                             "applies to .jsonl and .csv corpora: set it to '' for this one")


def read_csv(
    path: str | os.PathLike[str], *, text_column: str, label_column: str, date_column: str = ""
) -> tuple[list[str], list[str] | None, list[str] | None]:
    """Texts, labels and dates of a CSV file with a header row.

    Parameters
    ----------
    path : str or path-like
        The ``.csv`` file.
    text_column, label_column : str
        Header names of the text and the label columns; the label column is optional.
    date_column : str
        Header name of the date column; ``""`` reads no dates. A blank cell is no date
        (``""``); the other values are checked as in :func:`read_jsonl`.

    Returns
    -------
    texts : list of str
    labels : list of str or None
        None when the header has no ``label_column``.
    dates : list of str or None
        One per text (``""``: no date); None when ``date_column`` is ``""``.
    """
    path = Path(path)
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, 2**31 - 1))  # long documents are normal; the default stops at 128 KiB
    try:  # streamed: a large file is held once, as rows
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(_without_nul(path, fh), strict=True)
            rows, ends = [], []  # ends: the line each row ends on (a quoted field may hold newlines)
            for row in reader:
                rows.append(row)
                ends.append(reader.line_num)
    except csv.Error as exc:
        raise UserInputError(
            f"{path} is not valid CSV (line {reader.line_num}: {exc}); quote fields that hold commas, quotes or "
            "newlines, and double the quotes inside a quoted field"
        ) from None
    except UnicodeDecodeError:  # its offset is within the decoder's chunk: decode the whole file for the true one
        try:
            path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise _not_utf8(path, exc) from None
        raise
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        csv.field_size_limit(limit)
    if not rows:
        raise UserInputError(
            f"{path} is empty; it needs a header row naming a {text_column!r} column, then one row per document"
        )
    header = [name.strip() for name in rows[0]]
    if not any(header):
        raise UserInputError(f"{path} line 1 is an empty header row; it must name the columns, one of them "
                             f"{text_column!r}")
    if text_column not in header:
        raise UserInputError(
            f"{path} has no {text_column!r} column (columns: {_names(header)}); "
            "set text-column to the column holding the text"
        )
    if date_column and date_column not in header:
        raise UserInputError(f"{path} has no {shown(date_column, 60)} column (columns: {_names(header)}); "
                             "set date-column to the column holding each document's date, or '' for none")
    body, lines = [], []
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise UserInputError(
                f"{path} row {number} has {len(row)} fields but the header has {len(header)}; quote texts with commas"
            )
        body.append(row)
        lines.append(ends[number - 2] + 1)  # the line the row starts on: the one after the previous row's end
    if not body:
        raise UserInputError(f"{path} has a header but no rows; add one row per document")
    text_at = header.index(text_column)
    texts = [row[text_at] for row in body]
    dates = None
    if date_column:
        date_at = header.index(date_column)
        dates = [row[date_at].strip() for row in body]
        _check_dates(path, dates, date_column, lines)
    if label_column not in header:
        return texts, None, dates
    label_at = header.index(label_column)
    return texts, [row[label_at] for row in body], dates


def read_text_folder(folder: str | os.PathLike[str]) -> tuple[list[str], list[str] | None]:
    """Texts of the ``.txt`` files under ``folder``, in path order.

    Parameters
    ----------
    folder : str or path-like
        Searched recursively. Either every file sits directly in it (no labels) or
        every file sits in a subfolder, whose path relative to ``folder`` is its label.

    Returns
    -------
    texts : list of str
    labels : list of str or None
    """
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*.txt") if p.is_file())
    if not files:
        raise UserInputError(f"folder {folder} has neither {OCTIS_CORPUS} nor .txt files; pass {FORMATS_HINT}")
    parents = [p.parent.relative_to(folder).as_posix() for p in files]
    at_top = [parent == "." for parent in parents]
    if any(at_top) and not all(at_top):
        raise UserInputError(
            f"folder {folder} has .txt files both at its top level and in subfolders; put every file in a label "
            "subfolder, or all at the top level for no labels"
        )
    texts = [_read_text(p) for p in files]
    return texts, None if all(at_top) else parents


def _read_text(path: Path) -> str:
    """The UTF-8 content of ``path`` (a UTF-8 byte-order mark dropped), a UserInputError if it cannot be
    read, is not UTF-8, or holds a NUL character (binary data, or UTF-16 text without a byte-order mark,
    both of which decode as UTF-8 without an error)."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except OSError as exc:
        raise _unreadable(path, exc) from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise UserInputError(f"{path} line {line} holds a NUL character: it is binary data or UTF-16, not UTF-8 text; "
                             "convert it to UTF-8")
    return text


def _without_nul(path: Path, lines: Iterable[str]) -> Iterator[str]:
    """``lines``, with a UserInputError at the first that holds a NUL character (see :func:`_read_text`)."""
    for number, line in enumerate(lines, start=1):
        if "\0" in line:
            raise UserInputError(f"{path} line {number} holds a NUL character: it is binary data or UTF-16, not UTF-8 "
                                 "text; convert it to UTF-8")
        yield line


def _lines(text: str) -> list[str]:
    """Lines of ``text`` split at newlines only (str.splitlines also splits at U+2028 and
    other separators that may sit inside a JSON string or a token)."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _names(names: object) -> str:
    """Field or column names for a one-line message: each clipped, at most 20 of them."""
    names = list(names)  # type: ignore[call-overload]
    text = ", ".join(n if n.isprintable() and 0 < len(n) <= 40 else shown(n, 40) for n in map(str, names[:20]))
    return text + (f" and {len(names) - 20} more" if len(names) > 20 else "")


def _check_encodable(path: Path, number: int, field: str, text: str) -> None:
    """A UserInputError if ``text`` holds a lone surrogate (a JSON ``\\ud800`` escape): no file can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserInputError(f"{path} line {number}: {shown(field, 40)} holds an unpaired UTF-16 surrogate escape "
                             f"(\\u{ord(text[exc.start]):04x}); it is not text") from None


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> UserInputError:
    data = exc.object if isinstance(exc.object, (bytes, bytearray)) else b""
    hint = "it looks like UTF-16; " if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
    line = data.count(b"\n", 0, exc.start) + 1
    return UserInputError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}, line {line}); {hint}"
                          "convert it to UTF-8")


def _unreadable(path: Path, exc: OSError) -> UserInputError:
    return UserInputError(f"cannot read {path} ({exc.strerror}); check the path and its permissions")
