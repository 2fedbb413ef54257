"""The integration tests drive the controller against a real control plane (tests/cluster) with
simulated kubelets and NVIDIA stand-ins (tests/nvidia); see world.py. The fixtures are defined
once, in tests/conftest.py."""
