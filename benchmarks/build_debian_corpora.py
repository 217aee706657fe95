"""Build the debian_descriptions and debian_large corpora from this machine's Debian package lists.

    apt-get update -o Acquire::Languages=en        # fetch the English descriptions (Translation-en)
    python benchmarks/build_debian_corpora.py --out "$FLOWER_TOPICS_DATASETS"

reads apt's lists (``--lists``, default ``/var/lib/apt/lists``): every ``*Packages*`` file for the
packages' archive sections, every ``*Translation-en*`` file for their English descriptions, each
compressed or not, in the order of their file names. It writes ``debian_descriptions/corpus.jsonl``
and ``debian_large/corpus.jsonl`` under ``--out``, one ``{"id", "text", "label"}`` a line, sorted by
package name: ``id`` the package, ``label`` its section, ``text`` its one-line summary, a period, a
newline, then its long description with one paragraph a line (the lines of a paragraph joined by a
space). Only packages of Debian's main archive count (a section with no ``contrib/`` or
``non-free/`` prefix).

- debian_large: every package whose long description has at least 15 words, one per distinct
  long description (the first package, in the lists' order, that has it).
- debian_descriptions: the packages of :data:`SECTIONS` whose long description has at least 25
  words, one per distinct long description among them.
- Neither holds the description of a package named in ``--held-out`` (default
  ``benchmarks/debian_held_out.txt``, the packages kept out of both corpora for evaluation),
  under its name or any other.

The same lists give the same documents, in the same order, on any machine. An ``apt-get
update`` on another day can give other lists (new point releases, security updates).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SECTIONS = ("admin", "database", "editors", "education", "electronics", "fonts", "games", "gnome", "graphics",
            "hamradio", "kde", "mail", "math", "net", "science", "shells", "sound", "text", "video", "web")
MIN_WORDS_LARGE = 15
MIN_WORDS_DESCRIPTIONS = 25
LISTS = Path("/var/lib/apt/lists")
HELD_OUT = Path(__file__).resolve().with_name("debian_held_out.txt")
APT_HELPER = "/usr/lib/apt/apt-helper"
_OPEN = {".gz": gzip.open, ".xz": lzma.open, ".lzma": lzma.open, ".bz2": bz2.open}
_COMPRESSED = {*_OPEN, ".lz4", ".zst"}
_FIELD = re.compile(r"^([\w.-]+):[ \t]*(.*(?:\n[ \t].*)*)", re.M)
_NOT_MAIN = ("contrib/", "non-free/", "non-free-firmware/")


@dataclass(frozen=True)
class Description:
    """One package's English description.

    Parameters
    ----------
    package : str
        The package's name.
    summary : str
        The one-line summary.
    long : str
        The long description, one paragraph a line.
    """

    package: str
    summary: str
    long: str

    @property
    def text(self) -> str:
        """The corpus text: the summary, a period, a newline, the long description."""
        return f"{self.summary}.\n{self.long}"

    @property
    def n_words(self) -> int:
        """The long description's number of words (separated by white space)."""
        return len(self.long.split())


def read_list(path: Path) -> str:
    """The text of one apt list file, decompressed (gzip, xz, bzip2 here; lz4 and zstd by apt-helper)."""
    suffix = path.suffix if path.suffix in _COMPRESSED else ""
    if suffix in _OPEN:
        with _OPEN[suffix](path, "rt", encoding="utf-8") as fh:
            return fh.read()
    if not suffix:
        return path.read_text(encoding="utf-8")
    try:
        done = subprocess.run([APT_HELPER, "cat-file", str(path)], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"{path}: cannot decompress it ({APT_HELPER} cat-file failed: {exc})") from None
    return done.stdout.decode("utf-8")


def stanzas(text: str) -> Iterator[dict[str, str]]:
    """The stanzas of a Debian control file, each as its fields (a field's continuation lines kept)."""
    for stanza in text.split("\n\n"):
        fields = dict(_FIELD.findall(stanza))
        if "Package" in fields:
            yield fields


