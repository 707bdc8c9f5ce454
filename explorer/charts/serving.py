"""The serving labs' builders: the cached loop against the naive one, and decode steps against batch size."""

from __future__ import annotations

import altair as alt
import pandas as pd

from explorer.charts.common import MEASURED, MODELLED, two_lines
from explorer.core.roofline import attainable_flops
from explorer.core.trace import percentile
from explorer.core.units import GB, MB, to_ms
from explorer.labs.batch_result import BatchResult, BatchRun
from explorer.labs.nocache_result import EDGE_STEPS, PROJECTED_TOKENS, NoCacheResult, growth_verdict

LOOP_DOMAIN = ["with KV cache", "without cache"]
LOOP_RANGE = ["#1b9e77", "#e7298a"]  # decode green for the cached loop, magenta for the naive one
LOOP_COLOR = alt.Scale(domain=LOOP_DOMAIN, range=LOOP_RANGE)


# --- without a KV cache ----------------------------------------------------------------------------------------------
def nocache_frame(result: NoCacheResult) -> pd.DataFrame:
    """One row per step and loop: measured time, modelled FLOPs and bytes moved, tokens processed, running totals."""
    rows = []
    for loop, steps in zip(LOOP_DOMAIN, (result.cached, result.uncached)):
        total_s = total_flops = total_bytes = 0.0
        for k, s in enumerate(steps):
            total_s += s.wall_s
            total_flops += s.flops
            total_bytes += s.bytes_moved
            rows.append(
                {
                    "loop": loop,
                    "step": k,
                    "position": s.position,
                    "tokens_processed": s.tokens_processed,
                    "step_ms": to_ms(s.wall_s),
                    "cumulative_s": total_s,
                    "flops": s.flops,
                    "cumulative_gflop": total_flops / 1e9,
                    "bytes_moved": s.bytes_moved,
                    "cumulative_gb_moved": total_bytes / GB,
                    "token_id": s.token_id,
                }
            )
    return pd.DataFrame(rows)


def _loop_lines(frame: pd.DataFrame, y: str, title: str | list[str]) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("position:Q", title="sequence length at the step (tokens)"),
            y=alt.Y(f"{y}:Q", title=title),
            color=alt.Color("loop:N", scale=LOOP_COLOR, title=None, legend=alt.Legend(orient="top")),
            tooltip=["loop:N", "step:Q", "position:Q", "tokens_processed:Q", alt.Tooltip(f"{y}:Q", format=".3~f")],
        )
        .properties(height=260)
    )


def step_time_chart(frame: pd.DataFrame) -> alt.Chart:
    return _loop_lines(frame[frame["step"] > 0], "step_ms", "time per step (ms, measured)")


def cumulative_time_chart(frame: pd.DataFrame) -> alt.Chart:
    return _loop_lines(frame, "cumulative_s", "total time so far (s, measured)")


def cumulative_flops_chart(frame: pd.DataFrame) -> alt.Chart:
    return _loop_lines(frame, "cumulative_gflop", two_lines("total work so far (GFLOP, modelled)"))


def cache_memory_frame(result: NoCacheResult) -> pd.DataFrame:
    """What the cache holds at each step: the memory it spent to make the cached loop's steps flat."""
    return pd.DataFrame(
        {"position": p.cache_len_after, "kv_cache_mb": p.kv_cache_bytes / MB, "source": MEASURED}
        for p in result.cached_trace.passes
    )


def cache_memory_chart(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_area(color=LOOP_RANGE[0], opacity=0.4, line=True)
        .encode(
            x=alt.X("position:Q", title="sequence length (tokens)"),
            y=alt.Y("kv_cache_mb:Q", title=two_lines("KV cache held (MB, measured)")),
            tooltip=["position:Q", alt.Tooltip("kv_cache_mb:Q", format=".3f")],
        )
        .properties(height=200)
    )


def projection_frame(result: NoCacheResult) -> pd.DataFrame:
    """Each loop's projected total at 500 and 2,000 new tokens, with the achieved scale it was multiplied by."""
    rows = []
    for n in PROJECTED_TOKENS:
        projected = result.project(n)
        for loop, total_s, scale in zip(
            LOOP_DOMAIN,
            (projected.cached_s, projected.uncached_s),
            (result.cached_scale, result.uncached_scale),
        ):
            rows.append(
                {"new_tokens": n, "loop": loop, "projected_s": total_s, "x_floor_this_run": scale, "source": MODELLED}
            )
    return pd.DataFrame(rows)


def projection_caption(result: NoCacheResult) -> str:
    """How the projections were made, with this run's numbers, and the naive loop's lead at each length."""
    leads = ", ".join(
        f"{p.uncached_s / p.cached_s:.0f}x at {p.new_tokens:,}" for p in map(result.project, PROJECTED_TOKENS)
    )
    method = result.projection_method
    return f"{method[0].upper()}{method[1:]}. The naive loop's projected total over the cached one's: {leads}."


