"""devmem.mpi point-to-point under mpirun -np 2, without devmem.mpi.initialize() (which
mpi_test_initialized.py calls): send/recv, strided views, Status, probe, isend/irecv, sendrecv,
persistent requests, mismatches, sub-communicators, the GIL."""

import gc
import threading
import time

from mpi_common import MPI, comm, devmem, dmpi, np, peer, pytest, rank, size, values


def test_any_tag_is_refused_without_initialize():
    assert not dmpi.initialized()
    b = devmem.device_array(4)
    # recv's default tag is ANY_TAG: it needs initialize(). Refused locally, before any message.
    with pytest.raises(devmem.InvalidArgument, match="MPI_ANY_TAG needs devmem::mpi::initialize"):
        dmpi.recv(b, source=peer)
    with pytest.raises(devmem.InvalidArgument, match="tag .* is outside"):
        dmpi.send(b, peer, tag=dmpi.max_tag() + 1)
    assert dmpi.max_tag() == comm.Get_attr(MPI.TAG_UB) // 2
    assert (dmpi.ANY_SOURCE, dmpi.ANY_TAG, dmpi.PROC_NULL) == (MPI.ANY_SOURCE, MPI.ANY_TAG,
                                                               MPI.PROC_NULL)


@pytest.mark.parametrize("n", [10, dmpi.EAGER_LIMIT_BYTES // 8, 1 << 17])  # eager .. handshake
def test_send_recv_contiguous_with_status(n):
    a = devmem.to_device(values(n, seed=rank))
    b = devmem.device_array(n)
    if rank % 2 == 0:
        assert dmpi.send(a, peer, tag=5) is None
        status = dmpi.recv(b, peer, tag=6)
    else:
        status = dmpi.recv(b, peer, tag=5)
        dmpi.send(a, peer, tag=6)
    np.testing.assert_array_equal(b.copy_to_host(), values(n, seed=peer))
    assert (status.source, status.tag) == (peer, 6 if rank % 2 == 0 else 5)
    assert (status.elements, status.bytes) == (n, 8 * n)
    assert "source=" in repr(status)


@pytest.mark.parametrize("rows", [3, 600])  # eager and handshake
def test_strided_views_from_python_slicing(rows):
    host = values((rows, 10), np.float32, seed=rank)
    a = devmem.to_device(host)
    target = devmem.to_device(np.zeros((rows, 15), np.float32))
    view = target[:, ::3]  # (rows, 5), strided
    if rank % 2 == 0:
        dmpi.send(a[:, 1::2], peer, tag=1)  # (rows, 5), strided
    else:
        status = dmpi.recv(view, peer, tag=1)
        assert status.elements == rows * 5
        expected = np.zeros((rows, 15), np.float32)
        expected[:, ::3] = values((rows, 10), np.float32, seed=peer)[:, 1::2]
        np.testing.assert_array_equal(target.copy_to_host(), expected)
    # Reversed (negative strides) on the way back.
    back = devmem.device_array((rows, 5), np.float32)
    if rank % 2 == 1:
        dmpi.send(view[::-1], peer, tag=2)
    else:
        dmpi.recv(back, peer, tag=2)
        np.testing.assert_array_equal(back.copy_to_host(), host[::-1, 1::2])


def test_probe_then_allocate_and_receive():
    if rank % 2 == 0:
        dmpi.send(devmem.to_device(values((3, 7), np.int32, seed=rank)), peer, tag=9)
    else:
        info = dmpi.probe(peer, tag=9)
        assert (info.source, info.tag) == (peer, 9)
        assert info.dtype == np.dtype(np.int32) and info.shape == (3, 7)
        assert "shape=(3, 7)" in repr(info)
        b = devmem.device_array(info.shape, info.dtype)
        dmpi.recv(b, info.source, info.tag)
        np.testing.assert_array_equal(b.copy_to_host(), values((3, 7), np.int32, seed=peer))
    comm.Barrier()
    assert dmpi.iprobe(peer, tag=9) is None


def test_isend_irecv_both_directions():
    n = 50_000
    a = devmem.to_device(values(n, seed=rank))
    b = devmem.device_array(n)
    # Both ranks send first: blocking sends of this size would wait for each other.
    requests = [dmpi.isend(a, peer, tag=3), dmpi.irecv(b, peer, tag=3)]
    assert all(isinstance(r, dmpi.Request) for r in requests)
    dmpi.wait_all(requests)
    assert all(r.done and not r.active for r in requests)
    assert requests[1].status.source == peer and requests[1].status.elements == n
    np.testing.assert_array_equal(b.copy_to_host(), values(n, seed=peer))

    # wait_any / wait on each, and a Request waited for twice gives its Status again.
    r_send = dmpi.isend(a[::2], peer, tag=4)
    r_recv = dmpi.irecv(devmem.device_array(n // 2), peer, tag=4)
    pending = [r_send, r_recv]
    index = dmpi.wait_any(pending)
    assert index in (0, 1) and pending[index].done
    assert pending[1 - index].wait().tag == 4
    assert pending[index].wait().tag == 4
    assert dmpi.wait_any(pending) is None  # none pending


def test_request_keeps_its_temporary_array_alive():
    n = 30_000
    request = dmpi.irecv(devmem.device_array(n), peer, tag=11) if rank % 2 else None
    # The sent array is a temporary view: only the Request holds it.
    send = dmpi.isend(devmem.to_device(values(n, seed=rank))[::1], peer, tag=11) \
        if rank % 2 == 0 else None
    gc.collect()
    if send is not None:
        assert send.wait().elements == n
    if request is not None:
        assert request.wait().elements == n


def test_sendrecv_exchange():
    n = 8192
    a = devmem.to_device(values(n, np.int64, seed=rank))
    b = devmem.device_array(n, np.int64)
    status = dmpi.sendrecv(a, peer, b, peer, send_tag=2, recv_tag=2)
    assert status.source == peer
    np.testing.assert_array_equal(b.copy_to_host(), values(n, np.int64, seed=peer))


def test_persistent_requests_in_a_loop():
    halo_out = devmem.device_array((4, 16))
    halo_in = devmem.device_array((4, 16))
    send = dmpi.send_init(halo_out, peer, tag=21)
    recv = dmpi.recv_init(halo_in, peer, tag=21)
    for step in range(5):
        halo_out[:] = values((4, 16), seed=10 * rank + step)
        dmpi.start_all([recv, send])
        assert send.active and recv.active
        send.wait()
        status = recv.wait()
        assert not recv.active and status.elements == 64
        np.testing.assert_array_equal(halo_in.copy_to_host(),
                                      values((4, 16), seed=10 * peer + step))


def test_proc_null_does_nothing():
    b = devmem.device_array(3)
    dmpi.send(b, dmpi.PROC_NULL, tag=0)
    status = dmpi.recv(b, dmpi.PROC_NULL, tag=0)
    assert (status.source, status.elements) == (dmpi.PROC_NULL, 0)


def test_eager_mismatch_raises_on_the_receiver():
    if rank % 2 == 0:
        dmpi.send(devmem.to_device(np.zeros(4)), peer, tag=30)  # eager: completes regardless
    else:
        with pytest.raises(devmem.InvalidArgument, match="shape"):
            dmpi.recv(devmem.device_array(5), peer, tag=30)
    comm.Barrier()


def test_handshake_mismatch_raises_on_both_ranks():
    n = 10_000
    if rank % 2 == 0:
        with pytest.raises(devmem.InvalidArgument, match="float32|float64"):
            dmpi.send(devmem.to_device(np.zeros(n)), peer, tag=31)
    else:
        with pytest.raises(devmem.InvalidArgument, match="float32|float64"):
            dmpi.recv(devmem.device_array(n, np.float32), peer, tag=31)
    comm.Barrier()


def test_mpi4py_sub_communicator():
    # One communicator with the ranks numbered backwards: devmem uses its ranks, not the world's.
    backwards = comm.Split(0, size - 1 - rank)
    try:
        me, other = backwards.Get_rank(), backwards.Get_rank() ^ 1
        assert me == size - 1 - rank
        a = devmem.to_device(values(6, seed=me))
        b = devmem.device_array(6)
        status = dmpi.sendrecv(a, other, b, other, send_tag=1, recv_tag=1, comm=backwards)
        assert status.source == other
        np.testing.assert_array_equal(b.copy_to_host(), values(6, seed=other))
        # Root 0 of `backwards` is the last world rank.
        c = devmem.to_device(values(5, seed=rank))
        dmpi.bcast(c, root=0, comm=backwards)
        np.testing.assert_array_equal(c.copy_to_host(), values(5, seed=size - 1))
    finally:
        backwards.Free()
    # One rank each: a broadcast to itself.
    alone = comm.Split(rank, 0)
    try:
        d = devmem.to_device(values(3, seed=rank))
        assert dmpi.allgather(d, comm=alone).shape == (1, 3)
    finally:
        alone.Free()


@pytest.mark.parametrize("rows", [3, 600])  # eager and handshake
def test_numpy_arrays_as_buffers(rows):
    """A NumPy array on one rank matches a device array of the same dtype and shape on the other,
    strided NumPy views included; MPI reads and writes the NumPy memory in place."""
    host = values((rows, 8), np.float32, seed=rank)
    if rank % 2 == 0:
        dmpi.send(host[:, ::2], peer, tag=21)  # strided NumPy view out
        received = np.zeros((rows, 4), np.float32)
        status = dmpi.recv(received, peer, tag=22)  # from the peer's device array
        assert (status.source, status.elements) == (peer, rows * 4)
        np.testing.assert_array_equal(received, values((rows, 8), np.float32, seed=peer)[:, 1::2])
    else:
        target = devmem.device_array((rows, 4), np.float32)
        dmpi.recv(target, peer, tag=21)
        np.testing.assert_array_equal(target.copy_to_host(),
                                      values((rows, 8), np.float32, seed=peer)[:, ::2])
        dmpi.send(devmem.to_device(host)[:, 1::2], peer, tag=22)
    # Non-blocking, NumPy on both sides, into a transposed (non-contiguous) NumPy view.
    out = np.arange(rows * 3, dtype=np.int64).reshape(rows, 3) + 1000 * rank
    into = np.zeros((3, rows), np.int64).T
    requests = [dmpi.isend(out, peer, tag=23), dmpi.irecv(into, peer, tag=23)]
    dmpi.wait_all(requests)
    np.testing.assert_array_equal(into, np.arange(rows * 3).reshape(rows, 3) + 1000 * peer)


def test_mpi_error_on_a_communicator_that_returns_errors():
    """A raw message too large for devmem's message start, on a communicator whose error handler
    returns errors: MPI_ERR_TRUNCATE arrives as devmem.mpi.MpiError with MPI's code (8000 bytes:
    see the C++ test of the same name for why not more)."""
    c = comm.Dup()
    c.Set_errhandler(MPI.ERRORS_RETURN)
    try:
        if rank % 2 == 0:
            c.Send(np.full(8000, 7, np.uint8), dest=peer, tag=7)
        else:
            with pytest.raises(dmpi.MpiError, match="MPI_Irecv") as info:
                dmpi.recv(devmem.device_array(4), peer, tag=7, comm=c)
            assert MPI.Get_error_class(info.value.code) == MPI.ERR_TRUNCATE
            assert isinstance(info.value, devmem.Error)
        c.Barrier()
    finally:
        c.Free()


def test_argument_errors():
    a = devmem.device_array(2)
    with pytest.raises(TypeError, match="mpi4py.MPI.Comm"):
        dmpi.send(a, peer, comm="world")
    with pytest.raises(ValueError, match="COMM_NULL"):
        dmpi.barrier(comm=MPI.COMM_NULL)
    with pytest.raises(TypeError, match="DeviceNDArray or a NumPy ndarray"):
        dmpi.send([0.0, 1.0], peer)
    with pytest.raises(TypeError, match="native-byte-order"):
        dmpi.isend(np.zeros(2, dtype=">f8"), peer)
    with pytest.raises(TypeError, match="native-byte-order"):
        dmpi.send(np.zeros(2, dtype="U3"), peer)
    read_only = np.zeros(2)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dmpi.irecv(read_only, peer)
    with pytest.raises(devmem.InvalidArgument, match="not in the communicator"):
        dmpi.send(a, size + 3)
    assert issubclass(dmpi.MpiError, devmem.Error)


def test_blocking_receive_releases_the_gil():
    a = devmem.to_device(values(1000, seed=rank))
    b = devmem.device_array(1000)
    comm.Barrier()
    if rank % 2 == 0:
        time.sleep(1.0)
        dmpi.send(a, peer, tag=40)
    else:
        finished = threading.Event()
        receiver = threading.Thread(target=lambda: (dmpi.recv(b, peer, tag=40), finished.set()))
        receiver.start()
        time.sleep(0.1)  # the receiver is waiting in recv by now
        # Python code runs here for 0.2 s while the receive waits (sent after 1 s): a recv
        # holding the GIL would stop this thread until the message came.
        start, loops = time.monotonic(), 0
        while time.monotonic() - start < 0.2:
            loops += 1
        assert not finished.is_set() and loops > 1000
        receiver.join()
        np.testing.assert_array_equal(b.copy_to_host(), values(1000, seed=peer))


def test_transport_settings():
    previous = dmpi.transport()
    try:
        dmpi.set_transport("staged")
        assert dmpi.transport() == dmpi.Transport.staged
        assert dmpi.transport_for(devmem.device_array(1)) == dmpi.Transport.staged
        a = devmem.to_device(values(100, seed=rank))
        b = devmem.device_array(100)
        dmpi.sendrecv(a, peer, b, peer, send_tag=0, recv_tag=0)
        np.testing.assert_array_equal(b.copy_to_host(), values(100, seed=peer))
        with pytest.raises(devmem.InvalidArgument):
            dmpi.set_transport("pigeon")
    finally:
        dmpi.set_transport(previous)
    assert dmpi.device_aware("host") is False
