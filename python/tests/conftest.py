"""Shared fixtures of the devmem Python tests (run by CTest: `ctest --preset python`)."""

import os
import sys

import numpy as np
import pytest

import devmem


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def pool_manager():
    """Runs a test under the pool manager and restores the previous manager after it."""
    previous = devmem.memory_manager_name()
    devmem.set_memory_manager("pool")
    yield
    devmem.set_memory_manager(previous)


def run_python(code, env=None, timeout=60):
    """Runs `code` in a fresh interpreter with this one's module path; returns the completed
    process (stdout and stderr as text)."""
    import subprocess

    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, timeout=timeout, check=False)


requires_gpu_backend = pytest.mark.skipif(
    devmem.backend_name() == "host",
    reason="needs a GPU backend (cuda or roc); this run uses the host backend")
host_backend_only = pytest.mark.skipif(
    devmem.backend_name() != "host",
    reason="host backend only (its device memory is CPU memory)")
