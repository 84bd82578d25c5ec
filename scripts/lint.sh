#!/usr/bin/env bash
# Formatting and lint checks for devmem's C++ sources. Exits non-zero on any finding.
#   scripts/lint.sh                   both checks below
#   scripts/lint.sh --format [FILE...]  clang-format: every tracked C/C++/CUDA source (or each FILE)
#                                     matches .clang-format; nothing is rewritten
#   scripts/lint.sh --fix [FILE...]     clang-format, rewriting those files in place
#   scripts/lint.sh --tidy [FILE...]    clang-tidy (.clang-tidy) over the library's sources: core/,
#                                     backends/, apps/, bench/engine/ as the host preset compiles
#                                     them (not the tests in backends/*/tests), mpi/ as host-mpi
#                                     does, python/ as the python preset does (python-mpi with
#                                     Open MPI and mpi4py: devmem.mpi's module too), and the
#                                     GPU backends' sources (backends/cuda, backends/roc,
#                                     backends/gpu_runtime) as cuda-hipcpu and roc-hipcpu compile
#                                     them (or over each FILE among them; other files, headers
#                                     included, are skipped)
# The tidy check uses the compile_commands.json of build/host, build/host-mpi, build/python (or
# build/python-mpi), build/cuda-hipcpu and build/roc-hipcpu, configuring each preset when its
# database is missing;
# without Open MPI (scripts/install-deps.sh --mpi) mpi/ is skipped with a note, without pybind11
# (--python) python/ is, and without TBB (--hipcpu) or the HIP-CPU checkout
# (../shared/third_party/hip-cpu) the GPU sources are. The HIP-CPU presets compile the CUDA and ROC
# backends, their call tables and the strided-copy kernel's launch (once per backend) with the host
# compiler, so clang-tidy reads them as they are built for a GPU, headers of backends/ included.
# Tools: clang-format-15 and clang-tidy-15 (scripts/install-deps.sh --lint), or the programs named
# by $CLANG_FORMAT and $CLANG_TIDY. $LINT_JOBS: parallel clang-tidy runs (default: the number of
# processors).
set -euo pipefail
cd "$(dirname "$0")/.."

clang_format=${CLANG_FORMAT:-clang-format-15}
clang_tidy=${CLANG_TIDY:-clang-tidy-15}
jobs=${LINT_JOBS:-$(nproc)}
host_dir=build/host
mpi_dir=build/host-mpi
python_dir=build/python
cuda_gpu_dir=build/cuda-hipcpu
roc_gpu_dir=build/roc-hipcpu

mode=all
case "${1:-}" in
  --format) mode=format; shift ;;
  --fix) mode=fix; shift ;;
  --tidy) mode=tidy; shift ;;
  -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "lint.sh: unknown option '$1' (known: --format, --fix, --tidy)" >&2; exit 2 ;;
