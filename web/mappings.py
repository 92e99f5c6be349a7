"""`is_mapping`, for the bindings: it lives in `shared.mappings`."""

from shared.mappings import is_mapping

__all__ = ["is_mapping"]
