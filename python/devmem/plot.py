"""Pictures of devmem's traces and benchmarks, with matplotlib.

    python3 -m devmem.plot trace FILE -o memory.png
        device memory in use over time (one line per device) from a trace written with
        DEVMEM_TRACE=FILE or `with devmem.trace(FILE):`, with flushes, synchronizations and
        copies marked (docs/trace.md)
    python3 -m devmem.plot bench BENCH.json -o bench.png
        bandwidth against transfer size for each direction and memory kind from
        `devmem bench --json=BENCH.json`, devmem beside the raw vendor call, and their ratio

Exit status: 0 written, 1 the input could not be read or holds nothing to draw, 2 usage error.
The functions plot_trace and plot_bench do the same from Python and return the figure.
"""

import argparse
import json
import sys


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or used
    import matplotlib.pyplot as plt

    return plt


class PlotError(ValueError):
    """The input holds nothing that can be drawn (the message says what is missing)."""


def _read_json(path):
    try:
        if str(path).endswith(".gz"):  # a committed trace, kept compressed
            import gzip

            with gzip.open(path, "rt") as f:
                return json.load(f)
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}") from e
    except (json.JSONDecodeError, EOFError, UnicodeDecodeError) as e:
        raise PlotError(f"{path} is not JSON: {e}") from e


def plot_trace(path):
    """Device memory in use over time, from a devmem trace file; returns the figure."""
    events = _read_json(path)
    if not isinstance(events, list):
        raise PlotError(f"{path} is not a devmem trace (a JSON array of trace events)")
    series = {}
    marks = {"flush": [], "sync": [], "copy": []}
    for e in events:
        category = e.get("cat")
        if category == "counter" and e.get("name", "").endswith(" memory"):
            series.setdefault(e["name"], []).append((e["ts"] / 1e6, e["args"]["in use"]))
        elif category in marks:
            marks[category].append(e["ts"] / 1e6)
    if not series:
        raise PlotError(f"{path} has no device memory counter: nothing was allocated while tracing")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    top = 0
    for name, points in sorted(series.items()):
        times = [t for t, _ in points]
        mib = [b / 2**20 for _, b in points]
        ax.step(times, mib, where="post", label=name.replace(" memory", ""))
        top = max(top, max(mib))
    styles = {"flush": ("tab:red", "deferred-free flush"),
              "sync": ("tab:gray", "synchronize"),
              "copy": ("tab:green", "copy")}
    # One row of ticks per kind of event, below the memory line.
    for row, (category, times) in enumerate(marks.items(), start=1):
        if not times:
            continue
        color, label = styles[category]
        ax.plot(times, [-0.05 * row * max(top, 1e-9)] * len(times), "|", color=color,
                markersize=8, label=f"{label} ({len(times)})")
    ax.set_xlabel("time from the trace's start (s)")
    ax.set_ylabel("device memory in use (MiB)")
    ax.set_title(f"devmem trace: {path}")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def plot_bench(path):
    """Bandwidth against size per direction and memory kind, devmem and the raw call, from
    `devmem bench --json`; returns the figure."""
    bench = _read_json(path)
    copies = bench.get("copies") if isinstance(bench, dict) else None
    if not copies:
        raise PlotError(f"{path} has no 'copies' rows: not the output of devmem bench --json")
    directions = sorted({row["direction"] for row in copies})
    plt = _pyplot()
    fig, axes = plt.subplots(2, len(directions), figsize=(4.2 * len(directions), 6.5),
                             sharex=True, squeeze=False)
    for column, direction in enumerate(directions):
        bandwidth, ratio = axes[0][column], axes[1][column]
        rows = [r for r in copies if r["direction"] == direction]
        for kind in sorted({r["memory"] for r in rows}):
            points = sorted((r["bytes"], r["devmem_gbps"], r["raw_gbps"], r["ratio"])
                            for r in rows if r["memory"] == kind)
            sizes = [p[0] for p in points]
            line, = bandwidth.plot(sizes, [p[1] for p in points], "o-", markersize=3,
                                   label=f"{kind}: devmem")
            bandwidth.plot(sizes, [p[2] for p in points], "--", color=line.get_color(),
                           label=f"{kind}: raw")
            ratio.plot(sizes, [p[3] for p in points], "o-", markersize=3, color=line.get_color(),
                       label=kind)
        bandwidth.set_title(direction)
        bandwidth.set_xscale("log", base=2)
        bandwidth.set_yscale("log")
        bandwidth.grid(True, alpha=0.3)
        ratio.axhline(1.0, color="black", linewidth=0.8)
        ratio.set_xscale("log", base=2)
        ratio.set_xlabel("transfer size (bytes)")
        ratio.grid(True, alpha=0.3)
        if column == 0:
            bandwidth.set_ylabel("GB/s")
            ratio.set_ylabel("devmem / raw")
        bandwidth.legend(fontsize="x-small")
    device = bench.get("device", "?")
    backend = bench.get("backend", "?")
    fig.suptitle(f"devmem bench: {backend} backend, {device} ({bench.get('date', '')})")
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m devmem.plot",
                                     description="Pictures of devmem traces and benchmarks.")
    parser.add_argument("what", choices=["trace", "bench"],
                        help="trace: memory over time from a trace file; bench: bandwidth "
                             "against size from devmem bench --json")
    parser.add_argument("input", help="the trace file or the bench JSON file")
    parser.add_argument("-o", "--output", required=True, help="the picture to write (.png, .svg, "
                                                              ".pdf)")
    args = parser.parse_args(argv)
    try:
        figure = (plot_trace if args.what == "trace" else plot_bench)(args.input)
        figure.savefig(args.output, dpi=120)
    except PlotError as e:
        print(f"devmem.plot {args.what}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"devmem.plot {args.what}: cannot write {args.output}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"devmem.plot {args.what}: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
