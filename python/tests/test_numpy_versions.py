"""What differs between NumPy 1 and NumPy 2 (docs/python.md#numpy2): the layout of the dtype
descriptor that the module reads on every call, __array__'s copy keyword, the dtypes NumPy 2
added, and the import check of a module compiled with a pybind11 older than 2.12. Every test runs
under both; the `python` preset runs NumPy 1, `python-numpy2` NumPy 2."""

import textwrap
import warnings

import numpy as np
import pytest

import devmem
from devmem import _devmem

from conftest import run_python

NUMPY2 = int(np.__version__.split(".")[0]) >= 2
PYBIND11 = tuple(int(part) for part in _devmem._pybind11_version.split(".")[:2])


def test_this_numpy_is_supported_by_this_build():
    assert _devmem._numpy_support_error(np.__version__) is None
    assert _devmem._numpy_support_error("1.24.2") is None
    if PYBIND11 >= (2, 12):
        assert _devmem._numpy_support_error("2.4.6") is None
    else:
        message = _devmem._numpy_support_error("2.4.6")
        assert f"pybind11 {_devmem._pybind11_version}" in message
        assert "NumPy 2.4.6" in message and "pybind11 >= 2.12" in message


@pytest.mark.skipif(PYBIND11 >= (2, 12), reason="this build reads NumPy 2's layout")
def test_import_under_numpy2_fails_with_both_versions(tmp_path):
    # A stand-in numpy that only says it is 2.1.0: the module must refuse before reading a dtype.
    (tmp_path / "numpy").mkdir()
    (tmp_path / "numpy" / "__init__.py").write_text("__version__ = '2.1.0'\nndarray = object\n")
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        try:
            import devmem
        except ImportError as error:
            print(error)
        else:
            print("imported")
    """) % str(tmp_path)
    child = run_python(code)
    assert child.returncode == 0, child.stderr
    assert f"pybind11 {_devmem._pybind11_version}" in child.stdout
    assert "NumPy 2.1.0" in child.stdout and "pybind11 >= 2.12" in child.stdout


DESCRIPTOR_CASES = [
    np.dtype("<f8"), np.dtype(">f8"), np.dtype(">i4"), np.dtype("u2"), np.dtype("c16"),
    np.dtype("?"), np.dtype("M8[ns]"), np.dtype("m8[D]"), np.dtype("S70000"), np.dtype("U5"),
    np.dtype("V12"), np.dtype([("a", "u1"), ("b", "<f8")], align=True),
    np.dtype([("a", "u1"), ("b", "<f8")]), np.dtype([("v", "<f4", (3,)), ("n", "<i2")]),
]


@pytest.mark.parametrize("dtype", DESCRIPTOR_CASES, ids=lambda d: d.str)
def test_descriptor_fields_reach_devmem(dtype):
    # The element size devmem allocates and strides by comes from the descriptor (elsize moved in
    # NumPy 2): a wrong read shows as wrong strides, nbytes or bytes.
    d = devmem.device_array((2, 3), dtype=dtype)
    assert d.dtype == dtype and d.itemsize == dtype.itemsize
    assert d.strides == (3 * dtype.itemsize, dtype.itemsize)
    assert d.nbytes == 6 * dtype.itemsize
    host = np.frombuffer(bytes(range(256)) * (6 * dtype.itemsize // 256 + 1), dtype=np.uint8)
    host = host[: 6 * dtype.itemsize].view(dtype).reshape(2, 3)
    back = devmem.to_device(host).copy_to_host()
    assert back.dtype == dtype
    assert back.tobytes() == host.tobytes()


def test_big_endian_values_round_trip():
    host = np.arange(6, dtype=">i4").reshape(2, 3)
    d = devmem.to_device(host)
    assert d.dtype == np.dtype(">i4")
    np.testing.assert_array_equal(d.copy_to_host(), host)
    assert d[1, 2] == 5
    d[0, 0] = 7
    assert d.copy_to_host()[0, 0] == 7


def test_structured_element_stays_on_the_device_plain_element_does_not():
    record = np.dtype([("id", "<i4"), ("x", "<f8")])
    assert isinstance(devmem.to_device(np.zeros(3, dtype=record))[1], devmem.DeviceRecord)
    assert isinstance(devmem.to_device(np.zeros(3, dtype="V8"))[1], np.void)
    assert isinstance(devmem.to_device(np.arange(3.0))[1], np.float64)


def test_dtypes_whose_bytes_are_not_values_are_refused():
    with pytest.raises(TypeError, match="Python objects"):
        devmem.device_array(3, dtype=object)
    with pytest.raises(TypeError, match="Python objects"):
        devmem.device_array(3, dtype=[("x", "<f8"), ("o", "O")])
    with pytest.raises(TypeError, match="sub-array"):
        devmem.device_array(3, dtype=np.dtype(("<f8", (2,))))


@pytest.mark.skipif(not NUMPY2, reason="StringDType is NumPy 2's")
def test_numpy2_string_dtype_is_refused():
    strings = np.array(["a", "bc"], dtype=np.dtypes.StringDType())
    with pytest.raises(TypeError, match="not plain bytes"):
        devmem.to_device(strings)


def test_array_protocol_copy_keyword():
    host = np.arange(4.0)
    d = devmem.to_device(host)
    with warnings.catch_warnings():
        # NumPy 2 warns (DeprecationWarning) about an __array__ without dtype= and copy=.
        warnings.simplefilter("error")
        np.testing.assert_array_equal(np.asarray(d), host)
        np.testing.assert_array_equal(np.array(d), host)
        np.testing.assert_array_equal(np.array(d, copy=True), host)
        assert np.asarray(d, dtype=np.float32).dtype == np.float32
        assert d.__array__(np.int64, copy=True).dtype == np.int64
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        d.__array__(copy=False)
    if NUMPY2:
        with pytest.raises(ValueError, match="Unable to avoid copy"):
            np.asarray(d, copy=False)
        with pytest.raises(ValueError, match="Unable to avoid copy"):
            np.array(d, copy=False)
    else:
        # NumPy 1's copy=False means "only if needed" and is not passed to __array__.
        np.testing.assert_array_equal(np.array(d, copy=False), host)
