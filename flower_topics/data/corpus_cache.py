"""On-disk cache of preprocessed corpora, so that the processes of a simulation read a corpus once.

In a simulation every simulated party's share comes from the same corpus file. Read and
tokenized in every process, a corpus costs each of them its whole preprocessing and, through
the Python strings of tokenization, resident memory many times the file's size that the process
keeps after it is done. Instead the first process that needs the corpus preprocesses it
once into a cache file, and every process then memory-maps that file and materializes
only the documents it needs (:meth:`CachedCorpus.subset`: one party's share).

A cache file holds the corpus exactly as :func:`~flower_topics.data.readers.load_corpus`
returns it for the reading options (``text-column``, ``label-column``, ``date-column``,
``lowercase``, ``stopwords``; every word kept, no document-frequency filter): token ids in the
smallest unsigned integer type that holds the vocabulary's size, document offsets in the smallest
that holds the number of tokens, the vocabulary, the labels, the dates, the split an OCTIS folder
carries and where sentences start. The seeded train/val/test split and the partition are
not stored: they are drawn from the run's seed over the cached documents, as before.

Where: ``$FLOWER_TOPICS_CACHE_DIR`` when set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/flower-topics/corpora`` (``~/.cache/flower-topics/corpora``). One file
per source path and reading options, ``corpus-<hash>.bin``; deleting it (or the folder) at
any time is safe. A file is written under a name of its own process, then renamed over
the cache file (``os.replace``), so no reader ever sees a half-written file. A reader
checks the format version, the source's identity (path, size and SHA-256 of the content of
every file the reader reads: a file rewritten with its size and modification time kept is
another corpus), the reading options, the file's length and a CRC-32 of its content, and
rebuilds a file that is stale or damaged, saying so in one line (the process that rebuilds
it; the next ones find it whole).

One process builds a given cache file at a time: a process that finds it missing takes an
exclusive lock beside it (``.corpus-<hash>.lock``) and looks again, so the parties of a
simulation that start while ``flower-topics simulate`` is still building the file wait for it
instead of building it again.

A corpus file larger than :data:`CHILD_BUILD_BYTES` is preprocessed in a child process
(``python -m flower_topics.data.corpus_cache``): the parent then never holds the
tokenizer's garbage, only the memory map.

It serves simulated shares (every party on one machine reads the same public file) and,
with ``corpus-cache`` in a party's node config, a deployed party's own file: on Flower's
deployment engine every message is a fresh ClientApp process, and the party's file is then
prepared once into that folder on the party's own disk and memory-mapped by every later
process (:func:`cached_corpus` with ``folder``). A folder that cannot be made or written is
one line, and the file is read in memory as without a cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from flower_topics.data.corpus import SPLITS, Corpus
from flower_topics.data.preprocessing import PreprocessConfig
from flower_topics.data.readers import OCTIS_CORPUS, OCTIS_VOCABULARY, expand_path, load_corpus
from flower_topics.errors import UserInputError

logger = logging.getLogger("flower_topics")

#: Environment variable naming the cache folder (``off``: no cache).
CACHE_ENV = "FLOWER_TOPICS_CACHE_DIR"
#: Bumped whenever the file layout or what the reader produces changes: older files are rebuilt.
FORMAT_VERSION = 3
MAGIC = b"FTCORPUS"
#: Corpus sources (all their files together) larger than this are preprocessed in a child process.
CHILD_BUILD_BYTES = 8 << 20
_ALIGN = 64
_PREFIX = len(MAGIC) + 8
#: The reading options a cached corpus depends on (node config or run config keys).
READING_KEYS = ("text-column", "label-column", "date-column", "lowercase", "stopwords")
#: Reading options a mapping may leave out, with the value that stands for them (no dates).
OPTIONAL_READING: Mapping[str, Any] = {"date-column": ""}


def reading_options(reading: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`READING_KEYS` of ``reading``, an option of :data:`OPTIONAL_READING` it leaves out at its
    default (KeyError for another missing key)."""
    return {key: reading[key] if key in reading or key not in OPTIONAL_READING else OPTIONAL_READING[key]
            for key in READING_KEYS}


