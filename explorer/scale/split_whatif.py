"""The split-phases what-if assembled: a scenario of At scale (model, GPU, dtype, tensor-parallel group, prompt) with
the workload, the SLO pair, the layouts and the link; its KV transfer, decode batch under the TPOT SLO, each layout's
goodput curve, the crossover, the one computed sentence, and every figure as JSON (`whatif --split --json` and the
page read the same record)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

from explorer.core.errors import BadInput
from explorer.scale.floors import Scenario, check_scenario, decode_step, max_batch, prefill_floor, shard
from explorer.scale.params import kv_bytes_at
from explorer.scale.split import (
    ATTAINMENT_TARGET,
    PREFILL_TOKEN_BUDGET,
    REQUESTS,
    SEED,
    Layout,
    Outcome,
    Parts,
    StepModel,
    Workload,
    batch_under_tpot,
    check_layout,
    exposed_streamed_s,
    iteration_s,
)
from explorer.scale.split_curves import Curve, capacity_per_s, crossover_per_s, curve, rate_grid, verdict
from explorer.scale.split_links import SplitLink, split_link
from explorer.scale.split_sim import Budget, simulate

SCHEMA = "explorer.whatif.split/1"
# Output tokens simulated per rate and layout (requests x output tokens): past it, fewer requests a rate, said with the
# figures (300 x 512; the iteration budget of `split_sim` caps the rest), never fewer than MIN_REQUESTS.
DECODE_TOKENS_PER_RATE = REQUESTS * 512
MIN_REQUESTS = 40
GRID_HEADROOM = 1.25  # the rates run to 1.25 x the highest no-SLO capacity of any layout: past every knee
SOURCES = {
    "kv_bytes_per_request": "modelled: 2 x layers x kv_heads x head_dim x bytes x prompt tokens (config.json)",
    "kv_bytes_per_rank": "modelled: the same with one GPU's KV heads, ceil(kv_heads / N) (tensor parallel: each rank "
    "holds its own heads, replicated when N > kv_heads)",
    "transfer_whole_s": "modelled: with a link a GPU, KV bytes per rank / the link's one-way line rate (every rank "
    "sends its own heads at once); with one an instance, KV bytes per request / it (spec, cited per link)",
    "exposed_streamed_s": "modelled: max(t_x / L, t_x - t_prefill (L - 1) / L), layer by layer (Mooncake, Dynamo)",
    "prefill_s": "modelled: the roofline prefill floor (max(FLOPs / peak, bytes / bandwidth) + all-reduces)",
    "decode_batch_under_tpot": "modelled: the largest B whose roofline decode step (KV reads included) < TPOT SLO",
    "goodput_per_gpu": "modelled: DistServe's goodput (arXiv 2401.09670): the highest Poisson rate at which 90 % of "
    "requests meet both SLOs, over the GPUs; a deterministic simulation of the queues, fixed random seed",
    "capacity_per_gpu": "modelled: requests/s with no SLO, the busiest resource at its best batch, over the GPUs",
    "slos": "the session's SLO pair: TTFT, and its ITL SLO read as TPOT (a request's mean time per output token)",
}


class RooflineSteps:
    """Step times from At scale's roofline (modelled, spec figures): a prompt's prefill floor and a decode step at
    the mean decode context (prompt + half the output), cached by batch."""

    source = "modelled"

    def __init__(self, scenario: Scenario, output_tokens: int) -> None:
        self.scenario = scenario
        self.prompt_tokens = scenario.prompt_tokens
        self.layers = scenario.arch.layers
        self.decode_context = scenario.prompt_tokens + output_tokens // 2
        floor = prefill_floor(scenario)
        self._prefill = Parts(floor.cost.t_compute_s, floor.cost.t_weight_read_s, floor.cost.t_kv_s, floor.t_link_s)
        self._decode: dict[int, Parts] = {}

    def prefill(self) -> Parts:
        return self._prefill

    def taken(self) -> dict[str, Any]:
        """Nothing from a run: every step time is the roofline's."""
        return {}

    def decode(self, batch: int) -> Parts:
        if batch not in self._decode:
            step = decode_step(self.scenario, batch, self.decode_context)
            cost = step.cost
            self._decode[batch] = Parts(cost.t_compute_s, cost.t_weight_read_s, cost.t_kv_s, step.t_link_s)
        return self._decode[batch]


