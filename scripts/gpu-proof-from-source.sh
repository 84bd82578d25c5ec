#!/usr/bin/env bash
# gpu-proof-from-source.sh: builds devmem on a machine with a real GPU and proves it, in one
# command. It needs the build dependencies there (Debian packages) and the time to compile; on a
# GPU machine without them use scripts/gpu-bundle.sh here and scripts/gpu-proof.sh --bundle there.
#
#   1. detect the GPU (NVIDIA: nvidia-smi, nvcc; AMD: rocminfo or rocm-smi); none: one line on
#      stderr and exit 77
#   2. configure and build the matching preset (cuda or roc) in Release into build/proof-<preset>
#   3. run the conformance suite (ctest -L cuda|roc) with JUnit output
#   4. NVIDIA: compute-sanitizer memcheck (whole suite), racecheck, synccheck, initcheck ([kernels])
#   5. devmem info, devmem bench (full sweep, or --quick) with its JSON
#   6. write bench/results/<date>-<gpu>.md, .json and a folder of logs
#
# Every step runs even when an earlier check fails (except after a failed build); the exit
# status is 0 only if all passed. Run with --help for the options and the environment.
#
# The report is Markdown: its backquotes in single-quoted printf formats are meant literally.
# shellcheck disable=SC2016
set -euo pipefail

readonly PROG=gpu-proof-from-source

usage() {
  cat <<'EOF'
usage: scripts/gpu-proof-from-source.sh [--out DIR] [--skip-sanitizers] [--quick]

Proves a devmem build on this machine's GPU: detects the GPU (NVIDIA or AMD), builds the
matching preset (cuda or roc) in Release into build/proof-<preset>, runs the conformance suite
with JUnit output, on NVIDIA runs compute-sanitizer (memcheck over the whole suite; racecheck,
synccheck and initcheck over the [kernels] tests), runs `devmem info` and `devmem bench --json`,
and writes a report: DIR/<YYYY-MM-DD>-<gpu>.md, the bench JSON next to it (.json) and a folder
DIR/<YYYY-MM-DD>-<gpu>/ with every log and conformance.xml.

options:
  --out DIR            where the results go (default: bench/results)
  --skip-sanitizers    do not run compute-sanitizer (NVIDIA)
  --quick              devmem bench --quick instead of the full sweep
  -h, --help           this text

environment:
  DEVMEM_PROOF_VENDOR=nvidia|amd|none   skip detection: take this vendor (none: act as if there
                                        were no GPU)
  DEVMEM_PROOF_NATIVE_ARCH=1            build device code for this GPU only
                                        (NVIDIA: -DCMAKE_CUDA_ARCHITECTURES=native; AMD:
                                        -DCMAKE_HIP_ARCHITECTURES=<its gfx>), not the preset's
  DEVMEM_PROOF_SANITIZER_API_ERRORS     compute-sanitizer --report-api-errors (default: no; the
                                        suite provokes failing CUDA calls on purpose)

exit status: 0 everything passed, 1 a step failed (see the report), 2 usage error,
77 no NVIDIA or AMD GPU on this machine (nothing was built).
EOF
}

usage_error() {
  printf '%s: %s (see --help)\n' "$PROG" "$1" >&2
  exit 2
}

