"""`python -m explorer run`: one instrumented request, its passes printed, and the files asked for written."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.cli.common import (
    StderrProgress,
    add_command,
    add_decode_path_arg,
    add_model_args,
    check_output_paths,
    load,
    write_json,
)
from explorer.core.errors import BadInput
from explorer.core.paths import context_without_loading, layer_count_without_loading, read_small_file
from explorer.core.request import Request, check_fits_context, validate
from explorer.core.trace import Sampling

if TYPE_CHECKING:  # registering the command must stay cheap: every `python -m explorer ...` builds the parser
    from explorer.core.attention_maps import AttentionMaps
    from explorer.core.loaded_model import LoadedModel
    from explorer.core.trace import Trace

# Device figures are kept by their owner (a `device.FiguresStore`: one per command, one per app server) and `measure`
# takes them once, before the first repeat; a `run` has a store of its own, so it always measures them: the flag
# matters only where figures are reused (the app).
REMEASURE_HELP = (
    "take the device figures afresh; they are taken once per process, before the first repeat, so a `run` (a new "
    "process) always measures them and this changes nothing here (the app reuses them across runs)"
)
MAX_PROMPT_FILE_BYTES = 8 << 20  # ~2M tokens of text: past any model's context, which is checked once tokenized
MAX_TITLE_CHARS = 2_000  # a recording's one-line fields (explorer.recording.checks.MAX_LINE_CHARS)
RECORD_HELP = (
    "write a recording (NAME.pdx, under 5 MB): the trace and the attention maps (captured: every layer that fits), "
    "for the app to open with no model"
)


def register(commands: argparse._SubParsersAction) -> None:
    run = add_command(commands, "run", "run one instrumented request and print its passes")
    add_model_args(run)
    prompt = run.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="the text to send (through the chat template unless told not to)")
    prompt.add_argument("--prompt-file", type=Path, help="read the text to send from this UTF-8 file")
    run.add_argument("--max-new-tokens", type=int, default=32, help="stop after this many tokens, or at end-of-text")
    run.add_argument("--no-chat-template", action="store_true", help="tokenize the raw prompt")
    run.add_argument("--temperature", type=float, default=0.0, help="0 is greedy; above 0 samples")
    run.add_argument("--top-k", type=int, default=None, help="sample from the k most likely tokens only (default: all)")
    run.add_argument("--seed", type=int, default=None, help="seed of a sampled run (default: a random one, recorded)")
    run.add_argument("--repeats", type=int, default=1, help="run the same request N times: medians and spreads")
    add_decode_path_arg(run)
    run.add_argument("--remeasure-device", action="store_true", help=REMEASURE_HELP)
    run.add_argument("--attention", action="store_true", help="also capture attention maps (untimed replay)")
    run.add_argument("--attention-layers", default=None, help="comma-separated layer indices (default: all)")
    run.add_argument("--attention-npz", type=Path, default=None, help="capture attention and save it (.npz)")
    run.add_argument("--json", type=Path, default=None, help="write the trace as JSON")
    run.add_argument("--csv", type=Path, default=None, help="write one row per pass as CSV")
    run.add_argument("--perfetto", type=Path, default=None, help="write a Chrome trace-event JSON (ui.perfetto.dev)")
    run.add_argument("--record", type=Path, default=None, help=RECORD_HELP)
    run.add_argument("--record-title", default=None, help="what the recording shows (default: computed from the run)")
    run.set_defaults(func=cmd_run, precheck=precheck_run)


def parse_layers(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise BadInput(f"--attention-layers takes comma-separated integers, not '{text}'.") from exc


def check_layers(layers: list[int], layer_count: int) -> None:
    bad = [layer for layer in layers if not 0 <= layer < layer_count]
    if bad:
        raise BadInput(f"--attention-layers {bad[0]} is out of range: the model has layers 0 to {layer_count - 1}.")


def request_from_args(args: argparse.Namespace) -> Request:
    """The request exactly as `cmd_run` runs it, so the check before loading is the check of what runs."""
    return Request(
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        use_chat_template=not args.no_chat_template,
        sampling=Sampling(temperature=args.temperature, top_k=args.top_k, seed=args.seed),
        repeats=args.repeats,
        decode_path=args.decode_path,
    )


def precheck_run(args: argparse.Namespace) -> None:
    """What can be refused before torch is even imported: the request (the pages' own check), what the model's
    config.json allows (its context, its layers), the output paths."""
    if args.prompt_file is not None:
        args.prompt = read_prompt_file(args.prompt_file)
    validate(request_from_args(args))
    check_fits_context(args.max_new_tokens, context_without_loading(args.model))
    layers = parse_layers(args.attention_layers)
    known = layer_count_without_loading(args.model)
    if layers is not None and known is not None:
        check_layers(layers, known)
    check_output_paths(args.json, args.csv, args.perfetto, args.attention_npz, args.record)
    if args.record is not None and args.record.suffix != ".pdx":  # explorer.recording.pdx.SUFFIX, without numpy
        raise BadInput(f"--record writes a .pdx file: name it e.g. {args.record.with_suffix('.pdx').name}.")
    if args.record_title is not None and len(args.record_title) > MAX_TITLE_CHARS:
        raise BadInput(
            f"--record-title is {len(args.record_title):,} characters; a recording's title is at most 2,000."
        )


def read_prompt_file(path: Path) -> str:
    """A regular file of at most MAX_PROMPT_FILE_BYTES: `/dev/zero` or a FIFO is one line, never a hang or 7 GB."""
    raw = read_small_file(path, MAX_PROMPT_FILE_BYTES, "the prompt")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"Cannot read the prompt from {path} (not UTF-8 text).") from exc


def cmd_run(args: argparse.Namespace) -> None:
    from explorer.core.measure import measure
    from explorer.core.report import format_trace

    request = request_from_args(args)  # checked by precheck_run; measure checks it again with the tokenizer
    layers = parse_layers(args.attention_layers)
    lm = load(args)
    if layers is not None:
        check_layers(layers, lm.info.layers)  # a hub model's layers are known only now, still before the run
    trace = measure(lm, request, remeasure=args.remeasure_device, progress=StderrProgress())
    print(format_trace(trace))
    write_json(args.json, trace.to_json())  # written before the capture, so a capture over its cap loses nothing
    if args.csv:
        args.csv.write_text(trace.passes_csv(), encoding="utf-8")
        print(f"wrote {args.csv}")
    if args.perfetto:
        from explorer.recording.perfetto import write_perfetto

        write_perfetto(trace, args.perfetto)
        print(f"wrote {args.perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    maps = (
        capture(lm, trace, layers, args.attention_npz) if args.attention or args.attention_npz or args.record else None
    )
    if args.record:
        record(args, trace, maps)


def record(args: argparse.Namespace, trace: Trace, maps: AttentionMaps | None) -> None:
    """The run as a recording, read back as any upload would be before it is said to be written."""
    from explorer.recording.checks import read_recording
    from explorer.recording.pdx import RecordingMeta, recording_bytes

    command = "python -m explorer " + shlex.join(getattr(args, "argv", ["run"]))
    meta = RecordingMeta.of(trace, args.record.stem, command, args.record_title)
    raw = recording_bytes(meta, trace, maps)
    written = read_recording(raw).meta
    args.record.write_bytes(raw)
    count = len(written.attention_layers)
    layers = f"attention maps of {count} layer{'' if count == 1 else 's'}" if count else "no maps"
    note = f": {written.attention_note}" if written.attention_note else ""
    print(f"wrote {args.record} ({len(raw) / 1e6:.2f} MB, {layers}){note}")


def capture(lm: LoadedModel, trace: Trace, layers: list[int] | None, npz: Path | None) -> AttentionMaps:
    """The attention maps of the finished run (an untimed replay), said in one line and saved if asked."""
    from explorer.core.attention import capture_attention, save_attention
    from explorer.core.units import mebibytes

    maps = capture_attention(lm, trace, layers)
    same = {True: "yes", False: "NO", None: "n/a (sampled run)"}[maps.same_tokens_as(trace)]
    print(
        f"attention: captured {len(maps.layers)} layers x {maps.heads} heads, prefill {trace.prompt_len}x"
        f"{trace.prompt_len}, {len(trace.decodes)} decode rows, {mebibytes(maps.nbytes, 1)} (float16); "
        f"replay chose the same tokens: {same}"
    )
    if npz:
        save_attention(maps, npz)
        print(f"wrote {npz}")
    return maps
