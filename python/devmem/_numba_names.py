"""Numba's remaining names (and CuPy's first calls) over devmem: current_context(), the stream
constructors and callbacks, is_available/detect/close, pinned/mapped_array_like, Numba's
open_ipc_array(handle, shape, dtype, strides, offset) form, asarray/asnumpy.

Imported by devmem/__init__.py, which re-exports the public names; see docs/python.md#api for
how each one matches Numba."""

import asyncio
import threading

import numpy as _np

from . import _devmem


# ---- current_context() ----------------------------------------------------------------------

class _PendingDeallocations:
    """Numba's ``ctx.deallocations``: ``len()`` is the number of frees devmem's deferred queue
    holds, ``clear()`` flushes it, ``disable()`` is ``defer_cleanup()``."""

    def __len__(self):
        return _devmem.pending_deallocations()

    def clear(self):
        """Frees what the queue holds now (Numba's flush; nothing inside defer_cleanup())."""
        _devmem.flush_deallocations()

    def disable(self):
        """A context manager during which nothing is freed (= devmem.defer_cleanup())."""
        return _devmem.defer_cleanup()

    def __repr__(self):
        return "<devmem pending deallocations: {}>".format(len(self))


class _MemoryManager:
    """What ``ctx.memory_manager`` shows of devmem's manager (a C++ one: direct, pool or
    async). Numba's EMM methods that make sense from Python: get_memory_info, defer_cleanup,
    reset, interface_version."""

    interface_version = 1

    @property
    def name(self):
        return _devmem.memory_manager_name()

    def get_memory_info(self):
        return _devmem.memory_info()

    def defer_cleanup(self):
        return _devmem.defer_cleanup()

    def reset(self):
        """Flushes the deferred frees and hands the pool's cached blocks back to the device.
        Arrays still alive stay valid (Numba's reset frees them under their owners)."""
        _devmem.flush_deallocations()
        _devmem._trim_memory_manager()

    def __repr__(self):
        return "<devmem memory manager '{}'>".format(self.name)


class Context:
    """The current device's context as Numba's ``cuda.current_context()`` shows it."""

    def __init__(self, device_id):
        self._device_id = device_id
        self.deallocations = _PendingDeallocations()
        self._devmem_manager = _MemoryManager()

    @property
    def memory_manager(self):
        """The plugin given to set_memory_manager (a Python object, as in Numba), or a view of
        devmem's own manager."""
        adapter = _devmem._python_memory_manager()
        return self._devmem_manager if adapter is None else adapter.plugin

    @property
    def device(self):
        return _devmem._list_devices()[self._device_id]

    def get_memory_info(self):
        """MemoryInfo(free, total) in bytes."""
        return _devmem.memory_info()

    def reset(self):
        """Numba's ctx.reset(): flushes the deferred frees and empties the pool's cache (with a
        Python plugin: flushes them into it, then calls its reset()). Unlike Numba it never frees
        memory that live arrays still use (a plugin's reset may: that is the plugin's rule)."""
        self._devmem_manager.reset()
        manager = self.memory_manager
        if manager is not self._devmem_manager:
            manager.reset()

    def synchronize(self):
        _devmem.synchronize()

    def defer_cleanup(self):
        return _devmem.defer_cleanup()

    def __repr__(self):
        return "<devmem Context device {} ({})>".format(self._device_id, _devmem.backend_name())


_contexts = {}


def current_context(devnum=None):
    """The current device's Context (Numba's cuda.current_context()); with ``devnum``, that
    device is made current first, as Numba does."""
    if devnum is not None:
        _devmem.select_device(devnum)
    device_id = _devmem.get_current_device().id
    context = _contexts.get(device_id)
    if context is None:
        context = _contexts.setdefault(device_id, Context(device_id))
    return context


# ---- streams ----------------------------------------------------------------------------------

def legacy_default_stream():
    """Numba's legacy default stream (CU_STREAM_LEGACY). devmem's default stream is the legacy
    one on every backend (devmem is not built for per-thread default streams), so this is
    default_stream()."""
    return _devmem.default_stream()


# cudaStreamPerThread and hipStreamPerThread are both the handle 2.
_PER_THREAD_HANDLE = 2


def per_thread_default_stream():
    """Numba's per-thread default stream: on the cuda and roc backends the vendor's per-thread
    stream (handle 2, wrapped as an external stream); on the host backend, whose default stream
    finishes its work before each call returns, the default stream."""
    if _devmem.backend_name() == "host":
        return _devmem.default_stream()
    return _devmem.external_stream(_PER_THREAD_HANDLE)


_callback_lock = threading.Lock()
_last_callback = {}  # stream handle -> the thread running that stream's latest callback


