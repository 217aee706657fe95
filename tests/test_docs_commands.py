"""Every command in README.md and docs/*.md parses, and every key it names exists.

A command is a line of a ``bash`` block (with its ``\\`` continuations) or an inline code
span that runs ``flower-topics``, ``flwr run`` or ``flower-supernode``. The run-config
strings go through Flower's own parser (``flwr.common.config.parse_config_args``) and then
the package's validation, as ``flwr run`` does; ``flower-topics`` commands go through the
CLI's argument parser; ``--node-config`` keys must be node-config keys. Inline
``key=value`` spans of a method's option (``fedlda.pad-length=0``) must name a real key.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from flower_topics.cli.main import _parser
from flower_topics.run.config import OPTIONS, options_table, parse_assignments, parse_run_config

from flower_topics.methods import BUILT_IN, METHODS, all_node_options

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
INLINE = "inline: "
RUNNERS = ("flower-topics ", "flwr run ", "flower-supernode ", "flower-topics-superlink ")


def _commands(text: str) -> list[str]:
    """The commands of one Markdown page: bash-block lines, then inline code spans (marked ``INLINE``)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(RUNNERS) or " && flower-topics-superlink " in line:
                found.append(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if span.startswith(RUNNERS) and ("--" in span):
            found.append(INLINE + span)
    return found


def _quoted_option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def _check(command: str) -> None:
    """Parse one command; an inline span (often a fragment of one in prose) is checked for its keys only."""
    inline = command.startswith(INLINE)
    argv = shlex.split(command.removeprefix(INLINE).replace("$PWD", "/pwd"))
    for config in _quoted_option(argv, "--run-config"):
        parse_run_config(parse_config_args([config]))
    for config in _quoted_option(argv, "--node-config"):
        unknown = set(parse_config_args([config])) - set(all_node_options())
        assert not unknown, f"unknown node-config key(s) {sorted(unknown)}"
    if inline:
        for key in parse_assignments(_quoted_option(argv, "--set")):
            assert key in OPTIONS, f"unknown run-config key {key}"
    elif "flower-topics" in argv:
        args = _parser().parse_args(argv[argv.index("flower-topics") + 1:])
        if args.command == "simulate":
            parse_run_config({**parse_assignments(args.set), "method": args.method, "num-topics": args.topics,
                              "num-rounds": args.rounds, "partition": args.partition, "dataset": args.dataset})


def _all_commands() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), cmd) for page in PAGES for cmd in _commands(page.read_text())]


@pytest.mark.parametrize("page, command", _all_commands())
def test_every_documented_command_parses(page, command):
    _check(command)


def test_the_pages_have_their_commands():
    """The extraction finds the commands a reader runs (so the test above cannot pass empty)."""
    by_page: dict[str, int] = {}
    for page, _ in _all_commands():
        by_page[page] = by_page.get(page, 0) + 1
    assert by_page["README.md"] >= 8
    for name in ("lda", "fedlda", "pctd", "ftm", "ntm", "real-hosts", "outputs-and-api"):
        assert by_page.get(f"docs/{name}.md", 0) >= 1, name


def test_a_wrong_key_in_a_command_is_caught():
    with pytest.raises(Exception, match="did you mean fedlda.epsilon"):
        _check("""flwr run . --run-config "method='fedlda' epsilon=5" """)
    with pytest.raises(AssertionError, match="datset"):
        _check("""flower-supernode --node-config "datset='/srv/a.jsonl'" """)
    with pytest.raises(SystemExit):
        _check("flower-topics simulate --method lda --clientz 5")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_inline_option_assignments_name_real_keys(page):
    prefixes = tuple(f"{name}." for name in METHODS)
    for key in re.findall(r"`([a-z][a-z0-9-]*\.[a-z][a-z0-9-]*)=[^`]*`", page.read_text()):
        if key.startswith(prefixes):
            assert key in OPTIONS, f"{page.name}: {key}"


def test_every_key_is_documented_and_each_method_page_lists_its_own():
    table = options_table()
    assert table in (ROOT / "docs" / "run-config.md").read_text()
    for name in BUILT_IN:  # the package's methods (a method added by register_method is documented by its owner)
        page = (ROOT / "docs" / f"{name}.md").read_text()
        for row in table.splitlines():
            if row.startswith(f"| `{name}."):
                assert row in page, f"docs/{name}.md lacks {row}"
