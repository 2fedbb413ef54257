"""Test doubles for external systems (NVML, ...)."""
