"""PyTorch interop on the host backend: CPU tensors and devmem arrays share memory through DLPack,
both ways (torch.from_dlpack of a devmem array, devmem.from_dlpack of a tensor).

Debian 12's python3-torch (1.13, CPU; scripts/install-deps.sh --torch) runs them under
/usr/bin/python3; they skip where torch is not installed (the CPython 3.12 venv: PyPI's torch is
the multi-GB CUDA build). What torch itself cannot do is checked to fail as it does for NumPy's
arrays (torch 1.13 exports no bool tensor, reads kDLBool nowhere, and aborts the process on a
negative stride), so that a newer torch that can is then checked for sharing too.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devmem

# Decided before torch is imported: the GPU backends' runs (HIP-CPU's among them) never load it.
if devmem.backend_name() != "host":
    pytest.skip("CPU tensors share memory with devmem's host backend only "
                f"(devmem runs '{devmem.backend_name()}')", allow_module_level=True)
torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(scripts/install-deps.sh --torch: Debian's python3-torch)")

# Every element type that both NumPy (so devmem) and torch have. torch's unsigned 16-, 32- and
# 64-bit types exist from torch 2.3 on; bfloat16 and complex32 have no NumPy type.
DTYPES = [
    (np.bool_, "bool"),
    (np.int8, "int8"),
    (np.uint8, "uint8"),
    (np.int16, "int16"),
    (np.uint16, "uint16"),
    (np.int32, "int32"),
    (np.uint32, "uint32"),
    (np.int64, "int64"),
    (np.uint64, "uint64"),
    (np.float16, "float16"),
    (np.float32, "float32"),
    (np.float64, "float64"),
    (np.complex64, "complex64"),
    (np.complex128, "complex128"),
]
BOTH_KNOW = [(np.dtype(n), getattr(torch, t)) for n, t in DTYPES if hasattr(torch, t)]


def _values(dtype, count=6):
    if dtype == np.bool_:
        return np.arange(count) % 3 == 0
    values = np.arange(count).astype(dtype)
    if dtype.kind == "c":
        values = values + 1j * np.arange(count, 0, -1).astype(dtype)
    return values


def _address(d):
    return d.device_ctypes_pointer.value or 0


class _Recorder:
    """Forwards to a devmem array's DLPack methods and records what the consumer asked for."""

    def __init__(self, array):
        self.array = array
        self.kwargs = None

    def __dlpack__(self, **kwargs):
        self.kwargs = kwargs
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _torch_reads_dlpack_1():
    """Whether torch.from_dlpack asks for DLPack 1 (max_version), which has kDLBool."""
    recorder = _Recorder(devmem.to_device(np.zeros(1, dtype=np.int8)))
    torch.from_dlpack(recorder)
    version = (recorder.kwargs or {}).get("max_version")
    return version is not None and tuple(version)[0] >= 1


def _torch_exports(tensor):
    """None if torch can export `tensor` through DLPack, else its error (torch 1.13: bool)."""
    try:
        tensor.__dlpack__()
    except (RuntimeError, BufferError, TypeError) as error:
        return error
    return None


def test_devmem_array_seen_by_torch_shares_memory():
    d = devmem.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))
    t = torch.from_dlpack(d)
    assert t.device.type == "cpu" and t.dtype == torch.int32
    assert tuple(t.shape) == (3, 4) and t.stride() == (4, 1)
    assert t.data_ptr() == _address(d)
    t[1, 2] = -7  # torch's write is devmem's memory
    assert d.copy_to_host()[1, 2] == -7
    d[0, 0] = 99  # and devmem's write is torch's
    assert int(t[0, 0]) == 99
    # The capsule form (torch.utils.dlpack.from_dlpack of __dlpack__()) too.
    again = torch.utils.dlpack.from_dlpack(d.__dlpack__())
    assert again.data_ptr() == t.data_ptr() and again.tolist() == t.tolist()


def test_torch_tensor_seen_by_devmem_shares_memory():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    d = devmem.from_dlpack(t)
    assert d.shape == (3, 4) and d.strides == (16, 4) and d.dtype == np.float32
    assert _address(d) == t.data_ptr()
    d[2, 3] = -1.5
    assert float(t[2, 3]) == -1.5
    t[0, 1] = 42.0
    assert d.copy_to_host()[0, 1] == 42.0
    # The view keeps the tensor's memory alive after the last torch reference goes.
    expected = t.numpy().copy()
    del t
    np.testing.assert_array_equal(d.copy_to_host(), expected)


