"""A measured request as the CLI and the app run it, with device figures that hold under noise.

The order matters: check the request (refused before anything is paid for), take the device figures, warm up (the last
passes before the timed ones: `prepare_device`, once per entry point, which the labs, the benchmark and step mode use
too), run, then check the figures against the run (`explorer.core.figure_correction`).
"""

from __future__ import annotations

from explorer.core.device import FiguresStore
from explorer.core.engine import UNWATCHED, CheckedRequest, OnPass, Request, check_request, generate, warm_up
from explorer.core.figure_correction import keep_figures_honest
from explorer.core.lab_progress import MakeWay, Report, nobody_waits, part_of, silent
from explorer.core.loaded_model import LoadedModel
from explorer.core.trace import DeviceProfile, Trace


def prepare_device(
    lm: LoadedModel,
    figures: FiguresStore | None = None,
    checked: CheckedRequest | None = None,
    *,
    remeasure: bool = False,
    progress: Report | None = None,
    between: MakeWay = nobody_waits,
) -> DeviceProfile:
    """What every entry point does once before its timed passes: take the device figures from `figures` (fresh ones
    if `remeasure`; None: a store of this call's own, which measures), then warm up, at `checked`'s own shapes where
    the entry point knows its request, so the warm-up's passes are the last before the timed ones (see `warm_up`;
    `between` follows each of its generic forwards)."""
    report = progress or silent
    kind, dtype = lm.torch_device.type, lm.info.dtype
    figures = FiguresStore() if figures is None else figures
    profile = figures.get(kind, dtype, fresh=remeasure, progress=part_of(report, 0.0, 0.8))
    warm_up(lm, checked, part_of(report, 0.8, 1.0), between)
    return profile


def measure(
    lm: LoadedModel,
    request: Request | CheckedRequest,
    figures: FiguresStore | None = None,
    *,
    on_pass: OnPass = UNWATCHED,
    remeasure: bool = False,
    progress: Report | None = None,
) -> Trace:
    """Check the request (unless the caller did: the app holds its token count to a hosted server's cap), take the
    device figures from `figures` and warm up (`prepare_device`, reported to `progress`), run, keep the figures
    honest. `figures` None: a store of this call's own (the figures are measured for it, and forgotten)."""
    checked = request if isinstance(request, CheckedRequest) else check_request(lm, request)
    figures = FiguresStore() if figures is None else figures
    profile = prepare_device(lm, figures, checked, remeasure=remeasure, progress=progress)
    if progress is not None:
        progress(1.0, "Running the request: the timed passes…")
    trace = generate(lm, checked, profile, on_pass, warmed_up=True)
    return keep_figures_honest(trace, figures)
