"""devmem.set_memory_manager(PluginClass): devmem's allocations through a memory manager written in
Python, in the shape of Numba's External Memory Management plugins (the other direction from
test_numba_plugin.py, where Numba allocates through devmem).

The plugins here hand out NumPy buffers, page-locked and mapped with devmem.HostRegistration: on the
host backend such memory is device memory, so the bytes can be checked. They run against a plain
Python class, against Numba's HostOnlyCUDAMemoryManager (Numba 0.56 under Debian's python3,
numba-cuda in the NumPy 2 environment), in threads, for 10^4 cycles and at interpreter exit.
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

import devmem

pytestmark = pytest.mark.skipif(
    devmem.backend_name() != "host",
    reason="the test plugins' memory is host memory, device memory on the host backend only "
    f"(devmem runs '{devmem.backend_name()}')",
)

MiB = 1 << 20


def take_block(size):
    """size bytes of memory that the host backend takes as device memory: (address, owner)."""
    buffer = np.empty(size + 256, dtype=np.uint8)
    address = (buffer.ctypes.data + 255) & ~255
    registration = devmem.HostRegistration(address, size, mapped=True)
    return registration.device_pointer, (buffer, registration)


def give_back_block(owner):
    owner[1].close()


NOTHING = object()


class PlainPointer:
    """A MemoryPointer-like object of a plugin without Numba: freed when it is collected."""

    def __init__(self, address, size, finalizer):
        self.device_pointer = address
        self.size = size
        self._finalizer = weakref.finalize(self, finalizer)


class PlainPlugin:
    """A memory manager in Numba's EMM shape, in plain Python."""

    interface_version = 1
    total = 64 * MiB

    def __init__(self, context):
        self.context = context
        self.lock = threading.Lock()
        self.initialized = 0
        self.allocs = []  # (address, size)
        self.frees = []
        self.live = {}
        self.memory_info_calls = 0
        self.fail_with = None  # an exception memalloc raises instead
        self.returns = NOTHING  # a value memalloc returns instead
        self.history = True  # False: counts only (the leak test must not grow lists)
        self.alloc_count = 0
        self.free_count = 0

    def initialize(self):
        self.initialized += 1

    def memalloc(self, size):
        if self.fail_with is not None:
            raise self.fail_with
        if self.returns is not NOTHING:
            return self.returns
        address, owner = take_block(size)
        with self.lock:
            self.alloc_count += 1
            if self.history:
                self.allocs.append((address, size))
            self.live[address] = size

        def free(address=address, size=size):
            give_back_block(owner)
            with self.lock:
                self.free_count += 1
                if self.history:
                    self.frees.append((address, size))
                del self.live[address]

        return PlainPointer(address, size, free)

    def get_memory_info(self):
        self.memory_info_calls += 1
        with self.lock:
            used = sum(self.live.values())
        return (self.total - used, self.total)

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    def reset(self):
        pass

    def defer_cleanup(self):
        raise NotImplementedError


@pytest.fixture
def restore_manager():
    """devmem's manager of the device as it was before the test, and its queue flushed."""
    saved = devmem.memory_manager_name()
    devmem.flush_deallocations()
    yield
    devmem.flush_deallocations()
    devmem.set_memory_manager(saved if "." not in saved else "direct")
    devmem.flush_deallocations()


def released(plugin):
    """Frees devmem still holds reach the plugin; returns its frees."""
    gc.collect()
    devmem.flush_deallocations()
    return plugin.frees


# -- a plain-Python plugin --------------------------------------------------------------------------


