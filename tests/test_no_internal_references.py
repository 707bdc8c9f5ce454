"""No page, caption, docstring or README names the project's internal source notes ("seed 1", "the essay's widget"):
a visitor never sees them, so every source is a public one with a link, or the point is said in plain words. The only
seeds left are the sampling kind: a random-number seed that makes a sampled run replayable."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = re.compile(r"\bseeds?\b", re.IGNORECASE)
INTERNAL = re.compile(r"\bseeds?\b|\bthe essay\b", re.IGNORECASE)
# A string about the sampler's random seed: that seed is a user-facing sampling setting, not an internal source.
RNG = re.compile(r"random|sampl|replay|rng|manual_seed|--seed|\bseeded\b", re.IGNORECASE)
TEXTS = (
    "README.md",
    *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")),
    "recordings/README.md",
    "recordings/labs/README.md",
)


def python_files() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "explorer").rglob("*.py"))]


def strings_of(path: Path) -> list[tuple[int, str]]:
    """Every string literal in a module (docstrings, captions, f-string parts), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def is_sampling_seed(text: str) -> bool:
    """'Seed' as a widget's label or a field's name, or a sentence about the random seed."""
    return text.strip().lower() in {"seed", "seeds"} or bool(RNG.search(text))


def test_no_string_in_the_app_or_the_package_names_an_internal_source() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text.strip()[:90]!r}"
        for path in python_files()
        for line, text in strings_of(path)
        if INTERNAL.search(text) and not (SEED.search(text) and is_sampling_seed(text))
    ]
    assert found == []


def test_no_readme_names_an_internal_source() -> None:
    found = [
        f"{name}:{number}: {line.strip()[:90]}"
        for name in TEXTS
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), start=1)
        if INTERNAL.search(line) and not is_sampling_seed(line)
    ]
    assert found == []


def test_the_check_catches_what_it_is_for() -> None:
    assert INTERNAL.search("seed 1's worked example") and INTERNAL.search("Seed 4's rule")
    assert INTERNAL.search("the essay's widget") and not is_sampling_seed("seed 1 · interview Q&A names it")
    assert is_sampling_seed("A sampled run gets a seed recorded, so it can be replayed") and is_sampling_seed("Seed")
