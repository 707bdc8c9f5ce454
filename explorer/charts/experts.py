"""The experts a mixture-of-experts run's routers chose, pass by pass, and the weight read that routing causes."""

from __future__ import annotations

import pandas as pd

from explorer.core.trace import Trace
from explorer.core.units import human_bytes


def experts_frame(trace: Trace) -> pd.DataFrame:
    """One row per pass of a mixture-of-experts run: the distinct experts each MoE layer's router chose for the
    pass's tokens (measured from the routers' outputs), and the expert bytes and parameters that makes the pass read
    (modelled)."""
    e = trace.model.experts
    assert e is not None, "experts_frame is for a mixture-of-experts model"
    return pd.DataFrame(
        {
            "pass": p.index,
            "phase": p.phase,
            "tokens": p.tokens_in * p.batch,
            "experts per MoE layer": " ".join(map(str, p.experts_touched)) or "not recorded",
            "of": e.n_experts,
            "expert_bytes_read": p.cost.expert_bytes_read,
            "active_params": p.cost.active_params,
        }
        for p in trace.passes
    )


def experts_sentence(trace: Trace) -> str:
    """What routing did to the weight read: k experts per layer for one decoded token, more for a prefill."""
    m, e = trace.model, trace.model.experts
    assert e is not None, "experts_sentence is for a mixture-of-experts model"
    prefill = trace.prefill
    text = (
        f"Each token is routed to {e.experts_per_token} of {e.n_experts} experts in each of {e.moe_layers} MoE layers "
        f"(one expert: {human_bytes(e.expert_bytes)}). The prefill's {prefill.tokens_in} tokens touched "
        f"{sum(prefill.experts_touched)} experts in all (measured from the routers), so it reads "
        f"{human_bytes(prefill.cost.expert_bytes_read)} of the {human_bytes(e.all_expert_bytes)} of experts"
    )
    if trace.decodes:
        last = trace.decodes[-1]
        text += (
            f"; a one-token decode touches {sum(last.experts_touched)}, "
            f"{human_bytes(last.cost.expert_bytes_read)} (modelled weight read: dense part "
            f"{human_bytes(last.cost.weight_bytes_read - last.cost.expert_bytes_read)} + those experts)"
        )
    return (
        text
        + f". Active parameters per token: {(m.active_params_per_token or m.params) / 1e6:.2f} M of "
        + (f"{m.params / 1e6:.2f} M.")
    )
