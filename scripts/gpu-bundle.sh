#!/usr/bin/env bash
# gpu-bundle.sh: builds, on a machine without a GPU, everything the GPU proof runs, into one
# relocatable folder that travels to the GPU machine (which has no Debian packages, no package
# registry and little time: it compiles nothing).
#
#   1. the Python 3.12 virtual environment with NumPy 2 (scripts/python-venv.sh, pinned versions)
#   2. the `cuda` preset in Release for sm_80 and sm_90 (+ PTX), with the Python module, into
#      build/gpu-bundle-build: libdevmem, conformance_cuda, the no-device check, the fake-runtime
#      tests, the `devmem` program, the proof programs (tests/gpu_proof), benchmarks, examples
#   3. a consumer project's kernel (tests/consumer_kernels) built against the installed package
#   4. the folder: bin/, lib/ (libdevmem and the non-system libraries everything needs: fmt,
#      Boost.Context, libcudart), python/ (the package and its pytest suite), gpu-proof.sh,
#      proof_python.py, MANIFEST.txt (commit, toolchain versions, sha256 of every file)
#   5. checks: every ELF has an $ORIGIN-relative RUNPATH, and a copy of the folder elsewhere
#      resolves every library with an empty LD_LIBRARY_PATH except libcuda.so.1 (the driver's);
#      at most 48 MiB; the bundle's own Python module passes its pytest suite here under NumPy 2
#      (host backend, the venv's interpreter)
#
# libcuda (the driver), glibc and libstdc++ are the GPU machine's own and are not copied.
set -euo pipefail

readonly PROG=gpu-bundle
readonly MAX_BYTES=$((48 * 1024 * 1024))

usage() {
  cat <<'EOF'
usage: scripts/gpu-bundle.sh [--out DIR] [--build-dir DIR] [--no-python] [--skip-python-tests]
                             [--all-targets] [--check DIR]

Builds the GPU bundle (default build/gpu-bundle) that scripts/gpu-proof.sh --bundle runs from.

options:
  --out DIR             where the bundle goes (default build/gpu-bundle; replaced)
  --build-dir DIR       the build tree (default build/gpu-bundle-build; reused when present)
  --no-python           leave the Python package out (no virtual environment needed)
  --skip-python-tests   do not run the bundle's pytest suite here
  --all-targets         build every target of the cuda preset, tests included (CI then runs the
                        preset's CTest suite in the build tree instead of building the preset twice)
  --check DIR           only check an existing bundle: RUNPATHs, libraries resolved from a copy,
                        size; exit 1 on a failure
  -h, --help            this text

environment: CUDA_HOME (default /usr/local/cuda), DEVMEM_BUNDLE_JOBS (build jobs, default nproc).
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*"; }
die() {
  printf '%s: error: %s\n' "$PROG" "$*" >&2
  exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=$root/build/gpu-bundle
build_dir=$root/build/gpu-bundle-build
with_python=1
python_tests=1
check_only=""
all_targets=0
while (($# > 0)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out) out_dir=${2:?--out: missing directory}; shift 2 ;;
    --build-dir) build_dir=${2:?--build-dir: missing directory}; shift 2 ;;
    --no-python) with_python=0; shift ;;
    --skip-python-tests) python_tests=0; shift ;;
    --all-targets) all_targets=1; shift ;;
    --check) check_only=${2:?--check: missing directory}; shift 2 ;;
    *) printf '%s: unknown option %s (see --help)\n' "$PROG" "$1" >&2; exit 2 ;;
  esac
