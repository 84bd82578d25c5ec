"""set_memory_manager(PluginClass) on a GPU (docs/python.md#python-memory-manager): a plugin in
plain Python whose memory is real device memory, from CuPy's memory pool, on the cuda backend.

test_memory_manager_plugin.py checks the contract in detail on the host backend, where its plugins
hand out host memory; these tests show that the same calls give working device memory on a GPU
(copies both ways, a CuPy kernel over it, frees back to CuPy, threads, interpreter exit with live
arrays). They run in the GPU proof's pytest step and skip elsewhere (no CuPy or no GPU).
"""

import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import devmem

pytestmark = pytest.mark.skipif(
    devmem.backend_name() != "cuda" or devmem.device_count() == 0,
    reason=f"needs the cuda backend on a GPU (devmem runs '{devmem.backend_name()}')",
)

cupy = pytest.importorskip("cupy", reason="needs CuPy for the plugin's device memory")


class CupyBlock:
    """What memalloc returns: the device address and size of a CuPy allocation, which goes back
    to CuPy's pool when devmem drops this object."""

    def __init__(self, memory, on_free):
        self.device_pointer_value = memory.ptr
        self.size = memory.mem.size
        self._memory = memory
        self._finalizer = weakref.finalize(self, on_free, memory.ptr)


class CupyPlugin:
    """A memory manager in Numba's EMM shape whose memory comes from CuPy's device pool."""

    interface_version = 1

    def __init__(self, context):
        self.context = context
        self.lock = threading.Lock()
        self.allocs = []
        self.frees = []

    def initialize(self):
        pass

    def memalloc(self, size):
        block = CupyBlock(cupy.cuda.alloc(size), self._freed)
        with self.lock:
            self.allocs.append((block.device_pointer_value, size))
        return block

    def _freed(self, address):
        with self.lock:
            self.frees.append(address)

    def get_memory_info(self):
        free, total = cupy.cuda.runtime.memGetInfo()
        return free, total

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def reset(self):
        pass


@pytest.fixture
def plugin():
    before = devmem.memory_manager_name()
    devmem.flush_deallocations()
    installed = devmem.set_memory_manager(CupyPlugin)
    try:
        yield installed
    finally:
        devmem.flush_deallocations()
        devmem.set_memory_manager(before)


def test_device_memory_from_the_plugin_round_trips_and_is_seen_by_cupy(plugin):
    host = np.arange(1000, dtype=np.float64)
    d = devmem.to_device(host)
    assert (d.device_pointer, 8000) in [(a, s) for a, s in plugin.allocs]
    np.testing.assert_array_equal(d.copy_to_host(), host)
    # The same bytes through __cuda_array_interface__: a CuPy kernel reads and writes them.
    seen = cupy.asarray(d)
    assert seen.data.ptr == d.device_pointer
    assert float(seen.sum()) == float(host.sum())
    seen *= 2
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(d.copy_to_host(), host * 2)
    # A strided view of plugin memory copies like any device array.
    np.testing.assert_array_equal(d[::3].copy_to_host(), (host * 2)[::3])


def test_frees_go_back_to_the_plugin_after_a_flush(plugin):
    arrays = [devmem.device_array(n, dtype=np.int32) for n in (1, 100, 4096, 1 << 20)]
    addresses = [a.device_pointer for a in arrays]
    assert [a for a, _ in plugin.allocs[-4:]] == addresses
    del arrays
    devmem.flush_deallocations()
    assert set(addresses) <= set(plugin.frees)


def test_memory_info_is_the_plugins(plugin):
    free, total = devmem.memory_info()
    cupy_free, cupy_total = cupy.cuda.runtime.memGetInfo()
    assert total == cupy_total
    assert 0 < free <= total
    assert abs(free - cupy_free) <= 256 << 20  # the same device, read moments apart


def test_threads_allocate_through_the_plugin(plugin):
    errors = []

    def work(seed):
        try:
            for i in range(50):
                host = np.full(256 + i, seed, dtype=np.int64)
                d = devmem.to_device(host)
                assert (d.copy_to_host() == seed).all()
        except Exception as error:  # pylint: disable=broad-except
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(plugin.allocs) >= 200
    devmem.flush_deallocations()


def test_interpreter_exit_with_live_plugin_arrays_is_clean():
    code = textwrap.dedent(
        """
        import numpy as np, devmem, cupy
        import test_memory_manager_plugin_gpu as t
        plugin = devmem.set_memory_manager(t.CupyPlugin)
        kept = [devmem.to_device(np.arange(n, dtype=np.float32)) for n in (10, 1000, 100000)]
        dropped = devmem.device_array(4096)
        del dropped
        assert float(cupy.asarray(kept[1]).sum()) == float(np.arange(1000).sum())
        print("allocated", len(plugin.allocs))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(__file__)] + [p for p in sys.path if p]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "allocated 4" in result.stdout
    assert "error" not in result.stderr.lower(), result.stderr
