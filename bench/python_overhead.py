#!/usr/bin/python3
"""Per-call cost of devmem's Python API next to Numba's CUDA simulator and plain NumPy.

Measures, on whatever backend devmem selects (the host backend on a machine without a GPU):

  to_device          to_device of 1 KiB (float64[128])               NumPy: h.copy()
  copy_to_host(out)  copy_to_host of 1 KiB into a preallocated array  NumPy: np.copyto(out, d)
  copy_to_host()     copy_to_host of 1 KiB into a new array           NumPy: d.copy()
  slice 2-D          d2[1:-1, ::2] of a (64, 64) float64 array (view) NumPy: d2[1:-1, ::2]
  device_array       device_array of 1 KiB (devmem: from the pool)    NumPy: np.empty(128)

(h is a host float64[128]; d and d2 are device arrays, or host copies for the NumPy baselines)

for devmem (with the 'pool' memory manager), Numba's CUDA simulator and NumPy, and prints a
markdown table with the goals of the benchmark: each devmem call within 3x of the matching NumPy
call and faster than the simulator. Each number is the median over timeit repeats of the time per
call, in microseconds, after a warm-up. Every measured call is also run once and its result checked
(values round-trip, slices are views, copies are copies) before it is timed.

On a machine with an NVIDIA GPU, `--only devmem --only numba-cuda --only cupy` measures Numba's own
CUDA target and CuPy (asarray, get, empty, d[5].item()) beside devmem: what a user of those pays
per call today. Neither is measured by default.

The simulator needs NUMBA_ENABLE_CUDASIM=1 before Numba is imported, so it runs in a child process
of this script (the devmem and NumPy measurements stay in this process, which never imports Numba).

Run with Debian's interpreter, devmem importable (PYTHONPATH naming the directory that holds the
built `devmem` package):

  PYTHONPATH=build/python/python /usr/bin/python3 bench/python_overhead.py [--quick] [--json FILE]

Exit status: 0 when every result was correct (whether or not the goals hold; a timing goal is a
measurement, not a test), 1 when a result was wrong, 2 when an implementation could not be run.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import timeit

import numpy as np

IMPLEMENTATIONS = ("devmem", "simulator", "numpy")
# Measured only when asked for (--only numba-cuda): Numba's own CUDA target on a real GPU, the
# per-call cost a numba-cuda user has today, in a child process like the simulator's.
GPU_IMPLEMENTATIONS = ("numba-cuda", "cupy")

# Keys, row titles and the NumPy call each device call is compared with.
OPERATIONS = (
    ("to_device", "to_device, 1 KiB", "h.copy()"),
    ("copy_to_host_out", "copy_to_host(out), 1 KiB, preallocated", "np.copyto(out, d)"),
    ("copy_to_host_new", "copy_to_host(), 1 KiB, new array", "d.copy()"),
    ("slice_2d", "d2[1:-1, ::2] of (64, 64), a view", "d2[1:-1, ::2]"),
    ("device_array", "device_array(128), 1 KiB", "np.empty(128)"),
    ("scalar_read", "d[5], a scalar read", "d[5]"),
    ("to_device_1mib", "to_device, 1 MiB, default manager", "np.copy(h1)"),
)

# Measured with devmem's default manager (direct) rather than the pool.
DEFAULT_MANAGER_KEYS = ("to_device_1mib",)
SCALAR_READ_GOAL_US = 1.0
ONE_MIB_GOAL = 2.0  # to_device of 1 MiB / np.copy

# The statements timed for a module with Numba's device-array API (devmem, numba.cuda).
DEVICE_STATEMENTS = {
    "to_device": "api.to_device(h)",
    "copy_to_host_out": "d.copy_to_host(out)",
    "copy_to_host_new": "d.copy_to_host()",
    "slice_2d": "d2[1:-1, ::2]",
    "device_array": "api.device_array(128)",
    "scalar_read": "d[5]",
    "to_device_1mib": "api.to_device(h1)",
}

NUMPY_STATEMENTS = {key: baseline for key, _, baseline in OPERATIONS}

# CuPy's spelling of the same calls (measured only with --only cupy, on a GPU).
CUPY_STATEMENTS = {
    "to_device": "api.asarray(h)",
    "copy_to_host_out": "d.get(out=out)",
    "copy_to_host_new": "d.get()",
    "slice_2d": "d2[1:-1, ::2]",
    "device_array": "api.empty(128)",
    "scalar_read": "d[5].item()",
    "to_device_1mib": "api.asarray(h1)",
}

RATIO_GOAL = 3.0  # devmem / NumPy per call, and devmem / simulator per call


class WrongResult(Exception):
    """A measured call returned something other than what it should."""


def check(condition, what):
    if not condition:
        raise WrongResult(what)


class DeviceKit:
    """Namespace and helpers for a module with Numba's API (devmem or numba.cuda)."""

    def __init__(self, api):
        self.api = api

    def namespace(self):
        h = np.arange(128, dtype=np.float64) * 0.5 + 1.0
        a = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
        return {
            "api": self.api,
            "np": np,
            "h": h,
            "out": np.empty_like(h),
            "d": self.api.to_device(h),
            "a": a,
            "d2": self.api.to_device(a),
            "h1": np.arange(131072, dtype=np.float64),
        }

    @staticmethod
    def to_host(x):
        return x.copy_to_host()

    @staticmethod
    def fill(x, values):
        x.copy_to_device(values)

    @staticmethod
    def returns_out():
        return True


