"""Allocation and transfer with Numba's names and defaults: to_device, device_array(_like),
copy_to_host / copy_to_device, pinned and mapped memory, records, every NumPy dtype kind."""

import numpy as np
import pytest

import devmem

DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128,
          np.dtype("M8[s]"), np.dtype("m8[ms]"), np.dtype("S5")]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).str)
def test_round_trip_keeps_values_and_dtype(dtype, rng):
    host = (rng.integers(0, 100, size=(7, 5))).astype(dtype)
    d = devmem.to_device(host)
    assert d.dtype == np.dtype(dtype)
    assert d.shape == (7, 5) and d.ndim == 2 and d.size == 35
    assert d.strides == host.strides
    assert d.nbytes == host.nbytes and d.alloc_size == host.nbytes
    back = d.copy_to_host()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back, host)


def test_records_keep_field_names_and_values():
    dtype = np.dtype([("id", "<i4"), ("x", "<f8"), ("tag", "S3")], align=True)
    host = np.zeros(4, dtype=dtype)
    host["id"] = [1, 2, 3, 4]
    host["x"] = [0.5, 1.5, 2.5, 3.5]
    host["tag"] = [b"a", b"bb", b"ccc", b"d"]
    d = devmem.to_device(host)
    assert d.dtype == dtype
    np.testing.assert_array_equal(d.copy_to_host(), host)
    # An element of a record array stays on the device, like Numba's DeviceRecord.
    record = d[2]
    assert isinstance(record, devmem.DeviceRecord)
    assert record.shape == () and record.dtype == dtype
    assert record.copy_to_host()["x"] == 2.5
    # A structured scalar goes to the device as a 0-d array.
    scalar = devmem.to_device(host[1])
    assert scalar.shape == () and scalar.copy_to_host()["id"] == 2


def test_to_device_defaults_copy_false_and_to():
    host = np.arange(10, dtype=np.int32)
    d = devmem.to_device(host, copy=False)
    assert d.shape == host.shape and d.dtype == host.dtype
    target = devmem.device_array(10, dtype=np.int32)
    same = devmem.to_device(host * 2, to=target)
    assert same is target
    np.testing.assert_array_equal(target.copy_to_host(), host * 2)
    # A list works as NumPy would read it.
    np.testing.assert_array_equal(devmem.to_device([1.0, 2.0]).copy_to_host(), [1.0, 2.0])


def test_to_device_into_array_of_another_dtype_is_a_type_error():
    target = devmem.device_array(4, dtype=np.float32)
    with pytest.raises(TypeError, match="incompatible dtype: float32 vs. float64"):
        devmem.to_device(np.zeros(4), to=target)


def test_device_array_defaults_orders_and_strides():
    d = devmem.device_array((2, 3, 4))
    assert d.dtype == np.float64 and d.strides == (96, 32, 8)
    f = devmem.device_array((2, 3, 4), order="F")
    assert f.strides == (8, 16, 48) and f.is_f_contiguous() and not f.is_c_contiguous()
    assert devmem.device_array(5, dtype="i2").shape == (5,)
    strided = devmem.device_array(10, dtype=np.float64, strides=16)
    assert strided.strides == (16,) and strided.alloc_size == 152
    assert devmem.device_array((0, 5)).alloc_size == 0
    assert devmem.device_array(()).shape == ()


@pytest.mark.parametrize("shape", [2.5, (2, 3.0), "3", (2, None)])
def test_device_array_rejects_shapes_that_are_not_integers(shape):
    with pytest.raises(TypeError, match="integer"):
        devmem.device_array(shape)


def test_device_array_accepts_numpy_integer_shapes():
    assert devmem.device_array(np.array([2, 3])).shape == (2, 3)
    assert devmem.device_array((np.int64(4),)).shape == (4,)


def test_device_array_bad_arguments():
    with pytest.raises(ValueError, match="C/F order"):
        devmem.device_array(3, order="X")
    with pytest.raises(devmem.InvalidArgument, match="negative dimension -2"):
        devmem.device_array((3, -2))
    with pytest.raises(TypeError, match="not understood"):
        devmem.device_array(3, dtype="not-a-dtype")
    with pytest.raises(TypeError, match="Python objects"):
        devmem.device_array(3, dtype=object)
    with pytest.raises(TypeError, match="stream"):
        devmem.device_array(3, stream="fast")


def test_out_of_memory_is_a_memory_error():
    total = devmem.memory_info().total
    with pytest.raises(MemoryError) as caught:
        devmem.device_array(total * 4, dtype=np.uint8)
    assert isinstance(caught.value, devmem.OutOfMemory)
    assert caught.value.requested_bytes >= total * 4
    # Nothing leaked: a normal allocation still works.
    assert devmem.device_array(16).size == 16


def test_device_array_like_keeps_layout():
    host = np.asfortranarray(np.zeros((3, 4), dtype=np.float32))
    d = devmem.device_array_like(host)
    assert d.shape == (3, 4) and d.dtype == np.float32 and d.is_f_contiguous()
    again = devmem.device_array_like(d)
    assert again.strides == d.strides and again.dtype == d.dtype


def test_copy_to_host_into_existing_array_and_strided_views(rng):
    host = rng.random((6, 8))
    d = devmem.to_device(host)
    out = np.empty_like(host)
    assert d.copy_to_host(out) is out
    np.testing.assert_array_equal(out, host)
    # A strided device view into a strided host view writes only the addressed elements.
    target = np.full((6, 8), -1.0)
    d[::2, 1::3].copy_to_host(target[1::2, ::3])
    expected = np.full((6, 8), -1.0)
    expected[1::2, ::3] = host[::2, 1::3]
    np.testing.assert_array_equal(target, expected)
    # Negative strides copy correctly (Numba refuses them).
    np.testing.assert_array_equal(d[::-1, ::-2].copy_to_host(), host[::-1, ::-2])