done
[[ $out_dir == /* ]] || out_dir=$PWD/$out_dir
[[ $build_dir == /* ]] || build_dir=$PWD/$build_dir

# ---------------------------------------------------------------------------------------------
# Checks (also run alone with --check)

# is_elf FILE: an ELF file (executable or shared library).
is_elf() { [[ -f $1 && ! -L $1 ]] && [[ $(head -c 4 "$1" | od -An -c | tr -d ' ') == 177ELF ]]; }

# origin_relative RUNPATH: every entry starts with $ORIGIN (and there is one).
origin_relative() {
  local entry
  [[ -n $1 ]] || return 1
  IFS=: read -r -a entries <<<"$1"
  for entry in "${entries[@]}"; do
    [[ $entry == '$ORIGIN'* ]] || return 1
  done
}

# check_bundle DIR: RUNPATHs, libraries resolved from a copy with an empty LD_LIBRARY_PATH, size.
check_bundle() {
  local bundle=$1 failures=0 file runpath missing copy bytes
  [[ -d $bundle/bin && -d $bundle/lib ]] || die "$bundle is not a bundle (no bin/ or lib/)"
  # Checked from a copy at another path: nothing may depend on where the bundle was built.
  copy=$(mktemp -d "${TMPDIR:-/tmp}/devmem-bundle-check.XXXXXX")
  trap 'rm -rf "$copy"' RETURN
  cp -a "$bundle/." "$copy/"
  while IFS= read -r -d '' file; do
    is_elf "$file" || continue
    runpath=$(readelf -d "$file" 2>/dev/null | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
    case ${file#"$copy"/} in
      lib/libdevmem.so*) ;;  # libdevmem's own RUNPATH finds fmt and Boost.Context beside it
      lib/*) runpath=skip ;;  # the copied third-party libraries need only system libraries
    esac
    if [[ $runpath != skip ]] && ! origin_relative "$runpath"; then
      printf '%s: %s: RUNPATH "%s" is not $ORIGIN-relative\n' "$PROG" "${file#"$copy"/}" \
        "$runpath" >&2
      failures=$((failures + 1))
    fi
    missing=$(env -u LD_LIBRARY_PATH ldd "$file" 2>&1 | grep 'not found' | grep -v 'libcuda\.so\.1' ||
      true)
    if [[ -n $missing ]]; then
      printf '%s: %s: unresolved from a copy of the bundle:\n%s\n' "$PROG" "${file#"$copy"/}" \
        "$missing" >&2
      failures=$((failures + 1))
    fi
  done < <(find "$copy" -type f -print0)
  bytes=$(du -sb "$bundle" | cut -f1)
  if ((bytes > MAX_BYTES)); then
    printf '%s: the bundle is %d bytes, over the limit of %d (48 MiB)\n' "$PROG" "$bytes" \
      "$MAX_BYTES" >&2
    failures=$((failures + 1))
  fi
  if ((failures > 0)); then
    printf '%s: %s: %d check(s) failed\n' "$PROG" "$bundle" "$failures" >&2
    return 1
  fi
  say "$bundle: every ELF has an \$ORIGIN-relative RUNPATH and resolves all libraries but libcuda.so.1 from a copy; $((bytes / 1024)) KiB of at most $((MAX_BYTES / 1024))"
}

if [[ -n $check_only ]]; then
  check_bundle "$check_only"
  exit
fi

# ---------------------------------------------------------------------------------------------
# 1. Python environment
cuda_home=${CUDA_HOME:-/usr/local/cuda}
[[ -x $cuda_home/bin/nvcc ]] || die "no nvcc at $cuda_home/bin/nvcc (set CUDA_HOME)"
python_options=()
venv_python=""
if ((with_python)); then
  say "[1/5] Python 3.12 virtual environment (scripts/python-venv.sh)"
  venv_dir=$(bash "$root/scripts/python-venv.sh" | tail -n1)
  venv_python=$venv_dir/bin/python
  [[ -x $venv_python ]] || die "scripts/python-venv.sh did not make $venv_python"
  pybind11_dir=$("$venv_python" -m pybind11 --cmakedir)
  python_options=(-DDEVMEM_WITH_PYTHON=ON "-DPython3_EXECUTABLE=$venv_python"
    "-Dpybind11_DIR=$pybind11_dir" -DDEVMEM_PYTHON_INSTALL_DIR:STRING=python)
fi

# ---------------------------------------------------------------------------------------------
# 2. Build: Release, sm_80 and sm_90 machine code plus compute_90 PTX. Every binary of the build
# tree gets the install RUNPATH ($ORIGIN/../lib) at link time, so the copies in the bundle find
# lib/ wherever the bundle is.
say "[2/5] configure and build the cuda preset (Release, sm_80 + sm_90 + PTX) in $build_dir"
cmake --preset cuda -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CUDA_COMPILER=$cuda_home/bin/nvcc" "-DCUDAToolkit_ROOT=$cuda_home" \
  "-DCMAKE_CUDA_ARCHITECTURES=80-real;90-real;90-virtual" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib" \
  "${python_options[@]}" >"$build_dir.configure.log" 2>&1 ||
  { tail -n 30 "$build_dir.configure.log" >&2; die "configure failed (log: $build_dir.configure.log)"; }
programs=(devmem_app conformance_cuda gpu_no_device_cuda gpu_runtime_fake_api proof_fault
  proof_capture proof_overlap devmem_alloc_bench devmem_kernel_bench example_matmul_cuda
  example_readme_example)
targets=(devmem "${programs[@]}")
((with_python)) && targets+=(devmem_python)
# CTest discovery runs the test programs after linking: in the build tree they find libdevmem
# through LD_LIBRARY_PATH, not their (bundle-relative) RUNPATH.
((all_targets)) && targets=(all)
LD_LIBRARY_PATH="$build_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cmake --build "$build_dir" -j "${DEVMEM_BUNDLE_JOBS:-$(nproc)}" --target "${targets[@]}"

# ---------------------------------------------------------------------------------------------
# 3. The installed package (library, headers, CMake package, Python package) in a staging prefix,
# and a consumer's kernel built against it.
say "[3/5] install into a staging prefix; build a consumer's kernel against it"
stage=$build_dir/stage
rm -rf "$stage"
cmake --install "$build_dir" --prefix "$stage" >/dev/null
consumer_build=$build_dir/consumer-kernels
rm -rf "$consumer_build"
cmake -S "$root/tests/consumer_kernels" -B "$consumer_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_PREFIX_PATH=$stage" "-DCMAKE_CUDA_COMPILER=$cuda_home/bin/nvcc" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib" >/dev/null
cmake --build "$consumer_build" >/dev/null

# ---------------------------------------------------------------------------------------------
# 4. The folder
say "[4/5] assemble $out_dir"
rm -rf "$out_dir"
mkdir -p "$out_dir/bin" "$out_dir/lib"
for program in "${programs[@]}"; do
  file=$(find "$build_dir" -path "$build_dir/stage" -prune -o -type f -executable \
    \( -name "$program" -o -name devmem \) -print | grep -E "/($program)\$" | head -n1 || true)
  [[ $program == devmem_app ]] && file=$stage/bin/devmem
  [[ -n $file && -x $file ]] || die "built program $program not found in $build_dir"
  cp "$file" "$out_dir/bin/"
done
cp "$consumer_build/consumer_kernels" "$out_dir/bin/"
cp -P "$stage"/lib/libdevmem.so* "$out_dir/lib/"
if ((with_python)); then
  mkdir -p "$out_dir/python"
  cp -r "$stage/python/devmem" "$out_dir/python/"
  cp -r "$root/python/tests" "$out_dir/python/tests"
  find "$out_dir/python" -name __pycache__ -prune -exec rm -rf {} +
fi
cp "$root/scripts/gpu-proof.sh" "$root/scripts/proof_python.py" "$out_dir/"

# The non-system libraries every ELF needs, copied beside libdevmem. glibc, libstdc++, libgcc and
# the driver (libcuda) are the GPU machine's own.
system_library='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libutil|libresolv)\.'
for pass in 1 2; do  # a second pass for what the copied libraries need
  while IFS= read -r -d '' file; do
    is_elf "$file" || continue
    while read -r name path; do
      [[ $name =~ $system_library || -z $path || ! -f $path ]] && continue
      [[ -e $out_dir/lib/$name ]] || cp -L "$path" "$out_dir/lib/$name"
    done < <(LD_LIBRARY_PATH="$out_dir/lib:$cuda_home/lib64" ldd "$file" 2>/dev/null |
      awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
  done < <(find "$out_dir" -type f -print0)
  : "$pass"
done

# The manifest: what was built, from what, with what; sha256 of every file.
{
  echo "devmem GPU bundle"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(
    [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]] &&
      echo ' (dirty: uncommitted changes to tracked files)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -srm)"
  echo "nvcc: $("$cuda_home/bin/nvcc" --version | sed -n 's/^Cuda compilation tools, //p')"
  echo "c++: $(c++ --version | head -n1)"
  echo "cmake: $(cmake --version | head -n1)"
  echo "glibc (built against): $(ldd --version | head -n1)"
  echo "cuda architectures: 80-real;90-real;90-virtual"
  if ((with_python)); then
    echo "python: $("$venv_python" -c 'import sys, numpy, pybind11; print(sys.version.split()[0], "numpy", numpy.__version__, "pybind11", pybind11.__version__)')"
  fi
  echo
  echo "sha256:"
  (cd "$out_dir" && find . -type f ! -name MANIFEST.txt -print0 | sort -z | xargs -0 sha256sum)
} >"$out_dir/MANIFEST.txt"

# ---------------------------------------------------------------------------------------------
# 5. Checks
say "[5/5] check the bundle"
check_bundle "$out_dir"
if ((with_python && python_tests)); then
  # The bundle's own module, its own tests, the venv's NumPy 2, from a copy elsewhere; host backend
  # (the cuda backend has no device here).
  copy=$(mktemp -d "${TMPDIR:-/tmp}/devmem-bundle-python.XXXXXX")
  cp -a "$out_dir/." "$copy/"
  rc=0
  (cd "$copy" && env -u LD_LIBRARY_PATH DEVMEM_BACKEND=host PYTHONPATH="$copy/python" \
    PYTHONDONTWRITEBYTECODE=1 "$venv_python" -m pytest -q -p no:cacheprovider python/tests) || rc=$?
  rm -rf "$copy"
  ((rc == 0)) || die "the bundle's Python module failed its pytest suite under NumPy 2 (exit $rc)"
fi
say "done: $out_dir ($(du -sh "$out_dir" | cut -f1)); prove it on a GPU machine, in the copied folder, with: bash gpu-proof.sh --bundle . --out ../proof"
