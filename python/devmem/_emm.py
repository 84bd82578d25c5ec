"""devmem.set_memory_manager(PluginClass): a memory manager written in Python, in the shape of
Numba's External Memory Management (EMM) plugins, behind devmem's allocations.

The plugin is Numba's kind (``numba.cuda.HostOnlyCUDAMemoryManager`` /
``BaseCUDAMemoryManager`` subclasses, RMM's ``RMMNumbaManager``) or any class with the same
methods; Numba is not needed. devmem calls ``memalloc(size)`` for device memory and drops the
returned MemoryPointer to free it, and ``get_memory_info()``; the C++ side
(python/src/python_memory_manager.cpp) calls the adapter below from whatever thread allocates or
frees, with the GIL taken. docs/python.md#python-memory-manager describes the behaviour.
"""

import atexit
import ctypes
import operator
import threading

from . import _devmem

# Numba's EMM interface version, the one plugins declare.
EMM_INTERFACE_VERSION = 1

_REQUIRED_METHODS = ("memalloc", "get_memory_info", "initialize")

_exit_hook_lock = threading.Lock()
_exit_hook_registered = False


def _plugin_name(plugin):
    cls = type(plugin)
    return f"{cls.__module__}.{cls.__qualname__}"


def _pointer_address(pointer):
    """The integer address of a device pointer: an int, a ctypes pointer or integer, or an object
    int() accepts (cuda-python's CUdeviceptr); None for anything else."""
    if isinstance(pointer, int):
        return pointer
    if isinstance(pointer, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64)):
        return pointer.value or 0
    try:
        return int(pointer)
    except (TypeError, ValueError):
        return None


def _out_of_memory(error):
    """Whether the plugin's exception says the device has no room: a MemoryError, or Numba's
    CudaAPIError with CUDA_ERROR_OUT_OF_MEMORY (code 2), which Numba's own manager retries on."""
    if isinstance(error, MemoryError):
        return True
    if type(error).__name__ == "CudaAPIError":
        try:
            return int(getattr(error, "code", -1)) == 2
        except (TypeError, ValueError):
            return False
    return False


class PluginAdapter:
    """What the C++ manager calls: allocate(bytes) -> (address, keep), memory_info() ->
    (free, total) or None. Turns the plugin's answers into those, and its failures into devmem
    exceptions naming the plugin, the call and the values."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.name = _plugin_name(plugin)

    def allocate(self, size):
        call = f"memory manager {self.name}: memalloc({size})"
        try:
            memory = self.plugin.memalloc(size)
        except Exception as error:
            if _out_of_memory(error):
                raise _devmem.OutOfMemory(
                    f"{call} raised {type(error).__name__}: {error}") from error
            raise _devmem.Error(f"{call} raised {type(error).__name__}: {error}") from error
        value = getattr(memory, "device_pointer_value", None)
        address = value if isinstance(value, int) else None
        if address is None:
            pointer = getattr(memory, "device_pointer", None)
            address = None if pointer is None else _pointer_address(pointer)
        if address is None or address <= 0:
            raise _devmem.Error(
                f"{call} returned {memory!r}, which has no device address (want a "
                "MemoryPointer: a non-zero device_pointer or device_pointer_value)")
        got = getattr(memory, "size", size)
        try:
            got = operator.index(got)
        except TypeError:
            got = None
        if got is None or got < size:
            raise _devmem.Error(
                f"{call} returned a MemoryPointer of size {getattr(memory, 'size', None)!r}, "
                f"less than the {size} bytes asked for")
        return address, memory

    def memory_info(self):
        try:
            info = self.plugin.get_memory_info()
        except NotImplementedError:
            return None  # allowed by Numba's interface: devmem asks the backend instead
        except Exception as error:
            raise _devmem.Error(
                f"memory manager {self.name}: get_memory_info() raised "
                f"{type(error).__name__}: {error}") from error
        try:
            free, total = (operator.index(v) for v in (info.free, info.total))
        except (AttributeError, TypeError):
            try:
                free, total = (operator.index(v) for v in info)
            except (TypeError, ValueError):
                raise _devmem.Error(
                    f"memory manager {self.name}: get_memory_info() returned {info!r}, not "
                    "MemoryInfo(free, total) in bytes") from None
        if not 0 <= free <= total:
            raise _devmem.Error(
                f"memory manager {self.name}: get_memory_info() returned free={free}, "
                f"total={total}: want 0 <= free <= total")
        return free, total


def _context_for_plugin():
    # Numba hands its plugins the Context; devmem's Numba-shaped one is the closest (same
    # get_memory_info, device, deallocations).
    from ._numba_names import current_context

    return current_context()


def make_plugin(manager):
    """The plugin instance for `manager`: a class is instantiated with context=... as Numba
    does, an instance is used as it is. Checks the interface and calls initialize()."""
    if isinstance(manager, type):
        try:
            plugin = manager(context=_context_for_plugin())
        except Exception as error:
            raise TypeError(
                f"set_memory_manager: {manager.__module__}.{manager.__qualname__}(context=...) "
                f"raised {type(error).__name__}: {error}") from error
    else:
        plugin = manager
    name = _plugin_name(plugin)
    missing = [m for m in _REQUIRED_METHODS if not callable(getattr(plugin, m, None))]
    if missing:
        raise TypeError(
            f"set_memory_manager: {name} is not a memory manager: no {', '.join(missing)} "
            "(give a manager name such as 'pool', or a class in the shape of "
            "numba.cuda.HostOnlyCUDAMemoryManager)")
    version = getattr(plugin, "interface_version", None)
    if version != EMM_INTERFACE_VERSION:
        # Numba's own wording, with the plugin's name.
        raise RuntimeError(
            f"set_memory_manager: {name}: EMM Plugin interface has version {version!r} - "
            f"version {EMM_INTERFACE_VERSION} required")
    plugin.initialize()
    return plugin


def _detach_at_exit():
    _devmem._detach_python_memory_managers()


def install(manager):
    """devmem.set_memory_manager for a plugin class or instance: returns the plugin."""
    global _exit_hook_registered
    plugin = make_plugin(manager)
    adapter = PluginAdapter(plugin)
    with _exit_hook_lock:
        if not _exit_hook_registered:
            # Registered on the first install, so it runs before the atexit hooks registered
            # earlier (an application's leak check of its plugin, say): deferred frees reach the
            # plugin while Python still runs, and no plugin code runs after it.
            atexit.register(_detach_at_exit)
            _exit_hook_registered = True
    _devmem._install_python_memory_manager(adapter, adapter.name)
    return plugin


def current_plugin():
    """The plugin of the current context, or None when its manager is one of devmem's."""
    adapter = _devmem._python_memory_manager()
    return None if adapter is None else adapter.plugin
