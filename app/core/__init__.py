"""Pure domain core: stdlib only, frozen dataclasses, units in names."""
