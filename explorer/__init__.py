"""Prefill–Decode Explorer: a real causal LM run as one instrumented prefill pass and cached decode passes."""

__version__ = "0.1.0"
