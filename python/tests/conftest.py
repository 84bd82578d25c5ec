"""Shared fixtures of the devmem Python tests (run by CTest: `ctest --preset python`)."""

import os
import sys

import numpy as np
import pytest

import devmem

# Where the suite must find the package when it tests an installed copy (CI's pip install check:
# the installed package, not a build tree or the source folder, is what runs).
_expected_dir = os.environ.get("DEVMEM_TEST_PACKAGE_DIR")
if _expected_dir:
    _found = os.path.realpath(os.path.dirname(devmem.__file__))
    if not _found.startswith(os.path.realpath(_expected_dir) + os.sep):
        raise RuntimeError(f"DEVMEM_TEST_PACKAGE_DIR={_expected_dir} but devmem was imported from "
                           f"{_found}")


def pytest_report_header(config):
    import importlib.util

    numba = "none"
    if importlib.util.find_spec("numba") is not None:
        from importlib import metadata

        try:
            numba = metadata.version("numba")
            numba += f", numba-cuda {metadata.version('numba-cuda')}"
        except metadata.PackageNotFoundError:
            pass
    return [f"devmem: {os.path.dirname(devmem.__file__)} (backend {devmem.backend_name()}), "
            f"NumPy {np.__version__}, Numba {numba}"]


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
