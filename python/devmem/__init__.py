"""devmem: one API for GPU device memory (CUDA, ROCm, or the host backend), with Numba's names.

The calls mirror ``numba.cuda``'s memory API::

    import numpy as np
    import devmem

    a = np.arange(10.0)
    d = devmem.to_device(a)          # host -> device
    d[2:5] = 0                       # slicing gives views; assignment copies
    b = d.copy_to_host()             # device -> host

The backend (host, cuda or roc) is chosen when devmem is built, and at run time among the
compiled ones by ``DEVMEM_BACKEND``. See docs/python.md for the whole package, including the
Numba memory-manager plugin in ``devmem.numba``.
"""

from collections.abc import Sequence as _Sequence

import numpy as _np

from ._devmem import (  # noqa: F401  (re-exported)
    BackendError,
    Device,
    DeviceNDArray,
    Error,
    Event,
    HostRegistration,
    InvalidArgument,
    IpcHandle,
    NoDevice,
    OutOfMemory,
    Stream,
    __version__,
    as_cuda_array,
    as_device_array,
    backend_name,
    compiled_backends,
    default_stream,
    external_stream,
    defer_cleanup,
    device_array,
    device_array_like,
    device_count,
    device_statistics,
    event,
    event_elapsed_time,
    flush_deallocations,
    from_dlpack,
    get_current_device,
    ipc_handle,
    ipc_supported,
    is_device_array,
    mapped,
    memory_info,
    memory_manager_name,
    pending_deallocations,
    pinned,
    pinned_array,
    pool_statistics,
    select_device,
    stream,
    summarize_trace,
    synchronize,
    to_device,
    tracing,
)
from . import _devmem
from ._numba_names import (  # noqa: F401  (re-exported)
    Context,
    asarray,
    asnumpy,
    close,
    current_context,
    detect,
    from_cuda_array_interface,
    is_available,
    legacy_default_stream,
    mapped_array_like,
    open_ipc_array,
    per_thread_default_stream,
    pinned_array_like,
)
from . import _numba_names

def set_memory_manager(manager):
    """Selects the current context's memory manager, for allocations made from now on.

    ``manager`` is the name of one of devmem's managers ("direct", "pool", "async", "managed",
    or a composition such as "statistics:pool"), or a memory manager written in Python in the
    shape of Numba's External Memory Management plugins (a ``numba.cuda.HostOnlyCUDAMemoryManager``
    subclass, or any class with ``memalloc``, ``get_memory_info``, ``initialize`` and
    ``interface_version`` 1): a class is instantiated with ``context=`` as Numba does, an instance
    is used as it is. Device memory then comes from the plugin's ``memalloc`` and goes back when
    devmem drops the returned MemoryPointer (docs/python.md#python-memory-manager). Returns the
    plugin (None for a name)."""
    if isinstance(manager, str):
        _devmem.set_memory_manager(manager)
        return None
    from . import _emm

    return _emm.install(manager)


#: Numba's name for is_device_array (True for devmem's arrays on every backend, and for any
#: object with __cuda_array_interface__).
is_cuda_array = is_device_array

# Numba's Stream methods, written in Python (they call back into Python from a thread).
Stream.add_callback = _numba_names.add_callback
Stream.async_done = _numba_names.async_done

#: Numba calls a structured scalar on the device a DeviceRecord; devmem's is a 0-d DeviceNDArray.
DeviceRecord = DeviceNDArray


class _HostDeviceNDArray(_np.ndarray):
    """An ndarray whose bytes the device addresses too (mapped or managed memory): also a device
    array through the DeviceNDArray viewing the same bytes."""

    # Numba's markers of device memory (auto_device returns such objects as they are).
    __cuda_memory__ = True
    __cuda_ndarray__ = True

    def __array_finalize__(self, obj):
        if obj is None:
            return
        # A slice or view: remember the mapped allocation it came from.
        self._devmem_root = getattr(obj, "_devmem_root", None)

    def device_array(self):
        """The DeviceNDArray viewing this array's bytes (no copy)."""
        root = getattr(self, "_devmem_root", None)
        if root is None:
            raise ValueError("this {} has lost its mapping (made by NumPy, not by devmem's "
                             "mapped_array or managed_array)".format(type(self).__name__))
        host_root, device_root = root
        offset = (self.__array_interface__["data"][0]
                  - host_root.__array_interface__["data"][0])
        if (offset == 0 and self.shape == host_root.shape and self.strides == host_root.strides
                and self.dtype == host_root.dtype):
            return device_root
        return _devmem._device_view(device_root, offset, self.shape, self.strides, self.dtype)

    @property
    def __cuda_array_interface__(self):
        return self.device_array().__cuda_array_interface__

    @property
    def stream(self):
        """The stream given to mapped_array (the default stream when none was)."""
        return self.device_array().stream

    @property
    def device_ctypes_pointer(self):
        return self.device_array().device_ctypes_pointer

    def copy_to_host(self, ary=None, stream=0):
        """Numba's DeviceNDArray.copy_to_host: a new NumPy array, or into ``ary``."""
        return self.device_array().copy_to_host(ary, stream)

    def copy_to_device(self, ary, stream=0):
        """Numba's DeviceNDArray.copy_to_device: copies host or device data into this array."""
        self.device_array().copy_to_device(ary, stream)


