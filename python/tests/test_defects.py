"""Defects found by trying the package as a Numba/CuPy user would, each as its reproducer showed
it: interpreter exit with a daemon thread inside devmem, non-native byte order and full dtypes
across DLPack and IPC, out-of-range integers and wrong types, stream comparisons, and the
out-of-memory message inside defer_cleanup."""

import subprocess
import sys

import numpy as np
import pytest

import devmem

from conftest import host_backend_only, run_python

IPC_CHILD = ("import sys, devmem; a = devmem.open_ipc_array(bytes.fromhex(sys.argv[1]));"
             " print(repr(a.dtype.descr)); print(a.dtype.alignment, a.dtype.isalignedstruct);"
             " print(a.copy_to_host().tolist())")


def open_in_child(d):
    """Opens d's IPC handle in a new interpreter; returns its dtype.descr, alignment, aligned
    flag and values as that process printed them."""
    result = subprocess.run([sys.executable, "-c", IPC_CHILD, d.get_ipc_handle().to_bytes().hex()],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    descr, flags, values = result.stdout.strip().splitlines()
    alignment, aligned = flags.split()
    return descr, int(alignment), aligned == "True", values


def requires_ipc():
    if not devmem.ipc_supported():
        pytest.skip(f"the {devmem.backend_name()} backend has no IPC here")


# -- interpreter exit while a daemon thread is inside a devmem call -------------------------------

DAEMON_EXIT = """
import threading, time
import devmem

def worker():
    while True:
        devmem.device_array(100)
        devmem.to_device(b"0123456789").copy_to_host()

for _ in range(2):
    threading.Thread(target=worker, daemon=True).start()
time.sleep(0.05)
print("main thread exits now")
"""


def test_interpreter_exit_with_a_daemon_thread_inside_devmem_is_clean():
    # Before: std::terminate (exit 134) nearly every time, CPython's pthread_exit of the daemon
    # thread unwinding through the GIL release's noexcept destructor.
    for run in range(8):
        child = run_python(DAEMON_EXIT)
        assert child.returncode == 0, (run, child.returncode, child.stderr[-2000:])
        assert "main thread exits now" in child.stdout
        assert "terminate" not in child.stderr


# -- byte order ------------------------------------------------------------------------------------

def test_dlpack_refuses_non_native_byte_order_as_numpy_does():
    host = np.arange(3, dtype=">i4")
    d = devmem.to_device(host)
    assert d.dtype == np.dtype(">i4")
    assert d.copy_to_host().tolist() == [0, 1, 2]
    with pytest.raises(BufferError, match="native byte order, not dtype\\('>i4'\\)"):
        d.__dlpack__()
    with pytest.raises(BufferError, match="native byte order"):
        np.from_dlpack(d)
    with pytest.raises(BufferError, match="native byte order"):
        devmem.from_dlpack(d)
    with pytest.raises(BufferError):  # NumPy's own rule, which devmem follows
        np.from_dlpack(host)
    # Native order (explicitly '<' on this machine, or '=') still exports.
    native = devmem.to_device(np.arange(3, dtype="=i4"))
    assert devmem.from_dlpack(native).copy_to_host().tolist() == [0, 1, 2]
    if devmem.backend_name() == "host":  # NumPy takes CPU tensors only (a GPU's: BufferError)
        assert np.from_dlpack(native).tolist() == [0, 1, 2]


def test_dlpack_refuses_dtypes_it_has_no_type_for():
    for host in [np.array([(1.5, 2)], dtype=[("a", "f8"), ("b", "i4")]),
                 np.array(["2020-01-01"], "M8[D]"), np.array([b"ab"], "S2")]:
        with pytest.raises(BufferError, match="DLPack only supports bool, integer"):
            devmem.to_device(host).__dlpack__()


def test_ipc_carries_non_native_byte_order():
    requires_ipc()
    d = devmem.to_device(np.arange(3, dtype=">i4"))
    assert d.get_ipc_handle().dtype == np.dtype(">i4")
    descr, _, _, values = open_in_child(d)
    assert descr == "[('', '>i4')]"
    assert values == "[0, 1, 2]"


# -- IPC keeps the whole NumPy dtype -------------------------------------------------------------

@pytest.mark.parametrize("host", [
    np.array([(1.5, 2), (-3.0, 7)], dtype=[("a", "f8"), ("b", "i4")]),
    np.array([(1.5, 2)], dtype=np.dtype([("a", "f8"), ("b", "i4")], align=True)),
    np.array([(1, (2.0, [3, 4]))],
             dtype=[("x", ">u2"), ("inner", [("y", "<f4"), ("z", "i1", (2,))])]),
    np.array(["2020-01-01", "1999-12-31"], "M8[D]"),
    np.array([1234, -5], "m8[10ms]"),
    np.array([b"abc", b"d"], "S3"),
    np.array(["hé", "x"], "U2"),
    np.array([True, False]),
], ids=["structured", "aligned-structured", "nested-big-endian", "datetime64-D",
        "timedelta64-10ms", "bytes", "unicode", "bool"])
def test_ipc_round_trips_the_full_dtype(host):
    requires_ipc()
    d = devmem.to_device(host)
    descr, alignment, aligned, values = open_in_child(d)
    assert descr == repr(host.dtype.descr)
    assert alignment == host.dtype.alignment
    assert aligned == host.dtype.isalignedstruct
    assert values == repr(host.tolist())


def test_ipc_handle_has_the_exported_dtype():
    requires_ipc()
    dtype = np.dtype({"names": ["a", "b"], "formats": ["f8", ("i4", (2,))], "offsets": [0, 8],
                      "itemsize": 24}, align=True)
    handle = devmem.to_device(np.zeros(2, dtype)).get_ipc_handle()
    for h in [handle, devmem.IpcHandle.from_bytes(handle.to_bytes())]:
        assert h.dtype == dtype
        assert h.dtype.isalignedstruct and h.dtype.itemsize == 24 and h.dtype.alignment == 8


# -- DLPack bool ----------------------------------------------------------------------------------

def test_dlpack_bool_is_kdlbool_for_consumers_that_know_it():
    d = devmem.to_device(np.array([True, False, True]))
    # devmem reads kDLBool: its own round trip keeps bool.
    back = devmem.from_dlpack(d)
    assert back.dtype == np.dtype(bool)
    assert back.copy_to_host().tolist() == [True, False, True]
    with pytest.raises(TypeError, match="max_version must be"):
        d.__dlpack__(max_version=1)
    # A consumer that announces DLPack 1 gets kDLBool; one that does not (NumPy 1) gets uint8,
    # the only 1-byte type DLPack 0.x has. NumPy takes CPU tensors only: on the host backend.
    if devmem.backend_name() != "host":
        return
    legacy = np.from_dlpack(d)
    if np.lib.NumpyVersion(np.__version__) < "2.0.0":
        assert legacy.dtype == np.uint8 and legacy.tolist() == [1, 0, 1]
    else:
        assert legacy.dtype == np.bool_ and legacy.tolist() == [True, False, True]


def test_dlpack_takes_dlpack_1_arguments():
    # NumPy 2 calls __dlpack__(max_version=(1, 0), dl_device=None, copy=None).
    d = devmem.to_device(np.arange(4.0))
    device = d.__dlpack_device__()
    shared = devmem.from_dlpack(d.__dlpack__(max_version=(1, 0), dl_device=device, copy=False))
    copied = devmem.from_dlpack(d.__dlpack__(copy=True))
    d[0] = 42.0
    assert shared.copy_to_host().tolist() == [42.0, 1.0, 2.0, 3.0]
    assert copied.copy_to_host().tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="dl_device \\(99, 0\\) is not the array's device"):
        d.__dlpack__(dl_device=(99, 0))


