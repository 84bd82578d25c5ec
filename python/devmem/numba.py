"""Numba External Memory Management (EMM) plugin: Numba's CUDA target allocates through devmem.

``numba.cuda.set_memory_manager(devmem.numba.DevmemMemoryManager)`` (or
``use_devmem_for_numba()``, or ``NUMBA_CUDA_MEMORY_MANAGER=devmem.numba`` in the environment)
makes every device array, mapped array and pinned array that Numba creates from then on come from
devmem's memory manager (its pool by default), and every release go through devmem's deferred
deallocation queue. The plugin implements version 1 of Numba's EMM interface; see
docs/python.md#numba-plugin for the behaviour of each method.

Importing this module imports Numba; ``import devmem`` alone does not.
"""

import contextlib
import ctypes
import operator
import os
import weakref

import numpy as np
from numba import cuda as _cuda
from numba.cuda.cudadrv import driver as _driver

import devmem as _devmem

__all__ = ["DevmemMemoryManager", "numba_kernel_problem", "use_devmem_for_numba"]

# Numba's EMM interface version this plugin implements.
_EMM_INTERFACE_VERSION = 1

# CU_IPC_HANDLE_SIZE of cuda.h: the bytes of a CUipcMemHandle.
_CU_IPC_HANDLE_SIZE = 64


def _uses_nv_binding():
    """Whether Numba talks to CUDA through NVIDIA's cuda-python bindings.

    Numba's own CUDA target chose with USE_NV_BINDING (ctypes by default); numba-cuda always uses
    the bindings and no longer has the flag (seen with numba-cuda on an H100, CUDA 13).
    """
    return getattr(_driver, "USE_NV_BINDING", True)


def _drvapi():
    """Numba's ctypes declarations of the driver API, for Numba's ctypes binding only: imported
    when used, since numba-cuda deprecates the module (a DeprecationWarning on import)."""
    from numba.cuda.cudadrv import drvapi

    return drvapi


def _device_pointer_object(value):
    """The pointer object Numba's MemoryPointer expects for a device address."""
    if _uses_nv_binding():
        return _driver.binding.CUdeviceptr(value)
    return _drvapi().cu_device_ptr(value)


def _host_pointer_object(value):
    """The pointer object Numba's PinnedMemory and MappedMemory expect for a host address."""
    if _uses_nv_binding():
        return value
    return ctypes.c_void_p(value)


def _address(pointer):
    """The integer address of a pointer given as an int, a ctypes pointer or a binding object."""
    if isinstance(pointer, int):
        return pointer
    value = getattr(pointer, "value", None)
    if value is not None or isinstance(pointer, (ctypes.c_void_p, ctypes.c_size_t)):
        return value or 0
    return int(pointer)


def _checked_size(method, size):
    """size as an int; TypeError for a non-integer, devmem.InvalidArgument for a negative one."""
    try:
        value = operator.index(size)
    except TypeError:
        raise TypeError(
            f"DevmemMemoryManager.{method}: size must be an integer number of bytes, "
            f"got {type(size).__name__} {size!r}"
        ) from None
    if value < 0:
        raise _devmem.InvalidArgument(
            f"DevmemMemoryManager.{method}: size must be non-negative, got {value} bytes"
        )
    return value


def _data_address(host_array):
    return host_array.__array_interface__["data"][0]


class _DevmemMappedMemory(_driver.MappedMemory):
    """Numba's MappedMemory for host memory that devmem has already mapped.

    Numba's own constructor asks the CUDA driver (cuMemHostGetDevicePointer) for the device
    address; devmem already knows it, on every backend, so this constructor takes it and sets the
    same attributes without a driver call. Everything else (refcounting, own(), the buffer
    protocol of the owned pointer) is Numba's.
    """

    def __init__(self, context, host_address, device_address, size, owner=None, finalizer=None):
        self.owned = owner
        self.host_pointer = _host_pointer_object(host_address)
        self._bufptr_ = host_address
        devptr = _device_pointer_object(device_address)
        self.device_pointer = devptr
        _driver.AutoFreePointer.__init__(self, context, devptr, size, finalizer=finalizer)
        self.handle = self.host_pointer
        self._buflen_ = self.size