# ---------------------------------------------------------------------------------------------
# Options
out_dir=""
skip_sanitizers=0
quick=0
while (($# > 0)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out)
      if (($# < 2)) || [[ -z $2 ]]; then usage_error "--out: missing directory"; fi
      out_dir=$2
      shift 2
      ;;
    --out=*)
      out_dir=${1#--out=}
      [[ -n $out_dir ]] || usage_error "--out=: empty directory"
      shift
      ;;
    --skip-sanitizers) skip_sanitizers=1; shift ;;
    --quick) quick=1; shift ;;
    *) usage_error "unknown option '$1'" ;;
  esac
done
if [[ -n $out_dir && $out_dir != /* ]]; then out_dir=$PWD/$out_dir; fi  # relative to the caller

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out_dir=${out_dir:-$root/bench/results}

# ---------------------------------------------------------------------------------------------
# Helpers
have() { command -v "$1" >/dev/null 2>&1; }
say() { printf '%s: %s\n' "$PROG" "$*"; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}
first_line() { printf '%s' "${1%%$'\n'*}"; }
# with_timeout SECONDS COMMAND...: a hung vendor tool must not hang the detection.
with_timeout() {
  local seconds=$1
  shift
  if have timeout; then timeout "$seconds" "$@"; else "$@"; fi
}
# find_tool NAME CANDIDATE...: the first candidate that is executable; PATH means `command -v NAME`.
find_tool() {
  local name=$1 candidate
  shift
  for candidate in "$@"; do
    if [[ $candidate == PATH ]]; then
      candidate=$(command -v "$name" 2>/dev/null) || continue
    fi
    if [[ -x $candidate ]]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  return 1
}
slugify() {
  local s
  s=$(printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9' '-' | tr -s '-')
  s=${s#-}
  s=${s%-}
  printf '%s' "${s:-unknown-gpu}"
}

# ---------------------------------------------------------------------------------------------
# 1. Detect the GPU (fast; nothing is built before this is settled)
gpu_name="" gpu_arch="" gpu_count=0 driver="" toolkit="" nvidia_note="nvidia-smi: not found"
amd_note="rocminfo/rocm-smi: not found" cuda_driver_version="" forced_note=""

detect_nvidia() {
  local smi out rc=0
  smi=$(find_tool nvidia-smi PATH /usr/lib/wsl/lib/nvidia-smi) || return 1
  out=$(with_timeout 30 "$smi" --query-gpu=name,driver_version --format=csv,noheader 2>&1) || rc=$?
  if ((rc != 0)) || [[ -z $(trim "$out") ]]; then
    nvidia_note="nvidia-smi: no GPU, exit $rc: $(trim "$(first_line "$out")")"
    return 1
  fi
  gpu_count=$(grep -c . <<<"$out" || true)
  out=$(first_line "$out")
  gpu_name=$(trim "${out%,*}")
  driver=$(trim "${out##*,}")
  local cc=""
  cc=$(with_timeout 30 "$smi" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) || true
  cc=$(trim "$(first_line "$cc")")
  if [[ $cc =~ ^([0-9]+)\.([0-9]+)$ ]]; then gpu_arch="sm_${BASH_REMATCH[1]}${BASH_REMATCH[2]}"; fi
  out=$(with_timeout 30 "$smi" 2>/dev/null) || true
  if [[ $out =~ CUDA\ Version:\ *([0-9.]+) ]]; then cuda_driver_version=${BASH_REMATCH[1]}; fi
  return 0
}

detect_amd() {
  local tool out rc=0 agents=""
  if tool=$(find_tool rocminfo PATH /opt/rocm/bin/rocminfo); then
    out=$(with_timeout 60 "$tool" 2>/dev/null) || rc=$?
    # One line per GPU agent: <gfx name> TAB <marketing name>.
    agents=$(awk -F':' '
      function flush() { if (type ~ /GPU/) print name "\t" market; name = ""; market = ""; type = "" }
      function value() { v = substr($0, index($0, ":") + 1); gsub(/^[ \t]+|[ \t]+$/, "", v); return v }
      /^[ \t]*Agent [0-9]+/ { flush(); next }
      $1 ~ /^[ \t]*Name[ \t]*$/ && name == "" { name = value() }
      $1 ~ /^[ \t]*Marketing Name[ \t]*$/ { market = value() }
      $1 ~ /^[ \t]*Device Type[ \t]*$/ { type = value() }
      END { flush() }' <<<"$out")
    if [[ -n $agents ]]; then
      gpu_count=$(grep -c . <<<"$agents" || true)
      local line
      line=$(first_line "$agents")
      gpu_arch=${line%%$'\t'*}
      gpu_name=${line#*$'\t'}
    else
      amd_note="rocminfo: no GPU agent, exit $rc"
    fi
  fi
  if [[ -z $agents ]] && tool=$(find_tool rocm-smi PATH /opt/rocm/bin/rocm-smi); then
    rc=0
    out=$(with_timeout 60 "$tool" --showproductname 2>/dev/null) || rc=$?
    if grep -q '^GPU\[[0-9]*\]' <<<"$out"; then
      gpu_count=$(grep -o '^GPU\[[0-9]*\]' <<<"$out" | sort -u | grep -c . || true)
      gpu_name=$(sed -n 's/^GPU\[0\][^:]*: *Card [Ss]eries: *//p' <<<"$out" | head -n1 || true)
      gpu_arch=$(sed -n 's/^GPU\[0\][^:]*: *GFX Version: *//p' <<<"$out" | head -n1 || true)
      gpu_name=$(trim "$gpu_name")
      gpu_arch=$(trim "$gpu_arch")
    else
      amd_note="${amd_note/#rocminfo\/rocm-smi: not found/rocminfo: not found}; rocm-smi: no GPU, exit $rc"
      return 1
    fi
  elif [[ -z $agents ]]; then
    return 1
  fi
  gpu_arch=${gpu_arch%%:*}  # "gfx90a:sramecc+:xnack-" -> gfx90a
  if [[ -z $gpu_name || $gpu_name == "$gpu_arch" ]]; then gpu_name="AMD $gpu_arch"; fi
  if [[ -r /sys/module/amdgpu/version ]]; then
    driver="amdgpu $(cat /sys/module/amdgpu/version)"
  elif [[ -d /sys/module/amdgpu ]]; then
    driver="amdgpu (in the kernel, Linux $(uname -r))"
  fi
  return 0
}

no_gpu() {
  printf '%s: no NVIDIA or AMD GPU found (%s); nothing to prove on this machine\n' "$PROG" "$1" >&2
  exit 77
}

vendor=${DEVMEM_PROOF_VENDOR:-}
case $vendor in
  "")
    if detect_nvidia; then
      vendor=nvidia
    elif detect_amd; then
      vendor=amd
    else
      no_gpu "$nvidia_note; $amd_note"
    fi
    ;;
  nvidia)
    forced_note="the GPU was detected"
    if ! detect_nvidia; then
      gpu_name="unknown NVIDIA GPU"
      forced_note="not detected: $nvidia_note"
      warn "DEVMEM_PROOF_VENDOR=nvidia, but $nvidia_note"
    fi
    ;;
  amd)
    forced_note="the GPU was detected"
    if ! detect_amd; then
      gpu_name="unknown AMD GPU"
      forced_note="not detected: $amd_note"
      warn "DEVMEM_PROOF_VENDOR=amd, but $amd_note"
    fi
    ;;
  none) no_gpu "DEVMEM_PROOF_VENDOR=none" ;;
  *) usage_error "DEVMEM_PROOF_VENDOR='$vendor': expected nvidia, amd or none" ;;
