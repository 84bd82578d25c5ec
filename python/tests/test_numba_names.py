"""Numba's behaviour and names that a Numba user reaches for first (issue 33), and CuPy's first
calls: each test compares with what numba.cuda does (docs/python.md#api)."""

import asyncio
import ctypes
import pickle
import threading

import numpy as np
import pytest

import devmem

from conftest import run_python


# ---- to_device of device memory -----------------------------------------------------------------

def test_to_device_of_a_device_array_returns_it():
    d = devmem.to_device(np.arange(6.0))
    s = devmem.stream()
    # Numba's auto_device: device memory comes back as it is, whatever stream and copy say.
    assert devmem.to_device(d) is d
    assert devmem.to_device(d, stream=s) is d
    assert devmem.to_device(d, copy=False) is d
    view = d[1:4]
    assert devmem.to_device(view) is view


def test_to_device_of_a_device_array_makes_no_copy():
    before = devmem.device_statistics()["total_count"]
    d = devmem.to_device(np.arange(6.0))
    same = devmem.to_device(d)
    assert devmem.device_statistics()["total_count"] == before + 1
    same[0] = 42.0
    assert d.copy_to_host()[0] == 42.0


def test_to_device_with_to_still_copies_into_it():
    target = devmem.device_array(3)
    source = devmem.to_device(np.ones(3))
    with pytest.raises(TypeError):
        # `to` takes host data (Numba's copy_to_device of a host array); a wrong stream is clear.
        devmem.to_device(source, stream="s")
    assert devmem.to_device(np.arange(3.0), to=target) is target
    np.testing.assert_array_equal(target.copy_to_host(), [0.0, 1.0, 2.0])


# ---- MappedNDArray is a device array ----------------------------------------------------------