def add_callback(self, callback, arg=None):
    """Numba's Stream.add_callback: ``callback(stream, status, arg)`` runs on a thread of its
    own once the work queued on the stream so far is done; status is 0, or the failing vendor
    call's error code. Callbacks of one stream run in the order they were added."""
    if not callable(callback):
        raise TypeError("add_callback: callback must be callable, got {!r}".format(callback))
    event = self.record()

    with _callback_lock:
        previous = _last_callback.get(self.handle)

        def run():
            if previous is not None:
                previous.join()
            status = 0
            try:
                event.synchronize()
            except _devmem.Error as error:
                status = getattr(error, "code", None) or 1
            callback(self, status, arg)

        thread = threading.Thread(target=run, name="devmem stream callback", daemon=True)
        _last_callback[self.handle] = thread
        thread.start()


def async_done(self):
    """Numba's Stream.async_done: an asyncio future of the running loop that resolves to the
    stream once the work queued on it so far is done (RuntimeError outside a running loop)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def resolve(status):
        if future.done():
            return
        if status == 0:
            future.set_result(self)
        else:
            future.set_exception(Exception("Stream error {}".format(status)))

    def callback(_stream, status, _arg):
        loop.call_soon_threadsafe(resolve, status)

    self.add_callback(callback, None)
    return future


# ---- devices ----------------------------------------------------------------------------------

def is_available():
    """True when the active backend has at least one device (Numba: a driver and a GPU)."""
    try:
        return _devmem.device_count() > 0
    except _devmem.Error:
        return False


def detect():
    """Prints the devices of the active backend, as Numba's cuda.detect(); True when there is
    at least one."""
    try:
        devices = _devmem._list_devices()
    except _devmem.Error as error:
        print("No devices: {}".format(error))
        return False
    print("Found {} devices ({} backend)".format(len(devices), _devmem.backend_name()))
    for device in devices:
        properties = device.properties
        print("id {} {:>20} {:>40}".format(device.id, device.name, "[SUPPORTED]"))
        capability = device.compute_capability
        if capability is not None:
            print("{:>40}: {}.{}".format("Compute Capability", *capability))
        print("{:>40}: {}".format("Architecture", properties["architecture"]))
        print("{:>40}: {}".format("Total memory", properties["total_memory"]))
    print("Summary:")
    print("\t{}/{} devices are supported".format(len(devices), len(devices)))
    return len(devices) > 0


def close():
    """Numba's cuda.close() releases the contexts. devmem waits for the device, frees what the
    deferred queue holds and empties the pool's cache; arrays still alive stay valid (Numba's
    would dangle), and the next call goes on in the same context."""
    _devmem.synchronize()
    _devmem.flush_deallocations()
    _devmem._trim_memory_manager()


# ---- host memory like an array ----------------------------------------------------------------

def _contiguous_strides_like_array(ary):
    """Numba's rule: None (default strides) for a C- or F-contiguous array or ndim <= 1, else
    dense strides in the order of the array's strides."""
    if ary.flags["C_CONTIGUOUS"] or ary.flags["F_CONTIGUOUS"] or ary.ndim <= 1:
        return None
    order = sorted(range(ary.ndim), key=lambda axis: ary.strides[axis])
    strides = [0] * ary.ndim
    stride = ary.dtype.itemsize
    for axis in order:
        strides[axis] = stride
        stride *= ary.shape[axis]
    return tuple(strides)


def _order_like_array(ary):
    return "F" if ary.flags["F_CONTIGUOUS"] and not ary.flags["C_CONTIGUOUS"] else "C"


def _check_array_like(ary, operation):
    for attribute in ("shape", "dtype", "strides", "flags", "ndim"):
        if not hasattr(ary, attribute):
            raise TypeError("{}: expected an array (NumPy or devmem), got {!r}".format(
                operation, type(ary)))


def pinned_array_like(ary):
    """A page-locked NumPy array with the shape, dtype and layout of ``ary`` (Numba's)."""
    _check_array_like(ary, "pinned_array_like")
    return _devmem.pinned_array(ary.shape, ary.dtype, _contiguous_strides_like_array(ary),
                                _order_like_array(ary))


def mapped_array_like(ary, stream=0, portable=False, wc=False):
    """A MappedNDArray with the shape, dtype and layout of ``ary`` (Numba's)."""
    _check_array_like(ary, "mapped_array_like")
    from . import mapped_array
    return mapped_array(ary.shape, ary.dtype, _contiguous_strides_like_array(ary),
                        _order_like_array(ary), stream, portable, wc)


# ---- CUDA Array Interface and IPC --------------------------------------------------------------

class _InterfaceHolder:
    __slots__ = ("__cuda_array_interface__", "owner")

    def __init__(self, desc, owner):
        self.__cuda_array_interface__ = desc
        self.owner = owner


