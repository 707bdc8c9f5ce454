"""`python -m explorer run|bench`: the command line over the engine; errors are one line on stderr, no traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core.errors import BadInput, ExplorerError, one_line, out_of_memory_as_run_failed
from explorer.core.paths import EMBEDDED, layer_count_without_loading

if TYPE_CHECKING:  # torch and transformers load only once the input has been checked: bad input fails in a blink
    from explorer.core.loading import LoadedModel


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; a user needs only the error, on one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def stderr_progress(fraction: float, text: str) -> None:
    """Plain lines, terminal or not: a first load takes a while and piped output must not look hung."""
    print(f"[{fraction:4.0%}] {text}", file=sys.stderr, flush=True)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=EMBEDDED, help="'embedded' (default), a hub id or a local folder")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16 (cuda only)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="explorer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    run = commands.add_parser("run", help="run one instrumented request and print its passes")
    add_model_args(run)
    run.add_argument("--prompt", required=True)
    run.add_argument("--max-new-tokens", type=int, default=32)
    run.add_argument("--no-chat-template", action="store_true", help="tokenize the raw prompt")
    run.add_argument("--temperature", type=float, default=0.0, help="0 (default) is greedy")
    run.add_argument("--top-k", type=int, default=None)
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--repeats", type=int, default=1, help="run the same request N times: medians and spreads")
    run.add_argument(
        "--remeasure-device", action="store_true", help="take the device figures again (they are reused otherwise)"
    )
    run.add_argument("--attention", action="store_true", help="also capture attention maps (untimed replay)")
    run.add_argument("--attention-layers", default=None, help="comma-separated layer indices (default: all)")
    run.add_argument("--attention-npz", type=Path, default=None, help="capture attention and save it (.npz)")
    run.add_argument("--json", type=Path, default=None, help="write the trace as JSON")
    run.add_argument("--csv", type=Path, default=None, help="write one row per pass as CSV")
    run.add_argument("--perfetto", type=Path, default=None, help="write a Chrome trace-event JSON (ui.perfetto.dev)")

    bench = commands.add_parser("bench", help="the instrumented loop against HF generate(), A/B in one process")
    add_model_args(bench)
    bench.add_argument("--prompt-tokens", type=int, default=128)
    bench.add_argument("--new-tokens", type=int, default=64)
    bench.add_argument("--repeats", type=int, default=5)
    bench.add_argument("--json", type=Path, default=None)
    run.set_defaults(func=cmd_run, precheck=precheck_run)
    bench.set_defaults(func=cmd_bench, precheck=lambda args: check_output_paths(args.json))
    for name, (module, help_text) in EXTRA_COMMANDS.items():
        if name == command:
            importlib.import_module(module).register(commands)
        else:  # listed for --help; its module (and torch) loads only when it is the command being run
            commands.add_parser(name, help=help_text)
    return parser


# Subcommands that live beside the feature they drive: each module's `register(commands)` adds its parser and sets
# `func` (and optionally `precheck`).
EXTRA_COMMANDS: dict[str, tuple[str, str]] = {
    "nocache": (
        "explorer.labs.nocache",
        "the cached loop against a naive loop that re-runs the whole sequence each step",
    ),
    "batch": ("explorer.labs.batch", "decode B requests together: step time, tokens/s and ITL against batch size"),
    "remote": ("explorer.cli.remote", "TTFT, ITL and goodput of an OpenAI-compatible streaming server"),
    "soak": ("explorer.checks.soak", "RSS over many in-process runs"),
    "profile": ("explorer.cli.profile", "replay one pass of a run under torch.profiler: its time grouped by what ran"),
    "schedule": ("explorer.cli.schedule", "serve a workload with continuous batching and print every engine step"),
}


def parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise BadInput(f"--attention-layers takes comma-separated integers, not '{text}'.") from exc


def check_output_paths(*paths: Path | None) -> None:
    for path in paths:
        if path is not None and not path.parent.is_dir():
            raise BadInput(f"Cannot write {path}: its folder {path.parent} does not exist.")


def precheck_run(args: argparse.Namespace) -> None:
    """What can be refused before torch is even imported: the request's numbers, layers, output folders."""
    if not args.prompt or not args.prompt.strip():
        raise BadInput("The prompt is empty: type some text to run.")
    if args.max_new_tokens < 1:
        raise BadInput(f"--max-new-tokens must be at least 1, not {args.max_new_tokens}.")
    if args.repeats < 1:
        raise BadInput(f"--repeats must be at least 1, not {args.repeats}.")
    layers = parse_layers(args.attention_layers)
    known = layer_count_without_loading(args.model)
    if layers is not None and known is not None:
        check_layers(layers, known)
    check_output_paths(args.json, args.csv, args.perfetto, args.attention_npz)


