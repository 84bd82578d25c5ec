"""The GPU proof's interop step (scripts/gpu-proof.sh): devmem arrays shared with CuPy, PyTorch and
Numba on a real GPU, with the machine's own packages.

Each check prints one line, "ok NAME", "FAILED NAME: why" or "skipped NAME: why" (a package the
machine lacks). Sharing is checked by writing on one side and reading on the other, strided views
included. The last check runs a Numba kernel end to end with NUMBA_CUDA_MEMORY_MANAGER=devmem.numba
in a child interpreter. Exit status: 0 nothing failed, 1 a check failed, 77 no CUDA device.
"""

import importlib
import os
import subprocess
import sys
import traceback

import numpy as np

import devmem

results = []


class Skip(Exception):
    """Raised by a check that cannot run here for a reason that is not devmem's."""


def check(name, needs=()):
    """Runs the decorated function as one check; `needs` names the modules it imports."""

    def run(function):
        for module in needs:
            try:
                importlib.import_module(module)
            except Exception as error:  # noqa: BLE001 - any import failure means "not here"
                results.append(("skipped", name, f"{module} not importable: {error}"))
                print(f"skipped {name}: {module} not importable: {error}", flush=True)
                return function
        try:
            function()
        except Skip as why:
            results.append(("skipped", name, str(why)))
            print(f"skipped {name}: {why}", flush=True)
        except Exception as error:  # noqa: BLE001 - every failure is reported, none stops the rest
            detail = "".join(traceback.format_exception_only(type(error), error)).strip()
            results.append(("FAILED", name, detail))
            print(f"FAILED {name}: {detail}", flush=True)
        else:
            results.append(("ok", name, ""))
            print(f"ok {name}", flush=True)
        return function

    return run


def expect_equal(got, expected, what):
    got = np.asarray(got)
    if got.shape != np.shape(expected) or not np.array_equal(got, expected):
        raise AssertionError(f"{what}: got {got!r}, expected {np.asarray(expected)!r}")


if devmem.backend_name() != "cuda" or devmem.device_count() == 0:
    print(f"no CUDA device for devmem (backend {devmem.backend_name()}, "
          f"{devmem.device_count()} devices)")
    sys.exit(77)


@check("cupy: devmem array seen through __cuda_array_interface__ shares memory", needs=["cupy"])
def _():
    import cupy

    d = devmem.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    c = cupy.asarray(d)
    c[1, 2] = -5.0
    cupy.cuda.runtime.deviceSynchronize()
    expect_equal(d.copy_to_host()[1, 2], np.float32(-5.0), "write by CuPy read by devmem")
    strided = d[:, ::2]
    cs = cupy.asarray(strided)
    expect_equal(cupy.asnumpy(cs), d.copy_to_host()[:, ::2], "strided view through CAI")


@check("cupy: CuPy array seen by devmem (as_device_array) shares memory", needs=["cupy"])
def _():
    import cupy

    c = cupy.arange(10, dtype=cupy.int64)
    d = devmem.as_device_array(c)
    d[3] = 99
    devmem.synchronize()
    expect_equal(int(c[3]), 99, "write by devmem read by CuPy")
    expect_equal(devmem.as_device_array(c[::3]).copy_to_host(), cupy.asnumpy(c[::3]),
                 "strided CuPy view")


@check("cupy: DLPack both ways", needs=["cupy"])
def _():
    import cupy

    d = devmem.to_device(np.arange(6, dtype=np.float64))
    c = cupy.from_dlpack(d)
    c[0] = 7.0
    cupy.cuda.runtime.deviceSynchronize()
    expect_equal(d.copy_to_host()[0], 7.0, "devmem -> CuPy by DLPack, write seen")
    c2 = cupy.arange(8, dtype=cupy.float32)[::2]
    d2 = devmem.from_dlpack(c2)
    expect_equal(d2.copy_to_host(), cupy.asnumpy(c2), "CuPy -> devmem by DLPack, strided")


@check("torch: devmem array as a tensor (CAI and DLPack) shares memory", needs=["torch"])
def _():
    import torch

    d = devmem.to_device(np.arange(20, dtype=np.float32).reshape(4, 5))
    t = torch.as_tensor(d, device="cuda")
    t[2, 3] = -1.0
    torch.cuda.synchronize()
    expect_equal(d.copy_to_host()[2, 3], np.float32(-1.0), "write by PyTorch (CAI)")
    t2 = torch.from_dlpack(d[::2, 1:])
    expect_equal(t2.cpu().numpy(), d.copy_to_host()[::2, 1:], "strided view by DLPack")


@check("torch: tensor seen by devmem (CAI and DLPack) shares memory", needs=["torch"])
def _():
    import torch

    t = torch.arange(16, dtype=torch.int32, device="cuda").reshape(4, 4)
    d = devmem.as_device_array(t)
    d[1, 1] = 500
    devmem.synchronize()
    expect_equal(int(t[1, 1]), 500, "write by devmem read by PyTorch (CAI)")
    d2 = devmem.from_dlpack(t.t())
    expect_equal(d2.copy_to_host(), t.t().cpu().numpy(), "transposed tensor by DLPack")


_numba_alone = []


def numba_compiles_kernels():
    """Raises Skip when Numba cannot run a kernel on its own memory here (devmem.numba's
    numba_kernel_problem: a Numba/NumPy mismatch): then devmem's Numba checks would only repeat
    Numba's own failure."""
    if not _numba_alone:
        import devmem.numba

        _numba_alone.append(devmem.numba.numba_kernel_problem())
    if _numba_alone[0] is not None:
        raise Skip(_numba_alone[0])


@check("numba: a kernel on a devmem array (numba.cuda.as_cuda_array)", needs=["numba.cuda"])
def _():
    from numba import cuda

    numba_compiles_kernels()

    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] *= 2

    d = devmem.to_device(np.arange(64, dtype=np.float32))
    n = cuda.as_cuda_array(d)
    double[1, 64](n)
    cuda.synchronize()
    expect_equal(d.copy_to_host(), np.arange(64, dtype=np.float32) * 2, "Numba kernel result")


CHILD = """
import sys
import numpy as np
from numba import cuda
import devmem.numba
assert type(cuda.current_context().memory_manager).__name__ == 'DevmemMemoryManager', \\
    type(cuda.current_context().memory_manager)
@cuda.jit
def add(x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] + y[i]
x = cuda.to_device(np.arange(100, dtype=np.float64))
y = cuda.to_device(np.ones(100))
assert np.array_equal(x.copy_to_host(), np.arange(100))
if sys.argv[1] == 'kernel':
    out = cuda.device_array(100)
    add[1, 128](x, y, out)
    assert np.array_equal(out.copy_to_host(), np.arange(100) + 1.0)
    print('kernel on devmem memory: ok')
else:
    print('copies through devmem memory: ok')
"""


@check("numba: NUMBA_CUDA_MEMORY_MANAGER=devmem.numba runs a kernel end to end",
       needs=["numba.cuda"])
def _():
    env = dict(os.environ, NUMBA_CUDA_MEMORY_MANAGER="devmem.numba")
    try:
        numba_compiles_kernels()
        mode = "kernel"
    except Skip:
        mode = "copies"  # the plugin's allocations and copies are still checked
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr.strip()[-800:]}")
    if mode != "kernel":
        raise Skip("allocations and copies through the plugin passed; the kernel part needs a "
                   f"Numba that compiles kernels here ({_numba_alone[0]})")


failed = [name for outcome, name, _ in results if outcome == "FAILED"]
print(f"interop: {len(results) - len(failed)} of {len(results)} checks passed or skipped")
sys.exit(1 if failed else 0)
