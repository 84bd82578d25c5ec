"""Streams, events, devices, deferred cleanup, memory managers, and thread safety."""

import threading

import numpy as np
import pytest

import devmem


def test_stream_async_copies_complete_after_synchronize(rng):
    s = devmem.stream()
    host = rng.random(1 << 16)
    d = devmem.to_device(host, stream=s)
    assert d.stream == s
    out = devmem.pinned_array(host.shape)
    d.copy_to_host(out, stream=s)
    s.synchronize()
    assert s.query()
    np.testing.assert_array_equal(out, host)


def test_external_stream_wraps_a_foreign_stream_without_owning_it(rng):
    """PyTorch's and CuPy's streams, by handle or by __cuda_stream__ (review 2, N4)."""
    owner = devmem.stream()  # stands for the foreign library's stream: it owns the queue

    class ForeignStream:  # what torch.cuda.Stream and cupy.cuda.Stream expose
        def __cuda_stream__(self):
            return (0, owner.handle)

    for foreign in (devmem.external_stream(owner.handle), devmem.external_stream(ForeignStream())):
        assert foreign.is_external and not owner.is_external
        assert foreign.handle == owner.handle and foreign.__cuda_stream__() == (0, owner.handle)
        host = rng.random(1024)
        d = devmem.to_device(host, stream=foreign)
        d.record_use(foreign)  # the foreign kernels reading d: memory held until they are done
        foreign.synchronize()
        np.testing.assert_array_equal(d.copy_to_host(), host)
        del foreign, d
    # devmem never destroyed the queue it wrapped: its owner still uses it.
    d = devmem.to_device(np.arange(8.0), stream=ForeignStream())
    assert d.stream.is_external
    owner.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), np.arange(8.0))

    with pytest.raises(devmem.InvalidArgument, match="native stream of device 0 is null"):
        devmem.external_stream(0)
    with pytest.raises(TypeError, match="expected a stream handle"):
        devmem.external_stream("stream")

    class WrongVersion:
        def __cuda_stream__(self):
            return (1, owner.handle)

    with pytest.raises(ValueError, match="has version 1"):
        devmem.external_stream(WrongVersion())
    with pytest.raises(ValueError, match="record_use: pass the stream"):
        devmem.to_device(np.arange(4.0)).record_use(0)


def test_async_copy_keeps_a_dropped_host_array_alive(rng):
    s = devmem.stream()
    host = rng.random(1 << 18)
    d = devmem.to_device(host, stream=s)
    expected = host.copy()
    del host  # devmem holds the NumPy array until the copy is done
    s.synchronize()
    np.testing.assert_array_equal(d.copy_to_host(), expected)


def test_auto_synchronize_and_events():
    s = devmem.stream()
    host = np.arange(1000.0)
    with s.auto_synchronize() as entered:
        assert entered == s
        d = devmem.to_device(host, stream=s)
        out = np.empty_like(host)
        d.copy_to_host(out, stream=s)
    np.testing.assert_array_equal(out, host)
    start, end = devmem.event(), devmem.event(timing=True)
    start.record(s)
    devmem.to_device(host, stream=s)
    end.record(s)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0.0
    assert devmem.event_elapsed_time(start, end) >= 0.0
    marker = s.record()
    other = devmem.stream()
    other.wait_event(marker)
    marker.wait(other)
    other.synchronize()


def test_auto_synchronize_on_the_error_path():
    s = devmem.stream()
    with pytest.raises(KeyError):
        with s.auto_synchronize():
            devmem.to_device(np.arange(10.0), stream=s)
            raise KeyError("raised in the block")
    assert s.query()


def test_default_stream_and_stream_objects():
    default = devmem.default_stream()
    assert default.is_default and int(default) == default.handle
    s = devmem.stream()
    assert not s.is_default and s != default and s == s
    assert len({s, s, default}) == 2
    assert "stream" in repr(s)
    d = devmem.to_device(np.ones(4), stream=default)
    assert d.copy_to_host(stream=default).sum() == 4


