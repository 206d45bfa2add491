"""Measured-ceiling cache, ncu CSV parsing, and the killable subprocess runner (no GPU)."""
import json
import time

import pytest

from cutile_diag.roofline.device import Quantity, preset
from cutile_diag.roofline.ncu import parse_ncu_csv
from cutile_diag.roofline.peaks import Ceilings, cache_path, get_ceilings, load_cached, save


def _ceil(dev):
    return Ceilings(dev.key, dev.name, Quantity(4.29e12, "B/s", "measured: copy"),
                    {"bf16:tensor": Quantity(7.7e14, "FLOP/s", "measured: gemm")}, measured_at="2026-12-02T00:00:00+00:00")


def test_cache_roundtrip_per_device_and_driver(cache_dir, monkeypatch):
    dev = preset("h200")
    dev.kind, dev.uuid, dev.driver_version = "live", "GPU-1", "580.159"
    assert load_cached(dev) is None
    p = save(_ceil(dev))
    assert p == cache_path() and p.parent == cache_dir
    c = load_cached(dev)
    assert c.cached and c.dram_bw.value == 4.29e12 and c.flops["bf16:tensor"].value == 7.7e14
    assert get_ceilings(dev, measure_if_missing=False).dram_bw.value == 4.29e12   # served from the cache, no GPU needed
    # an entry cached before the size curve existed gets its curve (and only that) measured once, then kept
    from cutile_diag.roofline import peaks
    from cutile_diag.roofline.curve import BandwidthCurve
    measured = []
    monkeypatch.setattr(peaks, "measure_curve", lambda d: measured.append(d) or BandwidthCurve([1e6], {}, 1e-3))
    assert get_ceilings(dev).curve.floor_ms == 1e-3 and len(measured) == 1
    assert load_cached(dev).curve.floor_ms == 1e-3 and get_ceilings(dev).dram_bw.value == 4.29e12
    assert len(measured) == 1
    other = preset("h200")
    other.kind, other.uuid, other.driver_version = "live", "GPU-1", "590.01"     # new driver: re-measure
    assert load_cached(other) is None
    assert get_ceilings(other, measure_if_missing=False) is None
    assert get_ceilings(preset("h200")) is None                  # presets never have measured ceilings


def test_corrupt_cache_is_ignored(cache_dir):
    cache_dir.mkdir(parents=True)
    cache_path().write_text("{not json")
    dev = preset("h100")
    dev.kind = "live"
    assert load_cached(dev) is None
    save(_ceil(dev))
    assert json.loads(cache_path().read_text())["schema"] == "cutile-diag.peaks/1"


RAW = '''==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread","smsp__sass_inst_executed_op_local_ld.sum","smsp__sass_inst_executed_op_local_st.sum"
"","","","","","","","","","","","byte","byte","nsecond","%","%","%","register/thread","inst","inst"
"0","123","python","h","matmul_Kt2_A2f16","1","7","(256, 1, 1)","(32, 32, 1)","0","9.0","100,663,296","33,554,432","215,500","61.2","45.3","12.4","255","0","0"
"1","123","python","h","softmax_Kt2","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","1,000","2,000","1,500","5.0","80.0","50.0","64","12","4"
'''

