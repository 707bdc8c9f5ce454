"""Docs that cannot drift: every layout row (docs/layout.md) is its module's opening sentence, and every dotted
reference (`explorer.core.roofline.pass_cost`) or file path (`explorer/core/roofline.py`) in the README, docs/,
docstrings and comments names something that exists."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "recordings").rglob("README.md"))]
LAYOUT_DOCS = (ROOT / "README.md", ROOT / "docs" / "layout.md")  # the README's short folder table, every module's row
SOURCES = sorted(
    p for folder in ("explorer", "pages", "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py")
) + [ROOT / "app.py"]
DOTTED = re.compile(r"(?<![\w./-])explorer(?:\.[A-Za-z_]\w*)+(?![\w*/])")  # `DEFAULT_*` is a family, not a name
PATH = re.compile(r"(?<![\w./-])((?:explorer|pages|tests|benchmarks|recordings|deploy)/[\w./-]*\w)")
LAYOUT_ROW = re.compile(r"^\| `((?:explorer|pages)/[\w/]+\.py)` \| (.+) \|$", re.M)


def referring_lines(path: Path) -> list[str]:
    """Lines of prose that may name things: every line of a doc; a source file's docstrings and comments (its code
    and string literals are checked by running it)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return text.splitlines()
    docs = [
        ast.get_docstring(node, clean=False) or ""
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return [line for doc in docs for line in doc.splitlines()] + comments


def resolves(dotted: str) -> bool:
    """A module, or an attribute reached from the longest importable module prefix."""
    parts = dotted.split(".")
    if parts[-1] == "__main__":  # importing it would run the command line
        return (ROOT.joinpath(*parts[:-1]) / "__main__.py").exists()
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def references() -> dict[str, set[str]]:
    """Each dotted name, and where it is written."""
    found: dict[str, set[str]] = {}
    for path in DOCS + SOURCES:
        for line in referring_lines(path):
            for match in DOTTED.findall(line):
                found.setdefault(match.rstrip("."), set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_dotted_reference_in_docs_and_docstrings_resolves() -> None:
    unresolved = {name: sorted(where) for name, where in references().items() if not resolves(name)}
    assert unresolved == {}


def test_every_file_path_in_docs_and_docstrings_exists() -> None:
    missing: dict[str, set[str]] = {}
    for path in DOCS + SOURCES:
        for line in referring_lines(path):
            for named in PATH.findall(line):
                named = named.rstrip(".")
                if "*" in named or "NAME" in named or not Path(named).suffix and "/" not in named.rstrip("/"):
                    continue
                if not (ROOT / named).exists():
                    missing.setdefault(named, set()).add(path.relative_to(ROOT).as_posix())
    assert missing == {}


SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)\.(?=\s|$)")


def first_sentence(module: Path) -> str:
    """The module's docstring up to its first full stop (not the one of "e.g." or "i.e."), on one line."""
    doc = " ".join((ast.get_docstring(ast.parse(module.read_text(encoding="utf-8"))) or "").split())
    end = SENTENCE_END.search(doc)
    return doc if end is None else doc[: end.start()]


LAYOUT_ROWS = [row for doc in LAYOUT_DOCS for row in LAYOUT_ROW.findall(doc.read_text(encoding="utf-8"))]


def test_docs_hold_the_layout_rows() -> None:
    """The rows moved with the Layout table to docs/layout.md: a parametrization over nothing would pass unseen."""
    assert len(LAYOUT_ROWS) > 100 and len(LAYOUT_DOCS) == 2 and all(doc.is_file() for doc in LAYOUT_DOCS)


@pytest.mark.parametrize(("module", "row"), LAYOUT_ROWS, ids=lambda v: v[:48])
def test_each_layout_row_is_its_modules_opening_sentence(module: str, row: str) -> None:
    """The Layout table says of each module what the module says of itself, so neither can drift alone."""
    doc = first_sentence(ROOT / module)
    assert doc, f"{module} opens with no docstring"
    assert row == doc, f"{module}: the layout table says {row!r}, the module says {doc!r}"