class CupyKit:
    """CuPy's arrays under the namespace names of DeviceKit."""

    def __init__(self, api):
        self.api = api

    def namespace(self):
        ns = NumpyKit().namespace()
        ns.update(api=self.api, d=self.api.asarray(ns["h"]), d2=self.api.asarray(ns["a"]))
        return ns

    @staticmethod
    def to_host(x):
        return x.get()

    @staticmethod
    def fill(x, values):
        x.set(values)

    @staticmethod
    def returns_out():
        return False


class NumpyKit:
    """The NumPy baselines: the same namespace names, but everything lives in host arrays."""

    def namespace(self):
        h = np.arange(128, dtype=np.float64) * 0.5 + 1.0
        a = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
        return {"np": np, "h": h, "out": np.empty_like(h), "d": h.copy(), "a": a, "d2": a.copy(),
                "h1": np.arange(131072, dtype=np.float64)}

    @staticmethod
    def to_host(x):
        return x

    @staticmethod
    def fill(x, values):
        np.copyto(x, values)

    @staticmethod
    def returns_out():
        return False  # np.copyto returns None


def verify(key, statement, kit, ns):
    """Runs `statement` once and checks its result; raises WrongResult with what differs."""
    h, out, a = ns["h"], ns["out"], ns["a"]
    if key == "to_device":
        result = eval(statement, ns)
        check(np.array_equal(kit.to_host(result), h), f"{statement}: values differ from the source")
        original = h[0]
        h[0] = -1.0  # the result must be a copy, not a view of the source
        try:
            check(kit.to_host(result)[0] == original, f"{statement}: result aliases the source")
        finally:
            h[0] = original
    elif key == "copy_to_host_out":
        out.fill(np.nan)
        result = eval(statement, ns)
        check(np.array_equal(out, h), f"{statement}: the preallocated array lacks the values")
        if kit.returns_out():
            check(result is out, f"{statement}: did not return the array it was given")
    elif key == "copy_to_host_new":
        result = eval(statement, ns)
        check(isinstance(result, np.ndarray), f"{statement}: returned {type(result).__name__}")
        fresh = result is not out and not np.shares_memory(result, h)
        check(fresh, f"{statement}: not a new array")
        check(np.array_equal(result, h), f"{statement}: values differ from the source")
    elif key == "slice_2d":
        result = eval(statement, ns)
        check(tuple(result.shape) == (62, 32), f"{statement}: shape {result.shape}, want (62, 32)")
        check(tuple(result.strides) == (512, 16), f"{statement}: strides {result.strides}")
        check(np.array_equal(kit.to_host(result), a[1:-1, ::2]), f"{statement}: values differ")
        parent = ns["d2"]
        parent[1, 0] = -7.0  # a view sees a write through its parent
        try:
            check(kit.to_host(result)[0, 0] == -7.0, f"{statement}: not a view of its parent")
        finally:
            parent[1, 0] = a[1, 0]
        check(np.array_equal(kit.to_host(parent), a), f"{statement}: parent not restored")
    elif key == "device_array":
        result = eval(statement, ns)
        check(tuple(result.shape) == (128,), f"{statement}: shape {result.shape}")
        check(np.dtype(result.dtype) == np.float64, f"{statement}: dtype {result.dtype}")
        check(result.nbytes == 1024, f"{statement}: nbytes {result.nbytes}")
        kit.fill(result, h)
        check(np.array_equal(kit.to_host(result), h), f"{statement}: values do not round-trip")
    elif key == "scalar_read":
        result = eval(statement, ns)
        check(result == h[5] and np.ndim(result) == 0, f"{statement}: {result!r}, want {h[5]!r}")
    elif key == "to_device_1mib":
        result = eval(statement, ns)
        check(np.array_equal(kit.to_host(result), ns["h1"]), f"{statement}: values differ")
    else:
        raise ValueError(f"unknown operation {key!r}")


