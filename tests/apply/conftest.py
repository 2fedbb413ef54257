"""The API-server tests here run on the integration suite's `kube` fixture, whatever it is (the
fake API server, or the real control plane with its fixtures), imported from there."""

from tests.integration.conftest import *  # noqa: F403