def parse_description(package: str, field: str) -> Description:
    """A ``Description-en`` field as a :class:`Description` (`` .`` lines separate paragraphs)."""
    first, *lines = field.split("\n")
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        line = line.strip()
        if line == ".":
            paragraphs.append([])
        elif line:
            paragraphs[-1].append(line)
    return Description(package, first.strip(), "\n".join(" ".join(p) for p in paragraphs if p))


def list_files(lists: Path, kind: str) -> list[Path]:
    """The files of ``lists`` whose name (compression suffix aside) ends with ``kind``, sorted by name."""
    def stem(p: Path) -> str:
        return p.name[: -len(p.suffix)] if p.suffix in _COMPRESSED else p.name
    return sorted((p for p in lists.iterdir() if p.is_file() and stem(p).endswith(kind)), key=lambda p: p.name)


def main_sections(paths: Iterable[Path]) -> dict[str, str]:
    """Each main-archive package's section, from the first Packages file that lists the package."""
    sections: dict[str, str] = {}
    for path in paths:
        for fields in stanzas(read_list(path)):
            sections.setdefault(fields["Package"], fields.get("Section", ""))
    return {name: section for name, section in sections.items() if section and not section.startswith(_NOT_MAIN)}


def descriptions(paths: Iterable[Path]) -> list[Description]:
    """Every English description of the Translation-en files, in file and stanza order."""
    return [parse_description(fields["Package"], fields["Description-en"])
            for path in paths for fields in stanzas(read_list(path)) if "Description-en" in fields]


def first_per_description(found: Iterable[Description]) -> list[Description]:
    """The first :class:`Description` of each distinct long description, in the order given."""
    first: dict[str, Description] = {}
    for d in found:
        first.setdefault(d.long, d)
    return list(first.values())


def read_held_out(path: Path) -> set[str]:
    """The package names of a held-out list: one a line, ``#`` lines are comments."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def corpora(lists: Path, held_out: set[str]) -> dict[str, list[dict[str, str]]]:
    """The two corpora's rows (``debian_descriptions``, ``debian_large``) from the lists in ``lists``."""
    translations = list_files(lists, "Translation-en")
    if not translations:
        raise SystemExit(f"{lists}: no Translation-en list; run `apt-get update -o Acquire::Languages=en` "
                         "(apt fetches no descriptions when its languages are none)")
    packages = list_files(lists, "Packages")
    if not packages:
        raise SystemExit(f"{lists}: no Packages list; run `apt-get update`")
    sections = main_sections(packages)
    found = [d for d in descriptions(translations) if d.package in sections]
    kept_out = {d.long for d in found if d.package in held_out}
    chosen = {
        "debian_descriptions": first_per_description(
            d for d in found if sections[d.package] in SECTIONS and d.n_words >= MIN_WORDS_DESCRIPTIONS),
        "debian_large": first_per_description(d for d in found if d.n_words >= MIN_WORDS_LARGE),
    }
    return {name: [{"id": d.package, "text": d.text, "label": sections[d.package]}
                   for d in sorted(docs, key=lambda d: d.package) if d.long not in kept_out]
            for name, docs in chosen.items()}


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    """One JSON object a line, UTF-8 as is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the datasets folder the two corpora are written under")
    parser.add_argument("--lists", default=str(LISTS), help="apt's lists folder (default %(default)s)")
    parser.add_argument("--held-out", default=str(HELD_OUT), help="the package names kept out of both corpora")
    args = parser.parse_args(argv)
    lists = Path(args.lists)
    if not lists.is_dir():
        raise SystemExit(f"--lists {lists}: no such folder")
    built = corpora(lists, read_held_out(Path(args.held_out)))
    for name, rows in built.items():
        path = Path(args.out) / name / "corpus.jsonl"
        write_jsonl(path, rows)
        labels = Counter(row["label"] for row in rows)
        words = sum(len(row["text"].split()) for row in rows) / max(1, len(rows))
        print(f"{path}: {len(rows):,} documents, {len(labels)} sections, {words:.0f} words a document")


if __name__ == "__main__":
    main()
