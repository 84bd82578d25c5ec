"""The memory timeline (docs/trace.md): `with devmem.trace(path):` and DEVMEM_TRACE write a Chrome
trace-event file; the json module reads it whole, as Perfetto would."""

import json

import numpy as np
import pytest

import devmem
from conftest import run_python


def _events(path):
    with open(path) as f:
        return json.load(f)


def test_trace_block_records_allocations_copies_syncs_and_frees(tmp_path):
    path = tmp_path / "run.json"
    host = np.arange(1024, dtype=np.float64)
    devmem.flush_deallocations()  # what earlier tests left queued is freed before the trace
    with devmem.trace(path) as t:
        assert devmem.tracing()
        d = devmem.to_device(host)
        np.testing.assert_array_equal(d.copy_to_host(), host)
        devmem.synchronize()
        del d
        devmem.flush_deallocations()
    assert not devmem.tracing()
    assert t.events > 0
    events = _events(path)
    assert events[0]["name"] == "process_name"
    assert events[-1]["name"] == "trace end"
    by_cat = {}
    for e in events:
        by_cat.setdefault(e.get("cat"), []).append(e)
    (alloc,) = by_cat["alloc"]
    assert alloc["args"]["bytes"] == host.nbytes
    assert alloc["args"]["operation"] == "to_device"
    directions = sorted(e["args"]["direction"] for e in by_cat["copy"])
    assert directions == ["d2h", "h2d"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in by_cat["copy"])
    assert by_cat["sync"]
    (free,) = [e for e in by_cat["free"] if e["args"]["address"] == alloc["args"]["address"]]
    assert free["args"]["bytes"] == host.nbytes
    assert free["args"]["deferred us"] >= 0
    memory = [e for e in by_cat["counter"] if e["name"].endswith(" memory")]
    assert max(e["args"]["in use"] for e in memory) >= host.nbytes

    summary = devmem.summarize_trace(str(path))
    assert summary["transfers"]["h2d"]["bytes"] == host.nbytes
    assert summary["transfers"]["d2h"]["bytes"] == host.nbytes
    assert summary["peaks"][0]["peak_bytes"] >= host.nbytes
    assert summary["longest_deferred"][0]["bytes"] == host.nbytes


def test_call_sites_name_the_extension_module_only_when_asked(tmp_path):
    plain, with_sites = tmp_path / "plain.json", tmp_path / "sites.json"
    with devmem.trace(plain):
        d = devmem.device_array(100)
        del d
    with devmem.trace(with_sites, call_sites=True) as t:
        assert t.call_sites
        d = devmem.device_array(100)
        del d
    (alloc,) = [e for e in _events(plain) if e.get("cat") == "alloc"]
    assert alloc["args"]["site"] == ""
    (alloc,) = [e for e in _events(with_sites) if e.get("cat") == "alloc"]
    # The first caller outside libdevmem is devmem's extension module (docs/trace.md).
    assert "_devmem" in alloc["args"]["site"] and "+0x" in alloc["args"]["site"]
    (site,) = devmem.summarize_trace(str(with_sites))["top_sites"]
    assert site["call_site"] == alloc["args"]["site"]
    devmem.flush_deallocations()


def test_one_trace_at_a_time_and_bad_paths(tmp_path):
    first = tmp_path / "a.json"
    with devmem.trace(first):
        with pytest.raises(devmem.InvalidArgument, match="a trace is already being written to"):
            with devmem.trace(tmp_path / "b.json"):
                pass
    with pytest.raises(devmem.Error, match="cannot create '/nonexistent/dir/t.json'"):
        with devmem.trace("/nonexistent/dir/t.json"):
            pass
    assert not devmem.tracing()
    with pytest.raises(devmem.Error, match="not a trace devmem wrote"):
        devmem.summarize_trace(__file__)


def test_devmem_trace_environment_variable_traces_the_whole_process(tmp_path):
    path = tmp_path / "env.json"
    result = run_python(
        "import numpy as np, devmem\n"
        "d = devmem.to_device(np.ones(256))\n"
        "print(devmem.tracing())\n",
        env={"DEVMEM_TRACE": str(path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    events = _events(path)  # completed at exit
    assert events[-1]["name"] == "trace end"
    assert any(e.get("cat") == "alloc" and e["args"]["bytes"] == 2048 for e in events)
