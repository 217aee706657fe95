"""Every ``python benchmarks/...`` command in README.md and docs/*.md parses, against a fake datasets folder.

A command is a line of a ``bash`` block (``\\`` continuations joined, ``NAME="..."`` variables of the
block expanded, ``&&`` / ``;`` separating commands, ``nice`` and ``VAR=value`` prefixes dropped) or an
inline code span with arguments. ``$FLOWER_TOPICS_DATASETS`` is a temporary folder laid out as
``benchmarks/benchmark_data.LAYOUT`` says, with empty files; each command's script runs up to its
argument parser (``ArgumentParser.parse_args`` stops it there), so a renamed flag fails. Every path
under the datasets folder in the parsed arguments, the benchmark's defaults included, must be in the
layout, so a misspelled corpus fails; a path in the ``datasets`` folder beside the checkout (where the
benchmarks look when the variable is unset) fails too, so a default that ignored ``FLOWER_TOPICS_DATASETS``
would be caught.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LAYOUT: dict[str, tuple[str, ...]] = runpy.run_path(str(ROOT / "benchmarks" / "benchmark_data.py"))["LAYOUT"]
SCRIPT = "python benchmarks/"
INLINE = "inline: "
_ASSIGNMENT = re.compile(r"""(\w+)=(?:"([^"]*)"|(\S*))""")
_PREFIX = re.compile(r"^(?:nice(?:\s+-n\s+-?\d+)?\s+|[A-Z_][A-Z0-9_]*=\S*\s+)+")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")

#: the folder beside a checkout, as a path could spell it (split: no test file spells it, tests/test_read_guard.py)
BESIDE = "../" "shared"
SHARED_DATASETS = "shared/" "datasets"


def _expand(text: str, variables: dict[str, str]) -> str:
    return _VARIABLE.sub(lambda m: variables.get(m[1] or m[2], m[0]), text)


def _script_commands(text: str, variables: dict[str, str]) -> list[str]:
    """The benchmark commands of one shell line (or inline span), with its variables defined on the way."""
    found = []
    for part in re.split(r"\s*(?:&&|;)\s*", text.split(" #", 1)[0].strip()):
        assignment = _ASSIGNMENT.fullmatch(part)
        if assignment:
            variables[assignment[1]] = assignment[2] if assignment[2] is not None else assignment[3]
            continue
        part = _PREFIX.sub("", _expand(part, variables))
        if part.startswith(SCRIPT):
            found.append(part)
    return found


def _commands(text: str) -> list[str]:
    """The benchmark commands of one Markdown page: bash-block lines, then inline spans (marked ``INLINE``)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        variables: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            found += _script_commands(line, variables)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        if SCRIPT in span and "<" not in span:  # python benchmarks/<name>.py is a pattern, not a command
            found += [INLINE + cmd for cmd in _script_commands(" ".join(span.split()), {})]
    return found


def _all_commands() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), cmd) for page in PAGES for cmd in _commands(page.read_text())]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A datasets folder with every corpus of the layout, each file empty."""
    root = tmp_path_factory.mktemp("datasets")
    for corpus, files in LAYOUT.items():
        (root / corpus).mkdir()
        for name in files:
            (root / corpus / name).touch()
    return root


class _Parsed(Exception):
    """Raised by the patched ``parse_args`` with the namespace, so that the script stops there."""


def _parse(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> argparse.Namespace:
    original = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "path", [str(Path(argv[0]).parent), *sys.path])  # as ``python script.py`` does
    sys.modules.pop("benchmark_data", None)  # as imported before (another test), it may hold another folder
    modules, environ = set(sys.modules), os.environ.copy()
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except _Parsed as parsed:
        return parsed.args[0]
    except SystemExit as exc:
        pytest.fail(f"the arguments were refused ({exc.code}): {capsys.readouterr().err.strip()}")
    finally:  # the modules the script imported from benchmarks/ and the variables it set go
        for name in set(sys.modules) - modules:
            if str(ROOT / "benchmarks") in str(getattr(sys.modules[name], "__file__", "")):
                del sys.modules[name]
        os.environ.clear()
        os.environ.update(environ)
    pytest.fail("the script ended without parsing its arguments")