# -- out-of-range integers and wrong types --------------------------------------------------------

def test_out_of_range_integers_raise_python_errors_not_cast_errors():
    host = np.arange(10.0)
    d = devmem.to_device(host)
    for index in [2**63, -2**63 - 1, 2**100]:
        with pytest.raises(IndexError, match=f"index {index} is out of bounds for axis 0 with size 10"):
            d[index]
    # Slices clip as NumPy's do.
    for key in [slice(1, 2**100), slice(-2**100, 3), slice(None, None, 2**100),
                slice(2**100, None, -1), slice(None, -2**100, -3)]:
        assert d[key].shape == host[key].shape, key
        np.testing.assert_array_equal(d[key].copy_to_host(), host[key])
    for shape in [2**63, -2**64, (2, 2**63)]:
        with pytest.raises(ValueError, match="shape 9223372036854775808|shape -18446744073709551616"):
            devmem.device_array(shape)


def test_wrong_types_raise_type_errors_naming_them():
    with pytest.raises(TypeError, match="`to` must be a DeviceNDArray.*numpy.ndarray"):
        devmem.to_device(np.ones(10), to=np.zeros(10))
    with pytest.raises(TypeError, match="handle must be a devmem.IpcHandle.*got <class 'int'>"):
        devmem.open_ipc_array(12)
    # Text is read as to_hex()'s hexadecimal form.
    with pytest.raises(ValueError, match="from_hex"):
        devmem.open_ipc_array("abc")
    with pytest.raises(ValueError, match="IpcHandle::from_bytes"):
        devmem.open_ipc_array(bytearray(b"not a handle"))


