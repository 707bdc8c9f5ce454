"""The serving labs: no KV cache, batching, continuous-batching schedules, and step mode."""
