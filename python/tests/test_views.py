"""DeviceNDArray views: attributes, slicing (negative steps), element reads, assignment, reshape,
ravel, transpose, split, squeeze, view(dtype) — checked against NumPy on the same data."""

import numpy as np
import pytest

import devmem


@pytest.fixture
def pair(rng):
    host = rng.random((6, 7, 4))
    return host, devmem.to_device(host)


KEYS = [
    1, -1, (2, 3), (slice(1, 5), 2), (slice(None, None, -1),), (slice(5, 0, -2), slice(None), -1),
    (Ellipsis, 1), (1, Ellipsis), (slice(-3, None), slice(None, None, 3), slice(1, 3)),
    (slice(10, 20),), (slice(None), slice(-100, 100, 4)), (),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_matches_numpy(pair, key):
    host, d = pair
    view = d[key]
    expected = host[key]
    assert isinstance(view, devmem.DeviceNDArray)
    assert view.shape == expected.shape and view.strides == expected.strides
    np.testing.assert_array_equal(view.copy_to_host(), expected)


def test_full_index_reads_a_host_scalar(pair):
    host, d = pair
    value = d[2, -1, 3]
    assert isinstance(value, np.floating) and value == host[2, -1, 3]
    assert devmem.to_device(np.int16(-5).reshape(()))[()] == -5


ELEMENT_DTYPES = ["f8", "f4", "f2", "i1", "u8", "c16", "?", ">i4", "M8[s]", "S3", "V4"]


@pytest.mark.parametrize("dtype", ELEMENT_DTYPES)
def test_element_reads_match_numpy_for_every_dtype_and_layout(rng, dtype):
    # One integer per axis is read straight into the scalar (DeviceArray::item_bytes): the same
    # value, type and byte order as NumPy's, on strided, reversed and transposed views too.
    raw = rng.integers(0, 256, size=5 * 6 * np.dtype(dtype).itemsize, dtype=np.uint8)
    host = raw.view(dtype).reshape(5, 6)
    if np.dtype(dtype).kind == "b":
        host = host.astype(bool)

    d = devmem.to_device(host)
    views = [(host, d), (host[::-2, 1::2], d[::-2, 1::2]), (host.T, d.T), (host[3], d[3])]
    for h, v in views:
        for index in np.ndindex(h.shape):
            value = v[index]
            expected = h[index]
            # Bytes, not ==: random bytes make NaNs and NaTs, which equal nothing.
            assert type(value) is type(expected), (dtype, index)
            assert value.tobytes() == expected.tobytes(), (dtype, index)
            negative = v[tuple(i - n for i, n in zip(index, h.shape))]
            assert negative.tobytes() == expected.tobytes(), (dtype, index)
    # NumPy's integer types index too, and the last index is read by a 1-d view's int.
    assert d[np.int64(4), np.int32(-1)] == host[4, -1]
    assert d[4][np.uint8(5)] == host[4, 5]


def test_element_read_on_a_stream_and_through_getitem():
    s = devmem.stream()
    d = devmem.to_device(np.arange(12.0).reshape(3, 4), stream=s)
    assert d.getitem((2, 3), stream=s) == 11.0
    assert d.getitem(1, stream=0).copy_to_host().tolist() == [4.0, 5.0, 6.0, 7.0]  # a row: a view
    records = devmem.to_device(np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]))
    assert isinstance(records[1], devmem.DeviceNDArray)  # a record element stays on the device