def check_layers(layers: list[int], layer_count: int) -> None:
    bad = [layer for layer in layers if not 0 <= layer < layer_count]
    if bad:
        raise BadInput(f"--attention-layers {bad[0]} is out of range: the model has layers 0 to {layer_count - 1}.")


def load(args: argparse.Namespace) -> LoadedModel:
    from explorer.core.loading import load_model

    return load_model(args.model, args.device, args.dtype, on_progress=stderr_progress)


def cmd_run(args: argparse.Namespace) -> None:
    from explorer.core.attention import capture_attention, save_attention
    from explorer.core.engine import Request, validate
    from explorer.core.measure import measure
    from explorer.core.report import format_trace
    from explorer.core.trace import Sampling
    from explorer.core.units import mebibytes

    request = Request(
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        use_chat_template=not args.no_chat_template,
        sampling=Sampling(temperature=args.temperature, top_k=args.top_k, seed=args.seed),
        repeats=args.repeats,
    )
    validate(request)
    layers = parse_layers(args.attention_layers)
    lm = load(args)
    if layers is not None:
        check_layers(layers, lm.info.layers)  # a hub model's layers are known only now, still before the run
    trace = measure(lm, request, remeasure=args.remeasure_device)
    print(format_trace(trace))
    if args.json:  # written before the capture, so a capture over its cap loses nothing
        args.json.write_text(trace.to_json(), encoding="utf-8")
        print(f"wrote {args.json}")
    if args.csv:
        args.csv.write_text(trace.passes_csv(), encoding="utf-8")
        print(f"wrote {args.csv}")
    if args.perfetto:
        from explorer.core.perfetto import write_perfetto

        write_perfetto(trace, args.perfetto)
        print(f"wrote {args.perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    if args.attention or args.attention_npz:
        maps = capture_attention(lm, trace, layers)
        same = {True: "yes", False: "NO", None: "n/a (sampled run)"}[maps.same_tokens_as(trace)]
        print(
            f"attention: captured {len(maps.layers)} layers x {maps.heads} heads, prefill {trace.prompt_len}x"
            f"{trace.prompt_len}, {len(trace.decodes)} decode rows, {mebibytes(maps.nbytes, 1)} (float16); "
            f"replay chose the same tokens: {same}"
        )
        if args.attention_npz:
            save_attention(maps, args.attention_npz)
            print(f"wrote {args.attention_npz}")


def cmd_bench(args: argparse.Namespace) -> None:
    from explorer.checks.bench import BenchConfig, format_bench, run_bench

    config = BenchConfig(prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens, repeats=args.repeats)
    config.validate()
    result = run_bench(load(args), config, on_progress=stderr_progress)
    print(format_bench(result))
    if args.json:
        args.json.write_text(result.to_json(), encoding="utf-8")
        print(f"wrote {args.json}")


def quiet_libraries() -> None:
    """transformers' own progress bars and hub warnings would bury the one-line error a user needs."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import logging

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        if getattr(args, "precheck", None):
            args.precheck(args)
        if getattr(args, "loads_models", True):  # a client of a remote server never imports torch
            quiet_libraries()
        with out_of_memory_as_run_failed(f"running `explorer {args.command}`"):  # one line, errors.OOM_ADVICE
            args.func(args)
    except ExplorerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("EXPLORER_DEBUG"):  # a developer wants the traceback
            raise
        print(f"error: unexpected failure: {one_line(exc)} (set EXPLORER_DEBUG=1 for details)", file=sys.stderr)
        return 1
    return 0
