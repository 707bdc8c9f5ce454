"""The split what-if from the user's own run: its measured prefill time per token and its measured decode step, in
place of the roofline's (`explorer.scale.split.StepModel`). The batch and the context change what a decode step moves,
which one run at batch 1 did not measure: those changes are the roofline's, on the run's own device figures, scaled
to the measured step, and said so."""

from __future__ import annotations

from statistics import median
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.roofline import pass_cost
from explorer.core.trace import Trace
from explorer.scale.config import shipped_key
from explorer.scale.floors import Scenario, decode_step, prefill_floor
from explorer.scale.split import Parts


def run_fits(trace: Trace, model_name: str) -> bool:
    """A run can stand in for the roofline only for its own model (a shipped name, an alias such as 'embedded')."""
    key = shipped_key(trace.model.name)
    return key is not None and key == shipped_key(model_name)


class MeasuredSteps:
    """Step times from a run (measured): a prompt of P tokens takes P x the run's prefill time per token (a prefill
    is compute-bound beyond a few hundred tokens, so time grows with tokens; an assumption below that); a decode step
    at batch B and context T takes the run's decode median x roofline(B, T) / roofline(1, T) on the run's device. With
    `scenario` (the what-if's instance), each pass adds the roofline's tensor-parallel all-reduces for its GPUs per
    instance (modelled: a run on one device measures none); without it, none."""

    def __init__(self, trace: Trace, prompt_tokens: int, output_tokens: int, scenario: Scenario | None = None) -> None:
        decode_s = trace.decode_median_s
        if decode_s is None:
            raise BadInput("The run has no decode step to measure: run it with at least 2 new tokens.")
        self.trace = trace
        self.prompt_tokens = prompt_tokens
        self.layers = trace.model.layers
        self.decode_context = prompt_tokens + output_tokens // 2
        # The median over repeats: each repeat's prefill wall time over the tokens it computed.
        self.prefill_s_per_token = median(passes[0].wall_s / passes[0].tokens_in for passes in trace.repeats)
        self.decode_step_s = decode_s
        self.source = f"measured on {trace.device.name}"
        floor_s = self._roofline(1).roofline_time_s
        if not (decode_s > 0 and self.prefill_s_per_token > 0 and floor_s > 0):  # a recording can hold anything
            raise BadInput("The run's measured prefill and decode times must be above zero to start a what-if from.")
        self._scale = decode_s / floor_s
        self._decode: dict[int, Parts] = {}
        self.scenario = scenario
        self._prefill_link_s = prefill_floor(scenario).t_link_s if scenario is not None else 0.0

    @property
    def key(self) -> tuple[object, ...]:
        """Everything the step times are made of (the run's measured times, its model and device figures, the
        what-if's prompt and context): equal keys give equal step times, so a cached what-if can be reused."""
        d = self.trace.device
        return (
            self.trace.model.name,
            d.name,
            d.peak_flops,
            d.bandwidth_bytes_per_s,
            d.effective_read_bandwidth_bytes_per_s,
            self.prefill_s_per_token,
            self.decode_step_s,
            self.prompt_tokens,
            self.decode_context,
            self.scenario,
        )

    def _roofline(self, batch: int) -> Any:
        t = self.trace
        return pass_cost(t.model, t.device, 1, self.decode_context, batch=batch, cache_layout="read_once")

    def prefill(self) -> Parts:
        return Parts(self.prefill_s_per_token * self.prompt_tokens, 0.0, 0.0, self._prefill_link_s)

    def decode(self, batch: int) -> Parts:
        if batch not in self._decode:
            cost, scale = self._roofline(batch), self._scale
            link_s = 0.0 if self.scenario is None else decode_step(self.scenario, batch, self.decode_context).t_link_s
            self._decode[batch] = Parts(
                cost.t_compute_s * scale, cost.t_weight_read_s * scale, cost.t_kv_s * scale, link_s
            )
        return self._decode[batch]

    def taken(self) -> dict[str, Any]:
        """What the what-if took from the run, for the page and the JSON."""
        t = self.trace
        return {
            "run_model": t.model.display_name,
            "run_device": t.device.name,
            "run_prompt_tokens": t.prompt_len,
            "prefill_s_per_token": self.prefill_s_per_token,
            "decode_step_s": self.decode_step_s,
            "prefill": "measured: the run's prefill time / its prompt tokens (median over repeats) x the prompt",
            "decode": "measured: the run's decode median at batch 1; grown with batch and context by the roofline on "
            "the run's device figures (modelled)",
            "memory_and_link": "spec: the chosen GPU's memory and the chosen link (a run measures neither)",
            "all_reduces": "modelled: the roofline's tensor-parallel all-reduces for the GPUs per instance, added to "
            "each measured pass (a run on one device has none to measure)"
            if self.scenario is not None and self.scenario.gpus > 1
            else "none: one GPU per instance",
        }
