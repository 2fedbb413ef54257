"""The control-plane fixtures come from tests/conftest.py (one control plane per session)."""