def projection_plain(result: NoCacheResult) -> str:
    """The projections in one plain line: how many times as long the naive loop would take at each length, and
    whether that factor grows with the length (computed, not assumed)."""
    ratios = [(p.new_tokens, p.uncached_s / p.cached_s) for p in map(result.project, PROJECTED_TOKENS)]
    leads = " and ".join(f"{ratio:,.0f}x as long at {n:,} new tokens" for n, ratio in ratios)
    trend = "widens" if ratios[-1][1] > ratios[0][1] else "does not widen"
    return f"For longer answers the gap {trend}: without a cache the whole request would take {leads}."


def growth_plain(result: NoCacheResult) -> str:
    """What the step times show, in plain words; `growth_sentence` says it with every number and the margin."""
    if not result.compares_edges:
        return f"Measured: this run is too short to compare its first steps with its last ({growth_verdict(result)})."
    cached_ms, naive_ms = (to_ms(result.growth_s(steps)) for steps in (result.cached, result.uncached))
    if result.grows_clearly_more:
        return (
            f"Measured: without the cache each step took longer as the text grew ({naive_ms:+,.1f} ms from the first "
            f"steps to the last); with it, steps stayed about the same ({cached_ms:+,.1f} ms)."
        )
    return (
        f"Measured: on this run the steps without a cache did not clearly outgrow those with it ({naive_ms:+,.1f} ms "
        f"against {cached_ms:+,.1f} ms): a short answer or a busy machine hides the difference."
    )


def estimate_sentence(result: NoCacheResult) -> str:
    """The naive loop against the estimate it was admitted on."""
    note = result.estimate_note
    return f"Before the run, the naive loop was modelled at this device's figures (a floor): {note}."


def growth_sentence(result: NoCacheResult) -> str:
    """The measured claim, with its numbers: how much the last 8 steps outgrew the first 8, each way, and whether
    that passes the stated margin for "clearly more"."""
    if not result.compares_edges:
        return f"Measured: {growth_verdict(result)}."
    parts = []
    for loop, steps in zip(LOOP_DOMAIN, (result.cached, result.uncached)):
        first = to_ms(result.edge_mean_s(steps, first=True))
        last = to_ms(result.edge_mean_s(steps, first=False))
        parts.append(
            f"{loop}: first {EDGE_STEPS} decode steps {first:.1f} ms, last {EDGE_STEPS} {last:.1f} ms "
            f"({last - first:+.1f} ms)"
        )
    return "Measured: " + "; ".join(parts) + f": {growth_verdict(result)}."


# --- batching -------------------------------------------------------------------------------------------------------
def batch_frame(result: BatchResult) -> pd.DataFrame:
    """One row per batch size: measured step time, tokens/s and ITL, the modelled step split, the KV cache."""
    rows = []
    for run in result.runs:
        cost = run.median_step_cost
        rows.append(
            {
                "batch_size": run.batch_size,
                "prefill_ms": to_ms(run.prefill_s),
                "median_step_ms": to_ms(run.median_step_s),
                "itl_p50_ms": to_ms(run.itl_p50_s),
                "itl_p99_ms": to_ms(percentile(run.itl_s, 99)),
                "tokens_per_s": run.tokens_per_s,
                "kv_cache_gb": run.kv_cache_bytes / GB,
                "weight_read_ms": to_ms(cost.t_weight_read_s),
                "kv_ms": to_ms(cost.t_kv_s),
                "compute_ms": to_ms(cost.t_compute_s),
                "modelled_step_ms": to_ms(cost.roofline_time_s),
                "modelled_tokens_per_s": run.batch_size / cost.roofline_time_s,
                "intensity_flops_per_byte": cost.arithmetic_intensity,
                "achieved_flops_per_s": cost.flops / run.median_step_s,
                "bound": cost.bound,
                "matches_solo": all(run.matches_solo),
                **experts_columns(run),
            }
        )
    return pd.DataFrame(rows)


def experts_columns(run: BatchRun) -> dict[str, float]:
    """A mixture of experts: the distinct experts its median decode step read, summed over the MoE layers (measured
    from the routers), and their bytes (modelled). B sequences route to more distinct experts than one: the step
    reads more weights as B grows, unlike a dense model's. Empty for a dense model."""
    step = run.passes[len(run.passes) // 2]
    if not step.experts_touched:
        return {}
    return {"distinct_experts_per_step": sum(step.experts_touched), "expert_read_mb": step.cost.expert_bytes_read / MB}


def _measured_and_modelled(frame: pd.DataFrame, measured: str, modelled: str, title: str | list[str]) -> alt.LayerChart:
    x = alt.X("batch_size:Q", scale=alt.Scale(type="log", base=2), title="batch size B")
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=80, color="#1b9e77")
        .encode(
            x=x,
            y=alt.Y(f"{measured}:Q", title=title),
            tooltip=["batch_size", alt.Tooltip(f"{measured}:Q", format=".2f")],
        )
    )
    line = alt.Chart(frame).mark_line(strokeDash=[5, 3], color="#555555").encode(x=x, y=f"{modelled}:Q")
    return (line + points).properties(height=260)


