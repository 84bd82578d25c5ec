"""python3 -m devmem.plot (docs/trace.md): pictures of a trace and of a bench run, with matplotlib
(Debian's python3-matplotlib; the PyPI stack pins it in requirements-numpy2.txt)."""

import json
import subprocess
import sys

import numpy as np
import pytest

import devmem

plot = pytest.importorskip("devmem.plot")
pytest.importorskip("matplotlib", reason="matplotlib is not installed (install-deps.sh --python)")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "devmem.plot", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_trace_picture_of_a_traced_block(tmp_path):
    trace = tmp_path / "run.json"
    with devmem.trace(trace):
        arrays = [devmem.to_device(np.ones(1 << k)) for k in range(8, 14)]
        devmem.synchronize()
        del arrays
        devmem.flush_deallocations()
    figure = plot.plot_trace(str(trace))
    (axes,) = figure.axes
    lines = [line for line in axes.get_lines() if line.get_label().startswith("device")]
    assert len(lines) == 1
    # The step line reaches the sum of the six arrays (8 bytes per float64 element).
    assert max(lines[0].get_ydata()) == pytest.approx(sum(8 << k for k in range(8, 14)) / 2**20)
    out = tmp_path / "memory.png"
    result = _run("trace", str(trace), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_bench_picture_has_a_column_per_direction(tmp_path):
    rows = [{"direction": d, "memory": m, "bytes": b, "devmem_gbps": b / 1e6,
             "raw_gbps": b / 0.9e6, "ratio": 0.9}
            for d in ("h2d", "d2h") for m in ("pinned", "pageable") for b in (4, 4096, 1 << 20)]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"backend": "host", "device": "test", "copies": rows}))
    figure = plot.plot_bench(str(bench))
    assert [ax.get_title() for ax in figure.axes[:2]] == ["d2h", "h2d"]
    out = tmp_path / "bench.png"
    result = _run("bench", str(bench), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_bad_inputs_exit_1_with_a_message(tmp_path):
    missing = tmp_path / "missing.json"
    result = _run("trace", str(missing), "-o", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert "cannot read" in result.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    result = _run("trace", str(empty), "-o", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert "no device memory counter" in result.stderr
    result = _run("bench", str(empty), "-o", str(tmp_path / "x.png"))
    assert result.returncode == 1
    assert "no 'copies' rows" in result.stderr
    assert _run("sideways", str(empty), "-o", "x.png").returncode == 2
