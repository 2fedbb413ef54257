"""The control-plane and proxy fixtures come from tests/conftest.py: one control plane a session."""
