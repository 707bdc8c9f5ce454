"""The same request decoded on every path this device offers (eager, static cache, CUDA graph), for the Cost page:
the overhead each path leaves above the weight-read floor, which is why servers capture graphs."""

from __future__ import annotations

from explorer.core.engine import OnPass, Request, check_request, generate, warm_up_shapes
from explorer.core.errors import BadInput
from explorer.core.graph_decode import graph_refusal
from explorer.core.lab_progress import QUIET, LabProgress
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DecodePath, DeviceProfile, Trace


def paths_here(lm: LoadedModel) -> tuple[DecodePath, ...]:
    """Eager and static run anywhere; the graph path where the model can be captured on CUDA."""
    graphs: tuple[DecodePath, ...] = ("graph",) if graph_refusal(lm.info, lm.torch_device) is None else ()
    return ("eager", "static", *graphs)


def compare_decode_paths(
    lm: LoadedModel, device: DeviceProfile, trace: Trace, progress: LabProgress = QUIET
) -> tuple[Trace, ...]:
    """`trace`'s prompt ids and new tokens (end-of-text ignored, so every path makes as many) with its sampling, once on
    each of `paths_here`, each warmed up at its own shapes first (a graph is captured there, and said); the caller
    has taken the device figures (`core.measure.prepare_device`). Between passes the device may go to anyone
    waiting, the request's clock paused."""
    if trace.model != lm.info:  # its tokens through another model would compare a different computation
        raise BadInput("This run came from another model, dtype or device: run it again on this one, then compare.")
    paths = paths_here(lm)
    traces = []
    for i, path in enumerate(paths):
        request = Request(
            trace.prompt_text,
            max_new_tokens=trace.new_tokens,
            use_chat_template=trace.chat_template_used,
            sampling=trace.sampling,
            stop_at_eos=False,
            decode_path=path,
        )
        checked = check_request(lm, request, trace.prompt_token_ids)
        part = progress.span(i / len(paths), (i + 1) / len(paths))
        part(0.0, f"the {path} decode path: warming up at this request's shapes…")
        warm_up_shapes(lm, checked, progress=part)
        part(0.5, f"the {path} decode path: {trace.new_tokens} timed passes…")
        traces.append(generate(lm, checked, device, OnPass(make_way=progress.make_way), warmed_up=True))
    return tuple(traces)