def test_devices():
    assert len(devmem.gpus) == devmem.device_count() >= 1
    first = devmem.gpus[0]
    assert first.id == 0 and first.name
    props = first.properties
    assert props["total_memory"] > 0 and props["warp_size"] > 0
    assert devmem.gpus.current.id == devmem.get_current_device().id
    with first as entered:
        assert entered is first
        assert devmem.get_current_device().id == 0
    assert devmem.select_device(0).id == 0
    assert [d.id for d in devmem.list_devices()] == list(range(devmem.device_count()))
    with pytest.raises(devmem.Error):
        devmem.select_device(devmem.device_count() + 5)
    assert devmem.backend_name() in devmem.compiled_backends()


def test_defer_cleanup_holds_frees_until_exit():
    devmem.flush_deallocations()
    with devmem.defer_cleanup():
        with devmem.defer_cleanup():  # nestable
            for _ in range(30):
                devmem.device_array(1024)
            held = devmem.pending_deallocations()
            assert held >= 30
        assert devmem.pending_deallocations() >= held
    devmem.device_array(16)  # the next allocation may flush the queue
    devmem.flush_deallocations()
    assert devmem.pending_deallocations() == 0


def test_memory_info_and_statistics():
    info = devmem.memory_info()
    assert info.total > 0 and 0 <= info.free <= info.total
    assert info == (info.free, info.total)
    before = devmem.device_statistics()["total_count"]
    devmem.device_array(256)
    assert devmem.device_statistics()["total_count"] == before + 1


def test_pool_manager_reuses_blocks(pool_manager):
    assert devmem.memory_manager_name() == "pool"
    for _ in range(50):
        devmem.device_array(128)
    devmem.flush_deallocations()
    stats = devmem.pool_statistics()
    assert stats["hits"] > 0 and stats["misses"] > 0


def test_unknown_manager_is_rejected():
    with pytest.raises(ValueError, match="no-such-manager"):
        devmem.set_memory_manager("no-such-manager")


def test_threads_copy_concurrently(rng):
    errors = []
    data = [rng.random(4096) for _ in range(4)]

    def worker(values):
        try:
            s = devmem.stream()
            for _ in range(50):
                d = devmem.to_device(values, stream=s)
                d[::2] = 0.0
                out = d.copy_to_host(stream=s)
                s.synchronize()
                expected = values.copy()
                expected[::2] = 0.0
                np.testing.assert_array_equal(out, expected)
        except Exception as error:  # reported to the main thread below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(values,)) for values in data]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_errors_are_python_exceptions_of_the_matching_kind():
    assert issubclass(devmem.InvalidArgument, ValueError)
    assert issubclass(devmem.InvalidArgument, devmem.Error)
    assert issubclass(devmem.OutOfMemory, MemoryError)
    assert issubclass(devmem.Error, RuntimeError)
    with pytest.raises(devmem.InvalidArgument, match=r"reshape.*\(5, 5\)"):
        devmem.device_array((4, 6)).reshape(5, 5)


def test_no_references_or_device_memory_leak():
    import gc
    import sys

    host = np.arange(256.0)
    out = np.empty_like(host)
    s = devmem.stream()
    devmem.flush_deallocations()
    gc.collect()
    refs_before = sys.getrefcount(host), sys.getrefcount(out)
    bytes_before = devmem.device_statistics()["current_bytes"]
    for _ in range(200):
        d = devmem.to_device(host)
        d.copy_to_host(out)
        d.copy_to_device(host, stream=s)
        d.copy_to_host(out, stream=s)
        d[::2] = host[::2]
        view = devmem.from_dlpack(d)
        del view
        with devmem.pinned(host):
            pass
        with devmem.mapped(out) as mapped_view:
            mapped_view.copy_to_device(d)
        del d, mapped_view
    s.synchronize()
    devmem.flush_deallocations()  # also drops references released on other threads
    gc.collect()
    assert (sys.getrefcount(host), sys.getrefcount(out)) == refs_before
    assert devmem.device_statistics()["current_bytes"] == bytes_before
