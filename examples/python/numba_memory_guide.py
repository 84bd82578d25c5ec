"""The examples of Numba's "Memory management" guide (numba.cuda: device arrays, streams,
deferred cleanup), run with devmem in place of numba.cuda. Where the guide launches a kernel
(`my_kernel[100, 100](d_arr)`), this port does the same work with a device-side assignment, since
devmem compiles no Python kernels; devmem.numba lets Numba's own kernels use devmem's memory.

Run: PYTHONPATH=build/python/python /usr/bin/python3 examples/python/numba_memory_guide.py
"""

import numpy as np

import devmem as cuda  # the guide's `from numba import cuda`, unchanged below this line

# Transfer a NumPy array to the device, and back.
ary = np.arange(10)
d_ary = cuda.to_device(ary)
hary = d_ary.copy_to_host()
assert (hary == ary).all()

# Enqueue the transfer on a stream instead.
stream = cuda.stream()
d_ary = cuda.to_device(ary, stream=stream)
hary = d_ary.copy_to_host(stream=stream)
stream.synchronize()
assert (hary == ary).all()

# Copy device -> host into an existing array.
ary = np.empty(shape=d_ary.shape, dtype=d_ary.dtype)
d_ary.copy_to_host(ary)
assert (ary == np.arange(10)).all()

# The guide's copy_to_host example, the kernel replaced by device-side work on a strided view.
arr = np.arange(1000)
d_arr = cuda.to_device(arr)
d_arr[::2] = 0  # my_kernel[100, 100](d_arr)
result_array = d_arr.copy_to_host()
assert result_array[::2].sum() == 0 and (result_array[1::2] == arr[1::2]).all()

# Streams: commands enqueued in the block are done when it exits.
an_array = np.linspace(0.0, 1.0, 4096)
with stream.auto_synchronize():
    d_a = cuda.to_device(an_array, stream=stream)
    d_a.copy_to_host(an_array, stream=stream)

# Pinned memory for faster, asynchronous transfers; views keep working like NumPy's.
pinned = cuda.pinned_array((64, 64), dtype=np.float32)
pinned[:] = 1.5
d_p = cuda.to_device(pinned, stream=stream)
column = d_p[:, 3].copy_to_host(stream=stream)
stream.synchronize()
assert column.shape == (64,) and (column == 1.5).all()

# Deallocation is deferred; defer_cleanup() holds it back during speed-critical code.
with cuda.defer_cleanup():
    for _ in range(100):
        scratch = cuda.device_array(1 << 16, dtype=np.uint8)
    held = cuda.pending_deallocations()
print(f"backend {cuda.backend_name()}: guide examples ran; {held} deallocations were held back "
      "inside defer_cleanup()")
