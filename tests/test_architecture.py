"""The layout holds: no import circle among explorer's modules (imports inside functions counted), only the CLI
imports the CLI, and every module and function stays small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "explorer"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 6


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path) -> set[str]:
    """Every explorer module this file imports, wherever the import stands (module top, function, TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {name for name in found if name in MODULES}


def import_graph() -> dict[str, set[str]]:
    return {name: imported_modules(path) - {name} for name, path in MODULES.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A depth-first search that returns the first circle it meets, as the list of modules around it."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            circle = visit(target)
            if circle:
                return circle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        circle = visit(start)
        if circle:
            return circle
    return None


def test_find_circle_finds_a_circle_through_a_function_level_import() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_among_explorer_modules() -> None:
    assert find_circle(import_graph()) is None


def test_only_the_cli_imports_the_cli() -> None:
    def is_cli(name: str) -> bool:
        return name == "explorer.cli" or name.startswith("explorer.cli.")

    allowed = {"explorer.__main__"}  # `python -m explorer` is the CLI's entry point
    importers = {
        name for name, targets in import_graph().items() if not is_cli(name) and any(is_cli(t) for t in targets)
    }
    assert importers - allowed == set()


def test_modules_and_functions_stay_small() -> None:
    too_long: list[str] = []
    for name, path in MODULES.items():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                args = node.args
                params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
                if lines > MAX_FUNCTION_LINES or len(params) > MAX_PARAMETERS:
                    too_long.append(f"{name}.{node.name}: {lines} lines, {len(params)} parameters")
    assert too_long == []


def test_every_package_says_what_it_holds() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(ROOT)} has no docstring"
