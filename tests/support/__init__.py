"""Helpers shared across the test folders (no tests of the product here; see tests/README.md)."""
