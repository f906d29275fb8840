"""The storage seam: the only modules that speak SQL (see docs/architecture.md)."""
