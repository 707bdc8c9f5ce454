"""Where each explorer module is tested: every module is reached by some test file (imported, opened as a page, or
run as a CLI command), or is in the short allow-list below with the test that covers it. `python -m
tests.test_test_map` prints the whole map, module by module."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

from explorer.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "explorer"
PAGE = re.compile(r"[\"'](pages/\w+\.py)[\"']")  # a page a test opens: open_page("pages/NAME.py"), switch_page(...)
DRIVES_THE_CLI = re.compile(r"run_cli\(|refused_in_a_child\(|main\(\[|\"-m\", \"explorer\"")

# Modules no test file reaches by name, each with the test that covers it anyway and how.
# Modules that only other modules use are left here when a test drives them through their user; anything with logic
# of its own that a test could call directly belongs in a test instead.
COVERED_WITHOUT_A_NAME: dict[str, str] = {
    "explorer.__main__": "tests/test_cli.py (its subprocesses run `python -m explorer`, which is this module)",
    "explorer.core.cpu_facts": "tests/test_cpu_figures.py (the CPU's figures and core share read through it)",
    "explorer.core.expert_routes": "tests/test_architectures_matrix.py (test_experts_touched_are_the_routers_top_k)",
    "explorer.recording.bounds": "tests/test_recordings.py (a trace bomb, lists past their declared counts)",
    "explorer.labs.schedule.engine": "tests/test_schedule.py (run_schedule serves every workload through it)",
    "explorer.scale.figure_sources": "tests/test_scale.py (the what-if JSON says each figure's unit and source)",
    "explorer.teach.questions": "tests/test_quiz.py (every question of `quiz.QUESTIONS`, graded and explained)",
    "explorer.ui.chart_first": "tests/test_app.py (test_presenter_mode_sizes_every_chart_from_one_theme)",
    "explorer.ui.slo_state": "tests/test_app.py (test_repeated_figures_show_their_min_max_and_the_slo_table_uses_them)",
    "explorer.ui.admission": "tests/test_hosted.py (every refusal in one line before a job is sent)",
    "explorer.ui.warm_start": "tests/test_warm.py (the sidebar's warming line, read from the owner's /health)",
    "explorer.owner.room": "tests/test_room.py (a round through a real owner over HTTP)",
    "explorer.ui.memory": "tests/test_web_memory.py (in a fresh interpreter: the arena cap is process-wide)",
    "explorer.cli.whatif_split": "tests/test_split_page.py (the page's printed `whatif --split --json` command, run)",
    "explorer.ui.room_engine_view": "tests/test_room_engine_app.py (the presenter's round on an engine, in AppTest)",
    "explorer.ui.room_long_view": "tests/test_room_long.py (the presenter's long round and its chart, in AppTest)",
}


def modules() -> list[str]:
    """Every module of the package, dotted (a package is its `__init__`)."""
    found = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def imported_by(source: str, known: set[str]) -> Iterator[str]:
    """The known modules that `source` imports, at its top or inside a function: `import a.b`, `from a.b import c`
    (`a.b`, and `a.b.c` too where `c` is a module), each with its parent packages (which Python imports first), and
    the module that defines a name `a.b` only re-exports."""
    for node in statements(ast.parse(source).body):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            names += [defined_in(node.module, alias.name, known) for alias in node.names]
        for name in names:
            parts = name.split(".")
            yield from (m for m in (".".join(parts[:n]) for n in range(1, len(parts) + 1)) if m in known)


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones too (in functions, classes, `with`, `if`, `try`), skipping expressions: an import
    is a statement, and walking every expression of 170 files took seconds."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from statements(getattr(node, field, []))


def defined_in(module: str, name: str, known: set[str], depth: int = 3) -> str:
    """The module where `module`'s `name` comes from: `module` itself, or, where `module` imports the name from
    another of the package's modules (a re-export), that one's."""
    if depth == 0 or module not in known:
        return module
    origin = imported_names(module).get(name)
    return module if origin is None or origin not in known else defined_in(origin, name, known, depth - 1)


@functools.cache
def imported_names(module: str) -> dict[str, str]:
    """The names a module file imports at its top from an absolute module, and from where (parsed once)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if not path.is_file():
        return {}
    tops = ast.parse(path.read_text(encoding="utf-8")).body
    return {a.name: n.module for n in tops if isinstance(n, ast.ImportFrom) and n.module for a in n.names}