def test_open_ipc_array_takes_the_handle_bytes_and_hex_text():
    requires_ipc()
    d = devmem.to_device(np.arange(4, dtype=np.int16))
    handle = d.get_ipc_handle()
    code = ("import sys, devmem\n"
            "h = sys.argv[1]\n"
            "for form in (h, bytes.fromhex(h), bytearray.fromhex(h), memoryview(bytes.fromhex(h)),"
            " devmem.IpcHandle.from_bytes(bytes.fromhex(h))):\n"
            "    print(devmem.open_ipc_array(form).copy_to_host().tolist())\n")
    child = subprocess.run([sys.executable, "-c", code, handle.to_hex()], capture_output=True,
                           text=True, timeout=60, check=False)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split("\n")[:5] == ["[0, 1, 2, 3]"] * 5


# -- stream comparisons ---------------------------------------------------------------------------

def test_streams_compare_with_other_types_without_raising():
    s = devmem.stream()
    assert (s == 0) is False
    assert (s != None) is True  # noqa: E711 (the comparison is what is tested)
    assert s not in (0, None)
    assert s in (0, None, s)
    assert s == s and not (s != s)
    assert s != devmem.stream()
    assert devmem.default_stream() == devmem.default_stream()
    assert s.__eq__(0) is NotImplemented and s.__ne__("x") is NotImplemented
    assert len({s, s, devmem.default_stream()}) == 2


# -- out of memory inside defer_cleanup -----------------------------------------------------------

DEFER_OOM = """
import numpy as np
import devmem
for i in range(200):
    try:
        with devmem.defer_cleanup():
            x = devmem.device_array(1 << 20, dtype=np.uint8)
            del x
    except devmem.OutOfMemory as e:
        print(i, devmem.pending_deallocations())
        print(e)
        break
devmem.flush_deallocations()
print("after flush", devmem.pending_deallocations(), devmem.device_array(1 << 20, np.uint8).size)
"""


@host_backend_only
def test_out_of_memory_inside_defer_cleanup_says_what_it_holds():
    child = run_python(DEFER_OOM, env={"DEVMEM_HOST_DEVICE_MEMORY": "64M",
                                       "DEVMEM_MEMORY_MANAGER": "direct"})
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    iteration, pending = map(int, lines[0].split())
    assert 0 < pending <= iteration
    message = lines[1]
    assert message.startswith("device_array: out of device memory allocating 1048576 bytes")
    assert (f"nothing flushed: inside defer_cleanup, which is holding {pending} pending "
            "deallocation(s) of ") in message
    assert "call flush_deallocations() after the block" in message
    assert "after flushing" not in message
    assert lines[2] == "after flush 0 1048576"