@dataclass(frozen=True)
class SplitInputs:
    """What the user asks: At scale's scenario (its gpus: one instance's tensor-parallel group; its prompt) and the
    split's own inputs."""

    scenario: Scenario
    output_tokens: int
    ttft_slo_s: float
    tpot_slo_s: float
    prefill_instances: int = 1
    decode_instances: int = 1
    colocated_instances: int | None = None  # None: x + y, the same GPUs as the disaggregated layout
    link: str = "NVLink"
    streamed: bool = True
    chunk_tokens: int = 512  # 0: compare prefill-first colocated only
    rate_per_s: float | None = None  # where to show the TTFT/TPOT distributions; None: the disaggregated goodput
    requests: int = REQUESTS
    seed: int = SEED

    @property
    def colocated(self) -> int:
        return self.colocated_instances or self.prefill_instances + self.decode_instances

    def layouts(self) -> list[Layout]:
        x, y, n = self.prefill_instances, self.decode_instances, self.colocated
        found = [Layout("colocated", n)]
        if self.chunk_tokens:
            found.append(Layout("colocated", n, chunk_tokens=self.chunk_tokens))
        return [*found, Layout("disaggregated", x + y, x, y)]

    def inputs_dict(self) -> dict[str, Any]:
        s = self.scenario
        return {
            "model": s.arch.name,
            "gpu": s.gpu.name,
            "dtype": s.dtype,
            "kv_dtype": s.kv_storage,
            "gpus_per_instance": s.gpus,
            "prompt_tokens": s.prompt_tokens,
            "output_tokens": self.output_tokens,
            "ttft_slo_s": self.ttft_slo_s,
            "tpot_slo_s": self.tpot_slo_s,
            "prefill_instances": self.prefill_instances,
            "decode_instances": self.decode_instances,
            "colocated_instances": self.colocated,
            "link": self.link,
            "transfer": "streamed layer by layer" if self.streamed else "whole, after the prefill",
            "chunk_tokens": self.chunk_tokens,
            "requests_per_rate": self.requests,
            "seed": self.seed,
            "prefill_token_budget": PREFILL_TOKEN_BUDGET,
            "attainment_target": ATTAINMENT_TARGET,
        }