class MappedNDArray(_HostDeviceNDArray):
    """A NumPy array in page-locked host memory that the device can address (Numba's
    MappedNDArray). ``device_array()`` gives the device view of the same bytes; unlike Numba's,
    slices and views of a mapped array keep a working device view. Like Numba's it is also a
    device array: ``copy_to_host``, ``copy_to_device``, ``stream``, ``is_device_array``,
    ``to_device`` (returns it), ``as_cuda_array`` and, on GPU backends, the CUDA Array
    Interface."""


def mapped_array(shape, dtype=_np.float64, strides=None, order="C", stream=0, portable=False,
                 wc=False):
    """A MappedNDArray: page-locked host memory mapped into the device's address space.

    ``portable`` and ``wc`` (write-combined) reach the vendor call (Numba ignores them)."""
    host, device = _devmem._mapped_array(shape, dtype, strides, order, stream, portable, wc)
    mapped_view = host.view(MappedNDArray)
    mapped_view._devmem_root = (host, device)
    return mapped_view


class ManagedNDArray(_HostDeviceNDArray):
    """A NumPy array in managed (unified) memory (Numba's ``cuda.managed_array``): host code
    reads and writes it as an ndarray, and it is also a device array (kernel and copy argument,
    ``copy_to_host``, ``is_device_array``, the CUDA Array Interface on GPU backends), the driver
    migrating its pages. Synchronize device work on it before the host touches it.
    ``prefetch`` and ``advise`` are the hints of docs/managed-memory.md."""

    def prefetch(self, to="device", stream=0):
        """Migrates the bytes to ``to`` ("device": the array's device, "host", or a device
        index), enqueued on ``stream``; on the default stream it has completed on return."""
        _devmem._managed_prefetch(self.device_array(), to, stream)

    def advise(self, advice, location=None):
        """Gives ``advice`` ("read_mostly", "preferred_location", "accessed_by" and their
        "unset_" forms) about the bytes; the location ones take ``location`` ("host" or a
        device index)."""
        _devmem._managed_advise(self.device_array(), advice, location)


def managed_array(shape, dtype=_np.float64, strides=None, order="C", stream=0, attach_global=True,
                  allow_oversubscription=False):
    """A ManagedNDArray: managed memory that host and device address alike (Numba's
    managed_array). More than the device's free memory is refused with OutOfMemory unless
    ``allow_oversubscription`` (oversubscribed managed memory can stall the GPU); backends
    without managed memory raise InvalidArgument."""
    host, device = _devmem._managed_array(shape, dtype, strides, order, stream, attach_global,
                                          allow_oversubscription)
    managed_view = host.view(ManagedNDArray)
    managed_view._devmem_root = (host, device)
    return managed_view


class _Gpus(_Sequence):
    """The devices of the active backend, as Numba's ``cuda.gpus``: ``gpus[i]``, ``len(gpus)``,
    ``gpus.current``, and ``with gpus[i]:`` to make one current for a block."""

    def __getitem__(self, index):
        return _devmem._list_devices()[index]

    def __len__(self):
        return device_count()

    @property
    def current(self):
        return get_current_device()

    def __repr__(self):
        return "<devmem gpus: {}>".format(_devmem._list_devices())


gpus = _Gpus()


class trace:
    """``with devmem.trace(path):`` writes the memory timeline of the block to ``path``: a Chrome
    trace-event file that https://ui.perfetto.dev opens (allocations, frees, copies, launches,
    synchronizations and counters; docs/trace.md). One trace at a time: entering while another is
    written (including DEVMEM_TRACE's) raises InvalidArgument naming both paths. The file is
    complete when the block ends; ``events`` counts what was recorded. ``call_sites=True`` adds
    each allocation's call site (TraceOptions::call_sites): in Python that is devmem's extension
    module, so it mostly serves C++ code that a Python program calls."""

    def __init__(self, path, call_sites=False):
        import os

        self.path = os.fspath(path)
        self.call_sites = bool(call_sites)
        self._session = None
        self.events = 0

    def __enter__(self):
        if self._session is not None:
            raise RuntimeError("devmem.trace: this trace is already being written")
        self._session = _devmem._trace_to(self.path, self.call_sites)
        return self

    def __exit__(self, *exc_info):
        session, self._session = self._session, None
        self.events = session.events
        session.stop()
        return False


def list_devices():
    """Every device of the active backend."""
    return _devmem._list_devices()


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("annotations",)]
