"""devmem.mpi after devmem.mpi.initialize() (a run of its own: initialize() is once per process):
every tag and ANY_SOURCE / ANY_TAG belong to the application."""

from mpi_common import MPI, comm, devmem, dmpi, np, peer, rank, values


def test_initialize_gives_the_application_every_tag():
    dmpi.initialize()
    dmpi.initialize()  # a second call does nothing
    assert dmpi.initialized()
    assert dmpi.max_tag() == comm.Get_attr(MPI.TAG_UB)
    assert dmpi.max_tag(comm) == dmpi.max_tag()


def test_any_source_any_tag():
    top = dmpi.max_tag()
    n = 20_000  # the handshake protocol, whose traffic now has a communicator of its own
    if rank % 2 == 0:
        dmpi.send(devmem.to_device(values(n, seed=rank)), peer, tag=top)
    else:
        b = devmem.device_array(n)
        status = dmpi.recv(b)  # ANY_SOURCE, ANY_TAG: the defaults
        assert (status.source, status.tag, status.elements) == (peer, top, n)
        np.testing.assert_array_equal(b.copy_to_host(), values(n, seed=peer))


def test_probe_any():
    if rank % 2 == 0:
        dmpi.send(devmem.to_device(values((2, 2), np.uint8, seed=0)), peer, tag=77)
    else:
        info = dmpi.probe()
        assert (info.source, info.tag, info.shape, info.dtype) == (peer, 77, (2, 2),
                                                                   np.dtype(np.uint8))
        b = devmem.device_array(info.shape, info.dtype)
        request = dmpi.irecv(b)
        assert request.wait().tag == 77
