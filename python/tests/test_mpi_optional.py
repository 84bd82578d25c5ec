"""devmem.mpi is optional: `import devmem` never imports MPI, mpi4py or devmem._mpi, and
`import devmem.mpi` without the extension (devmem built without DEVMEM_WITH_MPI) says how to get
it. The MPI tests themselves are mpi_test_*.py, run under mpirun (python-mpi preset)."""

from conftest import run_python


def test_import_devmem_imports_no_mpi():
    result = run_python(
        "import sys, devmem, numpy\n"
        "devmem.to_device(numpy.arange(3)).copy_to_host()\n"
        "loaded = [m for m in ('mpi4py', 'devmem.mpi', 'devmem._mpi') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libmpi' not in maps and 'libdevmem_mpi' not in maps\n"
        "print('ok')\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_missing_extension_is_a_clear_import_error():
    # As in a build without DEVMEM_WITH_MPI (the GPU bundle, the python preset): no devmem._mpi.
    result = run_python(
        "import sys\n"
        "sys.modules['devmem._mpi'] = None\n"
        "try:\n"
        "    import devmem.mpi\n"
        "except ImportError as error:\n"
        "    print(error)\n")
    assert result.returncode == 0, result.stderr
    assert "devmem was built without MPI" in result.stdout
    assert "DEVMEM_WITH_MPI=ON" in result.stdout
