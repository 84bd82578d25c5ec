"""Tests of devmem.numba, the Numba External Memory Management plugin.

The interface and the mapping of each call onto devmem run everywhere: without a GPU the plugin is
made with context=None (as numba.cuda.set_memory_manager itself does) and its methods are called
directly, and on the host backend device memory is CPU-addressable, so the bytes behind the
pointers Numba receives are checked through ctypes. The tests that need Numba's CUDA target run
only where Numba sees a CUDA GPU and devmem runs its cuda backend.
"""

import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devmem

numba = pytest.importorskip(
    "numba", reason="devmem.numba needs Numba (Debian python3-numba; no Numba in python-numpy2)")
from numba import cuda  # noqa: E402
from numba.cuda.cudadrv import devicearray, driver  # noqa: E402

import devmem.numba as devmem_numba  # noqa: E402
from devmem.numba import DevmemMemoryManager  # noqa: E402

ON_HOST_BACKEND = devmem.backend_name() == "host"
host_backend_only = pytest.mark.skipif(
    not ON_HOST_BACKEND,
    reason="reads device memory through ctypes, which needs the host backend "
    f"(devmem runs '{devmem.backend_name()}')",
)


def _numba_gpu_available():
    try:
        return bool(cuda.is_available()) and devmem.backend_name() == "cuda"
    except Exception:  # a broken driver install means no GPU for these tests
        return False


needs_gpu = pytest.mark.skipif(
    not _numba_gpu_available(),
    reason="needs a CUDA GPU that Numba sees (numba.cuda.is_available()) and devmem's cuda "
    "backend",
)


def _address(pointer):
    value = pointer.value if hasattr(pointer, "value") else int(pointer)
    return value or 0


def _collect():
    # Numba's finalizers run when the memory objects are collected; objects in reference
    # cycles (pytest keeps frames around) need a full collection.
    gc.collect()


@pytest.fixture
def numba_manager_restored():
    """Restores Numba's process-wide plugin choice after a test that changes it."""
    saved = driver._memory_manager
    yield
    driver._memory_manager = saved


@pytest.fixture
def devmem_manager_restored():
    """Restores devmem's memory manager of the current device after the test."""
    saved = devmem.memory_manager_name()
    yield saved
    if saved != devmem.memory_manager_name():
        devmem.set_memory_manager(saved)


@pytest.fixture
def manager(devmem_manager_restored):
    """A plugin instance on the pool manager, reset afterwards."""
    devmem.set_memory_manager("pool")
    mm = DevmemMemoryManager(context=None)
    mm.initialize()
    yield mm
    mm.reset()


# -- the interface ------------------------------------------------------------------------------


def test_is_a_complete_numba_emm_plugin():
    assert issubclass(DevmemMemoryManager, cuda.HostOnlyCUDAMemoryManager)
    assert issubclass(DevmemMemoryManager, cuda.BaseCUDAMemoryManager)
    assert not DevmemMemoryManager.__abstractmethods__
    mm = DevmemMemoryManager(context=None)
    assert mm.interface_version == 1
    for name in (
        "memalloc",
        "memhostalloc",
        "mempin",
        "initialize",
        "get_ipc_handle",
        "get_memory_info",
        "reset",
        "defer_cleanup",
    ):
        assert callable(getattr(mm, name)), name


def test_requires_a_context_keyword_as_numba_does():
    with pytest.raises(RuntimeError, match="Memory manager requires a context"):
        DevmemMemoryManager()


def test_numba_set_memory_manager_accepts_it(numba_manager_restored):
    cuda.set_memory_manager(DevmemMemoryManager)
    assert driver._memory_manager is DevmemMemoryManager


def test_numba_refuses_a_version_2_subclass(numba_manager_restored):
    class Version2(DevmemMemoryManager):
        @property
        def interface_version(self):
            return 2

    before = driver._memory_manager
    with pytest.raises(RuntimeError, match="EMM Plugin interface has version 2 - version 1"):
        cuda.set_memory_manager(Version2)
    assert driver._memory_manager is before