def test_copy_to_host_errors():
    d = devmem.to_device(np.zeros(4))
    with pytest.raises(TypeError, match="incompatible dtype"):
        d.copy_to_host(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        d.copy_to_host(np.zeros(5))
    readonly = np.zeros(4)
    readonly.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        d.copy_to_host(readonly)
    with pytest.raises(TypeError, match="NumPy array"):
        d.copy_to_host([0, 0, 0, 0])


def test_copy_to_device_from_host_and_device(rng):
    d = devmem.device_array((4, 5))
    host = rng.random((4, 5))
    d.copy_to_device(host)
    np.testing.assert_array_equal(d.copy_to_host(), host)
    other = devmem.device_array((4, 5))
    other.copy_to_device(d)
    np.testing.assert_array_equal(other.copy_to_host(), host)
    # A C host array into an F device array, and a strided host view into a dense device array.
    f = devmem.device_array((4, 5), order="F")
    f.copy_to_device(host)
    np.testing.assert_array_equal(f.copy_to_host(), host)
    big = rng.random((8, 10))
    d.copy_to_device(big[::2, ::2])
    np.testing.assert_array_equal(d.copy_to_host(), big[::2, ::2])
    with pytest.raises(TypeError, match="incompatible dtype"):
        d.copy_to_device(devmem.device_array((4, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        d.copy_to_device(np.zeros((5, 4)))


def test_size_one_axes_are_compatible_like_numba():
    d = devmem.device_array((1, 5))
    d.copy_to_device(np.arange(5.0))
    out = np.zeros(5)
    d.copy_to_host(out)
    np.testing.assert_array_equal(out, np.arange(5.0))


def test_pinned_array_is_numpy_in_page_locked_memory():
    p = devmem.pinned_array((3, 4), dtype=np.int16, order="F")
    assert isinstance(p, np.ndarray) and p.dtype == np.int16 and p.flags.f_contiguous
    p[:] = np.arange(12, dtype=np.int16).reshape(3, 4)
    d = devmem.to_device(p)
    np.testing.assert_array_equal(d.copy_to_host(), p)
    base = p.base
    del p
    assert base is not None  # the allocation lives as long as any NumPy view of it


def test_mapped_array_host_and_device_views_share_bytes():
    m = devmem.mapped_array((4, 6), dtype=np.int32)
    assert isinstance(m, devmem.MappedNDArray) and isinstance(m, np.ndarray)
    m[:] = np.arange(24).reshape(4, 6)
    dev = m.device_array()
    np.testing.assert_array_equal(dev.copy_to_host(), m)
    dev[1, :] = 0
    devmem.synchronize()
    assert (m[1] == 0).all()
    # Unlike Numba's, a NumPy slice keeps a device view of its own bytes.
    part = m[1:3, ::2]
    np.testing.assert_array_equal(part.device_array().copy_to_host(), np.asarray(part))
    part.device_array()[...] = 7
    devmem.synchronize()
    assert (m[1:3, ::2] == 7).all() and (m[1:3, 1::2] != 7).all()


def test_mapped_array_passes_portable_and_write_combined():
    m = devmem.mapped_array(8, dtype=np.uint8, portable=True, wc=True)
    m[:] = 3
    assert m.device_array().copy_to_host().sum() == 24


def test_pinned_scope_allows_pinning_again_at_once():
    host = np.arange(1000.0)
    for _ in range(3):
        with devmem.pinned(host):
            d = devmem.to_device(host)
    np.testing.assert_array_equal(d.copy_to_host(), host)
    with pytest.raises(TypeError, match="NumPy arrays"):
        devmem.pinned([1, 2, 3])


def test_mapped_scope_gives_device_views_and_unmaps():
    a = np.arange(6.0)
    b = np.zeros((2, 3), dtype=np.int32)
    with devmem.mapped(a) as da:
        assert isinstance(da, devmem.DeviceNDArray)
        np.testing.assert_array_equal(da.copy_to_host(), a)
    with devmem.mapped(a, b, stream=devmem.stream()) as views:
        assert [v.shape for v in views] == [(6,), (2, 3)]
        views[1][...] = 5
        views[1].stream.synchronize()
    assert (b == 5).all()
    with pytest.raises(TypeError, match="unknown keyword"):
        devmem.mapped(a, portable=True)
    # Mapping again right after the block works: the memory was unmapped at exit.
    with devmem.mapped(a) as da:
        assert da.size == 6


def test_host_registration_by_address():
    host = np.zeros(4096, dtype=np.uint8)
    address = host.__array_interface__["data"][0]
    with devmem.HostRegistration(address, host.nbytes) as registration:
        assert registration.is_open and not registration.mapped
        with pytest.raises(ValueError, match="mapped=True"):
            registration.device_pointer
    assert not registration.is_open
    mapped = devmem.HostRegistration(address, host.nbytes, mapped=True)
    assert mapped.device_pointer != 0
    mapped.close()
    mapped.close()  # idempotent
    with pytest.raises(ValueError, match="size must be positive"):
        devmem.HostRegistration(address, 0)
    with pytest.raises(ValueError, match="null pointer"):
        devmem.HostRegistration(0, 16)
