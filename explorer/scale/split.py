"""Split the phases: prefill and decode on separate GPUs (xPyD) against the same GPUs colocated, with and without
chunked prefill, under the session's TTFT and TPOT SLOs: each request's TTFT and TPOT, and goodput as DistServe
defines it (arXiv 2401.09670: the highest request rate at which at least 90 % of requests meet both SLOs), per GPU.

Step times come from a `StepModel`: the roofline of `explorer.scale.floors` (modelled, spec figures), or a run's own
measured prefill and decode times (`explorer.scale.split_measured`). Every formula is in `split_explain`.

Queueing: a small deterministic simulation, not a closed formula. Requests arrive as a Poisson stream (exponential
gaps from a fixed seed, the same gaps scaled for every rate: common random numbers, so the curves are smooth and a
rerun gives the same figures). Why not M/D/c or M/M/c: a prefill server is deterministic (M/D/c fits it), but the
decode side is a batch whose step time grows with its size, colocated prefills stall decode steps, and a slow link
queues transfers; no textbook formula covers those together, and an iteration-level simulation is how Vidur and
DistServe's own simulator answer the same question. Each instance runs iteration by iteration as vLLM's scheduler
does: colocated, prefill first (a waiting prompt pauses every decode step: the stall), or chunked (each iteration
carries every running request's next token and up to `chunk_tokens` of prompt, as Sarathi-Serve); disaggregated, a
prefill pool takes prompts from one FCFS queue, each prefill instance sends each request's KV over its link (FCFS),
and a decode pool (requests dealt round robin) batches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from explorer.core.errors import BadInput

ATTAINMENT_TARGET = 0.9  # DistServe's goodput: the rate at which 90 % of requests meet both SLOs
PREFILL_TOKEN_BUDGET = 8192  # prompt tokens one iteration may take (an assumption, of the order of vLLM's
# max_num_batched_tokens); at least one whole prompt
REQUESTS = 300  # simulated per rate: Llama-3.1-70B 1P1D's goodput at 300 is within 3 % of 1,200's, in 1 s
RATE_POINTS = 24
TIE = 0.05  # goodputs within 5 % of each other are a tie, not a win
SEED = 0


@dataclass(frozen=True)
class Parts:
    """One pass's roofline parts: maths, weights read, KV moved, all-reduces (seconds)."""

    compute_s: float
    weights_s: float
    kv_s: float
    link_s: float = 0.0

    @property
    def floor_s(self) -> float:
        return max(self.compute_s, self.weights_s + self.kv_s) + self.link_s


class StepModel(Protocol):
    """Where a what-if takes its step times from: the roofline (modelled) or a run (measured)."""

    prompt_tokens: int
    layers: int  # a streamed transfer sends one layer's KV as each layer finishes
    source: str  # "modelled" or "measured ..."

    def prefill(self) -> Parts: ...  # one prompt of `prompt_tokens`

    def decode(self, batch: int) -> Parts: ...  # one step of `batch` requests at the mean decode context

    def taken(self) -> dict[str, Any]: ...  # what it took from a run ({} for the roofline)


def iteration_s(model: StepModel, batch: int, prompt_tokens: int) -> float:
    """One engine iteration: `batch` requests' next token and `prompt_tokens` of prefill (whole prompts or a chunk).
    The weights are read once for both; the prompt's FLOPs, KV and all-reduces scale with its share of a prompt:
    max(decode compute + c/P prefill compute, weights + decode KV + c/P prefill KV) + all-reduces."""
    pre = model.prefill()
    share = prompt_tokens / model.prompt_tokens
    step = model.decode(batch) if batch else Parts(0.0, pre.weights_s, 0.0)
    return (
        max(step.compute_s + share * pre.compute_s, step.weights_s + step.kv_s + share * pre.kv_s)
        + step.link_s
        + share * pre.link_s
    )


def exposed_streamed_s(transfer_s: float, prefill_s: float, layers: int) -> float:
    """Sent layer by layer as the prefill computes them (Mooncake, Dynamo): layer i's KV leaves once layer i is done,
    so the last transfer ends at max(prefill + one layer's transfer, first layer + whole transfer). What the prefill
    does not hide: max(t_x / L, t_x - t_p (L - 1) / L)."""
    return max(transfer_s / layers, transfer_s - prefill_s * (layers - 1) / layers)


def batch_under_tpot(model: StepModel, tpot_slo_s: float, memory_batch: int) -> int:
    """The largest decode batch whose step meets the TPOT SLO (strictly under it) and fits memory (0: not even one
    request meets it); a step's time grows with its batch, so bisect."""
    low, high = 0, memory_batch
    while low < high:
        middle = (low + high + 1) // 2
        if iteration_s(model, middle, 0) < tpot_slo_s:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True)
class Layout:
    """How the GPUs serve: colocated instances (each prefill and decode), or x prefill and y decode instances."""

    kind: str  # "colocated" or "disaggregated"
    instances: int  # colocated: all of them; disaggregated: x + y
    prefill_instances: int = 0
    decode_instances: int = 0
    chunk_tokens: int = 0  # colocated: 0 = prefill first (a prompt stalls decode); else chunked prefill

    @property
    def label(self) -> str:
        if self.kind == "disaggregated":
            return f"{self.prefill_instances}P{self.decode_instances}D"
        return f"colocated x{self.instances}" + (f", chunks of {self.chunk_tokens}" if self.chunk_tokens else "")


@dataclass(frozen=True)
class Outcome:
    """One simulated request (seconds)."""

    arrival_s: float
    ttft_s: float  # its first token's time less its arrival: queue + prefill (+ the exposed KV transfer)
    tpot_s: float  # (last token - first token) / (output tokens - 1)
    queue_s: float  # waiting for a prefill to start
    exposed_s: float  # the KV transfer the prefill did not hide (0 colocated)


@dataclass(frozen=True)
class Workload:
    """What the simulation serves and checks."""

    output_tokens: int
    ttft_slo_s: float
    tpot_slo_s: float
    memory_batch: int  # requests one instance's memory holds at the longest context (prompt + output)
    transfer_s: float = 0.0  # one request's KV over the link, whole
    streamed: bool = True
    requests: int = REQUESTS
    seed: int = SEED

    def meets(self, outcome: Outcome) -> tuple[bool, bool]:
        return outcome.ttft_s < self.ttft_slo_s, outcome.tpot_s < self.tpot_slo_s  # strictly under, as every SLO check


def check_layout(prefill: int, decode: int, colocated: int, chunk_tokens: int, output_tokens: int) -> None:
    if prefill < 1 or decode < 1 or colocated < 1:
        raise BadInput("Each pool needs at least one instance: x prefill, y decode, N colocated all >= 1.")
    if chunk_tokens < 0:
        raise BadInput(f"The chunk size must be 0 (no chunking) or more, not {chunk_tokens}.")
    if output_tokens < 2:
        raise BadInput(f"Output tokens must be at least 2 (TPOT needs a second token), not {output_tokens}.")