class DevmemMemoryManager(_driver.HostOnlyCUDAMemoryManager):
    """Numba EMM plugin (interface version 1) that allocates through devmem.

    One instance serves one Numba context (one device). Device memory comes from
    ``devmem.device_array``, pinned host memory from ``devmem.pinned_array``, mapped host memory
    from ``devmem.mapped_array`` and temporary page-locking from ``devmem.HostRegistration``. The
    devmem objects are kept alive until Numba's finalizer for the memory runs, and are then
    released into devmem's deferred deallocation queue, so ``numba.cuda.defer_cleanup()`` and
    ``devmem.defer_cleanup()`` defer the same frees.

    Thread safety: as Numba's own memory manager, an instance is used by Numba's context under
    the GIL; it adds no locking of its own.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Base address -> (devmem.DeviceNDArray, requested bytes) for every live memalloc block;
        # get_ipc_handle and devmem_array look blocks up here.
        self._device_blocks = {}
        self._initialized = False
        self._device_index = None

    # -- helpers ---------------------------------------------------------------------------

    def _context_proxy(self):
        # Numba's memory objects hold a weak proxy of the context; a plugin made with
        # context=None (as numba.cuda.set_memory_manager does to read the version) has none.
        return None if self.context is None else weakref.proxy(self.context)

    def _device_scope(self):
        """Makes devmem's device the one of this plugin's Numba context while it is active."""
        if self._device_index is None or _devmem.device_count() <= 1:
            return contextlib.nullcontext()
        return _devmem.gpus[self._device_index]

    def _find_block(self, method, memory):
        """(base, devmem array, bytes) of the memalloc block containing memory's first byte."""
        address = _address(memory.device_pointer)
        for base, (array, nbytes) in self._device_blocks.items():
            if base <= address < base + nbytes:
                return base, array, nbytes
        raise _devmem.InvalidArgument(
            f"DevmemMemoryManager.{method}: device address {address:#x} "
            f"({getattr(memory, 'size', '?')} bytes) is not in memory allocated by this manager "
            f"({len(self._device_blocks)} live blocks)"
        )

    # -- EMM interface -----------------------------------------------------------------------

    def initialize(self):
        """Prepares devmem for this Numba context; may be called any number of times.

        Selects devmem's ``pool`` manager when the user has not chosen one (neither
        ``DEVMEM_MEMORY_MANAGER`` is set nor a manager other than the default ``direct`` is
        installed). With a real Numba CUDA context, devmem must run its ``cuda`` backend:
        otherwise the addresses handed to Numba's kernels would not be device memory, and
        RuntimeError says so.
        """
        if self._initialized:
            return
        if self.context is not None:
            backend = _devmem.backend_name()
            if backend != "cuda":
                raise RuntimeError(
                    "devmem.numba.DevmemMemoryManager: Numba's CUDA target needs devmem's 'cuda' "
                    f"backend, but devmem runs the '{backend}' backend (compiled: "
                    f"{', '.join(_devmem.compiled_backends())}; set DEVMEM_BACKEND=cuda)"
                )
            self._device_index = int(self.context.device.id)
        with self._device_scope():
            if not os.environ.get("DEVMEM_MEMORY_MANAGER") and (
                _devmem.memory_manager_name() == "direct"
            ):
                _devmem.set_memory_manager("pool")
        self._initialized = True

    def memalloc(self, size):
        """size bytes of device memory from devmem, as Numba's owned MemoryPointer."""
        size = _checked_size("memalloc", size)
        ctx = self._context_proxy()
        if size == 0:
            # Numba represents empty device memory by a NULL MemoryPointer without a finalizer
            # (DeviceNDArray never asks the manager for 0 bytes); nothing to allocate.
            return _driver.MemoryPointer(ctx, _device_pointer_object(0), 0)
        with self._device_scope():
            array = _devmem.device_array(size, dtype=np.uint8)
        address = array.device_pointer
        blocks = self._device_blocks
        blocks[address] = (array, size)
        allocations = self.allocations

        def release():
            # Numba's finalizer: forget the pointer and drop the devmem array, which queues the
            # free in devmem's deferred deallocation queue (so defer_cleanup defers it).
            allocations.pop(address, None)
            blocks.pop(address, None)

        mem = _driver.AutoFreePointer(ctx, _device_pointer_object(address), size, finalizer=release)
        self.allocations[address] = mem
        return mem.own()

    def memhostalloc(self, size, mapped=False, portable=False, wc=False):
        """size bytes of page-locked host memory from devmem.

        Returns Numba's PinnedMemory, or with mapped=True an owned MappedMemory whose device
        pointer is devmem's mapping of the buffer. portable or wc without mapped are honoured by
        allocating mapped memory (devmem's pinned_array takes no flags), returned as PinnedMemory.
        """
        size = _checked_size("memhostalloc", size)
        ctx = self._context_proxy()
        # Numba's buffer protocol (mviewbuf) dereferences the address even for an empty buffer,
        # so a request for 0 bytes still gets one byte of real memory behind it.
        alloc_bytes = max(size, 1)
        with self._device_scope():
            if mapped or portable or wc:
                host = _devmem.mapped_array(
                    alloc_bytes, dtype=np.uint8, portable=bool(portable), wc=bool(wc)
                )
            else:
                host = _devmem.pinned_array(alloc_bytes, dtype=np.uint8)
        host_address = _data_address(host)
        holder = [host]

        if not mapped:

            def release_pinned():
                holder.clear()

            return _driver.PinnedMemory(
                ctx, _host_pointer_object(host_address), size, finalizer=release_pinned
            )

        device_address = host.device_array().device_pointer
        allocations = self.allocations

        def release_mapped():
            allocations.pop(host_address, None)
            holder.clear()

        mem = _DevmemMappedMemory(ctx, host_address, device_address, size, finalizer=release_mapped)
        self.allocations[host_address] = mem
        return mem.own()

    def mempin(self, owner, pointer, size, mapped=False):
        """Page-locks size bytes of existing host memory at pointer (owned by owner).

        The registration is a devmem.HostRegistration, lifted as soon as Numba finalizes the
        returned object (not queued, as in Numba), so the same memory can be pinned again.
        """
        size = _checked_size("mempin", size)
        address = _address(pointer)
        ctx = self._context_proxy()
        with self._device_scope():
            registration = _devmem.HostRegistration(address, size, mapped=bool(mapped))

        if not mapped:
            return _driver.PinnedMemory(
                ctx, _host_pointer_object(address), size, owner=owner, finalizer=registration.close
            )

        allocations = self.allocations

        def unpin_mapped():
            allocations.pop(address, None)
            registration.close()

        mem = _DevmemMappedMemory(
            ctx, address, registration.device_pointer, size, owner=owner, finalizer=unpin_mapped
        )
        self.allocations[address] = mem
        return mem.own()

    def get_memory_info(self):
        """Numba's MemoryInfo(free, total) from devmem.memory_info() (pool caches count as free)."""
        with self._device_scope():
            info = _devmem.memory_info()
        return _driver.MemoryInfo(free=int(info.free), total=int(info.total))

    def get_ipc_handle(self, memory):
        """Numba's IpcHandle for device memory from memalloc (or a view of it).

        The handle bytes and the offset come from devmem.ipc_handle of the devmem array behind
        the memory, so a pool block inside a larger vendor allocation gets the right offset.
        """
        base, array, _ = self._find_block("get_ipc_handle", memory)
        with self._device_scope():
            exported = _devmem.ipc_handle(array)
        vendor = bytes(exported.vendor_handle)
        if _uses_nv_binding():
            handle = _driver.binding.CUipcMemHandle()
            # The handle's bytes are its struct (char reserved[64]): written through its address,
            # since the `reserved` attribute exists in some cuda-bindings releases only (13.0, not
            # 12.9.10 or 13.5).
            if len(vendor) > _CU_IPC_HANDLE_SIZE:
                raise _devmem.InvalidArgument(
                    f"get_ipc_handle: devmem's handle has {len(vendor)} bytes, more than the "
                    f"{_CU_IPC_HANDLE_SIZE} of CUDA's IPC handle"
                )
            ctypes.memmove(handle.getPtr(), vendor, len(vendor))
        else:
            handle = _drvapi().cu_ipc_mem_handle.from_buffer_copy(vendor)
        offset = int(exported.offset) + (_address(memory.device_pointer) - base)
        source_info = None
        if self.context is not None:
            source_info = self.context.device.get_device_identity()
        return _driver.IpcHandle(memory, handle, memory.size, source_info, offset=offset)

    def reset(self):
        """Frees every device and mapped allocation of this manager and flushes devmem's queue.

        As in Numba, arrays still using that memory are left dangling. Pinned (unmapped) host
        memory lives as long as the host arrays using it. Nothing is freed inside defer_cleanup.
        """
        super().reset()
        self._device_blocks.clear()
        with self._device_scope():
            _devmem.flush_deallocations()

    @contextlib.contextmanager
    def defer_cleanup(self):
        """Context manager: while active, neither devmem nor Numba frees anything; nests."""
        with super().defer_cleanup():
            with self._device_scope():
                scope = _devmem.defer_cleanup()
            with scope:
                yield

    @property
    def interface_version(self):
        return _EMM_INTERFACE_VERSION

    # -- devmem additions -----------------------------------------------------------------------

    def devmem_array(self, memory):
        """The devmem DeviceNDArray (uint8, 1-D) of the bytes of memory from memalloc.

        memory may be the pointer memalloc returned or a view of it; the result shares its
        memory and covers memory.size bytes. devmem.InvalidArgument when the memory is not from
        this manager.
        """
        base, array, _ = self._find_block("devmem_array", memory)
        start = _address(memory.device_pointer) - base
        return array[start : start + memory.size]

    @property
    def live_allocations(self):
        """Number of device blocks from memalloc that Numba has not released yet."""
        return len(self._device_blocks)


