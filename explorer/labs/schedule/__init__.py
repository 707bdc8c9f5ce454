"""Serving lab 2: a workload served by transformers' continuous batching, recorded step by step."""
