"""Chunkwise: LLM serving performance estimation with chunked prefill."""

__version__ = "0.1.0"