esac
if [ "$mode" = all ] && [ $# -gt 0 ]; then
  echo "lint.sh: files are accepted after --format, --fix or --tidy only" >&2
  exit 2
fi

need() {
  command -v "$1" >/dev/null || {
    echo "lint.sh: $1 not found (scripts/install-deps.sh --lint installs it)" >&2
    exit 2
  }
}

# Every tracked C, C++ and CUDA source; the fuzz corpora hold inputs, not sources, and code under
# a third_party directory keeps its upstream style.
format_files() {
  git ls-files -- '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' ':!:fuzz/corpus/**' ':!:**/third_party/**'
}

run_format() {  # $1: --dry-run or -i; then the files (all when none)
  need "$clang_format"
  local action=$1
  shift
  local files=("$@")
  [ ${#files[@]} -gt 0 ] || mapfile -t files < <(format_files)
  [ ${#files[@]} -gt 0 ] || return 0
  if [ "$action" = -i ]; then
    "$clang_format" -i --style="file:$PWD/.clang-format" "${files[@]}"
    return 0
  fi
  if ! "$clang_format" --dry-run --Werror --style="file:$PWD/.clang-format" "${files[@]}"; then
    echo "lint.sh: the files above do not match .clang-format (scripts/lint.sh --fix rewrites" \
      "them)" >&2
    return 1
  fi
  echo "clang-format: ${#files[@]} files match .clang-format"
}

# The library's sources in a preset's compilation database (tests, benchmarks, examples and fuzz
# targets are not linted), as paths relative to the repository root. $1: the build directory; $2:
# the top-level directories to take, as an extended regular expression ("core|backends").
tidy_files() {
  sed -n 's/^[[:space:]]*"file":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p' "$1/compile_commands.json" |
    sed "s|^$PWD/||" | { grep -E "^($2)/.*\.(cpp|cc|cxx)\$" | grep -v '/tests/' || true; } |
    sort -u
}

# clang-tidy over "DIR FILE" lines on stdin (FILE checked with DIR's compilation database), $jobs at
# a time from one pool, so that no core waits at the end of one database's files while another's
# remain; the biggest files (most likely the slowest) go first. Fails on any finding.
tidy_pool() {
  # One clang-tidy per file; the per-file "N warnings generated" counts (system headers) are noise.
  local status
  set +e
  while read -r dir file; do printf '%s %s %s\n' "$(stat -c %s "$file")" "$dir" "$file"; done |
    sort -rn | cut -d' ' -f2- |
    xargs -P "$jobs" -L 1 sh -c 'exec "$0" -p "$1" --quiet "$2"' "$clang_tidy" 2>&1 |
    grep -vE '^[0-9]+ (warning|error)s? (and [0-9]+ (warning|error)s? )?generated\.$'
  status=${PIPESTATUS[3]}
  set -e
  [ "$status" -eq 0 ]
}

# Whether the HIP-CPU presets can be configured: TBB's CMake package and the HIP-CPU checkout beside
# the repository (cpu_standins/hipcpu/CMakeLists.txt).
hipcpu_available() {
  compgen -G '/usr/lib/*/cmake/TBB/TBBConfig.cmake' >/dev/null ||
    compgen -G '/usr/lib/cmake/TBB/TBBConfig.cmake' >/dev/null || return 1
  [ -f ../shared/third_party/hip-cpu/include/hip/hip_runtime.h ]
}

run_tidy() {  # the files to check (all of the library's sources when none)
  need "$clang_tidy"
  if [ ! -f "$host_dir/compile_commands.json" ]; then
    cmake --preset host >/dev/null
  fi
  # devmem::mpi builds only with MPI (the host-mpi preset), so its sources have their own database.
  local mpi_all=""
  if [ -f "$mpi_dir/compile_commands.json" ] || command -v mpicc >/dev/null; then
    [ -f "$mpi_dir/compile_commands.json" ] || cmake --preset host-mpi >/dev/null
    mpi_all=$(tidy_files "$mpi_dir" 'mpi')
  else
    echo "clang-tidy: Open MPI is not installed (scripts/install-deps.sh --mpi): mpi/ is skipped"
  fi
  # The Python module builds only with pybind11 (the python preset): its own database too. With
  # Open MPI and mpi4py the python-mpi preset's, which adds devmem.mpi's extension module.
  local python_all="" python_preset=python
  if command -v mpicc >/dev/null && /usr/bin/python3 -c 'import mpi4py' 2>/dev/null; then
    python_dir=build/python-mpi
    python_preset=python-mpi
  fi
  if [ -f "$python_dir/compile_commands.json" ] || [ -f /usr/include/pybind11/pybind11.h ]; then
    [ -f "$python_dir/compile_commands.json" ] || cmake --preset "$python_preset" >/dev/null
    python_all=$(tidy_files "$python_dir" 'python')
  else
    echo "clang-tidy: pybind11 is not installed (scripts/install-deps.sh --python): python/ is skipped"
  fi
  # The CUDA and ROC backends build only with their toolkits; their HIP-CPU presets build them with
  # the host compiler: their databases give the GPU folders' sources (a source both compile, the
  # strided-copy kernel's launch, is checked once per backend).
  local gpu='backends/(cuda|roc|gpu_runtime)' cuda_gpu_all="" roc_gpu_all=""
  if { [ -f "$cuda_gpu_dir/compile_commands.json" ] &&
    [ -f "$roc_gpu_dir/compile_commands.json" ]; } || hipcpu_available; then
    [ -f "$cuda_gpu_dir/compile_commands.json" ] || cmake --preset cuda-hipcpu >/dev/null
    [ -f "$roc_gpu_dir/compile_commands.json" ] || cmake --preset roc-hipcpu >/dev/null
    cuda_gpu_all=$(tidy_files "$cuda_gpu_dir" "$gpu")
    roc_gpu_all=$(tidy_files "$roc_gpu_dir" "$gpu")
  else
    echo "clang-tidy: TBB (scripts/install-deps.sh --hipcpu) or HIP-CPU" \
      "(../shared/third_party/hip-cpu) is missing: backends/cuda, backends/roc and" \
      "backends/gpu_runtime are skipped"
  fi
  local host_all host_files=() mpi_files=() python_files=() cuda_gpu_files=() roc_gpu_files=()
  host_all=$(tidy_files "$host_dir" 'core|backends|apps|bench/engine')
  if [ $# -eq 0 ]; then
    [ -z "$host_all" ] || mapfile -t host_files <<<"$host_all"
    [ -z "$mpi_all" ] || mapfile -t mpi_files <<<"$mpi_all"
    [ -z "$python_all" ] || mapfile -t python_files <<<"$python_all"
    [ -z "$cuda_gpu_all" ] || mapfile -t cuda_gpu_files <<<"$cuda_gpu_all"
    [ -z "$roc_gpu_all" ] || mapfile -t roc_gpu_files <<<"$roc_gpu_all"
  else
    local f
    for f in "$@"; do
      f=${f#./}
      if grep -qxF -- "$f" <<<"$host_all"; then
        host_files+=("$f")
      elif [ -n "$mpi_all" ] && grep -qxF -- "$f" <<<"$mpi_all"; then
        mpi_files+=("$f")
      elif [ -n "$python_all" ] && grep -qxF -- "$f" <<<"$python_all"; then
        python_files+=("$f")
      fi
      if [ -n "$cuda_gpu_all" ] && grep -qxF -- "$f" <<<"$cuda_gpu_all"; then
        cuda_gpu_files+=("$f")
      fi
      if [ -n "$roc_gpu_all" ] && grep -qxF -- "$f" <<<"$roc_gpu_all"; then
        roc_gpu_files+=("$f")
      fi
    done
  fi
  local count=$((${#host_files[@]} + ${#mpi_files[@]} + ${#python_files[@]} +
    ${#cuda_gpu_files[@]} + ${#roc_gpu_files[@]}))
  if [ "$count" -eq 0 ]; then
    echo "clang-tidy: no library sources to check"
    return 0
  fi
  echo "clang-tidy: $count files, $jobs at a time"
  local status=0 f
  {
    for f in "${host_files[@]}"; do echo "$host_dir $f"; done
    for f in "${mpi_files[@]}"; do echo "$mpi_dir $f"; done
    for f in "${python_files[@]}"; do echo "$python_dir $f"; done
    for f in "${cuda_gpu_files[@]}"; do echo "$cuda_gpu_dir $f"; done
    for f in "${roc_gpu_files[@]}"; do echo "$roc_gpu_dir $f"; done
  } | tidy_pool || status=1
  if [ "$status" -ne 0 ]; then
    echo "lint.sh: clang-tidy reported findings (above)" >&2
    return 1
  fi
  echo "clang-tidy: no findings"
}

case "$mode" in
  format) run_format --dry-run "$@" ;;
  fix) run_format -i "$@" ;;
  tidy) run_tidy "$@" ;;
  all)
    status=0
    run_format --dry-run || status=1
    run_tidy || status=1
    exit "$status"
    ;;
esac