def test_bad_indices():
    d = devmem.device_array((3, 4))
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        d[0, 4]
    with pytest.raises(IndexError, match="out of bounds"):
        d[-4]
    with pytest.raises(IndexError, match="too many indices"):
        d[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        d[..., ...]
    with pytest.raises(IndexError, match="valid indices"):
        d[[0, 1]]
    with pytest.raises(IndexError, match="valid indices"):
        d[None]
    with pytest.raises(IndexError, match="valid indices"):
        d[True, 0]  # a bool is not an index, as in the general path
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 0 with size 3"):
        d[-4, 0]
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        d[np.int64(2), np.int64(4)]
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 with size 4"):
        d[0][4]
    with pytest.raises(ValueError, match="step cannot be zero"):
        d[::0]


def test_setitem_scalars_arrays_and_broadcasting(rng):
    host = np.zeros((4, 5))
    d = devmem.to_device(host)
    d[1] = 3.0
    host[1] = 3.0
    d[:, 2] = np.arange(4.0)
    host[:, 2] = np.arange(4.0)
    d[2:, ::-2] = [[7.0], [8.0]]  # a size-1 axis stretches
    host[2:, ::-2] = [[7.0], [8.0]]
    d[0, 0] = 42
    host[0, 0] = 42
    row = rng.random(5)
    d[3] = devmem.to_device(row)  # from another device array
    host[3] = row
    d[-1, 1:3] = devmem.to_device(np.array([[1.5], [2.5]]).T)  # squeezed shapes match
    host[-1, 1:3] = [1.5, 2.5]
    np.testing.assert_array_equal(d.copy_to_host(), host)
    d[...] = devmem.to_device(np.array([9.0]))  # broadcast from the device, through the host
    assert (d.copy_to_host() == 9.0).all()


def test_setitem_errors():
    d = devmem.device_array((2, 3))
    with pytest.raises(ValueError):
        d[0] = np.zeros(4)
    with pytest.raises(ValueError):
        d[0] = np.zeros((2, 3))  # more axes than the target
    with pytest.raises(TypeError, match="incompatible dtype"):
        d[0] = devmem.to_device(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError):
        d[0] = "text"


def test_setitem_with_a_stream_is_ordered_on_that_stream():
    d = devmem.device_array(1000)
    s = devmem.stream()
    d.setitem(slice(None), 2.0, stream=s)
    s.synchronize()
    assert d.getitem(999, stream=s) == 2.0


def test_attributes_and_contiguity():
    d = devmem.device_array((3, 4), dtype=np.int32)
    assert len(d) == 3 and d.itemsize == 4
    assert d.flags == {"C_CONTIGUOUS": True, "F_CONTIGUOUS": False}
    assert d.is_c_contiguous() and not d.is_f_contiguous()
    assert d.T.is_f_contiguous() and not d.T.is_c_contiguous()
    assert not d[:, ::2].is_c_contiguous()
    one_row = devmem.device_array((1, 10))
    assert one_row.is_c_contiguous() and one_row.is_f_contiguous()
    with pytest.raises(TypeError, match="unsized"):
        len(devmem.device_array(()))
    assert d.device_pointer != 0 and devmem.device_array(0).device_pointer == 0
    assert "shape=(3, 4)" in repr(d)


def test_reshape_follows_numpy(rng):
    host = rng.random((4, 6))
    d = devmem.to_device(host)
    for args, kwargs in [((3, 8), {}), (((2, 12),), {}), (([24],), {}), ((-1, 4), {}),
                         ((6, -1), {"order": "F"}), ((2, 2, 6), {"order": "A"})]:
        expected = host.reshape(*args, **kwargs)
        got = d.reshape(*args, **kwargs)
        np.testing.assert_array_equal(got.copy_to_host(), expected)
    # An F-contiguous array reshaped in C order gives NumPy's values, never a reinterpretation.
    f = devmem.to_device(np.asfortranarray(np.arange(6).reshape(2, 3)))
    np.testing.assert_array_equal(f.reshape(3, 2).copy_to_host(), np.arange(6).reshape(3, 2))
    # A non-contiguous view reshapes too (a copy where no view can do it).
    np.testing.assert_array_equal(d[:, ::2].reshape(12).copy_to_host(), host[:, ::2].reshape(12))


def test_reshape_errors():
    d = devmem.device_array((4, 6))
    with pytest.raises(ValueError, match="size"):
        d.reshape(5, 5)
    with pytest.raises(ValueError):
        d.reshape(-1, -1)
    with pytest.raises(TypeError, match="unknown keyword arguments"):
        d.reshape(24, foo=1)
    with pytest.raises(ValueError, match="C\\|F\\|A"):
        d.reshape(24, order="K")


def test_ravel_transpose_squeeze_view(rng):
    host = rng.random((3, 1, 4))
    d = devmem.to_device(host)
    np.testing.assert_array_equal(d.ravel().copy_to_host(), host.ravel())
    np.testing.assert_array_equal(d.ravel(order="F").copy_to_host(), host.ravel(order="F"))
    np.testing.assert_array_equal(d[:, :, ::-1].ravel().copy_to_host(), host[:, :, ::-1].ravel())
    assert d.T.shape == (4, 1, 3) and d.T.strides == host.T.strides
    np.testing.assert_array_equal(d.transpose((1, 2, 0)).copy_to_host(), host.transpose(1, 2, 0))
    with pytest.raises(ValueError):
        d.transpose((0, 0, 1))
    assert d.squeeze().shape == (3, 4) and d.squeeze(1).shape == (3, 4)
    assert d.squeeze(axis=(1,)).shape == (3, 4)
    with pytest.raises(ValueError, match="size"):
        d.squeeze(0)
    with pytest.raises(IndexError, match="out of bounds"):
        d.squeeze(5)
    as_ints = d.view(np.int64)
    assert as_ints.dtype == np.int64
    np.testing.assert_array_equal(as_ints.copy_to_host(), host.view(np.int64))
    halves = d.view(np.float32)
    assert halves.shape == (3, 1, 8)
    with pytest.raises(ValueError):
        d[:, :, ::2].view(np.float32)


def test_split_gives_views_of_section_elements():
    d = devmem.to_device(np.arange(10))
    parts = d.split(3)
    assert [p.shape for p in parts] == [(3,), (3,), (3,), (1,)]
    parts[1][...] = -1
    np.testing.assert_array_equal(d.copy_to_host(), [0, 1, 2, -1, -1, -1, 6, 7, 8, 9])
    # Any stride, unlike Numba.
    assert [p.copy_to_host().tolist() for p in d[::-3].split(2)] == [[9, 6], [-1, 0]]
    with pytest.raises(ValueError):
        d.split(0)
    with pytest.raises(ValueError):
        devmem.device_array((2, 2)).split(1)


def test_views_keep_the_stream():
    s = devmem.stream()
    d = devmem.device_array((4, 4), stream=s)
    assert d.stream == s
    for view in (d[1:], d[0], d.T, d.reshape(16), d.ravel(), d.view(np.int64), d.squeeze(),
                 d.reshape(16).split(4)[1]):
        assert view.stream == s
    other = devmem.stream()
    assert d.bind(other).stream == other and d.stream == s


def test_array_protocol_and_copy():
    d = devmem.to_device(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(d), np.arange(6).reshape(2, 3))
    assert np.asarray(d, dtype=np.float32).dtype == np.float32
    c = d.T.copy()
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(6).reshape(2, 3).T)
    c[0, 0] = 100
    assert d[0, 0] == 0