def use_devmem_for_numba():
    """Makes Numba contexts created from now on allocate through devmem (DevmemMemoryManager).

    Contexts that already exist keep their manager, as with numba.cuda.set_memory_manager.
    """
    _cuda.set_memory_manager(DevmemMemoryManager)


# NUMBA_CUDA_MEMORY_MANAGER=devmem.numba makes Numba load the plugin from this name.
_numba_memory_manager = DevmemMemoryManager


def numba_kernel_problem():
    """Why Numba cannot run a kernel on this machine by itself (a string), or None when it can.

    Compiles and runs a four-element kernel on memory Numba allocates itself (through whatever
    memory manager its current context has). Some numba-cuda releases register ``np.row_stack``
    at their first compilation, and under a NumPy without it (NumPy 2.5) no kernel compiles, with
    or without devmem; the GPU proof and the package's tests use this to report such a machine as
    skipped instead of blaming devmem. Needs a CUDA GPU that Numba sees.
    """
    try:

        @_cuda.jit
        def plus_one(a):
            i = _cuda.grid(1)
            if i < a.size:
                a[i] += 1

        a = _cuda.to_device(np.zeros(4, dtype=np.int32))
        plus_one[1, 4](a)
        got = a.copy_to_host().tolist()
    except Exception as error:  # noqa: BLE001 - any failure of Numba alone is the answer
        reason = f"{type(error).__name__}: {error}"
        return f"Numba cannot run a kernel here even without devmem: {reason}"
    if got != [1, 1, 1, 1]:
        return f"a Numba kernel on Numba's own memory computed {got}, not [1, 1, 1, 1]"
    return None