def verify_devmem_view(devmem_ns):
    """devmem only: the slice's element 0 is row 1 of its parent (no copy was made)."""
    d2 = devmem_ns["d2"]
    view = d2[1:-1, ::2]
    want = d2.device_pointer + 64 * 8
    check(
        view.device_pointer == want,
        f"d2[1:-1, ::2].device_pointer {view.device_pointer:#x}, want parent + 512 = {want:#x}",
    )


def time_statement(statement, ns, repeat, min_time):
    """Median time per call in microseconds over `repeat` timeit repeats, plus every repeat."""
    timer = timeit.Timer(statement, globals=ns)
    timer.timeit(number=200)  # warm-up: caches, the pool's free lists, lazily built objects
    number = 1
    while True:  # like Timer.autorange, with our own target time per repeat
        elapsed = timer.timeit(number=number)
        if elapsed >= min_time:
            break
        number = max(number * 2, int(number * min_time / max(elapsed, 1e-9) * 1.1))
    per_call = [t / number * 1e6 for t in timer.repeat(repeat=repeat, number=number)]
    return {"median_us": statistics.median(per_call), "repeats_us": per_call, "number": number}


def measure(kit, statements, repeat, min_time, keys=None):
    ns = kit.namespace()
    results = {}
    for key, _, _ in OPERATIONS:
        if keys is not None and key not in keys:
            continue
        verify(key, statements[key], kit, ns)
        results[key] = time_statement(statements[key], ns, repeat, min_time)
    return results, ns


def run_numba_child(args):
    """Measures Numba's CUDA API in this (child) process: its simulator when NUMBA_ENABLE_CUDASIM
    is set (--child-simulator), else its real CUDA target (--child-numba-cuda)."""
    simulator = args.child_simulator
    what = "its simulator" if simulator else "its CUDA target"
    try:
        from numba import config, cuda
        import numba
    except Exception as error:  # pylint: disable=broad-except
        # Not only ImportError: numba-cuda 0.x under NumPy 2.4 fails inside its own import with
        # AttributeError (np.row_stack is gone), which is "cannot be run" too.
        print(f"python_overhead: cannot import Numba for {what} ({error})", file=sys.stderr)
        return 2

    if simulator and (not config.ENABLE_CUDASIM
                      or "simulator" not in type(cuda.device_array(1)).__module__):
        print("python_overhead: Numba's CUDA simulator is not active", file=sys.stderr)
        return 2
    try:
        if not simulator and (config.ENABLE_CUDASIM or not cuda.is_available()):
            print("python_overhead: Numba's CUDA target has no GPU here (or the simulator is on)",
                  file=sys.stderr)
            return 2
        results, _ = measure(DeviceKit(cuda), DEVICE_STATEMENTS, args.repeat, args.min_time)
    except WrongResult as error:
        print(f"python_overhead: wrong result in Numba's {what}: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # pylint: disable=broad-except
        # numba-cuda imports most of itself lazily, at the first device array: the same NumPy
        # incompatibility can surface here.
        print(f"python_overhead: Numba's {what} cannot be run here: "
              f"{type(error).__name__}: {error}", file=sys.stderr)
        return 2
    # One line, last on stdout: whatever Numba may print before it does not break the parent.
    print(json.dumps({"numba_version": numba.__version__, "results": results}))
    return 0


class ChildFailed(Exception):
    """A Numba child process failed; its exit status is the argument."""


def numba_results(args, simulator=True):
    env = dict(os.environ)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child-simulator" if simulator else "--child-numba-cuda",
        "--repeat",
        str(args.repeat),
        "--min-time",
        str(args.min_time),
    ]
    child = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        raise ChildFailed(child.returncode)
    lines = child.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError) as error:
        sys.stderr.write(f"python_overhead: no result from Numba's process ({error}):\n"
                         f"{child.stdout}{child.stderr}")
        raise ChildFailed(2) from error