def step_time_vs_batch_chart(frame: pd.DataFrame) -> alt.LayerChart:
    return _measured_and_modelled(frame, "median_step_ms", "modelled_step_ms", "decode step (ms)")


def tokens_per_s_vs_batch_chart(frame: pd.DataFrame) -> alt.LayerChart:
    return _measured_and_modelled(
        frame, "tokens_per_s", "modelled_tokens_per_s", two_lines("decode tokens/s (all requests)")
    )


def batch_roofline_frame(result: BatchResult, frame: pd.DataFrame) -> pd.DataFrame:
    """The decode steps at their modelled intensity, and the roof and ridge they move towards as B grows."""
    device = result.device
    ridge = device.ridge_point_flops_per_byte
    low = min(frame["intensity_flops_per_byte"].min(), ridge) / 4
    high = max(frame["intensity_flops_per_byte"].max(), ridge) * 4
    roof = [
        {"kind": "roof", "intensity_flops_per_byte": x, "flops_per_s": attainable_flops(x, device)}
        for x in (low, ridge, high)
    ]
    steps = [
        {
            "kind": "step",
            "intensity_flops_per_byte": r.intensity_flops_per_byte,
            "flops_per_s": r.achieved_flops_per_s,
            "batch_size": r.batch_size,
        }
        for r in frame.itertuples(index=False)
    ]
    return pd.DataFrame([*roof, *steps])


def batch_roofline_chart(frame: pd.DataFrame, ridge: float) -> alt.LayerChart:
    x = alt.X("intensity_flops_per_byte:Q", scale=alt.Scale(type="log"), title="FLOP per byte (modelled)")
    y = alt.Y("flops_per_s:Q", scale=alt.Scale(type="log"), axis=alt.Axis(format="~s"), title="FLOP/s")
    roof = alt.Chart(frame).transform_filter("datum.kind == 'roof'").mark_line(color="#444444").encode(x=x, y=y)
    ridge_rule = (
        alt.Chart(pd.DataFrame({"ridge": [ridge]})).mark_rule(strokeDash=[4, 4], color="#444444").encode(x="ridge:Q")
    )
    steps = alt.Chart(frame).transform_filter("datum.kind == 'step'")
    points = steps.mark_point(filled=True, size=80, color="#1b9e77").encode(x=x, y=y, tooltip=["batch_size:Q"])
    labels = steps.mark_text(dy=-10).encode(x=x, y=y, text=alt.Text("batch_size:Q", format="d"))
    return (roof + ridge_rule + points + labels).properties(height=300)


def tradeoff_chart(frame: pd.DataFrame, itl_slo_ms: float) -> alt.LayerChart:
    """Throughput against each request's ITL, one point per B, with the ITL SLO as a line."""
    points = (
        alt.Chart(frame)
        .mark_line(point=alt.OverlayMarkDef(filled=True, size=80), color="#1b9e77")
        .encode(
            x=alt.X("itl_p99_ms:Q", title="each request's ITL (ms, p99, measured)"),
            y=alt.Y("tokens_per_s:Q", title=two_lines("decode tokens/s, all requests (measured)")),
            order="batch_size:Q",
            tooltip=[
                "batch_size",
                alt.Tooltip("itl_p99_ms:Q", format=".2f"),
                alt.Tooltip("tokens_per_s:Q", format=".1f"),
            ],
        )
    )
    labels = (
        alt.Chart(frame)
        .mark_text(dx=8, align="left")
        .encode(x="itl_p99_ms:Q", y="tokens_per_s:Q", text=alt.Text("batch_size:Q", format="d"))
    )
    slo = (
        alt.Chart(pd.DataFrame({"slo_ms": [itl_slo_ms]}))
        .mark_rule(color="#e41a1c", strokeDash=[6, 3])
        .encode(x="slo_ms:Q")
    )
    return (points + labels + slo).properties(height=300)


def largest_batch_within(frame: pd.DataFrame, itl_slo_ms: float) -> int | None:
    """The largest measured batch whose per-request p99 ITL stays under the SLO."""
    within = frame[frame["itl_p99_ms"] < itl_slo_ms]
    return int(within["batch_size"].max()) if not within.empty else None