def reached_by(path: Path, known: set[str]) -> Iterator[tuple[str, str]]:
    """(module, how) for each known module a test file reaches: its imports, the imports of each page it opens, and
    the module of each CLI command it runs."""
    source = path.read_text(encoding="utf-8")
    yield from ((name, "") for name in imported_by(source, known))
    for page in sorted(set(PAGE.findall(source))):
        yield from ((name, f"via {page}") for name in page_imports(page, frozenset(known)))
    if DRIVES_THE_CLI.search(source):
        for command, (module, _) in COMMANDS.items():
            if f'"{command}"' in source and module in known:
                yield module, f"via command {command}"


@functools.cache
def page_imports(page: str, known: frozenset[str]) -> set[str]:
    """The known modules a page file imports (read once; none for a page that is not there)."""
    path = ROOT / page
    return set(imported_by(path.read_text(encoding="utf-8"), set(known))) if path.is_file() else set()


def module_test_files() -> dict[str, list[str]]:
    """Each module and the test files (any file under tests/, support modules too) that reach it, each with how
    where that is not a direct import (a direct import wins over a page or a command of the same file)."""
    known = set(modules())
    found: dict[str, dict[str, str]] = {name: {} for name in known}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():  # this file names modules, pages and commands only as examples
            continue
        name_of_file = str(path.relative_to(ROOT))
        for module, how in sorted(reached_by(path, known)):  # "" (an import) sorts first
            found[module].setdefault(name_of_file, how)
    return {
        name: [f"{file} ({how})" if how else file for file, how in sorted(files.items())]
        for name, files in sorted(found.items())
    }


def test_every_module_is_reached_by_a_test_or_says_which_test_covers_it() -> None:
    found = module_test_files()
    untested = [name for name, files in found.items() if not files and name not in COVERED_WITHOUT_A_NAME]
    assert untested == [], f"no test reaches {untested}: import it in a test, or add it to COVERED_WITHOUT_A_NAME"
    stale = [name for name in COVERED_WITHOUT_A_NAME if found.get(name, ["gone"])]
    assert stale == [], f"allow-listed but reached by a test now, or gone: {stale}"
    for covered_by in COVERED_WITHOUT_A_NAME.values():
        assert (ROOT / covered_by.split()[0]).is_file(), covered_by


def test_the_map_reads_imports_of_every_form_pages_and_commands(tmp_path: Path) -> None:
    known = {"explorer", "explorer.charts", "explorer.charts.kv", "explorer.core", "explorer.core.engine"}
    known |= {"explorer.labs", "explorer.labs.batch", "explorer.ui", "explorer.ui.sidebar", "explorer.cli.soak"}
    source = (
        "import explorer.core.engine\nfrom explorer.charts import kv\nfrom explorer.ui.sidebar import RUN_KEY\n"
        "def f():\n    from explorer.labs import batch as b\nfrom tests.x import explorer\n"
    )
    assert sorted(set(imported_by(source, known))) == sorted(known - {"explorer.cli.soak"})
    test = tmp_path / "test_x.py"
    test.write_text('open_page("pages/by_hand.py")\nmain(["soak", "--runs", "2"])\n', encoding="utf-8")
    reached = set(reached_by(test, known | {"explorer.ui.by_hand_view"}))
    assert ("explorer.ui.by_hand_view", "via pages/by_hand.py") in reached
    assert ("explorer.cli.soak", "via command soak") in reached


if __name__ == "__main__":
    for module, files in module_test_files().items():
        print(f"{module}: {', '.join(files) or COVERED_WITHOUT_A_NAME.get(module, 'NOT REACHED')}")