def machine_facts(devmem_module):
    facts = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": "unknown",
        "load_average_start": list(os.getloadavg()),
    }
    try:
        facts["numba"] = importlib.metadata.version("numba")  # without importing it here
    except importlib.metadata.PackageNotFoundError:
        facts["numba"] = "not installed"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    facts["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if devmem_module is not None:
        facts["devmem_backend"] = devmem_module.backend_name()
        facts["devmem_memory_manager"] = devmem_module.memory_manager_name()
        facts["devmem_version"] = getattr(devmem_module, "__version__", "unknown")
        facts["devmem_module"] = os.path.dirname(devmem_module.__file__)
    return facts


def fmt_us(value):
    return "n/a" if value is None else f"{value:.3f}"


def fmt_ratio(value):
    return "n/a" if value is None else f"{value:.2f}x"


def issue_goal(key, dm, dm_np, dm_sim):
    """The overhead goal for the row, and whether it holds (None: not measured)."""
    if key == "to_device_1mib":
        return f"<= {ONE_MIB_GOAL:g}x np.copy", None if dm_np is None else dm_np <= ONE_MIB_GOAL
    if key == "scalar_read":
        met = None if dm is None or dm_sim is None else (
            dm < SCALAR_READ_GOAL_US and dm_sim <= RATIO_GOAL)
        return f"< {SCALAR_READ_GOAL_US:g} us and <= {RATIO_GOAL:g}x simulator", met
    return f"<= {RATIO_GOAL:g}x simulator", None if dm_sim is None else dm_sim <= RATIO_GOAL


def rows(results):
    out = []
    for key, title, baseline in OPERATIONS:
        dm = results.get("devmem", {}).get(key, {}).get("median_us")
        sim = results.get("simulator", {}).get(key, {}).get("median_us")
        npy = results.get("numpy", {}).get(key, {}).get("median_us")
        gpu = results.get("numba-cuda", {}).get(key, {}).get("median_us")
        cupy_us = results.get("cupy", {}).get(key, {}).get("median_us")
        dm_np = dm / npy if dm is not None and npy is not None else None
        sim_dm = sim / dm if dm is not None and sim is not None else None
        dm_sim = dm / sim if dm is not None and sim is not None else None
        goal, met = issue_goal(key, dm, dm_np, dm_sim)
        out.append(
            {
                "key": key,
                "title": title,
                "baseline": baseline,
                "devmem_us": dm,
                "simulator_us": sim,
                "numpy_us": npy,
                "devmem_over_numpy": dm_np,
                "simulator_over_devmem": sim_dm,
                "within_3x_of_numpy": None if dm_np is None else dm_np <= RATIO_GOAL,
                "faster_than_simulator": None if sim_dm is None else sim_dm > 1.0,
                "devmem_over_simulator": dm_sim,
                "numba_cuda_us": gpu,
                "devmem_over_numba_cuda": dm / gpu if dm is not None and gpu is not None else None,
                "cupy_us": cupy_us,
                "devmem_over_cupy": dm / cupy_us if dm is not None and cupy_us is not None else None,
                "goal": goal,
                "goal_met": met,
            }
        )
    return out


def yes_no(value):
    return "n/a" if value is None else ("yes" if value else "**no**")


def print_report(facts, table, pool_stats):
    print("# devmem Python per-call overhead\n")
    print(
        f"python {facts['python']} ({facts['python_executable']}), numpy {facts['numpy']}, "
        f"numba {facts['numba']}, devmem backend {facts.get('devmem_backend', 'not run')} "
        f"(memory manager {facts.get('devmem_memory_manager', 'n/a')}), "
        f"{facts['cpu_count']} CPUs ({facts['cpu_model']}), {facts['platform']}"
    )
    start = ", ".join(f"{x:.2f}" for x in facts["load_average_start"])
    end = ", ".join(f"{x:.2f}" for x in facts["load_average_end"])
    print(f"load average (1, 5, 15 min): {start} at start, {end} at end")
    if "devmem_module" in facts:
        print(f"devmem {facts['devmem_version']} from {facts['devmem_module']}")
    print()
    gpu = any(row["numba_cuda_us"] is not None for row in table)
    cupy = any(row["cupy_us"] is not None for row in table)
    print(
        "| operation | devmem us | Numba simulator us | NumPy us (baseline) | devmem/NumPy "
        "| devmem/simulator | "
        + ("numba-cuda us | devmem/numba-cuda | " if gpu else "")
        + ("CuPy us | devmem/CuPy | " if cupy else "") + "goal | met |"
    )
    print("|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if gpu else "")
          + ("---:|---:|" if cupy else "") + "---|:-:|")
    for row in table:
        numba_cuda = (f"| {fmt_us(row['numba_cuda_us'])} "
                      f"| {fmt_ratio(row['devmem_over_numba_cuda'])} " if gpu else "")
        if cupy:
            numba_cuda += f"| {fmt_us(row['cupy_us'])} | {fmt_ratio(row['devmem_over_cupy'])} "
        print(
            f"| {row['title']} | {fmt_us(row['devmem_us'])} | {fmt_us(row['simulator_us'])} "
            f"| {fmt_us(row['numpy_us'])} (`{row['baseline']}`) "
            f"| {fmt_ratio(row['devmem_over_numpy'])} | {fmt_ratio(row['devmem_over_simulator'])} "
            f"{numba_cuda}| {row['goal']} | {yes_no(row['goal_met'])} |"
        )
    print("\nus = microseconds per call, median of the timeit repeats after a warm-up.")
    if pool_stats is not None:
        print(
            f"devmem pool during device_array: {pool_stats['hits_during']} hits, "
            f"{pool_stats['misses_during']} misses; statistics after the run: "
            f"{pool_stats['after']}"
        )
    failed = [f"{r['title']} ({r['goal']})" for r in table if r["goal_met"] is False]
    if not failed and all(r["goal_met"] is True for r in table):
        print("goals: all hold")
    else:
        print("goals not met: " + ("; ".join(failed) if failed else "not all measured"))


def run_devmem(args, devmem):
    """The devmem measurements: the rows of DEFAULT_MANAGER_KEYS with the manager devmem starts
    with (direct), the others with the pool; returns the results and the pool's statistics."""
    kit = DeviceKit(devmem)
    default_manager = devmem.memory_manager_name()
    unpooled, _ = measure(kit, DEVICE_STATEMENTS, args.repeat, args.min_time,
                          list(DEFAULT_MANAGER_KEYS))
    for row in unpooled.values():
        row["memory_manager"] = default_manager
    devmem.set_memory_manager("pool")
    if devmem.memory_manager_name() != "pool":
        raise WrongResult(f"memory_manager_name() is {devmem.memory_manager_name()!r} after "
                          "set_memory_manager('pool')")
    keys = [key for key, _, _ in OPERATIONS
            if key != "device_array" and key not in DEFAULT_MANAGER_KEYS]
    results, ns = measure(kit, DEVICE_STATEMENTS, args.repeat, args.min_time, keys)
    verify_devmem_view(ns)
    before = devmem.pool_statistics()
    pooled, _ = measure(kit, DEVICE_STATEMENTS, args.repeat, args.min_time, ["device_array"])
    after = devmem.pool_statistics()
    results.update(pooled)
    results.update(unpooled)
    hits = after["hits"] - before["hits"]
    misses = after["misses"] - before["misses"]
    # Every timed call allocates and frees one 1 KiB block: after the first, the pool must serve
    # (nearly) all of them from its cache.
    timed_calls = len(pooled["device_array"]["repeats_us"]) * pooled["device_array"]["number"]
    check(hits >= timed_calls, f"pool hits during device_array: {hits}, want >= {timed_calls} "
                               f"(misses {misses})")
    stats = {"hits_during": hits, "misses_during": misses, "after": dict(after)}
    return results, stats


def combine_rounds(per_round):
    """One result per operation from each round's: the median of the rounds' medians."""
    combined = {}
    for key in per_round[0]:
        medians = [r[key]["median_us"] for r in per_round]
        combined[key] = dict(per_round[0][key], median_us=statistics.median(medians),
                             rounds_us=medians)
    return combined


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="few short repeats (a smoke test: results are still checked)")
    parser.add_argument("--json", metavar="FILE", help="also write the raw numbers to FILE")
    parser.add_argument("--only", metavar="IMPL", action="append",
                        choices=IMPLEMENTATIONS + GPU_IMPLEMENTATIONS,
                        help="measure only this implementation (repeatable); default: devmem, "
                             "simulator and numpy; numba-cuda (Numba on a real GPU) only when named")
    parser.add_argument("--repeat", type=int, help="timeit repeats per call (default 7, quick 3)")
    parser.add_argument("--min-time", type=float,
                        help="seconds per repeat (default 0.2, quick 0.005)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="interleaved rounds of every implementation (default 1)")
    parser.add_argument("--child-simulator", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-numba-cuda", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 7
    if args.min_time is None:
        args.min_time = 0.005 if args.quick else 0.2
    if args.repeat < 1 or args.min_time <= 0:
        parser.error(f"--repeat {args.repeat} and --min-time {args.min_time} must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    if args.child_simulator or args.child_numba_cuda:
        return run_numba_child(args)
    selected = tuple(args.only) if args.only else IMPLEMENTATIONS

    devmem = None
    if "devmem" in selected:
        try:
            import devmem
        except ImportError as error:
            print(f"python_overhead: cannot import devmem ({error}); set PYTHONPATH to the "
                  "directory holding the built package, or pass --only numpy --only simulator",
                  file=sys.stderr)
            return 2
    facts = machine_facts(devmem)

    rounds = {name: [] for name in selected}
    pool_stats = None
    default_manager = None if devmem is None else devmem.memory_manager_name()
    try:
        # Interleaved: each round measures every implementation once, so a change of the
        # machine's load during the run reaches all of them; the report takes the median round.
        for _ in range(args.rounds):
            if "simulator" in selected:
                child = numba_results(args, simulator=True)
                rounds["simulator"].append(child["results"])
                facts["numba"] = child["numba_version"]
            if "numba-cuda" in selected and "numba_cuda_error" not in facts:
                try:
                    child = numba_results(args, simulator=False)
                except ChildFailed as error:
                    if error.args[0] == 1:
                        raise  # a wrong result is a failure of the benchmark
                    # Numba's CUDA target cannot run here: the other columns still mean something.
                    facts["numba_cuda_error"] = "numba-cuda could not be run (see stderr)"
                    print("python_overhead: numba-cuda left out: it could not be run here",
                          file=sys.stderr)
                else:
                    rounds["numba-cuda"].append(child["results"])
                    facts["numba"] = child["numba_version"]
            if "numpy" in selected:
                rounds["numpy"].append(
                    measure(NumpyKit(), NUMPY_STATEMENTS, args.repeat, args.min_time)[0])
            if "cupy" in selected:
                import cupy  # pylint: disable=import-outside-toplevel
                rounds["cupy"].append(
                    measure(CupyKit(cupy), CUPY_STATEMENTS, args.repeat, args.min_time)[0])
                facts["cupy"] = cupy.__version__
            if devmem is not None:
                devmem.set_memory_manager(default_manager)
                measured, pool_stats = run_devmem(args, devmem)
                rounds["devmem"].append(measured)
        if devmem is not None:
            facts["devmem_memory_manager"] = devmem.memory_manager_name()
    except WrongResult as error:
        print(f"python_overhead: wrong result: {error}", file=sys.stderr)
        return 1
    except ChildFailed as error:
        return error.args[0] if error.args[0] in (1, 2) else 2
    facts["load_average_end"] = list(os.getloadavg())
    results = {name: combine_rounds(per_round) for name, per_round in rounds.items() if per_round}

    table = rows(results)
    print_report(facts, table, pool_stats)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "command": [sys.executable] + sys.argv,
                    "repeat": args.repeat,
                    "rounds": args.rounds,
                    "min_time_s": args.min_time,
                    "machine": facts,
                    "results": results,
                    "table": table,
                    "devmem_pool": pool_stats,
                },
                handle,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