def cache_dir() -> Path | None:
    """The cache folder: ``$FLOWER_TOPICS_CACHE_DIR``, else ``$XDG_CACHE_HOME/flower-topics/corpora``;
    None when the variable is ``off`` (or ``none``, ``0``, ``false``)."""
    value = os.environ.get(CACHE_ENV, "").strip()
    if value.lower() in ("off", "none", "0", "false"):
        return None
    if value:
        return expand_path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "flower-topics" / "corpora"


def preprocess_config(reading: Mapping[str, Any]) -> PreprocessConfig:
    """How a party reads raw text: the reading options, every word kept (no document-frequency filter)."""
    return PreprocessConfig(lowercase=bool(reading["lowercase"]),
                            stopwords=None if reading["stopwords"] == "none" else str(reading["stopwords"]),
                            min_df=1, max_df=1.0, max_vocab=None, min_doc_length=1)


def read_source(path: str | os.PathLike[str], reading: Mapping[str, Any]) -> Corpus:
    """The corpus at ``path`` over its own words, read with the reading options (no cache; see
    :func:`reading_options`)."""
    return load_corpus(path, text_column=str(reading["text-column"]), label_column=str(reading["label-column"]),
                       date_column=str(reading_options(reading)["date-column"]),
                       preprocess_config=preprocess_config(reading))


def source_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`~flower_topics.data.readers.load_corpus` reads for ``path`` (its identity)."""
    path = expand_path(path)
    if path.is_file() and path.name == OCTIS_CORPUS:
        path = path.parent
    if path.is_dir() and (path / OCTIS_CORPUS).is_file():
        return [p for p in (path / OCTIS_CORPUS, path / OCTIS_VOCABULARY) if p.is_file()]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.txt") if p.is_file())
    return [path]


def source_identity(path: str | os.PathLike[str]) -> list[list[Any]]:
    """``[absolute path, size, SHA-256 of the content]`` of each file the corpus at ``path`` is read from.

    The content, not the modification time: a file rewritten with other text within the same
    second, or copied over with its old time kept, is another corpus.
    """
    identity = []
    for file in source_files(path):
        with open(file, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        identity.append([str(file.resolve()), int(size), digest])
    return identity


def cache_key(path: str | os.PathLike[str], reading: Mapping[str, Any]) -> str:
    """What names a cache file: the format version, the source's absolute path and the reading options."""
    options = reading_options(reading)
    return json.dumps([FORMAT_VERSION, str(expand_path(path).resolve()), options], sort_keys=True)


def cache_file(folder: Path, key: str) -> Path:
    """The cache file of ``key`` in ``folder``."""
    return folder / f"corpus-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.bin"


