"""docs/architecture.md's "Layout" is the package as it is: its layer line is the import-linter contract, and its
tree names every first-level part of ``flower_topics`` and nothing else."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _contract_layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    lines = config["importlinter:contract:layers"]["layers"].split("\n")
    return [" | ".join(sorted(part.strip().removeprefix("flower_topics.") for part in line.split("|")))
            for line in lines if line.strip()]


def _doc_layers() -> list[str]:
    block = re.search(r"Top to bottom:\n\n```\n(.*?)```", DOC, re.S)
    assert block, "architecture.md has no layer line after 'Top to bottom:'"
    text = " ".join(block.group(1).split())
    layers = []
    for part in text.split(" > "):
        layers.append(" | ".join(sorted(name.strip() for name in part.strip().strip("()").split("|"))))
    return layers


def _doc_tree() -> set[str]:
    block = re.search(r"^flower_topics/\n(.*?)^benchmarks/", DOC, re.S | re.M)
    assert block, "architecture.md's layout tree has no flower_topics/ block"
    return {line.split()[0].rstrip("/").removesuffix(".py") for line in block.group(1).splitlines()
            if line.startswith("  ") and not line.startswith("   ")}


def test_the_layer_line_is_the_import_contract():
    assert _doc_layers() == _contract_layers()


def test_the_layout_tree_names_every_part_of_the_package():
    package = ROOT / "flower_topics"
    parts = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts |= {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    assert _doc_tree() == parts


def test_every_layer_of_the_contract_is_a_part_of_the_package():
    """The contract cannot pass by naming a layer that does not exist (import-linter skips no missing module,
    but a renamed package would leave the doc and the contract agreeing on a name that is gone)."""
    package = ROOT / "flower_topics"
    for layer in _contract_layers():
        for name in layer.split(" | "):
            assert (package / name).is_dir() or (package / f"{name}.py").exists(), name