def test_mapped_array_is_a_device_array():
    m = devmem.mapped_array(5, dtype=np.int32)
    m[:] = np.arange(5)
    assert devmem.is_device_array(m) and devmem.is_cuda_array(m)
    assert m.__cuda_memory__ and m.__cuda_ndarray__
    np.testing.assert_array_equal(m.copy_to_host(), np.arange(5))
    out = np.zeros(5, dtype=np.int32)
    assert m.copy_to_host(out) is out
    np.testing.assert_array_equal(out, np.arange(5))
    m.copy_to_device(np.full(5, 7, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(m), np.full(5, 7))
    assert devmem.to_device(m) is m
    assert m.device_ctypes_pointer.value == m.device_array().device_pointer


def test_mapped_array_keeps_its_stream():
    s = devmem.stream()
    m = devmem.mapped_array(4, stream=s)
    assert m.stream == s
    assert devmem.mapped_array(4).stream.is_default


def test_as_cuda_array_takes_devmems_own_arrays():
    d = devmem.to_device(np.arange(4.0))
    view = devmem.as_cuda_array(d)
    assert isinstance(view, devmem.DeviceNDArray) and view.device_pointer == d.device_pointer
    view[0] = 9.0
    assert d.copy_to_host()[0] == 9.0
    m = devmem.mapped_array(3)
    m[:] = 2.5
    md = devmem.as_cuda_array(m)
    assert md.device_pointer == m.device_array().device_pointer
    np.testing.assert_array_equal(md.copy_to_host(), [2.5, 2.5, 2.5])
    assert devmem.as_device_array(d).shape == (4,)
    with pytest.raises(TypeError, match="doesn't implement the cuda array interface"):
        devmem.as_cuda_array(np.zeros(3))
    assert devmem.is_cuda_array(d) and not devmem.is_cuda_array(np.zeros(3))


def test_from_cuda_array_interface_views_described_memory():
    d = devmem.to_device(np.arange(8, dtype=np.int64))
    owner = object()
    desc = {"shape": (4,), "strides": (16,), "typestr": "<i8",
            "data": (d.device_pointer + 8, False), "version": 3}
    view = devmem.from_cuda_array_interface(desc, owner=owner)
    np.testing.assert_array_equal(view.copy_to_host(), [1, 3, 5, 7])
    with pytest.raises(TypeError, match="desc must be a __cuda_array_interface__ dict"):
        devmem.from_cuda_array_interface([1, 2])
    with pytest.raises(ValueError, match="has no 'typestr'"):
        devmem.from_cuda_array_interface({"shape": (1,), "data": (0, False), "version": 3})


# ---- current_context() --------------------------------------------------------------------------

def test_current_context_memory_info_and_deallocations():
    ctx = devmem.current_context()
    assert ctx is devmem.current_context()
    free, total = ctx.get_memory_info()
    assert 0 <= free <= total and total > 0
    assert ctx.get_memory_info() == ctx.memory_manager.get_memory_info()
    assert ctx.memory_manager.interface_version == 1
    assert ctx.memory_manager.name == devmem.memory_manager_name()
    assert ctx.device.id == devmem.get_current_device().id
    ctx.deallocations.clear()
    assert len(ctx.deallocations) == 0
    with ctx.deallocations.disable():
        for _ in range(3):
            devmem.device_array(16)
        assert len(ctx.deallocations) >= 3
    ctx.deallocations.clear()
    assert len(ctx.deallocations) == 0


def test_context_reset_empties_the_pool_and_keeps_live_arrays(pool_manager):
    ctx = devmem.current_context()
    keep = devmem.to_device(np.arange(10.0))
    for _ in range(4):
        devmem.device_array(1024)
    ctx.deallocations.clear()
    assert devmem.pool_statistics()["cached_bytes"] > 0
    ctx.reset()
    assert devmem.pool_statistics()["cached_bytes"] == 0
    assert len(ctx.deallocations) == 0
    np.testing.assert_array_equal(keep.copy_to_host(), np.arange(10.0))
    devmem.close()
    np.testing.assert_array_equal(keep.copy_to_host(), np.arange(10.0))


# ---- host memory like an array --------------------------------------------------------------------

@pytest.mark.parametrize("make", ["pinned", "mapped"])
def test_pinned_and_mapped_array_like_follow_numbas_layout(make):
    like = devmem.pinned_array_like if make == "pinned" else devmem.mapped_array_like
    c = like(np.zeros((3, 4), dtype=np.float32))
    assert c.shape == (3, 4) and c.dtype == np.float32 and c.strides == (16, 4)
    f = like(np.zeros((3, 4), order="F"))
    assert f.strides == (8, 24)
    # A non-contiguous view: dense strides in the view's stride order (Numba's rule).
    view = like(np.zeros((10, 12))[::2, ::2])
    assert view.shape == (5, 6) and view.strides == (48, 8)
    transposed = like(np.zeros((3, 4, 6)).transpose(1, 0, 2)[:, :, ::2])
    assert transposed.strides == (24, 96, 8)
    assert like(devmem.device_array((2, 3), order="F")).strides == (8, 16)
    if make == "mapped":
        assert isinstance(c, devmem.MappedNDArray) and devmem.is_device_array(c)
    with pytest.raises(TypeError, match="expected an array"):
        like([1, 2, 3])


# ---- streams -------------------------------------------------------------------------------------

def test_legacy_and_per_thread_default_streams():
    legacy = devmem.legacy_default_stream()
    assert legacy == devmem.default_stream() and legacy.is_default
    per_thread = devmem.per_thread_default_stream()
    if devmem.backend_name() == "host":
        assert per_thread.is_default
    else:
        assert per_thread.handle == 2 and per_thread.is_external
    d = devmem.to_device(np.arange(4.0), stream=legacy)
    np.testing.assert_array_equal(d.copy_to_host(stream=legacy), np.arange(4.0))


def test_add_callback_runs_after_the_stream_work_in_order():
    s = devmem.stream()
    d = devmem.to_device(np.arange(1000.0), stream=s)
    calls = []
    done = threading.Event()

    def callback(stream, status, arg):
        calls.append((stream, status, arg))
        if arg == 2:
            done.set()

    for i in range(3):
        s.add_callback(callback, i)
    assert done.wait(10)
    assert [arg for _, _, arg in calls] == [0, 1, 2]
    assert all(stream is s and status == 0 for stream, status, _ in calls)
    assert d.copy_to_host()[-1] == 999.0
    with pytest.raises(TypeError, match="callback must be callable"):
        s.add_callback(42)


def test_add_callback_default_arg_is_none():
    got = []
    done = threading.Event()
    devmem.default_stream().add_callback(lambda st, status, arg: (got.append(arg), done.set()))
    assert done.wait(10) and got == [None]


def test_async_done_resolves_to_the_stream():
    async def main():
        s = devmem.stream()
        devmem.to_device(np.arange(100.0), stream=s)
        futures = [s.async_done(), s.async_done()]
        results = await asyncio.gather(*futures)
        return s, results

    s, results = asyncio.run(main())
    assert all(r is s for r in results)
    with pytest.raises(RuntimeError):
        devmem.stream().async_done()  # no running event loop, as Numba (asyncio's error)


def test_bind_keeps_the_stream_object():
    s = devmem.stream()
    d = devmem.device_array(4)
    assert d.bind(s).stream is s
    assert d.bind(s)[1:].stream is s  # views keep it
    assert devmem.device_array(4, stream=s).stream is s
    assert devmem.to_device(np.zeros(2), stream=s).stream is s
    other = devmem.stream()
    assert d.bind(s).bind(other).stream is other
    assert d.bind(s).getitem(slice(1, 3), stream=other).stream == other
    assert d.stream.is_default


def test_event_without_timing_refuses_elapsed_time():
    s = devmem.stream()
    untimed, timed_a, timed_b = devmem.event(timing=False), devmem.event(), devmem.event()
    assert not untimed.timing and timed_a.timing
    for e in (untimed, timed_a, timed_b):
        e.record(s)
    s.synchronize()
    assert devmem.event_elapsed_time(timed_a, timed_b) >= 0.0
    assert timed_a.elapsed_time(timed_b) >= 0.0
    with pytest.raises(devmem.InvalidArgument, match="timing=False"):
        devmem.event_elapsed_time(untimed, timed_b)
    with pytest.raises(devmem.InvalidArgument, match="timing=False"):
        timed_a.elapsed_time(untimed)
    # Stream.record(event) returns that very event, its flag kept.
    assert s.record(untimed) is untimed and not untimed.timing
    untimed.synchronize()
    assert untimed.query()


# ---- devices and the runtime ----------------------------------------------------------------------

def test_is_available_detect_and_close(capsys):
    assert devmem.is_available() is True
    assert devmem.detect() is True
    out = capsys.readouterr().out
    assert "Found {} devices".format(devmem.device_count()) in out
    assert "devices are supported" in out
    d = devmem.to_device(np.arange(3.0))
    devmem.close()
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(3.0))


