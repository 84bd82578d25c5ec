#!/usr/bin/env bash
# Installs the Debian packages devmem needs to build and test. Safe to run repeatedly.
#   scripts/install-deps.sh          host backend (default build and tests)
#   scripts/install-deps.sh --roc    also the HIP/HSA toolchain for the `roc` preset
#   scripts/install-deps.sh --fuzz   also clang and libFuzzer (compiler-rt) for the `fuzz` preset
#   scripts/install-deps.sh --hipcpu also TBB for the `roc-hipcpu` and `cuda-hipcpu` presets (HIP-CPU
#                                    itself is used in place: ../shared/third_party/hip-cpu)
#   scripts/install-deps.sh --lint   also clang-format-15 and clang-tidy-15 for scripts/lint.sh and
#                                    the pre-commit hooks
#   scripts/install-deps.sh --mpi    also Open MPI (headers, library, mpirun) for the `host-mpi`
#                                    preset and the devmem::mpi component
#   scripts/install-deps.sh --python also Debian's Python headers, pybind11, NumPy, pytest, Numba and
#                                    matplotlib (devmem.plot) for the `python` preset (the devmem
#                                    Python module)
#   --python and --mpi together      also mpi4py (python3-mpi4py) for the `python-mpi` preset
#                                    (devmem.mpi)
#   scripts/install-deps.sh --torch  also Debian's PyTorch (python3-torch, CPU only) for the Python
#                                    package's PyTorch interop tests (they skip without it)
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config catch2 libfmt-dev libdlpack-dev libboost-context-dev)
for arg in "$@"; do
  case "$arg" in
    --roc) packages+=(hipcc libamdhip64-dev libhsa-runtime-dev rocm-device-libs) ;;
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --hipcpu) packages+=(libtbb-dev) ;;
    --lint) packages+=(clang-format-15 clang-tidy-15) ;;
    --mpi) packages+=(libopenmpi-dev openmpi-bin) ;;
    --python) packages+=(python3-dev pybind11-dev python3-numpy python3-pytest python3-numba python3-matplotlib) ;;
    --torch) packages+=(python3-torch) ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --roc, --fuzz, --hipcpu, --lint, --mpi, --python, --torch)" >&2; exit 2 ;;
  esac
done
# devmem.mpi (the python-mpi preset) needs both, and mpi4py over Debian's Open MPI.
if [[ " $* " == *" --python "* && " $* " == *" --mpi "* ]]; then
  packages+=(python3-mpi4py)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
