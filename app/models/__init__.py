"""Pydantic wire schemas; their vocabularies, bounds and defaults come from ``app.core``."""

# ``from app.models import limits`` keeps working for the service layer; the module is core's.
from app.core import limits

__all__ = ["limits"]