def test_is_available_is_false_without_devices():
    child = run_python("import devmem; print(devmem.is_available())",
                       env={"DEVMEM_BACKEND": "no-such-backend"})
    # Numba's is_available never raises: a backend that cannot start answers False.
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"


def test_compute_capability():
    device = devmem.get_current_device()
    architecture = device.properties["architecture"]
    if architecture.startswith("sm_"):
        major, minor = device.compute_capability
        assert "sm_{}{}".format(major, minor) == architecture.rstrip("af")
    else:
        assert device.compute_capability is None
    assert devmem.gpus[0].compute_capability == devmem.list_devices()[0].compute_capability


def test_device_ctypes_pointer():
    d = devmem.to_device(np.arange(4, dtype=np.int32))
    pointer = d.device_ctypes_pointer
    assert isinstance(pointer, ctypes.c_void_p) and pointer.value == d.device_pointer
    assert d[2:].device_ctypes_pointer.value == d.device_pointer + 8
    assert devmem.device_array(0).device_ctypes_pointer.value is None  # NULL, as Numba's


# ---- IPC ------------------------------------------------------------------------------------------

def _ipc_or_skip():
    if not devmem.ipc_supported():
        pytest.skip(f"the {devmem.backend_name()} backend has no IPC here")


def test_ipc_handle_pickles():
    _ipc_or_skip()
    d = devmem.to_device(np.arange(6, dtype=np.float32))
    handle = d.get_ipc_handle()
    copy = pickle.loads(pickle.dumps(handle))
    assert isinstance(copy, devmem.IpcHandle)
    assert copy.to_bytes() == handle.to_bytes() and copy.shape == (6,)
    child = run_python(
        "import pickle, sys, devmem\n"
        f"h = pickle.loads(bytes.fromhex('{pickle.dumps(handle).hex()}'))\n"
        "print(devmem.open_ipc_array(h).copy_to_host().tolist())\n")
    assert child.returncode == 0, child.stderr
    assert "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]" in child.stdout


