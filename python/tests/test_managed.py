"""devmem.managed_array (Numba's cuda.managed_array; docs/managed-memory.md): an ndarray that is
also a device array, prefetch and advice, the oversubscription refusal."""

import numpy as np
import pytest

import devmem


def test_managed_array_is_a_host_array_and_a_device_array():
    m = devmem.managed_array((4, 8), dtype=np.float32)
    assert isinstance(m, np.ndarray) and isinstance(m, devmem.ManagedNDArray)
    assert not isinstance(m, devmem.MappedNDArray)
    assert devmem.is_device_array(m)
    m[:] = np.arange(32, dtype=np.float32).reshape(4, 8)  # host writes
    d = m.device_array()
    np.testing.assert_array_equal(d.copy_to_host(), m)  # the device reads the same bytes
    other = devmem.to_device(np.full((4, 8), 7, dtype=np.float32))
    m.copy_to_device(other)  # a device-side write
    devmem.synchronize()
    assert (m == 7).all()  # the host sees it
    # Slices stay managed arrays viewing the same memory.
    row = m[1]
    assert isinstance(row, devmem.ManagedNDArray)
    np.testing.assert_array_equal(row.copy_to_host(), np.full(8, 7, dtype=np.float32))


def test_prefetch_and_advise_take_numba_style_locations():
    m = devmem.managed_array(1024)
    m[:] = 1.5
    m.prefetch("device")
    m.prefetch("host", stream=devmem.stream())
    m.prefetch(0)
    m.advise("read_mostly")
    m.advise("preferred_location", "host")
    m.advise("accessed_by", 0)
    m.advise("unset_accessed_by", 0)
    devmem.synchronize()
    assert (m == 1.5).all()  # hints never change the contents
    with pytest.raises(devmem.InvalidArgument, match="unknown advice 'sideways'"):
        m.advise("sideways")
    with pytest.raises(devmem.InvalidArgument, match="not 'nowhere'"):
        m.prefetch("nowhere")
    with pytest.raises(devmem.InvalidArgument, match="device 99"):
        m.prefetch(99)


def test_more_than_the_free_device_memory_is_refused_unless_allowed():
    free, _total = devmem.memory_info()
    with pytest.raises(devmem.OutOfMemory, match="oversubscri"):
        devmem.managed_array(free // 8 + (1 << 20))
    m = devmem.managed_array(free // 8 + (1 << 20), allow_oversubscription=True)
    assert m.nbytes > free
    del m


def test_bad_shapes_name_the_values():
    with pytest.raises((devmem.InvalidArgument, ValueError), match="-3"):
        devmem.managed_array((2, -3))