@dataclass(frozen=True)
class SplitResult:
    """Every figure of the split what-if (modelled, or measured where `steps.source` says so)."""

    inputs: SplitInputs
    steps: StepModel
    link: SplitLink
    kv_bytes_per_request: int
    kv_bytes_per_rank: int  # one GPU's share: its ceil(kv_heads / N) KV heads, sent over its own link
    transfer_whole_s: float
    exposed_streamed_s: float
    prefill_s: float
    memory_batch: int
    tpot_batch: int
    curves: tuple[Curve, ...]
    crossover_per_s: float | None
    sentence: str
    rate_per_s: float
    at_rate: dict[str, list[Outcome]]
    requests: int  # simulated a rate: the inputs' unless long outputs made it fewer (`simulated_requests`)
    rate_why: str = "the rate asked for"  # why the distributions are shown at `rate_per_s`

    @property
    def exposed_s(self) -> float:
        return self.exposed_streamed_s if self.inputs.streamed else self.transfer_whole_s

    @property
    def tpot_batch_step_s(self) -> float:
        return iteration_s(self.steps, self.tpot_batch, 0) if self.tpot_batch else 0.0

    @property
    def tpot_batch_kv_bytes(self) -> int:
        """The KV memory the TPOT-limited batch needs at its longest context, on the whole instance."""
        s = self.inputs.scenario
        return self.tpot_batch * kv_bytes_at(s.arch, s.prompt_tokens + self.inputs.output_tokens, s.kv_storage)

    def curve_named(self, label: str) -> Curve:
        return next(c for c in self.curves if c.layout.label == label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "sentence": self.sentence,
            "timing": self.steps.source,
            "measured_inputs": self.steps.taken(),
            "kv_bytes_per_request": self.kv_bytes_per_request,
            "kv_bytes_per_rank": self.kv_bytes_per_rank,
            "transfer_whole_s": self.transfer_whole_s,
            "exposed_streamed_s": self.exposed_streamed_s,
            "exposed_s": self.exposed_s,
            "prefill_s": self.prefill_s,
            "memory_batch": self.memory_batch,
            "decode_batch_under_tpot": self.tpot_batch,
            "decode_step_s_at_that_batch": self.tpot_batch_step_s,
            "kv_bytes_for_that_batch": self.tpot_batch_kv_bytes,
            "crossover_per_s": self.crossover_per_s,
            "layouts": [
                {
                    "label": c.layout.label,
                    "layout": asdict(c.layout),
                    "gpus": c.gpus,
                    "goodput_per_s": c.goodput_per_s,
                    "goodput_per_gpu": c.goodput_per_gpu,
                    "capacity_per_gpu": c.capacity_per_gpu,
                    "limited_by": c.limit,
                    "curve": [
                        {"rate_per_s": r, "attainment": a, "ttft_met": t, "tpot_met": p, "met_per_gpu_per_s": m}
                        for r, a, t, p, m in zip(
                            c.rates_per_s, c.attainment, c.ttft_met, c.tpot_met, c.met_per_gpu(), strict=True
                        )
                    ],
                }
                for c in self.curves
            ],
            "at_rate": {
                "rate_per_s": self.rate_per_s,
                "why": self.rate_why,
                **{k: summary(v, self.inputs) for k, v in self.at_rate.items()},
            },
            "inputs": self.inputs_dict(),
            "sources": SOURCES | {"link": self.link.source},
        }

    @property
    def fewer_requests(self) -> str:
        """Why fewer requests a rate were simulated than asked for; "" when they were not."""
        if self.requests >= self.inputs.requests:
            return ""
        return (
            f"{self.requests} requests a rate, not {self.inputs.requests}: {self.inputs.output_tokens:,} output tokens "
            f"each would simulate more than {DECODE_TOKENS_PER_RATE:,} tokens a rate (a cap on this server's CPU)"
        )

    def inputs_dict(self) -> dict[str, Any]:
        return self.inputs.inputs_dict() | {
            "requests_per_rate": self.requests,
            "fewer_requests": self.fewer_requests,
            "link_name": self.link.name,
            "link_one_way_bytes_per_s": self.link.one_way_bytes_per_s,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


def summary(outcomes: list[Outcome], inputs: SplitInputs) -> dict[str, float]:
    """Median and 90th percentile of TTFT and TPOT, and the share meeting both SLOs, at one rate."""

    def pct(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]

    ttft, tpot = [o.ttft_s for o in outcomes], [o.tpot_s for o in outcomes]
    met = sum(o.ttft_s < inputs.ttft_slo_s and o.tpot_s < inputs.tpot_slo_s for o in outcomes) / len(outcomes)
    return {
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p90_s": pct(ttft, 90),
        "tpot_p50_s": pct(tpot, 50),
        "tpot_p90_s": pct(tpot, 90),
        "attainment": met,
    }


def simulated_requests(inputs: SplitInputs) -> int:
    """Requests a rate: the inputs', fewer where long outputs would make the simulation's work too large."""
    return min(inputs.requests, max(MIN_REQUESTS, DECODE_TOKENS_PER_RATE // inputs.output_tokens))


def split_what_if(inputs: SplitInputs, steps: StepModel | None = None) -> SplitResult:
    """The what-if from At scale's roofline, or from `steps` (a run's measured times). Its simulation has a budget
    (`split_sim.ITERATION_BUDGET`): past it, one line refuses (BadInput)."""
    s = replace(inputs.scenario, batch=1, context=inputs.scenario.prompt_tokens + inputs.output_tokens)
    check_layout(
        inputs.prefill_instances, inputs.decode_instances, inputs.colocated, inputs.chunk_tokens, inputs.output_tokens
    )
    if s.context > s.arch.max_context:
        raise BadInput(f"Prompt + output tokens ({s.context:,}) exceed the model's context ({s.arch.max_context:,}).")
    if not (inputs.ttft_slo_s > 0 and inputs.tpot_slo_s > 0):
        raise BadInput("Both SLOs must be above zero.")
    check_scenario(s)
    link = split_link(inputs.link, s.gpu)
    steps = steps or RooflineSteps(s, inputs.output_tokens)
    memory = max_batch(s)
    if memory < 1:
        raise BadInput(
            f"{s.arch.display_name} does not fit {s.gpus} x {s.gpu.name} with one request's KV: use more GPUs per "
            "instance (tensor parallel)."
        )
    kv_bytes = kv_bytes_at(s.arch, s.prompt_tokens, s.kv_storage)
    # Tensor parallel: each GPU holds its own KV heads (ceil(kv_heads / N); replicated past N = kv_heads). With a link
    # a GPU, every rank sends its share at once (the time of one share); over one shared link, the whole KV in turn.
    rank_bytes = kv_bytes_at(s.arch, s.prompt_tokens, s.kv_storage, shard(s).kv_heads)
    transfer_s = (rank_bytes if link.per_gpu else kv_bytes) / link.one_way_bytes_per_s
    prefill_s = steps.prefill().floor_s
    work = Workload(
        inputs.output_tokens, inputs.ttft_slo_s, inputs.tpot_slo_s, memory, transfer_s, inputs.streamed,
        simulated_requests(inputs), inputs.seed,
    )  # fmt: skip
    budget = Budget()
    layouts = inputs.layouts()
    top = GRID_HEADROOM * max(capacity_per_s(steps, work, layout) for layout in layouts)
    rates = rate_grid(top)
    curves = tuple(curve(steps, work, layout, s.gpus, rates, budget) for layout in layouts)
    disaggregated = curves[-1]
    best_colocated = max(curves[:-1], key=lambda c: c.goodput_per_gpu)
    rate, rate_why = distribution_rate(inputs.rate_per_s, disaggregated.goodput_per_s, rates)
    return SplitResult(
        inputs=inputs,
        steps=steps,
        link=link,
        kv_bytes_per_request=kv_bytes,
        kv_bytes_per_rank=rank_bytes,
        transfer_whole_s=transfer_s,
        exposed_streamed_s=exposed_streamed_s(transfer_s, prefill_s, s.arch.layers),
        prefill_s=prefill_s,
        memory_batch=memory,
        tpot_batch=batch_under_tpot(steps, inputs.tpot_slo_s, memory),
        curves=curves,
        crossover_per_s=crossover_per_s(best_colocated, disaggregated),
        sentence=verdict(best_colocated, disaggregated),
        rate_per_s=rate,
        at_rate={c.layout.label: simulate(steps, work, c.layout, rate, budget) for c in curves},
        requests=work.requests,
        rate_why=rate_why,
    )


def distribution_rate(asked_per_s: float | None, goodput_per_s: float, rates: list[float]) -> tuple[float, str]:
    """Where the TTFT/TPOT distributions are shown, and why there: the rate asked for, else the disaggregated
    layout's goodput, else (it meets the SLOs at no rate) the middle of the rates simulated."""
    if asked_per_s:
        return asked_per_s, "the rate asked for"
    if goodput_per_s:
        return goodput_per_s, "the disaggregated layout's goodput"
    middle = rates[len(rates) // 2]
    return middle, "the middle of the rates simulated: the disaggregated layout meets both SLOs at none of them"