def test_open_ipc_array_numbas_form():
    _ipc_or_skip()
    d = devmem.to_device(np.arange(16, dtype=np.int64))
    raw = d.get_ipc_handle().to_bytes().hex()
    child = run_python(
        "import devmem, numpy as np\n"
        f"h = devmem.IpcHandle.from_bytes(bytes.fromhex('{raw}'))\n"
        "with devmem.open_ipc_array(h, (2, 3), np.int64, offset=16) as a:\n"
        "    print(a.shape, a.copy_to_host().tolist())\n"
        f"with devmem.open_ipc_array('{raw}', 4, 'i8', strides=(32,), offset=8) as b:\n"
        "    print(b.copy_to_host().tolist())\n"
        "    b[0] = -1\n"
        "try:\n"
        "    with devmem.open_ipc_array(h, 20, np.int64):\n"
        "        pass\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n")
    assert child.returncode == 0, child.stderr
    assert "(2, 3) [[2, 3, 4], [5, 6, 7]]" in child.stdout
    assert "[1, 5, 9, 13]" in child.stdout
    assert "refused:" in child.stdout and "outside the array's bytes" in child.stdout
    assert d.copy_to_host()[1] == -1


def test_open_ipc_array_bad_arguments_are_clear():
    with pytest.raises(TypeError, match="needs both shape and dtype"):
        devmem.open_ipc_array(b"x", 4)
    with pytest.raises(TypeError, match="strides and offset need shape and dtype"):
        devmem.open_ipc_array(b"x", offset=8)
    with pytest.raises(TypeError, match="cannot open a bare vendor handle"):
        devmem.open_ipc_array((1, 2, 3), (4,), np.int8)


# ---- the minor ones -------------------------------------------------------------------------------

def test_zero_d_array_is_not_iterable_and_elements_cannot_be_deleted():
    d0 = devmem.to_device(np.float64(2.5))
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        list(d0)
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(d0)
    d = devmem.to_device(np.arange(3))
    assert list(d) == [0, 1, 2]
    assert [row.copy_to_host().tolist() for row in devmem.to_device(np.eye(2))] == \
        [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(ValueError, match="cannot delete array elements"):
        del d[0]
    with pytest.raises(ValueError, match="cannot delete array elements"):
        del d[1:]
    np.testing.assert_array_equal(d.copy_to_host(), [0, 1, 2])


# ---- CuPy's first calls ---------------------------------------------------------------------------

def test_asarray_and_asnumpy():
    d = devmem.asarray([1, 2, 3])
    assert isinstance(d, devmem.DeviceNDArray)
    assert devmem.asarray(d) is d and devmem.asarray(d, dtype=d.dtype) is d
    f = devmem.asarray(d, dtype=np.float32)
    assert f.dtype == np.float32 and f.copy_to_host().tolist() == [1.0, 2.0, 3.0]
    assert devmem.asarray([1, 2], dtype="f8").dtype == np.float64
    host = devmem.asnumpy(d)
    assert isinstance(host, np.ndarray) and host.tolist() == [1, 2, 3]
    out = np.zeros(3, dtype=d.dtype)
    assert devmem.asnumpy(d, out=out) is out and out.tolist() == [1, 2, 3]
    assert devmem.asnumpy([4, 5]).tolist() == [4, 5]
    m = devmem.mapped_array(2)
    m[:] = 3.0
    assert devmem.asnumpy(m).tolist() == [3.0, 3.0]


def test_get_and_set():
    d = devmem.device_array(4, dtype=np.int16)
    assert d.set(np.arange(4, dtype=np.int16)) is None
    assert d.get().tolist() == [0, 1, 2, 3]
    s = devmem.stream()
    out = np.empty(4, dtype=np.int16)
    assert d.get(stream=s, out=out) is out
    s.synchronize()
    assert out.tolist() == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="incompatible dtype"):
        d.set(np.zeros(4))


def test_ravel_takes_order_k_and_mapped_takes_only_stream():
    f = devmem.to_device(np.arange(6.0).reshape(2, 3).copy(order="F"))
    k = f.ravel("K")
    assert k.shape == (6,) and k.device_pointer == f.device_pointer  # memory order: a view
    np.testing.assert_array_equal(k.copy_to_host(), np.ravel(f.copy_to_host(), order="K"))
    np.testing.assert_array_equal(f.ravel("C").copy_to_host(), np.arange(6.0))
    with pytest.raises(ValueError, match="order"):
        f.ravel("X")
    # mapped() takes only stream= (Numba's rule); mapped_array takes portable= and wc=.
    with pytest.raises(TypeError, match="unknown keyword argument 'wc'"):
        devmem.mapped(np.zeros(3), wc=True)
    m = devmem.mapped_array(3, wc=True, portable=True)
    m[:] = 1.0
    assert m.copy_to_host().tolist() == [1.0, 1.0, 1.0]