@dataclass(frozen=True)
class CachedCorpus:
    """A preprocessed corpus, memory-mapped from its cache file.

    Parameters
    ----------
    tokens : np.ndarray
        Token ids of all documents (read-only map, smallest unsigned type).
    doc_ptr : np.ndarray
        ``int64`` document offsets into ``tokens``.
    vocabulary : tuple of str
        The corpus' words, in id order.
    labels : np.ndarray or None
        Label of each document (object array of str), or None.
    split : np.ndarray or None
        The split the source carries (an OCTIS folder), or None.
    sentence_start : np.ndarray or None
        ``bool`` per token (read-only map), or None.
    curated : bool
        The vocabulary is a curated list (an OCTIS folder's).
    dates : np.ndarray or None
        Date of each document as read (object array of str, ``""``: none), or None.
    """

    tokens: np.ndarray
    doc_ptr: np.ndarray
    vocabulary: tuple[str, ...]
    labels: np.ndarray | None
    split: np.ndarray | None
    sentence_start: np.ndarray | None
    curated: bool
    dates: np.ndarray | None = None

    @property
    def n_docs(self) -> int:
        """Number of documents."""
        return int(self.doc_ptr.size - 1)

    def skeleton(self) -> Corpus:
        """The documents without their words (no token, no vocabulary): labels and split only, what the seeded
        split and the partitioners look at."""
        return Corpus(tokens=np.zeros(0, dtype=np.int32), doc_ptr=np.zeros(self.n_docs + 1, dtype=np.int64),
                      vocabulary=(), labels=self.labels, split=self.split)

    def subset(self, indices: Sequence[int] | np.ndarray, split: np.ndarray | None = None) -> Corpus:
        """The documents at ``indices`` (in that order) as an in-memory :class:`Corpus`, exactly what
        ``Corpus.subset`` of the whole corpus gives; only their tokens are read from the map.

        Parameters
        ----------
        indices : array-like of int
            Document indices into the whole corpus.
        split : np.ndarray, optional
            A split of the whole corpus (one entry per document) to use instead of the cached one.
        """
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_docs):
            raise IndexError("document index out of range")
        lengths = np.diff(self.doc_ptr)[idx]
        doc_ptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_ptr[1:])
        token_pos = np.repeat(self.doc_ptr[idx] - doc_ptr[:-1], lengths) + np.arange(doc_ptr[-1])
        split = self.split if split is None else np.asarray(split, dtype=object)
        return Corpus(
            tokens=self.tokens[token_pos].astype(np.int32),
            doc_ptr=doc_ptr,
            vocabulary=self.vocabulary,
            labels=None if self.labels is None else self.labels[idx],
            split=None if split is None else split[idx],
            sentence_start=None if self.sentence_start is None else np.array(self.sentence_start[token_pos]),
            dates=None if self.dates is None else self.dates[idx],
        )

    def corpus(self, split: np.ndarray | None = None) -> Corpus:
        """Every document, in memory (``split``: one of the whole corpus to use instead of the cached one)."""
        split = self.split if split is None else np.asarray(split, dtype=object)
        return Corpus(tokens=np.asarray(self.tokens, dtype=np.int32), doc_ptr=self.doc_ptr.copy(),
                      vocabulary=self.vocabulary, labels=None if self.labels is None else self.labels.copy(),
                      split=None if split is None else split.copy(),
                      sentence_start=None if self.sentence_start is None else np.array(self.sentence_start),
                      dates=None if self.dates is None else self.dates.copy())


def _strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of ``values`` end to end and their offsets (smallest unsigned type)."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets.astype(np.min_scalar_type(int(offsets[-1])))


def _unstrings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    data = blob.tobytes()
    bounds = offsets.astype(np.int64).tolist()
    return [data[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]


def _smallest(values: np.ndarray, bound: int) -> np.ndarray:
    """``values`` (each in ``[0, bound]``) in the smallest unsigned integer type that holds ``bound``."""
    return np.ascontiguousarray(values, dtype=np.min_scalar_type(max(int(bound), 0)))


def write_cache(path: Path, corpus: Corpus, *, curated: bool, identity: list[list[Any]], key: str) -> Path:
    """Write ``corpus`` to the cache file ``path`` atomically (a file of this process, then ``os.replace``).

    Parameters
    ----------
    path : Path
        The cache file.
    corpus : Corpus
        The corpus as read (its own split, if any, is stored; none is drawn here).
    curated : bool
        Whether its vocabulary is a curated list.
    identity : list
        :func:`source_identity` of its source, taken before it was read.
    key : str
        :func:`cache_key` of its source and reading options.

    Returns
    -------
    Path
        ``path``.
    """
    arrays: dict[str, np.ndarray] = {
        "tokens": _smallest(corpus.tokens, max(corpus.n_words - 1, 0)),
        "doc_ptr": _smallest(corpus.doc_ptr, corpus.n_tokens),
    }
    arrays["vocabulary"], arrays["vocabulary_offsets"] = _strings(corpus.vocabulary)
    for field in ("labels", "dates"):  # each distinct string once, and a code per document
        values = getattr(corpus, field)
        if values is not None:
            names, codes = np.unique(np.asarray([str(x) for x in values], dtype=str), return_inverse=True)
            arrays[f"{field[:-1]}_names"], arrays[f"{field[:-1]}_name_offsets"] = _strings(names.tolist())
            arrays[field] = _smallest(codes.ravel(), len(names))
    if corpus.split is not None:
        code = {name: i for i, name in enumerate(SPLITS)}
        arrays["split"] = np.fromiter((code[s] for s in corpus.split), dtype=np.uint8, count=corpus.n_docs)
    if corpus.sentence_start is not None:
        arrays["sentence_start"] = corpus.sentence_start.astype(np.uint8)
    layout, offset = {}, 0
    for name, array in arrays.items():
        layout[name] = [offset, array.dtype.str, list(array.shape)]
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    payload = bytearray(offset)
    for name, array in arrays.items():
        start = layout[name][0]
        payload[start:start + array.nbytes] = array.tobytes()
    header = json.dumps({"version": FORMAT_VERSION, "key": key, "identity": identity, "curated": bool(curated),
                         "arrays": layout, "payload_size": len(payload), "crc32": zlib.crc32(payload)}).encode()
    header += b" " * (-(_PREFIX + len(header)) % _ALIGN)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: parties may build the same file at once
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC + len(header).to_bytes(8, "little") + header)
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_cache(path: Path, *, identity: list[list[Any]], key: str) -> CachedCorpus | None:
    """The cached corpus in ``path``, memory-mapped; None when the file is missing, of another format,
    for another source or options, stale (the source changed) or damaged (wrong length or checksum)."""
    return open_cache(path, identity=identity, key=key)[0]