def test_use_devmem_for_numba(numba_manager_restored):
    devmem_numba.use_devmem_for_numba()
    assert driver._memory_manager is DevmemMemoryManager


def _package_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(devmem.__file__)))


def _run_child(code, **env_vars):
    env = dict(os.environ, **env_vars)
    env["PYTHONPATH"] = _package_root() + os.pathsep + os.environ.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_numba_cuda_memory_manager_names_the_module():
    # What Numba does with NUMBA_CUDA_MEMORY_MANAGER=devmem.numba when it creates its first
    # context (a fresh process: Numba reads the variable once).
    assert devmem_numba._numba_memory_manager is DevmemMemoryManager
    result = _run_child(
        """
        from numba.cuda.cudadrv import driver
        driver._ensure_memory_manager()
        manager = driver._memory_manager
        print(manager.__module__ + "." + manager.__qualname__)
        """,
        NUMBA_CUDA_MEMORY_MANAGER="devmem.numba",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "devmem.numba.DevmemMemoryManager"


def test_import_devmem_does_not_import_numba():
    result = _run_child(
        """
        import sys

        class BlockNumba:
            def find_spec(self, name, path=None, target=None):
                if name == "numba" or name.startswith("numba."):
                    raise ImportError("numba is blocked in this test")
                return None

        sys.meta_path.insert(0, BlockNumba())
        import devmem
        assert "numba" not in sys.modules, "import devmem imported numba"
        try:
            import devmem.numba
        except ImportError as error:
            print("devmem.numba:", error)
        else:
            raise SystemExit("devmem.numba imported without numba")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "numba is blocked" in result.stdout


# -- initialize ---------------------------------------------------------------------------------


def test_initialize_selects_the_pool_unless_the_user_chose(devmem_manager_restored, monkeypatch):
    monkeypatch.delenv("DEVMEM_MEMORY_MANAGER", raising=False)
    devmem.set_memory_manager("direct")
    mm = DevmemMemoryManager(context=None)
    mm.initialize()
    assert devmem.memory_manager_name() == "pool"
    # idempotent: a second call changes nothing, even after the user switched managers
    devmem.set_memory_manager("direct")
    mm.initialize()
    assert devmem.memory_manager_name() == "direct"

    # a user who named a manager in the environment keeps it
    monkeypatch.setenv("DEVMEM_MEMORY_MANAGER", "direct")
    DevmemMemoryManager(context=None).initialize()
    assert devmem.memory_manager_name() == "direct"

    # so does one who installed a manager other than the default
    monkeypatch.delenv("DEVMEM_MEMORY_MANAGER")
    try:
        devmem.set_memory_manager("async")
    except devmem.Error as error:
        pytest.skip(f"the async manager is not available on this backend: {error}")
    DevmemMemoryManager(context=None).initialize()
    assert devmem.memory_manager_name() == "async"


@host_backend_only
def test_initialize_for_a_numba_context_needs_the_cuda_backend():
    class NumbaContextStandIn:  # what Numba passes: its Context, with a .device
        device = None

    mm = DevmemMemoryManager(context=NumbaContextStandIn())
    message = r"needs devmem's 'cuda' backend.*runs the 'host' backend.*DEVMEM_BACKEND=cuda"
    with pytest.raises(RuntimeError, match=message):
        mm.initialize()


def test_reset_before_initialize():
    mm = DevmemMemoryManager(context=None)
    mm.reset()
    assert mm.live_allocations == 0


# -- memalloc -----------------------------------------------------------------------------------


def test_memalloc_returns_numba_owned_memory_from_devmem(manager):
    memory = manager.memalloc(1000)
    assert isinstance(memory, driver.OwnedPointer)
    assert isinstance(memory._mem, driver.AutoFreePointer)
    assert memory.size == 1000
    assert driver.device_memory_size(memory) == 1000
    assert manager.live_allocations == 1
    backing = manager.devmem_array(memory)
    assert devmem.is_device_array(backing)
    assert backing.dtype == np.uint8 and backing.nbytes == 1000
    assert backing.device_pointer == _address(memory.device_pointer)
    assert _address(memory.device_pointer) in manager.allocations


@host_backend_only
def test_memalloc_bytes_are_devmem_bytes(manager):
    memory = manager.memalloc(4096)
    address = _address(memory.device_pointer)
    pattern = (np.arange(4096) % 251).astype(np.uint8)
    ctypes.memmove(address, pattern.ctypes.data, pattern.nbytes)
    np.testing.assert_array_equal(manager.devmem_array(memory).copy_to_host(), pattern)

    manager.devmem_array(memory).copy_to_device(pattern[::-1].copy())
    assert ctypes.string_at(address, 4096) == pattern[::-1].tobytes()


@host_backend_only
def test_memalloc_views_follow_numba_refcounts(manager):
    memory = manager.memalloc(1024)
    root = memory._mem
    assert root.refct == 1
    view = memory.view(256)
    assert root.refct == 2
    assert _address(view.device_pointer) == _address(memory.device_pointer) + 256
    assert view.size == 768
    ctypes.memset(_address(view.device_pointer), 7, view.size)
    bytes_of_view = manager.devmem_array(view).copy_to_host()
    assert bytes_of_view.size == 768 and (bytes_of_view == 7).all()
    del view
    _collect()
    assert root.refct == 1
    assert manager.live_allocations == 1


def test_numba_device_array_accepts_the_memory(manager):
    memory = manager.memalloc(8 * 12)
    array = devicearray.DeviceNDArray(
        shape=(3, 4), strides=(32, 8), dtype=np.float64, gpu_data=memory
    )
    assert array.alloc_size == 96
    assert array.device_ctypes_pointer.value == manager.devmem_array(memory).device_pointer


def test_memalloc_uses_the_pool_and_finalizer_returns_memory(manager):
    devmem.flush_deallocations()
    stats = devmem.pool_statistics()
    memory = manager.memalloc(3000)
    after_first = devmem.pool_statistics()
    assert after_first["hits"] + after_first["misses"] == stats["hits"] + stats["misses"] + 1

    del memory
    _collect()
    assert manager.live_allocations == 0
    assert len(manager.allocations) == 0
    devmem.flush_deallocations()
    released = devmem.pool_statistics()
    assert released["cached_blocks"] == after_first["cached_blocks"] + 1

    again = manager.memalloc(3000)
    reused = devmem.pool_statistics()
    assert reused["hits"] == released["hits"] + 1
    assert reused["misses"] == released["misses"]
    assert reused["cached_blocks"] == released["cached_blocks"] - 1
    del again


def test_free_runs_the_finalizer_now(manager):
    memory = manager.memalloc(512)
    memory.free()
    assert manager.live_allocations == 0
    assert len(manager.allocations) == 0
    # as with Numba's own manager, the owned pointer now refers to a collected object
    with pytest.raises(ReferenceError):
        memory.free()


def test_memalloc_zero_allocates_nothing(manager):
    stats = devmem.pool_statistics()
    memory = manager.memalloc(0)
    assert memory.size == 0
    assert not memory.device_pointer_value
    assert memory.view(0).size == 0
    with pytest.raises(RuntimeError, match="non-empty slice into empty slice"):
        memory.view(0, 8)
    assert manager.live_allocations == 0
    assert devmem.pool_statistics() == stats


@pytest.mark.parametrize("method", ["memalloc", "memhostalloc"])
def test_negative_size_is_refused(manager, method):
    message = rf"{method}: size must be non-negative, got -1"
    with pytest.raises(devmem.InvalidArgument, match=message):
        getattr(manager, method)(-1)
    with pytest.raises(ValueError):
        getattr(manager, method)(-4096)
    with pytest.raises(TypeError, match=rf"{method}: size must be an integer.*float 1.5"):
        getattr(manager, method)(1.5)
    assert manager.live_allocations == 0


def test_mempin_negative_size_is_refused(manager):
    host = np.zeros(16, dtype=np.uint8)
    with pytest.raises(devmem.InvalidArgument, match=r"mempin: size must be non-negative, got -16"):
        manager.mempin(host, host.ctypes.data, -16)


def test_memalloc_too_large_is_out_of_memory(manager):
    total = devmem.memory_info().total
    with pytest.raises(MemoryError):
        manager.memalloc(total * 4)
    assert manager.live_allocations == 0


@host_backend_only
def test_allocates_on_the_device_of_its_numba_context():
    # Two simulated devices in a fresh process (the count is read when devmem starts). With a real
    # Numba context initialize() takes the device from context.device.id; here the plugin is
    # pointed at device 1 the same way, and each call must reach device 1 only.
    result = _run_child(
        """
        import gc
        import devmem
        from devmem.numba import DevmemMemoryManager

        assert devmem.device_count() == 2
        mm = DevmemMemoryManager(context=None)
        mm._device_index = 1  # what initialize() reads from Numba's context.device.id
        mm.initialize()
        free0 = devmem.memory_info().free
        with devmem.gpus[1]:
            assert devmem.memory_manager_name() == "pool"
            free1 = devmem.memory_info().free
        memory = mm.memalloc(1 << 20)
        assert devmem.memory_info().free == free0
        assert mm.get_memory_info().free == free1 - (1 << 20)
        with mm.defer_cleanup():
            del memory
            gc.collect()
            with devmem.gpus[1]:
                assert devmem.pending_deallocations() == 1
        mm.reset()
        with devmem.gpus[1]:
            assert devmem.pending_deallocations() == 0
            assert devmem.pool_statistics()["cached_blocks"] == 1
        print("device 1 only")
        """,
        DEVMEM_HOST_DEVICE_COUNT="2",
        DEVMEM_BACKEND="host",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "device 1 only"


# -- memory info, defer_cleanup, reset ----------------------------------------------------------


def test_get_memory_info_matches_devmem(manager):
    info = manager.get_memory_info()
    assert isinstance(info, cuda.MemoryInfo)
    expected = devmem.memory_info()
    assert (info.free, info.total) == (expected.free, expected.total)
    assert 0 <= info.free <= info.total


def test_defer_cleanup_nests_and_defers(manager):
    devmem.flush_deallocations()
    cached_before = devmem.pool_statistics()["cached_blocks"]
    with manager.defer_cleanup():
        assert manager.deallocations.is_disabled
        with manager.defer_cleanup():
            memory = manager.memalloc(2048)
            del memory
            _collect()
            assert manager.live_allocations == 0
            devmem.flush_deallocations()
            assert devmem.pending_deallocations() >= 1
        assert manager.deallocations.is_disabled
        devmem.flush_deallocations()
        assert devmem.pending_deallocations() >= 1
        assert devmem.pool_statistics()["cached_blocks"] == cached_before
    assert not manager.deallocations.is_disabled
    devmem.flush_deallocations()
    assert devmem.pending_deallocations() == 0
    assert devmem.pool_statistics()["cached_blocks"] == cached_before + 1


def test_defer_cleanup_restores_after_an_exception(manager):
    with pytest.raises(KeyError):
        with manager.defer_cleanup():
            raise KeyError("inside")
    assert not manager.deallocations.is_disabled
    memory = manager.memalloc(256)
    del memory
    _collect()
    devmem.flush_deallocations()
    assert devmem.pending_deallocations() == 0


def test_reset_frees_every_device_and_mapped_allocation(manager):
    devmem.flush_deallocations()
    cached_before = devmem.pool_statistics()["cached_bytes"]
    kept = [manager.memalloc(1 << 16), manager.memalloc(1 << 12)]
    mapped = manager.memhostalloc(1 << 12, mapped=True)
    assert manager.live_allocations == 2
    assert len(manager.allocations) == 3
    manager.reset()
    _collect()
    assert manager.live_allocations == 0
    assert len(manager.allocations) == 0
    assert devmem.pending_deallocations() == 0
    stats = devmem.pool_statistics()
    # the device blocks went back to the pool's cache (memory_info counts them as free)
    assert stats["cached_bytes"] >= cached_before + (1 << 16) + (1 << 12)
    del kept, mapped
    _collect()


# -- memhostalloc and mempin --------------------------------------------------------------------


def test_memhostalloc_pinned_is_a_numba_pinned_buffer(manager):
    memory = manager.memhostalloc(64)
    assert isinstance(memory, driver.PinnedMemory)
    assert memory.size == 64
    host = np.ndarray(shape=(8,), dtype=np.float64, buffer=memory)
    host[:] = np.arange(8)
    assert host.__array_interface__["data"][0] == _address(memory.host_pointer)
    raw = ctypes.string_at(_address(memory.host_pointer), 64)
    np.testing.assert_array_equal(np.frombuffer(raw, dtype=np.float64), np.arange(8))


def test_memhostalloc_zero_bytes(manager):
    memory = manager.memhostalloc(0)
    assert memory.size == 0
    assert np.ndarray(shape=(0,), dtype=np.uint8, buffer=memory).size == 0


@pytest.mark.parametrize("flags", [dict(portable=True), dict(wc=True)])
def test_memhostalloc_flags_without_mapping_still_pinned(manager, flags):
    memory = manager.memhostalloc(128, **flags)
    assert isinstance(memory, driver.PinnedMemory)
    host = np.ndarray(shape=(128,), dtype=np.uint8, buffer=memory)
    host[:] = 3
    assert ctypes.string_at(_address(memory.host_pointer), 128) == b"\x03" * 128


@host_backend_only
def test_memhostalloc_mapped_shares_bytes_with_the_device(manager):
    memory = manager.memhostalloc(80, mapped=True)
    assert isinstance(memory, driver.MappedOwnedPointer)
    assert isinstance(memory._mem, driver.MappedMemory)
    assert _address(memory.host_pointer) in manager.allocations
    # what numba.cuda.mapped_array does with the buffer
    host = np.ndarray(shape=(10,), dtype=np.int64, buffer=memory)
    mapped = np.ndarray.view(host, type=devicearray.MappedNDArray)
    mapped.device_setup(memory)
    host[:] = np.arange(10) * 3
    device_address = _address(memory.device_pointer)
    assert mapped.device_ctypes_pointer.value == device_address
    raw = ctypes.string_at(device_address, 80)
    np.testing.assert_array_equal(np.frombuffer(raw, dtype=np.int64), np.arange(10) * 3)
    del host, mapped, memory
    _collect()
    assert len(manager.allocations) == 0


def test_mempin_pins_until_numba_finalizes(manager):
    host = np.arange(256, dtype=np.float32)
    pinned = manager.mempin(host, host.ctypes.data, host.nbytes)
    assert isinstance(pinned, driver.PinnedMemory)
    assert pinned.owned is host
    assert _address(pinned.host_pointer) == host.ctypes.data
    # the memory is registered: registering it again is refused while the pin lives
    with pytest.raises(devmem.Error):
        devmem.HostRegistration(host.ctypes.data, host.nbytes)
    # Numba lifts a pin as soon as the object is finalized (never queued)
    with manager.defer_cleanup():
        del pinned
        _collect()
        again = devmem.HostRegistration(host.ctypes.data, host.nbytes)
        again.close()


def test_mempin_accepts_a_ctypes_pointer(manager):
    host = np.zeros(64, dtype=np.uint8)
    pinned = manager.mempin(host, ctypes.c_void_p(host.ctypes.data), host.nbytes)
    assert _address(pinned.host_pointer) == host.ctypes.data


@host_backend_only
def test_mempin_mapped_gives_the_device_address(manager):
    host = np.zeros(32, dtype=np.int32)
    memory = manager.mempin(host, host.ctypes.data, host.nbytes, mapped=True)
    assert isinstance(memory._mem, driver.MappedMemory)
    assert host.ctypes.data in manager.allocations
    ctypes.memset(_address(memory.device_pointer), 0x11, host.nbytes)
    assert (host == 0x11111111).all()
    del memory
    _collect()
    assert len(manager.allocations) == 0
    devmem.HostRegistration(host.ctypes.data, host.nbytes, mapped=True).close()


# -- IPC ----------------------------------------------------------------------------------------


def _devmem_ipc_or_skip(array):
    try:
        return devmem.ipc_handle(array)
    except devmem.Error as error:  # pragma: no cover - depends on the backend's IPC support
        pytest.skip(f"devmem cannot export this memory here: {error}")


def _handle_bytes(handle):
    """The 64 bytes of a Numba IPC handle: a ctypes array, or (numba-cuda, cuda-python bindings)
    a CUipcMemHandle whose bytes are its `reserved` field, read through its address where the
    binding has no such attribute (cuda-bindings 12.9.10, 13.5)."""
    reserved = getattr(handle, "reserved", None)
    if reserved is None and hasattr(handle, "getPtr"):
        return ctypes.string_at(handle.getPtr(), 64)
    if reserved is None:
        return bytes(handle)
    if isinstance(reserved, (bytes, bytearray)):
        return bytes(reserved)
    return bytes(value & 0xFF for value in reserved)


def test_get_ipc_handle_carries_devmems_handle(manager):
    memory = manager.memalloc(4096)
    expected = _devmem_ipc_or_skip(manager.devmem_array(memory))
    handle = manager.get_ipc_handle(memory)
    assert isinstance(handle, cuda.IpcHandle)
    assert handle.base is memory
    assert handle.size == 4096
    assert _handle_bytes(handle.handle) == bytes(expected.vendor_handle)
    assert handle.offset == expected.offset

    view = memory.view(512)
    view_handle = manager.get_ipc_handle(view)
    assert _handle_bytes(view_handle.handle) == bytes(expected.vendor_handle)
    assert view_handle.offset == expected.offset + 512
    assert view_handle.size == 4096 - 512


def _numba_can_pickle_ipc_handles():
    """Numba's IpcHandle.__reduce__ reads handle.reserved: numba-cuda with a cuda-bindings release
    whose CUipcMemHandle has no `reserved` attribute (12.9.10, 13.5) cannot pickle any IPC
    handle, its own included."""
    if not getattr(driver, "USE_NV_BINDING", True):
        return True
    return hasattr(driver.binding.CUipcMemHandle(), "reserved")


@pytest.mark.skipif(
    not _numba_can_pickle_ipc_handles(),
    reason="this Numba cannot pickle IPC handles: its IpcHandle.__reduce__ reads "
    "CUipcMemHandle.reserved, which this cuda-bindings release does not have",
)
def test_get_ipc_handle_survives_numbas_pickling(manager):
    memory = manager.memalloc(4096)
    expected = _devmem_ipc_or_skip(manager.devmem_array(memory))
    view_handle = manager.get_ipc_handle(memory.view(512))
    # Numba's serialisation keeps the bytes and the offset
    rebuilt = pickle.loads(pickle.dumps(view_handle))
    assert _handle_bytes(rebuilt.handle) == bytes(expected.vendor_handle)
    assert rebuilt.offset == view_handle.offset and rebuilt.size == view_handle.size


def test_get_ipc_handle_of_foreign_memory_is_refused(manager):
    foreign = driver.MemoryPointer(None, devmem_numba._device_pointer_object(0x1000), 64)
    with pytest.raises(devmem.InvalidArgument, match=r"0x1000 \(64 bytes\) is not in memory"):
        manager.get_ipc_handle(foreign)
    with pytest.raises(ValueError, match="not in memory allocated by this manager"):
        manager.devmem_array(foreign)


# -- with Numba's CUDA target (GPU only) ---------------------------------------------------------


@pytest.fixture
def numba_kernels():
    """Skips a kernel test where Numba cannot compile kernels at all (not devmem's failure)."""
    reason = devmem_numba.numba_kernel_problem()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def numba_on_devmem():
    """Numba's context of device 0, with a fresh plugin instance as its memory manager.

    The plugin is put on Numba's existing context instead of closing Numba's contexts to make a
    new one: numba-cuda's cuda.close() resets the device's primary context, which devmem's CUDA
    runtime shares, and that frees every devmem allocation, stream and registration behind
    devmem's back (docs/python.md#numba-plugin).
    """
    context = cuda.current_context()
    saved = context.memory_manager
    plugin = DevmemMemoryManager(context=context)
    plugin.initialize()
    context.memory_manager = plugin
    try:
        yield plugin
    finally:
        context.memory_manager = saved
        _collect()
        plugin.reset()


@needs_gpu
def test_gpu_kernel_writes_into_plugin_memory(numba_on_devmem, numba_kernels):
    @cuda.jit
    def fill(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = i * 2

    array = cuda.device_array(1000, dtype=np.int32)
    assert numba_on_devmem.live_allocations == 1
    fill[8, 128](array)
    cuda.synchronize()
    backing = numba_on_devmem.devmem_array(array.gpu_data)
    np.testing.assert_array_equal(backing.view(np.int32).copy_to_host(), np.arange(1000) * 2)
    np.testing.assert_array_equal(array.copy_to_host(), np.arange(1000) * 2)


@needs_gpu
def test_gpu_round_trip_and_pinned_mapped(numba_on_devmem, numba_kernels):
    source = np.random.default_rng(7).random((64, 33))
    device = cuda.to_device(source)
    assert numba_on_devmem.devmem_array(device.gpu_data).nbytes == source.nbytes
    np.testing.assert_array_equal(device.copy_to_host(), source)

    pinned = cuda.pinned_array(source.shape, dtype=source.dtype)
    device.copy_to_host(pinned)
    np.testing.assert_array_equal(pinned, source)

    mapped = cuda.mapped_array(16, dtype=np.float32)
    mapped[:] = 1.5

    @cuda.jit
    def double(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= 2

    double[1, 32](mapped)
    cuda.synchronize()
    np.testing.assert_array_equal(mapped, np.full(16, 3.0, dtype=np.float32))

    with cuda.pinned(source):
        np.testing.assert_array_equal(cuda.to_device(source).copy_to_host(), source)


@needs_gpu
def test_gpu_defer_cleanup_and_memory_info(numba_on_devmem):
    info = cuda.current_context().get_memory_info()
    assert info.total == devmem.memory_info().total
    with cuda.defer_cleanup():
        array = cuda.device_array(1 << 20, dtype=np.uint8)
        del array
        _collect()
        devmem.flush_deallocations()
        assert devmem.pending_deallocations() >= 1
    devmem.flush_deallocations()
    assert devmem.pending_deallocations() == 0


_IPC_CHILD = """
import json, pickle, sys
import numpy as np
from numba import cuda
handle = pickle.loads(sys.stdin.buffer.read())
with handle as array:
    sys.stdout.write(json.dumps(array.copy_to_host().tolist()))
"""


@needs_gpu
def test_gpu_ipc_handle_opens_in_another_process(numba_on_devmem):
    source = np.arange(64, dtype=np.float64)
    device = cuda.to_device(source)
    handle = device.get_ipc_handle()
    result = subprocess.run(
        [sys.executable, "-c", _IPC_CHILD],
        input=pickle.dumps(handle),
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout.decode()) == source.tolist()
