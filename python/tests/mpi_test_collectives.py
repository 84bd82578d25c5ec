"""devmem.mpi collectives under mpirun -np 2, checked against NumPy: bcast, allreduce, allgather,
reduce, gather(v), scatter(v), alltoall(v), reduce_scatter, scan, exscan, allreduce_loc, barrier,
the non-blocking forms, and a mismatch raised on every rank."""

from mpi_common import comm, devmem, dmpi, np, pytest, rank, size, values


def everyone(shape, dtype=np.float64):
    """Every rank's `values(shape, dtype, seed=r)`, stacked."""
    return np.stack([values(shape, dtype, seed=r) for r in range(size)])


def test_bcast_strided_view():
    d = devmem.to_device(values((6, 4), seed=rank))
    assert dmpi.bcast(d[::2, 1:], root=1) is not None
    expected = values((6, 4), seed=rank)
    expected[::2, 1:] = values((6, 4), seed=1)[::2, 1:]
    np.testing.assert_array_equal(d.copy_to_host(), expected)


@pytest.mark.parametrize("op, reduce", [("sum", np.sum), (dmpi.ReduceOp.max, np.max),
                                        ("min", np.min), (dmpi.ReduceOp.prod, np.prod)])
def test_allreduce(op, reduce):
    d = devmem.to_device(values(1000, seed=rank + 1))
    out = dmpi.allreduce(d, op=op)
    assert isinstance(out, devmem.DeviceNDArray) and out.shape == (1000,)
    inputs = np.stack([values(1000, seed=r + 1) for r in range(size)])
    np.testing.assert_allclose(out.copy_to_host(), reduce(inputs, axis=0))


def test_allreduce_in_place_and_into_a_strided_output():
    d = devmem.to_device(values(64, np.int32, seed=rank))
    assert dmpi.allreduce(d, d) is d
    np.testing.assert_array_equal(d.copy_to_host(), everyone(64, np.int32).sum(axis=0))
    out = devmem.to_device(np.zeros(128, np.int32))
    dmpi.allreduce(devmem.to_device(values(64, np.int32, seed=rank)), out[::2], op="bitwise_or")
    expected = np.zeros(128, np.int32)
    expected[::2] = np.bitwise_or.reduce(everyone(64, np.int32), axis=0)
    np.testing.assert_array_equal(out.copy_to_host(), expected)


def test_allgather_and_gather():
    d = devmem.to_device(values((3, 2), seed=rank))
    np.testing.assert_array_equal(dmpi.allgather(d).copy_to_host(), everyone((3, 2)))
    gathered = dmpi.gather(d, root=1)
    if rank == 1:
        np.testing.assert_array_equal(gathered.copy_to_host(), everyone((3, 2)))
    else:
        assert gathered is None


def test_reduce():
    d = devmem.to_device(values(10, seed=rank))
    out = dmpi.reduce(d, op="sum", root=0)
    if rank == 0:
        np.testing.assert_array_equal(out.copy_to_host(), everyone(10).sum(axis=0))
    else:
        assert out is None


def test_scatter_and_scatterv():
    source = devmem.to_device(everyone((2, 3))) if rank == 0 else None
    out = devmem.device_array((2, 3))
    assert dmpi.scatter(source, out, root=0) is out
    np.testing.assert_array_equal(out.copy_to_host(), values((2, 3), seed=rank))

    counts = [r + 1 for r in range(size)]
    rows = np.arange(sum(counts) * 2, dtype=np.float64).reshape(-1, 2)
    mine = devmem.device_array((counts[rank], 2))
    dmpi.scatterv(devmem.to_device(rows) if rank == 0 else None, mine, counts, root=0)
    start = sum(counts[:rank])
    np.testing.assert_array_equal(mine.copy_to_host(), rows[start:start + counts[rank]])
    # And back with gatherv.
    back = dmpi.gatherv(mine, counts, root=0)
    if rank == 0:
        np.testing.assert_array_equal(back.copy_to_host(), rows)


def test_alltoall_and_reduce_scatter():
    d = devmem.to_device(values((size, 4), seed=rank))
    out = dmpi.alltoall(d)
    expected = np.stack([values((size, 4), seed=s)[rank] for s in range(size)])
    np.testing.assert_array_equal(out.copy_to_host(), expected)
    block = dmpi.reduce_scatter(d, op="sum")
    assert block.shape == (4,)
    np.testing.assert_array_equal(block.copy_to_host(), everyone((size, 4)).sum(axis=0)[rank])


