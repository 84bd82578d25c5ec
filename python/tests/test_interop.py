"""Zero-copy interop: DLPack both ways, the CUDA Array Interface (producer on the GPU backends,
consumer everywhere), IPC handles across processes."""

import numpy as np
import pytest

import devmem

from conftest import host_backend_only, requires_gpu_backend, run_python


@host_backend_only
def test_numpy_from_dlpack_shares_device_memory():
    d = devmem.to_device(np.arange(12.0).reshape(3, 4))
    assert d.__dlpack_device__() == (1, 0)  # kDLCPU on the host backend
    view = np.from_dlpack(d)
    assert view.shape == (3, 4) and view.dtype == np.float64
    d[1, 2] = -5.0  # a write on the devmem side shows in NumPy
    assert view[1, 2] == -5.0
    strided = np.from_dlpack(d[::2, ::-1])
    np.testing.assert_array_equal(strided, d[::2, ::-1].copy_to_host())


@host_backend_only
def test_devmem_from_dlpack_shares_numpy_memory():
    host = np.zeros((4, 5), dtype=np.int32)
    d = devmem.from_dlpack(host)
    assert d.shape == (4, 5) and d.dtype == np.int32
    d[2] = 7  # a write through devmem shows in NumPy
    assert (host[2] == 7).all() and host.sum() == 35
    host[0, 0] = 9  # and the other way
    assert d[0, 0] == 9
    # A strided view of memory already viewed, and the same memory again after the views die.
    column = devmem.from_dlpack(host[:, 1])
    column[...] = 1
    assert (host[:, 1] == 1).all()
    del d  # the column view keeps the registration it shares with d
    column[...] = 2
    assert (host[:, 1] == 2).all()
    del column
    again = devmem.from_dlpack(host)
    np.testing.assert_array_equal(again.copy_to_host(), host)


@host_backend_only
def test_from_dlpack_keeps_the_producer_alive():
    d = devmem.from_dlpack(np.arange(100, dtype=np.int64))
    import gc

    gc.collect()
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(100))


def test_dlpack_round_trip_between_devmem_arrays():
    d = devmem.to_device(np.arange(8, dtype=np.float32))
    e = devmem.from_dlpack(d)
    assert e.device_pointer == d.device_pointer
    e[0] = 42
    assert d[0] == 42


def test_a_dlpack_capsule_is_consumed_once():
    d = devmem.to_device(np.arange(4.0))
    capsule = d.__dlpack__()
    view = devmem.from_dlpack(capsule)
    assert view.shape == (4,)
    with pytest.raises(ValueError, match="consumed"):
        devmem.from_dlpack(capsule)
    unused = d.__dlpack__()  # dropped unconsumed: its deleter releases the array
    del unused
    assert d.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_from_dlpack_errors():
    with pytest.raises(TypeError, match="__dlpack__"):
        devmem.from_dlpack([1, 2, 3])

    class WrongDevice:
        def __dlpack__(self, stream=None):
            return np.arange(3.0).__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    if devmem.backend_name() != "host":
        with pytest.raises(ValueError, match="kDLCPU"):
            devmem.from_dlpack(WrongDevice())
    else:
        assert devmem.from_dlpack(WrongDevice()).shape == (3,)


class ArrayInterfaceProducer:
    """A minimal foreign producer of the CUDA Array Interface over devmem memory."""

    def __init__(self, owner, **overrides):
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": owner.shape, "strides": owner.strides, "typestr": owner.dtype.str,
            "data": (owner.device_pointer, False), "version": 3, "stream": None}
        self.__cuda_array_interface__.update(overrides)


def test_as_device_array_consumes_the_interface_without_copying():
    d = devmem.to_device(np.arange(20.0).reshape(4, 5))
    producer = ArrayInterfaceProducer(d)
    view = devmem.as_device_array(producer)
    assert view.device_pointer == d.device_pointer
    assert view.shape == (4, 5) and view.dtype == np.float64
    view[0, 0] = 100.0
    assert d[0, 0] == 100.0
    assert devmem.is_device_array(producer) and devmem.is_device_array(d)
    assert not devmem.is_device_array(np.zeros(3))
    assert devmem.as_cuda_array(producer).shape == (4, 5)
    dense = devmem.as_device_array(ArrayInterfaceProducer(d, strides=None))
    assert dense.strides == (40, 8)


def test_as_device_array_errors():
    with pytest.raises(TypeError, match="doesn't implement the cuda array interface"):
        devmem.as_device_array(np.zeros(3))
    d = devmem.to_device(np.arange(4.0))
    with pytest.raises(ValueError, match="masked"):
        devmem.as_device_array(ArrayInterfaceProducer(d, mask=ArrayInterfaceProducer(d)))
    with pytest.raises(ValueError, match="version"):
        devmem.as_device_array(ArrayInterfaceProducer(d, version=1))
    broken = ArrayInterfaceProducer(d)
    del broken.__cuda_array_interface__["typestr"]
    with pytest.raises(ValueError, match="typestr"):
        devmem.as_device_array(broken)


@host_backend_only
def test_the_host_backend_has_no_cuda_array_interface():
    d = devmem.device_array(3)
    assert not hasattr(d, "__cuda_array_interface__")


@requires_gpu_backend
def test_cuda_array_interface_v3_with_stream():
    s = devmem.stream()
    d = devmem.device_array((3, 4), dtype=np.float32, stream=s)
    iface = d.__cuda_array_interface__
    assert iface["version"] == 3 and iface["shape"] == (3, 4) and iface["typestr"] == "<f4"
    assert iface["data"] == (d.device_pointer, False)
    assert iface["strides"] is None and iface["stream"] not in (None, 0)
    assert d[:, ::2].__cuda_array_interface__["strides"] == (16, 8)


def test_ipc_unsupported_is_a_clear_error():
    if devmem.ipc_supported():
        pytest.skip("this backend has IPC")
    with pytest.raises(ValueError, match="does not support IPC"):
        devmem.ipc_handle(devmem.device_array(4))


def test_ipc_handle_opened_by_another_process():
    if not devmem.ipc_supported():
        pytest.skip(f"the {devmem.backend_name()} backend has no IPC here")
    d = devmem.to_device(np.zeros(64, dtype=np.int64))
    handle = devmem.ipc_handle(d[8:16])
    assert handle.offset == 64 and handle.shape == (8,)
    raw = handle.to_bytes()
    assert devmem.IpcHandle.from_bytes(raw).shape == (8,)
    child = run_python(
        "import devmem, numpy as np\n"
        f"v = devmem.open_ipc_array(bytes.fromhex('{raw.hex()}'))\n"
        "v[...] = np.arange(8)\n"
        "devmem.synchronize()\n"
        "print(v.shape, v.dtype)\n")
    assert child.returncode == 0, child.stderr
    assert "(8,) int64" in child.stdout
    np.testing.assert_array_equal(d.copy_to_host()[8:16], np.arange(8))
    assert (d.copy_to_host()[:8] == 0).all()
    with pytest.raises(ValueError):
        handle.open()  # the exporting process cannot open its own handle
    with pytest.raises(ValueError):
        devmem.open_ipc_array(b"not a handle")