esac
driver=${driver:-unknown}

native=0
[[ ${DEVMEM_PROOF_NATIVE_ARCH:-0} == 1 ]] && native=1
configure=()
if [[ $vendor == nvidia ]]; then
  preset=cuda
  nvcc=$(find_tool nvcc /usr/local/cuda/bin/nvcc PATH) || nvcc=""
  if [[ -n $nvcc ]]; then
    version=$("$nvcc" --version 2>/dev/null) || true
    if [[ $version =~ release\ ([0-9.]+),\ (V[0-9.]+) ]]; then
      toolkit="CUDA ${BASH_REMATCH[1]} (nvcc ${BASH_REMATCH[2]}, $nvcc)"
    else
      toolkit="nvcc at $nvcc (version not recognised)"
    fi
  else
    toolkit="not found (the cuda preset needs /usr/local/cuda/bin/nvcc)"
  fi
  [[ -n $cuda_driver_version ]] && driver="$driver (supports CUDA $cuda_driver_version)"
  arch_setting="preset's CMAKE_CUDA_ARCHITECTURES (80-real;90-real;90-virtual)"
  if ((native)); then
    configure+=(-DCMAKE_CUDA_ARCHITECTURES=native)
    arch_setting="CMAKE_CUDA_ARCHITECTURES=native"
  elif [[ $gpu_arch =~ ^sm_([0-9]+)$ ]] && ((BASH_REMATCH[1] < 80)); then
    warn "the cuda preset builds sm_80 and sm_90 code and compute_90 PTX, which a $gpu_arch GPU cannot run; set DEVMEM_PROOF_NATIVE_ARCH=1 to build for this GPU"
  fi
else
  preset=roc
  if [[ -r /opt/rocm/.info/version ]]; then
    toolkit="ROCm $(trim "$(cat /opt/rocm/.info/version)")"
  elif have hipconfig && version=$(hipconfig --version 2>/dev/null) && [[ -n $version ]]; then
    toolkit="HIP $(trim "$(first_line "$version")") (hipconfig)"
  elif have dpkg-query && version=$(dpkg-query -W -f='${Version}' rocminfo 2>/dev/null); then
    toolkit="ROCm (Debian rocminfo $version)"
  else
    toolkit="unknown (no /opt/rocm/.info/version, hipconfig or rocminfo package)"
  fi
  arch_setting="preset's CMAKE_HIP_ARCHITECTURES (gfx90a;gfx1030)"
  if ((native)) && [[ $gpu_arch == gfx* ]]; then
    configure+=("-DCMAKE_HIP_ARCHITECTURES=$gpu_arch")
    arch_setting="CMAKE_HIP_ARCHITECTURES=$gpu_arch"
  elif ((native)); then
    warn "DEVMEM_PROOF_NATIVE_ARCH=1, but this GPU's gfx name is unknown; keeping the preset's"
  elif [[ -n $gpu_arch && $gpu_arch != gfx90a && $gpu_arch != gfx1030 ]]; then
    warn "the roc preset builds for gfx90a;gfx1030, not $gpu_arch; set DEVMEM_PROOF_NATIVE_ARCH=1 to build for this GPU"
  fi