def test_reduce_scatter_counts():
    # Rank r gets r + 1 rows of the sum (MPI_Reduce_scatter).
    counts = [r + 1 for r in range(size)]
    total = sum(counts)
    d = devmem.to_device(values((total, 3), seed=rank))
    mine = dmpi.reduce_scatter(d, op="sum", counts=counts)
    assert mine.shape == (rank + 1, 3)
    first = sum(counts[:rank])
    expected = everyone((total, 3)).sum(axis=0)[first:first + rank + 1]
    np.testing.assert_array_equal(mine.copy_to_host(), expected)
    with pytest.raises(ValueError, match="counts has 1 entries"):
        dmpi.reduce_scatter(d, counts=[total])


def test_alltoallv():
    # Rank r sends s + 1 rows to rank s.
    send_counts = [s + 1 for s in range(size)]
    recv_counts = [rank + 1] * size
    rows = values((sum(send_counts), 2), seed=rank)
    out = dmpi.alltoallv(devmem.to_device(rows), send_counts, recv_counts)
    expected = []
    for s in range(size):
        theirs = values((sum(send_counts), 2), seed=s)
        start = sum(send_counts[:rank])
        expected.append(theirs[start:start + rank + 1])
    np.testing.assert_array_equal(out.copy_to_host(), np.concatenate(expected))


def test_scan_and_exscan():
    d = devmem.to_device(values(5, np.int64, seed=rank + 1))
    inclusive = dmpi.scan(d)
    np.testing.assert_array_equal(inclusive.copy_to_host(),
                                  np.stack([values(5, np.int64, seed=r + 1)
                                            for r in range(rank + 1)]).sum(axis=0))
    exclusive = devmem.to_device(np.full(5, -1, np.int64))
    dmpi.exscan(d, exclusive)
    if rank == 0:
        np.testing.assert_array_equal(exclusive.copy_to_host(), np.full(5, -1))  # left alone
    else:
        np.testing.assert_array_equal(exclusive.copy_to_host(),
                                      np.stack([values(5, np.int64, seed=r + 1)
                                                for r in range(rank)]).sum(axis=0))


def test_allreduce_loc():
    v = devmem.to_device(np.array([rank, -rank, 7.0]))
    i = devmem.to_device(np.full(3, rank, np.int32))
    dmpi.allreduce_loc(v, i, "maxloc")
    np.testing.assert_array_equal(v.copy_to_host(), [size - 1, 0, 7.0])
    np.testing.assert_array_equal(i.copy_to_host(), [size - 1, 0, 0])


def test_non_blocking_collectives():
    d = devmem.to_device(values(100, seed=rank))
    total = devmem.device_array(100)
    stacked = devmem.device_array((size, 100))
    b = devmem.to_device(values(7, seed=rank))
    requests = [dmpi.ibcast(b, root=0), dmpi.iallreduce(d, total, op="sum"),
                dmpi.iallgather(d, stacked), dmpi.ibarrier()]
    dmpi.wait_all(requests)
    np.testing.assert_array_equal(b.copy_to_host(), values(7, seed=0))
    np.testing.assert_array_equal(total.copy_to_host(), everyone(100).sum(axis=0))
    np.testing.assert_array_equal(stacked.copy_to_host(), everyone(100))
    r = dmpi.ibarrier()
    while not r.test():
        pass
    assert r.done
    dmpi.barrier()


def test_mismatch_raises_on_every_rank():
    d = devmem.device_array(10 + rank)
    with pytest.raises(devmem.InvalidArgument, match="shape"):
        dmpi.allreduce(d, d)
    comm.Barrier()
    with pytest.raises(devmem.InvalidArgument, match="float16"):
        dmpi.allreduce(devmem.device_array(4, np.float16))  # MPI has no float16: every rank
    with pytest.raises(ValueError, match="unknown reduction 'average'"):
        dmpi.allreduce(d, op="average")
    with pytest.raises(TypeError, match="ReduceOp"):
        dmpi.allreduce(d, op=3)
