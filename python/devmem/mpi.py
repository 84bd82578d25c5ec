"""devmem.mpi: devmem's device arrays over MPI, with mpi4py communicators.

Point-to-point messages and collectives of ``devmem.DeviceNDArray`` objects (strided views
included), over devmem::mpi (docs/scaling-out.md#mpi): device memory goes to a device-aware MPI
library as it is, or through page-locked host buffers in chunks; the receiver checks the dtype and
shape of every message. Communicators are mpi4py's (``comm=None`` is ``MPI.COMM_WORLD``)::

    from mpi4py import MPI
    import numpy as np
    import devmem
    import devmem.mpi as dmpi

    rank = MPI.COMM_WORLD.Get_rank()
    a = devmem.to_device(np.arange(8.0) * rank)
    if rank == 0:
        dmpi.send(a[::2], dest=1, tag=3)               # a strided view
    elif rank == 1:
        b = devmem.device_array(4)
        status = dmpi.recv(b, source=0, tag=3)         # status.source, .tag, .elements, .bytes
    total = dmpi.allreduce(a, op="sum")                # a new device array

Importing this module imports ``mpi4py.MPI``, which initialises MPI. ``import devmem`` alone
imports neither. Calls that wait for other ranks release the GIL. See
docs/scaling-out.md#python-mpi for the whole API.
"""

try:
    from ._mpi import (  # noqa: F401  (re-exported)
        ANY_SOURCE,
        ANY_TAG,
        EAGER_LIMIT_BYTES,
        PROC_NULL,
        MessageInfo,
        MpiError,
        PersistentRequest,
        ReduceOp,
        Request,
        Status,
        Transport,
        allgather,
        allreduce,
        allreduce_loc,
        alltoall,
        alltoallv,
        barrier,
        bcast,
        device_aware,
        exscan,
        gather,
        gatherv,
        iallgather,
        iallreduce,
        ibarrier,
        ibcast,
        initialize,
        initialized,
        iprobe,
        irecv,
        isend,
        max_tag,
        probe,
        recv,
        recv_init,
        reduce,
        reduce_scatter,
        scan,
        scatter,
        scatterv,
        send,
        send_init,
        sendrecv,
        set_staging_chunk_bytes,
        set_transport,
        staging_chunk_bytes,
        start_all,
        test_any,
        test_some,
        transport,
        transport_for,
        wait_all,
        wait_any,
        wait_some,
    )
except ModuleNotFoundError as error:
    if error.name != "devmem._mpi":
        raise  # mpi4py is missing: its own message says so
    raise ImportError(
        "devmem.mpi is not available: devmem was built without MPI (configure with "
        "-DDEVMEM_WITH_MPI=ON and -DDEVMEM_WITH_PYTHON=ON, e.g. the python-mpi preset; needs "
        "scripts/install-deps.sh --python --mpi for Open MPI and mpi4py)",
        name="devmem.mpi",
    ) from error

__all__ = [name for name in dir() if not name.startswith("_")]
