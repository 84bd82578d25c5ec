"""What the devmem.mpi tests share (python/tests/mpi_test_*.py, run by CTest under
``mpirun -np 2 python3 -m pytest``: one pytest session per rank, every test run by every rank in
the same order, so that the ranks pair up; a test that fails on one rank may leave the other
waiting, until DEVMEM_MPI_TIMEOUT or CTest's timeout ends the job)."""

import numpy as np
import pytest
from mpi4py import MPI

import devmem
import devmem.mpi as dmpi

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
# Point-to-point tests pair rank 0 with 1, 2 with 3, ...
peer = rank ^ 1

if size < 2 or size % 2 != 0:
    pytest.skip("devmem.mpi tests need an even number of ranks (mpirun -np 2)",
                allow_module_level=True)


def values(shape, dtype=np.float64, seed=0):
    """Distinct values per seed: what `seed`'s rank sends."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64) + 1000 * seed).astype(dtype).reshape(shape)


__all__ = ["MPI", "comm", "devmem", "dmpi", "np", "peer", "pytest", "rank", "size", "values"]