#: Why :func:`open_cache` found no usable cache file: none there, the source changed, the file is damaged
#: (or belongs to another source or reading options), or it is of an older format.
MISSING, STALE, DAMAGED, OUTDATED = "missing", "stale", "damaged", "outdated"


def open_cache(path: Path, *, identity: list[list[Any]], key: str) -> tuple[CachedCorpus | None, str]:
    """The cached corpus in ``path`` (memory-mapped) and ``""``; or None and why not: :data:`MISSING`,
    :data:`STALE` (its source's content is not the one it was built from), :data:`DAMAGED` (wrong magic,
    length or CRC-32, or the header of another source or reading options) or :data:`OUTDATED`."""
    try:
        with open(path, "rb") as fh:
            prefix = fh.read(_PREFIX)
            if len(prefix) != _PREFIX or prefix[:len(MAGIC)] != MAGIC:
                return None, DAMAGED
            size = int.from_bytes(prefix[len(MAGIC):], "little")
            if size > 1 << 30:
                return None, DAMAGED
            header = json.loads(fh.read(size))
    except FileNotFoundError:
        return None, MISSING
    except (OSError, ValueError, UnicodeDecodeError):
        return None, DAMAGED
    try:
        start = _PREFIX + size
        if not isinstance(header, dict):
            return None, DAMAGED
        if header.get("version") != FORMAT_VERSION:
            return None, OUTDATED
        if header.get("key") != key:
            return None, DAMAGED
        if header.get("identity") != identity:
            return None, STALE
        if os.path.getsize(path) != start + int(header["payload_size"]):
            return None, DAMAGED
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(int(header["payload_size"]),))
        if zlib.crc32(data) != int(header["crc32"]):
            return None, DAMAGED
        arrays = {}
        for name, (offset, dtype, shape) in header["arrays"].items():
            dtype = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            arrays[name] = data[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)
        labels = split = dates = None
        if "labels" in arrays:
            names = np.asarray(_unstrings(arrays["label_names"], arrays["label_name_offsets"]), dtype=object)
            labels = names[arrays["labels"]]
        if "dates" in arrays:
            names = np.asarray(_unstrings(arrays["date_names"], arrays["date_name_offsets"]), dtype=object)
            dates = names[arrays["dates"]]
        if "split" in arrays:
            split = np.asarray(SPLITS, dtype=object)[arrays["split"]]
        return CachedCorpus(
            tokens=arrays["tokens"],
            doc_ptr=arrays["doc_ptr"].astype(np.int64),
            vocabulary=tuple(_unstrings(arrays["vocabulary"], arrays["vocabulary_offsets"])),
            labels=labels,
            split=split,
            sentence_start=arrays["sentence_start"].view(bool) if "sentence_start" in arrays else None,
            curated=bool(header["curated"]),
            dates=dates,
        ), ""
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError):
        return None, DAMAGED


def build(path: str | os.PathLike[str], reading: Mapping[str, Any], target: Path) -> None:
    """Read and preprocess the corpus at ``path`` in this process and write its cache file ``target``."""
    identity, key = source_identity(path), cache_key(path, reading)
    corpus = read_source(path, reading)
    write_cache(target, corpus, curated=corpus.split is not None, identity=identity, key=key)


