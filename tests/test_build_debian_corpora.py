"""benchmarks/build_debian_corpora.py on hand-written package lists: the corpora's rules, document by document."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("build_debian_corpora", ROOT / "benchmarks" / "build_debian_corpora.py")
build = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(build)

LONG = " ".join(f"w{i}" for i in range(30))  # 30 words
SHORT = " ".join(f"s{i}" for i in range(15))  # 15 words: debian_large only


def _translation(package: str, summary: str, *lines: str) -> str:
    return f"Package: {package}\nDescription-md5: 0\nDescription-en: {summary}\n" + "".join(f" {x}\n" for x in lines)


def _package(package: str, section: str) -> str:
    return f"Package: {package}\nVersion: 1\nDescription: x\nDescription-md5: 0\nSection: {section}\n"


@pytest.fixture()
def lists(tmp_path: Path) -> Path:
    """Two suites' lists, as apt names them: one compressed, one plain; the security suite sorts first."""
    folder = tmp_path / "lists"
    folder.mkdir()
    main = "host_debian_dists_bookworm_main"
    security = "host_debian-security_dists_bookworm-security_main"
    (folder / f"{main}_binary-amd64_Packages").write_text("\n".join([
        _package("zeta", "games"), _package("alpha", "games"), _package("beta", "libs"),
        _package("gamma", "contrib/games"), _package("delta", "net"), _package("eps", "net"),
        _package("held", "science"), _package("twin", "science"), _package("nodesc", "games")]))
    (folder / f"{security}_binary-amd64_Packages").write_text(_package("alpha", "web"))
    with gzip.open(folder / f"{main}_i18n_Translation-en.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join([
            _translation("zeta", "Zeta game", *LONG.split(" ", 1), ".", "second  paragraph   here"),
            _translation("alpha", "Alpha tool", LONG),
            _translation("beta", "Beta library", SHORT),
            _translation("gamma", "contrib game", LONG),
            _translation("delta", "Delta first", "shared " + LONG),
            _translation("eps", "Eps second", "shared " + LONG),
            _translation("held", "Held out", "kept " + LONG),
            _translation("twin", "Twin of held", "kept " + LONG),
            _translation("unknown", "Not in Packages", LONG),
            _translation("short", "Too short", "one two three"),
        ]))
    (folder / f"{security}_i18n_Translation-en").write_text(_translation("alpha", "Alpha tool, patched", "new " + LONG))
    (folder / f"{main}_binary-amd64_Packages.diff_Index").write_text("not a list\n")
    return folder


def test_the_corpora_follow_their_rules(lists: Path) -> None:
    built = build.corpora(lists, {"held"})
    large = [(r["id"], r["label"], r["text"]) for r in built["debian_large"]]
    assert large == [
        # the security suite's lists sort first: alpha's section and description are its own there
        ("alpha", "web", f"Alpha tool, patched.\nnew {LONG}"),
        ("alpha", "web", f"Alpha tool.\n{LONG}"),  # another distinct description of the same package
        ("beta", "libs", f"Beta library.\n{SHORT}"),
        ("delta", "net", f"Delta first.\nshared {LONG}"),  # eps has the same long description: the first is kept
        # gamma (contrib), held and twin (held's description), unknown (no section), short: none
        # a paragraph's lines joined by one space; the spaces inside a line kept as Debian wrote them
        ("zeta", "games", f"Zeta game.\n{LONG}\nsecond  paragraph   here"),
    ]
    descriptions = [(r["id"], r["label"]) for r in built["debian_descriptions"]]
    assert descriptions == [("alpha", "web"), ("alpha", "web"), ("delta", "net"), ("zeta", "games")]


def test_writes_both_corpora_and_the_same_bytes_twice(lists: Path, tmp_path: Path) -> None:
    held = tmp_path / "held.txt"
    held.write_text("# comment\nheld\n\n")
    for out in ("a", "b"):
        build.main(["--lists", str(lists), "--out", str(tmp_path / out), "--held-out", str(held)])
    for name in ("debian_descriptions", "debian_large"):
        first = (tmp_path / "a" / name / "corpus.jsonl").read_bytes()
        assert first == (tmp_path / "b" / name / "corpus.jsonl").read_bytes()
        rows = [json.loads(line) for line in first.decode("utf-8").splitlines()]
        assert all(list(row) == ["id", "text", "label"] for row in rows) and rows


def test_the_shipped_held_out_list_is_names() -> None:
    names = build.read_held_out(build.HELD_OUT)
    assert len(names) > 5000 and all(n and " " not in n for n in names)


def test_lists_without_descriptions_are_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "x_main_binary-amd64_Packages").write_text(_package("a", "games"))
    with pytest.raises(SystemExit, match="Acquire::Languages=en"):
        build.corpora(tmp_path, set())