DETAILS = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","vector_add","1","7","(128, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","134.22"
"0","1","python","h","vector_add","1","7","(128, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_write.sum","Mbyte","67.11"
"0","1","python","h","vector_add","1","7","(128, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","52.5"
'''


def test_parse_ncu_raw_page():
    ks = parse_ncu_csv(RAW)
    assert [k.name for k in ks] == ["matmul_Kt2_A2f16", "softmax_Kt2"]
    m = ks[0]
    assert m.dram_read_bytes == 100663296 and m.dram_bytes == 100663296 + 33554432
    assert m.duration_ns == 215500 and m.sm_throughput_pct == 61.2 and m.memory_throughput_pct == 45.3
    assert m.achieved_occupancy_pct == 12.4 and m.registers_per_thread == 255 and m.spills is False
    assert ks[1].spills is True


def test_parse_ncu_details_page_with_scaled_units():
    (k,) = parse_ncu_csv(DETAILS)
    assert k.name == "vector_add"
    assert k.dram_read_bytes == pytest.approx(134.22e6) and k.dram_write_bytes == pytest.approx(67.11e6)
    assert k.duration_ns == pytest.approx(52500)
    assert k.spills is None


def test_parse_ncu_nothing():
    assert parse_ncu_csv("==PROF== No kernels were profiled.\n") == []


# -- the subprocess runner ------------------------------------------------------------------

def test_run_isolated_returns_the_value(tmp_path):
    from cutile_diag.measure.isolated import run_isolated
    f = tmp_path / "fns.py"
    f.write_text("def add(a, b):\n    return {'sum': a + b}\n\ndef boom():\n    raise RuntimeError('kernel exploded')\n")
    assert run_isolated(f"{f}::add", {"a": 2, "b": 3}, timeout_s=60) == {"sum": 5}
    from cutile_diag.measure.isolated import IsolatedError
    with pytest.raises(IsolatedError, match="kernel exploded"):
        run_isolated(f"{f}::boom", timeout_s=60)
    with pytest.raises(IsolatedError, match="no callable named 'nope'"):
        run_isolated(f"{f}::nope", timeout_s=60)


def test_run_isolated_kills_a_hang(tmp_path):
    from cutile_diag.measure.isolated import IsolatedTimeout, run_isolated
    f = tmp_path / "hang.py"
    f.write_text("import time, subprocess, sys\n"
                 "def hang():\n"
                 "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                 "    time.sleep(600)\n")
    t0 = time.perf_counter()
    with pytest.raises(IsolatedTimeout, match="killed after 3 s"):
        run_isolated(f"{f}::hang", timeout_s=3)
    assert time.perf_counter() - t0 < 30


def test_measure_isolated_without_gpu_reports_no_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    from cutile_diag.measure.isolated import measure_isolated
    r = measure_isolated("examples:vector_add", "1M-f32", timeout_s=120)
    assert r.status == "no_gpu" and "offline" in r.error and r.stats is None


def test_measure_isolated_bad_workload_is_an_error_result():
    from cutile_diag.measure.isolated import measure_isolated
    r = measure_isolated("examples:nope", "x", timeout_s=120)
    assert r.status == "error" and "unknown workload" in r.error
    r = measure_isolated("examples:vector_add", "no-such-config", timeout_s=120)
    assert r.status == "error" and "no configuration" in r.error


def test_measure_result_json_roundtrip():
    from cutile_diag.measure.isolated import MeasureResult
    from cutile_diag.harness.stats import summarize
    r = MeasureResult("w", "c", "ok", stats=summarize([1.0, 1.1]))
    back = MeasureResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back.ok and back.median_ms == pytest.approx(1.05) and back.stats == r.stats


def test_recorded_h200_ceilings_are_the_committed_measurement():
    from pathlib import Path
    from cutile_diag.roofline.device import preset
    from cutile_diag.roofline.peaks import RECORDED_CEILINGS, recorded_ceilings
    committed = json.loads((Path(__file__).parents[2] / "bench/results/optimize-h200/peaks.json").read_text())
    c = committed["ceilings"]
    rec = RECORDED_CEILINGS["NVIDIA H200"]
    assert rec.dram_bw.value == c["dram_bw"]["value"] and rec.measured_at == c["measured_at"]
    assert {k: q.value for k, q in rec.flops.items()} == {k: q["value"] for k, q in c["flops"].items()}
    assert committed["device"]["driver_version"] in rec.dram_bw.source
    # handed out as a copy: a caller's edit does not leak into the next preset
    got = recorded_ceilings(preset("h200"))
    got.flops.clear()
    assert recorded_ceilings(preset("h200")).flops


def test_one_ncu_runner_reports_permission_and_timeouts(tmp_path):
    """Both profiling paths run ncu through one function: its failures read the same."""
    import sys

    from cutile_diag.roofline.ncu import _ncu_process
    out, text, err, rc = _ncu_process([sys.executable, "-c", "print('==ERROR== ERR_NVGPUCTRPERM')"], 30)
    assert err and err.startswith("ncu has no permission for GPU performance counters")
    out, text, err, rc = _ncu_process([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert err == "ncu killed after 0.5 s" and rc is None
    out, text, err, rc = _ncu_process([sys.executable, "-c", "print('a,b'); raise SystemExit(3)"], 30)
    assert err is None and out.strip() == "a,b" and rc == 3