fi
backend=$preset
build_dir=build/proof-$preset
configure=(cmake --preset "$preset" -DCMAKE_BUILD_TYPE=Release -B "$build_dir" "${configure[@]}")
build=(cmake --build "$build_dir")

# ---------------------------------------------------------------------------------------------
# Where the results go: <out>/<date>-<gpu>.md, .json and folder; a second run the same day
# gets -2, -3, ... instead of overwriting the first.
day=$(date +%F)
stamp=$(date '+%Y-%m-%d %H:%M %Z')
host=$(uname -n)
host_details=$(uname -sr)
if [[ -r /etc/os-release ]]; then
  # shellcheck source=/dev/null
  host_details="$(. /etc/os-release && printf '%s' "${PRETTY_NAME:-$NAME}"), $host_details"
fi
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n1 || true)
[[ -n $cpu ]] && host_details="$host_details, $cpu x $(nproc 2>/dev/null || echo '?')"
commit=$(git rev-parse --short HEAD 2>/dev/null) || commit=unknown
if [[ $commit != unknown && -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  commit="$commit (dirty: uncommitted changes to tracked files)"
fi

name=$day-$(slugify "$gpu_name")
base=$out_dir/$name
n=2
while [[ -e $base.md || -e $base ]]; do
  base=$out_dir/$name-$n
  n=$((n + 1))
done
name=$(basename "$base")
logs=$base
mkdir -p "$logs"
bench_json=$base.json

say "$gpu_name ($vendor${gpu_arch:+, $gpu_arch}), driver $driver, toolkit $toolkit"
say "results: $base.md"
started=$SECONDS

# ---------------------------------------------------------------------------------------------
# Steps: each records its status; a failure is noted and the script goes on.
step_names=() step_status=() step_seconds=() step_logs=() failures=()
record() {  # record NAME STATUS SECONDS LOG
  step_names+=("$1")
  step_status+=("$2")
  step_seconds+=("$3")
  step_logs+=("$4")
  # "not run (no build)" is not counted again: the failed configure or build is.
  if [[ $2 != ok* && $2 != skipped* && $2 != "not run"* ]]; then failures+=("$1"); fi
}
# run_logged LOG COMMAND...: stdout and stderr into LOG; returns the command's status.
run_logged() {
  local log=$1 rc=0
  shift
  "$@" >"$log" 2>&1 || rc=$?
  return "$rc"
}
join() {  # join SEPARATOR WORD...
  local separator=$1 out=""
  shift
  while (($# > 0)); do
    out+=${out:+$separator}$1
    shift
  done
  printf '%s' "$out"
}
show_tail() { tail -n "${2:-25}" "$1" | sed 's/^/    /' >&2; }

build_ok=1
t=$SECONDS
say "[1/6] configure: ${configure[*]} (log: $name/configure.log)"
rc=0
run_logged "$logs/configure.log" "${configure[@]}" || rc=$?
if ((rc == 0)); then
  record configure ok $((SECONDS - t)) configure.log
  t=$SECONDS
  say "[2/6] build: ${build[*]} (log: $name/build.log)"
  rc=0
  run_logged "$logs/build.log" "${build[@]}" || rc=$?
  if ((rc == 0)); then
    record build ok $((SECONDS - t)) build.log
  else
    record build "FAILED (exit $rc)" $((SECONDS - t)) build.log
    build_ok=0
    warn "the build failed (exit $rc); the last lines of $logs/build.log:"
    show_tail "$logs/build.log"
  fi
else
  record configure "FAILED (exit $rc)" $((SECONDS - t)) configure.log
  build_ok=0
  warn "configure failed (exit $rc); the last lines of $logs/configure.log:"
  show_tail "$logs/configure.log"
fi

# 3. Conformance suite
ctest_cmd=(ctest --test-dir "$build_dir" -L "$preset" --output-junit "$logs/conformance.xml"
  --output-on-failure --no-tests=error)
c_total="" c_passed="" c_failed="" c_notrun="" c_failed_tests="" c_note=""
if ((build_ok)); then
  t=$SECONDS
  say "[3/6] conformance: ${ctest_cmd[*]} (log: $name/conformance.log)"
  rc=0
  run_logged "$logs/conformance.log" "${ctest_cmd[@]}" || rc=$?
  log=$logs/conformance.log
  # "95% tests passed, 3 tests failed out of 60": skipped tests (the GPU suite without a device,
  # "***Skipped") count as passed there; a missing executable ("***Not Run") counts as failed.
  if [[ $(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n1) =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    c_failed=${BASH_REMATCH[1]}
    c_total=${BASH_REMATCH[2]}
    skipped=$(grep -c '\*\*\*Skipped' "$log" || true)
    notrun=$(grep -c '\*\*\*Not Run' "$log" || true)
    disabled=$(grep -c '\*\*\*Not Run (Disabled)' "$log" || true)
    c_failed=$((c_failed - (notrun - disabled)))
    ((c_failed < 0)) && c_failed=0
    c_notrun=$((skipped + notrun))
    c_passed=$((c_total - c_failed - c_notrun))
    ((c_passed < 0)) && c_passed=0
  fi
  c_failed_tests=$(awk '/^The following tests (FAILED|did not run):/ { on = 1; next }
    on && /^[ \t]/ { sub(/^[ \t]+/, ""); print; next } { on = 0 }' "$log" | sort -n -u)
  status=ok
  if [[ -z $c_total ]]; then
    status="FAILED (exit $rc, no summary line)"
  elif ((rc != 0 || c_failed > 0)); then
    status="FAILED (exit $rc)"
  elif ((c_notrun > 0)); then
    status="FAILED (tests not run)"
    c_note="A GPU was detected, yet $c_notrun tests did not run: the $preset backend did not see a device (the skip reason is in conformance.log)."
  elif ((c_total == 0 || c_passed == 0)); then
    status="FAILED (nothing passed)"
  fi
  record conformance "$status" $((SECONDS - t)) conformance.log
  if [[ $status != ok ]]; then
    warn "conformance: $status: ${c_passed:-?} passed, ${c_failed:-?} failed, ${c_notrun:-?} not run of ${c_total:-?}"
  fi
else
  record conformance "not run (no build)" 0 ""
fi

# 4. compute-sanitizer (NVIDIA)
san_tools=(memcheck racecheck synccheck initcheck)
declare -A san_status=() san_summary=() san_suite=() san_filter=()
api_errors=${DEVMEM_PROOF_SANITIZER_API_ERRORS:-no}
if [[ $vendor == nvidia ]] && ((skip_sanitizers)); then
  say "[4/6] compute-sanitizer: skipped (--skip-sanitizers)"
  record compute-sanitizer "skipped (--skip-sanitizers)" 0 ""
elif [[ $vendor == nvidia ]] && ((!build_ok)); then
  record compute-sanitizer "not run (no build)" 0 ""
elif [[ $vendor == nvidia ]]; then
  exe=$build_dir/tests/conformance/conformance_cuda
  sanitizer=$(find_tool compute-sanitizer /usr/local/cuda/bin/compute-sanitizer PATH \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer) || sanitizer=""
  if [[ -z $sanitizer ]]; then
    warn "compute-sanitizer not found (/usr/local/cuda/bin or PATH); use --skip-sanitizers to prove without it"
    record compute-sanitizer "FAILED (compute-sanitizer not found)" 0 ""
  elif [[ ! -x $exe ]]; then
    record compute-sanitizer "FAILED ($exe was not built)" 0 ""
  else
    for tool in "${san_tools[@]}"; do
      args=(--tool "$tool" --error-exitcode 1 --report-api-errors "$api_errors")
      filter='[kernels]~[host-only]'
      if [[ $tool == memcheck ]]; then
        args+=(--leak-check full)
        filter='~[host-only]'
      fi
      san_filter[$tool]=$filter
      t=$SECONDS
      say "[4/6] compute-sanitizer --tool $tool ($filter)"
      rc=0
      run_logged "$logs/sanitizer-$tool.log" env DEVMEM_BACKEND=cuda "$sanitizer" "${args[@]}" \
        "$exe" "$filter" || rc=$?
      log=$logs/sanitizer-$tool.log
      san_summary[$tool]=$(awk '/^=+ *[A-Z]+ SUMMARY:/ { sub(/^=+ */, ""); s = s (s == "" ? "" : "; ") $0 }
        END { print s }' "$log")
      san_suite[$tool]=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -n1 || true)
      [[ -n ${san_summary[$tool]} ]] || san_summary[$tool]="no summary line (see the log)"
      if ((rc == 0)); then
        san_status[$tool]="ok (exit 0)"
      elif ((rc == 77)); then
        san_status[$tool]="FAILED (exit 77: the suite saw no device)"
      else
        san_status[$tool]="FAILED (exit $rc)"
      fi
      record "$tool" "${san_status[$tool]}" $((SECONDS - t)) "sanitizer-$tool.log"
      [[ ${san_status[$tool]} == ok* ]] || warn "$tool: ${san_status[$tool]}: ${san_summary[$tool]}"
    done
  fi
fi

# 5. devmem info and devmem bench
app=$build_dir/apps/devmem
bench_args=(bench --no-progress "--json=$bench_json")
((quick)) && bench_args+=(--quick)
if ((build_ok)); then
  t=$SECONDS
  say "[5/6] DEVMEM_BACKEND=$backend $app info"
  rc=0
  run_logged "$logs/info.txt" env "DEVMEM_BACKEND=$backend" "$app" info || rc=$?
  if ((rc == 0)); then status=ok; else status="FAILED (exit $rc)"; fi
  record "devmem info" "$status" $((SECONDS - t)) info.txt
  t=$SECONDS
  say "[5/6] DEVMEM_BACKEND=$backend $app ${bench_args[*]}"
  rc=0
  run_logged "$logs/bench.txt" env "DEVMEM_BACKEND=$backend" "$app" "${bench_args[@]}" || rc=$?
  if ((rc == 0)) && [[ -s $bench_json ]]; then status=ok; else status="FAILED (exit $rc)"; fi
  record "devmem bench" "$status" $((SECONDS - t)) bench.txt
  [[ $status == ok ]] || { warn "devmem bench: $status; the last lines of $logs/bench.txt:"; show_tail "$logs/bench.txt" 10; }
else
  record "devmem info" "not run (no build)" 0 ""
  record "devmem bench" "not run (no build)" 0 ""
fi

# ---------------------------------------------------------------------------------------------
# 6. The report
# bench_tables JSON: markdown tables of every bench cell's ratio against the raw call.
bench_tables() {
  local json=$1
  local tables code
  # python3 if it can (the tables below), else jq (a plain list), else the JSON's path; the
  # output of each is kept only when it succeeds.
  IFS= read -r -d '' code <<'PY' || true
import json
import sys

with open(sys.argv[1]) as f:
    r = json.load(f)


def size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def num(v, fmt="{:.2f}", suffix=""):
    return "n/a" if v is None else fmt.format(v) + suffix


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


print(f"Raw calls: copies `{r['raw_copy_call']}`, allocation `{r['raw_alloc_call']}`. "
      f"Device {r['device']} ({r['architecture']}), backend {r['backend']}, devmem "
      f"{r['devmem_version']}, {r['date']}, medians of {r['repeats']} repeats"
      f"{', --quick' if r['quick'] else ', full sweep'}.")
print()
print("### Transfers: devmem GB/s / raw GB/s (above 1 devmem is faster)")
print()
cols = []
for c in r["copies"]:
    key = (c["direction"], c["memory"])
    if key not in cols:
        cols.append(key)
sizes = sorted({c["bytes"] for c in r["copies"]})
cell = {(c["direction"], c["memory"], c["bytes"]): c["ratio"] for c in r["copies"]}
print("| size | " + " | ".join(f"{d} {m}" for d, m in cols) + " |")
print("|---:|" + "---:|" * len(cols))
for s in sizes:
    row = [num(cell[(d, m, s)], suffix="x") if (d, m, s) in cell else "" for d, m in cols]
    print(f"| {size(s)} | " + " | ".join(row) + " |")
if r.get("allocations"):
    print()
    print("### Allocation: allocate + free, ns (ratio = raw ns / devmem ns, above 1 devmem is faster)")
    print()
    print("| size | raw ns | direct ns | pool ns | raw / direct | raw / pool |")
    print("|---:|---:|---:|---:|---:|---:|")
    for a in r["allocations"]:
        print(f"| {size(a['bytes'])} | {num(a['raw_ns'], '{:.0f}')} | {num(a['direct_ns'], '{:.0f}')} | "
              f"{num(a['pool_ns'], '{:.0f}')} | {num(ratio(a['raw_ns'], a['direct_ns']), suffix='x')} | "
              f"{num(ratio(a['raw_ns'], a['pool_ns']), suffix='x')} |")
fu = r.get("first_use")
if fu:
    print()
    print(f"Allocate + write every byte + free, {size(fu['bytes'])}: direct {num(fu['direct_ms'])} ms, "
          f"pool {num(fu['pool_ms'])} ms ({num(fu['ratio'], suffix='x')}; no raw counterpart).")
e = r.get("enqueue")
if e:
    print()
    if e.get("raw_ns") is None:
        raw = "raw n/a"
    else:
        raw = (f"raw {num(e['raw_ns'], '{:.0f}')} ns; raw / API "
               f"{num(ratio(e['raw_ns'], e['api_ns']), suffix='x')}, raw / Backend::copy "
               f"{num(ratio(e['raw_ns'], e['backend_ns']), suffix='x')}")
    print(f"Enqueue of one asynchronous {e['bytes']} B pinned H2D copy (host time per call): devmem API "
          f"{num(e['api_ns'], '{:.0f}')} ns, Backend::copy {num(e['backend_ns'], '{:.0f}')} ns, {raw}.")
if r.get("goals"):
    print()
    print("### Goals")
    print()
    print("| goal | measured | target | status |")
    print("|---|---:|---:|---|")
    for g in r["goals"]:
        unit = "" if g["unit"] == "x" else " " + g["unit"]
        fmt = "{:.2f}x" if g["unit"] == "x" else "{:.0f}"
        print(f"| {g['name']} | {num(g['measured'], fmt)}{unit} | {g['comparison']} "
              f"{num(g['target'], fmt)}{unit} | {'met' if g['met'] else '**MISSED**'} |")
PY
  if have python3 && tables=$(python3 -c "$code" "$json" 2>&1); then
    printf '%s\n' "$tables"
    return 0
  fi
  if have jq && tables=$(jq -r '
      def r: if . == null then "n/a" else (. * 100 | round / 100 | tostring) + "x" end;
      def n: if . == null then "n/a" else (. * 1000 | round / 1000 | tostring) end;
      "Raw calls: copies `\(.raw_copy_call)`, allocation `\(.raw_alloc_call)` (tables by jq; python3 was not available).",
      "",
      "### Transfers: devmem GB/s / raw GB/s (above 1 devmem is faster)",
      "",
      "| direction | memory | bytes | devmem GB/s | raw GB/s | ratio |",
      "|---|---|---:|---:|---:|---:|",
      (.copies[] | "| \(.direction) | \(.memory) | \(.bytes) | \(.devmem_gbps | n) | \(.raw_gbps | n) | \(.ratio | r) |"),
      "",
      "### Allocation: allocate + free, ns (ratio = raw / devmem)",
      "",
      "| bytes | raw ns | direct ns | pool ns | raw / pool |",
      "|---:|---:|---:|---:|---:|",
      ((.allocations // [])[] | "| \(.bytes) | \(.raw_ns | n) | \(.direct_ns | n) | \(.pool_ns | n) | \(.raw_over_pool | r) |")
    ' "$json" 2>/dev/null); then
    printf '%s\n' "$tables"
    return 0
  fi
  printf 'Neither python3 nor jq could read the bench JSON: the numbers are in `%s`.\n' "$json"
}

fence() { printf '```text\n'; cat "$1" 2>/dev/null || printf '(no output)\n'; printf '```\n'; }

write_report() {
  local i result
  if ((${#failures[@]} == 0)); then
    result="**PASSED**"
  else
    result="**FAILED**: $(join ', ' "${failures[@]}")"
  fi
  printf '# devmem GPU proof, %s — %s\n\n' "$gpu_name" "$day"
  printf 'Result: %s. Produced by `scripts/gpu-proof.sh%s%s` in %d s; logs in `%s/`.\n\n' \
    "$result" "$( ((skip_sanitizers)) && printf ' --skip-sanitizers')" \
    "$( ((quick)) && printf ' --quick')" $((SECONDS - started)) "$name"
  printf '| | |\n|---|---|\n'
  printf '| date | %s |\n' "$stamp"
  printf '| host | %s (%s) |\n' "$host" "$host_details"
  printf '| GPU | %s%s; %s GPU(s) seen |\n' "$gpu_name" "${gpu_arch:+ ($gpu_arch)}" "$gpu_count"
  printf '| driver | %s |\n' "$driver"
  printf '| toolkit | %s |\n' "$toolkit"
  printf '| devmem | commit %s |\n' "$commit"
  printf '| build | `%s` then `%s`; device code: %s |\n' "${configure[*]}" "${build[*]}" "$arch_setting"
  if [[ -n ${DEVMEM_PROOF_VENDOR:-} ]]; then
    printf '| note | vendor set by DEVMEM_PROOF_VENDOR=%s; %s |\n' "$DEVMEM_PROOF_VENDOR" "$forced_note"
  fi
  printf '\n## Steps\n\n| step | status | seconds | log |\n|---|---|---:|---|\n'
  for i in "${!step_names[@]}"; do
    printf '| %s | %s | %s | %s |\n' "${step_names[$i]}" "${step_status[$i]}" "${step_seconds[$i]}" \
      "${step_logs[$i]:+\`$name/${step_logs[$i]}\`}"
  done

  printf '\n## Conformance\n\n`%s`\n\n' "${ctest_cmd[*]}"
  if [[ -n $c_total ]]; then
    printf '**%s passed, %s failed, %s not run** of %s tests. JUnit: `%s/conformance.xml`.\n' \
      "$c_passed" "$c_failed" "$c_notrun" "$c_total" "$name"
  elif ((build_ok)); then
    printf 'No ctest summary line in `%s/conformance.log`.\n' "$name"
  else
    printf 'Not run: the build failed.\n'
  fi
  [[ -n $c_note ]] && printf '\n%s\n' "$c_note"
  if [[ -n $c_failed_tests ]]; then
    printf '\nFailed or not run:\n\n'
    while IFS= read -r line; do printf -- '- %s\n' "$line"; done <<<"$c_failed_tests"
  fi

  printf '\n## compute-sanitizer\n\n'
  if [[ $vendor != nvidia ]]; then
    printf 'NVIDIA only; not run on an AMD GPU.\n'
  elif ((${#san_status[@]} == 0)); then
    printf 'compute-sanitizer: %s.\n' "$(for i in "${!step_names[@]}"; do
      [[ ${step_names[$i]} == compute-sanitizer ]] && printf '%s' "${step_status[$i]}"; done)"
  else
    printf 'Over `%s` with `DEVMEM_BACKEND=cuda`, `--error-exitcode 1` and `--report-api-errors %s`' \
      "$exe" "$api_errors"
    if [[ $api_errors == no ]]; then
      printf ' (the suite makes failing CUDA calls on purpose: out of memory, bad registrations)'
    fi
    printf '.\n\n'
    printf '| tool | tests | exit status | summary | Catch2 |\n|---|---|---|---|---|\n'
    for tool in "${san_tools[@]}"; do
      [[ -n ${san_status[$tool]:-} ]] || continue
      printf '| %s%s | `%s` | %s | %s | %s |\n' "$tool" \
        "$([[ $tool == memcheck ]] && printf ' (--leak-check full)')" "${san_filter[$tool]}" \
        "${san_status[$tool]}" "${san_summary[$tool]}" "${san_suite[$tool]:-}"
    done
  fi

  printf '\n## devmem info\n\n'
  if [[ -f $logs/info.txt ]]; then fence "$logs/info.txt"; else printf 'Not run: the build failed.\n'; fi

  printf '\n## devmem bench\n\n'
  if [[ -s $bench_json ]]; then
    printf '`DEVMEM_BACKEND=%s %s %s`: JSON `%s`, table `%s/bench.txt`.\n\n' "$backend" "$app" \
      "${bench_args[*]}" "$(basename "$bench_json")" "$name"
    bench_tables "$bench_json"
  elif [[ -f $logs/bench.txt ]]; then
    printf 'Failed; see `%s/bench.txt`.\n' "$name"
  else
    printf 'Not run: the build failed.\n'
  fi
}

say "[6/6] report"
write_report >"$base.md"

printf '\n'
if ((${#failures[@]} == 0)); then
  say "PASSED on $gpu_name in $((SECONDS - started)) s"
else
  say "FAILED on $gpu_name: $(join ', ' "${failures[@]}")"
fi
[[ -n $c_total ]] &&
  printf '  conformance: %s passed, %s failed, %s not run of %s\n' "$c_passed" "$c_failed" "$c_notrun" "$c_total"
for tool in "${san_tools[@]}"; do
  [[ -n ${san_status[$tool]:-} ]] && printf '  %-10s %s: %s\n' "$tool" "${san_status[$tool]}" "${san_summary[$tool]}"
done
[[ -s $bench_json ]] && printf '  bench JSON: %s\n' "$bench_json"
printf '  report: %s\n' "$base.md"
((${#failures[@]} == 0))
