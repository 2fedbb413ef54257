from __future__ import annotations

import pytest

from reconciler.sim.trace import openb_dir


@pytest.fixture(scope="session")
def openb():
    d = openb_dir()
    if not (d / "openb_node_list_gpu_node.csv").is_file():
        pytest.skip(f"openb trace not found at {d} (set GPUPOOL_OPENB_DIR)")
    return d
