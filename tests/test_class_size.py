"""No class in the package is over :data:`MAX_LINES` lines or :data:`MAX_METHODS` methods.

A class's lines run from its ``class`` line to its last line; its methods are the functions defined
in its body (properties, class and static methods included; nested classes not).

The functions of :data:`FUNCTION_LINES` (the ones that read as a sequence of stages, such as the
ServerApp's ``run_server``) stay within their listed lines, from their ``def`` line to their last
line, docstring included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import flower_topics

MAX_LINES = 250
MAX_METHODS = 20
#: "module path:function" -> the lines a module-level function may have at most (``def`` line to last line)
FUNCTION_LINES: dict[str, int] = {
    "federation/server_app.py:run_server": 60,  # reads as the stages of a run (docs/architecture.md)
}
PACKAGE = Path(flower_topics.__file__).parent


def class_sizes(root: Path = PACKAGE) -> dict[str, tuple[int, int]]:
    """``"module path:class"`` (relative to ``root``) -> (lines, methods) of every class under ``root``."""
    sizes = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)
                sizes[f"{path.relative_to(root).as_posix()}:{node.name}"] = (node.end_lineno - node.lineno + 1,
                                                                               methods)
    return sizes


def function_lines(root: Path = PACKAGE) -> dict[str, int]:
    """``"module path:function"`` (relative to ``root``) -> lines of every module-level function under ``root``."""
    lines = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines[f"{path.relative_to(root).as_posix()}:{node.name}"] = node.end_lineno - node.lineno + 1
    return lines


def test_the_size_counts_lines_and_methods_of_a_class(tmp_path):
    (tmp_path / "m.py").write_text("class A:\n    x = 1\n\n    def f(self):\n        pass\n\n"
                                   "    @property\n    def g(self):\n        return 1\n\n\nclass B:\n    pass\n")
    assert class_sizes(tmp_path) == {"m.py:A": (9, 2), "m.py:B": (2, 0)}


def test_no_class_is_over_the_limits():
    over = {name: size for name, size in class_sizes().items() if size[0] > MAX_LINES or size[1] > MAX_METHODS}
    assert not over, f"over {MAX_LINES} lines or {MAX_METHODS} methods (lines, methods): {over}"


def test_the_function_size_counts_a_module_level_function_from_def_to_its_last_line(tmp_path):
    (tmp_path / "m.py").write_text('def f(x):\n    """Doc."""\n    return x\n\n\nclass A:\n'
                                   '    def g(self):\n        pass\n\n\nasync def h():\n    pass\n')
    assert function_lines(tmp_path) == {"m.py:f": 3, "m.py:h": 2}


def test_the_listed_functions_are_within_their_lines():
    lines = function_lines()
    missing = [name for name in FUNCTION_LINES if name not in lines]
    assert not missing, f"listed functions not found (renamed or moved?): {missing}"
    over = {name: (lines[name], limit) for name, limit in FUNCTION_LINES.items() if lines[name] > limit}
    assert not over, f"functions over their lines (now, limit): {over}"
