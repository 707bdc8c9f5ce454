"""A real serving engine measured over its OpenAI-compatible streaming API: TTFT, per-token ITL and goodput."""