def _build_in_child(path: str, reading: Mapping[str, Any], target: Path) -> None:
    """:func:`build` in a child Python process; its UserInputError raised here as one line."""
    request = json.dumps({"path": path, "reading": reading_options(reading), "target": str(target)})
    done = subprocess.run([sys.executable, "-m", "flower_topics.data.corpus_cache", request], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                              str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))})
    if done.returncode == 2:
        raise UserInputError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "cannot read " + path)
    if done.returncode != 0:
        raise RuntimeError(f"preprocessing {path} in a child process failed:\n{done.stderr[-3000:]}")


@contextmanager
def _building(target: Path) -> Iterator[None]:
    """Hold the lock of cache file ``target`` (``flock`` on ``.<target stem>.lock`` beside it, blocking): one
    process builds it at a time. The kernel releases the lock when its holder ends, so a crashed builder leaves no
    stale lock (the empty lock file stays)."""
    with open(target.with_name(f".{target.stem}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_corpus(path: str | os.PathLike[str], reading: Mapping[str, Any], *, folder: str | os.PathLike[str] | None = None,
                  child_bytes: int = CHILD_BUILD_BYTES) -> CachedCorpus | None:
    """The corpus at ``path``, read with ``reading``, from the cache (built first when missing or stale).

    Parameters
    ----------
    path : str or path-like
        The corpus (any format :func:`~flower_topics.data.readers.load_corpus` reads).
    reading : Mapping
        The reading options :data:`READING_KEYS`.
    folder : str or path-like, optional
        The cache folder (a party's node-config ``corpus-cache``); by default :func:`cache_dir`.
    child_bytes : int
        Sources larger than this are preprocessed in a child process.

    Returns
    -------
    CachedCorpus or None
        None when the cache is off (``FLOWER_TOPICS_CACHE_DIR=off``, no ``folder``) or its folder
        cannot be written (said in one line): then read the corpus in memory instead.

    Raises
    ------
    UserInputError
        When the corpus cannot be read (as :func:`~flower_topics.data.readers.load_corpus`).
    """
    where = cache_dir() if folder is None else expand_path(folder)
    if where is None:
        return None
    path = str(expand_path(path))
    key = cache_key(path, reading)
    target = cache_file(where, key)
    identity = source_identity(path)
    cached, _ = open_cache(target, identity=identity, key=key)
    if cached is not None:
        return cached
    try:
        where.mkdir(parents=True, exist_ok=True)
        if not os.access(where, os.W_OK):
            raise PermissionError(f"{where} is not writable")
    except (OSError, ValueError) as exc:  # ValueError: a NUL character in the folder's name
        logger.warning("corpus cache %s cannot be used (%s): reading %s in memory", where, exc, path)
        return None
    with _building(target):  # a process that finds another one building this file waits, then reads it
        cached, why = open_cache(target, identity=source_identity(path), key=key)
        if cached is not None:
            return cached
        if why in REBUILT_BECAUSE:  # said by the one process that rebuilds it, once
            logger.warning("corpus cache %s: %s; rebuilding it", target, REBUILT_BECAUSE[why].format(path=path))
        if sum(size for _, size, _ in identity) > child_bytes:
            _build_in_child(path, reading, target)
        else:
            build(path, reading, target)
    cached, _ = open_cache(target, identity=source_identity(path), key=key)
    if cached is None:  # the source changed while it was read: the file is stale already
        raise UserInputError(f"corpus {path} changed while it was read; run again once it is complete")
    return cached


#: What :func:`cached_corpus` says, once, when it rebuilds a cache file it found unusable.
REBUILT_BECAUSE = {
    STALE: "{path} changed since this cache file was built",
    DAMAGED: "the file is damaged or not this corpus' (it failed its checks)",
    OUTDATED: "the file is of an older format",
}


def _main(argv: list[str]) -> int:
    """``python -m flower_topics.data.corpus_cache '<json request>'``: build one cache file (see :func:`build`)."""
    request = json.loads(argv[0])
    try:
        build(request["path"], request["reading"], Path(request["target"]))
    except UserInputError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
