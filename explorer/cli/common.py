"""What every command shares: the one-line parser and its help format, the model options, loading, progress lines,
and the one way a lab's command runs."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED

if TYPE_CHECKING:  # torch and transformers load only once the input has been checked: bad input fails in a blink
    from explorer.core.device_profile import DeviceProfile
    from explorer.core.lab_progress import LabProgress
    from explorer.core.loaded_model import LoadedModel


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep the line breaks they were written with; every option with a value shows its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "%(default)" in text or not action.option_strings or not shows_a_default(action.default):
            return text
        return f"{text} (default: %(default)s)"


def shows_a_default(default: object) -> bool:
    """An option left unset (None, ''), a flag left off (False) or --help has nothing to show: its help says it."""
    return default is not None and default is not False and default not in ("", argparse.SUPPRESS)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; a user needs only the error, on one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)  # subparsers too: add_subparsers passes no formatter
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def add_command(
    commands: argparse._SubParsersAction, name: str, summary: str, **kwargs: Any
) -> argparse.ArgumentParser:
    """A subcommand whose `--help` opens with the same sentence the command list shows (unless given its own)."""
    kwargs.setdefault("description", summary)
    return commands.add_parser(name, help=summary, **kwargs)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=EMBEDDED,
        help="'embedded' (SmolLM2-135M, shipped), a hub id, a folder, or shape:NAME (a shipped At-scale config, e.g. "
        "shape:llama-3.1-8b, built with random weights: real timings, tokens not meaningful)",
    )
    parser.add_argument("--device", default="auto", help="auto (cuda if there is a GPU) | cpu | cuda")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16, the last on cuda only")


DECODE_PATH_HELP = (
    "eager: a growing DynamicCache; static: a StaticCache reserving every position; graph: the static cache with the "
    "decode step replayed as a captured CUDA graph (CUDA only) (default: graph on CUDA where the model allows, else "
    "eager)"
)


def add_decode_path_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--decode-path", choices=("eager", "static", "graph"), default=None, help=DECODE_PATH_HELP)


def add_json_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", type=Path, default=None, help=f"write {what} as JSON to this file")


def check_output_paths(*paths: Path | None) -> None:
    """Before any work: each output path is a file name in a folder that exists and may be written, so a run's
    minutes are never lost to a typo at the end."""
    for path in paths:
        if path is None:
            continue
        if path.is_dir():
            raise BadInput(f"Cannot write {path}: it is a folder; give a file name, e.g. {path / 'out.json'}.")
        if not path.parent.is_dir():
            raise BadInput(f"Cannot write {path}: its folder {path.parent} does not exist.")
        existed = path.exists()
        if existed and not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the open below until read
            raise BadInput(f"Cannot write {path}: it is not a regular file (a FIFO, a device or a socket).")
        try:  # the one sure test of "may I write here", as root too; non-blocking, so a FIFO swapped in cannot hang it
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644))
        except OSError as exc:
            raise BadInput(f"Cannot write {path} ({exc.strerror}): choose another path.") from exc
        if not existed:
            path.unlink(missing_ok=True)


def write_json(path: Path | None, text: str) -> None:
    """Write a result's JSON where `--json` asked, and say so."""
    if path:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


class StderrProgress:
    """Progress as plain lines on stderr, terminal or not: a first load takes a while and piped output must not look
    hung. One instance per command, as it remembers what it printed:
    - the model load's fractions are places on the app's bar, not shares of the time (its steps' lengths are
      unknown), so its lines read `[load] …`; `load_model` reports 1.0 last, and the work's percents follow;
    - a line the same as the one before is dropped (the scheduling lab reports every 0.1 s while the engine works);
    - a trailing '; note' already printed (a lab's estimate, which it repeats on every report) is printed once.
    """

    def __init__(self, loading: bool = False) -> None:
        self.loading = loading  # True: the first reports are the model load's, until it reports 1.0
        self.last_line = ""
        self.notes_shown: set[str] = set()

    def __call__(self, fraction: float, text: str) -> None:
        head, separator, note = text.rpartition("; ")
        if separator and note in self.notes_shown:
            text = head
        elif separator:
            self.notes_shown.add(note)
        line = f"[{'load' if self.loading else f'{fraction:4.0%}'}] {text}"
        if self.loading and fraction >= 1.0:
            self.loading = False
        if line != self.last_line:
            print(line, file=sys.stderr, flush=True)
            self.last_line = line


def load(args: argparse.Namespace) -> LoadedModel:
    from explorer.models.loading import load_model

    return load_model(args.model, args.device, args.dtype, on_progress=StderrProgress(loading=True))


class LabResult(Protocol):
    def to_json(self) -> str: ...


Result = TypeVar("Result", bound=LabResult)


def run_lab_command(
    args: argparse.Namespace,
    run: Callable[[LoadedModel, DeviceProfile, LabProgress], Result],
    report: Callable[[Result], str],
) -> Result:
    """A lab's command, the same for every lab: load the model, take the device figures and warm up (as every run
    does), run the lab with its progress on stderr, print its plain-text report, write its JSON where `--json` asked."""
    from explorer.core.lab_progress import LabProgress
    from explorer.core.measure import prepare_device

    lm = load(args)
    progress = StderrProgress()
    device = prepare_device(lm, progress=progress)  # the figures, then the one warm-up, like every run
    result = run(lm, device, LabProgress(progress))
    print(report(result))
    write_json(args.json, result.to_json())
    return result


def quiet_libraries() -> None:
    """transformers' own progress bars and hub warnings would bury the one-line error a user needs."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import logging

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
