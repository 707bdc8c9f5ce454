"""What each figure of the what-if's JSON is counted in, and where it comes from (modelled or spec)."""

from explorer.core.gpu_specs import MEMORY_UNIT

UNITS = {  # the unit of every memory figure in the JSON (all bytes are counted exactly, none is a GiB)
    "weight_bytes": "bytes",
    "kv_bytes_per_token": "bytes",
    "kv_bytes_per_new_token": "bytes",
    **{
        f"{part}.{name}": "bytes, per GPU"
        for part in ("prefill", "decode_step")
        for name in ("weight_bytes_read", "kv_bytes_read", "kv_bytes_written", "expert_bytes_read", "link_bytes")
    },
    "tensor_parallel.weight_bytes": "bytes, per GPU",
    "tensor_parallel.kv_bytes_per_token": "bytes, per GPU",
    "tensor_parallel.expert_bytes": "bytes, per GPU",
    "tensor_parallel.table_bytes": "bytes, per GPU",
    "gpu.memory_bytes": f"bytes: the {MEMORY_UNIT}",
    "gpu.memory_gb": "GB (10^9 bytes), as the datasheet prints it",
    "gpu.bandwidth_bytes_per_s": "bytes per second (datasheet GB/s x 10^9)",
}

SOURCES = {
    "params": "modelled: counted exactly from config.json",
    "active_params": "modelled: params less the experts a token's router does not pick (= params for a dense model)",
    "weight_bytes": "modelled: params x bytes per element of the weights' storage type (int4: half a byte; MXFP4: "
    "4.25 bits, its scales counted), a mixture of experts' experts in theirs (gpt-oss ships them in MXFP4)",
    "kv_bytes_per_token": "modelled: one request's KV cache at the context / the context; a sliding layer keeps at "
    "most window - 1 positions (transformers' cache, as the live run)",
    "kv_bytes_per_new_token": "modelled: 2 x layers x kv_heads x head_dim x bytes per element (every layer growing)",
    "prefill_s_floor": "modelled: max(FLOPs / peak, bytes / bandwidth) + all-reduces, spec figures; attention over "
    "the useful causal pairs, an untied input table gathered row by row (as the live run)",
    "decode_step_s_floor": "modelled: max(FLOPs / peak, bytes / bandwidth) + all-reduces, spec figures; the KV cache "
    "read once a step (a paged, vLLM-style cache), an untied input table gathered row by row",
    "kv_crossover_context": "modelled: the shortest context whose decode step moves as many KV bytes as it reads of "
    "weights",
    "decode_tokens_per_s_ceiling": "modelled: batch / decode_step_s_floor",
    "ridge_batch": "modelled: the smallest batch whose decode step is compute-bound",
    "max_batch": "modelled: (GPU memory - weights) / (one request's KV cache at the context), per GPU; memory: "
    f"{MEMORY_UNIT}",
    "quantization": "modelled: weights and KV stored in the given types change only bytes (memory floors, the memory "
    "wall); compute runs at the dtype's spec peak; fp8, int8 and int4 scales are not counted, MXFP4's are",
    "published": "spec: the publisher's own totals, as published (maybe rounded or truncated: see its 'rounding'), "
    "beside the exact counts, never in place of them; null for a config that is not shipped",
    "gpu": "spec: explorer.core.gpu_specs and explorer.scale.interconnect (each row cites its datasheet)",
}
