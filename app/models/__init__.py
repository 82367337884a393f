"""Pydantic wire schemas; their vocabularies, bounds and defaults come from ``app.core``."""
