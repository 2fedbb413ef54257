"""The API-server tests here use the integration suite's `kube` fixture (the real control plane),
defined once in tests/conftest.py."""
