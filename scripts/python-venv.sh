#!/usr/bin/env bash
# Creates (or checks) the Python virtual environment of the `python-numpy2` preset: CPython 3.12
# with the pinned packages of python/requirements-numpy2.txt (NumPy 2, pybind11 >= 2.12, pytest,
# numba + numba-cuda, and scikit-build-core from python/requirements-build.txt),
# installed from PyPI as wheels into a folder under build/, never system-wide. Safe to run
# repeatedly: an environment made from the same interpreter and requirements is left as it is.
# The last line of its output is the environment's path; `<path>/bin/python` is its interpreter.
#
#   scripts/python-venv.sh [--python PYTHON] [--dir DIR] [--requirements FILE] [--recreate]
#
#   --python PYTHON      the interpreter to base it on (default: the first python3.12 that runs:
#                        python3.12 on PATH, pyenv's versions/3.12.*, /usr/local/bin, /usr/bin)
#   --dir DIR            where to put it (default: build/venv-py312 in the source tree, the path
#                        the python-numpy2 preset uses)
#   --requirements FILE  the pinned packages (default: python/requirements-numpy2.txt)
#   --recreate           make it anew even when it is up to date
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
python=""
dir="$root/build/venv-py312"
requirements="$root/python/requirements-numpy2.txt"
recreate=0

die() {
  echo "python-venv.sh: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    --python) [ $# -ge 2 ] || die "--python needs a value"; python="$2"; shift 2 ;;
    --python=*) python="${1#*=}"; shift ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir="$2"; shift 2 ;;
    --dir=*) dir="${1#*=}"; shift ;;
    --requirements) [ $# -ge 2 ] || die "--requirements needs a value"; requirements="$2"; shift 2 ;;
    --requirements=*) requirements="${1#*=}"; shift ;;
    --recreate) recreate=1; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "python-venv.sh: unknown option '$1' (known: --python, --dir, --requirements, --recreate)" >&2; exit 2 ;;
  esac
done

[ -f "$requirements" ] || die "no requirements file '$requirements'"
requirements="$(cd "$(dirname "$requirements")" && pwd)/$(basename "$requirements")"

# An interpreter that really runs (a pyenv shim on PATH may name a version that is not selected)
# and can make virtual environments.
runs() {
  "$1" -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info[:2] >= (3, 9) else 1)' \
    >/dev/null 2>&1
}

if [ -n "$python" ]; then
  command -v "$python" >/dev/null 2>&1 || die "--python '$python' is not an executable"
  python="$(command -v "$python")"
  runs "$python" || die "--python '$python' does not run, or has no venv/ensurepip module"
else
  candidates=()
  if p="$(command -v python3.12 2>/dev/null)"; then candidates+=("$p"); fi
  pyenv_root="${PYENV_ROOT:-}"
  if [ -z "$pyenv_root" ] && command -v pyenv >/dev/null 2>&1; then
    pyenv_root="$(pyenv root 2>/dev/null || true)"
  fi
  [ -n "$pyenv_root" ] || pyenv_root="$HOME/.pyenv"
  # Newest 3.12 patch release first.
  while IFS= read -r p; do candidates+=("$p"); done < <(
    ls -d "$pyenv_root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -t. -k3,3nr || true)
  candidates+=(/usr/local/bin/python3.12 /usr/bin/python3.12)
  for p in "${candidates[@]}"; do
    if [ -x "$p" ] && runs "$p" &&
      "$p" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' 2>/dev/null; then
      python="$p"
      break
    fi
  done
  [ -n "$python" ] || die "no working python3.12 found (tried: ${candidates[*]}). Install CPython 3.12 with its headers (pyenv install 3.12, or a distribution package), or name one with --python"
fi

# The module is compiled against this interpreter: its headers must be there.
include="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$include/Python.h" ] || die "$python has no C headers ($include/Python.h is missing): the devmem module cannot be built against it"

version="$("$python" -c 'import platform; print(platform.python_version())')"
base="$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
stamp="$dir/.devmem-venv-stamp"
# The requirements file and the files it includes with `-r` (one level: requirements-build.txt).
requirement_files=("$requirements")
while IFS= read -r included; do
  requirement_files+=("$(dirname "$requirements")/$included")
done < <(sed -n 's/^-r[[:space:]]*\([^[:space:]#]*\).*/\1/p' "$requirements")
wanted="python=$base $version
requirements=$(cat "${requirement_files[@]}" | sha256sum | cut -d' ' -f1)"

if [ "$recreate" -eq 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] &&
  "$dir/bin/python" -c 'import numpy, pybind11, pytest' >/dev/null 2>&1; then
  echo "python-venv.sh: $dir is up to date (Python $version, $(basename "$requirements"))" >&2
else
  echo "python-venv.sh: creating $dir from $python (Python $version)" >&2
  mkdir -p "$(dirname "$dir")"
  rm -f "$stamp"
  "$python" -m venv --clear "$dir"
  # Wheels only: nothing is compiled here, and a missing wheel fails at once.
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$dir/bin/python" -m pip install --quiet --no-input \
    --only-binary=:all: -r "$requirements"
  "$dir/bin/python" -m pip check >&2
  printf '%s\n' "$wanted" >"$stamp"
fi
"$dir/bin/python" -c 'import importlib.metadata as m, numpy, pybind11, pytest, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "none"
print(f"python-venv.sh: Python {sys.version.split()[0]}, NumPy {numpy.__version__}, "
      f"pybind11 {pybind11.__version__}, pytest {pytest.__version__}, numba {version("numba")}, "
      f"numba-cuda {version("numba-cuda")}, scikit-build-core {version("scikit-build-core")}",
      file=sys.stderr)'
cd "$dir" && pwd