@pytest.mark.parametrize("view", [
    lambda t: t[::2, 1::2],
    lambda t: t[:, :, 3],
    lambda t: t.transpose(0, 2),
    lambda t: t[1:, ::3, ::2].permute(2, 0, 1),
], ids=["step-slices", "column", "transpose", "permuted-steps"])
def test_strided_tensors_reach_devmem_as_views(view):
    base = torch.arange(60, dtype=torch.int64).reshape(3, 4, 5)
    t = view(base)
    d = devmem.from_dlpack(t)
    assert d.shape == tuple(t.shape)
    assert d.strides == tuple(s * 8 for s in t.stride())
    assert _address(d) == t.data_ptr()
    np.testing.assert_array_equal(d.copy_to_host(), t.numpy())
    d[(0,) * d.ndim] = -1  # the first element of the view, in the base tensor
    assert int(t[(0,) * t.dim()]) == -1
    assert int(base.flatten()[(t.data_ptr() - base.data_ptr()) // 8]) == -1


@pytest.mark.parametrize("view", [
    lambda d: d[::2, 1::2],
    lambda d: d[:, :, 3],
    lambda d: d.T,
    lambda d: d[1:, ::3, ::2].transpose((2, 0, 1)),
], ids=["step-slices", "column", "transpose", "permuted-steps"])
def test_strided_devmem_views_reach_torch_as_views(view):
    host = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    base = devmem.to_device(host)
    d = view(base)
    t = torch.from_dlpack(d)
    assert tuple(t.shape) == d.shape
    assert tuple(s * 8 for s in t.stride()) == d.strides
    assert t.data_ptr() == _address(d)
    np.testing.assert_array_equal(t.numpy(), view(host))
    t[(0,) * t.dim()] = -2.0
    assert d.copy_to_host()[(0,) * d.ndim] == -2.0
    expected = host.copy()
    view(expected)[(0,) * d.ndim] = -2.0
    np.testing.assert_array_equal(base.copy_to_host(), expected)


def test_negative_strides_over_a_tensors_memory():
    # torch makes no negative strides; devmem's views of a tensor's memory can have them, and a
    # write through one lands in the tensor.
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    d = devmem.from_dlpack(t)[::-1, ::-2]
    assert d.strides == (-20, -8)
    np.testing.assert_array_equal(d.copy_to_host(), t.numpy()[::-1, ::-2])
    d[0, 0] = -3.0  # the last row's last element
    assert float(t[3, 4]) == -3.0
    # NumPy reads the negative strides through devmem's DLPack export, still over the tensor.
    flipped = np.from_dlpack(d)
    assert flipped.strides == (-20, -8)
    np.testing.assert_array_equal(flipped, t.numpy()[::-1, ::-2])
    # And a C-ordered copy on the device is an ordinary strided array that torch takes as is.
    t2 = torch.from_dlpack(d.copy(order="C"))
    assert t2.stride() == (3, 1)
    np.testing.assert_array_equal(t2.numpy(), t.numpy()[::-1, ::-2])


_NEGATIVE_STRIDE_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    import devmem
    host = np.arange(10, dtype=np.float64)[::-2]
    source = devmem.to_device(np.arange(10, dtype=np.float64))[::-2] if sys.argv[1] == "devmem" \\
        else host
    try:
        t = torch.from_dlpack(source)
    except Exception as error:
        print("raised", type(error).__name__, str(error).splitlines()[0])
    else:
        print("gave", t.tolist(), t.stride())
""")


def test_torch_reads_devmems_negative_strides_as_it_reads_numpys():
    # torch 1.13 aborts the process ("Storage size calculation overflowed", an uncaught c10::Error)
    # for NumPy's negative strides as for devmem's: each in a child process, compared.
    results = {}
    for producer in ("numpy", "devmem"):
        child = subprocess.run([sys.executable, "-c", _NEGATIVE_STRIDE_CHILD, producer],
                               capture_output=True, text=True, timeout=120, check=False)
        lines = [line for line in child.stderr.splitlines() if line.startswith("  what():")]
        results[producer] = (child.returncode, child.stdout.strip(), lines[:1])
    assert results["devmem"] == results["numpy"], results
    returncode, stdout, _ = results["devmem"]
    if returncode == 0 and stdout.startswith("gave"):
        # A torch that takes them must see the right values.
        assert stdout.startswith("gave [9.0, 7.0, 5.0, 3.0, 1.0]"), stdout


@pytest.mark.parametrize("np_dtype,torch_dtype", BOTH_KNOW, ids=[str(d) for d, _ in BOTH_KNOW])
def test_every_common_dtype_from_devmem_to_torch(np_dtype, torch_dtype):
    values = _values(np_dtype)
    d = devmem.to_device(values)
    t = torch.from_dlpack(d)
    assert t.data_ptr() == _address(d)
    if np_dtype == np.bool_ and not _torch_reads_dlpack_1():
        # A consumer without DLPack 1 gets bool as uint8 (docs/python.md#interop), 0 and 1,
        # which torch views as bool in place.
        assert t.dtype == torch.uint8
        t = t.view(torch.bool)
    assert t.dtype == torch_dtype
    np.testing.assert_array_equal(t.numpy(), values)
    t[0] = t[1]  # shared: devmem sees torch's write
    expected = values.copy()
    expected[0] = expected[1]
    np.testing.assert_array_equal(d.copy_to_host(), expected)


@pytest.mark.parametrize("np_dtype,torch_dtype", BOTH_KNOW, ids=[str(d) for d, _ in BOTH_KNOW])
def test_every_common_dtype_from_torch_to_devmem(np_dtype, torch_dtype):
    values = _values(np_dtype)
    t = torch.from_numpy(values.copy())
    assert t.dtype == torch_dtype
    refused = _torch_exports(t)
    if refused is not None:
        # torch 1.13 exports no bool tensor ("Bool type is not supported by dlpack"): devmem
        # passes torch's own error on, and the uint8 view of the same memory is the way through.
        assert np_dtype == np.bool_, f"torch refuses to export {torch_dtype}: {refused}"
        with pytest.raises(type(refused), match="Bool"):
            devmem.from_dlpack(t)
        d = devmem.from_dlpack(t.view(torch.uint8)).view(np.bool_)
    else:
        d = devmem.from_dlpack(t)
    assert d.dtype == np_dtype
    assert _address(d) == t.data_ptr()
    np.testing.assert_array_equal(d.copy_to_host(), values)
    d[0] = values[1]  # shared: torch sees devmem's write
    assert t[0].item() == t[1].item()