def test_allocations_and_frees_reach_the_plugin_with_their_sizes(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    assert isinstance(plugin, PlainPlugin)
    assert plugin.initialized == 1
    assert plugin.context is devmem.current_context()
    assert devmem.memory_manager_name() == f"{__name__}.PlainPlugin"
    assert devmem.current_context().memory_manager is plugin

    host = np.arange(1000, dtype=np.float64)
    d = devmem.to_device(host)
    e = devmem.device_array((3, 5), dtype=np.int32)
    assert plugin.allocs == [(d.device_pointer, 8000), (e.device_pointer, 60)]
    assert np.array_equal(d.copy_to_host(), host)
    # The memory is the plugin's: what devmem wrote is in the plugin's buffer.
    assert np.array_equal(np.ctypeslib.as_array(
        (ctypes.c_double * 1000).from_address(d.device_pointer)), host)
    assert devmem._devmem._python_memory_manager_live_blocks() == 2

    del d
    assert released(plugin) == [(plugin.allocs[0][0], 8000)]
    del e
    assert released(plugin) == [(plugin.allocs[0][0], 8000), (plugin.allocs[1][0], 60)]
    assert plugin.live == {}
    assert devmem._devmem._python_memory_manager_live_blocks() == 0


def test_empty_arrays_and_host_memory_do_not_reach_the_plugin(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    empty = devmem.device_array(0)
    pinned = devmem.pinned_array(100, dtype=np.uint8)
    mapped = devmem.mapped_array(100, dtype=np.uint8)
    assert empty.size == 0 and pinned.size == 100 and mapped.size == 100
    assert plugin.allocs == []


def test_memory_info_is_the_plugins(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    # set_memory_manager asks for the total (the deferred queue's byte limit is a share of it).
    assert plugin.memory_info_calls >= 1
    d = devmem.device_array(MiB, dtype=np.uint8)
    assert tuple(devmem.memory_info()) == (PlainPlugin.total - MiB, PlainPlugin.total)
    assert tuple(devmem.current_context().get_memory_info()) == (
        PlainPlugin.total - MiB, PlainPlugin.total)
    del d


def test_an_instance_is_used_as_it_is_and_replacing_it_restores_names(restore_manager):
    plugin = PlainPlugin(context=None)
    assert devmem.set_memory_manager(plugin) is plugin
    assert plugin.initialized == 1
    d = devmem.device_array(16)
    assert plugin.allocs == [(d.device_pointer, 128)]
    devmem.set_memory_manager("pool")
    assert devmem.memory_manager_name() == "pool"
    assert devmem._devmem._python_memory_manager() is None
    # An allocation keeps the manager that made it: its free still reaches the plugin.
    del d
    assert released(plugin) == [(plugin.allocs[0][0], 128)]


def test_get_memory_info_not_implemented_falls_back_to_the_backend(restore_manager):
    class NoInfo(PlainPlugin):
        def get_memory_info(self):
            raise NotImplementedError

    devmem.set_memory_manager("direct")
    backend_total = devmem.memory_info().total
    devmem.set_memory_manager(NoInfo)
    assert devmem.memory_info().total == backend_total


# -- errors -----------------------------------------------------------------------------------------


def test_an_error_in_memalloc_names_the_plugin_the_call_and_the_size(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    plugin.fail_with = ValueError("no blocks of that shape")
    with pytest.raises(devmem.Error) as info:
        devmem.device_array(25, dtype=np.float32)
    message = str(info.value)
    assert f"{__name__}.PlainPlugin: memalloc(100) raised ValueError: no blocks of that shape" in (
        message)
    assert isinstance(info.value.__cause__, ValueError)
    plugin.fail_with = None
    assert devmem.device_array(4).size == 4  # the manager still works


def test_memory_error_is_out_of_memory_after_one_retry(restore_manager):
    class Counting(PlainPlugin):
        calls = 0

        def memalloc(self, size):
            Counting.calls += 1
            raise MemoryError(f"pool exhausted, {size} bytes")

    devmem.set_memory_manager(Counting)
    with pytest.raises(devmem.OutOfMemory) as info:
        devmem.device_array(1000, dtype=np.uint8)
    assert isinstance(info.value, MemoryError)
    assert info.value.requested_bytes == 1000
    message = str(info.value)
    assert "1000 bytes" in message and "memalloc(1000) raised MemoryError" in message
    assert "pool exhausted, 1000 bytes" in message
    # devmem's rule for its own managers too: flush the deferred frees, ask exactly once more.
    assert Counting.calls == 2


@pytest.mark.parametrize(
    "returned, words",
    [
        (None, "returned None, which has no device address"),
        (PlainPointer(0, 64, lambda: None), "which has no device address"),
        (PlainPointer(4096, 8, lambda: None), "of size 8, less than the 64 bytes"),
        ("0x1000", "returned '0x1000', which has no device address"),
    ],
)
def test_a_bad_memalloc_result_is_refused_naming_it(restore_manager, returned, words):
    plugin = devmem.set_memory_manager(PlainPlugin)
    plugin.returns = returned
    with pytest.raises(devmem.Error, match="memalloc\\(64\\)") as info:
        devmem.device_array(8)
    assert words in str(info.value)


def test_a_block_handed_out_twice_is_refused(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    first = devmem.device_array(8)
    plugin.returns = PlainPointer(first.device_pointer, 64, lambda: None)
    with pytest.raises(devmem.Error, match=f"returned address {first.device_pointer:#x}, which it "
                       "already handed out"):
        devmem.device_array(8)
    plugin.returns = NOTHING
    del first
    assert len(released(plugin)) == 1


@pytest.mark.parametrize(
    "info, words",
    [
        ((-1, 10), "free=-1, total=10"),
        ((20, 10), "free=20, total=10"),
        ("lots", "returned 'lots', not MemoryInfo(free, total)"),
        (None, "returned None"),
    ],
)
def test_a_bad_get_memory_info_is_refused_on_install(restore_manager, info, words):
    class BadInfo(PlainPlugin):
        def get_memory_info(self):
            return info

    before = devmem.memory_manager_name()
    with pytest.raises(devmem.Error, match="get_memory_info\\(\\)") as raised:
        devmem.set_memory_manager(BadInfo)
    assert words in str(raised.value)
    assert devmem.memory_manager_name() == before


def test_the_interface_is_checked_as_numba_does(restore_manager):
    class Version2(PlainPlugin):
        interface_version = 2

    with pytest.raises(RuntimeError, match="Version2: EMM Plugin interface has version 2 - "
                       "version 1 required"):
        devmem.set_memory_manager(Version2)

    class NoMemalloc:
        interface_version = 1

        def __init__(self, context):
            pass

        def initialize(self):
            pass

    with pytest.raises(TypeError, match="NoMemalloc is not a memory manager: no memalloc, "
                       "get_memory_info"):
        devmem.set_memory_manager(NoMemalloc)

    with pytest.raises(TypeError, match="needs_two.*raised TypeError"):
        devmem.set_memory_manager(type("needs_two", (), {"__init__": lambda self, a, b: None}))

    with pytest.raises(devmem.InvalidArgument, match="unknown memory manager 'nonsense'"):
        devmem.set_memory_manager("nonsense")


# -- volume, threads, exit --------------------------------------------------------------------------


def test_ten_thousand_cycles_leak_nothing(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    plugin.history = False
    for _ in range(200):  # warm-up: caches of devmem, NumPy and the interpreter
        devmem.device_array(64, dtype=np.uint8)
    released(plugin)
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for i in range(10_000):
        d = devmem.device_array(64 + i % 7, dtype=np.uint8)
        del d
    devmem.flush_deallocations()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert plugin.alloc_count == plugin.free_count == 10_200
    assert plugin.live == {}
    assert devmem._devmem._python_memory_manager_live_blocks() == 0
    assert devmem.pending_deallocations() == 0
    # Python memory still allocated after the loop: one leaked object per cycle would be 10^4 of
    # them, at least 160 KiB (16 bytes each); one-time growth (dict resizes, free lists) measured
    # 15-33 KiB, the same after 10^5 cycles.
    assert after - before < 64 * 1024, f"{after - before} bytes of Python memory grew"


def test_threads_allocate_and_free_through_the_plugin(restore_manager):
    plugin = devmem.set_memory_manager(PlainPlugin)
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(300):
                values = rng.integers(0, 100, size=int(rng.integers(1, 64)))
                d = devmem.to_device(values)
                assert np.array_equal(d.copy_to_host(), values)
        except Exception as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert errors == []
    released(plugin)
    assert len(plugin.allocs) == 1200
    assert sorted(plugin.frees) == sorted(plugin.allocs)


def _run_child(code):
    package = os.path.dirname(os.path.dirname(os.path.abspath(devmem.__file__)))
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([package, here, os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_interpreter_exit_frees_what_was_released_and_runs_no_plugin_code_after():
    child = _run_child("""
        import atexit
        import devmem
        import numpy as np
        from test_memory_manager_plugin import PlainPlugin

        # Registered before devmem's hook, so it runs after it.
        atexit.register(lambda: print("at exit", len(plugin.allocs), len(plugin.frees),
                                      len(plugin.live), flush=True))
        plugin = devmem.set_memory_manager(PlainPlugin)
        kept = devmem.to_device(np.arange(100))          # alive at exit
        for _ in range(5):
            devmem.device_array(10)                        # released, still in devmem's queue
        assert devmem.pending_deallocations() == 5
        print("ok", flush=True)
    """)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split("\n")[:2] == ["ok", "at exit 6 5 1"], child.stdout
    assert child.stderr == ""


def test_exit_while_a_daemon_thread_allocates_through_the_plugin():
    child = _run_child("""
        import threading
        import devmem
        import numpy as np
        from test_memory_manager_plugin import PlainPlugin

        devmem.set_memory_manager(PlainPlugin)
        started = threading.Event()

        def churn():
            started.set()
            while True:
                devmem.to_device(np.arange(1000)).copy_to_host()

        threading.Thread(target=churn, daemon=True).start()
        started.wait()
        print("exiting", flush=True)
    """)
    assert child.returncode == 0, (child.returncode, child.stderr)
    assert child.stdout == "exiting\n"


# -- Numba's EMM classes ----------------------------------------------------------------------------


def numba_driver():
    numba = pytest.importorskip("numba", reason="needs Numba (Debian's python3-numba, or "
                                "numba-cuda in the NumPy 2 environment)")
    from numba import cuda
    from numba.cuda.cudadrv import driver

    return numba, cuda, driver


def make_numba_plugin(cuda, driver):
    """A plugin as Numba's own manager and RMM's are written: HostOnlyCUDAMemoryManager,
    AutoFreePointer and own(), the block freed by the pointer's finalizer. (Not through Numba's
    _PendingDeallocs: Numba 0.56's logs with a logger its driver makes on initialisation, which
    needs CUDA.)"""

    class NumbaStylePlugin(cuda.HostOnlyCUDAMemoryManager):
        total = 32 * MiB

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.allocs = []
            self.frees = []
            self.blocks = {}

        def initialize(self):
            self.capacity = self.get_memory_info().total

        def memalloc(self, size):
            address, owner = take_block(size)
            self.blocks[address] = (owner, size)
            self.allocs.append((address, size))

            def finalizer():
                self.allocations.pop(address, None)
                self._free(address)

            mem = driver.AutoFreePointer(self.context, ctypes.c_void_p(address), size,
                                         finalizer=finalizer)
            self.allocations[address] = mem
            return mem.own()

        def _free(self, address):
            owner, size = self.blocks.pop(address)
            give_back_block(owner)
            self.frees.append((address, size))

        def get_memory_info(self):
            used = sum(size for _, size in self.blocks.values())
            return cuda.MemoryInfo(free=self.total - used, total=self.total)

        def get_ipc_handle(self, memory):
            raise NotImplementedError

        @property
        def interface_version(self):
            return 1

    return NumbaStylePlugin


def test_numba_host_only_manager_subclass(restore_manager):
    numba, cuda, driver = numba_driver()
    plugin_class = make_numba_plugin(cuda, driver)
    plugin = devmem.set_memory_manager(plugin_class)
    assert isinstance(plugin, cuda.BaseCUDAMemoryManager)
    assert plugin.capacity == plugin_class.total  # initialize() ran
    host = np.linspace(0.0, 1.0, 513)
    d = devmem.to_device(host)
    assert plugin.allocs == [(d.device_pointer, host.nbytes)]
    assert np.array_equal(d.copy_to_host(), host)
    assert tuple(devmem.memory_info()) == (plugin_class.total - host.nbytes, plugin_class.total)
    del d
    gc.collect()
    devmem.flush_deallocations()
    assert plugin.frees == plugin.allocs
    assert plugin.blocks == {}

    for i in range(2000):
        devmem.device_array(100 + i % 3, dtype=np.uint8)
    devmem.current_context().reset()  # the deferred frees, then the plugin's reset()
    assert len(plugin.allocs) == 2001
    assert sorted(plugin.frees) == sorted(plugin.allocs)
    assert devmem._devmem._python_memory_manager_live_blocks() == 0


def test_numba_version_check_and_cuda_api_out_of_memory(restore_manager):
    numba, cuda, driver = numba_driver()
    plugin_class = make_numba_plugin(cuda, driver)

    class Version2(plugin_class):
        @property
        def interface_version(self):
            return 2

    with pytest.raises(RuntimeError, match="version 2 - version 1 required"):
        devmem.set_memory_manager(Version2)

    class Exhausted(plugin_class):
        def memalloc(self, size):
            raise driver.CudaAPIError(2, f"Call to cuMemAlloc results in "
                                         f"CUDA_ERROR_OUT_OF_MEMORY ({size} bytes)")

    devmem.set_memory_manager(Exhausted)
    with pytest.raises(devmem.OutOfMemory, match="memalloc\\(4096\\) raised CudaAPIError"):
        devmem.device_array(512)
