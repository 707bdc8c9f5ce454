"""`python -m explorer whatif --split`: prefill and decode on separate GPUs (xPyD) against the same GPUs colocated,
under a TTFT and a TPOT SLO, from At scale's roofline; `--json` writes the record the At-scale page shows."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from explorer.core.errors import BadInput

if TYPE_CHECKING:
    from explorer.scale.floors import Scenario
    from explorer.scale.split_whatif import SplitResult

LAYOUT = re.compile(r"^(\d+)P(\d+)D$", re.IGNORECASE)


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    from explorer.scale.split_links import LINK_NAMES

    group = parser.add_argument_group("split the phases (--split)")
    group.add_argument("--split", action="store_true", help="the what-if of prefill and decode on separate GPUs")
    group.add_argument("--output-tokens", type=int, default=256, help="tokens each request generates (default 256)")
    group.add_argument("--ttft-slo-ms", type=float, default=1000.0, help="TTFT SLO in ms (default 1000)")
    group.add_argument("--tpot-slo-ms", type=float, default=50.0, help="TPOT SLO in ms (default 50)")
    group.add_argument("--layout", default="1P1D", help="xPyD: x prefill and y decode instances of --gpus GPUs each")
    group.add_argument("--colocated", type=int, default=None, help="colocated instances (default x + y: same GPUs)")
    group.add_argument("--link", default="NVLink", choices=LINK_NAMES, help="the link the KV cache crosses")
    group.add_argument("--transfer", default="streamed", choices=("streamed", "whole"), help="layer by layer or whole")
    group.add_argument("--chunk", type=int, default=512, help="chunked prefill's chunk in tokens (0: none)")
    group.add_argument("--rate", type=float, default=None, help="requests/s for the TTFT/TPOT distributions")


def parse_layout(text: str) -> tuple[int, int]:
    found = LAYOUT.match(text.strip())
    if not found or int(found[1]) < 1 or int(found[2]) < 1:
        raise BadInput(f"--layout must read xPyD with x, y >= 1 (e.g. 1P1D, 2P1D), not '{text}'.")
    return int(found[1]), int(found[2])


def precheck_split(args: argparse.Namespace) -> None:
    parse_layout(args.layout)
    for flag, value in (("--ttft-slo-ms", args.ttft_slo_ms), ("--tpot-slo-ms", args.tpot_slo_ms)):
        if not value > 0:
            raise BadInput(f"{flag} must be above 0, not {value}.")
    if args.output_tokens < 2:
        raise BadInput(f"--output-tokens must be at least 2 (TPOT needs a second token), not {args.output_tokens}.")
    if args.rate is not None and not args.rate > 0:
        raise BadInput(f"--rate must be above 0, not {args.rate}.")


def run_split(args: argparse.Namespace, scenario: Scenario) -> None:
    from explorer.scale.split_explain import split_formula_lines
    from explorer.scale.split_whatif import SplitInputs, split_what_if

    x, y = parse_layout(args.layout)
    result = split_what_if(
        SplitInputs(
            scenario,
            args.output_tokens,
            args.ttft_slo_ms / 1e3,
            args.tpot_slo_ms / 1e3,
            x,
            y,
            args.colocated,
            args.link,
            args.transfer == "streamed",
            args.chunk,
            args.rate,
        )
    )
    emit(args, format_split(result), lambda: split_formula_lines(result), result.to_json)


def emit(args: argparse.Namespace, table: str, formulas: Callable[[], list[str]], as_json: Callable[[], str]) -> None:
    """What both what-ifs print: the table, the formulas with `--explain`, and the JSON written with `--json`."""
    print(table)
    if args.explain:
        print("\nformulas:")
        print("\n".join(formulas()))
    if args.json:
        args.json.write_text(as_json(), encoding="utf-8")
        print(f"wrote {args.json}")


def format_split(result: SplitResult) -> str:
    """The sentence, then one line per layout and the transfer, each with its source."""
    s, i = result.inputs.scenario, result.inputs
    lines = [
        f"split what-if: {s.arch.display_name} on {s.gpu.name}, {s.gpus} GPU(s) an instance, prompt "
        f"{s.prompt_tokens:,} + output {i.output_tokens:,} tokens, SLOs TTFT {i.ttft_slo_s * 1e3:g} ms, TPOT "
        f"{i.tpot_slo_s * 1e3:g} ms, link {result.link.name} [{result.steps.source}]",
        result.sentence,
        f"{'layout':<28} {'GPUs':>5} {'goodput/GPU':>12} {'capacity/GPU':>13}  held back by",
    ]
    for c in result.curves:
        lines.append(
            f"{c.layout.label:<28} {c.gpus:>5} {c.goodput_per_gpu:>12.4g} {c.capacity_per_gpu:>13.4g}  {c.limit}"
        )
    lines += [
        f"KV per request {result.kv_bytes_per_request:,} bytes; over {result.link.name}: whole "
        f"{result.transfer_whole_s * 1e3:,.4g} ms, streamed exposed {result.exposed_streamed_s * 1e3:,.4g} ms "
        f"(modelled; link spec: {result.link.source})",
        f"decode batch under the TPOT SLO: {result.tpot_batch:,} (memory holds {result.memory_batch:,}) [modelled]",
        "goodput: requests/s per GPU with >= 90 % of requests meeting both SLOs (DistServe), modelled",
    ]
    if result.fewer_requests:
        lines.append(f"simulated: {result.fewer_requests}")
    return "\n".join(lines)