def _strings(value: object) -> list[str]:
    if isinstance(value, (str, Path)):
        return [str(value)]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


@pytest.mark.parametrize("page, command", _all_commands())
def test_every_documented_benchmark_command_parses(page, command, datasets, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("FLOWER_TOPICS_DATASETS", str(datasets))
    monkeypatch.chdir(tmp_path)
    text = _expand(command.removeprefix(INLINE), {"FLOWER_TOPICS_DATASETS": str(datasets), "PWD": str(tmp_path)})
    argv = shlex.split(text)
    assert not [a for a in argv if "$" in a], f"an undefined variable in {argv}"
    script = ROOT / argv[1]
    assert script.is_file(), f"no script {argv[1]}"
    if command.startswith(INLINE) and len(argv) == 2:
        return  # an inline span that only names the script
    args = _parse([str(script), *argv[2:]], monkeypatch, capsys)
    for value in (s for v in vars(args).values() for s in _strings(v)):
        assert SHARED_DATASETS not in value, f"{value}: a corpus not read through FLOWER_TOPICS_DATASETS"
        for path in re.findall(re.escape(str(datasets)) + r"[^\s,=:;\"']*", value):
            assert Path(path).exists(), f"{path} is not a corpus file of the datasets folder's layout"


def test_the_docs_spell_the_datasets_folder_by_its_variable():
    for page in PAGES:
        assert BESIDE not in page.read_text(), f"{page.name} names {BESIDE}; write $FLOWER_TOPICS_DATASETS/..."


def test_every_datasets_path_in_the_docs_is_in_the_layout():
    """``$FLOWER_TOPICS_DATASETS/...`` anywhere (flower-topics commands, run configs, prose) names a corpus file."""
    known = {f"{corpus}/{name}" for corpus, files in LAYOUT.items() for name in files} | set(LAYOUT)
    named = [(page.name, path) for page in PAGES
             for path in re.findall(r"\$FLOWER_TOPICS_DATASETS/([\w./-]*\w)", page.read_text())]
    assert len(named) >= 40
    assert [(page, path) for page, path in named if path not in known] == []


def test_the_pages_have_their_benchmark_commands():
    """The extraction finds the commands a reader runs, variables expanded (so the test above cannot pass empty)."""
    commands = _all_commands()
    by_page: dict[str, int] = {}
    for page, _ in commands:
        by_page[page] = by_page.get(page, 0) + 1
    assert len(commands) >= 60
    for page in ("README.md", "docs/dplda-public.md", "docs/dplda.md", "docs/membership-audit.md", "docs/results.md",
                 "docs/reproducing.md"):
        assert by_page.get(page, 0) >= 1, page
    expanded = [cmd for page, cmd in commands if page == "docs/dplda-public.md" and "--tag nosecure-public" in cmd]
    assert expanded and expanded[0].startswith("python benchmarks/dplda_quality.py --dataset runs/debian-split/")


def test_a_renamed_flag_or_a_misspelled_corpus_fails(datasets, monkeypatch, capsys, tmp_path):
    with pytest.raises(pytest.fail.Exception, match="refused"):
        test_every_documented_benchmark_command_parses(
            "x", "python benchmarks/public_split.py --datset BBC_News --out runs/x", datasets, monkeypatch, capsys,
            tmp_path)
    with pytest.raises(AssertionError, match="BBC_Newz"):
        test_every_documented_benchmark_command_parses(
            "x", "python benchmarks/bench_fixed_phi.py --dataset $FLOWER_TOPICS_DATASETS/BBC_Newz", datasets,
            monkeypatch, capsys, tmp_path)


def test_reproducing_shows_the_layout_the_benchmarks_read():
    text = (ROOT / "docs" / "reproducing.md").read_text()
    block = re.search(r"```\n\$FLOWER_TOPICS_DATASETS/\n(.*?)```", text, flags=re.S)[1]
    shown = {line.split()[0].rstrip("/"): tuple(line.split()[1:]) for line in block.splitlines()}
    assert shown == LAYOUT