def from_cuda_array_interface(desc, owner=None, sync=True):
    """A DeviceNDArray over the memory a CUDA Array Interface dict describes (Numba's); ``owner``
    is kept alive as long as the array."""
    if not isinstance(desc, dict):
        raise TypeError("from_cuda_array_interface: desc must be a __cuda_array_interface__ "
                        "dict, got {!r}".format(type(desc)))
    return _devmem.as_device_array(_InterfaceHolder(desc, owner), sync)


class _IpcArrayScope:
    """``with open_ipc_array(handle, shape, dtype, strides, offset) as array:`` (Numba's form is a
    context manager); the handle is closed at exit, arrays still in use stay valid."""

    def __init__(self, handle, shape, dtype, strides, offset, device):
        self._handle = handle
        self._view = (shape, dtype, strides, offset)
        self._device = device

    def __enter__(self):
        shape, dtype, strides, offset = self._view
        whole = _devmem.open_ipc_array(self._handle, self._device)
        return _ipc_view(whole, self._handle, shape, dtype, strides, offset)

    def __exit__(self, *exc):
        return False


def _as_ipc_handle(handle):
    if isinstance(handle, _devmem.IpcHandle):
        return handle
    if isinstance(handle, str):
        return _devmem.IpcHandle.from_bytes(bytes.fromhex(handle))
    if isinstance(handle, (bytes, bytearray, memoryview)):
        return _devmem.IpcHandle.from_bytes(bytes(handle))
    raise TypeError("open_ipc_array: handle must be a devmem.IpcHandle, its bytes or its "
                    "hexadecimal text, got {!r} (devmem cannot open a bare vendor handle: it "
                    "needs the allocation size and backend its own handle carries)".format(
                        type(handle)))


def _ipc_view(whole, handle, shape, dtype, strides, offset):
    dtype = _np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, _np.integer)) else tuple(shape)
    if strides is None:
        strides = []
        stride = dtype.itemsize
        for extent in reversed(shape):
            strides.insert(0, stride)
            stride *= extent
        strides = tuple(strides)
    elif isinstance(strides, (int, _np.integer)):
        strides = (strides,)
    if len(strides) != len(shape):
        raise ValueError("open_ipc_array: strides {} do not match shape {}".format(strides, shape))
    offset = int(offset)
    if offset < 0:
        raise ValueError("open_ipc_array: offset must be >= 0, got {}".format(offset))
    # Numba's offset counts from the start of the allocation; the opened array's element 0 is
    # handle.offset bytes into it.
    return _devmem._device_view(whole, offset - handle.offset, shape, strides, dtype)


def open_ipc_array(handle, shape=None, dtype=None, strides=None, offset=0, device=None):
    """``open_ipc_array(handle)`` (devmem's: the exported array, as the handle describes it), or
    Numba's ``with open_ipc_array(handle, shape, dtype, strides=None, offset=0) as array:``: a
    view of `shape` and `dtype` at `offset` bytes from the start of the exported allocation,
    inside the exported array's bytes. ``device`` by keyword (default: the handle's device)."""
    if shape is None and dtype is None:
        if strides is not None or offset != 0:
            raise TypeError("open_ipc_array: strides and offset need shape and dtype (Numba's "
                            "open_ipc_array(handle, shape, dtype, strides, offset))")
        return _devmem.open_ipc_array(handle, device)
    if shape is None or dtype is None:
        raise TypeError("open_ipc_array(handle, shape, dtype, strides=None, offset=0) needs both "
                        "shape and dtype, got shape={!r}, dtype={!r} (pass the device as "
                        "device=)".format(shape, dtype))
    return _IpcArrayScope(_as_ipc_handle(handle), shape, dtype, strides, offset, device)


# ---- CuPy's first calls -----------------------------------------------------------------------

def asarray(a, dtype=None, stream=0):
    """CuPy's cupy.asarray: a device array of ``a``; a device array of that dtype is returned as
    it is (no copy), as to_device returns it."""
    if dtype is not None and _devmem.is_device_array(a):
        dtype = _np.dtype(dtype)
        if a.dtype != dtype:
            device = _devmem.as_cuda_array(a)
            return _devmem.to_device(device.copy_to_host().astype(dtype), stream=stream)
    if dtype is not None and not _devmem.is_device_array(a):
        a = _np.asarray(a, dtype=dtype)
    return _devmem.to_device(a, stream=stream)


def asnumpy(a, stream=None, out=None):
    """CuPy's cupy.asnumpy: a NumPy array of a device array's values (into ``out`` if given);
    anything else through np.asarray."""
    if _devmem.is_device_array(a):
        return _devmem.as_cuda_array(a).copy_to_host(out, stream)
    if out is None:
        return _np.asarray(a)
    out[...] = a
    return out
